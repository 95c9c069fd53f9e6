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
