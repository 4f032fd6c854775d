"""What a run shows while it goes (workers/shown.py): its live state and trace so far are written beside the run,
so a slow database never holds a step, and what a viewer or a poller reads is the latest the run had."""
import threading

import pytest
from sqlalchemy import text

from app import lifecycle
from app.extensions import db
from app.live import state as live_state
from tests.conftest import poll, submit
from workers.shown import Shown

USAGE = {"actions": 1, "credits": 1.0}


def entry(n):
    return {"url": f"http://example.test/{n}", "action": f"step {n}", "startTs": "2026-11-29T00:00:00.000Z",
            "endTs": "2026-11-29T00:00:00.000Z", "durationMs": 0}


@pytest.fixture
def running(client, api_key, monkeypatch):
    monkeypatch.setattr("app.dispatch.service.dispatch", lambda task_id, **_: True)
    request_id = submit(client, api_key, {"prompt": "answer hi", "executionMode": "cloud"}).get_json()["requestId"]
    assert lifecycle.claim(request_id, "me")
    db.session.rollback()
    return request_id


def row_locked(request_id):
    """A transaction of another connection holding the task's row, as a slow or stuck writer would."""
    conn = db.engine.connect()
    transaction = conn.begin()
    conn.execute(text("SELECT 1 FROM tasks WHERE id = :id FOR UPDATE"), {"id": request_id})
    return conn, transaction


def test_a_run_goes_on_while_the_row_is_locked_and_the_latest_is_written(app, client, api_key, running):
    conn, transaction = row_locked(running)
    shown = Shown(running, "me")
    trace, steps_done = [], threading.Event()

    def steps():  # what the agent loop does at each step: neither call may wait for the row
        with app.app_context():
            for n in range(5):
                trace.append(entry(n))
                shown.live({"step": f"step {n}", "url": entry(n)["url"]})
                shown.progress(trace, USAGE)
        steps_done.set()

    threading.Thread(target=steps, daemon=True).start()
    try:
        assert steps_done.wait(30), "a step waited for the locked row"
        assert not shown.flush(timeout=0.5)  # nothing could be written yet
    finally:
        transaction.rollback()
        conn.close()
    shown.close()  # leaving the run writes what is left
    assert live_state.read(running) == {"step": "step 4", "url": "http://example.test/4"}
    progress = poll(client, api_key, running).get_json()["progress"]["actionTrace"]
    assert [e["action"] for e in progress] == [f"step {n}" for n in range(5)]


def test_the_trace_is_a_copy_taken_at_each_step(client, api_key, running):
    with Shown(running, "me") as shown:
        trace = [entry(0)]
        shown.progress(trace, USAGE)
        shown.flush()
        trace.append(entry(1))  # the run goes on adding; what was written stays what it showed then
    progress = poll(client, api_key, running).get_json()["progress"]["actionTrace"]
    assert [e["action"] for e in progress] == ["step 0"]


def test_the_trace_of_a_run_that_lost_its_lease_is_not_written(client, api_key, running):
    with Shown(running, "someone else") as shown:
        shown.progress([entry(0)], USAGE)
    assert not (poll(client, api_key, running).get_json().get("progress") or {}).get("actionTrace")
