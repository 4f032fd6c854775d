"""Benchmark 6: the model planner's own time per step (around the model call) ÷ the model call itself,
with the local model (SmolLM2-135M on llama.cpp's server, config/local_model.py)."""
import statistics
import time

import httpx2

from bench import common
from bench.common import Row

STEPS = common.scaled(8, 3)
PAGE = ("The grey heron is a long-legged wading bird of the heron family, Ardeidae, native throughout "
        "temperate Europe and Asia and also parts of Africa. ") * 8


class Task:
    """What the environment reads of a task: a web task in cloud mode, no attachments."""

    agent, execution_mode, options, api_key_id = "web", "cloud", {}, 0


def measure(stack):
    from config.local_model import MODEL, server_argv, server_env
    from workers.agent.actions import Action
    from workers.agent.conversation import Conversation
    from workers.agent.environments import HttpPageEnvironment
    from workers.agent.loop import RunState
    from workers.planners import Brief
    from workers.planners.openai_chat import ChatPlanner

    port = common.free_port()
    server = stack.start(common.Proc("local-model", server_argv(port), env=server_env(port), timeout=180,
                                     ready=lambda: common.http_ok(f"http://127.0.0.1:{port}/v1/models")))
    brief = Brief(prompt="Open http://127.0.0.1:9/heron and tell me what the page says about herons.", agent="web",
                  tools=HttpPageEnvironment(Task()).tools(), secret_names=["API_TOKEN"],
                  variables={"customer": "Ada"})
    planner = ChatPlanner(brief, {"LLM_MODEL": MODEL, "LLM_BASE_URL": f"http://127.0.0.1:{port}/v1",
                                  "LLM_API_KEY": "", "LLM_TIMEOUT_SECONDS": 600, "LLM_MAX_RETRIES": 0})
    # Three nested timings per step: next_action (ours), the SDK's create() inside it, and the HTTP
    # exchange with the model server inside that (the model call itself).
    exchanges = []

    class TimedTransport(httpx2.HTTPTransport):
        def handle_request(self, request):
            started = time.perf_counter()
            response = super().handle_request(request)
            response.read()
            exchanges.append(time.perf_counter() - started)
            return response

    planner.client = planner.client.with_options(http_client=httpx2.Client(transport=TimedTransport()))
    create = planner.client.chat.completions.create
    calls = []

    def timed_create(**kwargs):
        started = time.perf_counter()
        try:
            return create(**kwargs)
        finally:
            calls.append(time.perf_counter() - started)

    planner.client.chat.completions.create = timed_create
    state = RunState(Conversation.begin([], brief.prompt))
    ours, sdk, model, tokens = [], [], [], 0
    for step in range(STEPS + 1):  # the first step warms the server's prompt cache up and is not counted
        calls.clear()
        exchanges.clear()
        planner._queue = []  # every step asks the model
        started = time.perf_counter()
        action = planner.next_action(state)
        total = time.perf_counter() - started
        tokens += planner.tokens_used()
        if step:
            ours.append(total - sum(calls))
            sdk.append(sum(calls) - sum(exchanges))
            model.append(sum(exchanges))
        # The step's result, as the loop records it, so the conversation grows like a real task's.
        state.conversation.add_call(Action("go_to", {"url": f"http://127.0.0.1:9/heron/{step}"}, "go to",
                                           f"call_bench_{step}"))
        state.conversation.add_result(f"call_bench_{step}", f"Herons page {step}\n{PAGE}")
        common.say(f"planner step {step}: {action.name}, model {sum(exchanges) * 1000:.0f} ms, "
                   f"SDK {(sum(calls) - sum(exchanges)) * 1000:.2f} ms, ours {(total - sum(calls)) * 1000:.2f} ms")
    stack.stop(server)
    ms = lambda values: statistics.median(values) * 1000  # noqa: E731
    baseline = "the model call: HTTP exchange with SmolLM2-135M on llama.cpp's server"
    note = f"median of {STEPS} steps, {tokens} tokens in {STEPS + 1} calls"
    return [
        Row("6 planner", "planner time per step around the model call (ms)", ms(ours), baseline, ms(model), note=note),
        Row("6 planner", "planner + openai SDK time per step around the HTTP exchange (ms)",
            ms([a + b for a, b in zip(ours, sdk)]), baseline, ms(model)),
    ]


if __name__ == "__main__":
    common.main(measure)
