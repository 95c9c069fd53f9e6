# Event analytics (issue 10): the PySpark job over the queue's event log, its HTML report,
# the benchmark and the EMR Serverless bundle. Included by the Makefile, which defines
# PY, VENV and the $(STAMP) that bootstraps the venv.
#
#   make report                         # var/events -> var/report (+ report.html)
#   make report EVENTS=s3a://... ARGS='--date 2026-05-04'
#   make bench-pipeline                 # 1 M / 10 M / 50 M events, see docs/benchmarks.md
#   make pipeline-zip                   # build/pipeline/{main.py,mq_pipeline.zip} for EMR

EVENTS ?= var/events
REPORT_OUT ?= var/report
ARGS ?=
BENCH_ARGS ?=
PIPELINE_DRIVER_MEMORY ?= 4g
PIPELINE_JAVA_OPTS ?= -XX:+UseParallelGC
PIPELINE_BUILD := build/pipeline

# spark-submit finds Spark through the venv's python; the job binds to loopback only.
PIPELINE_ENV := PYSPARK_PYTHON=$(abspath $(PY)) PYSPARK_DRIVER_PYTHON=$(abspath $(PY)) \
	SPARK_LOCAL_IP=127.0.0.1 PYTHONPATH=pipeline

.PHONY: report bench-pipeline pipeline-zip

report: $(STAMP)
	@case "$(EVENTS)" in *://*) ;; *) test -d "$(EVENTS)" || \
		echo "note: $(EVENTS) does not exist yet (run the local stack first): empty report";; esac
	$(PIPELINE_ENV) $(VENV)/bin/spark-submit --master 'local[*]' \
		--driver-memory $(PIPELINE_DRIVER_MEMORY) --driver-java-options '$(PIPELINE_JAVA_OPTS)' \
		pipeline/main.py --events $(EVENTS) --out $(REPORT_OUT) $(ARGS)
	$(PIPELINE_ENV) $(PY) -m mq_pipeline.render $(REPORT_OUT)

bench-pipeline: $(STAMP)
	$(PIPELINE_ENV) $(PY) -m mq_pipeline.bench $(BENCH_ARGS)

pipeline-zip: $(STAMP)
	$(PIPELINE_ENV) $(PY) -m mq_pipeline.bundle $(PIPELINE_BUILD)

# The daily job runs on EMR Serverless emr-spark-8.0.0, i.e. Spark 4.0.2 (template.yaml's
# EmrReleaseLabel); the venv has a newer PySpark. `make test` runs the pipeline tests on
# that version as well, so a newer-only API cannot slip into the job.
EMR_SPARK_VERSION := 4.0.2
EMR_SPARK := var/pyspark-$(EMR_SPARK_VERSION)

$(EMR_SPARK)/.installed: $(STAMP)
	rm -rf $(EMR_SPARK)
	$(PY) -m pip install -q --no-deps --target $(EMR_SPARK) pyspark==$(EMR_SPARK_VERSION)
	@touch $@

.PHONY: test-emr-spark
test-emr-spark: $(EMR_SPARK)/.installed
	PYTHONPATH=$(abspath $(EMR_SPARK)) $(PY) -c 'import pyspark, sys; v = pyspark.__version__; print("PySpark", v); sys.exit(v != "$(EMR_SPARK_VERSION)")'
	PYSPARK_PYTHON=$(abspath $(PY)) PYSPARK_DRIVER_PYTHON=$(abspath $(PY)) \
		PYTHONPATH=$(abspath $(EMR_SPARK)) $(PY) -m pytest -q -p no:cacheprovider tests/pipeline
