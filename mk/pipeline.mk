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
# Class data sharing for the driver JVM (issue 28): a report maps an archive of the classes
# a report loads (-XX:SharedArchiveFile) instead of loading and verifying ~20,000 classes
# again: measured in docs/benchmarks.md. The file name keys on the JDK and Spark's jars; the
# JVM checks the archive itself and ignores one that does not fit. PIPELINE_CDS= turns it off.
# The archive is recorded by `make cds` (a report of a 12-event synthetic log with
# -XX:ArchiveClassesAtExit: writing ~190 MB at exit took 1-4 minutes on a loaded machine),
# never by a user's report (issue 44: that made the first `make report` on a machine 127-260 s):
# `make test` records it in its setup, `make run` and `make demo` in the background (niced)
# while the stack runs; a report without it runs without it (a few seconds slower) and says so.
PIPELINE_CDS ?= var/cds
_CDS_KEY = $(shell java=$$(readlink -f "$$(command -v $${JAVA_HOME:+$$JAVA_HOME/bin/}java)"); \
	jars=$$(echo $(abspath $(VENV))/lib/python*/site-packages/pyspark/jars); \
	{ echo "$$java $$jars"; ls -lL --time-style=+%s "$${java%/bin/java}/lib/modules" "$$jars"; } \
	2>/dev/null | md5sum | cut -c1-12)
PIPELINE_CDS_ARCHIVE = $(PIPELINE_CDS)/driver-$(_CDS_KEY).jsa
# set by `make cds` only: this report records the archive
PIPELINE_CDS_DUMP ?=
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

.PHONY: report cds cds-background bench-pipeline pipeline-zip

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
		arch='$(PIPELINE_CDS_ARCHIVE)'; \
		if [ -f "$$arch" ]; then cds="-XX:SharedArchiveFile=$$arch -Xlog:cds*=off"; \
		elif [ -n "$(PIPELINE_CDS_DUMP)" ]; then \
			mkdir -p $(PIPELINE_CDS); tmp=$$arch.$$$$.tmp; \
			cds="-XX:ArchiveClassesAtExit=$$tmp -Xlog:cds*=off"; \
		elif flock -n $(PIPELINE_CDS)/build.lock true 2>/dev/null || [ ! -e $(PIPELINE_CDS)/build.lock ]; then \
			echo "note: no class archive for the report's JVM yet: this report starts without it (a few seconds slower); 'make cds' records it once (about a minute)"; \
		else echo "note: the report's class archive is still being recorded in the background ($(PIPELINE_CDS)/build.log): this report starts without it (a few seconds slower)"; \
		fi; \
	fi; \
	echo "spark-submit pipeline/main.py --events $(EVENTS) --out $(REPORT_OUT) $(ARGS)"; \
	tick=; if [ -n "$$tmp" ]; then \
		( n=0; while sleep 20; do n=$$((n + 20)); \
			echo "note: still running after $$n s (recording the JVM's classes; a few minutes at most)"; \
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

# The class archive (see PIPELINE_CDS above), recorded once per machine and JDK/Spark: a
# report of a 12-event synthetic log (mq_pipeline.synth, as the bench's demo size) with
# -XX:ArchiveClassesAtExit. One build at a time (flock); nothing to do when it exists.
CDS_TRAIN := $(PIPELINE_CDS)/train
# make's own path under another name: `make -n` prints these sub-makes instead of running them
CDS_MAKE := $(MAKE)
cds: $(STAMP)  ## record the report JVM's class archive (once per machine, ~1 min; make test/run/demo do it)
	@arch='$(PIPELINE_CDS_ARCHIVE)'; \
	if [ -z "$(PIPELINE_CDS)" ] || [ -f "$$arch" ]; then exit 0; fi; \
	mkdir -p $(PIPELINE_CDS); \
	exec 9>$(PIPELINE_CDS)/build.lock; flock 9; \
	if [ -f "$$arch" ]; then exit 0; fi; \
	echo "cds: recording the report JVM's classes in $$arch (a report of a 12-event synthetic log; once, about a minute)"; \
	rm -rf $(CDS_TRAIN); \
	$(PIPELINE_ENV) $(PY) -m mq_pipeline.synth --events 12 --hours 1 --domains 3 --shards 1 \
		--seed 7 --processes 1 --out $(CDS_TRAIN) >/dev/null && \
	$(CDS_MAKE) --no-print-directory report EVENTS=$(CDS_TRAIN)/events REPORT_OUT=$(CDS_TRAIN)/report \
		ARGS='--date 2026-05-04' PIPELINE_CDS_DUMP=1 > $(CDS_TRAIN).log 2>&1 \
	|| { echo "cds: the recording report failed (see $(CDS_TRAIN).log); reports run without the archive"; exit 1; }; \
	test -f "$$arch" && echo "cds: done ($$(du -m "$$arch" | cut -f1) MB)"

# `make run` and `make demo` start `make cds` in the background (nice 19) while the stack runs,
# so the first `make report` after them finds the archive; `make test` records it first.
cds-background: $(STAMP)  ## start make cds in the background if the class archive is missing (make run/demo do)
	@arch='$(PIPELINE_CDS_ARCHIVE)'; \
	if [ -n "$(PIPELINE_CDS)" ] && [ ! -f "$$arch" ]; then mkdir -p $(PIPELINE_CDS); \
		if flock -n $(PIPELINE_CDS)/build.lock true; then \
			echo "note: recording the report JVM's class archive in the background (niced; log: $(PIPELINE_CDS)/build.log), so the first make report starts fast"; \
			nohup nice -n 19 $(CDS_MAKE) --no-print-directory cds > $(PIPELINE_CDS)/build.log 2>&1 < /dev/null & \
		fi; \
	fi

run demo: cds-background
test: cds

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
