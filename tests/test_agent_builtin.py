"""The agent runtime with no model: the built-in planner's steps, docs/agent.md's examples, questions, secrets."""
import json
import re
from pathlib import Path

import pytest
from sqlalchemy import update

from app.extensions import db
from app.models import StoredFile, Task, WebhookDelivery, now_plus
from app.webhooks import outbox
from tests.agent_support import run, stored_task
from tests.conftest import ROOT, wait_for_status
from tests.page_server import PageServer
from workers import sweeps

pytestmark = pytest.mark.slow

EXAMPLE = re.compile(
    r"```\n(?P<prompt>.*?)\n```\n→ `(?P<status>[a-z-]+)`(?: in `(?P<mode>[a-z_]+)`)?(?:: `(?P<output>[^`]*)`)?"
    r"(?:; answering `(?P<answer>\{[^`]*\})` then gives `(?P<then>[a-z-]+)`: `(?P<final>[^`]*)`)?", re.S)


def readme_examples():
    guide = (ROOT / "docs" / "agent.md").read_text()
    section = guide[guide.index("## Built-in planner"):guide.index("## With a language model")]
    return [m.groupdict() for m in EXAMPLE.finditer(section)]


def _unescape(text):
    return text.replace("\\n", "\n") if text is not None else None


@pytest.fixture(scope="module")
def pages():
    server = PageServer({"/login": "<html><body><h1>Sign in</h1><form><input name=email></form></body></html>"})
    yield server
    server.close()




def test_the_readme_has_examples_of_every_outcome():
    examples = readme_examples()
    assert len(examples) >= 5
    assert {e["status"] for e in examples} == {"success", "error", "input-required"}
    assert {e["mode"] for e in examples} == {None, "cloud_browser"}


@pytest.mark.parametrize("example", readme_examples(), ids=lambda e: e["prompt"].splitlines()[-1][:30])
def test_readme_example_runs_as_documented(client, api_key, worker, example):
    request_id, body = run(client, api_key, {"prompt": example["prompt"], "executionMode": example["mode"] or "cloud"},
                            statuses=("success", "error", "input-required"))
    assert body["status"] == example["status"], body
    if example["output"] is not None:
        assert body["response"]["output"] == {"type": "text", "content": _unescape(example["output"])}
    if example["answer"]:
        url = f"/fast/v2/remote-dispatch/responses/{request_id}/input"
        answered = client.post(url, json=json.loads(example["answer"]), headers={"x-api-key": api_key})
        assert answered.status_code == 202
        body = wait_for_status(client, api_key, request_id)
        assert body["status"] == example["then"]
        assert body["response"]["output"] == {"type": "text", "content": _unescape(example["final"])}


def test_web_agent_reads_a_page_without_a_browser(client, api_key, worker, pages):
    _, body = run(client, api_key, {"prompt": f"/Operator go to {pages.url('/login')}\nextract h1"})
    assert body["status"] == "success", body
    assert body["response"]["text"] == "Sign in"
    go, extract, final = body["response"]["actionTrace"]
    assert go["action"] == f"go to {pages.url('/login')}" and go["url"] == pages.url("/login")
    assert extract["action"] == "extract h1"
    assert final["action"] == "Sign in" and final["credits"] == 2.0
    assert body["usage"] == {"actions": 2, "credits": 2.0}


def test_browser_steps_in_cloud_mode_end_as_error_saying_why(client, api_key, worker, pages):
    _, body = run(client, api_key, {
        "prompt": f"/Operator\ngo to {pages.url('/login')}\ntype ${{EMAIL}} into \"email\"\npress Enter",
        "secretVariables": {"EMAIL": "ada@example.com"}})
    assert body["status"] == "error"
    assert body["response"]["text"] == (
        "The step 'type' needs a browser, and executionMode 'cloud' has none: it can only open pages and "
        "read them (go to, extract). Use executionMode 'cloud_browser' or 'client' for browser steps.")
    assert "ada@example.com" not in json.dumps(body)


def test_a_failing_step_ends_the_task(client, api_key, worker, pages):
    _, body = run(client, api_key, {"prompt": f"/Operator go to {pages.url('/login')}\nextract .missing"})
    assert body["status"] == "error"
    assert body["response"]["text"] == f"Nothing on {pages.url('/login')} matches '.missing'."


def test_a_task_that_fails_after_reading_still_returns_what_it_read(client, api_key, worker, pages):
    secret = "Zq-88-secret-value"
    _, body = run(client, api_key, {
        "prompt": f"/Operator\ngo to {pages.url('/echo?code=${CODE}')}\nextract li.param\nclick \"Next\"",
        "executionMode": "cloud_browser", "secretVariables": {"CODE": secret}})
    assert body["status"] == "error", body
    read = [entry for entry in body["response"]["actionTrace"] if entry["action"] == "extract li.param"]
    assert [entry.get("result") for entry in read] == ["code=${CODE}"]  # redacted like the answer would be
    assert secret not in json.dumps(body)


def test_web_steps_are_not_for_the_general_agent(client, api_key, worker, pages):
    _, body = run(client, api_key, {"prompt": f"go to {pages.url('/login')}"})
    assert body["status"] == "error"
    assert "start the prompt with /Operator" in body["response"]["text"]


def test_general_agent_tells_the_time_in_the_task_zone(client, api_key, worker):
    _, body = run(client, api_key, {"prompt": "current time", "timeZone": "Asia/Kolkata"})
    assert body["status"] == "success", body
    assert body["response"]["text"].endswith("(Asia/Kolkata, UTC+0530)")


def test_general_agent_reads_an_attachment_of_its_own_key_only(client, api_key, other_key, worker):
    from app.models import ApiKey

    owners = {k.prefix: k.id for k in db.session.query(ApiKey)}
    db.session.add_all([
        StoredFile(key="notes-1", api_key_id=owners[api_key[:10]], filename="notes.txt",
                   content_type="text/plain", data=b"Buy milk."),
        StoredFile(key="theirs-1", api_key_id=owners[other_key[:10]], filename="secret.txt",
                   content_type="text/plain", data=b"Not yours."),
    ])
    db.session.commit()
    _, body = run(client, api_key, {"prompt": "read attachment", "attachments": [{"key": "notes-1"}]})
    assert body["status"] == "success", body
    assert body["response"]["text"] == "notes.txt:\nBuy milk."
    _, body = run(client, api_key, {"prompt": "read attachment theirs-1"})
    assert body["status"] == "error"
    assert body["response"]["text"] == "No attachment with key 'theirs-1' in this task (attachments: none)."


def test_secrets_reach_the_page_and_nothing_else(client, api_key, worker, pages):
    secret = "Zq-77-secret-value"
    request_id, body = run(client, api_key, {
        "prompt": "/Operator\ngo to " + pages.url("/echo?code=${CODE}") + "\nextract li.param",
        "secretVariables": {"CODE": secret}})
    assert body["status"] == "success", body
    assert f"/echo?code={secret}" in pages.requests
    assert body["response"]["text"] == "code=${CODE}"
    assert secret not in json.dumps(body)
    task = stored_task(request_id)
    assert secret not in json.dumps([task.messages, task.trace, task.response])
    assert task.secrets_sealed is None
    assert secret not in Path(worker.log.name).read_text()


def test_structured_answer_is_validated(client, api_key, worker):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    fmt = {"responseFormat": {"type": "jsonSchema", "jsonSchema": schema}}
    _, body = run(client, api_key, {"prompt": 'answer {"n": 3}', **fmt})
    assert body["status"] == "success", body
    assert body["response"]["output"] == {"type": "structured", "content": {"n": 3}}
    assert body["response"]["structuredOutput"] == {"n": 3}
    _, body = run(client, api_key, {"prompt": 'answer {"n": "three"}', **fmt})
    assert body["status"] == "error"
    assert body["response"]["text"] == ("The answer does not match the responseFormat JSON Schema: "
                                        "'three' is not of type 'integer' (at n).")


def test_input_variables_fill_the_steps(client, api_key, worker):
    _, body = run(client, api_key, {"prompt": "answer Hello {{name}}, {{ missing }}",
                                    "inputVariables": {"name": "Ada"}})
    assert body["response"]["text"] == "Hello Ada, {{ missing }}"


def test_question_resumes_the_same_task_with_trace_and_usage_carried_on(client, api_key, worker):
    request_id, body = run(client, api_key, {"prompt": "wait 0\nask Which colour?\nwait 0",
                                             "callbackUrl": "https://127.0.0.1:9/hook"},
                           statuses=("input-required", "error"))
    assert body["status"] == "input-required", body
    delivery = db.session.query(WebhookDelivery).filter_by(task_id=request_id).one()
    assert delivery.event_status == "input-required"
    assert json.loads(outbox.body(delivery).decode())["response"] == {"text": "Which colour?"}
    assert body["usage"]["actions"] == 1
    assert body["response"]["actionTrace"][-1]["action"] == "input-required: Which colour?"
    task = stored_task(request_id)
    assert task.lease_owner is None and task.input_deadline_at is not None
    url = f"/fast/v2/remote-dispatch/responses/{request_id}/input"
    assert client.post(url, json={"answer": "Blue"}, headers={"x-api-key": api_key}).status_code == 202
    body = wait_for_status(client, api_key, request_id)
    assert body["status"] == "success", body
    assert body["response"]["text"] == "waited 0 s"
    assert body["usage"]["actions"] == 2
    actions = [e["action"] for e in body["response"]["actionTrace"]]
    assert actions == ["wait 0 s", "input-required: Which colour?", "wait 0 s", "waited 0 s"]
    assert [("credits" in e) for e in body["response"]["actionTrace"]] == [False, False, False, True]


def test_unanswered_question_ends_as_error_after_the_input_timeout(client, api_key, worker):
    request_id, body = run(client, api_key, {"prompt": "ask Anyone there?"}, statuses=("input-required", "error"))
    assert body["status"] == "input-required"
    assert sweeps.expire_input_requests() == 0  # not due yet (INPUT_TIMEOUT_SECONDS)
    db.session.execute(update(Task).where(Task.id == request_id).values(input_deadline_at=now_plus(-1)))
    db.session.commit()
    assert sweeps.expire_input_requests() == 1
    body = wait_for_status(client, api_key, request_id)
    assert body["status"] == "error"
    assert body["completedAt"] is not None
    assert body["response"]["text"] == "Nobody answered the task's question in time; the task was not completed."
    answer = client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/input", json={"answer": "me"},
                         headers={"x-api-key": api_key})
    assert answer.status_code == 409
