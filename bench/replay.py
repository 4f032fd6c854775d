"""Benchmark: a 10-step flow model-planned (the scripted model server; the local SmolLM2 when it can) vs. the
same flow replayed from its script (no model) vs. the same steps in raw Selenium: wall time and model tokens."""
import json
import os
import time

from bench import common
from bench.browser import PageServer, median, raw_run, window
from bench.common import Row

SECTION = "7 replay"
RUNS = common.scaled(5, 1)
RAW = "raw Selenium, same pages and steps"
LOCAL_TIMEOUT = 600
PROMPT = ("/Operator Open {base}/start, read the heading, open the form, enter the name Ada, choose blue, "
          "scroll down, save, read the heading, go back and open the table.")


def scripted_replies(base):
    """The 10 steps of bench/browser.py's flow, as the model's tool calls."""
    from tests.llm_server import tool_call

    return [tool_call("go_to", url=f"{base}/start"), tool_call("extract", selector="h1"),
            tool_call("click", target="Form"), tool_call("type", text="Ada", target="Name"),
            tool_call("select", option="blue", target="Color"), tool_call("scroll", direction="down"),
            tool_call("click", target="Save"), tool_call("extract", selector="h1"), tool_call("go_back"),
            tool_call("click", target="Table"), tool_call("answer", text="done")]


def run_task(stack, pages, body, timeout=180):
    """Submit, wait. Returns (request id, claimed → finished s, 10-step window s, model tokens, status, error)."""
    mark = pages.mark()
    response = stack.submit(json.dumps({"executionMode": "cloud_browser", **body}))
    response.raise_for_status()
    request_id = response.json()["requestId"]
    stack.wait_finished([request_id], timeout)
    status, error, started, completed, usage = stack.sql(
        "SELECT status, coalesce(error, ''), extract(epoch FROM started_at), extract(epoch FROM completed_at), "
        "usage::text FROM tasks WHERE id = :id", id=request_id)[0]
    usage = json.loads(usage or "{}")
    config = stack.flask_app.config
    tokens = ((usage.get("credits", 0) - usage.get("actions", 0) * config["CREDITS_PER_ACTION"])
              / config["CREDITS_PER_1K_TOKENS"] * 1000) if config["CREDITS_PER_1K_TOKENS"] else None
    return (request_id, float(completed or 0) - float(started or 0), window(pages.since(mark))[0],
            round(tokens) if tokens is not None else None, status, error)


def measure(stack):
    from tests.llm_server import ScriptedModel

    if "tasks_worker" in stack.__dict__:  # another benchmark's worker (no model) would take these tasks
        stack.stop(stack.__dict__.pop("tasks_worker"))
    pages, model = PageServer(), ScriptedModel()
    worker = stack.start(common.start_celery("replay-worker", "workers", "tasks", env=model.env(MAX_STEPS=15)))
    try:
        planned, replayed, raw, requests = [], [], [], 0
        raw_run(pages)  # warm-up (disk cache, fonts)
        for _ in range(RUNS):  # interleaved, so all three see the same machine load
            model.script(*scripted_replies(pages.base))
            first = run_task(stack, pages, {"prompt": PROMPT.format(base=pages.base)})
            if first[4] != "success":
                return [common.not_present(SECTION, "model-planned 10-step flow", first[5][:200])]
            planned.append(first)
            model.script()
            again = run_task(stack, pages, {"replayOf": first[0]})
            requests += len(model.bodies())
            if again[4] != "success":
                return [common.not_present(SECTION, "replayed 10-step flow", again[5][:200])]
            replayed.append(again)
            raw.append(raw_run(pages))
        pairs = median(r[2] / w[1] for r, w in zip(replayed, raw) if r[2] and w[1])  # as bench/browser.py's
        note = "goal ≤ 1.2×" + (f"; median of the pairs' ratios {pairs:.2f}" if pairs else "")
        rows = [
            Row(SECTION, "10 steps replayed, first page → last page (s)", median(r[2] for r in replayed), RAW,
                median(r[1] for r in raw), note),
            Row(SECTION, "replayed task, claimed → finished (s)", median(r[1] for r in replayed),
                "model-planned (scripted model server: no thinking time)", median(p[1] for p in planned)),
            Row(SECTION, "model tokens of a replay", sum(r[3] or 0 for r in replayed) / len(replayed),
                "model-planned (scripted server: 1000 a call)", median(p[3] for p in planned),
                f"{requests} requests reached the model during replays"),
        ]
        stack.stop(worker)
        # About 10 minutes on 2 CPUs: a full run only (BENCH_REPLAY_LOCAL=1 asks for it in a quick one).
        if os.environ.get("BENCH_REPLAY_LOCAL", "0" if common.QUICK else "1") != "0":
            rows += local_model_rows(stack, pages, median(r[1] for r in replayed))
        return rows
    finally:
        pages.close()
        model.close()


def local_model_rows(stack, pages, replay_seconds):
    """The same flow planned by SmolLM2-135M (llama.cpp's server), once; a failure is reported as such."""
    try:
        from config.local_model import MODEL, server_argv, server_env
    except ImportError as exc:
        return [common.not_present(SECTION, "local-model-planned 10-step flow", f"no local model: {exc}")]
    port = common.free_port()
    server = stack.start(common.Proc("local-model", server_argv(port, verbose=False), env=server_env(port),
                                     timeout=180, ready=lambda: common.http_ok(f"http://127.0.0.1:{port}/v1/models")))
    worker = stack.start(common.start_celery("replay-local-worker", "workers", "tasks", env={
        "LLM_BASE_URL": f"http://127.0.0.1:{port}/v1", "LLM_API_KEY": "local", "LLM_MODEL": MODEL,
        "MAX_STEPS": "15", "TASK_TIMEOUT_SECONDS": str(LOCAL_TIMEOUT)}))
    try:
        began = time.monotonic()
        _, seconds, _, tokens, status, error = run_task(stack, pages, {"prompt": PROMPT.format(base=pages.base)},
                                                        timeout=LOCAL_TIMEOUT + 60)
        if status != "success":
            return [Row(SECTION, "local-model-planned 10-step flow (s)", time.monotonic() - began,
                        note=f"SmolLM2-135M did not complete it ({status}: {error[:120]}); no replay ratio")]
        return [Row(SECTION, "replayed task ÷ local-model-planned, claimed → finished (s)", replay_seconds,
                    f"SmolLM2-135M planned ({tokens} tokens)", seconds, "goal ≤ 0.1×")]
    finally:
        stack.stop(worker)
        stack.stop(server)


if __name__ == "__main__":
    common.main(measure)
