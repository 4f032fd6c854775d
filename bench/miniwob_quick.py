"""A quick measure of the web agent with the bundled model on MiniWoB++ tasks (not `make eval`: in-process).

Each episode: the task page (the `miniwob` wheel's html, served on loopback) opened in a cloud_browser
environment fenced to that host, the episode started with a seed, the utterance given to the model planner
with the page it starts on, the real agent loop run (10 steps, 120 s), the reward read from the page.
    .venv/bin/python -m bench.miniwob_quick [--tasks click-test,...] [--seeds 0,1,2] [--base-url URL]
Without --base-url it starts the bundled SmolLM2-135M (config/local_model.py) on a free port.
Prints a line per episode and a per-task table; writes var/miniwob_quick.json.
"""
import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

EASY = ("click-test", "click-test-2", "click-button", "click-link", "focus-text", "enter-text", "click-dialog",
        "click-checkboxes", "choose-list", "login-user")
START = """Math.seedrandom(arguments[0]); core.EPISODE_MAX_TIME = 10 * 60 * 1000; core.startEpisodeReal();
return document.getElementById('query').textContent;"""
DONE = "return typeof WOB_DONE_GLOBAL !== 'undefined' && WOB_DONE_GLOBAL ? WOB_RAW_REWARD_GLOBAL : null;"


def serve(root):
    handler = functools.partial(type("Quiet", (SimpleHTTPRequestHandler,), {"log_message": lambda *a: None}),
                                directory=root)
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def start_model():
    from config.local_model import MODEL, server_argv, server_env
    from tests.processes import free_port

    port = free_port()
    proc = subprocess.Popen(server_argv(port, verbose=False), env={**os.environ, **server_env(port)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    import requests

    for _ in range(360):
        try:
            if requests.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).ok:
                return proc, f"http://127.0.0.1:{port}/v1", MODEL
        except requests.RequestException:
            time.sleep(0.5)
    raise SystemExit("the local model did not start")


def episode(config, llm, base, task_name, seed):
    from workers.agent.conversation import Conversation
    from workers.agent.environments import CloudBrowserEnvironment
    from workers.agent.loop import AgentLoop, Budget, RunState
    from workers.planners import Brief
    from workers.planners.openai_chat import ChatPlanner

    task = SimpleNamespace(id=f"miniwob-{uuid.uuid4().hex[:8]}", agent="web", options={}, hitl=None, trace=None,
                           api_key_id=0, prompt="")
    started = time.time()
    env = CloudBrowserEnvironment(task, lambda: False, config)
    try:
        env.browser.open(f"{base}/miniwob/{task_name}.html")
        utterance = env.browser.run_js(START.replace("arguments[0]", json.dumps(str(seed))))
        brief = Brief(prompt=utterance, agent="web", tools=env.tools())
        planner = ChatPlanner(brief, {**config, **llm})
        state = RunState(Conversation.begin([], f"{utterance}\n\n{env.first_observation()}"))
        ended = lambda: env.browser.run_js(DONE) is not None  # noqa: E731  the page scored the episode
        loop = AgentLoop(planner, env, Budget(10, 120, 3), (0, 0), state, should_stop=ended, agent="web")
        outcome = loop.run()
        reward = env.browser.run_js("return WOB_RAW_REWARD_GLOBAL") if ended() else 0
        hosts = {urlsplit(e["url"]).netloc for e in state.trace if e.get("url")}
        return {"task": task_name, "seed": seed, "reward": reward, "success": bool(reward and reward > 0),
                "steps": state.actions, "tokens": state.tokens, "seconds": round(time.time() - started, 1),
                "left_host": sorted(h for h in hosts if h and h != urlsplit(base).netloc),
                "outcome": outcome.text[:200], "actions": [e["action"] for e in state.trace[:-1]],
                "messages": state.conversation.messages}
    finally:
        env.close()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", default=",".join(EASY))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--base-url")
    parser.add_argument("--model")
    args = parser.parse_args()
    from importlib.util import find_spec

    from config.settings import load

    # The wheel's pages only (importing `miniwob` needs gymnasium, which this harness does not use).
    pages = serve(str(Path(find_spec("miniwob").submodule_search_locations[0]) / "html"))
    base = f"http://127.0.0.1:{pages.server_address[1]}"
    os.environ["EGRESS_ALLOW_HOSTS"] = urlsplit(base).netloc  # the task host, loopback though it is
    config = load()
    proc = None
    if args.base_url:
        llm = {"LLM_BASE_URL": args.base_url, "LLM_MODEL": args.model or "model"}
    else:
        proc, url, model = start_model()
        llm = {"LLM_BASE_URL": url, "LLM_MODEL": model}
    llm.update(LLM_API_KEY="", LLM_TIMEOUT_SECONDS=120, LLM_MAX_RETRIES=0)
    results = []
    try:
        for task_name in args.tasks.split(","):
            for seed in args.seeds.split(","):
                result = episode(config, llm, base, task_name, int(seed))
                results.append(result)
                print(json.dumps({k: v for k, v in result.items() if k != "messages"}), flush=True)
                Path("var").mkdir(exist_ok=True)
                Path("var/miniwob_quick.json").write_text(json.dumps(results, indent=1))  # so far
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=30)
        pages.shutdown()
    print("\n| task | success | mean reward | median s |\n|---|---|---|---|")
    for task_name in dict.fromkeys(r["task"] for r in results):
        mine = [r for r in results if r["task"] == task_name]
        print(f"| {task_name} | {sum(r['success'] for r in mine)}/{len(mine)} | "
              f"{statistics.mean(r['reward'] or 0 for r in mine):.2f} | "
              f"{statistics.median(r['seconds'] for r in mine):.0f} |")
    wins = sum(r["success"] for r in results)
    print(f"\noverall {wins}/{len(results)} = {wins / len(results):.0%}; median episode "
          f"{statistics.median(r['seconds'] for r in results):.0f} s; left the host: "
          f"{sum(bool(r['left_host']) for r in results)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
