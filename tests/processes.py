"""Real service processes for tests: celery workers, beat and gunicorn, on the test database and broker."""
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ManagedProcess:
    """A subprocess in its own process group, with its output in a log file."""

    def __init__(self, argv, name, env=None):
        self.name = name
        self.log = tempfile.NamedTemporaryFile(prefix=f"{name}-", suffix=".log", delete=False)
        self.proc = subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **(env or {})}, stdout=self.log,
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def output(self):
        return Path(self.log.name).read_text(errors="replace")

    def wait_until(self, ready, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return self
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.name} did not start:\n{self.output()[-3000:]}")

    def kill(self):
        """SIGKILL the whole process group (main process and children), as a crash would."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


class WorkerProcess(ManagedProcess):
    """A real `celery -A workers worker` process (`node`: its exact node name, as the Procfile's `tasks@%h`; else
    one of its own), consuming `queues` (by default every work queue: app/broker.py's QUEUES)."""

    def __init__(self, queues=None, concurrency=2, env=None, name="w", node=None):
        from app.broker import QUEUES

        queues = queues or ",".join(QUEUES)
        super().__init__(
            [sys.executable, "-m", "celery", "-A", "workers", "worker", "-Q", queues,
             "-c", str(concurrency), "--prefetch-multiplier=1", "-n", node or f"{name}-{os.getpid()}-{time.time_ns()}@%h",
             "--without-gossip", "--without-mingle", "--loglevel=INFO"],
            f"celery-{name}", env)
        self.wait_until(lambda: "ready." in self.output())


class BeatProcess(ManagedProcess):
    def __init__(self, env=None):
        schedule = tempfile.mktemp(prefix="beat-schedule-")
        super().__init__([sys.executable, "-m", "celery", "-A", "workers", "beat", "-s", schedule,
                          "--loglevel=INFO"], "celery-beat", env)
        self.wait_until(lambda: "beat: Starting" in self.output())


class WebProcess(ManagedProcess):
    """gunicorn with the production config, on a free port."""

    def __init__(self, env=None):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        super().__init__([sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.py", "app:create_app()"],
                         "gunicorn", {"PORT": str(self.port), "WEB_CONCURRENCY": "2", **(env or {})})
        self.wait_until(self._healthy)

    def _healthy(self):
        try:
            return requests.get(self.base + "/healthz", timeout=1).ok
        except requests.RequestException:
            return False


@contextlib.contextmanager
def web_and_worker(name, env=None):
    """A gunicorn and a worker of every work queue (concurrency 2), both with `env`: yields (web, worker); both stop
    whatever happens, the worker first."""
    started = [WebProcess(env=env)]
    try:
        started.append(WorkerProcess(concurrency=2, env=env, name=name))
        yield tuple(started)
    finally:
        for process in reversed(started):
            process.stop()


@contextlib.contextmanager
def two_machines(worker_env=None, node=None, name="split", web_env=None):
    """A web process and a tasks worker, each with a VAR_DIR of its own, as on two machines (nothing one writes on
    disk is seen by the other): yields (web, worker, web VAR_DIR, worker VAR_DIR). Both stop and both folders go,
    whatever happens; a kept browser the worker left is ended with them."""
    from app.sandbox import processes as sandbox_processes
    from app.sessions.browsers import sessions_root

    folders = [tempfile.mkdtemp(prefix="rd-web-var-"), tempfile.mkdtemp(prefix="rd-worker-var-")]
    started = []
    try:
        started.append(WebProcess(env={"VAR_DIR": folders[0], **(web_env or {})}))
        started.append(WorkerProcess(queues="tasks", concurrency=2, node=node, name=name,
                                     env={"VAR_DIR": folders[1], "PUBLIC_URL": started[0].base, **(worker_env or {})}))
        yield (*started, *folders)
    finally:
        for process in reversed(started):
            process.stop()
        for folder in folders:
            for leftover in sandbox_processes.processes_under(str(sessions_root({"VAR_DIR": folder}))):
                sandbox_processes.end_processes([leftover])
            shutil.rmtree(folder, ignore_errors=True)
