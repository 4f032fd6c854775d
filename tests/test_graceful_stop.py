"""Stopping a worker (SIGTERM to its process group, as honcho and Ctrl-C do): it takes no new task
and hands its running task back at once (lease released, message requeued), so the next worker
runs it without waiting for the lease to expire."""
import os
import signal

import pytest

from tests.agent_support import stored_task
from tests.conftest import submit, wait_for_status, wait_until
from tests.processes import WorkerProcess

pytestmark = pytest.mark.slow


def test_sigterm_hands_the_running_task_back_and_the_next_worker_runs_it(client, api_key):
    first = WorkerProcess(queues="tasks", concurrency=2, name="stopping", env={"LEASE_SECONDS": "600"})
    try:
        request_id = submit(client, api_key, {"prompt": "wait 3\nanswer survived the restart",
                                              "executionMode": "cloud"}).get_json()["requestId"]
        wait_until(lambda: stored_task(request_id).lease_owner, "the worker to claim the task", timeout=30)
        os.killpg(first.proc.pid, signal.SIGTERM)
        first.proc.wait(20)  # well inside honcho's 5 s grace in practice; never SIGKILLed here
    finally:
        first.kill()
    log = first.output()
    assert "handed back" in log
    assert "ERROR" not in log and "Traceback" not in log, log[-3000:]
    task = stored_task(request_id)
    assert task.status == "pending" and task.lease_owner is None  # nobody holds it: no lease to wait out
    assert task.attempt == 0

    # The message is back in the queue: a new worker (600 s lease, no sweep running) runs it at once.
    second = WorkerProcess(queues="tasks", concurrency=1, name="next")
    try:
        body = wait_for_status(client, api_key, request_id, timeout=60)
    finally:
        second.stop()
    assert body["status"] == "success", body
    assert body["response"]["text"] == "survived the restart"
    assert stored_task(request_id).attempt == 1
