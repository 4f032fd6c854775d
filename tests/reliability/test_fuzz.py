"""schemathesis with every check against a real web process: the served OpenAPI document and the
server agree (statuses, bodies, content types, what is accepted and what is refused), no 5xx, and
every error is {error, message}. Drift between the two fails here."""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from app import lifecycle
from tests.conftest import make_key
from tests.processes import ROOT, WebProcess, WorkerProcess
from tests.reliability.conftest import REPORT

EXAMPLES = int(os.environ.get("CONTRACT_FUZZ_EXAMPLES", "150"))  # per operation and phase
HOOKS = Path(__file__).with_name("schemathesis_hooks.py")
# Every built-in check is on by default (max_response_time aside: it needs a limit, and timings are
# for bench/); one is replaced for submit below, and schemathesis_hooks.py adds two.
CONFIG = """
[cache]
enabled = false  # every run starts from the same seed, not from crashes an earlier run kept

[generation]
# The document says text must not contain NUL (Postgres text cannot hold it); 400 when it does.
allow-x00 = false

[parameters]
"path.request_id" = {{ dictionary = "tasks", probability = 0.5 }}

[dictionaries.tasks]
values = {ids}

[[operations]]
include-path = "/fast/v2/remote-dispatch"
include-method = "POST"
# Replaced by submit_accepts_what_its_document_allows (schemathesis_hooks.py).
checks.positive_data_acceptance.enabled = false

# A schedule's `task` is a whole submit body and `cron` an expression, a credential's `sites` host patterns: their
# descriptions say what is accepted, which JSON Schema cannot (tests/test_schedules.py and test_credentials.py check
# the refusals and their messages).
[[operations]]
include-path-regex = "^/fast/v2/(schedules|credentials)"
include-method-regex = "^(POST|PATCH|PUT)$"
checks.positive_data_acceptance.enabled = false

[[operations]]
include-path = "/fast/v2/files/presigned-upload"
# A GET of this URL is the route of a file by its key (no file has this one: 404): its OPTIONS rightly allows GET.
checks.allow_header_conformance.enabled = false
"""


def tasks_to_find(base, key):
    """Real tasks for the {request_id} routes: pending, finished with a webhook, waiting for input."""
    def submit(body):
        response = requests.post(base + "/fast/v2/remote-dispatch", json={"executionMode": "cloud", **body},
                                 headers={"x-api-key": key}, timeout=30)
        assert response.status_code == 202, response.text
        return response.json()["requestId"]

    pending = submit({"prompt": "answer hi"})
    finished = submit({"prompt": "answer hi", "callbackUrl": "https://receiver.invalid/hook"})
    asking = submit({"prompt": "ask what?"})
    usage = {"actions": 1, "credits": 1.0}
    assert lifecycle.finish(finished, "success", lifecycle.failure_response("done"), usage)
    assert lifecycle.finish(asking, "input-required", lifecycle.failure_response("what?"), usage,
                            hitl={"inputId": "q1", "question": "what?"})
    return [pending, finished, asking]


@pytest.mark.timeout(1800)
def test_the_server_does_what_its_openapi_document_says(app, tmp_path):
    plans = {"fuzz": {"requests": "1000000/minute", "polls": "1000000/minute"}}
    web = WebProcess({"RATE_LIMIT_PLANS": json.dumps(plans), "WAIT_TIMEOUT_SECONDS": "0.05",
                      "WEB_CONCURRENCY": "1"})
    worker = None
    try:
        key = make_key("fuzz", "fuzz")
        # The tasks are made and settled before a worker consumes `tasks`: one would otherwise run them first.
        ids = tasks_to_find(web.base, key)
        worker = WorkerProcess(queues="tasks", concurrency=2, name="fuzz")  # it starts the kept sessions' browsers
        config = tmp_path / "schemathesis.toml"
        config.write_text(CONFIG.format(ids=json.dumps(ids)))
        st = Path(sys.executable).with_name("st")
        run = subprocess.run(
            [str(st), "--config-file", str(config), "run", web.base + "/openapi.json",
             "--max-examples", str(EXAMPLES), "--header", f"x-api-key: {key}", "--max-failures", "50",
             "--no-color", "--seed", os.environ.get("CONTRACT_FUZZ_SEED", "20261124")],
            cwd=ROOT, env={**os.environ, "SCHEMATHESIS_HOOKS": str(HOOKS)}, capture_output=True, text=True,
            timeout=1700)
    finally:
        if worker is not None:
            worker.stop()
        web.stop()
    output = run.stdout + run.stderr
    generated = re.search(r"(\d+) generated", output)
    REPORT["schemathesis (every check): test cases"] = generated[1] if generated else "?"
    assert run.returncode == 0, output[-12000:]
    assert int(generated[1]) >= 2000, output[-3000:]  # every operation well exercised
    operations = re.search(r"Operations:\s+(\d+) selected / (\d+) total", output)
    assert operations and operations[1] == operations[2], output[-3000:]  # every operation of the document
