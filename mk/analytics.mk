# Analytics on AWS: upload the PySpark job (pipeline/) for the EMR Serverless schedule
# that template.yaml creates with EnableAnalytics=true. Needs AWS credentials.
#   make pipeline-upload BUCKET=<ContentBucketName>
# The bundle itself is `make pipeline-zip` (mk/pipeline.mk, mq_pipeline.bundle).

.PHONY: pipeline-upload

pipeline-upload: pipeline-zip  ## upload the PySpark job for EMR Serverless (BUCKET=<ContentBucketName>)
	@test -n "$(BUCKET)" || { echo "usage: make pipeline-upload BUCKET=<ContentBucketName>"; exit 2; }
	$(PY) -c 'import sys, boto3; s3 = boto3.client("s3"); [s3.upload_file(f"$(PIPELINE_BUILD)/{n}", sys.argv[1], f"pipeline/{n}") for n in ("main.py", "mq_pipeline.zip")]; print(f"uploaded to s3://{sys.argv[1]}/pipeline/")' $(BUCKET)
