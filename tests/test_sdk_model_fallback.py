"""The model fallback of the SDK's agentic actions, with the real SDK in a kept cloud session and a scripted model:
a selector that matches nothing becomes a task for the model in the same browser (its own module: the worker of
tests/test_sdk_actions.py has no model and would take the task from the shared queue)."""
import json

import pytest

from tests.conftest import make_key
from tests.llm_server import ScriptedModel, is_check, tool_call
from tests.page_server import PageServer
from tests.sdk_support import LiveService, run_sdk
from tests.test_sdk_actions import MOUSE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def pages():
    server = PageServer({"/mouse": MOUSE})
    yield server
    server.close()


def test_with_a_model_the_agentic_fallback_runs_the_step_in_the_session(app, pages):
    model = ScriptedModel()
    live = LiveService(env=model.env(MAX_STEPS=6))
    try:
        model.script(tool_call("click", target="Target"), tool_call("answer", text="clicked"),
                     tool_call("answer", text="Target"),
                     tool_call("answer", content={"selectors": [{"id": "b", "tag_name": "button"}]}))
        key = make_key("sdk-model", plan="pro")
        result = run_sdk(live, key, f'''
            from narada import Agent, BrowserConfig, CloudBrowserEnvironment
            env = CloudBrowserEnvironment(config=BrowserConfig(interactive=False))
            await env.start()
            agent = Agent(environment=env)
            try:
                await agent.go_to_url(url={pages.url("/mouse")!r})
                clicked = await agent.agentic_selector(action={{"type": "click"}}, selectors={{"id": "gone"}},
                                                       fallback_operator_query="click the Target button")
                read = await agent.agentic_selector(action={{"type": "get_text"}}, selectors={{"id": "gone"}},
                                                    fallback_operator_query="the label of the big button")
                found = await agent.agentic_matching_selectors_finder(prompt="the buttons")
                log = await agent.execute_javascript_on_page(code="document.getElementById('log').textContent")
                emit(clicked=clicked.value, read=read.value, found=found, log=log)
            finally:
                await env.close()
        ''')
        if not result.values:
            print(live.logs())
        assert result.value == {"clicked": None, "read": "Target", "found": [{"id": "b", "tag_name": "button"}],
                                "log": "click "}
        asked = [raw for raw in model.recorded() if not is_check(json.loads(raw))]  # the agent's turns, not its checks
        assert "click the Target button" in asked[0] and "the label of the big button" in asked[2]
        assert "the buttons" in asked[3]
    finally:
        live.stop()
        model.close()
