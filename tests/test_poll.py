"""GET /fast/v2/remote-dispatch/responses/{requestId}: shapes and key isolation."""
from app import lifecycle
from tests.conftest import poll, submit

CLOUD = {"executionMode": "cloud"}


def test_pending_task_shape(client, api_key):
    request_id = submit(client, api_key, {"prompt": "answer hi", **CLOUD}).get_json()["requestId"]
    body = poll(client, api_key, request_id).get_json()
    assert body["requestId"] == request_id
    assert body["status"] == "pending"
    assert body["response"] is None
    assert body["completedAt"] is None
    assert body["createdAt"].endswith("Z") and "T" in body["createdAt"]
    assert body["browserWindowId"] is None


def test_error_task_shape_has_text_output_and_usage(client, api_key):
    request_id = submit(client, api_key, {"prompt": "answer hi", **CLOUD}).get_json()["requestId"]
    usage = {"actions": 0, "credits": 0.0}
    assert lifecycle.finish(request_id, "error", lifecycle.failure_response("boom"), usage, error="boom")
    body = poll(client, api_key, request_id).get_json()
    assert body["status"] == "error"
    assert body["completedAt"] is not None
    assert body["usage"] == usage
    assert body["response"]["output"] == {"type": "text", "content": "boom"}
    assert body["response"]["text"] == "boom"


def test_every_finished_task_carries_usage_even_when_its_ending_gave_none(client, api_key):
    """A sweep ends a task that never ran an action with no usage of its own; the SDK's AgentUsage refuses null."""
    from app.extensions import db
    from app.models import Task

    ended_now, ended_before = (submit(client, api_key, {"prompt": "answer hi", **CLOUD}).get_json()["requestId"]
                               for _ in range(2))
    assert lifecycle.finish(ended_now, "error", lifecycle.failure_response("gone"), None, error="gone")
    assert poll(client, api_key, ended_now).get_json()["usage"] == {"actions": 0, "credits": 0.0}
    # A row an older version ended with a null usage still answers with one.
    assert lifecycle.finish(ended_before, "error", lifecycle.failure_response("gone"), None, error="gone")
    db.session.execute(db.update(Task).where(Task.id == ended_before).values(usage=None))
    db.session.commit()
    assert poll(client, api_key, ended_before).get_json()["usage"] == {"actions": 0, "credits": 0.0}


def test_another_keys_task_is_not_found(client, api_key, other_key):
    request_id = submit(client, api_key, {"prompt": "answer hi", **CLOUD}).get_json()["requestId"]
    response = poll(client, other_key, request_id)
    assert response.status_code == 404
    assert response.get_json() == {"error": "Request Not Found",
                                   "message": f"No request '{request_id}' for this API key."}


def test_unknown_task_is_not_found(client, api_key):
    response = poll(client, api_key, "does-not-exist")
    assert response.status_code == 404
    assert response.get_json()["error"] == "Request Not Found"


def test_poll_needs_a_valid_key(client, api_key):
    request_id = submit(client, api_key, {"prompt": "answer hi", **CLOUD}).get_json()["requestId"]
    response = poll(client, "wrong", request_id)
    assert response.status_code == 401
    assert response.get_json()["error"] == "Unauthorized"


def test_only_one_finaliser_wins(client, api_key):
    request_id = submit(client, api_key, {"prompt": "answer hi", **CLOUD}).get_json()["requestId"]
    usage = {"actions": 0, "credits": 0.0}
    assert lifecycle.finish(request_id, "error", lifecycle.failure_response("first"), usage)
    assert not lifecycle.finish(request_id, "success", lifecycle.failure_response("second"), usage)
    assert poll(client, api_key, request_id).get_json()["response"]["text"] == "first"
