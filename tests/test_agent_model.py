"""The agent runtime planning with a model: a scripted OpenAI-compatible server plays it, a real worker runs."""
import base64
import json
import threading
from pathlib import Path

import pytest

from app.extensions import db
from config import local_chat
from app.models import WebhookDelivery
from app.webhooks import outbox
from tests.agent_support import CLOUD, run, stored_task
from tests.conftest import WorkerProcess, poll, submit, wait_for_status
from tests.llm_server import ScriptedModel, check, failure, is_check, text, tool_call
from tests.page_server import PageServer

MAX_STEPS = 6
# A context just large enough for the web agent's prompt and tools (thirteen, since drag and draw), a page view of
# VIEW characters and the reply: a second view does not fit whole.
CONTEXT, REPLY, VIEW = 3400, 300, 3000
SHOP = """<html><head><title>Tom & Jerry's shop</title></head><body><h1>Offers for "friends" & family</h1>
<a href="#lower" onclick="out.textContent = 'You chose the lower-case eget.'">eget</a>
<a href="#upper" onclick="out.textContent = 'You chose the capital Eget.'">Eget</a>
<button onclick="out.textContent = 'first'">Buy</button> <button onclick="out.textContent = 'second'">Buy</button>
<label for="q">Search</label> <input id="q" value='say "hi" & <bye>'>
<p id="out">Nothing chosen yet.</p></body></html>"""
# 7,000 interactive elements: each view of it is cut at the budget.
BIG = ("<html><head><title>Catalogue</title></head><body>"
       + "".join(f"<div><a href='/item/{i}'>Item {i}</a> costs {i} euros</div>" for i in range(7000))
       + "</body></html>")
# A button that says it was pressed: pressing it again changes nothing; and a form that must be sent.
PRESS = """<html><head><title>Press</title></head><body><button onclick="out.textContent = 'Pressed.'">Press me</button>
<button onclick="sent.textContent = 'Sent.'">Send</button><p id="out">Not pressed.</p><p id="sent"></p></body></html>"""
# A field whose text counts only once it is submitted.
FORM = """<html><head><title>Form</title></head><body><label for="name">Name</label> <input id="name">
<button onclick="out.textContent = 'Submitted ' + document.getElementById('name').value + '.'">Submit</button>
<p id="out">Nothing submitted.</p></body></html>"""
# The same in German, with a button that does nothing.
FORMULAR = """<html lang="de"><head><title>Formular</title></head><body><label for="name">Name</label> <input id="name">
<button>Hilfe</button>
<button onclick="out.textContent = 'Gesendet: ' + document.getElementById('name').value + '.'">Absenden</button>
<p id="out">Noch nichts gesendet.</p></body></html>"""
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model():
    server = ScriptedModel()
    yield server
    server.close()


@pytest.fixture(scope="module")
def pages():
    server = PageServer({"/article": "<html><head><title>Herons</title></head><body><nav>Menu</nav>"
                                     "<h1>The grey heron</h1><p class='lead'>A long-legged bird.</p></body></html>",
                         "/shop": SHOP, "/big": BIG, "/press": PRESS, "/form": FORM,
                         "/formular": FORMULAR})
    yield server
    server.close()


@pytest.fixture(scope="module")
def model_worker(app, model):
    # What the model sees, small enough here to be exceeded: the context, the reply, the page view; vision on.
    proc = WorkerProcess(env=model.env(MAX_STEPS=MAX_STEPS, NO_PROGRESS_REPEATS=3, LLM_CONTEXT_TOKENS=CONTEXT,
                                       LLM_MAX_TOKENS=REPLY, PAGE_VIEW_CHARS=VIEW, LLM_VISION="on"), name="model")
    yield proc
    proc.stop()




def test_general_agent_uses_its_tools_and_is_briefed(client, api_key, model, model_worker):
    model.script(tool_call("current_time"), tool_call("answer", text="It is late in Tokyo."))
    request_id, body = run(client, api_key, {
        "prompt": "What time is it?", "timeZone": "Asia/Tokyo",
        "inputVariables": {"customer": "Ada"}, "additionalContext": {"tone": "brief"},
        "chatHistory": [{"role": "user", "content": "Hi, I am Ada."}, {"role": "assistant", "content": "Hello Ada!"}],
    })
    assert body["status"] == "success", body
    assert body["response"]["output"] == {"type": "text", "content": "It is late in Tokyo."}
    assert body["response"]["text"] == "It is late in Tokyo."
    first, second = model.bodies()
    assert first["model"] == "scripted-model"
    tools = {t["function"]["name"] for t in first["tools"]}
    assert {"answer", "ask_user", "current_time", "read_attachment"} <= tools and "go_to" not in tools
    system = first["messages"][0]["content"]
    assert "Asia/Tokyo" in system and '"customer": "Ada"' in system and "tone: brief" in system
    assert [m["content"] for m in first["messages"][1:]] == ["Hi, I am Ada.", "Hello Ada!", "What time is it?"]
    observation = second["messages"][-1]
    assert observation["role"] == "tool" and "Asia/Tokyo" in observation["content"]
    trace = body["response"]["actionTrace"]
    assert trace[0]["action"] == "current time"
    # 1 action + 2 model calls of 1000 tokens at 0.1 credits per 1k tokens.
    assert body["usage"] == {"actions": 1, "credits": 1.2}
    assert trace[-1]["credits"] == 1.2


def test_a_tool_the_agent_lacks_is_reported_back_and_the_model_recovers(client, api_key, model, model_worker):
    model.script(tool_call("click", target="Sign in"), tool_call("answer", text="No browser here, so I stopped."))
    _, body = run(client, api_key, {"prompt": "Sign me in"})
    assert body["status"] == "success", body
    assert body["response"]["text"] == "No browser here, so I stopped."
    observation = model.bodies()[1]["messages"][-1]
    assert observation["role"] == "tool"
    assert "not available to the general agent" in observation["content"]


def test_web_agent_reads_pages_in_cloud_mode(client, api_key, model, pages, model_worker):
    model.script(tool_call("go_to", url=pages.url("/article")), tool_call("extract", selector="p.lead"),
                 text("The grey heron is a long-legged bird."))
    _, body = run(client, api_key, {"prompt": "/Operator What is the heron article about?"})
    assert body["status"] == "success", body
    requests = model.bodies()
    tools = {t["function"]["name"] for t in requests[0]["tools"]}
    assert {"go_to", "extract", "answer"} <= tools and "click" not in tools
    assert requests[0]["messages"][-1]["content"] == "What is the heron article about?"
    assert "The grey heron" in requests[1]["messages"][-1]["content"]
    assert requests[2]["messages"][-1]["content"] == "A long-legged bird."
    trace = body["response"]["actionTrace"]
    assert [e["action"] for e in trace[:2]] == [f"go to {pages.url('/article')}", "extract p.lead"]
    assert trace[1]["url"] == pages.url("/article")
    assert body["response"]["text"] == "The grey heron is a long-legged bird."


def test_secrets_never_reach_the_model(client, api_key, model, pages, model_worker):
    secret = "s3cr3t-Tok3n-9f8e"
    model.script(
        tool_call("go_to", url=pages.url("/echo?token=${API_TOKEN}&user=ada")),
        tool_call("extract", selector="li.param"),
        tool_call("answer", text="The page received ${API_TOKEN}."))
    request_id, body = run(client, api_key, {
        "prompt": "/Operator Open the echo page with token ${API_TOKEN} and tell me what it received.",
        "chatHistory": [{"role": "user", "content": f"My token is {secret}, keep it safe."}],
        "secretVariables": {"API_TOKEN": secret},
        "callbackUrl": "https://127.0.0.1:9/hook", "callbackSecret": "cb",
    })
    assert body["status"] == "success", body
    # The page (the tool's far end) received the real value...
    assert any(f"token={secret}" in path for path in pages.requests)
    # ...the model never did, although the page echoed it back.
    recorded = model.recorded()
    assert len(recorded) == 3
    assert not any(secret in raw for raw in recorded)
    assert "token=${API_TOKEN}" in model.bodies()[2]["messages"][-1]["content"]
    # Trace, output, stored history, webhook payload and logs show the placeholder only.
    assert secret not in json.dumps(body)
    assert body["response"]["text"] == "The page received ${API_TOKEN}."
    assert "token=${API_TOKEN}" in body["response"]["actionTrace"][0]["action"]
    assert "${API_TOKEN}" in body["response"]["actionTrace"][1]["url"]
    task = stored_task(request_id)
    assert secret not in json.dumps(task.messages) and "${API_TOKEN}" in json.dumps(task.messages)
    assert task.secrets_sealed is None  # purged when the task ended
    delivery = db.session.query(WebhookDelivery).filter_by(task_id=request_id).one()
    assert secret not in outbox.body(delivery).decode() and "${API_TOKEN}" in outbox.body(delivery).decode()
    assert secret not in Path(model_worker.log.name).read_text()


def test_structured_output_valid(client, api_key, model, model_worker):
    schema = {"type": "object", "properties": {"bird": {"type": "string"}, "legs": {"type": "integer"}},
              "required": ["bird", "legs"]}
    model.script(tool_call("answer", content={"bird": "heron", "legs": 2}))
    _, body = run(client, api_key, {"prompt": "Describe a heron.",
                                     "responseFormat": {"type": "jsonSchema", "jsonSchema": schema}})
    assert body["status"] == "success", body
    assert body["response"]["output"] == {"type": "structured", "content": {"bird": "heron", "legs": 2}}
    assert body["response"]["structuredOutput"] == {"bird": "heron", "legs": 2}
    request = model.bodies()[0]
    assert json.dumps(schema) in request["messages"][0]["content"]
    answer_tool = next(t for t in request["tools"] if t["function"]["name"] == "answer")
    assert answer_tool["function"]["parameters"]["properties"]["content"] == schema


def test_structured_output_repaired_once(client, api_key, model, model_worker):
    schema = {"type": "object", "properties": {"legs": {"type": "integer"}}, "required": ["legs"]}
    model.script(tool_call("answer", content={"legs": "two"}), text('{"legs": 2}'))
    _, body = run(client, api_key, {"prompt": "How many legs?",
                                     "responseFormat": {"type": "jsonSchema", "jsonSchema": schema}})
    assert body["status"] == "success", body
    assert body["response"]["output"] == {"type": "structured", "content": {"legs": 2}}
    repair = model.bodies()[1]["messages"][-1]
    assert repair["role"] == "tool" and "'two' is not of type 'integer'" in repair["content"]


def test_structured_output_still_invalid_is_an_error(client, api_key, model, model_worker):
    schema = {"type": "object", "properties": {"legs": {"type": "integer"}}, "required": ["legs"]}
    model.script(tool_call("answer", content={"legs": "two"}), tool_call("answer", content={"wings": 2}))
    _, body = run(client, api_key, {"prompt": "How many legs?",
                                     "responseFormat": {"type": "jsonSchema", "jsonSchema": schema}})
    assert body["status"] == "error"
    assert body["response"]["text"] == ("The answer does not match the responseFormat JSON Schema: "
                                        "'legs' is a required property.")
    assert len(model.bodies()) == 2


def test_step_budget(client, api_key, model, model_worker):
    model.script(*[tool_call("wait", seconds=i / 1000) for i in range(MAX_STEPS + 1)])
    _, body = run(client, api_key, {"prompt": "Keep waiting."})
    assert body["status"] == "error"
    assert body["response"]["text"] == f"Step limit reached: the task needed more than {MAX_STEPS} actions."
    assert body["usage"]["actions"] == MAX_STEPS


def test_no_progress_budget(client, api_key, model, model_worker):
    model.script(*[tool_call("current_time")] * 4)
    _, body = run(client, api_key, {"prompt": "What time is it?"})
    assert body["status"] == "error"
    assert body["response"]["text"] == "No progress: the action 'current time' ran 3 times in a row and was asked for again."
    assert body["usage"]["actions"] == 3


def test_conversation_continues_only_without_clear_chat(client, api_key, model, model_worker):
    model.script(text("Noted: the code word is heron."))
    first, body = run(client, api_key, {"prompt": "Remember the code word heron."})
    assert body["status"] == "success"

    model.script(text("heron"))
    _, body = run(client, api_key, {"prompt": "What was the code word?", "previousRequestId": first,
                                     "clearChat": False})
    assert body["status"] == "success"
    messages = model.bodies()[0]["messages"][1:]
    assert messages == [{"role": "user", "content": "Remember the code word heron."},
                        {"role": "assistant", "content": "Noted: the code word is heron."},
                        {"role": "user", "content": "What was the code word?"}]

    model.script(text("I don't know."))
    _, body = run(client, api_key, {"prompt": "What was the code word?", "previousRequestId": first})
    assert body["status"] == "success"
    assert model.bodies()[0]["messages"][1:] == [{"role": "user", "content": "What was the code word?"}]


def test_input_required_then_answer_then_success(client, api_key, other_key, model, model_worker):
    model.script(tool_call("ask_user", question="Which city?"))
    request_id, body = run(client, api_key, {"prompt": "Book a table for tonight."},
                            statuses=("input-required", "success", "error"))
    assert body["status"] == "input-required", body
    assert body["completedAt"] is None
    assert body["response"]["output"] == {"type": "text", "content": "Which city?"}
    hitl = body["hitlInputMetadata"]
    assert hitl["action"]["name"] == "prompt_for_user_input" and hitl["inputId"]
    assert stored_task(request_id).lease_owner is None

    url = f"/fast/v2/remote-dispatch/responses/{request_id}/input"
    assert client.post(url, json={"answer": "Lyon"}, headers={"x-api-key": other_key}).status_code == 404
    wrong = client.post(url, json={"answer": "Lyon", "inputId": "nope"}, headers={"x-api-key": api_key})
    assert wrong.status_code == 409 and wrong.get_json()["error"] == "Conflict"
    assert client.post(url, json={}, headers={"x-api-key": api_key}).status_code == 400

    model.script(tool_call("answer", text="Booked in Lyon."))
    resumed = client.post(url, json={"answer": "Lyon", "inputId": hitl["inputId"]}, headers={"x-api-key": api_key})
    assert resumed.status_code == 202 and resumed.get_json() == {"requestId": request_id}
    body = wait_for_status(client, api_key, request_id)
    assert body["status"] == "success", body
    assert body["response"]["text"] == "Booked in Lyon."
    assert body["completedAt"] is not None
    last = model.bodies()[0]["messages"]
    assert last[-2]["tool_calls"][0]["function"]["name"] == "ask_user"
    assert last[-1] == {"role": "tool", "tool_call_id": last[-2]["tool_calls"][0]["id"], "content": "Lyon"}

    again = client.post(url, json={"answer": "Paris"}, headers={"x-api-key": api_key})
    assert again.status_code == 409


def test_paused_task_continues_in_a_new_task(client, api_key, model, model_worker):
    model.script(tool_call("ask_user", question="Which city?"))
    paused, body = run(client, api_key, {"prompt": "Book a table."}, statuses=("input-required", "error"))
    assert body["status"] == "input-required"
    model.script(text("Booked in Lyon."))
    _, body = run(client, api_key, {"prompt": "Lyon, please.", "previousRequestId": paused, "clearChat": False})
    assert body["status"] == "success"
    messages = model.bodies()[0]["messages"][1:]
    assert messages[0] == {"role": "user", "content": "Book a table."}
    assert messages[1]["tool_calls"][0]["function"]["name"] == "ask_user"
    assert messages[2]["role"] == "tool" and messages[2]["tool_call_id"] == messages[1]["tool_calls"][0]["id"]
    assert messages[3] == {"role": "user", "content": "Lyon, please."}


def test_pending_task_shows_its_progress(client, api_key, model, model_worker):
    release = threading.Event()

    def held(_request):
        release.wait(30)
        return {"tool_calls": [{"name": "answer", "arguments": {"text": "done"}}]}

    model.script(tool_call("current_time"), held)
    request_id = submit(client, api_key, {"prompt": "What time is it now?", **CLOUD}).get_json()["requestId"]
    try:
        body = wait_for_status(client, api_key, request_id, statuses=("pending",))
        while not body["progress"]["actionTrace"]:
            body = poll(client, api_key, request_id).get_json()
        assert body["status"] == "pending"
        assert body["progress"]["actionTrace"][0]["action"] == "current time"
        assert body["usage"]["actions"] == 1
    finally:
        release.set()
    assert wait_for_status(client, api_key, request_id)["status"] == "success"


def test_transient_model_errors_are_retried(client, api_key, model, model_worker):
    model.script(failure(503), text("fine"))
    _, body = run(client, api_key, {"prompt": "How are you?"})
    assert body["status"] == "success", body
    assert body["response"]["text"] == "fine"
    assert len(model.recorded()) == 2


def test_a_refusing_model_ends_the_task_with_its_reason(client, api_key, model, model_worker):
    model.script(failure(401, "invalid api key"))
    _, body = run(client, api_key, {"prompt": "How are you?"})
    assert body["status"] == "error"
    assert body["response"]["text"] == "The language model refused the request (HTTP 401): invalid api key"


def _result(body):
    """The latest tool result the model received in a request."""
    return next(m["content"] for m in reversed(body["messages"]) if m["role"] == "tool")


def test_the_model_sees_the_page_after_every_action_as_written(client, api_key, model, pages, model_worker):
    model.script(tool_call("go_to", url=pages.url("/shop")), tool_call("click", target="Eget"),
                 tool_call("click", target="Buy"), tool_call("type", target="Search", text="kettle"),
                 tool_call("answer", text="done"))
    _, body = run(client, api_key, {"executionMode": "cloud_browser", "prompt": "/Operator Choose Eget."})
    assert body["status"] == "success", body
    requests = model.bodies()
    assert all(r["max_tokens"] == REPLY and r["tool_choice"] == "required" for r in requests)
    # Few tools: the page view follows every action, so no read tool.
    assert {t["function"]["name"] for t in requests[0]["tools"]} == {
        "answer", "ask_user", "ask_for_person", "wait", "go_to", "click", "type", "select", "drag", "draw", "press",
        "scroll", "extract", "go_back"}
    opened = _result(requests[1])
    assert opened.startswith(f"URL: {pages.url('/shop')}\nTitle: Tom & Jerry's shop\n")
    assert 'Offers for "friends" & family' in opened and """value="say 'hi' & <bye>\"""" in opened
    assert "Nothing chosen yet." in opened
    # The exact-case element, and what the click changed on the page.
    clicked = _result(requests[2])
    assert clicked.startswith("clicked [") and "] <a> Eget\nURL: " in clicked
    assert "You chose the capital Eget." in clicked
    # Two elements named Buy: reported with their numbers, nothing clicked.
    ambiguous = _result(requests[3])
    assert ambiguous.startswith('Several elements match "Buy": [') and "Use the element number." in ambiguous
    assert "] <input> Search\nURL: " in _result(requests[4])
    # Text as the page has it, never HTML-escaped.
    for raw in model.recorded():
        assert "&#34;" not in raw and "&amp;" not in raw and "&quot;" not in raw and "&lt;" not in raw
    # A screenshot beside each page view (LLM_VISION=on), as an OpenAI image part; never stored.
    image = requests[1]["messages"][-1]
    assert image["role"] == "user" and image["content"][1]["type"] == "image_url"
    assert base64.b64decode(image["content"][1]["image_url"]["url"].split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert len([m for m in requests[2]["messages"] if isinstance(m["content"], list)]) == 1  # the latest only


def test_the_conversation_stays_within_the_models_context(client, api_key, model, pages, model_worker):
    model.script(*[tool_call("go_to", url=pages.url("/big")), tool_call("scroll", direction="down")] * 2,
                 tool_call("go_to", url=pages.url("/shop")), tool_call("answer", text="done"))
    request_id = submit(client, api_key, {"executionMode": "cloud_browser",
                                          "prompt": "/Operator Browse the catalogue."}).get_json()["requestId"]
    body = wait_for_status(client, api_key, request_id, timeout=180)
    assert body["status"] == "success", body
    requests = model.bodies()
    view = _result(requests[1])
    assert len(view) < VIEW + 400 and "Item 0</a>" in view
    assert view.splitlines()[-1].startswith(f"… view cut at {VIEW} characters: about ")
    # Each request, as the bundled model's server would render it, fits its context with the reply's room.
    tokenizer = _tokenizer()
    for request in requests:
        prompt = local_chat.render(request["messages"], request["tools"])
        assert len(tokenizer.tokenize(prompt.encode(), add_bos=False, special=True)) + REPLY <= CONTEXT
    # Older page views are left out (the latest stays whole).
    last = requests[-1]["messages"]
    views = [m["content"] for m in last if m["role"] == "tool"]
    assert all(v.endswith("(page view left out: a newer one follows)") for v in views[:-1])
    assert views[-1].startswith(f"URL: {pages.url('/shop')}") and "Nothing chosen yet." in views[-1]


def _tokenizer():
    from llama_cpp import Llama

    from config.local_model import gguf_path

    return Llama(model_path=gguf_path(), vocab_only=True, verbose=False)


def _checks(requests):
    return [r for r in requests if is_check(r)]


def test_a_right_action_repeated_on_an_unchanged_page_ends_in_success_after_the_check(
        client, api_key, model, pages, model_worker):
    # A small model's habit: the right click, then the same click again and again, never `answer`.
    model.script(tool_call("go_to", url=pages.url("/press")), *[tool_call("click", target="Press me")] * 3,
                 check(True, "The page says Pressed."))
    prompt = f"/Operator Open {pages.url('/press')} and press the button."
    _, body = run(client, api_key, {"executionMode": "cloud_browser", "prompt": prompt})
    assert body["status"] == "success", body
    assert body["response"]["text"] == "Done: The page says Pressed."
    # The second click left the page as the first made it: the third was not run, the check was asked instead.
    assert body["usage"]["actions"] == 3
    requests = model.bodies()
    [asked] = _checks(requests)
    assert asked is requests[-1] and asked["tool_choice"] == "required" and asked["max_tokens"] < REPLY
    question = asked["messages"][-1]["content"]
    assert question.startswith(f"Task: Open {pages.url('/press')} and press the button.\n\nActions:\n- go to ")
    assert "Pressed." in question and question.endswith("Is the task done?")
    # The verdict and its reason are in the trace (its own entry and the final one); its tokens in usage.
    trace = body["response"]["actionTrace"]
    verdict = {"done": True, "reason": "The page says Pressed.", "by": "model", "tokens": 1000}
    assert trace[-2]["check"] == verdict and trace[-2]["action"] == "completion check: done (The page says Pressed.)"
    assert trace[-1]["check"] == verdict
    assert body["usage"]["credits"] == pytest.approx(3 * 1.0 + 5 * 1000 / 1000 * 0.1)
    assert not model.refusals


def test_an_answer_without_acting_on_a_named_page_is_sent_back_then_an_error(client, api_key, model, pages,
                                                                           model_worker):
    model.script(*[text("The page says hello.")] * 3)
    prompt = f"/Operator Open {pages.url('/press')} and tell me what it says."
    _, body = run(client, api_key, {"prompt": prompt})
    assert body["status"] == "error", body
    assert body["response"]["text"] == ("The task was not done: No action was taken on the page, and the task "
                                        "asks for something on a page.")
    assert body["usage"]["actions"] == 0
    requests = model.bodies()
    assert len(requests) == 3 and not _checks(requests)  # the built-in rule: no model needed to judge
    sent_back = requests[1]["messages"][-1]["content"]
    assert sent_back.startswith("Not done yet: No action was taken on the page") and "Act on the page" in sent_back
    assert body["response"]["actionTrace"][-1]["check"]["by"] == "rules"


def test_the_checks_no_keeps_the_agent_working_within_its_budget(client, api_key, model, pages, model_worker):
    model.script(tool_call("go_to", url=pages.url("/press")), tool_call("answer", text="Sent."),
                 check(False, "Nothing was sent: the page shows no Sent."),
                 tool_call("click", target="Send"), tool_call("answer", text="Sent."),
                 check(True, "The page says Sent."))
    prompt = f"/Operator Open {pages.url('/press')} and send it."
    _, body = run(client, api_key, {"executionMode": "cloud_browser", "prompt": prompt})
    assert body["status"] == "success", body
    assert body["response"]["text"] == "Sent."
    assert body["usage"]["actions"] == 2
    requests = model.bodies()
    assert len(_checks(requests)) == 2
    heard = _result(requests[3])
    assert heard == "Not done yet: Nothing was sent: the page shows no Sent. Keep working on the task, then call answer."
    checks = [e["check"] for e in body["response"]["actionTrace"] if "check" in e]
    assert [(c["done"], c["reason"]) for c in checks] == [
        (False, "Nothing was sent: the page shows no Sent."), (True, "The page says Sent."),
        (True, "The page says Sent.")]  # the last: the final entry's copy


def test_a_check_that_keeps_saying_no_ends_the_task_as_error(client, api_key, model, pages, model_worker):
    model.script(tool_call("go_to", url=pages.url("/press")),
                 *[reply for _ in range(3) for reply in (tool_call("answer", text="Done."), check(False, "No."))])
    _, body = run(client, api_key, {"executionMode": "cloud_browser",
                                    "prompt": f"/Operator Open {pages.url('/press')} and send it."})
    assert body["status"] == "error", body
    assert body["response"]["text"] == "The task was not done: No."
    assert len(_checks(model.bodies())) == 3 and body["usage"]["actions"] == 1


def test_a_repeated_click_on_an_element_the_task_does_not_name_is_sent_back_without_asking_the_model(
        client, api_key, model, pages, model_worker):
    # The small model's other habit: the wrong element, then the same click again as if done. The trace shows
    # no action on the element the task names, so no judge is needed: the model hears it, and clicks the right one.
    model.script(tool_call("go_to", url=pages.url("/press")), *[tool_call("click", target="Press me")] * 3,
                 *[tool_call("click", target="Send")] * 3, check(True, "The page says Sent."))
    prompt = f'/Operator Open {pages.url("/press")} and click the "Send" button.'
    _, body = run(client, api_key, {"executionMode": "cloud_browser", "prompt": prompt})
    assert body["status"] == "success", body["response"]
    # The second click of each left the page as it was: the third of "Press me" was not run, and that of "Send"
    # was asked about instead.
    assert body["usage"]["actions"] == 5
    requests = model.bodies()
    heard = _result(requests[4])
    assert heard == ('Not run: this action ran already and the page did not change. Not done yet: No action acted on '
                     '"Send", which the task names. Do something else: another element, another action, or answer.')
    [asked] = _checks(requests)  # only about the click on Send
    assert asked is requests[-1]
    assert '- click "Press me" → [1] <button> Press me\n- click "Send" → [2] <button> Send\n' in asked["messages"][-1]["content"]
    trace = body["response"]["actionTrace"]
    assert [e.get("target") for e in trace if e["action"].startswith("click")] == [
        "[1] <button> Press me", "[1] <button> Press me", "[2] <button> Send", "[2] <button> Send"]
    checks = [e["check"] for e in trace if "check" in e]
    assert checks[0] == {"done": False, "by": "rules", "tokens": 0,
                         "reason": 'No action acted on "Send", which the task names.'}
    assert checks[1]["done"] is True and checks[1]["by"] == "model"


def test_typing_what_the_task_asks_to_submit_is_not_done_until_it_is_submitted(
        client, api_key, model, pages, model_worker):
    model.script(tool_call("go_to", url=pages.url("/form")), tool_call("type", target="Name", text="Ada"),
                 tool_call("answer", text="Done."), tool_call("click", target="Submit"),
                 tool_call("answer", text="Submitted."), check(True, "The page says Submitted Ada."))
    prompt = f'/Operator Open {pages.url("/form")}, enter "Ada" as the name and press Submit.'
    _, body = run(client, api_key, {"executionMode": "cloud_browser", "prompt": prompt})
    assert body["status"] == "success", body["response"]
    assert body["response"]["text"] == "Submitted."
    requests = model.bodies()
    assert _result(requests[3]) == ('Not done yet: No action acted on "Submit", which the task names. Keep working '
                                    "on the task, then call answer.")
    assert len(_checks(requests)) == 1  # the model judged only the submitted form
    assert "Submitted Ada." in requests[-1]["messages"][-1]["content"]


def test_a_german_task_is_held_to_the_button_it_names_and_to_what_the_answer_expects(
        client, api_key, model, pages, model_worker):
    # No English word to read: the page's label the task names (Absenden), and the text the answer expects to see.
    model.script(tool_call("go_to", url=pages.url("/formular")), tool_call("type", target="Name", text="Ada"),
                 tool_call("answer", text="Fertig.", expect="Gesendet: Ada."), tool_call("answer", text="Fertig."),
                 tool_call("click", target="Absenden"), tool_call("answer", text="Gesendet.", expect="gesendet: ada"),
                 check(True, "Die Seite sagt Gesendet: Ada."))
    prompt = f"/Operator Öffne {pages.url('/formular')}, gib „Ada“ als Namen ein und drücke auf Absenden."
    _, body = run(client, api_key, {"executionMode": "cloud_browser", "prompt": prompt})
    assert body["status"] == "success", body["response"]
    assert body["response"]["text"] == "Gesendet."
    requests = model.bodies()
    answer = next(t for t in requests[0]["tools"] if t["function"]["name"] == "answer")
    assert set(answer["function"]["parameters"]["properties"]) == {"text", "expect"}
    assert _result(requests[3]) == ('Not done yet: The answer expects the page to show "Gesendet: Ada.", and it does '
                                    "not. Keep working on the task, then call answer.")
    assert _result(requests[4]) == ('Not done yet: No action acted on "Absenden", which the task names. Keep working '
                                    "on the task, then call answer.")
    assert len(_checks(requests)) == 1 and "Gesendet: Ada." in requests[-1]["messages"][-1]["content"]
    checks = [e["check"] for e in body["response"]["actionTrace"] if "check" in e]
    assert [c["by"] for c in checks] == ["rules", "rules", "model", "model"]


def test_an_answer_after_a_click_that_changed_nothing_is_sent_back(client, api_key, model, pages, model_worker):
    model.script(tool_call("go_to", url=pages.url("/formular")), tool_call("click", target="Hilfe"),
                 tool_call("answer", text="Abgeschickt."), tool_call("click", target="Absenden"),
                 tool_call("answer", text="Abgeschickt."), check(True, "Die Seite sagt Gesendet."))
    prompt = f"/Operator Öffne {pages.url('/formular')} und schicke das Formular ab."
    _, body = run(client, api_key, {"executionMode": "cloud_browser", "prompt": prompt})
    assert body["status"] == "success", body["response"]
    requests = model.bodies()
    assert _result(requests[3]) == ('Not done yet: The last action (click "Hilfe") changed nothing on the page. '
                                    "Keep working on the task, then call answer.")
    assert len(_checks(requests)) == 1
