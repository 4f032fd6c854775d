"""POST /fast/v2/remote-dispatch/responses/{requestId}/cancel."""
import json
import time

import pytest
from sqlalchemy import select

from app import lifecycle
from app.extensions import db
from app.models import Task, WebhookDelivery
from app.webhooks import outbox
from tests.conftest import poll, submit, wait_for_status

CLOUD = {"executionMode": "cloud"}
# Distinct steps (a repeated one would trip no-progress detection), each long enough to cancel in.
MANY_WAITS = "\n".join(f"wait 0.{n:02d}5" for n in range(10, 60)) + "\nanswer should never happen"
HOOK = {"callbackUrl": "https://127.0.0.1:9/hook", "callbackSecret": "s3cret"}


def cancel(client, key, request_id):
    return client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/cancel", headers={"x-api-key": key})


@pytest.fixture
def unpublished(monkeypatch):
    """Submitted tasks stay queued: nothing is published, so no worker can take them."""
    monkeypatch.setattr("app.dispatch.service.dispatch", lambda task_id, **_: True)


def test_a_queued_task_ends_at_once_as_error_cancelled(client, api_key, unpublished):
    request_id = submit(client, api_key, {"prompt": "answer hi", **CLOUD, **HOOK}).get_json()["requestId"]
    response = cancel(client, api_key, request_id)
    assert response.status_code == 200
    body = response.get_json()
    assert body["status"] == "error"
    assert body["completedAt"] is not None
    assert body["response"]["text"] == "cancelled"
    assert body["response"]["output"] == {"type": "text", "content": "cancelled"}
    assert body["usage"] == {"actions": 0, "credits": 0.0}
    assert [entry["action"] for entry in body["response"]["actionTrace"]] == ["error: cancelled"]
    assert poll(client, api_key, request_id).get_json() == body
    (delivery,) = db.session.execute(select(WebhookDelivery)).scalars()
    assert delivery.event_status == "error"
    payload = json.loads(outbox.body(delivery).decode())
    assert payload["requestId"] == request_id and payload["status"] == "error"
    assert payload["response"] == {"text": "cancelled"} and payload["secret"] == "s3cret"


def test_a_task_waiting_for_input_is_cancelled_at_once(client, api_key, unpublished):
    request_id = submit(client, api_key, {"prompt": "answer hi", **CLOUD}).get_json()["requestId"]
    assert lifecycle.finish(request_id, "input-required", lifecycle.failure_response("Which one?"),
                            {"actions": 1, "credits": 1.0}, hitl={"question": "Which one?"})
    response = cancel(client, api_key, request_id)
    assert response.status_code == 200
    assert response.get_json()["status"] == "error"
    assert response.get_json()["usage"] == {"actions": 1, "credits": 1.0}


def test_a_finished_task_cannot_be_cancelled(client, api_key, unpublished):
    request_id = submit(client, api_key, {"prompt": "answer hi", **CLOUD}).get_json()["requestId"]
    assert lifecycle.finish(request_id, "success", lifecycle.failure_response("done"),
                            {"actions": 0, "credits": 0})
    response = cancel(client, api_key, request_id)
    assert response.status_code == 409
    assert response.get_json() == {
        "error": "Request Already Finished",
        "message": f"Request '{request_id}' already finished with status 'success'."}
    assert cancel(client, api_key, request_id).status_code == 409


def test_another_keys_task_is_not_found(client, api_key, other_key, unpublished):
    request_id = submit(client, api_key, {"prompt": "answer hi", **CLOUD}).get_json()["requestId"]
    response = cancel(client, other_key, request_id)
    assert response.status_code == 404
    assert response.get_json()["error"] == "Request Not Found"
    assert poll(client, api_key, request_id).get_json()["status"] == "pending"
    assert cancel(client, api_key, "no-such-request").status_code == 404


@pytest.mark.slow
def test_a_running_task_stops_before_its_next_action(client, api_key, worker):
    request_id = submit(client, api_key, {"prompt": MANY_WAITS, **CLOUD, **HOOK}).get_json()["requestId"]
    deadline = time.monotonic() + 60
    while not poll(client, api_key, request_id).get_json().get("progress", {}).get("actionTrace"):
        assert time.monotonic() < deadline, "the task never started"
        time.sleep(0.1)

    response = cancel(client, api_key, request_id)
    assert response.status_code == 202  # a worker holds it: it stops between actions
    assert response.get_json()["status"] == "pending"
    assert cancel(client, api_key, request_id).status_code in (200, 202, 409)

    body = wait_for_status(client, api_key, request_id)
    assert body["status"] == "error"
    assert body["response"]["text"] == "cancelled"
    trace = body["response"]["actionTrace"]
    actions = [entry["action"] for entry in trace]
    assert actions[-1] == "error: cancelled"
    assert all(action.startswith("wait ") for action in actions[:-1])
    assert len(actions) - 1 < 50  # it did not run its remaining steps
    assert body["usage"]["actions"] == len(actions) - 1

    # Ended for good: nothing more happens to it, and its webhook is in the outbox.
    time.sleep(1)
    assert poll(client, api_key, request_id).get_json() == body
    db.session.remove()
    task = db.session.get(Task, request_id)
    assert task.error == "cancelled" and task.lease_owner is None
    (delivery,) = db.session.execute(select(WebhookDelivery)).scalars()
    assert json.loads(outbox.body(delivery).decode())["status"] == "error"
    assert json.loads(outbox.body(delivery).decode())["response"]["text"] == "cancelled"
