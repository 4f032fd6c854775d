"""Submit → RabbitMQ → a real Celery worker → finish → poll, and survival of crashes."""
import pytest

from tests.conftest import submit, wait_for_status

CLOUD = {"executionMode": "cloud"}
pytestmark = pytest.mark.slow


def test_task_runs_through_the_worker_to_success(client, api_key, worker):
    request_id = submit(client, api_key, {"prompt": "answer Hello world", **CLOUD}).get_json()["requestId"]
    body = wait_for_status(client, api_key, request_id)
    assert body["status"] == "success"
    assert body["completedAt"] is not None
    assert body["usage"] == {"actions": 0, "credits": 0.0}
    assert body["response"]["output"] == {"type": "text", "content": "Hello world"}
    assert body["response"]["text"] == "Hello world"
    final = body["response"]["actionTrace"][-1]
    assert final["action"] == "Hello world" and "credits" in final


def test_steps_are_traced_and_counted(client, api_key, worker):
    request_id = submit(client, api_key, {"prompt": "wait 0.1\nanswer done", **CLOUD}).get_json()["requestId"]
    body = wait_for_status(client, api_key, request_id)
    assert body["status"] == "success"
    assert body["usage"] == {"actions": 1, "credits": 1.0}
    first, final = body["response"]["actionTrace"]
    assert first["action"] == "wait 0.1 s"
    assert first["durationMs"] >= 100
    assert first["startTs"].endswith("Z") and len(first["startTs"]) == len("2026-01-01T00:00:00.000Z")
    assert final["credits"] == 1.0


def test_unplannable_prompt_ends_as_error_explaining_how_to_configure_a_model(client, api_key, worker):
    request_id = submit(client, api_key, {"prompt": "book me a flight to Paris", **CLOUD}).get_json()["requestId"]
    body = wait_for_status(client, api_key, request_id)
    assert body["status"] == "error"
    assert "LLM_BASE_URL" in body["response"]["text"]
