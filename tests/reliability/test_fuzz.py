"""schemathesis against our own OpenAPI document: no 5xx, and every error is {error, message}."""
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from tests.conftest import make_key
from tests.processes import ROOT
from tests.reliability.conftest import REPORT

# The checked-in document (kept identical to the served one by tests/test_contract.py).
schema = schemathesis.openapi.from_path(str(ROOT / "openapi.json"))
COUNTS = {"requests": 0, "5xx": 0, "error bodies without {error, message}": 0}


@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors_and_every_error_has_a_body(app, case):
    app.config["WAIT_TIMEOUT_SECONDS"] = 1  # fuzzed `wait: true` submits must not block long
    key = make_key("fuzz", "dev")
    response = case.call(headers={"x-api-key": key}, app=app)
    COUNTS["requests"] += 1
    REPORT["fuzzing: requests / 5xx / malformed error bodies"] = (
        f"{COUNTS['requests']} / {COUNTS['5xx']} / {COUNTS['error bodies without {error, message}']}")
    if response.status_code >= 500:
        COUNTS["5xx"] += 1
    assert response.status_code < 500, (case.as_curl_command(), response.text)
    if response.status_code >= 400:
        body = response.json()
        if not (isinstance(body.get("error"), str) and isinstance(body.get("message"), str)):
            COUNTS["error bodies without {error, message}"] += 1
        assert isinstance(body.get("error"), str) and isinstance(body.get("message"), str), body
