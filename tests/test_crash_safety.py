"""Nothing accepted is lost: killed workers and failed publishes are recovered by the sweeps."""
import time

import pytest

from app.extensions import db
from app.models import Task
from tests.conftest import WorkerProcess, submit, wait_for_status, wait_until
from workers import sweeps

CLOUD = {"executionMode": "cloud"}
pytestmark = pytest.mark.slow


def _task(task_id):
    db.session.rollback()
    db.session.expire_all()
    return db.session.get(Task, task_id)


def _kill_mid_run(client, api_key, prompt, until=lambda task: task.lease_owner):
    """Submit, let a short-lease worker claim the task (and run it as far as `until` says), SIGKILL it, wait
    for its lease to lapse."""
    doomed = WorkerProcess(queues="tasks", concurrency=1, env={"LEASE_SECONDS": "2"}, name="doomed")
    try:
        request_id = submit(client, api_key, {"prompt": prompt, **CLOUD}).get_json()["requestId"]
        wait_until(lambda: until(_task(request_id)), what="the run to get there")
        doomed.kill()
    finally:
        doomed.kill()
    wait_until(lambda: sweeps.expire_leases() != {"retried": 0, "ended": 0}, what="the lease to expire")
    return request_id


def test_task_of_a_killed_worker_is_retried_by_the_sweep_and_finishes(client, api_key):
    request_id = _kill_mid_run(client, api_key, "wait 30\nanswer survived")
    task = _task(request_id)
    assert task.status == "pending" and task.lease_owner is None and task.attempt == 1
    rescuer = WorkerProcess(queues="tasks", concurrency=1, name="rescuer")
    try:
        # The retry runs from the start: wait 30 again is too long for a test, so shorten it.
        db.session.execute(db.update(Task).where(Task.id == request_id)
                           .values(prompt="wait 0.1\nanswer survived"))
        db.session.commit()
        body = wait_for_status(client, api_key, request_id, timeout=60)
    finally:
        rescuer.stop()
    assert body["status"] == "success"
    assert body["response"]["text"] == "survived"
    assert _task(request_id).attempt == 2


def test_task_of_a_killed_worker_ends_as_error_when_attempts_run_out(client, api_key, app):
    app.config["MAX_ATTEMPTS"] = 1
    try:
        request_id = _kill_mid_run(client, api_key, "wait 30\nanswer never")
    finally:
        app.config["MAX_ATTEMPTS"] = 3
    body = wait_for_status(client, api_key, request_id, timeout=5)
    assert body["status"] == "error"
    assert body["completedAt"] is not None
    assert body["response"]["text"] == (
        "The worker running this task stopped responding (1 attempt); the task was not completed.")
    assert body["usage"] == {"actions": 0, "credits": 0.0}  # nothing ran; the SDK refuses a null usage


def test_task_ended_by_the_sweep_after_its_worker_died_reports_what_it_did(client, api_key, app):
    """It had opened a page and read it when its worker was killed: the sweep's error carries the trace it had
    written and the usage of those actions, as a run that ended on its own would report them."""
    from tests.page_server import PageServer

    pages = PageServer({"/report": "<html><body><h1>Quarterly total: 42</h1></body></html>"})
    app.config["MAX_ATTEMPTS"] = 1
    try:
        prompt = f"/Operator\ngo to {pages.url('/report')}\nextract h1\nwait 30"
        request_id = _kill_mid_run(client, api_key, prompt,
                                   until=lambda task: any(e.get("running") for e in task.trace or []))
    finally:
        app.config["MAX_ATTEMPTS"] = 3
        pages.close()
    body = wait_for_status(client, api_key, request_id, timeout=5)
    assert body["status"] == "error" and "stopped responding" in body["response"]["text"]
    assert body["usage"] == {"actions": 2, "credits": 2.0}, body
    trace = body["response"]["actionTrace"]
    assert [e["action"] for e in trace] == [f"go to {pages.url('/report')}", "extract h1", "wait 30 s",
                                             "error: " + body["response"]["text"]]
    assert trace[-1]["credits"] == 2.0


def test_task_whose_publish_failed_is_dispatched_by_the_sweep(client, api_key, app):
    from app import create_app

    broker_down = create_app({"BROKER_URL": "amqp://guest:guest@127.0.0.1:1//"})
    broker_down.test_client_class = type(client)
    with broker_down.app_context():
        response = submit(broker_down.test_client(), api_key, {"prompt": "answer late but sure", **CLOUD})
    assert response.status_code == 202
    request_id = response.get_json()["requestId"]
    assert _task(request_id).dispatched_at is None

    app.config["DISPATCH_GRACE_SECONDS"] = 0
    try:
        assert sweeps.dispatch_undispatched() == 1
    finally:
        app.config["DISPATCH_GRACE_SECONDS"] = 10
    assert _task(request_id).dispatched_at is not None
    rescuer = WorkerProcess(queues="tasks", concurrency=1, name="late")
    try:
        body = wait_for_status(client, api_key, request_id, timeout=60)
    finally:
        rescuer.stop()
    assert body["status"] == "success"
    assert body["response"]["text"] == "late but sure"
