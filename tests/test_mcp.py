"""MCP tool servers through the built-in planner's `use <label>.<tool> with {json}` step, against real
MCP servers on loopback (Streamable HTTP behind a bearer token and a custom header, and an SSE one)."""
import pytest

from app.extensions import db
from app.models import Task
from tests.agent_support import run, stored_task
from tests.conftest import WorkerProcess, submit
from tests.mcp_server import CRM_KEY, WEATHER_TOKEN, McpServers

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def mcp():
    servers = McpServers()
    yield servers
    servers.stop()


@pytest.fixture(scope="module")
def mcp_worker(app, mcp):
    proc = WorkerProcess(env={"MCP_TIMEOUT_SECONDS": "3"}, name="mcp")
    yield proc
    proc.stop()


def weather(mcp, token=WEATHER_TOKEN, **extra):
    return {"url": mcp.url("weather"), "label": "weather", "description": "Forecasts",
            "authentication": {"type": "bearer-token", "bearerToken": token}, "selectedTools": None, **extra}


def crm(mcp, key=CRM_KEY, **extra):
    return {"url": mcp.url("crm"), "label": "crm", "description": None,
            "authentication": {"type": "custom-headers", "customHeaders": [{"key": "X-Crm-Key", "value": key}]},
            **extra}


def test_a_step_calls_a_tool_behind_a_bearer_token(client, api_key, mcp, mcp_worker):
    request_id, body = run(client, api_key, {
        "prompt": 'use weather.forecast with {"city": "Oslo"}', "mcpServers": [weather(mcp)]})
    assert body["status"] == "success", body
    assert body["response"]["output"]["content"] == "Forecast for Oslo: sunny, 21 C"
    call = body["response"]["actionTrace"][0]
    assert call["action"] == 'use weather.forecast with {"city": "Oslo"}'
    assert call["result"] == "Forecast for Oslo: sunny, 21 C"
    assert any(h.get("authorization") == f"Bearer {WEATHER_TOKEN}" for h in mcp.received_headers())
    # Sealed at rest: the stored task keeps the authentication type only.
    task = stored_task(request_id)
    assert task.options["mcpServers"][0]["authentication"] == {"type": "bearer-token"}
    row = str([task.options, task.trace, task.messages, task.response, task.mcp_sealed])
    assert WEATHER_TOKEN not in row
    assert WEATHER_TOKEN not in mcp_worker.output()


def test_custom_headers_and_both_agents(client, api_key, mcp, mcp_worker):
    _, body = run(client, api_key, {
        "prompt": '/Operator use crm.lookup_customer with {"email": "ada@example.com"}', "mcpServers": [crm(mcp)]})
    assert body["status"] == "success", body
    assert '"name": "Ada Lovelace"' in body["response"]["output"]["content"]
    assert any(h.get("x-crm-key") == CRM_KEY for h in mcp.received_headers())


def test_one_session_per_server_for_the_whole_task(client, api_key, mcp, mcp_worker):
    before = len(mcp.received_headers())
    _, body = run(client, api_key, {
        "prompt": "\n".join(f'use weather.forecast with {{"city": "City {n}"}}' for n in range(4)),
        "mcpServers": [weather(mcp)]})
    assert body["status"] == "success", body
    methods = [h.get("mcp-method") for h in mcp.received_headers()[before:]]
    # Connected and listed once for the task, then four calls on that session.
    assert methods.count("tools/call") == 4
    assert methods.count("tools/list") == 1, methods


def test_wrong_bearer_token_ends_the_task_naming_the_server(client, api_key, mcp, mcp_worker):
    _, body = run(client, api_key, {
        "prompt": 'use weather.forecast with {"city": "Oslo"}', "mcpServers": [weather(mcp, token="wrong-token-123")]})
    assert body["status"] == "error"
    message = body["response"]["output"]["content"]
    assert "MCP server 'weather'" in message and "refused the credentials (HTTP 401)" in message
    assert "wrong-token-123" not in str(body)


def test_wrong_custom_header_ends_the_task_naming_the_server(client, api_key, mcp, mcp_worker):
    _, body = run(client, api_key, {"prompt": "use crm.lookup_customer with {\"email\": \"a@b.c\"}",
                                    "mcpServers": [crm(mcp, key="not-the-key")]})
    assert body["status"] == "error"
    assert "MCP server 'crm'" in body["response"]["output"]["content"]
    assert "refused the credentials" in body["response"]["output"]["content"]


def test_selected_tools_filter_what_the_task_can_use(client, api_key, mcp, mcp_worker):
    _, body = run(client, api_key, {"prompt": 'use weather.alerts with {"region": "North"}',
                                    "mcpServers": [weather(mcp, selectedTools=["forecast"])]})
    assert body["status"] == "error"
    assert "No MCP tool 'weather.alerts'" in body["response"]["output"]["content"]
    assert "weather.forecast" in body["response"]["output"]["content"]
    _, body = run(client, api_key, {"prompt": 'use weather.alerts with {"region": "North"}',
                                    "mcpServers": [weather(mcp, selectedTools=["alerts"])]})
    assert body["status"] == "success" and body["response"]["output"]["content"] == "No alerts for North"


def test_unreachable_server_and_timeout_end_the_task_naming_the_server(client, api_key, mcp, mcp_worker):
    from tests.processes import free_port

    _, body = run(client, api_key, {"prompt": "use down.anything", "mcpServers": [
        {"url": f"http://127.0.0.1:{free_port()}/mcp", "label": "down", "authentication": {"type": "none"}}]})
    assert body["status"] == "error"
    assert "MCP server 'down'" in body["response"]["output"]["content"]
    assert "could not be reached" in body["response"]["output"]["content"]
    _, body = run(client, api_key, {"prompt": "use crm.slow_report", "mcpServers": [crm(mcp)]})
    assert body["status"] == "error"
    assert "MCP server 'crm'" in body["response"]["output"]["content"]
    assert "did not answer within 3 s" in body["response"]["output"]["content"]


def test_older_servers_are_reached_over_sse(client, api_key, mcp, mcp_worker):
    _, body = run(client, api_key, {"prompt": 'use legacy.echo with {"text": "hi"}', "mcpServers": [
        {"url": mcp.url("legacy"), "label": "legacy", "authentication": None, "selectedTools": None}]})
    assert body["status"] == "success", body
    assert body["response"]["output"]["content"] == "echo: hi"


@pytest.mark.parametrize("server, problem", [
    ({"url": "ftp://x/mcp", "authentication": {"type": "none"}}, "http:// or https://"),
    ({"url": "http://127.0.0.1/mcp", "authentication": {"type": "bearer-token"}}, "bearerToken is required"),
    ({"url": "http://127.0.0.1/mcp", "authentication": {"type": "custom-headers", "customHeaders": None}},
     "customHeaders"),
    ({"url": "http://127.0.0.1/mcp", "authentication": {"type": "custom-headers",
                                                        "customHeaders": [{"key": "Bad Header", "value": "v"}]}},
     "not an HTTP header name"),
    ({"url": "http://127.0.0.1/mcp", "authentication": {"type": "oauth"}}, "none, bearer-token, custom-headers"),
    ({"url": "http://user:pw@127.0.0.1/mcp"}, "must not carry credentials"),
])
def test_submit_refuses_malformed_servers(client, api_key, server, problem):
    response = submit(client, api_key, {"prompt": "hi", "executionMode": "cloud", "mcpServers": [server]})
    assert response.status_code == 400
    assert response.get_json()["error"] == "Invalid Request"
    assert problem in response.get_json()["message"]


def test_submit_accepts_the_sdks_explicit_nulls(client, api_key):
    response = submit(client, api_key, {"prompt": "hi", "executionMode": "cloud", "mcpServers": [
        {"url": "http://127.0.0.1:9/mcp", "label": None, "description": None, "authentication": None,
         "selectedTools": None},
        {"url": "http://127.0.0.1:9/mcp", "label": "Support Desk", "authentication": {"type": "none"}}]})
    assert response.status_code == 202, response.get_json()
    task = db.session.get(Task, response.get_json()["requestId"])
    assert [s["namespace"] for s in task.options["mcpServers"]] == ["mcp1", "Support_Desk"]


def test_server_urls_must_be_public_addresses(app, client, api_key, monkeypatch):
    monkeypatch.setitem(app.config, "ALLOW_PRIVATE_URLS", False)
    response = submit(client, api_key, {"prompt": "hi", "executionMode": "cloud", "mcpServers": [
        {"url": "http://127.0.0.1:9/mcp", "authentication": {"type": "none"}}]})
    assert response.status_code == 400
    assert "non-public address" in response.get_json()["message"]


@pytest.fixture(scope="module")
def strict_mcp_worker(app, mcp):
    """No ALLOW_PRIVATE_URLS: only the weather server's host:port is allowed (EGRESS_ALLOW_HOSTS)."""
    allowed = mcp.url("weather").split("/")[2]
    proc = WorkerProcess(env={"MCP_TIMEOUT_SECONDS": "3", "ALLOW_PRIVATE_URLS": "false",
                              "EGRESS_ALLOW_HOSTS": allowed}, name="mcp-strict")
    yield proc
    proc.stop()


def test_connections_go_through_the_egress_policy(client, api_key, mcp, strict_mcp_worker):
    from tests.test_egress import RecordingServer

    _, body = run(client, api_key, {
        "prompt": 'use weather.forecast with {"city": "Oslo"}', "mcpServers": [weather(mcp)]})
    assert body["status"] == "success", body  # the allowed host, through the pinned transport
    canary = RecordingServer("127.0.0.1")
    try:
        _, body = run(client, api_key, {"prompt": 'use canary.anything with {}', "mcpServers": [
            {"url": canary.url("/mcp"), "label": "canary", "authentication": {"type": "none"}}]})
        assert body["status"] == "error" and "non-public address (127.0.0.1)" in body["response"]["text"], body
        assert canary.requests == []
    finally:
        canary.close()
