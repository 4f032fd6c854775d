"""Shared benchmark helpers: the bench stack (database, vhost, our own processes), load, stats, tables."""
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parent.parent
HERE = ROOT / "bench"
QUICK = os.environ.get("BENCH_QUICK", "") not in ("", "0")
DB_NAME = os.environ.get("BENCH_DB", "remote_dispatch_bench")
VHOST = os.environ.get("BENCH_VHOST", "rd_bench")
LOG_DIR = Path(os.environ.get("BENCH_LOG_DIR", ROOT / "var" / "bench"))
LOG_DIR.mkdir(parents=True, exist_ok=True)
PROMPT = "answer hi"
SUBMIT_BODY = json.dumps({"prompt": PROMPT, "executionMode": "cloud"})

# Every process we start (and create_app() in this one) reads these; nothing shared with other runs.
os.environ.update({
    "DATABASE_URL": f"postgresql://postgres@127.0.0.1:5432/{DB_NAME}",
    "CELERY_BROKER_URL": f"amqp://guest:guest@127.0.0.1:5672/{VHOST}",
    "ENCRYPTION_KEY": os.environ.get("BENCH_ENCRYPTION_KEY") or Fernet.generate_key().decode(),
    "VAR_DIR": str(LOG_DIR / "var"),
    "ALLOW_PRIVATE_URLS": "true",
    # Browsers start cold unless a benchmark says otherwise (bench/pool.py measures the warm pool beside them).
    "BROWSER_POOL_SIZE": "0",
    "SESSION_POOL_SIZE": "0",
    # The bench key's plan: the limiter runs on every request, as in production, but never refuses.
    "RATE_LIMIT_PLANS": json.dumps({"bench": {"requests": "1000000/second", "polls": "1000000/second", "cdp": True}}),
    # Shared counting (Redis), as production with more than one web process must have.
    "RATELIMIT_STORAGE_URI": os.environ.get("BENCH_RATELIMIT_STORAGE_URI", "redis://127.0.0.1:6379/0"),
    "RATELIMIT_KEY_PREFIX": "rd-bench",
})


def scaled(full, quick):
    """A size or duration: the full run's, or the BENCH_QUICK one."""
    return quick if QUICK else full


# ---------------------------------------------------------------- figures and the table

@dataclass
class Row:
    section: str
    figure: str
    value: float | None
    baseline_name: str = ""
    baseline: float | None = None
    note: str = ""
    failed: bool = False  # the benchmark's requests failed (or it raised): a figure, but no ratio

    @property
    def ratio(self):
        if self.failed or self.value is None or not self.baseline:
            return None
        return self.value / self.baseline


def failed_row(section, error):
    """The row of a benchmark that raised: the table still prints, and the exit status says it failed."""
    return Row(section, "benchmark failed", None, note=f"FAILED: {type(error).__name__}: {error}"[:300], failed=True)


def not_present(section, figure, why="feature not present"):
    return Row(section, figure, None, note=f"n/a ({why})")


def percentile(values, pct):
    """Nearest-rank percentile of a list of numbers (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(pct / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def latency_rows(section, what, samples_ms, baseline_name, baseline_ms):
    """p50 and p99 rows of a latency sample (milliseconds) against its baseline sample."""
    return [Row(section, f"{what} p{p} (ms)", percentile(samples_ms, p), baseline_name,
                percentile(baseline_ms, p) if baseline_ms else None) for p in (50, 99)]


def _fmt(value):
    if value is None:
        return "—"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.1f}"


def print_table(rows, started):
    """The figures as a Markdown table (pasted as is into docs/results.md), also saved under var/bench/."""
    header = (f"Remote Dispatch benchmarks: {os.cpu_count()} CPUs, "
              f"{'BENCH_QUICK=1' if QUICK else 'full run'}, "
              f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
              f"took {time.monotonic() - started:.0f} s")
    lines = [header, "",
             "| # | figure | measured | baseline | baseline value | ratio |",
             "|---|---|---:|---|---:|---:|"]
    lines += [table_line(row) for row in sorted(rows, key=lambda r: r.section[:1])]
    text = "\n".join(lines)
    print("\n" + text, flush=True)
    (LOG_DIR / "results.md").write_text(text + "\n")
    (LOG_DIR / "results.json").write_text(json.dumps(
        [dict(row.__dict__, ratio=row.ratio) for row in rows], indent=2))


def table_line(row):
    measured = row.note if row.value is None else _fmt(row.value) + (f" ({row.note})" if row.note else "")
    ratio = "—" if row.ratio is None else f"{row.ratio:.2f}" if abs(row.ratio) >= 0.01 else f"{row.ratio:.1e}"
    return f"| {row.section} | {row.figure} | {measured} | {row.baseline_name} | {_fmt(row.baseline)} | {ratio} |"


def say(message):
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


# ---------------------------------------------------------------- processes we start

class Proc:
    """A process this benchmark started, in its own process group: stop() ends exactly it."""

    def __init__(self, name, argv, env=None, ready=None, timeout=60):
        self.name = name
        self.log_path = LOG_DIR / f"{name}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.pid = self.proc.pid
        deadline = time.monotonic() + timeout
        while not (ready or (lambda: True))():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{name} did not start:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.2)

    def log_says(self, text):
        return text in self.log_path.read_text()

    def children(self):
        return children(self.pid)

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log.close()


def children(pid):
    """The child pids of `pid` (none once it has ended: a process measured may end while it is read)."""
    pids = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return pids
    for task in tasks:
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            pass
    return pids


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http_ok(url):
    import requests

    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.RequestException:
        return False


def start_gunicorn(name, wsgi_app, code_from=None, env=None):
    """gunicorn with the product's config/gunicorn.py (gthread, same workers and threads) on a free port.

    code_from: a folder whose `app` (and `workers`, `config`) the server imports instead of ours.
    """
    port = free_port()
    argv = [sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.py", wsgi_app]
    if code_from:  # imported before gunicorn puts our folder first on sys.path
        argv[1:3] = ["-c", f"import sys; sys.path.insert(0, {str(code_from)!r}); "
                           "import app, config.settings; print('app from', app.__file__, flush=True); "
                           "from gunicorn.app.wsgiapp import run; sys.argv[0] = 'gunicorn'; sys.exit(run())"]
    proc = Proc(name, argv, env={"PORT": str(port), **(env or {})},
                ready=lambda: http_ok(f"http://127.0.0.1:{port}/healthz")
                or http_ok(f"http://127.0.0.1:{port}/bench/trivial"))
    proc.url = f"http://127.0.0.1:{port}"
    # Both workers up: each serves its first request only after importing the app.
    while len(proc.children()) < int(os.environ.get("WEB_CONCURRENCY", "2")):
        time.sleep(0.2)
    return proc


def start_celery(name, app, queue, env=None):
    """A prefork Celery worker like the Procfile's (prefetch 1); concurrency 2 for product and baseline."""
    return Proc(name, [sys.executable, "-m", "celery", "-A", app, "worker", "-Q", queue, "-c", "2",
                       "--prefetch-multiplier=1", "-n", f"{name}-{os.getpid()}@%h", "--without-gossip",
                       "--without-mingle", "--loglevel=INFO"],
                env=env, ready=lambda: "ready." in (LOG_DIR / f"{name}.log").read_text())


# ---------------------------------------------------------------- memory

def rss_mib(pid):
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class RssPeak:
    """Samples the RSS of some processes on a thread while a `with` block runs; `.peak` is the largest."""

    def __init__(self, pids_fn, interval=0.2):
        self.pids_fn, self.interval, self.peak = pids_fn, interval, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max([self.peak] + [rss_mib(pid) for pid in self.pids_fn()])
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def max_rss(pids):
    return max((rss_mib(pid) for pid in pids), default=0.0)


def cpu_seconds(pids):
    """User + system CPU time used so far by these processes (robust to other load on the machine)."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return ticks / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- load

@dataclass
class Load:
    rps: float
    p50_ms: float
    p99_ms: float
    statuses: dict
    errors: int
    cpu_ms: float | None = None  # server CPU per request, when asked for


def ensure_wrk():
    """wrk is the load generator; install it from Debian the way the Makefile does when it is missing."""
    if shutil.which("wrk"):
        return
    say("installing wrk (apt-get)")
    if subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], capture_output=True).returncode:
        subprocess.run(["apt-get", "update", "-q"], check=True, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], check=True, capture_output=True)


def wrk(url, seconds, connections=16, method="GET", body="", api_key="", paths_file="", cpu_of=()):
    """Closed-loop load with wrk (one thread, `connections` connections); returns a Load.

    cpu_of: the server's pids, to report its CPU time per request.
    """
    ensure_wrk()
    cpu_before = cpu_seconds(cpu_of)
    env = {**os.environ, "BENCH_METHOD": method, "BENCH_BODY": body, "BENCH_API_KEY": api_key,
           "BENCH_PATHS_FILE": str(paths_file)}
    out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "10s",
                          "-s", str(HERE / "wrk.lua"), url], env=env, capture_output=True, text=True,
                         check=True).stdout
    cpu = cpu_seconds(cpu_of) - cpu_before
    data = json.loads(next(line for line in out.splitlines() if line.startswith("{")))
    return Load(rps=data["requests"] / (data["duration_us"] / 1e6), p50_ms=data["p50_us"] / 1000,
                p99_ms=data["p99_us"] / 1000, statuses=data["statuses"], errors=data["errors"],
                cpu_ms=cpu * 1000 / data["requests"] if cpu_of and data["requests"] else None)


def median_load(loads):
    """The median of each figure over several rounds of the same load (rounds damp a noisy machine)."""
    import statistics

    pick = lambda attr: statistics.median(getattr(load, attr) for load in loads)  # noqa: E731
    statuses = {}
    for load in loads:
        for code, n in load.statuses.items():
            statuses[code] = statuses.get(code, 0) + n
    return Load(pick("rps"), pick("p50_ms"), pick("p99_ms"), statuses, sum(x.errors for x in loads),
                pick("cpu_ms") if loads[0].cpu_ms is not None else None)


def load_note(load, expected):
    """Say so when some responses were not the expected status (e.g. 429 from a rate limit)."""
    other = {code: n for code, n in load.statuses.items() if code != str(expected)}
    if other or load.errors:
        return f"FAILED requests: other statuses {other}, socket errors {load.errors}"
    return ""


def checked(rows, *loads_expected):
    """Rows measured from loads: when any (load, expected status) pair had failures, every row is marked
    failed (no ratio) and the first says which requests failed."""
    notes = [note for load, expected in loads_expected if (note := load_note(load, expected))]
    if notes:
        for row in rows:
            row.failed = True
        rows[0].note = "; ".join(notes)
    return rows


def burst(fn, items, threads=8):
    """Call fn(item) for every item from a small thread pool; returns the results in order."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(fn, items))


_local = threading.local()


def http():
    """A requests.Session per thread (keep-alive, like a real client). Like a real client, it sends a request once
    more when the connection was dropped before any answer came (a loaded machine's server closing a kept-alive
    connection as the request went out): a benchmark then measures, rather than fails on, that moment."""
    import requests
    from requests.adapters import HTTPAdapter
    from urllib3.util import Retry

    if not hasattr(_local, "session"):
        _local.session = requests.Session()
        once_more = Retry(total=1, connect=1, read=1, status=0, other=0, allowed_methods=None, raise_on_status=False)
        _local.session.mount("http://", HTTPAdapter(max_retries=once_more))
    return _local.session


class DoneListener:
    """Collects UDP datagrams `[sent, ran]` from the no-op baseline task, with their arrival time."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.received = []
        self._cond = threading.Condition()
        threading.Thread(target=self._listen, daemon=True).start()

    def _listen(self):
        while True:
            data = self.sock.recv(1024)
            with self._cond:
                self.received.append(json.loads(data) + [time.time()])
                self._cond.notify_all()

    def wait_for(self, count, timeout):
        with self._cond:
            self._cond.wait_for(lambda: len(self.received) >= count, timeout)
            return list(self.received)

    def clear(self):
        with self._cond:
            self.received.clear()


# ---------------------------------------------------------------- the stack

class Stack:
    """The bench database and vhost (reset), an API key, and lazily started processes, all stopped on exit."""

    def __enter__(self):
        from app import create_app
        from app.cli import with_migrations

        self.started = time.monotonic()
        self.procs = []
        self.flask_app = with_migrations(create_app())
        self.ctx = self.flask_app.app_context()
        self.ctx.push()
        self._reset_database()
        from app.cli import create_key

        self.api_key = create_key("bench", "bench")[1]
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        return self

    def __exit__(self, *exc):
        for proc in reversed(self.procs):
            proc.stop()
        self.ctx.pop()

    def _reset_database(self):
        from flask_migrate import upgrade
        from sqlalchemy import text

        from app.extensions import db

        with db.engine.begin() as conn:
            conn.execute(text("DROP SCHEMA public CASCADE; CREATE SCHEMA public"))
        upgrade()
        self.purge("tasks", "webhooks", "control", "bench_noop", "bench_floor", "bench_floor_submit")

    def start(self, proc):
        self.procs.append(proc)
        return proc

    def stop(self, proc):
        proc.stop()
        self.procs.remove(proc)

    @functools.cached_property
    def web(self):
        return self.start(start_gunicorn("web", "bench.wsgi:app"))

    @functools.cached_property
    def tasks_worker(self):
        return self.start(start_celery("tasks-worker", "workers", "tasks"))

    @functools.cached_property
    def noop_worker(self):
        return self.start(start_celery("noop-worker", "bench.noop_celery", "bench_noop,bench_floor"))

    @functools.cached_property
    def done_listener(self):
        return DoneListener()

    def sql(self, statement, **params):
        """Run SQL on the bench database; returns the result's rows."""
        from sqlalchemy import text

        from app.extensions import db

        with db.engine.begin() as conn:
            result = conn.execute(text(statement), params)
            return result.all() if result.returns_rows else []

    def purge(self, *queues):
        with self.flask_app.extensions["broker"].connection() as conn:
            for queue in queues:
                try:
                    conn.channel().queue_purge(queue)
                except Exception:  # not declared yet: nothing to purge
                    pass

    def submit(self, body=SUBMIT_BODY, timeout=30):
        """POST one submit through the web server; returns the response."""
        return http().post(f"{self.web.url}/fast/v2/remote-dispatch", data=body, timeout=timeout,
                           headers={"x-api-key": self.api_key, "Content-Type": "application/json"})

    def wait_finished(self, ids, timeout):
        """Wait until every task in ids is terminal (read from the database); returns how many are."""
        deadline = time.monotonic() + timeout
        while True:
            done = self.sql("SELECT count(*) FROM tasks WHERE id = ANY(:ids) "
                            "AND status IN ('success', 'error')", ids=list(ids))[0][0]
            if done == len(ids) or time.monotonic() > deadline:
                return done
            time.sleep(0.05)


def main(*measures):
    """Run measures (functions of a Stack returning Rows) on one stack, each on a clean database session;
    rows print as they arrive, one that raises becomes a failed row and the rest still run; the table
    closes the run and the exit status says whether any benchmark failed."""
    from app.extensions import db

    rows = []
    with Stack() as stack:
        for measure in measures:
            say(f"{measure.__module__}: start")
            db.session.remove()  # no transaction left open by the previous benchmark (its now() would leak)
            try:
                new = measure(stack)
            except Exception as error:  # noqa: BLE001 (reported in its row; the others still run)
                new = [failed_row(measure.__module__.removeprefix("bench."), error)]
            finally:
                db.session.remove()
            for row in new:
                if row.value is None and not row.note.startswith("n/a"):
                    row.failed = True  # a figure the benchmark should have produced and did not
                say(table_line(row))
            rows += new
    print_table(rows, stack.started)
    failed = sorted({row.section for row in rows if row.failed})
    if failed:
        say(f"FAILED: {', '.join(failed)}")
        sys.exit(1)
    return rows
