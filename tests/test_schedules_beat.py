"""Schedules driven by real beat processes (two at once, by mistake) and a real worker: one task per fire time."""
import pytest
from sqlalchemy import select

from app.extensions import db
from app.models import Task
from tests.conftest import wait_for_status, wait_until
from tests.processes import BeatProcess, WorkerProcess

pytestmark = pytest.mark.slow


def test_two_beats_make_one_task_per_fire_time_and_a_worker_runs_it(app, client, api_key):
    created = client.post("/fast/v2/schedules", headers={"x-api-key": api_key}, json={
        "name": "every minute", "cron": "* * * * *", "timeZone": "Europe/Oslo",
        "task": {"prompt": "answer scheduled hello", "executionMode": "cloud"}})
    assert created.status_code == 201, created.get_json()
    schedule_id, first_fire = created.get_json()["scheduleId"], created.get_json()["nextRuns"][0]
    started = []
    try:
        started.append(WorkerProcess(name="schedules"))
        started += [BeatProcess(), BeatProcess()]

        def fired():
            db.session.rollback()
            return db.session.execute(select(Task.id).where(Task.schedule_id == schedule_id)).scalars().all()

        [run_id] = wait_until(fired, "the first fire's task", timeout=90)
        body = wait_for_status(client, api_key, run_id)
        assert body["status"] == "success" and "scheduled hello" in body["response"]["text"]
        assert body["trigger"] == "schedule" and body["scheduleId"] == schedule_id
        # Both beats sent a sweep a second all the while the run went: still one task for that fire time.
        assert all(beat.proc.poll() is None for beat in started[1:])
        assert len(fired()) == 1
        task = db.session.get(Task, run_id)
        assert task.fire_at.isoformat().replace("+00:00", "Z").startswith(first_fire[:19])
    finally:
        for process in reversed(started):
            process.stop()
