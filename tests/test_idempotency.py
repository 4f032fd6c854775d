"""`Idempotency-Key` on submit: one task per key and body within 24 h, per API key."""
from sqlalchemy import func, select, text

from app.dispatch import service
from workers import sweeps
from app.extensions import db
from app.models import IdempotencyKey, Task

CLOUD = {"executionMode": "cloud"}
BODY = {"prompt": "answer once", **CLOUD}


def submit(client, key, body, idempotency_key):
    return client.post("/fast/v2/remote-dispatch", json=body,
                       headers={"x-api-key": key, "Idempotency-Key": idempotency_key})


def task_count():
    return db.session.execute(select(func.count()).select_from(Task)).scalar()


def test_the_same_key_and_body_returns_the_original_request(client, api_key):
    first = submit(client, api_key, BODY, "k-1")
    again = submit(client, api_key, dict(BODY), "k-1")
    assert first.status_code == again.status_code == 202
    assert again.get_json() == first.get_json()
    assert "Idempotent-Replayed" not in first.headers
    assert again.headers["Idempotent-Replayed"] == "true"
    assert task_count() == 1


def test_the_same_key_with_another_body_is_422(client, api_key):
    request_id = submit(client, api_key, BODY, "k-2").get_json()["requestId"]
    response = submit(client, api_key, {**BODY, "prompt": "answer twice"}, "k-2")
    assert response.status_code == 422
    assert response.get_json() == {
        "error": "Idempotency Key Reused",
        "message": f"Idempotency-Key 'k-2' was already used with a different request body "
                   f"(request '{request_id}'); use a new key for a new task."}
    assert task_count() == 1


def test_keys_are_per_api_key(client, api_key, other_key):
    mine = submit(client, api_key, BODY, "shared-name").get_json()["requestId"]
    theirs = submit(client, other_key, BODY, "shared-name").get_json()["requestId"]
    assert mine != theirs
    assert task_count() == 2


def test_without_the_header_every_submit_is_a_new_task(client, api_key):
    for _ in range(2):
        client.post("/fast/v2/remote-dispatch", json=BODY, headers={"x-api-key": api_key})
    assert task_count() == 2


def test_a_key_older_than_24_hours_starts_a_new_task(client, api_key):
    first = submit(client, api_key, BODY, "k-old").get_json()["requestId"]
    db.session.execute(text("UPDATE idempotency_keys SET created_at = now() - interval '25 hours'"))
    db.session.commit()
    second = submit(client, api_key, {**BODY, "prompt": "answer other"}, "k-old")
    assert second.status_code == 202
    assert second.get_json()["requestId"] != first
    assert task_count() == 2
    remembered = db.session.execute(select(IdempotencyKey.task_id)).scalars().all()
    assert remembered == [second.get_json()["requestId"]]


def test_a_concurrent_duplicate_loses_on_the_unique_constraint_and_replays(client, api_key, monkeypatch):
    """The race: both requests looked before either committed; the second commit must not add a task."""
    first = submit(client, api_key, BODY, "k-race").get_json()["requestId"]
    looked = []
    real_lookup = service._idempotent_replay

    def lookup_before_the_other_commit(*args):
        if not looked:
            looked.append(True)
            return None
        return real_lookup(*args)

    monkeypatch.setattr(service, "_idempotent_replay", lookup_before_the_other_commit)
    again = submit(client, api_key, BODY, "k-race")
    assert again.status_code == 202
    assert again.get_json()["requestId"] == first
    assert task_count() == 1


def test_an_overlong_key_is_400(client, api_key):
    response = submit(client, api_key, BODY, "k" * 256)
    assert response.status_code == 400
    assert response.get_json() == {"error": "Invalid Request",
                                   "message": "Idempotency-Key: Length must be between 1 and 255."}


def test_the_hourly_sweep_forgets_expired_keys_only(client, api_key):
    submit(client, api_key, BODY, "k-expired")
    submit(client, api_key, BODY, "k-recent")
    db.session.execute(text("UPDATE idempotency_keys SET created_at = now() - interval '25 hours' "
                            "WHERE key = 'k-expired'"))
    db.session.commit()
    assert sweeps.purge_idempotency_keys() == 1
    assert db.session.execute(select(IdempotencyKey.key)).scalars().all() == ["k-recent"]
