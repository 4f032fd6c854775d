"""Answers reach later steps: `{{answer}}` in a built-in step after an `ask` is the answer given through the API."""
import pytest

from tests.conftest import WorkerProcess, submit, wait_for_status
from tests.page_server import PageServer

pytestmark = pytest.mark.slow
FORM = """<html><head><title>Second factor</title></head><body><h1>Enter the code from your phone</h1>
<form action="/echo" method="get"><label for="c">Code</label> <input id="c" name="code">
<button type="submit">Send</button></form></body></html>"""


@pytest.fixture(scope="module")
def pages():
    server = PageServer({"/form": FORM})
    yield server
    server.close()


def answer(client, api_key, request_id, text):
    body = wait_for_status(client, api_key, request_id, statuses=("input-required", "error", "success"), timeout=90)
    assert body["status"] == "input-required", body
    action = body["hitlInputMetadata"]["action"]
    assert [v["name"] for v in action["variables"]] == ["answer"]  # the name a step writes as {{answer}}
    response = client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/input", headers={"x-api-key": api_key},
                           json={"inputId": body["hitlInputMetadata"]["inputId"], "answer": text})
    assert response.status_code == 202, response.get_json()


def test_a_browser_step_types_the_answer_to_an_earlier_question(client, api_key, pages, app):
    worker = WorkerProcess(queues="tasks", concurrency=1, name="answers-browser")
    try:
        # The page is opened after the question: whether the paused browser is kept or not is not this test's matter.
        request_id = submit(client, api_key, {"executionMode": "cloud_browser", "prompt": "\n".join([
            "/Operator", "ask What is the code from your phone?", f"go to {pages.url('/form')}",
            'type {{answer}} into "Code"', 'click "Send"', "extract li.param"])}).get_json()["requestId"]
        answer(client, api_key, request_id, "4711 93")
        body = wait_for_status(client, api_key, request_id, timeout=90)
    finally:
        worker.stop()
    assert body["status"] == "success", body
    assert body["response"]["text"] == "code=4711 93"  # the page shows what was typed
    assert "/echo?code=4711+93" in pages.requests
    typed = next(e for e in body["response"]["actionTrace"] if e["action"].startswith("type "))
    assert typed["action"] == 'type {{answer}} into "Code"' and "failed" not in typed  # the step as written


def test_a_general_agent_step_answers_with_the_answer(client, api_key, worker):
    request_id = submit(client, api_key, {"executionMode": "cloud", "prompt": "\n".join([
        "ask Which region?", "answer The report for {{answer}} is ready; {{other}} stays as written."])}
    ).get_json()["requestId"]
    answer(client, api_key, request_id, "South")
    body = wait_for_status(client, api_key, request_id, timeout=60)
    assert body["status"] == "success", body
    assert body["response"]["text"] == "The report for South is ready; {{other}} stays as written."
