"""`make eval`: MiniWoB++ episodes through the public API (kept cloud session, /Operator task, reward read from the page).

Each episode: a kept cloud browser session; the task page opened in it and the episode started with a seed
(`/extension-actions`: go_to_url, execute_javascript_on_page); the page's utterance submitted as an `/Operator`
task in that session, fenced to the MiniWoB host (`allowedDomains`), with the planner under test; then the
reward read from the page (success = raw reward > 0, as BrowserGym counts it). The service is our own
instance (web, worker, beat) on its own database and vhost, as the benchmarks run (bench/common.py).

    python -m bench.miniwob [--tasks easy|all|a,b] [--seeds 3] [--planner model|builtin|steps] ... (--help)

`--language de` runs the same episodes with the task texts translated by a fixed table (bench/translations/de.json):
the prompt and the page's own copy of the task (MiniWoB's #query) say the translation, so no English task text is
left for the agent or its completion check to read.
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
# Our own database, vhost and logs (before bench.common reads them).
os.environ.setdefault("BENCH_DB", "remote_dispatch_eval")
os.environ.setdefault("BENCH_VHOST", "rd_eval")
os.environ.setdefault("BENCH_LOG_DIR", str(ROOT / "var" / "eval"))

from bench import common, translate, truth  # noqa: E402
from bench.miniwob_steps import PROGRAMS  # noqa: E402
from bench.model_proxy import RecordingProxy  # noqa: E402

EASY = ("click-test", "click-test-2", "click-button", "click-link", "focus-text", "enter-text", "click-dialog",
        "click-checkboxes", "choose-list", "login-user")
API = "/fast/v2"

# Start the episode as MiniWoB's own Python environment does (seeded, its timer out of the way), then keep the
# page as the episode ends it: core.endEpisode would show the START cover, whose click starts a new episode and
# resets the reward.
START = """Math.seedrandom(%(seed)s);
core.EPISODE_MAX_TIME = %(max_ms)d;
core.startEpisodeReal();
core.startEpisode = function () {};
return core.getUtterance();"""
# The page's own copy of the task text, replaced by its translation (a JSON string).
QUERY = "document.getElementById('query').textContent = %s; return core.getUtterance();"
REWARD = """return {raw: WOB_RAW_REWARD_GLOBAL, reward: WOB_REWARD_GLOBAL, done: WOB_DONE_GLOBAL,
                 reason: WOB_REWARD_REASON == null ? null : String(WOB_REWARD_REASON), url: location.href};"""


def html_dir():
    """The wheel's pages, found without importing it (its __init__ needs gymnasium, which we do not install)."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("MiniWoB++ is not installed: pip install --no-deps -r requirements-eval.txt")
    return Path(list(spec.submodule_search_locations)[0]) / "html"


def all_tasks():
    return sorted(p.stem for p in (html_dir() / "miniwob").glob("*.html"))


class Pages:
    """The MiniWoB++ pages over loopback HTTP; `requests` counts what was asked of it."""

    def __init__(self):
        root, pages = str(html_dir()), self

        class Handler(SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=root, **kwargs)

            def log_message(self, *args):
                pass

            def do_GET(self):
                pages.requests += 1
                super().do_GET()

        self.requests = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, task):
        return f"http://{self.host}/miniwob/{task}.html"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class Api:
    """What a user of the API does: HTTP with an API key."""

    def __init__(self, base, key):
        self.base, self.key = base, key

    def call(self, method, path, body=None, timeout=120):
        reply = common.http().request(method, self.base + API + path, json=body, timeout=timeout,
                                      headers={"x-api-key": self.key})
        if reply.status_code >= 400:
            raise RuntimeError(f"{method} {path} → {reply.status_code}: {reply.text[:500]}")
        return reply.json()

    def action(self, window, name, **args):
        """One `/extension-actions` action in the session's window; its result data."""
        reply = self.call("POST", "/extension-actions", {
            "action": {"name": name, **args}, "actionExecutionId": str(uuid.uuid4()),
            "browserWindowId": window, "timeout": 60})
        if reply["status"] != "success":
            raise RuntimeError(f"{name}: {reply.get('error')}")
        data = json.loads(reply["data"]) if reply.get("data") else None
        return data.get("result") if isinstance(data, dict) and "result" in data else data


def run_episode(api, pages, args, task, seed, meter, replay_of=None):
    """One episode; its record (never raises: a failure of the harness or the service is in `error`).
    `replay_of`: the episode replays that task's script (`replayOf`, no model) instead of planning."""
    record = {"task": task, "seed": seed, "planner": args.planner, "reward": None, "raw_reward": None,
              "success": False, "status": None, "steps": 0, "seconds": None, "model_calls": 0,
              "model_tokens": 0, "error": None, "left_host": False}
    session = None
    try:
        session = api.call("POST", "/cloud-browser/create-and-initialize-cloud-browser-session",
                           {"require_extension": False})
        window = session["browser_window_id"]
        api.action(window, "go_to_url", url=pages.url(task))
        utterance = api.action(window, "execute_javascript_on_page", code=START % {
            "seed": json.dumps(str(seed)), "max_ms": (args.episode_seconds + 120) * 1000})
        if args.translations is not None:
            record["english"] = utterance
            utterance = api.action(window, "execute_javascript_on_page",
                                   code=QUERY % json.dumps(translate.utterance(utterance, args.translations)))
        record["utterance"] = utterance
        if replay_of:
            what = {"replayOf": replay_of}
        elif args.planner == "steps":
            page = lambda code: api.action(window, "execute_javascript_on_page", code=code)  # noqa: E731
            # Written from the English utterance, as the hand-written steps parse it, whatever the task's language.
            what = {"prompt": "\n".join(["/Operator", *PROGRAMS[task](record.get("english", utterance), page)])}
        else:
            what = {"prompt": f"/Operator {utterance}"}
        record.update(what)
        started = time.monotonic()
        request_id = api.call("POST", "/remote-dispatch", {
            **what, "executionMode": "cloud_browser", "cloudBrowserSessionId": session["session_id"],
            "allowedDomains": [pages.host]})["requestId"]
        record["requestId"] = request_id
        # The task ends itself at the bound, or after the model call in flight (at most the bound again).
        result = wait_for(api, request_id, 2 * args.episode_seconds + 15)
        ended = time.monotonic()
        record["seconds"] = round(ended - started, 2)
        record["status"] = result["status"]
        trace = (result.get("response") or {}).get("actionTrace") or []
        record["steps"] = (result.get("usage") or {}).get("actions") or len(trace)
        record["refused"] = sorted({r for entry in trace for r in entry.get("refused", [])})
        # A step that ended on another web host's page (a refused navigation fails its step: the fence held
        # there). The browser's own pages (about:, chrome://new-tab-page after going back too far) are no host.
        record["left_host"] = any(entry.get("url") and urlsplit(entry["url"]).scheme in ("http", "https")
                                  and urlsplit(entry["url"]).netloc != pages.host and not entry.get("failed")
                                  for entry in trace)
        if result["status"] == "error":
            record["error"] = ((result.get("response") or {}).get("text") or "")[:500]
        calls = [e for e in (meter.recorded() if meter else [])
                 if started <= e["time"] <= ended and e["path"].endswith("/chat/completions")]
        record["model_calls"], record["model_tokens"] = len(calls), sum(_tokens(e) for e in calls)
        if args.keep_calls:  # what the model was asked and said, to study a run afterwards (its planner, its checks)
            record["calls"] = [{"request": e["raw"], "response": e["response"]} for e in calls]
        reward = api.action(window, "execute_javascript_on_page", code=REWARD)
        record["raw_reward"], record["reward"] = reward["raw"], reward["reward"]
        record["done"], record["reason"], record["final_url"] = reward["done"], reward["reason"], reward["url"]
        record["success"] = reward["raw"] > 0
    except Exception as exc:  # the episode's record says what went wrong; the run goes on
        record["error"] = record["error"] or f"harness: {exc}"
    finally:
        if session is not None:
            try:
                api.call("POST", "/cloud-browser/stop-cloud-browser-session", {"session_id": session["session_id"]})
            except Exception as exc:
                record["error"] = record["error"] or f"harness: stopping the session: {exc}"
    return record


def _tokens(exchange):
    usage = exchange["response"].get("usage") if isinstance(exchange["response"], dict) else None
    return (usage or {}).get("total_tokens") or 0


def wait_for(api, request_id, seconds):
    deadline = time.monotonic() + seconds
    while True:
        result = api.call("GET", f"/remote-dispatch/responses/{request_id}")
        if result["status"] in ("success", "error"):
            return result
        if result["status"] == "input-required" or time.monotonic() > deadline:
            api.call("POST", f"/remote-dispatch/responses/{request_id}/cancel")
            return {**api.call("GET", f"/remote-dispatch/responses/{request_id}"), "status": "error"}
        time.sleep(0.5)


def summarise(records):
    """Figures of a group of episodes (a task's, or all of them)."""
    n = len(records)
    steps = sum(r["steps"] for r in records)
    seconds = [r["seconds"] for r in records if r["seconds"] is not None]
    calls = sum(r["model_calls"] for r in records)
    return {
        "episodes": n,
        "successes": sum(r["success"] for r in records),
        "success_rate": round(sum(r["success"] for r in records) / n, 3) if n else None,
        "mean_reward": round(statistics.mean(r["reward"] or 0 for r in records), 3) if n else None,
        "rewards_read": sum(r["raw_reward"] is not None for r in records),
        "mean_steps": round(steps / n, 2) if n else None,
        "seconds_per_step": round(sum(seconds) / steps, 2) if steps else None,
        "median_episode_seconds": round(statistics.median(seconds), 1) if seconds else None,
        "model_tokens_per_call": round(sum(r["model_tokens"] for r in records) / calls) if calls else None,
        "model_tokens_per_step": round(sum(r["model_tokens"] for r in records) / steps) if calls and steps else None,
        "model_calls_per_episode": round(calls / n, 2) if n else None,
        "planner_errors": sum(r["status"] == "error" for r in records),
        **truth.figures(records),  # the confusion table, true / false / missed successes
        "harness_errors": sum((r["error"] or "").startswith("harness:") for r in records),
        "left_host": sum(r["left_host"] for r in records),
        "fence_refusals": sum(len(r.get("refused") or ()) for r in records),
    }


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="make eval", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="easy", help="easy (the 10-task set), all (130 tasks) or a,b,c")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per task")
    parser.add_argument("--first-seed", type=int, default=0, help="the seeds are first-seed .. first-seed+seeds-1")
    parser.add_argument("--planner", choices=("model", "builtin", "steps"), default="model",
                        help="model: LLM_BASE_URL/LLM_MODEL/LLM_API_KEY (unset: the bundled SmolLM2-135M); "
                             "builtin: the built-in planner on the utterance; steps: hand-written built-in steps")
    parser.add_argument("--language", default="en",
                        help="en, or a table of bench/translations/ (de): the task texts translated by it")
    parser.add_argument("--max-steps", type=int, default=10, help="the agent's step budget (MAX_STEPS)")
    parser.add_argument("--episode-seconds", type=int, default=120, help="each task's time bound")
    parser.add_argument("--concurrency", type=int, default=1, help="episodes at once")
    parser.add_argument("--results", default=None, help="the JSON results file (default: var/eval/…)")
    parser.add_argument("--replay", action="store_true",
                        help="replay each successful task's script (replayOf, no model) on the same seed, in a "
                             "fresh session, and count the replays whose page reward is a success too")
    parser.add_argument("--keep-calls", action="store_true",
                        help="keep each episode's model requests and replies in the results file (large)")
    parser.add_argument("--report", metavar="RESULTS", nargs="+",
                        help="print the tables of earlier results files (several: side by side), run nothing")
    args = parser.parse_args(argv)
    if args.report:  # runs nothing: the results files say their tasks (MiniWoB++'s pages are not needed)
        return args
    args.task_list = list(EASY) if args.tasks == "easy" else all_tasks() if args.tasks == "all" else [
        t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = sorted(set(args.task_list) - set(all_tasks()))
    if unknown:
        parser.error(f"unknown tasks: {', '.join(unknown)}")
    if args.planner == "steps" and set(args.task_list) - set(PROGRAMS):
        parser.error(f"hand-written steps exist for: {', '.join(PROGRAMS)}")
    args.translations = translate.table(args.language)
    args.seed_list = list(range(args.first_seed, args.first_seed + args.seeds))
    return args


def planner_env(args, stack):
    """The worker's planner settings, and the meter in front of the model (None for the built-in planner)."""
    if args.planner != "model":
        return {"LLM_BASE_URL": "", "LLM_MODEL": "", "LLM_API_KEY": ""}, None, "built-in planner"
    base, model = os.environ.get("LLM_BASE_URL"), os.environ.get("LLM_MODEL")
    if not (base and model):
        from config.local_model import MODEL, server_argv, server_env

        port = common.free_port()
        # Sampled at 0.2 (LOCAL_MODEL_TEMPERATURE), as the results in docs/evaluation.md were.
        env = {**server_env(port), "LOCAL_MODEL_TEMPERATURE": os.environ.get("LOCAL_MODEL_TEMPERATURE") or "0.2"}
        stack.start(common.Proc("local-model", server_argv(port, verbose=False), env=env,
                                ready=lambda: common.http_ok(f"http://127.0.0.1:{port}/v1/models"), timeout=300))
        base, model = f"http://127.0.0.1:{port}/v1", MODEL
    meter = RecordingProxy(base)
    return {"LLM_BASE_URL": meter.base_url, "LLM_MODEL": model,
            "LLM_API_KEY": os.environ.get("LLM_API_KEY", "")}, meter, model


def main(argv=None):
    args = parse_args(argv)
    if args.report:
        reports = []
        for path in args.report:
            report = json.loads(Path(path).read_text())
            records = report["episodes"]
            report.update(overall=summarise(records), per_task={
                task: summarise([r for r in records if r["task"] == task]) for task in report["tasks"]
                if any(r["task"] == task for r in records)})
            print_report(report)
            reports.append(report)
        if len(reports) > 1:
            print_side_by_side(reports)
        return reports
    episodes = [(task, seed) for task in args.task_list for seed in args.seed_list]
    pages = Pages()
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    results_path = Path(args.results or common.LOG_DIR / f"miniwob-{args.planner}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with common.Stack() as stack:
        env, meter, model = planner_env(args, stack)
        # A model call may not outlast the episode (a slow server would otherwise hold it for its retries too).
        env.setdefault("LLM_TIMEOUT_SECONDS", os.environ.get("LLM_TIMEOUT_SECONDS") or str(args.episode_seconds))
        env.update(MAX_STEPS=str(args.max_steps), TASK_TIMEOUT_SECONDS=str(args.episode_seconds),
                   CLOUD_SESSIONS_PER_KEY=str(args.concurrency + 2))
        os.environ.update(env)  # the web process starts the sessions' browsers; the worker plans
        # One pool process per episode, and one more for the sessions' direct actions (the control queue).
        stack.start(common.Proc("eval-worker", [
            sys.executable, "-m", "celery", "-A", "workers", "worker", "-Q", "tasks,control",
            "-c", str(args.concurrency + 1), "--prefetch-multiplier=1", "-n", f"eval-{os.getpid()}@%h",
            "--without-gossip", "--without-mingle", "--loglevel=INFO"],
            ready=lambda: "ready." in (common.LOG_DIR / "eval-worker.log").read_text()))
        stack.start(common.Proc("eval-beat", [sys.executable, "-m", "celery", "-A", "workers", "beat", "-s",
                                              str(common.LOG_DIR / "beat-schedule"), "--loglevel=INFO"]))
        api = Api(stack.web.url, stack.api_key)
        settings = {"started": started_at, "planner": model, "mode": args.planner, "language": args.language, "max_steps": args.max_steps,
                    "episode_seconds": args.episode_seconds, "concurrency": args.concurrency,
                    "cpus": os.cpu_count(), "load_average": os.getloadavg()[0], "tasks": args.task_list,
                    "seeds": args.seed_list, "pages_host": pages.host}
        common.say(f"{len(episodes)} episodes ({len(args.task_list)} tasks × {len(args.seed_list)} seeds), "
                   f"planner {model}, {args.max_steps} steps, {args.episode_seconds} s each, "
                   f"concurrency {args.concurrency}, pages on {pages.host}")
        records, lock = [], threading.Lock()

        def one(episode):
            record = run_episode(api, pages, args, *episode, meter)
            if args.replay and record["status"] == "success":  # a successful task has a script
                replay = run_episode(api, pages, args, *episode, meter, replay_of=record["requestId"])
                record["replay"] = {key: replay[key] for key in (
                    "requestId", "success", "raw_reward", "status", "steps", "seconds", "model_calls", "error")
                    if key in replay}
            with lock:
                records.append(record)
                write_results(results_path, settings, records)  # so far: an interrupted run keeps what it did
                print(f"[{len(records)}/{len(episodes)}] {record['task']} seed {record['seed']}: "
                      f"{truth.episode_line(record)}, {record['steps']} steps, "
                      f"{record['seconds']} s, {record['model_calls']} model calls / {record['model_tokens']} tokens"
                      + (f" — {record['error'][:160]}" if record["error"] else "")
                      + (_replay_line(record["replay"]) if "replay" in record else ""), flush=True)
            return record

        pool = ThreadPoolExecutor(args.concurrency)
        try:
            list(pool.map(one, episodes))
        finally:  # interrupted: the running episodes end (and stop their sessions) while the service is up
            pool.shutdown(wait=True, cancel_futures=True)
    pages.close()
    if meter:
        meter.close()
    records.sort(key=lambda r: (episodes.index((r["task"], r["seed"]))))
    report = write_results(results_path, settings, records)
    print_report(report)
    print(f"results: {results_path}", flush=True)
    return report


def _replay_line(replay):
    return (f"\n    replayed: {'SUCCESS' if replay['success'] else 'fail'} raw {replay['raw_reward']}, {replay['status']}, "
            f"{replay['steps']} steps, {replay['seconds']} s, {replay['model_calls']} model calls"
            + (f" — {replay['error'][:160]}" if replay.get("error") else ""))


def write_results(path, settings, records):
    tasks = [t for t in settings["tasks"] if any(r["task"] == t for r in records)]
    report = {**settings, "load_average_last": os.getloadavg()[0], "overall": summarise(records), "episodes": records,
              "per_task": {task: summarise([r for r in records if r["task"] == task]) for task in tasks}}
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_suffix(".part")
    part.write_text(json.dumps(report, indent=2))
    part.replace(path)
    return report


def print_side_by_side(reports):
    """Successes per task, one column per run (the results tables of docs/evaluation-results.md)."""
    names = [f"{r['planner']} ({r['mode']})" for r in reports]
    print("\n| task | " + " | ".join(names) + " |\n|---|" + "---:|" * len(names))
    tasks = list(dict.fromkeys(t for r in reports for t in r["per_task"]))
    for task in tasks + ["overall"]:
        cells = [r["overall"] if task == "overall" else r["per_task"].get(task) for r in reports]
        print(f"| {task} | " + " | ".join(f"{c['successes']}/{c['episodes']}" if c else "—" for c in cells) + " |")
    for label, key in (("true successes", "true_successes"), ("false successes", "false_successes"),
                       ("missed successes", "missed_successes"), ("planner errors", "planner_errors"),
                       ("median episode (s)", "median_episode_seconds"), ("seconds per step", "seconds_per_step"),
                       ("model tokens per step", "model_tokens_per_step"), ("left the host", "left_host"),
                       ("requests the fence refused", "fence_refusals")):
        print(f"| {label} | " + " | ".join("—" if r["overall"][key] is None else str(r["overall"][key])
                                         for r in reports) + " |")


def print_report(report):
    rows = [("task", "page success", "true", "false", "missed", "mean reward", "steps", "s/step", "tokens/step",
             "tokens/call", "errors")]
    for name, s in [*report["per_task"].items(), ("overall", report["overall"])]:
        rows.append((name, f"{s['successes']}/{s['episodes']}", s["true_successes"], s["false_successes"],
                     s["missed_successes"], s["mean_reward"], s["mean_steps"], s["seconds_per_step"],
                     s["model_tokens_per_step"], s["model_tokens_per_call"], s["planner_errors"]))
    print(f"\nMiniWoB++ — {report['planner']} ({report['mode']}), {report['started']}, {report['cpus']} CPUs, "
          f"load average {report.get('load_average')} at the start, {report.get('load_average_last')} at the end")
    print("| " + " | ".join(map(str, rows[0])) + " |\n|" + "---|" * len(rows[0]))
    for row in rows[1:]:
        print("| " + " | ".join("—" if v is None else str(v) for v in row) + " |")
    overall = report["overall"]
    truth.print_table(overall)
    print(f"median episode {overall['median_episode_seconds']} s; episodes that left the host: "
          f"{overall['left_host']}; harness errors: {overall['harness_errors']}", flush=True)
    replays = [r["replay"] for r in report["episodes"] if "replay" in r]
    if replays:
        print(f"replays of the successful tasks' scripts: {sum(r['success'] for r in replays)}/{len(replays)} "
              f"rewarded by the page, {sum(r['model_calls'] for r in replays)} model calls, median "
              f"{statistics.median(r['seconds'] for r in replays if r['seconds'] is not None)} s", flush=True)


if __name__ == "__main__":
    main()
