"""Submit on two builds side by side: a git revision's app vs. the working tree's, in interleaved rounds.

    .venv/bin/python -m bench.compare main      # before/after figures for a change to the submit path
"""
import atexit
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from bench import common
from bench.common import Row

ROUNDS = common.scaled(5, 2)
SECONDS = common.scaled(8, 4)
CONNECTIONS = 16


def export(rev):
    """The tree of `rev` in a temporary folder (git archive), for a server to import its app from."""
    folder = Path(tempfile.mkdtemp(prefix="rd-compare-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    archive = subprocess.run(["git", "archive", rev], cwd=common.ROOT, check=True, capture_output=True).stdout
    tarfile.open(fileobj=io.BytesIO(archive)).extractall(folder)
    return folder


def measure(stack, rev):
    servers = {rev: stack.start(common.start_gunicorn("web-" + rev.replace("/", "-"), "bench.wsgi:app",
                                                      code_from=export(rev))),
               "working tree": stack.web}
    submit = dict(method="POST", body=common.SUBMIT_BODY, api_key=stack.api_key)
    loads = {name: [] for name in servers}
    for name, web in servers.items():
        common.wrk(f"{web.url}/fast/v2/remote-dispatch", 2, CONNECTIONS, **submit)
    for round_ in range(ROUNDS):  # alternate who goes first, so drift on the machine hits both alike
        for name, web in (servers.items() if round_ % 2 == 0 else reversed(servers.items())):
            loads[name].append(common.wrk(f"{web.url}/fast/v2/remote-dispatch", SECONDS, CONNECTIONS,
                                          cpu_of=web.children(), **submit))
        stack.purge("tasks")
    before, after = (common.median_load(loads[name]) for name in servers)
    section, baseline = "1 submit", f"same, app of {rev}"
    return common.checked([
        Row(section, f"submit throughput (req/s, {CONNECTIONS} connections)", after.rps, baseline, before.rps),
        Row(section, "submit latency p50 (ms)", after.p50_ms, baseline, before.p50_ms),
        Row(section, "submit latency p99 (ms)", after.p99_ms, baseline, before.p99_ms),
        Row(section, "web worker CPU per submit (ms)", after.cpu_ms, baseline, before.cpu_ms),
    ], (after, 202), (before, 202))


if __name__ == "__main__":
    revision = sys.argv[1] if len(sys.argv) > 1 else "HEAD"
    common.main(lambda stack: measure(stack, revision))
