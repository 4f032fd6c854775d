"""MCP tools offered to a model (the scripted OpenAI-compatible server): namespaced names, filtering,
traced calls, and credentials that never reach the model."""
import json
import re

import pytest

from tests.agent_support import run, stored_task
from tests.conftest import WorkerProcess
from tests.llm_server import ScriptedModel, text, tool_call
from tests.mcp_server import CRM_KEY, WEATHER_TOKEN, McpServers

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mcp():
    servers = McpServers()
    yield servers
    servers.stop()


@pytest.fixture(scope="module")
def model():
    server = ScriptedModel()
    yield server
    server.close()


@pytest.fixture(scope="module")
def model_worker(app, model, mcp):
    proc = WorkerProcess(env=model.env(MAX_STEPS=6, MCP_TIMEOUT_SECONDS=5), name="mcp-model")
    yield proc
    proc.stop()


def servers(mcp):
    return [
        {"url": mcp.url("weather"), "label": "weather", "description": "Weather forecasts",
         "authentication": {"type": "bearer-token", "bearerToken": WEATHER_TOKEN}, "selectedTools": ["forecast"]},
        {"url": mcp.url("crm"), "label": "crm", "description": None, "selectedTools": None,
         "authentication": {"type": "custom-headers", "customHeaders": [{"key": "X-Crm-Key", "value": CRM_KEY}]}},
    ]


@pytest.mark.parametrize("prompt", ["Is Ada's weather good?", "/Operator Is Ada's weather good?"],
                         ids=["general", "web"])
def test_the_model_calls_namespaced_mcp_tools_and_never_sees_credentials(client, api_key, mcp, model,
                                                                         model_worker, prompt):
    model.script(tool_call("crm__lookup_customer", email="ada@example.com"),
                 tool_call("weather__forecast", city="London"),
                 text("Ada is a gold customer; London will be sunny."))
    request_id, body = run(client, api_key, {"prompt": prompt, "mcpServers": servers(mcp)})
    assert body["status"] == "success", body
    assert body["response"]["output"]["content"] == "Ada is a gold customer; London will be sunny."

    first, second, third = model.bodies()
    offered = {t["function"]["name"]: t["function"] for t in first["tools"]}
    assert "weather__forecast" in offered and "crm__lookup_customer" in offered and "crm__slow_report" in offered
    assert "weather__alerts" not in offered  # selectedTools
    assert all(re.match(r"^[a-zA-Z0-9_-]{1,64}$", name) for name in offered)
    assert "Weather forecasts" in offered["weather__forecast"]["description"]
    assert offered["weather__forecast"]["parameters"]["properties"]["city"]["type"] == "string"
    assert "Ada Lovelace" in second["messages"][-1]["content"]
    assert third["messages"][-1]["content"] == "Forecast for London: sunny, 21 C"

    trace = body["response"]["actionTrace"]
    assert trace[0]["action"] == 'use crm.lookup_customer with {"email": "ada@example.com"}'
    assert json.loads(trace[0]["result"])["plan"] == "gold"
    assert trace[1]["result"] == "Forecast for London: sunny, 21 C"

    for raw in model.recorded():
        assert WEATHER_TOKEN not in raw and CRM_KEY not in raw
    task = stored_task(request_id)
    stored = json.dumps([task.options, task.trace, task.messages, task.response])
    assert WEATHER_TOKEN not in stored and CRM_KEY not in stored
    assert WEATHER_TOKEN not in model_worker.output() and CRM_KEY not in model_worker.output()


def test_a_call_against_the_tools_schema_goes_back_to_the_model(client, api_key, mcp, model, model_worker):
    model.script(tool_call("weather__forecast"), text("I could not get the forecast."))
    _, body = run(client, api_key, {"prompt": "Weather?", "mcpServers": servers(mcp)[:1]})
    assert body["status"] == "success", body
    observation = model.bodies()[1]["messages"][-1]
    # Checked against the server's own input schema before anything is sent to it.
    assert observation["role"] == "tool"
    assert "do not match its parameters: 'city' is a required property" in observation["content"]
    assert body["usage"]["actions"] == 0


def test_a_server_refusing_the_credentials_ends_the_task_before_the_model_is_asked(client, api_key, mcp, model,
                                                                                    model_worker):
    model.script(text("never used"))
    bad = servers(mcp)[:1]
    bad[0]["authentication"]["bearerToken"] = "stolen-or-stale"
    _, body = run(client, api_key, {"prompt": "Weather?", "mcpServers": bad})
    assert body["status"] == "error"
    assert "MCP server 'weather'" in body["response"]["output"]["content"]
    assert "refused the credentials (HTTP 401)" in body["response"]["output"]["content"]
    assert model.bodies() == []
