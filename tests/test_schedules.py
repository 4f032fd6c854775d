"""Schedules (/fast/v2/schedules): the API, and beat's sweep firing runs on a clock the test sets (fire_due(now)),
against the real database; a real beat pair and worker in test_two_beats_make_one_task_per_fire_time."""
import json
from datetime import datetime, timedelta, timezone

import pytest
from sqlalchemy import func, select, update

from app import lifecycle
from app.extensions import db
from app.models import ApiKey, Schedule, Task
from app.schedules import service
from tests.conftest import delivery_of, make_key, poll, submit, wait_until
from workers import sweeps, webhooks

UTC = timezone.utc
TASK = {"prompt": "answer hi", "executionMode": "cloud"}
HELLO = {"output": {"type": "text", "content": "hi"}, "actionTrace": [], "text": "hi", "structuredOutput": None}


def headers(key):
    return {"x-api-key": key}


def create(client, key, **body):
    return client.post("/fast/v2/schedules", json={"name": "daily", "cron": "0 7 * * *", "timeZone": "UTC",
                                                   "task": TASK, **body}, headers=headers(key))


def key_id(raw):
    from app.auth import hash_key

    return db.session.execute(select(ApiKey.id).where(ApiKey.key_hash == hash_key(raw))).scalar_one()


def make(key, now, cron="0 7 * * *", zone="UTC", **body):
    """A schedule created at `now` (the clock the test sets), through the service the route calls."""
    data = {"name": "s", "cron": cron, "timeZone": zone, "task": dict(TASK), "overlap": "skip", "catchUp": "once",
            **body}
    return service.create(key_id(key), data, cap=10, now=now)["scheduleId"]


def runs(schedule_id):
    db.session.rollback()
    return db.session.execute(select(Task).where(Task.schedule_id == schedule_id).order_by(Task.fire_at)).scalars().all()


def at(text):
    return datetime.fromisoformat(text).astimezone(UTC)


def test_create_answers_201_with_the_next_runs_and_reads_back(client, api_key):
    response = create(client, api_key, cron="0 7 * * 1-5", timeZone="Europe/Oslo",
                      task={**TASK, "secretVariables": {"pw": "hunter2"}, "callbackSecret": "cbs",
                            "mcpServers": [{"url": "http://127.0.0.1:9/mcp", "label": "crm", "authentication": {
                                "type": "bearer-token", "bearerToken": "mcp-token-1"}}]})
    assert response.status_code == 201, response.get_json()
    body = response.get_json()
    assert body["status"] == "active" and body["overlap"] == "skip" and body["catchUp"] == "once"
    assert len(body["nextRuns"]) == 5
    for run in body["nextRuns"]:
        local = datetime.fromisoformat(run.replace("Z", "+00:00")).astimezone(
            __import__("zoneinfo").ZoneInfo("Europe/Oslo"))
        assert (local.hour, local.minute) == (7, 0) and local.isoweekday() <= 5
    assert body["task"]["secretVariables"] == {"pw": "********"} and body["task"]["callbackSecret"] == "********"
    assert body["task"]["mcpServers"][0]["authentication"] == {"type": "bearer-token"}
    assert "hunter2" not in db.session.execute(select(Schedule.task_sealed)).scalar_one()
    assert not {"hunter2", "cbs", "mcp-token-1"} & set(json.dumps(body).split('"'))

    one = client.get(f"/fast/v2/schedules/{body['scheduleId']}", headers=headers(api_key)).get_json()
    assert one["nextRuns"] == body["nextRuns"] and one["lastRun"] is None
    patched = client.patch(f"/fast/v2/schedules/{body['scheduleId']}", json={"cron": "30 6 * * *", "name": "early"},
                           headers=headers(api_key)).get_json()
    assert patched["name"] == "early" and patched["nextRuns"][0].endswith(":30:00.000Z")
    paused = client.post(f"/fast/v2/schedules/{body['scheduleId']}/pause", headers=headers(api_key)).get_json()
    assert paused["status"] == "paused" and paused["nextRuns"] == [] and paused["pausedReason"]
    resumed = client.post(f"/fast/v2/schedules/{body['scheduleId']}/resume", headers=headers(api_key)).get_json()
    assert resumed["status"] == "active" and len(resumed["nextRuns"]) == 5
    assert client.delete(f"/fast/v2/schedules/{body['scheduleId']}", headers=headers(api_key)).status_code == 204
    assert client.get(f"/fast/v2/schedules/{body['scheduleId']}", headers=headers(api_key)).status_code == 404


def test_a_bad_task_is_the_same_400_as_a_submit(client, api_key):
    bad = {"prompt": "answer hi", "executionMode": "nowhere"}
    submitted = submit(client, api_key, bad)
    scheduled = create(client, api_key, task=bad)
    assert submitted.status_code == scheduled.status_code == 400
    assert scheduled.get_json()["error"] == submitted.get_json()["error"] == "Invalid Request"
    assert submitted.get_json()["message"].split(": ", 1)[1] in scheduled.get_json()["message"]
    assert scheduled.get_json()["message"].startswith("task:")
    assert create(client, api_key, task={"executionMode": "cloud"}).status_code == 400  # no prompt
    assert db.session.execute(select(func.count()).select_from(Schedule)).scalar_one() == 0


@pytest.mark.parametrize("field, value, says", [
    ("cron", "61 * * * *", "not a cron expression"), ("cron", "* * *", "not a cron expression"),
    ("timeZone", "Mars/Olympus", "IANA"), ("overlap", "sometimes", "overlap"), ("catchUp", "all", "catchUp"),
    ("cron", "*/1 * * * *", None)])
def test_invalid_timing_is_a_400_that_says_why(client, api_key, app, monkeypatch, field, value, says):
    monkeypatch.setitem(app.config, "SCHEDULE_MIN_INTERVAL_SECONDS", 120)
    response = create(client, api_key, **{field: value})
    assert response.status_code == 400
    assert (says or "SCHEDULE_MIN_INTERVAL_SECONDS") in response.get_json()["message"]


def test_the_plan_caps_a_keys_schedules_and_another_key_sees_none(client, api_key, other_key, app, monkeypatch):
    plans = {**app.config["RATE_LIMIT_PLANS"], "free": {**app.config["RATE_LIMIT_PLANS"]["free"], "schedules": 2}}
    monkeypatch.setitem(app.config, "RATE_LIMIT_PLANS", plans)
    ids = [create(client, api_key, name=f"n{i}").get_json()["scheduleId"] for i in range(2)]
    refused = create(client, api_key)
    assert refused.status_code == 403 and "2 schedules" in refused.get_json()["message"]
    assert create(client, other_key).status_code == 201  # the cap is per key
    for method, path in (("get", ""), ("patch", ""), ("delete", ""), ("post", "/pause"), ("post", "/resume")):
        kwargs = {"json": {"name": "x"}} if method == "patch" else {}
        response = getattr(client, method)(f"/fast/v2/schedules/{ids[0]}{path}", headers=headers(other_key), **kwargs)
        assert response.status_code == 404 and response.get_json()["error"] == "Schedule Not Found"
    listed = client.get("/fast/v2/schedules?limit=1", headers=headers(api_key)).get_json()
    second = client.get(f"/fast/v2/schedules?limit=1&cursor={listed['nextCursor']}", headers=headers(api_key))
    assert [s["scheduleId"] for s in listed["schedules"] + second.get_json()["schedules"]] == ids[::-1]
    assert second.get_json()["nextCursor"] is None


def test_a_fire_time_makes_one_task_whoever_sweeps_and_after_a_restart(client, api_key):
    schedule_id = make(api_key, at("2030-01-01T06:00:00+00:00"))
    assert sweeps.fire_schedules(at("2030-01-01T06:59:59+00:00")) == 0
    assert sweeps.fire_schedules(at("2030-01-01T07:00:01+00:00")) == 1
    # A second beat (or the same one after a restart) sweeping the same fire time finds it done: the cursor moved.
    assert sweeps.fire_schedules(at("2030-01-01T07:00:02+00:00")) == 0
    # And were the cursor put back (a beat that read the schedule before the first one committed), the unique
    # (schedule_id, fire_at) refuses a second task.
    db.session.execute(update(Schedule).values(next_fire_at=at("2030-01-01T07:00:00+00:00")))
    db.session.commit()
    assert sweeps.fire_schedules(at("2030-01-01T07:00:03+00:00")) == 0
    [run] = runs(schedule_id)
    assert run.fire_at == at("2030-01-01T07:00:00+00:00")
    body = poll(client, api_key, run.id).get_json()
    assert body["trigger"] == "schedule" and body["scheduleId"] == schedule_id
    api_task = submit(client, api_key, TASK).get_json()["requestId"]
    assert poll(client, api_key, api_task).get_json()["trigger"] == "api"
    listed = client.get(f"/fast/v2/remote-dispatch/responses?scheduleId={schedule_id}",
                        headers=headers(api_key)).get_json()["responses"]
    assert [t["requestId"] for t in listed] == [run.id]
    shown = client.get(f"/fast/v2/schedules/{schedule_id}", headers=headers(api_key)).get_json()
    assert shown["lastRun"]["requestId"] == run.id and shown["lastRun"]["status"] == "pending"


def test_daylight_saving_in_oslo_runs_once_a_day(api_key):
    """Spring forward (29 March 2026, 02:00 → 03:00): the 02:30 run comes at 03:00, once. Autumn (25 October, 03:00
    → 02:00): 02:30 comes twice, and runs once, the first time (CEST, 00:30 UTC)."""
    spring = make(api_key, at("2026-03-28T12:00:00+00:00"), cron="30 2 * * *", zone="Europe/Oslo", overlap="allow")
    for hour in range(0, 4):
        sweeps.fire_schedules(at(f"2026-03-29T{hour:02d}:05:00+00:00"))
    assert [r.fire_at for r in runs(spring)] == [at("2026-03-29T03:00:00+02:00")]

    autumn = make(api_key, at("2026-10-24T12:00:00+00:00"), cron="30 2 * * *", zone="Europe/Oslo", overlap="allow")
    for minute in range(0, 240, 10):
        sweeps.fire_schedules(at("2026-10-25T00:00:00+00:00") + timedelta(minutes=minute))
    assert [r.fire_at for r in runs(autumn)] == [at("2026-10-25T00:30:00+00:00")]


def test_catch_up_once_runs_once_for_the_missed_fires_and_none_skips_them(client, api_key):
    once = make(api_key, at("2030-01-01T00:00:00+00:00"), cron="0 * * * *")
    none = make(api_key, at("2030-01-01T00:00:00+00:00"), cron="0 * * * *", catchUp="none")
    # Beat down from 00:30 until 05:10: five fire times passed.
    sweeps.fire_schedules(at("2030-01-01T05:10:00+00:00"))
    assert [r.fire_at for r in runs(once)] == [at("2030-01-01T05:00:00+00:00")]
    assert runs(none) == []
    skipped = client.get(f"/fast/v2/schedules/{none}", headers=headers(api_key)).get_json()
    assert "5 fires" in skipped["lastSkipped"] and "catchUp: none" in skipped["lastSkipped"]
    assert skipped["nextRuns"][0] == "2030-01-01T06:00:00.000Z"
    sweeps.fire_schedules(at("2030-01-01T06:00:05+00:00"))  # on time again: runs
    assert len(runs(none)) == 1


@pytest.mark.parametrize("overlap, during, after", [("skip", 1, 1), ("queue", 1, 2), ("allow", 2, 2)])
def test_overlap_while_the_previous_run_goes(api_key, overlap, during, after):
    schedule_id = make(api_key, at("2030-01-01T00:00:00+00:00"), cron="*/5 * * * *", overlap=overlap)
    sweeps.fire_schedules(at("2030-01-01T00:05:01+00:00"))
    sweeps.fire_schedules(at("2030-01-01T00:10:01+00:00"))  # the 00:05 run is still pending
    assert len(runs(schedule_id)) == during
    first = runs(schedule_id)[0]
    assert lifecycle.finish(first.id, "success", HELLO, None)
    sweeps.fire_schedules(at("2030-01-01T00:11:00+00:00"))
    assert len(runs(schedule_id)) == after
    if overlap == "queue":
        assert runs(schedule_id)[1].fire_at == at("2030-01-01T00:10:00+00:00")


def test_failures_in_a_row_pause_the_schedule_and_the_webhook_says_so(app, client, api_key, receiver, monkeypatch,
                                                                      webhook_ca):
    monkeypatch.setitem(app.config, "WEBHOOK_CA_BUNDLE", webhook_ca[1])
    monkeypatch.setitem(app.config, "SCHEDULE_FAILURES_TO_PAUSE", 2)
    schedule_id = make(api_key, at("2030-01-01T00:00:00+00:00"), cron="0 * * * *",
                       task={**TASK, "callbackUrl": receiver.url})
    sweeps.fire_schedules(at("2030-01-01T01:00:01+00:00"))
    assert lifecycle.finish(runs(schedule_id)[0].id, "success", HELLO, None)
    for hour in (2, 3):
        sweeps.fire_schedules(at(f"2030-01-01T0{hour}:00:01+00:00"))
        assert lifecycle.finish(runs(schedule_id)[-1].id, "error", lifecycle.failure_response("site down"), None,
                                error="site down")
    schedule = client.get(f"/fast/v2/schedules/{schedule_id}", headers=headers(api_key)).get_json()
    assert schedule["status"] == "paused" and "2 failed runs in a row" in schedule["pausedReason"]
    assert "site down" in schedule["pausedReason"]
    assert sweeps.fire_schedules(at("2030-01-01T04:00:01+00:00")) == 0  # paused: no run
    webhooks.deliver(delivery_of(runs(schedule_id)[-1].id).id)
    [received] = receiver.received
    payload = json.loads(received.body)
    assert payload["trigger"] == "schedule" and payload["scheduleId"] == schedule_id
    assert payload["schedule"]["status"] == "paused" and "site down" in payload["schedule"]["pausedReason"]


def test_a_run_the_service_refuses_at_fire_time_is_a_failed_run_that_says_why(client, api_key):
    schedule_id = make(api_key, at("2030-01-01T00:00:00+00:00"), cron="0 * * * *",
                       task={"prompt": "answer hi", "executionMode": "client", "browserWindowId": "gone-window"})
    assert sweeps.fire_schedules(at("2030-01-01T01:00:01+00:00")) == 1
    [run] = runs(schedule_id)
    body = poll(client, api_key, run.id).get_json()
    assert body["status"] == "error" and "could not start" in body["response"]["text"]
    assert client.get(f"/fast/v2/schedules/{schedule_id}", headers=headers(api_key)).get_json()["failuresInRow"] == 1


def test_a_revoked_keys_schedules_stop(app, api_key):
    schedule_id = make(api_key, at("2030-01-01T00:00:00+00:00"), cron="0 * * * *")
    result = app.test_cli_runner().invoke(args=["keys", "revoke", "alice"])
    assert result.exit_code == 0, result.output
    assert sweeps.fire_schedules(at("2030-01-01T03:00:01+00:00")) == 0
    assert runs(schedule_id) == []
