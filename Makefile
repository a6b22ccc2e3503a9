# Custody: `make demo` sets up and runs the demo pipeline; `make test` sets up and runs every test,
# installing the system packages the tests need when missing (or saying the command to run).
# Every Python package comes from uv.lock (exact versions and hashes); `make lock` refreshes it.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
UV_VERSION := 0.13.9
UV_HOME := .uv
UV := $(UV_HOME)/bin/uv
# uv installs into $(VENV), with the interpreter named by PYTHON, and never downloads one of its own.
export UV_PROJECT_ENVIRONMENT := $(VENV)
export UV_PYTHON := $(PYTHON)
export UV_PYTHON_DOWNLOADS := never
# The installed packages are compiled to bytecode once, at install: otherwise, where
# PYTHONDONTWRITEBYTECODE is set, every process (a test's CLI, Dagster's webserver, daemon, code
# server and run worker) compiles Dagster and PySpark from source again, about 3 s of CPU each.
export UV_COMPILE_BYTECODE := 1
export CUSTODY_HOME ?= $(CURDIR)/.custody
EXTRAS := --extra test --extra postgres --group lint
CHECKED := governance assets resources

.PHONY: setup system-packages demo test lint lock ui dg-ui notebook kafka demo-streams ui-streams clean

$(UV):
	@$(PYTHON) -c 'import sys; sys.exit("Custody needs Python 3.11 or newer, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	$(PYTHON) -m venv $(UV_HOME)
	$(UV_HOME)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

$(BIN)/custody: pyproject.toml uv.lock | $(UV)
	$(UV) sync --quiet --locked $(EXTRAS)
	touch $@

# Spark's own jars (Iceberg's runtime, SQLite's JDBC driver), at the versions deploy/spark-jars/pom.xml
# pins, copied from Maven Central into the virtual environment, where Custody's sessions find them.
JARS := $(VENV)/share/custody/jars

$(JARS)/.copied: deploy/spark-jars/pom.xml | $(BIN)/custody
	@command -v mvn >/dev/null || { echo "Custody fetches Spark's jars with Maven: install it (apt-get install maven)" >&2; exit 1; }
	rm -rf $(JARS)
	mvn -q -B -f deploy/spark-jars/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(JARS)
	touch $@

# OpenLineage's Spark listener, for Spark jobs Custody does not run (the tests run one): kept apart,
# so that Custody's own sessions never load it.
OPENLINEAGE_JARS := $(VENV)/share/custody/openlineage-jars

$(OPENLINEAGE_JARS)/.copied: deploy/openlineage-spark/pom.xml | $(BIN)/custody
	@command -v mvn >/dev/null || { echo "Custody fetches Spark's jars with Maven: install it (apt-get install maven)" >&2; exit 1; }
	rm -rf $(OPENLINEAGE_JARS)
	mvn -q -B -f deploy/openlineage-spark/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(OPENLINEAGE_JARS)
	touch $@

# Apache Kafka's broker, for `make kafka` and the tests: kept apart from Spark's jars, whose Kafka
# client is another release.
KAFKA_JARS := $(VENV)/share/custody/kafka-jars

$(KAFKA_JARS)/.copied: deploy/kafka/pom.xml | $(BIN)/custody
	@command -v mvn >/dev/null || { echo "Custody fetches Kafka's jars with Maven: install it (apt-get install maven)" >&2; exit 1; }
	rm -rf $(KAFKA_JARS)
	mvn -q -B -f deploy/kafka/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=$(CURDIR)/$(KAFKA_JARS)
	touch $@

# The project's own modules are compiled too (an editable install leaves them out): where
# PYTHONDONTWRITEBYTECODE is set, every `custody` command would compile them again, a third of
# `custody --help`. compileall skips what is up to date; a module edited since is compiled in memory.
setup: $(BIN)/custody $(JARS)/.copied $(OPENLINEAGE_JARS)/.copied $(KAFKA_JARS)/.copied
	$(BIN)/python -m compileall -q $(CHECKED)

system-packages:
	PYTHON=$(PYTHON) ./scripts/system-packages

demo: setup
	$(BIN)/custody demo

# Tests run in TEST_WORKERS processes (pytest-xdist): much of a test's time is spent waiting on the
# servers and subprocesses it starts, so two processes keep a two-core machine busy.
TEST_WORKERS ?= 2

test: system-packages
	@$(MAKE) --no-print-directory setup
	$(BIN)/pytest -q --durations=30 --numprocesses $(TEST_WORKERS) --dist loadgroup

# The lock agrees with pyproject.toml; ruff's lint and format check, and mypy, over the shipped code.
lint: system-packages
	@$(MAKE) --no-print-directory setup
	$(UV) lock --check --quiet
	$(BIN)/ruff check $(CHECKED) tests benchmarks
	$(BIN)/ruff format --check $(CHECKED) tests benchmarks
	$(BIN)/mypy $(CHECKED)

# Resolve every dependency again, to the newest versions pyproject.toml allows.
lock: | $(UV)
	$(UV) lock --upgrade

# The Dagster UI behind Custody's login, with Dagster's daemon: one line per refused or failed run;
# VERBOSE=1 shows Dagster's own lines for every run as well. UI_ARGS: more options of `custody serve`,
# such as `--port 3001`. A run's steps write to the console through Dagster's `tail -F` of their
# captured logs, which looks once a second and is stopped when the steps end: VERBOSE=1 lets it look
# for 2 s more, so that a step's last lines (its failure) reach the console: each step ends 2 s later.
ui: setup
	DAGSTER_HOME=$(CUSTODY_HOME)/dagster CUSTODY_VERBOSE=$(if $(VERBOSE),1,0) \
		$(if $(VERBOSE),DAGSTER_COMPUTE_LOG_TAIL_WAIT_AFTER_FINISH=2) $(BIN)/custody serve $(UI_ARGS)

# The same UI served by `dg dev` (Dagster's webserver and daemon, on loopback port DG_PORT), with
# `custody serve --dagster-url` in front of it. The key pair is made once, readable by its owner
# alone; `dg dev` gets only its public half, and the instance's settings are written before it starts.
# `dg dev` runs in the foreground, where Ctrl-C stops it as it expects; the service, in the
# background, stops with it.
DG_PORT ?= 3001
UI_KEYS := $(CUSTODY_HOME)/ui-keys.env
dg-ui: setup
	@mkdir -p "$(CUSTODY_HOME)"
	@test -s "$(UI_KEYS)" || (umask 077; $(BIN)/custody serve --new-ui-keys > "$(UI_KEYS)")
	DAGSTER_HOME=$(CUSTODY_HOME)/dagster $(BIN)/python -m assets.launch
	export DAGSTER_HOME=$(CUSTODY_HOME)/dagster; \
	CUSTODY_UI_SIGNING_KEY=$$(sed -n 's/^CUSTODY_UI_SIGNING_KEY=//p' "$(UI_KEYS)") \
		$(BIN)/custody serve --dagster-url http://127.0.0.1:$(DG_PORT) $(UI_ARGS) & service=$$!; \
	trap 'kill -TERM $$service 2>/dev/null' EXIT INT TERM; \
	CUSTODY_UI_VERIFY_KEY=$$(sed -n 's/^CUSTODY_UI_VERIFY_KEY=//p' "$(UI_KEYS)") \
		$(BIN)/dg dev --host 127.0.0.1 --port $(DG_PORT)

# A single-node Kafka broker on loopback (KRaft, SCRAM-SHA-512, ACLs), its data under
# $(CUSTODY_HOME)/kafka, in the foreground until Ctrl-C. Custody's principal on it is
# CUSTODY_KAFKA_USER; without CUSTODY_KAFKA_PASSWORD, the demo's published one.
KAFKA_PORT ?= 9092
kafka: setup
	CUSTODY_KAFKA_USER=$${CUSTODY_KAFKA_USER:-custody} CUSTODY_KAFKA_PASSWORD=$${CUSTODY_KAFKA_PASSWORD:-custody-demo} \
		$(BIN)/python -m governance.streams.local --port $(KAFKA_PORT) --controller-port $$(( $(KAFKA_PORT) + 1 ))

# The streaming demo, on the broker `make kafka` runs (start it first, in a terminal of its own), in
# a home of its own with the specs of assets/streaming: bob sends clicks to sales.clicks with the
# Kafka password Custody issues him; they land as a version, joined with the product catalogue.
# `make ui-streams` serves that home, its streams sensor landing what bob sends next.
STREAMS_ENV = CUSTODY_HOME=$(CUSTODY_HOME)/streaming CUSTODY_SPECS=$(CURDIR)/assets/streaming \
	CUSTODY_KAFKA_BOOTSTRAP=$${CUSTODY_KAFKA_BOOTSTRAP:-127.0.0.1:$(KAFKA_PORT)} \
	CUSTODY_KAFKA_USER=$${CUSTODY_KAFKA_USER:-custody} CUSTODY_KAFKA_PASSWORD=$${CUSTODY_KAFKA_PASSWORD:-custody-demo} \
	CUSTODY_KAFKA_LANDER_PASSWORD=$${CUSTODY_KAFKA_LANDER_PASSWORD:-svc-custody-demo}
demo-streams: setup
	$(STREAMS_ENV) $(BIN)/custody demo --streams

ui-streams: setup
	$(STREAMS_ENV) $(MAKE) --no-print-directory ui CUSTODY_HOME=$(CUSTODY_HOME)/streaming

$(BIN)/jupyter-lab: $(BIN)/custody
	$(UV) sync --quiet --locked --inexact $(EXTRAS) --extra notebook
	touch $@

# Jupyter refuses to start as root (a container's user, often) unless told it may. The notebook reads
# the ledger as CUSTODY_AUDITOR: on the demo's home (CUSTODY_HOME unset), unless one is named, the
# demo's auditor, with the password the demo publishes.
DEMO_AUDITOR := $(if $(CUSTODY_AUDITOR),,$(if $(filter file,$(origin CUSTODY_HOME)),CUSTODY_AUDITOR=dave CUSTODY_PASSWORD=dave-demo))
notebook: $(BIN)/jupyter-lab
	$(DEMO_AUDITOR) \
	CUSTODY_SPECS="$${CUSTODY_SPECS:-$(CURDIR)/assets/specs}" $(BIN)/jupyter lab --notebook-dir=notebooks \
		$(if $(filter 0,$(shell id -u)),--allow-root) notebooks/auditor.ipynb

clean:
	rm -rf $(CUSTODY_HOME)
