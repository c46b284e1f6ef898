# The two commands the README promises:
#   make demo   -- five GBSG2 sites and a training site on loopback, an analyst session over HTTP
#                  (R from Debian packages too: the demo's R-bridge call runs in R through rpy2)
#   make test   -- the whole test suite, R cross-checks and the PostgreSQL engine's tests included
# Both install what they need on a fresh Debian machine.

PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# the analyst client alone (pip install dsfed: no site server), which tests/test_client_only.py runs
CLIENT_VENV ?= .venv-client

# the R DataSHIELD client (DSI, DSOpal, opalr, dsBaseClient) that tests/test_r_client.py runs, from ../shared
R_CLIENT_LIB ?= .r-datashield
R_CLIENT_INSTALL ?= ../shared/tools/r-datashield-client/install.sh

.PHONY: demo test venv client-venv r-deps r-client-deps browser-deps pg-deps clean

$(BIN)/python:
	$(PYTHON) -c 'import ensurepip' 2>/dev/null || scripts/apt-install.sh "Python virtualenvs" python3-venv
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

venv: $(BIN)/python
	$(BIN)/pip install --quiet -e '.[server,r]'

client-venv:
	$(PYTHON) -m venv $(CLIENT_VENV)
	$(CLIENT_VENV)/bin/pip install --quiet --upgrade pip
	$(CLIENT_VENV)/bin/pip install --quiet -e '.'

r-deps:
	scripts/install-r.sh

# skipped by install.sh when the library already loads; without ../shared, tests/test_r_client.py fails
# saying how to install the client from CRAN (README, "From R")
r-client-deps: r-deps
	@if [ -f $(R_CLIENT_INSTALL) ]; then bash $(R_CLIENT_INSTALL) $(abspath $(R_CLIENT_LIB)); \
	else echo "r-client-deps: $(R_CLIENT_INSTALL) not found; see the README to install the R client into $(R_CLIENT_LIB)"; fi

browser-deps:
	scripts/install-chromium.sh

pg-deps:
	scripts/install-postgresql.sh

demo: r-deps venv
	$(BIN)/dsfed demo

test: r-deps r-client-deps browser-deps pg-deps client-venv $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	$(BIN)/python -m pytest -n auto --dist worksteal -m "not serial"
	$(BIN)/python -m pytest -m serial

clean:
	rm -rf $(VENV) $(CLIENT_VENV) .pytest_cache build *.egg-info
