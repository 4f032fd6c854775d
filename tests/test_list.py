"""GET /fast/v2/remote-dispatch/responses: the key's tasks, newest first, cursor-paginated."""
from datetime import datetime, timezone

import pytest

from app import lifecycle
from app.crypto import hash_key
from app.extensions import db
from app.models import ApiKey, Task
from tests.conftest import submit

CLOUD = {"executionMode": "cloud"}


@pytest.fixture(autouse=True)
def unpublished(monkeypatch):
    monkeypatch.setattr("app.dispatch.service.dispatch", lambda task_id, **_: True)


def list_tasks(client, key, **query):
    return client.get("/fast/v2/remote-dispatch/responses", query_string=query, headers={"x-api-key": key})


def all_pages(client, key, **query):
    pages, cursor = [], None
    while True:
        response = list_tasks(client, key, **query, **({"cursor": cursor} if cursor else {}))
        assert response.status_code == 200, response.get_json()
        body = response.get_json()
        pages.append([task["requestId"] for task in body["responses"]])
        cursor = body["nextCursor"]
        if cursor is None:
            return pages


def test_pages_cover_every_task_once_newest_first(client, api_key, other_key):
    ids = [submit(client, api_key, {"prompt": f"answer {n}", **CLOUD}).get_json()["requestId"]
           for n in range(5)]
    submit(client, other_key, {"prompt": "answer not yours", **CLOUD})
    assert all_pages(client, api_key, limit=2) == [ids[4:2:-1], ids[2:0:-1], ids[:1]]
    assert all_pages(client, api_key) == [ids[::-1]]


def test_pages_of_tasks_stamped_by_the_database_clock_neither_skip_nor_repeat(client, api_key):
    """Rows the clock stamps (not Python), paged one and two at a time (issue 35's repeated task)."""
    ids = [submit(client, api_key, {"prompt": f"answer {n}", **CLOUD}).get_json()["requestId"]
           for n in range(5)]
    assert sum(all_pages(client, api_key, limit=2), []) == ids[::-1]
    assert sum(all_pages(client, api_key, limit=1), []) == ids[::-1]


def test_rows_of_older_timestamp_forms_page_in_time_order(client, api_key):
    """Whole seconds, milliseconds and microseconds page in time order."""
    key_id = db.session.query(ApiKey.id).filter(ApiKey.key_hash == hash_key(api_key)).scalar()
    times = [datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), datetime(2026, 1, 2, 3, 4, 5, 254000, tzinfo=timezone.utc),
             datetime(2026, 1, 2, 3, 4, 5, 900100, tzinfo=timezone.utc), datetime(2026, 1, 2, 3, 4, 6, tzinfo=timezone.utc)]
    ids = [f"00000000-0000-0000-0000-0000000000{n}" for n in range(10, 14)]
    db.session.add_all(Task(id=task_id, api_key_id=key_id, agent="general", execution_mode="cloud",
                            prompt="answer x", created_at=at) for task_id, at in zip(ids, times))
    db.session.commit()
    assert sum(all_pages(client, api_key, limit=1), []) == ids[::-1]


def test_items_are_poll_shaped(client, api_key):
    request_id = submit(client, api_key, {"prompt": "answer hi", **CLOUD}).get_json()["requestId"]
    body = list_tasks(client, api_key).get_json()
    poll = client.get(f"/fast/v2/remote-dispatch/responses/{request_id}", headers={"x-api-key": api_key})
    assert body == {"responses": [poll.get_json()], "nextCursor": None}


def test_status_filter(client, api_key):
    ids = [submit(client, api_key, {"prompt": f"answer {n}", **CLOUD}).get_json()["requestId"]
           for n in range(3)]
    assert lifecycle.finish(ids[1], "error", lifecycle.failure_response("boom"), {"actions": 0, "credits": 0})
    assert all_pages(client, api_key, status="error") == [[ids[1]]]
    assert all_pages(client, api_key, status="pending", limit=1) == [[ids[2]], [ids[0]]]
    assert all_pages(client, api_key, status="success") == [[]]


def test_tasks_created_in_the_same_instant_are_paged_by_id(client, api_key):
    key_id = db.session.query(ApiKey.id).filter(ApiKey.key_hash == hash_key(api_key)).scalar()
    instant = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)
    ids = sorted(f"00000000-0000-0000-0000-00000000000{n}" for n in range(7))
    db.session.add_all(Task(id=task_id, api_key_id=key_id, agent="general", execution_mode="cloud",
                            prompt="answer x", created_at=instant) for task_id in ids)
    db.session.commit()
    pages = all_pages(client, api_key, limit=3)
    assert pages == [ids[6:3:-1], ids[3:0:-1], ids[:1]]


@pytest.mark.parametrize("query, message", [
    ({"limit": 0}, "limit: Must be greater than or equal to 1 and less than or equal to 100."),
    ({"limit": 101}, "limit: Must be greater than or equal to 1 and less than or equal to 100."),
    ({"status": "done"}, "status: Must be one of: pending, success, error, input-required."),
    ({"cursor": "not-a-cursor"}, "cursor: not a cursor returned by this API (use nextCursor)."),
])
def test_invalid_query_is_400(client, api_key, query, message):
    response = list_tasks(client, api_key, **query)
    assert response.status_code == 400
    assert response.get_json() == {"error": "Invalid Request", "message": message}


def test_listing_needs_a_key(client):
    assert client.get("/fast/v2/remote-dispatch/responses").status_code == 401
