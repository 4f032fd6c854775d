"""Schedules driven by real beat processes (two at once, by mistake) and a real worker: one task per fire time."""
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import select, update

from app.extensions import db
from app.models import Schedule, Task
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


def test_fires_missed_while_beat_was_down_run_once_or_are_skipped_after_a_restart(app, client, api_key):
    """Beat stops; a daily fire time passes five minutes ago while it is down (the schedules' cursors are set to it,
    as they would have stayed); a new beat starts: the catchUp "once" schedule gets one run for that missed fire,
    which a worker runs, and the catchUp "none" one gets none and says what it skipped."""
    missed = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(minutes=5)

    def create(name, catch_up):
        created = client.post("/fast/v2/schedules", headers={"x-api-key": api_key}, json={
            "name": name, "cron": f"{missed.minute} {missed.hour} * * *", "timeZone": "UTC", "catchUp": catch_up,
            "task": {"prompt": f"answer {name}", "executionMode": "cloud"}})
        assert created.status_code == 201, created.get_json()
        return created.get_json()["scheduleId"]

    once, none = create("caught up", "once"), create("not caught up", "none")

    def runs(schedule_id):
        db.session.rollback()
        return db.session.execute(select(Task.id, Task.fire_at).where(Task.schedule_id == schedule_id)).all()

    started = [WorkerProcess(name="schedules-restart")]
    try:
        BeatProcess().stop()  # a beat ran, and stopped: the schedules' cursors stay where it left them
        db.session.execute(update(Schedule).where(Schedule.id.in_((once, none))).values(next_fire_at=missed))
        db.session.commit()
        started.append(BeatProcess())

        [(run_id, fire_at)] = wait_until(lambda: runs(once), "the caught-up run", timeout=60)
        assert fire_at == missed
        body = wait_for_status(client, api_key, run_id)
        assert body["status"] == "success" and "caught up" in body["response"]["text"]

        def skipped():
            return client.get(f"/fast/v2/schedules/{none}", headers={"x-api-key": api_key}).get_json()["lastSkipped"]
        assert "missed (beat was not running); catchUp: none skips them" in wait_until(skipped, "the skip", 30)
        assert runs(none) == [] and len(runs(once)) == 1
        shown = client.get(f"/fast/v2/schedules/{once}", headers={"x-api-key": api_key}).get_json()
        assert shown["nextRuns"][0].startswith((missed + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M"))
    finally:
        for process in reversed(started):
            process.stop()
