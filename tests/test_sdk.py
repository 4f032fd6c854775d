"""The official `narada` SDK, unchanged, against the live service: LambdaEnvironment and Agent.run."""
import pytest

from tests.conftest import make_key
from tests.mcp_server import WEATHER_TOKEN, McpServers
from tests.sdk_support import LiveService, run_sdk

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def service(app):
    live = LiveService()
    yield live
    live.stop()


@pytest.fixture(scope="module")
def mcp():
    servers = McpServers()
    yield servers
    servers.stop()


def sdk(service, key, body, **kwargs):
    result = run_sdk(service, key, body, **kwargs)
    if not result.values:
        print(service.logs())
    return result


def test_sdk_config_names_the_oldest_supported_sdk(client, api_key):
    body = client.get("/fast/v2/sdk/config", headers={"x-api-key": api_key}).get_json()
    assert body == {"packages": {"narada": {"min_required_version": "0.2.0"}}}


def test_agent_run_with_text_output(service, api_key):
    result = sdk(service, api_key, '''
        from narada import Agent, AgentKind, LambdaEnvironment
        env = LambdaEnvironment(session_name="sdk text")
        try:
            response = await Agent(environment=env, kind=AgentKind.CORE_AGENT).run("answer Hello from the SDK")
            emit(text=response.text, status=response.status, output=response.output.model_dump(),
                 usage=response.usage.model_dump(),
                 request_id=response.request_id, session=env.session_id, trace=len(response.action_trace or []))
        finally:
            await env.close()
    ''')
    value = result.value
    assert value["status"] == "success" and value["text"] == "Hello from the SDK"
    assert value["output"] == {"type": "text", "content": "Hello from the SDK"}
    assert set(value["usage"]) == {"actions", "credits"} and value["trace"] == 1  # the answer's entry
    from app.models import CloudSession, Task
    from app.extensions import db
    db.session.rollback()
    task = db.session.get(Task, value["request_id"])
    # /coreAgent chose the general agent and never reached the planner; the task ran in the env's session.
    assert task.agent == "general" and task.cloud_session_id == value["session"]
    assert db.session.get(CloudSession, value["session"]).status == "ended"  # env.close() stopped it


def test_agent_run_with_an_output_schema(service, api_key):
    result = sdk(service, api_key, '''
        from pydantic import BaseModel
        from narada import Agent, AgentKind, LambdaEnvironment

        class City(BaseModel):
            name: str
            population: int

        env = LambdaEnvironment()
        try:
            response = await Agent(environment=env, kind=AgentKind.CORE_AGENT_MINI).run(
                'answer {"name": "Oslo", "population": 709000}', output_schema=City)
            city = response.structured_output
            emit(status=response.status, type=type(city).__name__, name=city.name, population=city.population)
        finally:
            await env.close()
    ''')
    assert result.value == {"status": "success", "type": "City", "name": "Oslo", "population": 709000}


def test_agent_run_with_an_attachment_uploaded_through_the_presigned_post(service, api_key, tmp_path):
    notes = tmp_path / "meeting-notes.txt"
    notes.write_text("Decision: ship the kept browser sessions on Friday.\n")
    result = sdk(service, api_key, f'''
        from narada import Agent, AgentKind, LambdaEnvironment
        env = LambdaEnvironment()
        try:
            with open({str(notes)!r}, "rb") as attachment:
                response = await Agent(environment=env, kind=AgentKind.CORE_AGENT).run(
                    "read attachment", attachment=attachment)
            emit(status=response.status, text=response.text)
        finally:
            await env.close()
    ''')
    assert result.value == {"status": "success",
                            "text": "meeting-notes.txt:\nDecision: ship the kept browser sessions on Friday.\n"}


def test_agent_run_with_mcp_servers_and_secret_variables(service, api_key, mcp):
    secret = "s3cr3t-value-8842"
    result = sdk(service, api_key, f'''
        from narada import Agent, AgentKind, LambdaEnvironment
        from narada_core.models import McpServer
        env = LambdaEnvironment()
        servers = [
            McpServer(url={mcp.url("weather")!r}, label="weather", description="Forecasts",
                      authentication={{"type": "bearer-token", "bearerToken": {WEATHER_TOKEN!r}}}),
            McpServer(url={mcp.url("legacy")!r}, label="legacy", authentication={{"type": "none"}},
                      selectedTools=["count_characters"]),
        ]
        try:
            agent = Agent(environment=env, kind=AgentKind.CORE_AGENT)
            forecast = await agent.run('use weather.forecast with {{"city": "Oslo"}}', mcp_servers=servers)
            counted = await agent.run('use legacy.count_characters with {{"text": "${{CODE}}"}}',
                                      mcp_servers=servers, secret_variables={{"CODE": {secret!r}}})
            emit(forecast=forecast.text, counted=counted.text, status=counted.status,
                 everything=str(counted.model_dump()))
        finally:
            await env.close()
    ''')
    value = result.value
    assert value["forecast"] == "Forecast for Oslo: sunny, 21 C"
    # The tool received the secret's value (17 characters, not the 7 of "${CODE}"), which the SDK never saw back.
    assert value["status"] == "success" and value["counted"] == f"{len(secret)} characters"
    assert secret not in value["everything"] and secret not in result.stdout + result.stderr
    assert any(h.get("authorization") == f"Bearer {WEATHER_TOKEN}" for h in mcp.received_headers())


def test_an_error_task_gives_the_sdk_a_response_it_can_parse(service, api_key):
    result = sdk(service, api_key, '''
        from narada import Agent, AgentKind, LambdaEnvironment
        env = LambdaEnvironment()
        try:
            response = await Agent(environment=env, kind=AgentKind.CORE_AGENT).run(
                "Please summarise my inbox in a haiku")
            emit(status=response.status, text=response.text, output=response.output.model_dump(),
                 usage=response.usage.model_dump())
        finally:
            await env.close()
    ''')
    value = result.value
    assert value["status"] == "error"
    assert "LLM_MODEL" in value["text"] and value["output"]["content"] == value["text"]
    assert value["usage"] == {"actions": 0, "credits": 0.0}


def test_on_input_required_gets_the_question_and_the_answer_resumes_the_task(service, api_key):
    result = sdk(service, api_key, '''
        import aiohttp
        from narada import Agent, AgentKind, LambdaEnvironment
        base, headers = os.environ["NARADA_API_BASE_URL"], {"x-api-key": os.environ["NARADA_API_KEY"]}
        asked = []

        async def answer(metadata):
            asked.append({"input_id": metadata.input_id, "prompt": metadata.action.prompt_message,
                          "variables": [v.name for v in metadata.action.variables]})
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{base}/remote-dispatch/responses?status=input-required",
                                    headers=headers) as listed:
                    waiting = (await listed.json())["responses"][0]["requestId"]
                async with http.post(f"{base}/remote-dispatch/responses/{waiting}/input", headers=headers,
                                     json={"inputId": metadata.input_id, "answer": "Ada"}) as answered:
                    answered.raise_for_status()

        env = LambdaEnvironment()
        try:
            response = await Agent(environment=env, kind=AgentKind.CORE_AGENT).run(
                "ask What is your name?", on_input_required=answer)
            emit(status=response.status, text=response.text, asked=asked)
        finally:
            await env.close()
    ''')
    value = result.value
    assert value["status"] == "success" and value["text"] == "Ada"
    assert len(value["asked"]) == 1
    assert value["asked"][0]["prompt"] == "What is your name?" and value["asked"][0]["variables"] == ["answer"]


def test_a_wrong_key_is_a_clear_sdk_error(service):
    result = sdk(service, "rd_not-a-key", '''
        from narada import Agent, AgentKind, LambdaEnvironment
        env = LambdaEnvironment()
        try:
            await Agent(environment=env, kind=AgentKind.CORE_AGENT).run("answer hi")
        except Exception as exc:
            emit(error=type(exc).__name__, message=str(exc))
    ''')
    assert "401" in result.value["message"] and "Invalid API key" in result.value["message"]


def test_another_keys_session_is_not_found_for_the_sdk(service, api_key):
    owner = make_key("owner")
    created = sdk(service, owner, '''
        from narada import LambdaEnvironment
        env = LambdaEnvironment()
        await env.start()
        emit(session=env.session_id)
    ''').value
    try:
        result = sdk(service, api_key, f'''
            from narada import Agent, AgentKind, RemoteBrowserEnvironment
            env = RemoteBrowserEnvironment(browser_window_id="unused", cloud_browser_session_id={created["session"]!r})
            try:
                await Agent(environment=env, kind=AgentKind.CORE_AGENT).run("answer hi")
            except Exception as exc:
                emit(message=str(exc))
        ''')
        assert "404" in result.value["message"] and "No cloud browser session" in result.value["message"]
    finally:
        import requests
        stopped = requests.post(service.api_base + "/cloud-browser/stop-cloud-browser-session",
                                headers={"x-api-key": owner}, json={"session_id": created["session"]}, timeout=30)
        assert stopped.json()["success"] is True


def test_a_stopped_session_is_a_clear_sdk_error(service, api_key):
    result = sdk(service, api_key, """
        from narada import Agent, AgentKind, LambdaEnvironment
        env = LambdaEnvironment()
        agent = Agent(environment=env, kind=AgentKind.CORE_AGENT)
        first = await agent.run("answer before the stop")
        await env.close()
        try:
            await agent.run("answer after the stop")
        except Exception as exc:
            emit(first=first.text, message=str(exc))
    """)
    assert result.value["first"] == "before the stop"
    assert "409" in result.value["message"] and "has ended (complete)" in result.value["message"]
