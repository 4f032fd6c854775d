"""How many `wait: true` requests one web process holds at once, and what they cost the others.

Starts one gunicorn process (config/gunicorn.py, one gthread worker) on Postgres, then for each
step of a ladder: opens N concurrent `wait: true` submits, measures a control request (a poll)
while they all wait against the same request with none waiting, ends all N tasks at once the way
a worker does (lifecycle.finish: one transaction and a NOTIFY each) and checks that every waiter
got its 200. No Celery worker runs, so what is measured is the web process and the LISTEN
fan-out, not the agent. The figure printed last is the largest N that fully succeeded.

    .venv/bin/python bench/concurrent_waits.py                      # ladder 50 100 200 400 800
    .venv/bin/python bench/concurrent_waits.py --ladder 100 1000 --threads 1100

Needs a reachable Postgres (BENCH_DATABASE_URL, default: database rd_bench_api on 127.0.0.1,
created if missing). The broker is kombu's filesystem transport in a temporary folder.
"""
import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg2
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DEFAULT_DB = "postgresql://postgres@127.0.0.1:5432/rd_bench_api"


def ensure_database(url):
    base, name = url.rsplit("/", 1)
    conn = psycopg2.connect(base + "/postgres")
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        if cur.fetchone() is None:
            cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def rss_mb(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def worker_pid(master_pid):
    children = Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()
    return int(children[0]) if children else master_pid


class Server:
    def __init__(self, env, threads):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="bench-gunicorn-", suffix=".log", delete=False)
        env = {**env, "PORT": str(self.port), "WEB_CONCURRENCY": "1", "WEB_THREADS": str(threads)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.py", "--access-logfile", "/dev/null",
             "app:create_app()"], cwd=ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(self.base + "/healthz", timeout=1).ok:
                    return
            except requests.RequestException:
                time.sleep(0.2)
        raise SystemExit("gunicorn did not start:\n" + Path(self.log.name).read_text()[-2000:])

    def stop(self):
        os.killpg(self.proc.pid, signal.SIGTERM)
        self.proc.wait(30)


def control_latency(base, key, request_id, samples=30):
    """Median of a poll's round trip, in milliseconds."""
    times = []
    with requests.Session() as session:
        for _ in range(samples):
            start = time.perf_counter()
            response = session.get(f"{base}/fast/v2/remote-dispatch/responses/{request_id}",
                                   headers={"x-api-key": key}, timeout=30)
            times.append((time.perf_counter() - start) * 1000)
            assert response.status_code == 200, response.text
    return statistics.median(times)


def run_step(app, server, key, n, control_id):
    from sqlalchemy import select

    from app import lifecycle
    from app.extensions import db
    from app.models import Task

    def wait_one(i):
        body = {"prompt": f"answer {i}", "executionMode": "cloud", "wait": True}
        return requests.post(server.base + "/fast/v2/remote-dispatch", headers={"x-api-key": key},
                             timeout=300, json=body)

    with app.app_context():
        before = set(db.session.execute(select(Task.id).where(Task.status == "pending")).scalars())
    pool = ThreadPoolExecutor(n)
    futures = [pool.submit(wait_one, i) for i in range(n)]
    with app.app_context():
        deadline = time.monotonic() + 120
        while True:
            pending = set(db.session.execute(select(Task.id).where(Task.status == "pending")).scalars())
            if len(pending - before) >= n or time.monotonic() > deadline:
                break
            db.session.rollback()
            time.sleep(0.2)
        ids = sorted(pending - before)
    time.sleep(1)  # let the last submits reach their wait
    during = control_latency(server.base, key, control_id)
    early = [f for f in futures if f.done()]
    started = time.perf_counter()
    with app.app_context():
        usage = {"actions": 0, "credits": 0.0}
        for task_id in ids:
            lifecycle.finish(task_id, "success", {"output": {"type": "text", "content": "ok"}, "text": "ok",
                                                  "structuredOutput": None, "actionTrace": []}, usage)
    finish_seconds = time.perf_counter() - started
    responses = [f.result() for f in futures]
    fanout_seconds = time.perf_counter() - started
    pool.shutdown()
    ok = sum(1 for r in responses if r.status_code == 200 and r.json()["status"] == "success")
    codes = {}
    for r in responses:
        codes[r.status_code] = codes.get(r.status_code, 0) + 1
    return {"n": n, "registered": len(ids), "ok": ok, "codes": codes, "returned_early": len(early),
            "control_ms": during, "finish_s": finish_seconds, "all_answered_s": fanout_seconds,
            "rss_mb": rss_mb(worker_pid(server.proc.pid))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ladder", type=int, nargs="+", default=[50, 100, 200, 400, 800])
    parser.add_argument("--threads", type=int, default=None,
                        help="gunicorn threads (default: largest step + 16, so the cap is not the limit)")
    args = parser.parse_args()
    threads = args.threads or max(args.ladder) + 16

    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB)
    ensure_database(url)
    var_dir = tempfile.mkdtemp(prefix="bench-waits-")
    env = {**os.environ, "DATABASE_URL": url, "CELERY_BROKER_URL": "filesystem://", "VAR_DIR": var_dir,
           "WAIT_TIMEOUT_SECONDS": "240", "WAIT_MAX_CONCURRENT": str(threads - 8)}
    os.environ.update(env)

    from flask_migrate import upgrade
    from sqlalchemy import text

    from app import create_app
    from app.cli import create_key, with_migrations
    from app.extensions import db

    app = with_migrations(create_app())
    with app.app_context():
        with db.engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
        upgrade()
        key = create_key("bench", "dev")[1]

    server = Server(env, threads)
    try:
        control = requests.post(server.base + "/fast/v2/remote-dispatch", headers={"x-api-key": key},
                                json={"prompt": "answer control", "executionMode": "cloud"})
        control_id = control.json()["requestId"]
        idle = control_latency(server.base, key, control_id)
        print(f"one gunicorn gthread worker, {threads} threads; poll p50 with no waits: {idle:.1f} ms "
              f"(rss {rss_mb(worker_pid(server.proc.pid)):.0f} MB)")
        print(f"{'waits':>6} {'ok':>6} {'poll p50 ms':>12} {'x idle':>7} {'finish s':>9} "
              f"{'all 200 s':>10} {'rss MB':>7}  codes")
        best = 0
        for n in args.ladder:
            step = run_step(app, server, key, n, control_id)
            print(f"{n:>6} {step['ok']:>6} {step['control_ms']:>12.1f} {step['control_ms'] / idle:>7.2f} "
                  f"{step['finish_s']:>9.2f} {step['all_answered_s']:>10.2f} {step['rss_mb']:>7.0f}  "
                  f"{step['codes']}" + (f" ({step['returned_early']} returned before finish!)"
                                        if step["returned_early"] else ""))
            if step["ok"] != n or step["returned_early"]:
                break
            best = n
        print(f"\nconcurrent waits sustained by one web process: {best} "
              f"(largest step in which every waiter got its 200 after a NOTIFY)")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
