"""What a new user trips over (issue 23): sentences the built-in planner must refuse, error pages that are no
answer, steps that run without the model, a local model the workers take turns for, small API/console things."""
import os
import threading
import time

import pytest

from tests.agent_support import run
from tests.conftest import WorkerProcess, poll, submit, wait_for_status, wait_until
from tests.llm_server import ScriptedModel, text, tool_call
from tests.page_server import PageServer
from workers.planners import Brief, make_planner
from workers.planners.builtin import BuiltinPlanner, parse_step

pytestmark = pytest.mark.slow
PAGES = {"/hello": "<html><head><title>Hello</title></head><body><h1>Hello there</h1></body></html>",
         "/gone": "<html><head><title>Gone</title></head><body><h1>404: nothing here</h1></body></html>"}
# MiniWoB++ utterances (its task pages' instructions) and the issue's sentence: none is a built-in program.
SENTENCES = [
    "Click the button.",
    'Click on the "ok" button.',
    "Click button ONE, then click button TWO.",
    "Select Rhona from the list and click Submit.",
    'Type "Ada" into the textbox and press Submit.',
    "Enter the password and press Submit",
    "open http://127.0.0.1:8199/ and tell me the page title",
    "go to https://example.com/a page",
    "press Enter and wait",
]


def _brief(prompt, agent="web"):
    return Brief(prompt=prompt, agent=agent, tools=[])


@pytest.mark.parametrize("sentence", SENTENCES)
def test_a_sentence_is_refused_not_half_run(sentence):
    with pytest.raises(ValueError) as refused:
        BuiltinPlanner(_brief(sentence))
    message = str(refused.value)
    assert message.startswith("Cannot understand the step") and "LLM_MODEL" in message


def test_the_step_grammar_still_parses():
    assert parse_step('click "Sign in"').args == {"target": "Sign in"}
    assert parse_step("click Submit").args == {"target": "Submit"}
    assert parse_step('click a[href^="https"]').args == {"target": 'a[href^="https"]'}
    assert parse_step("go to http://127.0.0.1:8199/").args == {"url": "http://127.0.0.1:8199/"}
    assert parse_step("go to data:text/html,<h1>Two words</h1>").args == {"url": "data:text/html,<h1>Two words</h1>"}
    assert parse_step('select "Blue" in "Colour"').args == {"option": "Blue", "target": "Colour"}
    assert parse_step("press Control+a").args == {"key": "Control+a"}


def test_a_complete_program_runs_on_the_builtin_planner_whatever_model_is_configured(app):
    config = {**app.config, "LLM_MODEL": "some-model", "LLM_BASE_URL": "http://127.0.0.1:9/v1"}
    assert make_planner(_brief("answer hi", "general"), config).label == "builtin"
    assert make_planner(_brief("Say hi nicely.", "general"), config).label == "model some-model"
    off = {**config, "BUILTIN_STEPS_FIRST": False}
    assert make_planner(_brief("answer hi", "general"), off).label == "model some-model"


# The model tests come before the first use of the module's `worker`: theirs must be the only consumer.
def test_tasks_take_turns_for_the_model_and_show_the_wait(client, api_key, app):
    model = ScriptedModel()
    release = threading.Event()

    def held(_request):
        release.wait(60)
        return {"content": "first"}

    model.script(held, text("second"))
    worker = WorkerProcess(queues="tasks", concurrency=2, name="turns",
                           env=model.env(LLM_CONCURRENCY=1))
    try:
        first = submit(client, api_key, {"prompt": "Say something.", "executionMode": "cloud"}).get_json()["requestId"]
        wait_until(lambda: len(model.bodies()) == 1, "the first task to call the model")
        second = submit(client, api_key, {"prompt": "Say more.", "executionMode": "cloud"}).get_json()["requestId"]
        wait_until(lambda: poll(client, api_key, second).get_json()["progress"]["actionTrace"],
                   "the second task to show its wait")
        [waiting] = poll(client, api_key, second).get_json()["progress"]["actionTrace"]
        assert waiting["action"] == "waiting for the model (busy with other tasks)"
        assert len(model.bodies()) == 1  # the second did not pile onto the busy model
        release.set()
        assert wait_for_status(client, api_key, first)["response"]["text"] == "first"
        body = wait_for_status(client, api_key, second)
        assert body["response"]["text"] == "second", body
        trace = body["response"]["actionTrace"]
        assert trace[0]["action"] == "waited for the model (busy with other tasks)" and trace[0]["durationMs"] > 0
        assert trace[-1]["planner"] == "model scripted-model"
    finally:
        release.set()
        worker.stop()
        model.close()


def test_a_task_waiting_for_the_model_is_cancelled_at_once(client, api_key, app):
    model = ScriptedModel()
    release = threading.Event()
    model.script(lambda _request: (release.wait(60), {"content": "first"})[1])
    worker = WorkerProcess(queues="tasks", concurrency=2, name="turns-cancel", env=model.env(LLM_CONCURRENCY=1))
    try:
        first = submit(client, api_key, {"prompt": "Say something.", "executionMode": "cloud"}).get_json()["requestId"]
        wait_until(lambda: len(model.bodies()) == 1, "the first task to call the model")
        second = submit(client, api_key, {"prompt": "Say more.", "executionMode": "cloud"}).get_json()["requestId"]
        wait_until(lambda: poll(client, api_key, second).get_json()["progress"]["actionTrace"], "the wait")
        client.post(f"/fast/v2/remote-dispatch/responses/{second}/cancel", headers={"x-api-key": api_key})
        body = wait_for_status(client, api_key, second, timeout=20)  # while the model is still busy
        assert not release.is_set() and body["response"]["text"] == "cancelled"
        release.set()
        assert wait_for_status(client, api_key, first)["status"] == "success"
    finally:
        release.set()
        worker.stop()
        model.close()


@pytest.fixture(scope="module")
def pages():
    server = PageServer(PAGES, statuses={"/gone": 404})
    yield server
    server.close()


def test_an_error_page_is_a_failed_step_and_no_success(client, api_key, worker, pages, app):
    for mode in ("cloud", "cloud_browser"):
        request_id, body = run(client, api_key, {"prompt": f"/Operator\ngo to {pages.url('/gone')}\nextract h1",
                                                 "executionMode": mode}, statuses=("success", "error"))
        assert body["status"] == "error", (mode, body)
        assert "HTTP 404" in body["response"]["text"]
        first = body["response"]["actionTrace"][0]
        assert first["failed"] is True and "HTTP 404" in first["error"]
    # The cloud_browser task downloaded nothing: it leaves no folder behind.
    assert not os.path.exists(os.path.join(app.config["DOWNLOAD_DIR"], "remote-dispatch", request_id))
    _, body = run(client, api_key, {"prompt": f"/Operator\ngo to {pages.url('/hello')}\nextract h1",
                                    "executionMode": "cloud_browser"})
    assert (body["status"], body["response"]["text"]) == ("success", "Hello there"), body


def test_a_running_wait_shows_in_the_progress_trace(client, api_key, worker):
    request_id = submit(client, api_key, {"prompt": "wait 30\nanswer late", "executionMode": "cloud"}
                        ).get_json()["requestId"]
    try:
        wait_until(lambda: poll(client, api_key, request_id).get_json()["progress"]["actionTrace"],
                   "the wait in the progress trace")
        [entry] = poll(client, api_key, request_id).get_json()["progress"]["actionTrace"]
        assert entry["running"] is True and entry["action"].startswith("wait 30")
    finally:
        client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/cancel", headers={"x-api-key": api_key})
    body = wait_for_status(client, api_key, request_id)
    assert body["response"]["text"] == "cancelled"
    assert not any(entry.get("running") for entry in body["response"]["actionTrace"])


def test_a_plain_json_schema_is_a_response_format_in_the_api_as_in_the_console(client, api_key):
    schema = {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}
    for response_format in (schema, {"type": "jsonSchema", "jsonSchema": schema}):
        answer = submit(client, api_key, {"prompt": 'answer {"city": "Oslo"}', "executionMode": "cloud",
                                          "responseFormat": response_format})
        assert answer.status_code == 202, answer.get_json()
    refused = submit(client, api_key, {"prompt": "x", "executionMode": "cloud", "responseFormat": {"type": "banana"}})
    assert refused.status_code == 400 and "not a valid JSON Schema" in refused.get_json()["message"]


def test_the_root_sends_people_to_the_console(client):
    answer = client.get("/")
    assert answer.status_code == 302 and answer.headers["Location"].endswith("/console/")
