"""Flower (`remote-dispatch flower`, the Procfile's optional `flower` line): behind basic auth,
refuses to start open unless told to, and its HTTP API shows our workers and a finished task."""
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.conftest import submit, wait_for_status, wait_until
from tests.processes import ROOT, ManagedProcess, WorkerProcess, free_port

pytestmark = pytest.mark.slow
CLI = str(Path(sys.executable).parent / "remote-dispatch")
AUTH = ("ops", "flower-test-password")


@pytest.fixture(scope="module")
def stack(app):
    tasks = WorkerProcess(queues="tasks", concurrency=1, name="tasks")
    webhooks = WorkerProcess(queues="webhooks", concurrency=1, name="webhooks")
    port = free_port()
    flower = ManagedProcess([CLI, "flower"], "flower",
                            {"FLOWER_BASIC_AUTH": ":".join(AUTH), "FLOWER_PORT": str(port)})
    base = f"http://127.0.0.1:{port}"

    def up():
        try:
            return requests.get(base + "/healthcheck", timeout=2).ok
        except requests.RequestException:
            return False

    flower.wait_until(up, timeout=60)
    # Flower turns task events on in running workers (they are off by default: no cost without it).
    for worker in (tasks, webhooks):
        wait_until(lambda: "enabled by remote" in worker.output(), "Flower to enable task events", timeout=30)
    yield base
    for proc in (flower, tasks, webhooks):
        proc.stop()


def test_flower_refuses_to_start_without_credentials():
    done = subprocess.run([CLI, "flower"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in __import__("os").environ.items()
                               if not k.startswith("FLOWER_")})
    assert done.returncode != 0
    assert "FLOWER_BASIC_AUTH" in done.stderr


def test_flower_api_needs_the_password(stack):
    assert requests.get(stack + "/api/workers", timeout=10).status_code == 401
    assert requests.get(stack + "/api/workers", auth=("ops", "wrong"), timeout=10).status_code == 401


def test_flower_lists_both_workers_and_a_finished_task(stack, client, api_key):
    def workers():
        listed = requests.get(stack + "/api/workers?refresh=1", auth=AUTH, timeout=30).json()
        queues = {name.split("-")[0]: {q["name"] for q in info.get("active_queues") or []}
                  for name, info in listed.items()}
        return queues if {"tasks", "webhooks"} <= set(queues) else None

    queues = wait_until(workers, "Flower to list the tasks and webhooks workers", timeout=60)
    # Besides its queue, each worker consumes a direct queue of its own (Celery's worker_direct: the answer to a
    # paused task goes to the worker that keeps its browser).
    assert {name for name in queues["tasks"] if not name.endswith(".dq2")} == {"tasks"}
    assert {name for name in queues["webhooks"] if not name.endswith(".dq2")} == {"webhooks"}

    request_id = submit(client, api_key, {"prompt": "answer seen by Flower", "executionMode": "cloud"}
                        ).get_json()["requestId"]
    assert wait_for_status(client, api_key, request_id)["status"] == "success"

    def finished():
        tasks = requests.get(stack + "/api/tasks", auth=AUTH, timeout=10).json()
        return [t for t in tasks.values() if request_id in (t.get("args") or "") and t["state"] == "SUCCESS"]

    (task,) = wait_until(finished, "Flower to show the finished task", timeout=60)
    assert task["name"] == "workers.run_task"
