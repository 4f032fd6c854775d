"""Schedules: fire time → task claimed by a worker (p50/p99), beside a submitted task's submit → claimed, with real
beat and worker processes. SCHEDULES schedules fire every minute (`* * * * *`) for MINUTES minutes; the baseline is
as many tasks submitted at once, MINUTES times. Both are the database clock (created_at / fire_at → started_at).

On the test services, with a database and vhost of its own:
`BENCH_DB=... BENCH_VHOST=... .venv/bin/python -m bench.schedules` (`SCHEDULES=` default 8, `MINUTES=` default 2)."""
import os

import tests.conftest as suite  # the test services' settings, as the suite sets them, and its migrated app
from bench.common import percentile, say
from tests.processes import BeatProcess, WorkerProcess

SCHEDULES = int(os.environ.get("SCHEDULES", "8"))
MINUTES = int(os.environ.get("MINUTES", "2"))
TASK = {"prompt": "answer ok", "executionMode": "cloud"}


def _claimed(where):
    """(seconds from the row's start time to its claim) of every claimed task matching `where`."""
    from sqlalchemy import select

    from app.extensions import db
    from app.models import Task

    db.session.rollback()
    return db.session.execute(select(Task.fire_at, Task.created_at, Task.started_at)
                              .where(where(Task), Task.started_at.is_not(None))).all()


def main():
    app = suite.migrated_app()
    with app.app_context():
        client, key = app.test_client(), suite.make_key("bench", "dev")
        headers = {"x-api-key": key}
        worker, beats = WorkerProcess(name="bench-schedules", concurrency=4), []
        try:
            # Baseline: bursts of SCHEDULES submits, as many as one minute's fires.
            for burst in range(1, MINUTES + 1):
                for _ in range(SCHEDULES):
                    client.post("/fast/v2/remote-dispatch", headers=headers, json=TASK)
                suite.wait_until(lambda: len(_claimed(lambda t: t.schedule_id.is_(None))) >= SCHEDULES * burst,
                                 "the submitted tasks claimed", timeout=120)
            submitted = [(row.started_at - row.created_at).total_seconds() * 1000
                         for row in _claimed(lambda t: t.schedule_id.is_(None))]
            for n in range(SCHEDULES):
                created = client.post("/fast/v2/schedules", headers=headers, json={
                    "name": f"bench {n}", "cron": "* * * * *", "timeZone": "UTC", "task": TASK, "overlap": "allow"})
                assert created.status_code == 201, created.get_json()
            beats.append(BeatProcess())
            say(f"{SCHEDULES} schedules firing every minute for {MINUTES} min")
            suite.wait_until(lambda: len(_claimed(lambda t: t.schedule_id.is_not(None))) >= SCHEDULES * MINUTES,
                             "the scheduled runs claimed", timeout=60 * MINUTES + 90)
            fired = [(row.started_at - row.fire_at).total_seconds() * 1000
                     for row in _claimed(lambda t: t.schedule_id.is_not(None))]
        finally:
            for beat in beats:
                beat.stop()
            worker.stop()
    print(f"\nschedules: {SCHEDULES} schedules x {MINUTES} fires, worker concurrency 4, beat sweep 1 s")
    print("| figure | p50 (ms) | p99 (ms) | samples |")
    print("|---|---:|---:|---:|")
    print(f"| fire time → claimed (scheduled run) | {percentile(fired, 50):.0f} | {percentile(fired, 99):.0f} "
          f"| {len(fired)} |")
    print(f"| submit → claimed (submitted task) | {percentile(submitted, 50):.0f} | {percentile(submitted, 99):.0f} "
          f"| {len(submitted)} |")
    print(f"ratio p50: {percentile(fired, 50) / percentile(submitted, 50):.1f}")


if __name__ == "__main__":
    main()
