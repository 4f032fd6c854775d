"""With a model planning, the agent prefix is gone from what the model reads (its own module: the
builtin-planner worker of test_agent_prefixes.py must not take these tasks)."""
import pytest

from tests.agent_support import run, stored_task
from tests.conftest import WorkerProcess
from tests.llm_server import ScriptedModel, tool_call

pytestmark = pytest.mark.slow


def test_the_model_never_sees_the_prefix(client, api_key):
    model = ScriptedModel()
    proc = WorkerProcess(env=model.env(), name="prefix-model", queues="tasks")
    try:
        model.script(tool_call("answer", text="done"))
        request_id, body = run(client, api_key, {"prompt": "/CoreAgentMini What time is it?"})
        assert body["status"] == "success", body
        assert stored_task(request_id).agent == "general"
        (first,) = model.bodies()
        assert first["messages"][-1] == {"role": "user", "content": "What time is it?"}
        assert "Mini" not in first["messages"][-1]["content"]
    finally:
        proc.stop()
        model.close()
