# Analytics on AWS: upload the PySpark job (pipeline/) for the EMR Serverless schedule
# that template.yaml creates with EnableAnalytics=true. Needs AWS credentials.
#   make pipeline-upload BUCKET=<ContentBucketName>

DIST := var/dist

.PHONY: pipeline-dist pipeline-upload

pipeline-dist: $(STAMP)
	@mkdir -p $(DIST)
	$(PY) -c 'import pathlib, zipfile; root = pathlib.Path("pipeline"); z = zipfile.ZipFile("$(DIST)/mq_pipeline.zip", "w", zipfile.ZIP_DEFLATED); [z.write(p, p.relative_to(root).as_posix()) for p in sorted((root / "mq_pipeline").rglob("*.py"))]; z.close()'
	cp pipeline/main.py $(DIST)/main.py
	@echo "job: $(DIST)/main.py  package: $(DIST)/mq_pipeline.zip"

pipeline-upload: pipeline-dist
	@test -n "$(BUCKET)" || { echo "usage: make pipeline-upload BUCKET=<ContentBucketName>"; exit 2; }
	$(PY) -c 'import sys, boto3; s3 = boto3.client("s3"); [s3.upload_file(f"$(DIST)/{n}", sys.argv[1], f"pipeline/{n}") for n in ("main.py", "mq_pipeline.zip")]; print(f"uploaded to s3://{sys.argv[1]}/pipeline/")' $(BUCKET)
