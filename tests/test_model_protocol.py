"""The chat-completions protocol as strict servers hold it (the scripted server refuses what llama.cpp's
refuses): several calls per reply, malformed calls, empty replies, stored history, grammar-safe schemas."""
import json

import pytest
import requests
from llama_cpp.llama_grammar import json_schema_to_gbnf

from app.extensions import db
from tests.agent_support import run, stored_task
from tests.conftest import WorkerProcess, wait_for_status
from tests.llm_server import ScriptedModel, protocol_problem, raw_call, text, tool_call, tool_calls
from workers.agent.actions import Tool
from workers.planners import Brief
from workers.planners.openai_chat import NUDGE, ChatPlanner

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model():
    server = ScriptedModel()
    yield server
    server.close()


@pytest.fixture(scope="module")
def model_worker(app, model):
    proc = WorkerProcess(env=model.env(MAX_STEPS=6), name="protocol-model")
    yield proc
    proc.stop()


@pytest.fixture(autouse=True)
def _no_refusals(request):
    yield
    if "model" in request.fixturenames:
        assert request.getfixturevalue("model").refusals == []


def test_several_calls_in_one_reply_run_in_order_and_answer_as_one_message(client, api_key, model, model_worker):
    model.script(tool_calls(tool_call("current_time"), tool_call("wait", seconds=0)),
                 tool_call("answer", text="done"))
    _, body = run(client, api_key, {"prompt": "Time, then wait.", "timeZone": "Asia/Tokyo"})
    assert body["status"] == "success", body
    assert [e["action"] for e in body["response"]["actionTrace"][:-1]] == ["current time", "wait 0 s"]
    assert body["usage"]["actions"] == 2
    first, second = model.bodies()
    assistant, time_result, wait_result = second["messages"][-3:]
    assert assistant["role"] == "assistant" and assistant["content"] == ""  # never null, never absent
    ids = [call["id"] for call in assistant["tool_calls"]]
    assert [call["function"]["name"] for call in assistant["tool_calls"]] == ["current_time", "wait"]
    assert (time_result["tool_call_id"], wait_result["tool_call_id"]) == tuple(ids)
    assert "Asia/Tokyo" in time_result["content"] and wait_result["content"] == "waited 0 s"


def test_malformed_calls_go_back_to_the_model_and_the_task_goes_on(client, api_key, model, model_worker):
    model.script(raw_call("current_time", "{not json"),
                 tool_call("current_time"),
                 tool_calls(tool_call("wait", seconds=0), tool_call("wait")),
                 tool_call("wait", seconds=0),
                 tool_call("wait", seconds="soon"),
                 tool_call("answer", text="recovered"))
    _, body = run(client, api_key, {"prompt": "What time is it?"})
    assert body["status"] == "success", body
    assert body["response"]["text"] == "recovered"
    assert body["usage"]["actions"] == 2  # nothing of a malformed reply runs
    bodies = model.bodies()
    bad_json = bodies[1]["messages"][-2:]
    assert bad_json[0]["tool_calls"][0]["function"]["arguments"] == "{}"  # JSON again, for servers that re-read it
    assert "not valid JSON" in bad_json[1]["content"] and "{not json" in bad_json[1]["content"]
    first, second = bodies[3]["messages"][-2:]
    assert first["content"].startswith("Not run: another tool call of the same reply was malformed")
    assert second["content"] == ("Not run: the arguments of wait do not match its parameters: "
                                 "'seconds' is a required property.")
    assert bodies[5]["messages"][-1]["content"] == ("Not run: the arguments of wait do not match its parameters: "
                                                    "'soon' is not of type 'number' (at seconds).")


def test_a_second_malformed_reply_in_a_row_ends_the_task(client, api_key, model, model_worker):
    model.script(*[raw_call("wait", "[1, 2]")] * 2)
    _, body = run(client, api_key, {"prompt": "Wait."})
    assert body["status"] == "error"
    assert body["response"]["text"].startswith("The language model made malformed tool calls 2 times in a row: "
                                               "The arguments of wait must be a JSON object")
    # The one repair turn carried the exact problem.
    assert model.bodies()[1]["messages"][-1]["content"] == "The arguments of wait must be a JSON object, not [1, 2]"
    assert body["usage"] == {"actions": 0, "credits": 0.2}  # the tokens of the two replies still count


def test_a_failed_call_is_not_run_again(client, api_key, model, model_worker):
    model.script(*[tool_call("read_attachment", key="notes")] * 3)
    _, body = run(client, api_key, {"prompt": "Read my notes."})
    assert body["status"] == "error"
    assert body["response"]["text"] == "No progress: the failed action 'read attachment notes' was tried again."
    assert body["usage"]["actions"] == 1
    told = model.bodies()[2]["messages"][-1]["content"]
    assert told.startswith("Not run: this exact call failed already (No attachment with key 'notes' in this task")
    assert told.endswith("Do something else: another element, another action, or answer.")


def test_an_empty_reply_is_nudged_and_text_is_the_answer(client, api_key, model, model_worker):
    model.script(text(""), text("hello"))
    _, body = run(client, api_key, {"prompt": "Reply with the word hello."})
    assert body["status"] == "success", body
    assert body["response"]["text"] == "hello"
    nudged = model.bodies()[1]["messages"]
    assert nudged[-1]["role"] == "user" and nudged[-1]["content"].endswith(NUDGE)
    assert nudged[-2]["role"] != "user"  # joined to the prompt: turns still alternate


def test_a_history_stored_with_null_content_is_sent_with_a_string(client, api_key, model, model_worker):
    model.script(tool_call("ask_user", question="Which city?"))
    request_id, body = run(client, api_key, {"prompt": "Book a table."}, statuses=("input-required", "error"))
    assert body["status"] == "input-required", body
    task = stored_task(request_id)  # as an earlier build stored it
    task.messages = [dict(m, content=None) if m.get("tool_calls") else m for m in task.messages]
    db.session.commit()
    model.script(text("Booked in Lyon."))
    url = f"/fast/v2/remote-dispatch/responses/{request_id}/input"
    client.post(url, json={"answer": "Lyon", "inputId": body["hitlInputMetadata"]["inputId"]},
                headers={"x-api-key": api_key})
    body = wait_for_status(client, api_key, request_id)
    assert body["status"] == "success", body
    call, answer = model.bodies()[0]["messages"][-2:]
    assert call["content"] == "" and answer == {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"],
                                                "content": "Lyon"}


HARD_SCHEMA = {  # what callers and MCP servers send that grammar converters refuse as is
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"leg": {"type": "object", "properties": {"side": {"enum": ["left", "right"]}}}},
    "properties": {
        "code": {"type": "string", "pattern": "^\\p{Ll}+$"},  # RE2 runs it (submit takes it); llama.cpp refuses
        "legs": {"type": "array", "items": {"$ref": "#/$defs/leg"}},
        "extra": {"description": "anything at all"},
    },
    "required": ["code", "legs"],
}


def compiles(schema):
    try:
        json_schema_to_gbnf(json.dumps(schema))
        return True
    except Exception:  # noqa: BLE001 (ValueError, AssertionError, KeyError: whatever the converter raises)
        return False


def test_offered_tool_schemas_compile_into_grammars():
    mcp_tool = Tool("crm__find", "Find a record.", {"type": "object", "properties": {
        "query": {"title": "Query"}, "filters": {"type": "object", "additionalProperties": {"title": "Value"}}}})
    brief = Brief(prompt="x", agent="general", tools=[Tool("answer", "Finish.", {"type": "object", "properties": {
        "content": HARD_SCHEMA}, "required": ["content"]}), mcp_tool], response_schema=HARD_SCHEMA)
    planner = ChatPlanner(brief, {"LLM_MODEL": "m", "LLM_TIMEOUT_SECONDS": 1, "LLM_MAX_RETRIES": 0})
    # As written they fail in llama.cpp's converter (the scripted server would refuse the request)...
    assert not compiles({"type": "object", "properties": {"content": HARD_SCHEMA}})
    assert not compiles(mcp_tool.parameters)
    # ...as offered they compile, and the reference still points at its definition.
    for tool in planner.tools:
        assert compiles(tool["function"]["parameters"]), tool
    answer = planner.tools[0]["function"]["parameters"]
    # (The definitions sit at the parameters' root: llama.cpp cannot follow a recursive one nested deeper.)
    assert answer["properties"]["content"]["properties"]["legs"]["items"] == {"$ref": "#/$defs/leg"}
    assert answer["$defs"]["leg"]["properties"]["side"] == {"enum": ["left", "right"]}
    # Arguments are still checked against the full schema.
    assert planner._arguments("crm__find", '{"query": 1, "filters": {}}') == ({"query": 1, "filters": {}}, None)


def test_a_structured_task_with_a_hard_schema_is_accepted(client, api_key, model, model_worker):
    answer = {"code": "ab", "legs": [{"side": "left"}]}
    model.script(tool_call("answer", content=answer))
    _, body = run(client, api_key, {"prompt": "Describe.",
                                     "responseFormat": {"type": "jsonSchema", "jsonSchema": HARD_SCHEMA}})
    assert body["status"] == "success", body
    assert body["response"]["structuredOutput"] == answer


@pytest.mark.parametrize("messages, problem", [
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}], "valid string"),
    ([{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "c1", "content": "x"}], "no pending call"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "x"}], "has no attribute 'content'"),
    ([{"role": "robot", "content": "hi"}], "unknown role"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "user", "content": "next"}], "no tool message answering them"),
], ids=["null content", "unpaired result", "absent content", "unknown role", "unanswered call"])
def test_the_scripted_server_refuses_what_strict_servers_refuse(model, messages, problem):
    assert problem in protocol_problem({"model": "m", "messages": messages})
    reply = requests.post(model.base_url + "/chat/completions", json={"model": "m", "messages": messages}, timeout=5)
    assert reply.status_code == 400 and problem in reply.json()["error"]["message"]
    model.refusals.clear()
