"""The service as an MCP server (docs/mcp-server.md), through the real `mcp` client: its ClientSession over the
Streamable HTTP client transport against two real gunicorn web processes (/mcp), and over stdio through
`remote-dispatch mcp` (which calls the REST API). Tasks run on a real worker, browser tasks and a kept session on a
loopback page, with the built-in planner."""
import asyncio
import base64
import json
import os
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
import requests
from mcp import Client, ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from sqlalchemy import select

from app.extensions import db
from app.models import Task

from tests.conftest import make_key
from tests.page_server import PageServer
from tests.processes import ROOT, WebProcess, WorkerProcess

pytestmark = pytest.mark.slow

SIGN_IN = """<html><head><title>Sign in</title></head><body>
<label>Password <input type="password" id="pw"></label>
<button onclick="document.getElementById('out').textContent = 'Signed in (' + pw.value.length + ' characters)'">Sign in</button>
<p id="out"></p>
<p><a href="/report.csv">Download the report</a></p>
</body></html>"""
REPORT = b"month,total\nOctober,42\n"
COMMAND = Path(sys.executable).parent / "remote-dispatch"
TOOLS = {"run_task", "get_task", "answer_task", "cancel_task", "list_tasks", "session_create", "session_navigate",
         "session_click", "session_type", "session_read", "session_screenshot", "session_stop", "list_files",
         "read_file", "replay_script"}


@pytest.fixture(scope="module")
def service(app):
    """Two web processes (as on two machines, one VAR_DIR each) and one worker, on the test database and broker."""
    started = []
    try:
        for name in ("a", "b"):
            var = Path(os.environ["VAR_DIR"]) / f"mcp-web-{name}"
            var.mkdir(exist_ok=True)
            started.append(WebProcess(env={"VAR_DIR": str(var), "RATE_LIMIT_PLANS": json.dumps(
                {"tiny": {"requests": "3/minute", "polls": "600/minute"}})}))
        started.append(WorkerProcess(name="mcp-server"))
        yield started
    finally:
        for process in reversed(started):
            process.stop()


@pytest.fixture(scope="module")
def pages():
    server = PageServer({"/sign-in": SIGN_IN}, files={"/report.csv": (REPORT, {
        "Content-Type": "text/csv", "Content-Disposition": 'attachment; filename="report.csv"'})})
    yield server
    server.close()


@asynccontextmanager
async def over_http(web, key, bearer=False):
    headers = {"Authorization": f"Bearer {key}"} if bearer else {"x-api-key": key}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=330)) as http:
        async with streamable_http_client(web.base + "/mcp", http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def printed_config(form, web, key):
    """What `remote-dispatch mcp --print-config` prints for an LLM client's configuration file."""
    done = subprocess.run([str(COMMAND), "mcp", "--print-config", form], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "REMOTE_DISPATCH_URL": web.base, "REMOTE_DISPATCH_API_KEY": key})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["mcpServers"]["remote-dispatch"]


@asynccontextmanager
async def over_stdio(web, key):
    """`remote-dispatch mcp` as a client such as Claude Desktop launches it, from the entry --print-config printed."""
    entry = printed_config("stdio", web, key)
    # PYTHONPATH only because this worktree's code must win over the venv's editable install.
    params = StdioServerParameters(command=entry["command"], args=entry["args"],
                                   env={**entry["env"], "PYTHONPATH": str(ROOT)})
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


@asynccontextmanager
async def over_printed_http(web, key):
    """The URL form of the entry (Cursor's `url` and `headers`)."""
    entry = printed_config("http", web, key)
    async with httpx2.AsyncClient(headers=entry["headers"], timeout=httpx2.Timeout(30, read=330)) as http:
        async with streamable_http_client(entry["url"], http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def run(coroutine):
    return asyncio.run(coroutine)


def body_of(result):
    assert result.content and result.content[0].type == "text", result
    return json.loads(result.content[0].text)


async def call(session, name, arguments, steps=None):
    async def progress(count, total, message):
        steps.append(message)

    return await session.call_tool(name, arguments, progress_callback=progress if steps is not None else None)


def test_tools_listed_over_http_and_stdio(service, app):
    key = make_key("lister")

    async def listed(transport, web):
        async with transport(web, key) as session:
            return (await session.list_tools()).tools

    entry = printed_config("stdio", service[0], key)

    async def listed_by_client():
        """The package's high-level Client, which probes the 2026 era's server/discover first, then falls back."""
        params = StdioServerParameters(command=entry["command"], args=entry["args"],
                                       env={**entry["env"], "PYTHONPATH": str(ROOT)})
        async with Client(params) as client:
            return (await client.list_tools()).tools

    for tools in (run(listed(over_printed_http, service[0])), run(listed(over_stdio, service[1])),
                  run(listed_by_client())):
        assert {tool.name for tool in tools} == TOOLS
        by_name = {tool.name: tool for tool in tools}
        for tool in tools:
            assert tool.description and tool.input_schema["type"] == "object", tool
        run_task = by_name["run_task"].input_schema
        # The submit options, from the instance's own OpenAPI document.
        assert {"prompt", "executionMode", "secretVariables", "allowedDomains", "responseFormat",
                "waitSeconds"} <= set(run_task["properties"])
        assert run_task["required"] == ["prompt"] and "wait" not in run_task["properties"]


def test_a_cloud_task_with_progress_a_question_and_another_keys_refusal(service, app):
    key, other = make_key("alice"), make_key("bob")
    seen_pending = []

    async def scenario():
        steps = []

        async def progress(count, total, message):
            steps.append(message)
            # Sent while the task runs: the step is there before the task is over.
            seen_pending.append(db.session.execute(select(Task.status).where(Task.id == requests_made[0])).scalar())
            db.session.rollback()

        requests_made = []
        async with over_http(service[0], key) as session:
            started = body_of(await call(session, "run_task", {"prompt": "wait 1\nwait 3\nanswer Hello from MCP",
                                                              "executionMode": "cloud", "waitSeconds": 0}))
            requests_made.append(started["requestId"])
            done = body_of(await session.call_tool("get_task", {"requestId": started["requestId"], "waitSeconds": 60},
                                                   progress_callback=progress))
            asked = body_of(await call(session, "run_task", {"prompt": "ask What is your name?\nanswer Hello {{answer}}"}))
            answered = body_of(await call(session, "answer_task", {"requestId": asked["requestId"], "answer": "Ada"}))
            listed = body_of(await call(session, "list_tasks", {"limit": 5}))
        # Another web process, another key: the task is not there for it.
        async with over_http(service[1], other, bearer=True) as session:
            refused = await call(session, "get_task", {"requestId": done["requestId"]})
            cancel = await call(session, "cancel_task", {"requestId": done["requestId"]})
            theirs = body_of(await call(session, "list_tasks", {}))
        return started, steps, done, asked, answered, listed, refused, cancel, theirs

    started, steps, done, asked, answered, listed, refused, cancel, theirs = run(scenario())
    assert started["status"] == "pending" and started["requestId"] in started["note"]
    assert done["status"] == "success", done
    assert done["response"]["output"]["content"] == "Hello from MCP"
    assert steps == ["wait 1 s", "wait 3 s", "Hello from MCP"], steps  # each step once, in order
    assert seen_pending[0] == "pending", (steps, seen_pending)
    assert asked["status"] == "input-required" and "answer_task" in asked["note"]
    assert answered["status"] == "success" and answered["response"]["output"]["content"] == "Hello Ada", answered
    assert {t["requestId"] for t in listed["responses"]} == {done["requestId"], asked["requestId"]}
    assert refused.is_error and body_of(refused)["error"] == "Request Not Found"
    assert cancel.is_error and body_of(cancel)["error"] == "Request Not Found"
    assert theirs["responses"] == []


def test_a_browser_task_over_stdio_its_file_and_a_replay(service, app, pages):
    key, other = make_key("carol"), make_key("dave")
    host = pages.url("/").split("/")[2]
    prompt = "\n".join(["/Operator", f"go to {pages.url('/sign-in')}", 'type ${PASSWORD} into "Password"',
                        'click "Sign in"', 'click "Download the report"', "wait 1", "extract #out"])

    async def scenario():
        steps = []
        async with over_stdio(service[1], key) as session:
            done = body_of(await call(session, "run_task", {
                "prompt": prompt, "executionMode": "cloud_browser", "secretVariables": {"PASSWORD": "hunter2"},
                "allowedDomains": [host], "waitSeconds": 240}, steps))
            files = body_of(await call(session, "list_files", {"requestId": done["requestId"]}))["files"]
            read = await call(session, "read_file", {"key": files[0]["key"]}) if files else None
            replayed = body_of(await call(session, "replay_script", {
                "replayOf": done["requestId"], "secretVariables": {"PASSWORD": "correct horse"}, "waitSeconds": 240}))
        async with over_http(service[0], other) as session:
            foreign = await call(session, "read_file", {"key": files[0]["key"]}) if files else None
        return steps, done, files, read, replayed, foreign

    steps, done, files, read, replayed, foreign = run(scenario())
    assert done["status"] == "success", done
    assert "Signed in (7 characters)" in done["response"]["text"]
    assert any(pages.url("/sign-in") in step for step in steps), steps
    assert not any("hunter2" in step for step in steps)
    assert [f["filename"] for f in files] == ["report.csv"]
    assert read.content[0].text == REPORT.decode()
    assert replayed["status"] == "success", replayed
    assert "Signed in (13 characters)" in replayed["response"]["text"]
    assert foreign.is_error and body_of(foreign)["message"]


def test_a_kept_session_driven_step_by_step(service, app, pages):
    key, other = make_key("erin"), make_key("frank")

    async def scenario():
        async with over_http(service[0], key) as session:
            created = body_of(await call(session, "session_create", {"name": "mcp"}))
            window = created["browserWindowId"]
            try:
                navigated = body_of(await call(session, "session_navigate", {
                    "browserWindowId": window, "url": pages.url("/sign-in")}))
                await call(session, "session_type", {"browserWindowId": window, "selector": "#pw", "value": "abc"})
                clicked = await call(session, "session_click", {"browserWindowId": window, "text": "Sign in"})
                page = await call(session, "session_read", {"browserWindowId": window})
                shot = await call(session, "session_screenshot", {"browserWindowId": window})
                missing = await call(session, "session_click", {"browserWindowId": window, "selector": "#nowhere"})
                # The same window through the other web process, with another key.
                async with over_http(service[1], other) as theirs:
                    foreign_read = await call(theirs, "session_read", {"browserWindowId": window})
                    foreign_stop = await call(theirs, "session_stop", {"sessionId": created["sessionId"]})
            finally:
                stopped = await call(session, "session_stop", {"sessionId": created["sessionId"]})
        return navigated, clicked, page, shot, missing, foreign_read, foreign_stop, stopped

    navigated, clicked, page, shot, missing, foreign_read, foreign_stop, stopped = run(scenario())
    assert navigated["url"] == pages.url("/sign-in")
    assert not clicked.is_error, clicked
    assert "Signed in (3 characters)" in page.content[0].text
    image = shot.content[0]
    assert image.type == "image" and image.mime_type == "image/png"
    assert base64.b64decode(image.data).startswith(b"\x89PNG\r\n\x1a\n")
    assert missing.is_error and "#nowhere" in body_of(missing)["message"]
    assert foreign_read.is_error and body_of(foreign_read)["error"] == "Browser Window Not Found"
    assert foreign_stop.is_error and body_of(foreign_stop)["status"] == 404
    assert not stopped.is_error, stopped


def test_bad_arguments_and_keys(service, app):
    key = make_key("grace")

    async def scenario():
        async with over_http(service[1], key) as session:
            no_prompt = await call(session, "run_task", {"promt": "answer hi"})
            bad_mode = await call(session, "run_task", {"prompt": "answer hi", "executionMode": "moon"})
            no_window = await call(session, "run_task", {"prompt": "answer hi", "executionMode": "client"})
            no_target = await call(session, "session_click", {"browserWindowId": "w"})
            with pytest.raises(MCPError) as unknown:
                await call(session, "delete_everything", {})
        return no_prompt, bad_mode, no_window, no_target, unknown.value

    no_prompt, bad_mode, no_window, no_target, unknown = run(scenario())
    assert no_prompt.is_error and body_of(no_prompt)["error"] == "Invalid Arguments"
    assert "'prompt' is a required property" in body_of(no_prompt)["message"]
    assert "promt" in body_of(no_prompt)["message"]
    assert bad_mode.is_error and "executionMode" in body_of(bad_mode)["message"]
    # The service's own validation, its own words (as a REST caller gets them).
    assert no_window.is_error and body_of(no_window)["error"] == "Invalid Request"
    assert "browserWindowId" in body_of(no_window)["message"]
    assert no_target.is_error and body_of(no_target)["error"] == "Invalid Arguments"
    assert "delete_everything" in str(unknown)

    for headers in ({}, {"x-api-key": "rd_not_a_key"}, {"Authorization": "Bearer rd_not_a_key"}):
        refused = requests.post(service[0].base + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                headers=headers, timeout=10)
        assert refused.status_code == 401 and refused.json()["error"] == "Unauthorized", refused.text


def test_the_keys_rate_limit_counts_mcp_and_rest_calls_together(service, app):
    key = make_key("heidi", plan="tiny")  # 3 requests a minute
    for _ in range(2):
        assert requests.get(service[1].base + "/fast/v2/remote-dispatch/responses", headers={"x-api-key": key},
                            timeout=10).status_code == 200

    async def scenario():
        async with over_http(service[0], key) as session:
            return [await call(session, "list_tasks", {}) for _ in range(2)]

    third, fourth = run(scenario())
    assert not third.is_error, third
    assert fourth.is_error and body_of(fourth)["error"] == "Too Many Requests", fourth
    assert "'tiny' plan" in body_of(fourth)["message"] and body_of(fourth)["retryAfterSeconds"]
