"""The reliability suite: the whole stack as real processes, faults injected, figures reported."""
import subprocess
import time

import pytest
import requests

from tests.conftest import FIGURES as REPORT, make_key  # noqa: F401  (REPORT: the figures the run prints at its end)
from tests.processes import BeatProcess, WebProcess, WorkerProcess


FAST_SWEEPS = {"SWEEP_INTERVAL_SECONDS": "1", "LEASE_SECONDS": "3", "DISPATCH_GRACE_SECONDS": "1",
               "MAX_ATTEMPTS": "5"}


class Stack:
    """web (gunicorn), tasks workers, a webhooks worker (which also runs the sweeps) and beat."""

    def __init__(self, env, tasks_workers=2):
        self.env = {**FAST_SWEEPS, **env}
        self.web = WebProcess(self.env)
        self.workers = [WorkerProcess("tasks", 2, self.env, name=f"tasks{i}") for i in range(tasks_workers)]
        self.webhooks = WorkerProcess("webhooks,control", 2, self.env, name="webhooks")  # deliveries, sweeps
        self.beat = BeatProcess(self.env)

    @property
    def base(self):
        return self.web.base

    def replace_worker(self, index):
        """SIGKILL a tasks worker and start a fresh one in its place."""
        self.workers[index].kill()
        self.workers[index] = WorkerProcess("tasks", 2, self.env, name=f"tasks{index}")

    def stop(self):
        for proc in [self.beat, self.webhooks, *self.workers, self.web]:
            proc.stop()


@pytest.fixture
def stack(app, webhook_ca):
    stack = Stack({"WEBHOOK_CA_BUNDLE": webhook_ca[1], "WEBHOOK_RETRY_SCHEDULE": "0,1,1,1,1,1,1,1,1,1",
                   "WEBHOOK_RETRY_JITTER": "0"})
    yield stack
    stack.stop()


@pytest.fixture
def dev_key():
    """A key on the `dev` plan: bursts here must not be cut short by the free plan's limit."""
    return make_key("reliability", "dev")


def submit_http(base, key, body, timeout=30):
    return requests.post(base + "/fast/v2/remote-dispatch", json=body, headers={"x-api-key": key},
                         timeout=timeout)


def wait_all_terminal(base, key, request_ids, timeout=180):
    """Poll every task until it is success or error; returns {requestId: body}."""
    done, deadline = {}, time.monotonic() + timeout
    while len(done) < len(request_ids) and time.monotonic() < deadline:
        for request_id in request_ids:
            if request_id in done:
                continue
            response = requests.get(f"{base}/fast/v2/remote-dispatch/responses/{request_id}",
                                    headers={"x-api-key": key}, timeout=30)
            if response.ok and response.json()["status"] in ("success", "error"):
                done[request_id] = response.json()
        time.sleep(0.5)
    return done


def run(*argv):
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
