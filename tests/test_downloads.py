"""Files out: what a task's browser downloads becomes a file of the key (response.files, GET /fast/v2/files/{key},
GET /fast/v2/files, a later task's attachment), within the caps, and never lands outside the task's own folder."""
import io
import json
import os
import threading
import time

import pytest

from app.extensions import db
from app.models import WebhookDelivery
from app.webhooks import outbox
from tests.agent_support import run
from tests.conftest import WorkerProcess, submit, wait_for_status
from tests.page_server import PageServer

FILES = "/fast/v2/files"
SALES = b"region,units\nNorth,7\nSouth,42\n\xc3\xa9t\xc3\xa9,3\r\n"  # exact bytes: UTF-8, a CRLF line too
EXPORT = """<html><head><title>Export</title></head><body><h1>Exports</h1>
<p><a href="/sales.csv">Download CSV</a></p>
<p><a href="/escape.csv">Download the other one</a></p>
<p><a href="/a.csv">File A</a> <a href="/b.csv">File B</a> <a href="/big.csv">File big</a></p>
<p><a href="/slow.csv">Slow CSV</a></p>
</body></html>"""


def attachment(data, filename, content_type="text/csv"):
    return data, {"Content-Type": content_type, "Content-Disposition": f'attachment; filename="{filename}"'}


@pytest.fixture(scope="module")
def pages():
    server = PageServer({"/export": EXPORT}, files={
        "/sales.csv": attachment(SALES, "sales.csv"),
        # A name that climbs out of the folder: Chromium saves it inside, under a name of its making.
        "/escape.csv": attachment(b"x,y\n1,2\n", "../../../../escape.csv"),
        "/a.csv": attachment(b"a" * 700, "a.csv"),
        "/b.csv": attachment(b"b" * 900, "b.csv"),
        "/big.csv": attachment(b"B" * 1200, "big.csv"),
        "/slow.csv": (*attachment(SALES * 100, "slow.csv"), 3),  # its second half 3 s after the first
    })
    yield server
    server.close()


def fence(pages):
    return {"executionMode": "cloud_browser", "allowedDomains": [pages.url("/").split("/")[2]]}


def steps(pages, *lines):
    return "\n".join(["/Operator", f"go to {pages.url('/export')}", *lines, "answer done"])


@pytest.fixture
def browser_worker(app):
    proc = WorkerProcess(queues="tasks", concurrency=1, name="downloads")
    yield proc
    proc.stop()


def everything_under(folder):
    return sorted(os.path.relpath(os.path.join(root, name), folder)
                  for root, dirs, names in os.walk(folder) for name in names + dirs)


@pytest.mark.slow
def test_a_downloaded_csv_is_a_file_of_the_key_and_a_later_task_reads_it(
        app, client, api_key, other_key, pages, browser_worker):
    request_id = submit(client, api_key, {
        **fence(pages), "prompt": steps(pages, 'click "Download CSV"', 'click "Download the other one"'),
        "callbackUrl": "https://127.0.0.1:9/hook"}).get_json()["requestId"]
    body = wait_for_status(client, api_key, request_id, timeout=120)
    assert body["status"] == "success", body
    files = body["response"]["files"]
    by_name = {item["filename"]: item for item in files}
    sales = by_name["sales.csv"]
    assert sales == {"key": sales["key"], "filename": "sales.csv", "size": len(SALES), "contentType": "text/csv"}
    assert sales["key"].startswith("file_")
    (other,) = [item for item in files if item is not sales]
    # Chromium replaced the separators ("_.._.._.._escape.csv"): a name, not a path.
    assert "/" not in other["filename"] and not other["filename"].startswith(".")
    assert other["filename"].endswith("escape.csv")

    # Each download has its entry, before the final one (which still carries the credits).
    trace = body["response"]["actionTrace"]
    kept = [entry for entry in trace if entry["action"] == "download sales.csv"]
    assert len(kept) == 1 and kept[0]["result"].startswith(f"kept as {sales['key']} ({len(SALES)} bytes")
    assert "credits" in trace[-1] and trace[-1]["action"] == "done"

    # The webhook's response carries the same list.
    delivery = db.session.query(WebhookDelivery).filter_by(task_id=request_id).one()
    assert json.loads(outbox.body(delivery).decode())["response"]["files"] == files

    # The bytes, exactly, to the owner; another key gets 404.
    response = client.get(f"{FILES}/{sales['key']}", headers={"x-api-key": api_key})
    assert response.status_code == 200
    assert response.data == SALES
    assert response.mimetype == "text/csv"
    assert response.headers["Content-Disposition"] == 'attachment; filename=sales.csv'
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    refused = client.get(f"{FILES}/{sales['key']}", headers={"x-api-key": other_key})
    assert refused.status_code == 404 and refused.get_json()["error"] == "File Not Found"

    # The key's files list them, with the task that downloaded them; another key's list is empty.
    listed = client.get(FILES, headers={"x-api-key": api_key}).get_json()
    assert {item["key"] for item in listed["files"]} == {item["key"] for item in files}
    assert {item["requestId"] for item in listed["files"]} == {request_id}
    assert client.get(FILES, headers={"x-api-key": other_key}).get_json() == {"files": [], "nextCursor": None}

    # Nothing stays on the worker's disk, and nothing ever landed outside the task's folder.
    assert not [path for path in everything_under(app.config["DOWNLOAD_DIR"]) if request_id in path]
    assert not [path for path in everything_under(os.environ["VAR_DIR"]) if "escape" in path]

    # A later task reads it as an attachment, like an upload.
    _, later = run(client, api_key, {"prompt": f"read attachment {sales['key']}",
                                     "attachments": [{"key": sales["key"]}]})
    assert later["status"] == "success", later
    content = later["response"]["output"]["content"]
    assert content.startswith("sales.csv: CSV, 3 rows; columns: region, units") and "South,42" in content
    refused = submit(client, other_key, {"prompt": "read it", "executionMode": "cloud",
                                         "attachments": [{"key": sales["key"]}]})
    assert refused.status_code == 400 and sales["key"] in refused.get_json()["message"]


@pytest.mark.slow
def test_a_file_over_a_cap_is_left_out_and_the_trace_says_so(client, api_key, pages):
    worker = WorkerProcess(queues="tasks", concurrency=1, name="downloads-caps",
                           env={"DOWNLOAD_MAX_FILE_BYTES": "1000", "DOWNLOAD_MAX_TASK_BYTES": "1500"})
    try:
        request_id = submit(client, api_key, {
            **fence(pages), "prompt": steps(pages, 'click "File A"', 'click "File B"', 'click "File big"'),
        }).get_json()["requestId"]
        body = wait_for_status(client, api_key, request_id, timeout=120)
    finally:
        worker.stop()
    assert body["status"] == "success", body
    # a.csv (700) is kept; b.csv (900) would take the task past 1500; big.csv (1200) is over 1000 on its own.
    assert [(item["filename"], item["size"]) for item in body["response"]["files"]] == [("a.csv", 700)]
    entries = {entry["action"]: entry for entry in body["response"]["actionTrace"]}
    assert entries["download a.csv"]["result"].startswith("kept as file_")
    assert entries["download b.csv"]["failed"] is True
    assert entries["download b.csv"]["error"] == (
        "left out: 900 bytes, which would take this task's downloads past 1500 bytes (DOWNLOAD_MAX_TASK_BYTES)")
    assert entries["download big.csv"]["failed"] is True
    assert entries["download big.csv"]["error"] == (
        "left out: 1200 bytes, over the limit of 1000 bytes for one downloaded file (DOWNLOAD_MAX_FILE_BYTES)")
    listed = client.get(FILES, headers={"x-api-key": api_key}).get_json()["files"]
    assert [item["filename"] for item in listed] == ["a.csv"]


@pytest.mark.slow
def test_a_download_still_being_written_when_the_task_ends_is_waited_for(client, api_key, pages, browser_worker):
    request_id = submit(client, api_key, {**fence(pages), "prompt": steps(pages, 'click "Slow CSV"')}
                        ).get_json()["requestId"]
    body = wait_for_status(client, api_key, request_id, timeout=120)
    assert body["status"] == "success", body
    (stored,) = body["response"]["files"]
    assert (stored["filename"], stored["size"]) == ("slow.csv", len(SALES) * 100)
    assert client.get(f"{FILES}/{stored['key']}", headers={"x-api-key": api_key}).data == SALES * 100


def upload(client, key, data, filename):
    response = client.post(FILES, headers={"x-api-key": key}, content_type="multipart/form-data",
                           data={"file": (io.BytesIO(data), filename)})
    assert response.status_code == 201
    return response.get_json()


def test_the_files_list_pages_newest_first_and_is_the_key_s_own(client, api_key, other_key):
    keys = [upload(client, api_key, f"n{n}".encode(), f"note{n}.txt")["key"] for n in range(3)]
    upload(client, other_key, b"theirs", "theirs.txt")
    first = client.get(FILES + "?limit=2", headers={"x-api-key": api_key}).get_json()
    assert [item["key"] for item in first["files"]] == keys[:0:-1]
    assert first["files"][0] == {"key": keys[2], "filename": "note2.txt", "size": 2, "contentType": "text/plain",
                                 "requestId": None, "sessionId": None, "createdAt": first["files"][0]["createdAt"]}
    assert first["nextCursor"]
    second = client.get(FILES, query_string={"limit": 2, "cursor": first["nextCursor"]},
                        headers={"x-api-key": api_key}).get_json()
    assert [item["key"] for item in second["files"]] == keys[:1] and second["nextCursor"] is None
    bad = client.get(FILES + "?cursor=nope", headers={"x-api-key": api_key})
    assert bad.status_code == 400 and "cursor" in bad.get_json()["message"]
    assert client.get(FILES).status_code == 401


def test_an_upload_s_bytes_come_back_to_its_key_only(client, api_key, other_key):
    stored = upload(client, api_key, b"<script>alert(1)</script>", "r\u00e9sum\u00e9; x=1.html")
    assert stored["filename"] == "r\u00e9sum\u00e9; x=1.html"
    response = client.get(f"{FILES}/{stored['key']}", headers={"x-api-key": api_key})
    assert response.status_code == 200 and response.data == b"<script>alert(1)</script>"
    assert response.mimetype == "text/html"
    # Served as a download, never rendered on the API's origin; the name is quoted safely (RFC 6266).
    assert response.headers["Content-Disposition"] == (
        "attachment; filename=\"resume; x=1.html\"; filename*=UTF-8''r%C3%A9sum%C3%A9%3B%20x%3D1.html")
    assert response.headers["Content-Security-Policy"] == "sandbox"
    assert client.get(f"{FILES}/{stored['key']}", headers={"x-api-key": other_key}).status_code == 404
    assert client.get(f"{FILES}/file_unknown", headers={"x-api-key": api_key}).status_code == 404


def test_the_console_task_page_lists_the_task_s_files_and_serves_them_to_their_key(client, api_key, other_key):
    import re

    from sqlalchemy import select, update

    from app.crypto import hash_key
    from app.models import ApiKey, Task

    mine = upload(client, api_key, SALES, "sales.csv")
    theirs = upload(client, other_key, b"theirs", "theirs.csv")
    owner = db.session.execute(select(ApiKey.id).where(ApiKey.key_hash == hash_key(api_key))).scalar_one()
    task = Task(api_key_id=owner, agent="web", execution_mode="cloud_browser", prompt="/Operator\nclick x",
                status="success", response={"output": {"type": "text", "content": "done"}, "text": "done",
                                            "actionTrace": [], "files": [mine]})
    db.session.add(task)
    db.session.commit()
    task_id = task.id

    def token(path):
        return re.search(r'name="csrf_token" value="([^"]+)"', client.get(path).get_data(as_text=True))[1]

    assert client.post("/console/signin", data={"api_key": api_key, "csrf_token": token("/console/signin")}
                       ).status_code == 302
    page = client.get(f"/console/tasks/{task_id}").get_data(as_text=True)
    link = f"/console/tasks/{task_id}/files/{mine['key']}"
    assert "Downloaded files" in page and f'href="{link}">sales.csv</a>' in page
    served = client.get(link)
    assert served.status_code == 200 and served.data == SALES and served.mimetype == "text/csv"
    assert served.headers["Content-Disposition"] == "attachment; filename=sales.csv"
    assert client.get(f"/console/tasks/{task_id}/files/{theirs['key']}").status_code == 404


def test_a_kept_session_s_downloads_have_a_total_and_a_count_cap(app, api_key):
    """A session's downloads are stored by its holder every second, over its whole life: the total and the count of
    its files are capped as a task's total is (DOWNLOAD_MAX_SESSION_BYTES, DOWNLOAD_MAX_SESSION_FILES)."""
    from app.models import ApiKey, StoredFile
    from app.sessions import browsers, service as sessions

    key_id = db.session.query(ApiKey.id).filter(ApiKey.name == "alice").scalar()
    session_id = "cbs_capped"
    folder = browsers.downloads_dir(app.config, session_id)
    folder.mkdir(parents=True, exist_ok=True)
    caps = {"DOWNLOAD_MAX_FILE_BYTES": 1000, "DOWNLOAD_MAX_TASK_BYTES": 1500,
            "DOWNLOAD_MAX_SESSION_BYTES": 2500, "DOWNLOAD_MAX_SESSION_FILES": 4}
    saved = {name: app.config[name] for name in caps if name in app.config}
    app.config.update(caps)
    try:
        kept = []
        # Each round is what the holder finds in one second: a 900-byte file, never over a file's or a task's cap.
        for round_ in range(4):
            (folder / f"r{round_}.csv").write_bytes(b"x" * 900)
            kept += sessions.keep_downloads(key_id, session_id)
        # Then small files: the count stops them once the session holds four.
        for round_ in range(4):
            (folder / f"s{round_}.csv").write_bytes(b"s" * 10)
            kept += sessions.keep_downloads(key_id, session_id)
    finally:
        app.config.update(saved)
        for name in caps:
            if name not in saved:
                app.config.pop(name)
    stored = db.session.query(StoredFile.filename, StoredFile.size).filter(StoredFile.session_id == session_id
                                                                           ).order_by(StoredFile.filename).all()
    assert stored == [("r0.csv", 900), ("r1.csv", 900), ("s0.csv", 10), ("s1.csv", 10)]
    reasons = {item["name"]: item.get("leftOut") for item in kept}
    assert reasons["r2.csv"] == ("900 bytes, which would take this session's downloads past 2500 bytes "
                                 "(DOWNLOAD_MAX_SESSION_BYTES)")
    assert reasons["s2.csv"] == "this session already has 4 downloaded files (DOWNLOAD_MAX_SESSION_FILES)"
    # What was left out is gone from the machine's disk too.
    assert sorted(os.listdir(browsers.files_dir(app.config, session_id))) == ["r0.csv", "r1.csv", "s0.csv", "s1.csv"]


class EndlessDownload:
    """A loopback server whose /endless.bin is an attachment that never ends (64 KB every 10 ms, no length), and that
    records how much it sent before the browser let go of it."""

    def __init__(self):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.sent, self.ended = 0, threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path != "/endless.bin":
                    body = (b'<html><head><title>Endless</title></head><body>'
                            b'<a href="/endless.bin">Endless file</a></body></html>')
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Disposition", 'attachment; filename="endless.bin"')
                self.end_headers()
                chunk = b"e" * 65536
                try:
                    while True:
                        self.wfile.write(chunk)
                        owner.sent += len(chunk)
                        time.sleep(0.01)
                except OSError:  # the browser closed the connection: cancelled, or the browser is gone
                    owner.ended.set()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, path="/"):
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.slow
def test_an_endless_download_is_cancelled_once_it_passes_the_cap_while_it_is_written(client, api_key):
    """A page's download with no end is ended by its size, not by the task's end: the browser cancels it once it
    passes DOWNLOAD_MAX_FILE_BYTES (1 MB here), the trace says so, and nothing of it is kept or left on disk."""
    endless = EndlessDownload()
    worker = WorkerProcess(queues="tasks", concurrency=1, name="downloads-endless",
                           env={"DOWNLOAD_MAX_FILE_BYTES": str(1024 * 1024), "DOWNLOAD_WAIT_SECONDS": "30"})
    try:
        request_id = submit(client, api_key, {
            "executionMode": "cloud_browser", "allowedDomains": [endless.url().split("/")[2]],
            "prompt": "\n".join(["/Operator", f"go to {endless.url('/')}", 'click "Endless file"', "answer done"]),
        }).get_json()["requestId"]
        body = wait_for_status(client, api_key, request_id, timeout=120)
    finally:
        worker.stop()
        endless.close()
    assert body["status"] == "success", body
    entries = {entry["action"]: entry for entry in body["response"]["actionTrace"]}
    assert "download endless.bin" in entries, list(entries)
    assert not body["response"].get("files")
    cut = entries["download endless.bin"]
    assert cut["failed"] is True
    assert cut["error"].startswith("left out: cancelled while it was written, at "), cut
    assert cut["error"].endswith("over the limit of 1048576 bytes for one downloaded file (DOWNLOAD_MAX_FILE_BYTES)")
    # The browser let go of the stream itself: before the task's end waited DOWNLOAD_WAIT_SECONDS (30 s, some
    # 190 MB at this server's pace) for a file still being written.
    assert endless.ended.is_set() and endless.sent < 30 * 1024 * 1024, endless.sent
