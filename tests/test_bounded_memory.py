"""Bounded memory per request: prompt cap, outputs and traces cut when stored, list pages by bytes."""
import json
import threading
from pathlib import Path

import pytest
import requests

from app import lifecycle
from tests.conftest import make_key, poll, submit
from tests.processes import WebProcess, WorkerProcess

CLOUD = {"executionMode": "cloud"}
USAGE = {"actions": 1, "credits": 1.0}


@pytest.fixture
def unpublished(monkeypatch):
    monkeypatch.setattr("app.dispatch.service.dispatch", lambda task_id, **_: True)


def test_a_prompt_over_max_prompt_chars_is_400(client, app, api_key, unpublished):
    limit = app.config["MAX_PROMPT_CHARS"]
    assert limit == 100_000  # the documented default
    at_limit = "answer " + "a" * (limit - len("answer "))
    assert submit(client, api_key, {"prompt": at_limit, **CLOUD}).status_code == 202
    refused = submit(client, api_key, {"prompt": at_limit + "a", **CLOUD})
    assert refused.status_code == 400
    assert refused.get_json() == {
        "error": "Invalid Request",
        "message": f"prompt: prompt is {limit + 1} characters long; the limit is {limit} (MAX_PROMPT_CHARS)."}


def test_an_answer_over_max_prompt_chars_is_400(client, app, api_key, unpublished, monkeypatch):
    monkeypatch.setitem(app.config, "MAX_PROMPT_CHARS", 50)
    request_id = submit(client, api_key, {"prompt": "ask what?", **CLOUD}).get_json()["requestId"]
    response = client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/input", json={"answer": "x" * 51},
                           headers={"x-api-key": api_key})
    assert response.status_code == 400
    assert "the limit is 50 (MAX_PROMPT_CHARS)" in response.get_json()["message"]


def big_response(chars, entries=3):
    text = "o" * chars
    trace = [{"url": "https://example.test/" + "u" * chars, "action": "a" * chars, "startTs": "t", "endTs": "t",
              "durationMs": 1} for _ in range(entries)]
    return {"output": {"type": "text", "content": text}, "text": text, "structuredOutput": None,
            "actionTrace": trace}, trace


def test_outputs_and_trace_entries_are_cut_with_a_marker_when_stored(client, app, api_key, unpublished,
                                                                        monkeypatch):
    monkeypatch.setitem(app.config, "MAX_OUTPUT_CHARS", 1000)
    monkeypatch.setitem(app.config, "MAX_TRACE_ENTRY_CHARS", 100)
    request_id = submit(client, api_key, {"prompt": "answer hi", **CLOUD}).get_json()["requestId"]
    response, trace = big_response(5000)
    assert lifecycle.finish(request_id, "success", response, USAGE, trace=trace)

    body = poll(client, api_key, request_id).get_json()
    marker = "… [truncated: 4000 more characters]"
    assert body["response"]["output"]["content"] == "o" * 1000 + marker
    assert body["response"]["text"] == "o" * 1000 + marker
    for entry in body["response"]["actionTrace"]:
        assert entry["action"] == "a" * 100 + "… [truncated: 4900 more characters]"
        assert len(entry["url"]) < 200 and entry["url"].endswith("more characters]")
        assert entry["durationMs"] == 1


def test_progress_traces_are_cut_too(client, app, api_key, unpublished, monkeypatch):
    from app.extensions import db
    from app.models import Task
    from workers.shown import Shown

    monkeypatch.setitem(app.config, "MAX_TRACE_ENTRY_CHARS", 100)
    request_id = submit(client, api_key, {"prompt": "answer hi", **CLOUD}).get_json()["requestId"]
    assert lifecycle.claim(request_id, "me")
    with Shown(request_id, "me") as shown:  # what a run writes as it goes (workers/shown.py)
        shown.progress(big_response(5000)[1], USAGE)
    db.session.expire_all()
    stored = db.session.get(Task, request_id).trace
    assert all(len(entry["action"]) < 150 for entry in stored)
    progress = poll(client, api_key, request_id).get_json()["progress"]["actionTrace"]
    assert progress[0]["action"].startswith("a" * 100 + "… [truncated: ")


def test_a_list_page_ends_at_its_byte_budget_and_the_cursor_goes_on(client, app, api_key, unpublished,
                                                                     monkeypatch):
    monkeypatch.setitem(app.config, "LIST_PAGE_MAX_BYTES", 50_000)
    ids = [submit(client, api_key, {"prompt": f"answer {n}", **CLOUD}).get_json()["requestId"] for n in range(7)]
    for request_id in ids:
        assert lifecycle.finish(request_id, "success", big_response(6000, entries=0)[0], USAGE)

    pages, cursor = [], None
    while True:
        query = {"limit": 100, **({"cursor": cursor} if cursor else {})}
        response = client.get("/fast/v2/remote-dispatch/responses", query_string=query,
                              headers={"x-api-key": api_key})
        assert response.status_code == 200
        assert len(response.data) < 50_000 + 30_000  # the budget, plus at most part of one task
        body = response.get_json()
        pages.append([task["requestId"] for task in body["responses"]])
        cursor = body["nextCursor"]
        if cursor is None:
            break
    assert [len(page) for page in pages] == [4, 3]  # ~12 KB a task: 4 fit in 50 KB
    assert sum(pages, []) == ids[::-1]


def test_one_task_larger_than_the_budget_still_gets_its_own_page(client, app, api_key, unpublished, monkeypatch):
    monkeypatch.setitem(app.config, "LIST_PAGE_MAX_BYTES", 1000)
    ids = [submit(client, api_key, {"prompt": f"answer {n}", **CLOUD}).get_json()["requestId"] for n in range(2)]
    for request_id in ids:
        assert lifecycle.finish(request_id, "success", big_response(3000, entries=0)[0], USAGE)
    first = client.get("/fast/v2/remote-dispatch/responses", headers={"x-api-key": api_key}).get_json()
    assert [task["requestId"] for task in first["responses"]] == [ids[1]]
    second = client.get("/fast/v2/remote-dispatch/responses", query_string={"cursor": first["nextCursor"]},
                        headers={"x-api-key": api_key}).get_json()
    assert [task["requestId"] for task in second["responses"]] == [ids[0]]
    assert second["nextCursor"] is None


# The worst case against real processes: the web worker's resident memory stays bounded.

def rss_kb(pid, field):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def web_worker_pid(master_pid):
    children = Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def in_threads(count, work):
    errors = []

    def run():
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def test_the_web_workers_memory_stays_bounded_under_the_worst_case(app):
    env = {"WEB_CONCURRENCY": "1", "MAX_OUTPUT_CHARS": "60000"}
    web, worker = WebProcess(env), WorkerProcess("tasks", 2, env, name="bounded")
    try:
        base, key = web.base, make_key("heavy", "dev")
        headers = {"x-api-key": key}
        pid = web_worker_pid(web.proc.pid)
        for _ in range(5):  # warm up: imports, connection pools, first requests
            requests.get(base + "/fast/v2/remote-dispatch/responses", headers=headers, timeout=30)
        at_rest = rss_kb(pid, "VmRSS")

        # Max-size prompts whose answer is the prompt: the largest output and trace a task can make.
        prompt = "answer " + "a" * (100_000 - len("answer "))
        ids = []

        def submit_many():
            for _ in range(6):
                response = requests.post(base + "/fast/v2/remote-dispatch", json={"prompt": prompt, **CLOUD},
                                         headers=headers, timeout=60)
                assert response.status_code == 202, response.text
                ids.append(response.json()["requestId"])

        in_threads(5, submit_many)
        done = {}
        while len(done) < len(ids):
            for request_id in ids:
                body = requests.get(f"{base}/fast/v2/remote-dispatch/responses/{request_id}", headers=headers,
                                    timeout=30).json()
                if body["status"] in ("success", "error"):
                    done[request_id] = body
        sample = next(iter(done.values()))
        assert sample["status"] == "success", sample["response"]
        assert sample["response"]["output"]["content"].endswith("… [truncated: 39993 more characters]")
        assert all(len(entry["action"]) <= 2000 + 40 for entry in sample["response"]["actionTrace"])

        # The largest list pages, 8 listers at once, then oversized prompts (refused, but read).
        pages = []

        def list_everything():
            for _ in range(3):
                cursor, seen = None, 0
                while True:
                    response = requests.get(base + "/fast/v2/remote-dispatch/responses", headers=headers,
                                            params={"limit": 100, **({"cursor": cursor} if cursor else {})},
                                            timeout=60)
                    assert response.status_code == 200
                    pages.append(len(response.content))
                    seen += len(response.json()["responses"])
                    cursor = response.json()["nextCursor"]
                    if cursor is None:
                        break
                assert seen == len(ids)

        in_threads(8, list_everything)
        listing_mb = (rss_kb(pid, "VmHWM") - at_rest) / 1024

        oversized = json.dumps({"prompt": "answer " + "a" * 9_000_000, **CLOUD})

        def refuse_oversized():
            for _ in range(3):
                response = requests.post(base + "/fast/v2/remote-dispatch", data=oversized, timeout=60,
                                         headers={**headers, "Content-Type": "application/json"})
                assert response.status_code == 400 and "MAX_PROMPT_CHARS" in response.json()["message"]

        in_threads(4, refuse_oversized)
        total_mb = (rss_kb(pid, "VmHWM") - at_rest) / 1024
        print(f"web worker RSS at rest {at_rest / 1024:.0f} MB; peak growth listing {listing_mb:.0f} MB, "
              f"with 9 MB bodies {total_mb:.0f} MB; {len(pages)} list pages, largest {max(pages) / 1e6:.2f} MB")
        assert max(pages) < 1_000_000 + 200_000  # LIST_PAGE_MAX_BYTES plus part of one task
        # Generous bounds: memory bounds, not measurements. Unbounded, these 30 tasks make 9 MB pages and
        # the 8 listers take the worker up by hundreds of MB; bounded, pages are ~1 MB. A parsed body
        # costs a few times its size (README), so 4 bodies of 9 MB at once add ~150-250 MB.
        assert listing_mb < 120, f"listing grew the web worker by {listing_mb:.0f} MB"
        assert total_mb < 400, f"the web worker grew by {total_mb:.0f} MB"
    finally:
        worker.stop()
        web.stop()
