"""The official `narada` SDK, unchanged, against the live service: scripts run in .venv-sdk (Python 3.12,
`make sdk`) with NARADA_API_BASE_URL and NARADA_API_KEY, talking HTTP to real gunicorn + celery processes.

    service = LiveService(beat=True)            # web, worker (and beat) on the test database and broker
    result = run_sdk(service, key, '''
        from narada import Agent, AgentKind, LambdaEnvironment
        env = LambdaEnvironment()
        try:
            response = await Agent(environment=env, kind=AgentKind.CORE_AGENT).run("answer hi")
            emit(text=response.text, status=response.status)
        finally:
            await env.close()
    ''')
    assert result.value["text"] == "hi"

The script's body runs inside `async def main()`; `emit(**values)` hands JSON-able values back
(`result.value`). No monkeypatching: the SDK only knows the base URL and the key.
"""
import json
import os
import subprocess
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

from tests.processes import ROOT, BeatProcess, WebProcess, WorkerProcess

SDK_VENV = ROOT / ".venv-sdk"
SDK_PYTHON = SDK_VENV / "bin" / "python"
CHROMIUM = "/usr/bin/chromium"
RESULT_MARK = "@@sdk-result@@ "

PRELUDE = '''\
import asyncio, json, os, sys
from pathlib import Path

def emit(**values):
    print(%r + json.dumps(values, default=str), flush=True)

async def main():
''' % RESULT_MARK

EPILOGUE = '''

asyncio.run(main())
'''


def require_sdk():
    """Fail (never skip) when the SDK venv is missing: `make test` builds it (`make sdk`)."""
    if not SDK_PYTHON.exists() or not (SDK_VENV / ".installed").exists():
        raise AssertionError(f"{SDK_VENV} is missing: run `make sdk` (make test does it) to install the "
                             "narada SDK from requirements-sdk.txt into a Python 3.12 venv.")


class LiveService:
    """gunicorn + a celery worker (every queue) and, with beat=True, celery beat, on the test database."""

    def __init__(self, beat=False, env=None, concurrency=2):
        require_sdk()
        self.processes = []
        try:
            self.web = self._started(WebProcess(env=env))
            self.worker = self._started(WorkerProcess(concurrency=concurrency, env=env, name="sdk"))
            self.beat = self._started(BeatProcess(env=env)) if beat else None
        except BaseException:
            self.stop()
            raise
        self.base = self.web.base
        self.api_base = self.base + "/fast/v2"

    def _started(self, process):
        self.processes.append(process)
        return process

    def logs(self):
        return "\n".join(f"--- {p.name}\n{p.output()[-4000:]}" for p in self.processes)

    def stop(self):
        for process in reversed(self.processes):
            process.stop()


@dataclass
class SdkRun:
    returncode: int
    stdout: str
    stderr: str
    values: list

    @property
    def value(self):
        """The last `emit(...)` of the script; fails with its output when there is none."""
        if not self.values:
            raise AssertionError(f"the SDK script emitted nothing (exit {self.returncode}):\n"
                                 f"{self.stdout[-3000:]}\n{self.stderr[-5000:]}")
        return self.values[-1]


def run_sdk(service, key, body, timeout=300, env=None):
    """Run `body` (the inside of an async main()) with the SDK's Python against `service` as `key`."""
    require_sdk()
    script = PRELUDE + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + EPILOGUE
    with tempfile.NamedTemporaryFile("w", suffix=".py", prefix="sdk-script-", delete=False) as handle:
        handle.write(script)
    child_env = {name: value for name, value in os.environ.items()
                 if name not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    child_env.update(NARADA_API_BASE_URL=service.api_base, NARADA_API_KEY=key, PYTHONUNBUFFERED="1",
                     CHROMIUM=CHROMIUM, **(env or {}))
    try:
        proc = subprocess.run([str(SDK_PYTHON), handle.name], capture_output=True, text=True, timeout=timeout,
                              env=child_env, cwd=tempfile.gettempdir())
    finally:
        Path(handle.name).unlink(missing_ok=True)
    values = [json.loads(line[len(RESULT_MARK):]) for line in proc.stdout.splitlines()
              if line.startswith(RESULT_MARK)]
    return SdkRun(proc.returncode, proc.stdout, proc.stderr, values)
