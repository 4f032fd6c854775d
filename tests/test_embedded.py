"""`make run` with nothing configured: SQLite + kombu's filesystem transport, all processes."""
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow
RUN = {}  # the running `make run`: its process and log
README = (ROOT / "README.md").read_text()
# The README's "Try it on your own machine": make run started again with these settings (its own page and
# webhook receiver), which the instance here is started with too.
README_RUN = dict(pair.split("=", 1) for pair in re.search(r"^((?:[A-Z_]+=\S+ )+)make run$", README, re.M)[1].split())
# The docs' examples: their MCP server (docs/agent.md, MCP tool servers) and webhook receiver.
DOCS_HOSTS = "127.0.0.1:8443,127.0.0.1:8765"
# Where the docs' curl examples are, in the order they build on each other's answers.
EXAMPLE_DOCS = ("api-guide.md", "agent.md", "replay.md", "cloud-sessions.md", "webhooks.md")
PAGES = {"/hello": "<html><head><title>Hello</title></head><body><h1>Hello from a page</h1></body></html>",
         "/gone": "<html><head><title>Not here</title></head><body><h1>404: this page is gone</h1></body></html>"}


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def pages():
    from tests.page_server import PageServer

    server = PageServer(PAGES, statuses={"/gone": 404})
    yield server
    server.close()


@pytest.fixture(scope="module")
def embedded_stack(pages):
    var_dir = tempfile.mkdtemp(prefix="rd-embedded-")
    port = _free_port()
    # Nothing of the test set-up leaks in (the test database, ALLOW_PRIVATE_URLS): the newcomer's defaults,
    # but for the page server's address and the README's webhook receiver, allowed as the README shows.
    env = {k: v for k, v in os.environ.items()
           if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "BROKER_URL", "ENCRYPTION_KEY",
                        "RATELIMIT_STORAGE_URI", "RATELIMIT_KEY_PREFIX", "WEB_CONCURRENCY", "ALLOW_PRIVATE_URLS")}
    env.update(VAR_DIR=var_dir, PORT=str(port), SWEEP_INTERVAL_SECONDS="2",
               EGRESS_ALLOW_HOSTS=f"{pages.url().split('/')[2]},{README_RUN['EGRESS_ALLOW_HOSTS']},{DOCS_HOSTS}",
               # The README's var/hook/… is this instance's VAR_DIR (the README's commands run where var/ is it).
               WEBHOOK_CA_BUNDLE=os.path.join(var_dir, README_RUN["WEBHOOK_CA_BUNDLE"].removeprefix("var/")))
    log = open(os.path.join(var_dir, "run.log"), "w+")
    proc = subprocess.Popen(["make", "--no-print-directory", "run"], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180  # three celery workers booting on a loaded machine
        while time.monotonic() < deadline:
            output = Path(log.name).read_text()
            key = re.search(r"Development API key: (\S+)", output)
            try:
                if key and requests.get(base + "/healthz", timeout=1).ok and output.count("ready.") >= 3:
                    RUN.update(proc=proc, log=log.name)
                    yield base, key.group(1), var_dir
                    break
            except requests.RequestException:
                pass
            if proc.poll() is not None:
                break
            time.sleep(0.5)
        else:
            raise AssertionError("embedded stack did not start:\n" + Path(log.name).read_text()[-3000:])
        if proc.poll() is not None and not RUN.get("stopped"):
            raise AssertionError("make run exited:\n" + Path(log.name).read_text()[-3000:])
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def test_make_run_serves_the_whole_flow_on_sqlite_and_the_filesystem_broker(embedded_stack):
    base, key, var_dir = embedded_stack
    assert os.path.exists(os.path.join(var_dir, "remote-dispatch.db"))
    headers = {"x-api-key": key}
    submitted = requests.post(base + "/fast/v2/remote-dispatch", headers=headers, timeout=10,
                              json={"prompt": "answer Hello from Remote Dispatch", "executionMode": "cloud"})
    assert submitted.status_code == 202
    request_id = submitted.json()["requestId"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        body = requests.get(f"{base}/fast/v2/remote-dispatch/responses/{request_id}",
                            headers=headers, timeout=10).json()
        if body["completedAt"]:
            break
        time.sleep(0.3)
    assert body["status"] == "success"
    assert body["response"]["output"] == {"type": "text", "content": "Hello from Remote Dispatch"}
    assert body["usage"] == {"actions": 0, "credits": 0.0}
    assert requests.get(base + "/readyz", timeout=10).json() == {"status": "ready"}
    # SQLite has no NOTIFY: `wait` falls back to re-reading the row (WAIT_POLL_SECONDS).
    waited = requests.post(base + "/fast/v2/remote-dispatch", headers=headers, timeout=120,
                           json={"prompt": "answer inline", "executionMode": "cloud", "wait": True})
    assert waited.status_code == 200
    assert waited.json()["response"]["text"] == "inline"


def test_make_run_listens_on_loopback_only_with_its_own_control_socket(embedded_stack):
    base, _, var_dir = embedded_stack
    port = base.rsplit(":", 1)[1]
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.2:{port}/healthz", timeout=5)
    assert os.path.exists(os.path.join(var_dir, "gunicorn.ctl"))
    output = Path(RUN['log']).read_text()
    assert "No hostname was supplied" not in output
    assert "one web process" in output and output.count("Booting worker") == 1


def test_make_run_shows_the_tasks_it_runs_not_the_routine_sweeps(embedded_stack):
    base, key, _ = embedded_stack
    _run(base, key, {"prompt": "answer Hello", "executionMode": "cloud"})
    time.sleep(5)  # the sweeps run every 2 s here: several rounds of them
    output = Path(RUN['log']).read_text()
    assert "beat: Starting" in output and re.search(r"Task workers\.run_task\[\S+\] succeeded", output)
    for line in ("Sending due task", "workers.sweep_undispatched[", "workers.reap_browsers["):
        assert line not in output, line


def _poll_until_over(base, headers, request_id, timeout=90):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        body = requests.get(f"{base}/fast/v2/remote-dispatch/responses/{request_id}", headers=headers,
                            timeout=10).json()
        if body["status"] != "pending":
            return body
        time.sleep(0.3)
    raise AssertionError(f"task {request_id} still pending: {body}")


def _run(base, key, body, timeout=90):
    headers = {"x-api-key": key}
    submitted = requests.post(base + "/fast/v2/remote-dispatch", headers=headers, json=body, timeout=10)
    assert submitted.status_code == 202, submitted.text
    return _poll_until_over(base, headers, submitted.json()["requestId"], timeout)


def test_every_mode_runs_on_the_embedded_default_the_client_one_through_the_extension(embedded_stack, pages):
    from tests.extension_support import ExtensionBrowser, wait_for_window

    base, key, _ = embedded_stack
    steps = f"/Operator\ngo to {pages.url('/hello')}\nextract h1"
    for mode in ("cloud", "cloud_browser"):
        body = _run(base, key, {"prompt": steps, "executionMode": mode})
        assert (body["status"], body["response"]["text"]) == ("success", "Hello from a page"), (mode, body)
        assert body["response"]["actionTrace"][-1]["planner"] == "builtin"
    extension = ExtensionBrowser()
    try:
        extension.configure(base, key)  # the registration that answered 500 on SQLite
        window = wait_for_window(base, key)
        body = _run(base, key, {"prompt": steps, "executionMode": "client", "browserWindowId": window})
        assert (body["status"], body["response"]["text"]) == ("success", "Hello from a page"), body
        assert body["browserWindowId"] == window
        # A server's 404 page is no answer, in the caller's window as in the others.
        gone = _run(base, key, {"prompt": f"/Operator\ngo to {pages.url('/gone')}\nextract h1",
                                "executionMode": "client", "browserWindowId": window})
        assert gone["status"] == "error" and "HTTP 404" in gone["response"]["text"], json.dumps(gone)
        assert gone["response"]["actionTrace"][0]["failed"] is True
    finally:
        extension.quit()
    windows = requests.get(base + "/fast/v2/browser-windows", headers={"x-api-key": key}, timeout=10)
    assert windows.status_code == 200 and [w["browserWindowId"] for w in windows.json()["windows"]] == [window]


def test_the_console_pages_answer_on_the_embedded_default(embedded_stack):
    base, key, _ = embedded_stack
    console = requests.Session()
    landing = console.get(base + "/", timeout=10)  # GET / sends people to the console (then to sign in)
    assert landing.url.startswith(base + "/console/signin") and landing.status_code == 200
    token = re.search(r'name="csrf_token" value="([^"]+)"', landing.text).group(1)
    signed_in = console.post(base + "/console/signin", data={"api_key": key, "csrf_token": token}, timeout=10)
    assert signed_in.url.split("?")[0].endswith("/console/tasks") and signed_in.status_code == 200
    request_id = _run(base, key, {"prompt": "answer shown in the console", "executionMode": "cloud"})["requestId"]
    for page in ("/console/tasks", "/console/tasks/new", "/console/windows", f"/console/tasks/{request_id}"):
        answer = console.get(base + page, timeout=10)
        assert answer.status_code == 200, (page, answer.text[:500])
    assert "shown in the console" in console.get(f"{base}/console/tasks/{request_id}", timeout=10).text


def _every_page(base, headers, limit):
    """The key's task ids, following nextCursor from the first page to the last."""
    paged, cursor = [], ""
    while cursor is not None:
        body = requests.get(base + "/fast/v2/remote-dispatch/responses", headers=headers, timeout=10,
                            params={"limit": limit, "cursor": cursor}).json()
        paged += [task["requestId"] for task in body["responses"]]
        cursor = body["nextCursor"]
    return paged


def test_pages_of_tasks_neither_skip_nor_repeat_on_the_embedded_default(embedded_stack):
    """SQLite keeps '…21.254': a cursor compared as '…21.254000' repeated each page's last task (issue 35)."""
    base, key, var_dir = embedded_stack
    headers = {"x-api-key": key}
    for n in range(5):
        assert requests.post(base + "/fast/v2/remote-dispatch", headers=headers, timeout=10,
                             json={"prompt": f"answer page {n}", "executionMode": "cloud"}).status_code == 202
    every = requests.get(base + "/fast/v2/remote-dispatch/responses?limit=100", headers=headers, timeout=10).json()
    newest_first = [task["requestId"] for task in every["responses"]]
    assert _every_page(base, headers, limit=2) == newest_first and len(newest_first) >= 5
    # Rows of each form SQLite holds: milliseconds and a whole second from the clock, and a whole second without
    # a fraction (rows from before milliseconds), two of each, paged one at a time.
    import sqlite3

    with sqlite3.connect(os.path.join(var_dir, "remote-dispatch.db"), timeout=30) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(tasks)")]
        model = dict(zip(columns, conn.execute("SELECT * FROM tasks WHERE id = ?", (newest_first[0],)).fetchone()))
        forms = ["2020-01-01 00:00:02.500", "2020-01-01 00:00:02.000", "2020-01-01 00:00:01"]
        old = [(f"00000000-0000-0000-0000-00000000000{n}", forms[n // 2]) for n in range(6)]
        for task_id, created_at in old:
            row = {**model, "id": task_id, "created_at": created_at}
            conn.execute(f"INSERT INTO tasks ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                         [row[c] for c in columns])
    # The console's "Older tasks" walks the same pages, 20 at a time.
    for n in range(20):
        requests.post(base + "/fast/v2/remote-dispatch", headers=headers, timeout=10,
                      json={"prompt": f"answer console page {n}", "executionMode": "cloud"})
    console = requests.Session()
    token = re.search(r'name="csrf_token" value="([^"]+)"', console.get(base + "/console/signin", timeout=10).text)
    console.post(base + "/console/signin", data={"api_key": key, "csrf_token": token.group(1)}, timeout=10)
    shown, url = [], base + "/console/tasks"
    while url:
        page = console.get(url, timeout=10).text
        shown += re.findall(r'data-task-id="([^"]+)"', page)
        older = re.search(r'<a href="([^"]+)" rel="next">Older tasks</a>', page)
        url = base + older.group(1).replace("&amp;", "&") if older else None
    listed = requests.get(base + "/fast/v2/remote-dispatch/responses?limit=100", headers=headers, timeout=10).json()
    assert shown == [task["requestId"] for task in listed["responses"]] and len(shown) > 20
    paged = _every_page(base, headers, limit=1)
    assert paged == shown and paged[-6:] == ["00000000-0000-0000-0000-000000000001",
                                             "00000000-0000-0000-0000-000000000000",
                                             "00000000-0000-0000-0000-000000000003",
                                             "00000000-0000-0000-0000-000000000002",
                                             "00000000-0000-0000-0000-000000000005",
                                             "00000000-0000-0000-0000-000000000004"]


def _doc_blocks():
    """(heading, language, body) of each ```sh and ```python block of the docs with examples, in order."""
    heading, blocks = None, []
    for doc in EXAMPLE_DOCS:
        for match in re.finditer(r"^(#+ [^\n]*)$|^```(sh|python)\n(.*?)^```", (ROOT / "docs" / doc).read_text(),
                                 re.M | re.S):
            if match[1]:
                heading = match[1]
            else:
                blocks.append((heading, match[2], match[3]))
    return blocks


def _commands(block):
    """The block's `curl` commands (with their continuation lines) and the `printf` lines that make their files."""
    commands, current = [], None
    for line in block.splitlines():
        if current is None and not line.lstrip().startswith(("curl ", "printf ")):
            continue
        current = line if current is None else current + "\n" + line
        if not line.rstrip().endswith("\\") and current.count("'") % 2 == 0:  # not inside a '…' string
            commands.append(current)
            current = None
    return commands


def _wait_for_port(port, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on port {port}")


def test_the_docs_curl_examples_work_as_written(embedded_stack, tmp_path):
    """Every curl command of the API guide and its neighbours, taken from their text and run by bash against
    `make run`."""
    base, key, _ = embedded_stack
    headers = {"x-api-key": key}
    found = {}  # what earlier answers gave, for the docs' placeholders

    def submitted(body):
        request_id = requests.post(base + "/fast/v2/remote-dispatch", headers=headers, json=body,
                                   timeout=10).json()["requestId"]
        found["<requestId>"] = request_id
        return request_id

    ran, answers, servers = [], [], []
    try:
        for heading, language, block in _doc_blocks():
            if language == "python":
                if "MCPServer" in block:  # the docs' own MCP server, started as they say
                    (tmp_path / "weather_mcp.py").write_text(block)
                    servers.append(subprocess.Popen([str(ROOT / ".venv/bin/python"), "weather_mcp.py"],
                                                    cwd=tmp_path, start_new_session=True,
                                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
                    _wait_for_port(8765)
                continue
            if "Cancelling" in heading:  # the example cancels a task that is still running
                submitted({"prompt": "wait 30\nanswer too late", "executionMode": "cloud"})
            if "Questions" in heading:  # ... and answers one that asked
                request_id = submitted({"prompt": "ask What is your name?", "executionMode": "cloud"})
                found["<inputId>"] = _poll_until_over(base, headers, request_id)["hitlInputMetadata"]["inputId"]
            if "Replay: run a successful task" in heading:  # its examples need a successful web run
                request_id = submitted({"prompt": '/Operator\ngo to data:text/html,<button>OK</button>\nclick "OK"',
                                        "executionMode": "cloud_browser"})
                assert _poll_until_over(base, headers, request_id)["status"] == "success"
                found["<requestId>"] = request_id
            for command in _commands(block):
                if "/webhooks" in command:  # a delivery log is there once the task (the one with a callbackUrl) ended
                    _poll_until_over(base, headers, found["<requestId>"])
                for placeholder, value in found.items():
                    command = command.replace(placeholder, value)
                assert "<" not in command.split("-d")[0] and "…" not in command, f"{heading}: unfilled {command}"
                command = command.replace("http://localhost:8000", base).replace(
                    "curl -s ", "curl -s -w '\\n%{http_code}' ", 1)
                result = subprocess.run(["bash", "-c", command], cwd=tmp_path, env={**os.environ, "KEY": key},
                                        capture_output=True, text=True, timeout=120)
                if command.startswith("printf"):
                    assert result.returncode == 0, result.stderr
                    continue
                text, _, status = result.stdout.rpartition("\n")
                documented = re.findall(r"#\s*\(?(\d{3})\b", command)  # "# 202 …" after the command
                assert status.isdigit() and (int(status) == int(documented[0]) if documented
                                             else int(status) < 300), f"{heading}: {command}\n→ {status} {text[:500]}"
                ran.append(command)
                answers.append(text)
                answer = json.loads(text) if text.strip().startswith("{") else {}
                if "cloudBrowserSessionId" in command:  # a kept session's task says what really runs it
                    assert requests.get(f"{base}/fast/v2/remote-dispatch/responses/{answer['requestId']}",
                                        headers=headers, timeout=10).json()["executionMode"] == "cloud_browser"
                for field, placeholder in (("requestId", "<requestId>"), ("key", "file_…"), ("session_id", "cbs_…"),
                                           ("scriptId", "<scriptId>")):
                    if isinstance(answer.get(field), str):
                        found[placeholder] = answer[field]
    finally:
        for server in servers:
            os.killpg(server.pid, signal.SIGTERM)
            server.wait(10)
    # What the docs say the examples answer.
    assert len(ran) >= 15 and servers
    outputs = [json.loads(a).get("response") or {} for a in answers if a.startswith("{")]
    assert any(o.get("text") == "Forecast for Oslo: sunny, 21 C" for o in outputs)  # the MCP server
    assert any(o.get("structuredOutput") == {"city": "Oslo", "population": 709000} for o in outputs)  # responseFormat
    assert any("Total: 49.00 EUR" in (o.get("text") or "") for o in outputs)  # the attachment


# Prepended to the README's commands: stop at the first failing command, and at any answer that is not 2xx
# (curl itself exits 0 on a 4xx or 5xx).
STRICT = r"""set -euo pipefail
curl() {
  local out status
  out=$(command curl -w '\n%{http_code}' "$@") || return
  status=${out##*$'\n'}
  printf '%s\n' "${out%$'\n'*}"
  [[ $status == 2?? ]] || { echo "HTTP $status from: curl $*" >&2; return 1; }
}
"""


def _readme_script(base):
    """The README's ```sh blocks, in order, as one bash script. Its `make` lines are the reader's other terminal:
    the instance under test was started with the settings the README gives them."""
    lines = [":  # " + line if re.match(r"^(?:[A-Z_]+=\S+ )*make ", line) else line
             for block in re.findall(r"^```sh\n(.*?)^```", README, re.M | re.S) for line in block.splitlines()]
    return STRICT + "\n".join(lines).replace("http://localhost:8000", base) + "\n"


def test_every_command_of_the_readme_runs_as_written(embedded_stack, tmp_path):
    """A reader's terminal: the repository's .venv, make run's var/ (its key file), the README's commands in order."""
    base, _, var_dir = embedded_stack
    os.symlink(ROOT / ".venv", tmp_path / ".venv")
    os.symlink(var_dir, tmp_path / "var")
    (tmp_path / "readme.sh").write_text(_readme_script(base))
    with open(tmp_path / "out.log", "w+") as out:
        reader = subprocess.Popen(["bash", "readme.sh"], cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                                  start_new_session=True)  # its page server and webhook receiver stay in its group
        try:
            returncode = reader.wait(300)
            deadline = time.monotonic() + 60  # the README's webhook is delivered after the script's last command
            while '"Hello, webhook"' not in (tmp_path / "out.log").read_text() and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            os.killpg(reader.pid, signal.SIGTERM)
    output = (tmp_path / "out.log").read_text()
    assert returncode == 0, output[-3000:]
    assert re.search(r'"structuredOutput":\s*\{"city":\s*"Oslo",\s*"population":\s*709000\}', output), output
    assert '"Signed in (7 characters)"' in output and '"Signed in (13 characters)"' in output  # the task, its replay
    assert 'type "${PASSWORD}" into "Password"' in output  # the script keeps the secret's name, never its value
    assert "hunter2" not in output and "correct horse" not in output
    assert "webhook-id:" in output and '"Hello, webhook"' in output  # the event, as the receiver printed it
    assert "month,total\nOctober,42\n" in output and "\nreport.csv\n" in output  # the browser's download: bytes, listed


def test_ctrl_c_hands_the_running_task_back_and_stops_cleanly(embedded_stack):
    import sqlite3

    base, key, var_dir = embedded_stack
    request_id = requests.post(base + "/fast/v2/remote-dispatch", headers={"x-api-key": key}, timeout=10,
                               json={"prompt": "wait 60\nanswer late", "executionMode": "cloud"}).json()["requestId"]
    database = os.path.join(var_dir, "remote-dispatch.db")

    def row():
        with sqlite3.connect(database, timeout=30) as conn:
            return conn.execute("SELECT status, lease_owner, attempt FROM tasks WHERE id = ?",
                                (request_id,)).fetchone()

    deadline = time.monotonic() + 30
    while row()[1] is None:
        assert time.monotonic() < deadline, "the worker never claimed the task"
        time.sleep(0.2)
    proc = RUN['proc']
    RUN["stopped"] = True
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal sends
    proc.wait(30)
    output = Path(RUN['log']).read_text()
    assert "sending SIGKILL" not in output, output[-3000:]  # all stopped inside the grace
    assert "handed back to the queue" in output
    assert "Error 130" not in output  # Ctrl-C is a clean stop, not a make error
    assert not re.findall(r"ERROR|Traceback", output), output[-3000:]
    assert row() == ("pending", None, 0)  # no lease to wait out; the next start runs it
