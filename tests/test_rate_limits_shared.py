"""Rate limits hold across web processes: two gunicorn processes count in one shared store
(Redis), so a `free` key gets 60 requests a minute, not 60 per process. Per-process counting with
more than one process is refused."""
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from tests.conftest import make_key
from tests.processes import ManagedProcess, WebProcess, free_port

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_processes(app):
    proc = WebProcess(env={"WEB_CONCURRENCY": "2", "WEB_THREADS": "16"})
    yield proc
    proc.stop()


def test_two_web_processes_share_one_limit(two_processes):
    key = make_key("limited", "free")  # 60 requests a minute
    served_by = set()

    def list_tasks(_):
        with requests.Session() as fresh:  # a new connection each time: either process may take it
            response = fresh.get(two_processes.base + "/fast/v2/remote-dispatch/responses",
                                 headers={"x-api-key": key, "Connection": "close"}, timeout=30)
        return response

    with ThreadPoolExecutor(8) as pool:
        responses = list(pool.map(list_tasks, range(90)))
    codes = [r.status_code for r in responses]
    assert codes.count(200) == 60 and codes.count(429) == 30, codes
    for response in responses:
        assert ("Retry-After" in response.headers) == (response.status_code == 429)
    # Both processes answered (the access log starts with the worker's pid).
    served_by = {line.split()[0] for line in two_processes.output().splitlines() if "/responses HTTP" in line}
    assert len(served_by) == 2, served_by


def test_per_process_counting_with_two_processes_is_refused(app):
    env = {"RATELIMIT_STORAGE_URI": "memory://", "WEB_CONCURRENCY": "2", "PORT": str(free_port())}
    proc = ManagedProcess([sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.py", "app:create_app()"],
                          "gunicorn-refused", env)
    try:
        assert proc.proc.wait(60) != 0
    finally:
        proc.stop()
    assert "RATELIMIT_STORAGE_URI=redis://" in proc.output()


def test_per_process_counting_runs_one_process(app):
    port = free_port()
    proc = ManagedProcess([sys.executable, "-m", "gunicorn", "-c", "config/gunicorn.py", "app:create_app()"],
                          "gunicorn-one", {"RATELIMIT_STORAGE_URI": "memory://", "PORT": str(port)})
    try:
        proc.wait_until(lambda: "Booting worker" in proc.output(), timeout=60)
        assert proc.output().count("Booting worker") == 1
        assert "one web process" in proc.output()
    finally:
        proc.stop()
