"""Restart RabbitMQ during a submit burst: every 202 is dispatched and finished; never a 500."""
import threading
import time

import pytest

from tests.reliability.conftest import REPORT, run, submit_http, wait_all_terminal

pytestmark = pytest.mark.disruptive


def test_broker_restart_during_submit_burst(stack, dev_key):
    statuses, ids, stop = [], [], threading.Event()

    def burst():
        n = 0
        while not stop.is_set():
            try:
                response = submit_http(stack.base, dev_key, {"prompt": f"answer {n}", "executionMode": "cloud"})
            except Exception as exc:  # a connection error would be a failure of ours too
                statuses.append(repr(exc))
                continue
            statuses.append(response.status_code)
            if response.status_code == 202:
                ids.append(response.json()["requestId"])
            n += 1
            time.sleep(0.05)

    submitter = threading.Thread(target=burst)
    submitter.start()
    time.sleep(1)
    run("rabbitmqctl", "stop_app")
    time.sleep(3)
    run("rabbitmqctl", "start_app")
    run("rabbitmqctl", "await_startup")
    time.sleep(2)
    stop.set()
    submitter.join()

    done = wait_all_terminal(stack.base, dev_key, ids)
    lost = [request_id for request_id in ids if request_id not in done]
    REPORT["broker restart: submits / 202 / 503 / other"] = (
        f"{len(statuses)} / {statuses.count(202)} / {statuses.count(503)} / "
        f"{len(statuses) - statuses.count(202) - statuses.count(503)}")
    REPORT["broker restart: accepted tasks lost"] = len(lost)
    assert set(statuses) <= {202, 503}, statuses
    assert not lost
    assert all(body["status"] == "success" for body in done.values())
