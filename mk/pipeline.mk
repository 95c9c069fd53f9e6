# Event analytics (issue 10): the PySpark job over the queue's event log, its HTML report,
# the benchmark and the EMR Serverless bundle. Included by the Makefile, which defines
# PY, VENV and the $(STAMP) that bootstraps the venv.
#
#   make report                         # var/events -> var/report (+ report.html)
#   make report EVENTS=var/demo/events  # -> var/demo/report
#   make report EVENTS=s3a://... ARGS='--date 2026-05-04'
#   make bench-pipeline                 # 1 M / 10 M / 50 M events, see docs/benchmarks.md
#   make pipeline-zip                   # build/pipeline/{main.py,mq_pipeline.zip} for EMR

EVENTS ?= var/events
# The report goes beside its log: var/events -> var/report, the demo's var/demo/events ->
# var/demo/report (issue 44: a demo's report no longer overwrites make run's); any other
# log (S3, a folder not named events) -> var/report.
REPORT_OUT ?= $(if $(findstring ://,$(EVENTS)),var/report,$(if $(filter %/events,$(EVENTS)),$(patsubst %/events,%/report,$(EVENTS)),var/report))
ARGS ?=
BENCH_ARGS ?=
PIPELINE_DRIVER_MEMORY ?= 4g
# JVM options: big inputs get the server JIT and the parallel collector (what the benchmark
# runs with); a local log below PIPELINE_SMALL_BYTES gets a short-lived JVM's options (C1
# only, serial GC, one compiler thread: what is queued but never reached is not compiled),
# which halves a small report's time: measured in docs/benchmarks.md.
PIPELINE_JAVA_OPTS_BIG ?= -XX:+UseParallelGC
# Also for a small log: py4j calls the JVM's methods by reflection, and after 15 calls of
# a method the JDK generates a bytecode accessor class for it (~550 in a demo report), each
# defined and verified at run time; a short job is faster calling them natively (JDK 17;
# newer JDKs ignore the property). Measured in docs/benchmarks.md, "Report speed".
PIPELINE_JAVA_OPTS_SMALL ?= -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:CICompilerCount=1 \
	-Dsun.reflect.inflationThreshold=2147483647
PIPELINE_SMALL_BYTES ?= 268435456
PIPELINE_JAVA_OPTS ?=
# Class data sharing for the driver JVM (issue 28): the first small report on a machine has
# the JVM write the classes it loaded to an archive (-XX:ArchiveClassesAtExit; that run is
# slower), later runs map it instead of loading and verifying ~20,000 classes again
# (-XX:SharedArchiveFile): measured in docs/benchmarks.md. The file name keys on the JDK
# and Spark's jars; the JVM checks the archive itself and ignores one that does not fit.
# PIPELINE_CDS= turns it off.
PIPELINE_CDS ?= var/cds
PIPELINE_BUILD := build/pipeline
# Quiet by default: WARN and up, minus known-harmless warnings (pipeline/conf); no UI, no
# progress bars. The job prints one line per step. SPARK_LOG=info for Spark's own log.
PIPELINE_LOG4J := $(abspath pipeline/conf/log4j2.properties)
# Local paths through Hadoop's raw local file system: the default one adds a .crc file
# beside every file written, and without Hadoop's native library each file and directory
# created costs a forked `chmod` (~100 in a demo report). S3 paths are not affected.
PIPELINE_CONF := --conf spark.ui.enabled=false --conf spark.ui.showConsoleProgress=false \
	--conf spark.hadoop.fs.file.impl=org.apache.hadoop.fs.RawLocalFileSystem

# spark-submit finds Spark through the venv's python; the job binds to loopback only.
PIPELINE_ENV := PYSPARK_PYTHON=$(abspath $(PY)) PYSPARK_DRIVER_PYTHON=$(abspath $(PY)) \
	SPARK_LOCAL_IP=127.0.0.1 PYTHONPATH=pipeline

.PHONY: report bench-pipeline pipeline-zip

report: $(STAMP)  ## Spark report over var/events (EVENTS=var/demo/events after make demo)
	@case "$(EVENTS)" in *://*) ;; *) test -d "$(EVENTS)" || \
		echo "note: $(EVENTS) does not exist yet (run the local stack first): empty report";; esac
	@opts='$(PIPELINE_JAVA_OPTS)'; \
	if [ -z "$$opts" ]; then \
		case "$(EVENTS)" in *://*) size=$(PIPELINE_SMALL_BYTES);; \
			*) size=$$(du -sb "$(EVENTS)" 2>/dev/null | cut -f1);; esac; \
		if [ "$${size:-0}" -lt $(PIPELINE_SMALL_BYTES) ]; then opts='$(PIPELINE_JAVA_OPTS_SMALL)'; \
		else opts='$(PIPELINE_JAVA_OPTS_BIG)'; fi; \
	fi; \
	log=-Dlog4j2.configurationFile=file:$(PIPELINE_LOG4J); \
	if [ -n "$$SPARK_LOG" ]; then log=; fi; \
	cds=; arch=; tmp=; \
	if [ -n "$(PIPELINE_CDS)" ]; then \
		java=$$(readlink -f "$$(command -v $${JAVA_HOME:+$$JAVA_HOME/bin/}java)"); \
		jars=$$(echo $(abspath $(VENV))/lib/python*/site-packages/pyspark/jars); \
		key=$$( { echo "$$java $$jars"; ls -lL --time-style=+%s "$${java%/bin/java}/lib/modules" "$$jars"; } \
			2>/dev/null | md5sum | cut -c1-12); \
		arch=$(PIPELINE_CDS)/driver-$$key.jsa; \
		if [ -f "$$arch" ]; then cds="-XX:SharedArchiveFile=$$arch -Xlog:cds*=off"; \
		elif [ "$$opts" = '$(PIPELINE_JAVA_OPTS_SMALL)' ]; then \
			mkdir -p $(PIPELINE_CDS); tmp=$$arch.$$$$.tmp; \
			cds="-XX:ArchiveClassesAtExit=$$tmp -Xlog:cds*=off"; \
			echo "note: first report on this machine: the JVM records its classes in $$arch for the next runs (once; this run is slower)"; \
		fi; \
	fi; \
	echo "spark-submit pipeline/main.py --events $(EVENTS) --out $(REPORT_OUT) $(ARGS)"; \
	tick=; if [ -n "$$tmp" ]; then \
		( n=0; while sleep 20; do n=$$((n + 20)); \
			echo "note: still running after $$n s (the first report records the JVM's classes; a few minutes at most)"; \
		done ) & tick=$$!; fi; \
	$(PIPELINE_ENV) $(VENV)/bin/spark-submit --master 'local[*]' $(PIPELINE_CONF) \
		--driver-memory $(PIPELINE_DRIVER_MEMORY) --driver-java-options "$$opts $$cds $$log" \
		pipeline/main.py --events $(EVENTS) --out $(REPORT_OUT) $(ARGS); \
	rc=$$?; \
	if [ -n "$$tick" ]; then kill $$tick 2>/dev/null; fi; \
	if [ -n "$$tmp" ]; then if [ $$rc = 0 ] && [ -s "$$tmp" ]; then mv -f "$$tmp" "$$arch"; \
		else rm -f "$$tmp"; fi; fi; \
	exit $$rc
	@$(PIPELINE_ENV) $(PY) -m mq_pipeline.render $(REPORT_OUT)

bench-pipeline: $(STAMP)  ## the Spark pipeline at 1 M / 10 M / 50 M events
	$(PIPELINE_ENV) $(PY) -m mq_pipeline.bench $(BENCH_ARGS)

pipeline-zip: $(STAMP)  ## build/pipeline/{main.py,mq_pipeline.zip} for EMR Serverless
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
test-emr-spark: $(EMR_SPARK)/.installed  ## the pipeline tests on EMR's PySpark version
	PYTHONPATH=$(abspath $(EMR_SPARK)) $(PY) -c 'import pyspark, sys; v = pyspark.__version__; print("PySpark", v); sys.exit(v != "$(EMR_SPARK_VERSION)")'
	PYSPARK_PYTHON=$(abspath $(PY)) PYSPARK_DRIVER_PYTHON=$(abspath $(PY)) \
		PYTHONPATH=$(abspath $(EMR_SPARK)) $(PY) -m pytest -q -p no:cacheprovider tests/pipeline
