"""The SDK's agent prefixes: `/Operator`, `/OperatorMini` (web agent), `/coreAgent`,
`/CoreAgentMini` (general agent). The prefix picks the agent and never reaches the planner."""
import pytest

from tests.agent_support import run, stored_task

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("prefix, agent", [
    ("/Operator", "web"), ("/OperatorMini", "web"), ("/coreAgent", "general"), ("/CoreAgentMini", "general"),
    ("", "general"),
])
def test_every_sdk_prefix_picks_its_agent_and_is_stripped(client, api_key, worker, prefix, agent):
    request_id, body = run(client, api_key, {"prompt": f"{prefix} answer Mini is not a step".strip()})
    assert body["status"] == "success", body
    assert body["response"]["text"] == "Mini is not a step"
    assert stored_task(request_id).agent == agent


def test_mini_prefix_on_its_own_line_leaves_only_the_steps(client, api_key, worker):
    _, body = run(client, api_key, {"prompt": "/OperatorMini\nanswer first line is the step"})
    assert body["status"] == "success", body
    assert [entry["action"] for entry in body["response"]["actionTrace"]] == ["first line is the step"]


def test_a_word_that_only_starts_like_a_prefix_is_no_prefix(client, api_key, worker):
    request_id, body = run(client, api_key, {"prompt": "/Operators answer hi"})
    assert stored_task(request_id).agent == "general"
    assert body["status"] == "error"  # "/Operators answer hi" is not a step the built-in planner knows
