"""A real language model in the loop: SmolLM2-135M served by llama.cpp's OpenAI-compatible server
(config/local_model.py), started here on loopback behind a recording proxy.

A 135M model is not clever, so the tests assert what must hold whatever it decides: every request the
server received was accepted, the task reaches a terminal state with a well-formed trace, usage counts
the tokens the server reported, and secrets never reach it; for the easiest prompt, the right answer.
"""
import json
import re
from urllib.parse import quote_plus

import jsonschema
import pytest

from config.local_model import MODEL
from tests.conftest import WorkerProcess, wait_for_status
from tests.llm_server import ScriptedModel, tool_call
from tests.local_model import LocalModel
from tests.page_server import PageServer
from tests.test_cloud_browser import HOME, LOGIN, no_browser_left, ours
from workers.agent.actions import STRING, Action, PlannerError, Tool, params
from workers.agent.conversation import Conversation
from workers.agent.loop import RunState
from workers.planners import Brief
from workers.planners.completion_check import MAX_TOKENS
from workers.planners.openai_chat import ChatPlanner

WAIT = 1200  # seconds; a model call takes 1 s on an idle core, far longer on a busy shared machine
pytestmark = [pytest.mark.slow, pytest.mark.timeout(WAIT + 300)]
SETTINGS = dict(MAX_STEPS=2, NO_PROGRESS_REPEATS=2, TASK_TIMEOUT_SECONDS=900, LLM_TIMEOUT_SECONDS=600,
                LLM_MAX_RETRIES=0, CREDITS_PER_ACTION=1.0, CREDITS_PER_1K_TOKENS=0.1)
TERMINAL = ("success", "error", "input-required")
CHECK_CONTEXT = 2048  # half the 4k-context the completion check must fit with a page view


@pytest.fixture(scope="module")
def model():
    server = LocalModel()
    yield server
    server.close()


@pytest.fixture
def model_worker(app, model):
    """Per test: the ask_user test first needs a worker that plans with the scripted model alone."""
    model.clear()
    proc = WorkerProcess(env=model.env(**SETTINGS), name="local-model")
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def pages():
    server = PageServer({"/heron": "<html><head><title>Herons</title></head><body>"
                                   "<h1>The grey heron</h1><p>A long-legged bird.</p></body></html>",
                         "/login": LOGIN, "/home": HOME})
    yield server
    server.close()


def assert_sound(model, body, prior_credits=0.0, prior_actions=0, prior_entries=0):
    """What holds whatever the model decided (prior_*: what the task had when it paused)."""
    exchanges = [e for e in model.recorded() if e["path"].endswith("/chat/completions")]
    assert exchanges, "the model was never asked"
    for exchange in exchanges:  # llama.cpp's server accepted every request it received
        assert exchange["status"] == 200, (exchange["status"], exchange["response"], exchange["raw"][-2000:])
    assert body["status"] in TERMINAL, body
    trace = body["response"]["actionTrace"]
    checks = [e for e in trace[:-1] if "check" in e]  # the model's completion checks have entries of their own
    resumes = [e for e in trace if e["action"].startswith("resumed in ")]  # so has a resume after an answer
    assert len(trace) == prior_entries + body["usage"]["actions"] - prior_actions + len(checks) + len(resumes) + 1, \
        trace
    for entry in trace:
        assert {"url", "action", "startTs", "endTs", "durationMs"} <= set(entry), entry
        assert entry["startTs"] <= entry["endTs"] and entry["durationMs"] >= 0
    for i, exchange in enumerate(exchanges):  # an element is named by its number: one of the latest page view's
        offered = {t["function"]["name"]: t["function"]["parameters"]["properties"].get("target") or {}
                   for t in json.loads(exchange["raw"]).get("tools") or ()}
        parameters = {t["function"]["name"]: t["function"]["parameters"]["properties"]
                      for t in json.loads(exchange["raw"]).get("tools") or ()}
        choice = exchange["response"]["choices"][0]
        for call in choice["message"].get("tool_calls") or ():
            try:
                arguments = json.loads(call["function"]["arguments"])
            except ValueError:  # e.g. the grammar's JSON cut short by max_tokens: never run, and the model hears why
                heard = f"The arguments of {call['function']['name']} are not valid JSON"
                assert heard in (exchanges[i + 1]["raw"] if i + 1 < len(exchanges) else body["response"]["text"])
                continue
            for name, schema in parameters[call["function"]["name"]].items():  # an enum's value is one offered
                if name in arguments and "enum" in schema:  # (the completion check's "yes"/"no" too)
                    assert arguments[name] in schema["enum"], (call, schema)
            if call["function"]["name"] in ("click", "type", "select"):
                target = json.loads(call["function"]["arguments"])["target"]
                assert isinstance(target, int) and 0 <= target <= 9999, call
                assert target in offered[call["function"]["name"]].get("enum", [target]), (call, offered)
    tokens = 0
    for exchange in exchanges:
        usage = exchange["response"]["usage"]
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"] > 0
        tokens += usage["total_tokens"]
    actions = body["usage"]["actions"]
    expected = round(prior_credits + (actions - prior_actions) * 1.0 + tokens / 1000 * 0.1, 4)
    assert body["usage"]["credits"] == pytest.approx(expected, abs=1e-4), (body["usage"], tokens)
    assert trace[-1]["credits"] == body["usage"]["credits"]
    return exchanges


def test_a_general_task_gets_the_right_answer(client, api_key, model, model_worker):
    request_id = _submit(client, api_key, {"prompt": "Reply with the word hello."})
    body = wait_for_status(client, api_key, request_id, TERMINAL, WAIT)
    assert_sound(model, body)
    assert body["status"] == "success", body
    assert "hello" in body["response"]["text"].lower()


def test_a_cloud_web_task_with_a_secret(client, api_key, model, model_worker, pages):
    secret = "s3cr3t-Local-5e6f"
    request_id = _submit(client, api_key, {
        "prompt": f"/Operator Open {pages.url('/heron')}?key=${{API_TOKEN}} and tell me the page title.",
        "secretVariables": {"API_TOKEN": secret}, "chatHistory": [
            {"role": "user", "content": f"My key is {secret}."}, {"role": "assistant", "content": "Noted."}]})
    body = wait_for_status(client, api_key, request_id, TERMINAL, WAIT)
    exchanges = assert_sound(model, body)
    assert "go_to" in {t["function"]["name"] for t in json.loads(exchanges[0]["raw"])["tools"]}
    for exchange in exchanges:
        assert secret not in exchange["raw"]
    assert secret not in json.dumps(body)


def test_a_structured_output_task(client, api_key, model, model_worker):
    schema = {"type": "object", "properties": {"bird": {"type": "string"}, "legs": {"type": "integer"}},
              "required": ["bird", "legs"]}
    request_id = _submit(client, api_key, {"prompt": "Name a bird and its number of legs.",
                                           "responseFormat": {"type": "jsonSchema", "jsonSchema": schema}})
    body = wait_for_status(client, api_key, request_id, TERMINAL, WAIT)
    assert_sound(model, body)
    if body["status"] == "success":
        jsonschema.validate(body["response"]["structuredOutput"], schema)
    else:  # the model's answer did not match even after its one repair: said so, not a crash
        assert body["status"] == "error" and "internal error" not in body["response"]["text"], body


def test_an_ask_user_round_trip_continues_on_the_real_model(client, api_key, app, model):
    # The 135M model rarely asks on its own: a scripted model asks, the real one carries on from there.
    scripted = ScriptedModel()
    asker = WorkerProcess(env=scripted.env(**SETTINGS), name="asker")
    try:
        scripted.script(tool_call("ask_user", question="Which city do you live in?"))
        request_id = _submit(client, api_key, {"prompt": "Tell me where I live."})
        body = wait_for_status(client, api_key, request_id, TERMINAL, WAIT)
        assert body["status"] == "input-required", body
    finally:
        asker.stop()
        scripted.close()
    prior, paused_entries = body["usage"], len(body["response"]["actionTrace"])
    model.clear()
    proc = WorkerProcess(env=model.env(**SETTINGS), name="local-model-resume")
    try:
        answered = client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/input", headers={"x-api-key": api_key},
                               json={"answer": "Lyon", "inputId": body["hitlInputMetadata"]["inputId"]})
        assert answered.status_code == 202
        body = wait_for_status(client, api_key, request_id, ("success", "error"), WAIT)
    finally:
        proc.stop()
    exchanges = assert_sound(model, body, prior_credits=prior["credits"], prior_actions=prior["actions"],
                             prior_entries=paused_entries)
    call, result = json.loads(exchanges[0]["raw"])["messages"][-2:]
    assert call["tool_calls"][0]["function"]["name"] == "ask_user" and call["content"] == ""
    assert result == {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"], "content": "Lyon"}


def test_a_cloud_browser_task_continues_on_the_real_model(client, api_key, app, model, pages):
    # The 135M model seldom opens a page on its own: a scripted model opens the login page, types the secret
    # and asks; the real model then carries on in the browser from the page views and tool results it is sent.
    assert not ours()
    secret = "Pa55-Local-Browser!7"
    settings = {**SETTINGS, "MAX_STEPS": 6}
    scripted = ScriptedModel()
    asker = WorkerProcess(env=scripted.env(**settings), name="browser-asker")
    try:
        scripted.script(tool_call("go_to", url=pages.url("/login")),
                        tool_call("type", text="${PASSWORD}", target="#p"),
                        tool_call("ask_user", question="Which button signs in?"))
        request_id = _submit(client, api_key, {
            "executionMode": "cloud_browser", "secretVariables": {"PASSWORD": secret},
            "prompt": f"/Operator Sign in on {pages.url('/login')} with the password ${{PASSWORD}} "
                      "and tell me the heading of the page you reach."})
        body = wait_for_status(client, api_key, request_id, TERMINAL, WAIT)
        assert body["status"] == "input-required", body
    finally:
        asker.stop()
        scripted.close()
    no_browser_left()  # the worker that asked is gone, and the browser it kept at the question with it
    prior, paused_entries = body["usage"], len(body["response"]["actionTrace"])
    model.clear()
    proc = WorkerProcess(env=model.env(**settings), name="local-model-browser")
    try:
        answered = client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/input", headers={"x-api-key": api_key},
                               json={"answer": "Sign in", "inputId": body["hitlInputMetadata"]["inputId"]})
        assert answered.status_code == 202
        body = wait_for_status(client, api_key, request_id, ("success", "error"), WAIT)
        log = proc.output()
    finally:
        proc.stop()
    exchanges = assert_sound(model, body, prior_credits=prior["credits"], prior_actions=prior["actions"],
                             prior_entries=paused_entries)
    first = json.loads(exchanges[0]["raw"])
    assert {"go_to", "click", "type", "select", "press", "scroll", "go_back",
            "extract"} <= {t["function"]["name"] for t in first["tools"]}  # all compiled and accepted
    # The real server accepted the browser's tool calls and page views: the login form, as numbered elements
    # (in the latest page view; the older one is left out, workers/planners/context.py).
    results = [m["content"] for m in first["messages"] if m["role"] == "tool"]
    assert results[0] == f"URL: {pages.url('/login')} (page view left out: a newer one follows)"
    assert results[1].startswith("typed into [") and "Sign in" in results[1]
    assert re.search(r"\[\d+\]<input", results[1])
    trace = body["response"]["actionTrace"]
    assert [e["action"] for e in trace[:2]] == [f"go to {pages.url('/login')}", 'type ${PASSWORD} into "#p"']
    actions = [e for e in trace if "browserSession" in e]
    assert len(actions) == body["usage"]["actions"], trace  # every action ran in the browser
    for entry in actions:  # the page the browser was on after the action (a secret in it as its placeholder)
        assert entry["url"] and "://" in entry["url"], entry
        if entry["action"].startswith(f"go to {pages.url('/')}") and not entry.get("failed"):
            assert entry["url"].split("?")[0] == entry["action"][len("go to "):].split("?")[0], entry
        if re.match(r"go to .*\$\{(?!PASSWORD\})", entry["action"]):  # a made-up placeholder: not opened
            assert entry["failed"] and "is not a secret placeholder" in entry["error"], entry
    for exchange in exchanges:
        assert secret not in exchange["raw"] and quote_plus(secret) not in exchange["raw"]
    assert secret not in json.dumps(body) and secret not in log
    no_browser_left()


def test_the_completion_check_fits_a_small_context_with_a_page_view_and_answers_yes_or_no(app, model):
    # The check as the agent loop asks it (workers/planners/completion_check.py), of the real model, sized for a
    # 2k-context model (half the 4k it must fit), after a click on a page whose view alone is about 6 times that.
    model.clear()
    prompt = "Open http://127.0.0.1:8000/press and press the button."
    planner = ChatPlanner(Brief(prompt=prompt, agent="web", tools=[]), {
        **app.config, "LLM_BASE_URL": model.base_url, "LLM_MODEL": MODEL, "LLM_CONTEXT_TOKENS": CHECK_CONTEXT,
        "LLM_TIMEOUT_SECONDS": WAIT, "LLM_MAX_RETRIES": 0})
    state = RunState(Conversation.begin([], prompt))
    view = ("clicked [1] <button> Press me\nURL: http://127.0.0.1:8000/press\nTitle: Press\n[1]<button>Press me</button>\n"
            + "".join(f"[{i}]<a>Item {i}</a> costs {i} euros\n" for i in range(2, 1000)) + "Pressed.")
    for name, args, result in (("go_to", {"url": "http://127.0.0.1:8000/press"}, "URL: http://127.0.0.1:8000/press"),
                               ("click", {"target": 1}, view)):
        action = Action(name, args, f"{name} {args}", f"call_{name}")
        state.conversation.add_call(action)
        state.conversation.add_result(action.call_id, result)
        state.trace.append({"action": action.description, "startTs": "t", "endTs": "t", "durationMs": 0})
    verdict = planner.check_done(state, "")
    [exchange] = [e for e in model.recorded() if e["path"].endswith("/chat/completions")]
    assert exchange["status"] == 200, exchange
    request = json.loads(exchange["raw"])
    assert [t["function"]["name"] for t in request["tools"]] == ["task_done"]
    assert "(cut to fit the model's context)" in request["messages"][-1]["content"]
    [call] = exchange["response"]["choices"][0]["message"]["tool_calls"]
    assert json.loads(call["function"]["arguments"])["done"] in ("yes", "no")  # the grammar kept it to the options
    assert verdict is not None and verdict.by == "model" and isinstance(verdict.done, bool)
    usage = exchange["response"]["usage"]
    assert usage["prompt_tokens"] + MAX_TOKENS <= CHECK_CONTEXT, usage  # the check, with the page view, fits
    assert verdict.tokens == usage["total_tokens"] == planner.tokens_used()


def test_a_call_cut_short_by_max_tokens_is_reported_as_cut_and_never_run(app, model):
    # What CI once met: the 135M model filled its reply with an endless selector, and max_tokens cut the
    # grammar's JSON short. The server says "length"; the planner runs nothing of it and tells the model why.
    model.clear()
    prompt = "Open the heron page."
    go_to = Tool("go_to", "Open a URL.", params(["url"], url=STRING))
    planner = ChatPlanner(Brief(prompt=prompt, agent="web", tools=[go_to]), {
        **app.config, "LLM_BASE_URL": model.base_url, "LLM_MODEL": MODEL, "LLM_MAX_TOKENS": 2,
        "LLM_TIMEOUT_SECONDS": WAIT, "LLM_MAX_RETRIES": 0})
    with pytest.raises(PlannerError, match="malformed tool calls 2 times in a row: The arguments of go_to"):
        planner.next_action(RunState(Conversation.begin([], prompt)))
    first, second = [e for e in model.recorded() if e["path"].endswith("/chat/completions")]
    for exchange in (first, second):
        [choice] = exchange["response"]["choices"]
        assert choice["finish_reason"] == "length", choice
        with pytest.raises(ValueError):
            json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"])
    assert "The arguments of go_to are not valid JSON" in second["raw"]


def test_the_arguments_grammar_keeps_raw_control_characters_out_of_strings():
    # llama-cpp-python's converter let a raw newline into a JSON string, and CI met a selector with newlines in
    # it. Asked for lines of a poem at temperature 0, the model now writes one valid JSON string.
    from llama_cpp import Llama

    from config.local_chat import arguments_grammar
    from config.local_model import gguf_path

    llm = Llama(model_path=gguf_path(), n_ctx=512, verbose=False)
    grammar = arguments_grammar({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    prompt = "<|im_start|>user\nWrite a four-line poem, one line per line.<|im_end|>\n<|im_start|>assistant\n"
    choice = llm.create_completion(prompt, max_tokens=60, temperature=0, grammar=grammar)["choices"][0]
    assert not re.search(r"[\x00-\x1f]", choice["text"]), choice
    assert choice["finish_reason"] == "length" or json.loads(choice["text"])["text"], choice


def _submit(client, api_key, body):
    from tests.conftest import submit

    reply = submit(client, api_key, {"executionMode": "cloud", **body})
    assert reply.status_code == 202, reply.get_json()
    return reply.get_json()["requestId"]
