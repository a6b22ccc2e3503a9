# Custody: `make demo` sets up and runs the demo pipeline; `make test` sets up and runs every test,
# installing the system packages the tests need when missing (or saying the command to run).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
export CUSTODY_HOME ?= $(CURDIR)/.custody

.PHONY: setup system-packages demo test ui notebook clean

$(BIN)/custody: pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit("Custody needs Python 3.11 or newer, found " + sys.version.split()[0]) if sys.version_info < (3, 11) else None'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[test,postgres]"
	touch $@

setup: $(BIN)/custody

system-packages:
	PYTHON=$(PYTHON) ./scripts/system-packages

demo: setup
	$(BIN)/custody demo

test: system-packages
	@$(MAKE) --no-print-directory setup
	$(BIN)/pytest -q

ui: setup
	$(BIN)/python -m assets.launch
	DAGSTER_HOME=$(CUSTODY_HOME)/dagster $(BIN)/dagster dev -w workspace.yaml

$(BIN)/jupyter-lab: $(BIN)/custody
	$(BIN)/pip install --quiet -e ".[notebook]"
	touch $@

# Jupyter refuses to start as root (a container's user, often) unless told it may.
notebook: $(BIN)/jupyter-lab
	CUSTODY_SPECS="$${CUSTODY_SPECS:-$(CURDIR)/assets/specs}" $(BIN)/jupyter lab --notebook-dir=notebooks \
		$(if $(filter 0,$(shell id -u)),--allow-root) notebooks/auditor.ipynb

clean:
	rm -rf $(CUSTODY_HOME)
