"""Restart Postgres: the API answers 503 {error, message} while it is down and recovers by itself."""
import os
import time

import requests

import pytest

from tests.reliability.conftest import REPORT, run, submit_http, wait_all_terminal

pytestmark = pytest.mark.disruptive

CLUSTER = os.environ.get("PG_CLUSTER", "15")


def _cluster_version():
    return sorted(os.listdir("/etc/postgresql"))[-1] if os.path.isdir("/etc/postgresql") else CLUSTER


def test_database_outage_is_503_and_recovers_without_restarts(stack, dev_key):
    before = submit_http(stack.base, dev_key, {"prompt": "answer before", "executionMode": "cloud"})
    assert before.status_code == 202
    # A task whose worker is mid-run when the database goes away.
    across = submit_http(stack.base, dev_key, {"prompt": "wait 2\nwait 2\nanswer across the outage",
                                               "executionMode": "cloud"})
    assert across.status_code == 202
    time.sleep(1)
    version = _cluster_version()
    run("pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "stop", "-m", "fast")
    try:
        down = [submit_http(stack.base, dev_key, {"prompt": "answer during", "executionMode": "cloud"}),
                requests.get(f"{stack.base}/fast/v2/remote-dispatch/responses/{before.json()['requestId']}",
                             headers={"x-api-key": dev_key}, timeout=30),
                requests.get(stack.base + "/readyz", timeout=30)]
        time.sleep(3)  # long enough for the running task to meet the outage between its actions
    finally:
        run("pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "start")
    for response in down:
        assert response.status_code == 503, response.text
        body = response.json()
        assert set(body) == {"error", "message"} and body["error"] == "Service Unavailable"

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if requests.get(stack.base + "/readyz", timeout=5).ok:
                break
        except requests.RequestException:
            pass
        time.sleep(0.5)
    after = submit_http(stack.base, dev_key, {"prompt": "answer after", "executionMode": "cloud"})
    assert after.status_code == 202
    ids = [before.json()["requestId"], across.json()["requestId"], after.json()["requestId"]]
    done = wait_all_terminal(stack.base, dev_key, ids)
    REPORT["database restart: responses while down"] = [r.status_code for r in down]
    assert [done[i]["response"]["text"] for i in ids] == ["before", "across the outage", "after"]
