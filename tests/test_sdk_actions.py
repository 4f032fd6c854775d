"""Every action of the official `narada` SDK, called as a user would, in a kept cloud session and in a window
with our extension: what works answers as documented, what needs an outside account is a clear NaradaError."""
import base64
import json
import io
import shutil
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from openpyxl import Workbook, load_workbook
from pypdf import PdfReader

from app.sandbox.box import browser_owned
from tests.conftest import make_key, wait_until, worker  # noqa: F401 (fixture)
from tests.extension_support import browser, module_key, window  # noqa: F401 (fixtures)
from tests.test_extension_ui import side_panel  # noqa: F401 (fixture)
from tests.page_server import PageServer
from tests.sdk_support import LiveService, run_sdk

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# A target for the mouse: each event it gets is logged in #log; the page scrolls.
MOUSE = """<html><head><title>Mouse</title></head><body style="margin:0">
<h1 style="position:absolute;left:300px;top:0">Quarterly invoice 4711</h1>
<button id="b" style="position:absolute;left:0;top:0;width:200px;height:100px" onclick="log('click')"
  oncontextmenu="event.preventDefault(); log('right')" ondblclick="log('double')">Target</button>
<input id="t" style="position:absolute;left:0;top:150px;width:200px;height:40px" value="old">
<p id="log" style="position:absolute;left:0;top:250px"></p>
<div style="height:4000px"></div>
<script>function log(s) { document.getElementById('log').textContent += s + ' '; }</script>
</body></html>"""

# The actions every environment runs the same way; `agent`, `env`, `out` and `workbook` are the script's.
COMMON = '''
import base64
import json
from narada_core.errors import NaradaError
from narada.vector_stores import VectorStoreCatalog
from narada.google_drive import GoogleDriveClient
js = agent.execute_javascript_on_page

async def error_of(call):
    try:
        await call
        return None
    except Exception as exc:
        return [type(exc).__name__, str(exc)]

await agent.go_to_url(url=MOUSE_URL)
await agent.agentic_selector(action={"type": "click"}, selectors={"id": "b"}, fallback_operator_query="target")
await agent.agentic_selector(action={"type": "right_click"}, selectors={"id": "b"}, fallback_operator_query="t")
await agent.agentic_selector(action={"type": "double_click"}, selectors={"text_content": "Target"},
                             fallback_operator_query="target")
await agent.agentic_selector(action={"type": "hover"}, selectors={"id": "b"}, fallback_operator_query="target")
out["selector_log"] = await js(code="document.getElementById('log').textContent")
await js(code="document.getElementById('log').textContent = ''")
size = await js(code="[innerWidth, innerHeight]")
click = {"x": 100, "y": 50, "viewport": {"width": size[0], "height": size[1]}}
scaled = {"x": 200, "y": 100, "viewport": {"width": size[0] * 2, "height": size[1] * 2}}  # the same point
out["mouse"] = [
    await agent.agentic_mouse_action(action={"type": "click"}, recorded_click=click, fallback_operator_query="b"),
    await agent.agentic_mouse_action(action={"type": "right_click"}, recorded_click=scaled,
                                     fallback_operator_query="b", resize_window=True),
    await agent.agentic_mouse_action(action={"type": "double_click"}, recorded_click=click,
                                     fallback_operator_query="b", resize_window=False,
                                     verification_description="the button was double clicked"),
]
await agent.agentic_mouse_action(action={"type": "fill", "text": "typed"},
                                 recorded_click={"x": 100, "y": 170, "viewport": click["viewport"]},
                                 fallback_operator_query="the input")
await agent.agentic_mouse_action(action={"type": "scroll", "horizontal": 0, "vertical": 600},
                                 recorded_click=click, fallback_operator_query="the page")
out["mouse_log"] = await js(code="document.getElementById('log').textContent")
out["filled"] = await js(code="document.getElementById('t').value")
out["scrolled"] = await js(code="scrollY")
out["outside"] = await error_of(agent.agentic_mouse_action(
    action={"type": "click"}, recorded_click={"x": 99999, "y": 5, "viewport": click["viewport"]},
    fallback_operator_query="far away", resize_window=False))
await js(code="scrollTo(0, 0)")
pdf = await agent.save_pdf_file()
out["pdf"] = [pdf.base64_content, pdf.name, pdf.mime_type, bool(pdf.timestamp)]
await agent.go_to_url(url=PDF_URL)  # a tab showing a PDF: its own bytes come back
shown = await agent.save_pdf_file()
out["shown_pdf"] = [shown.name, shown.base64_content]
await agent.go_to_url(url=MOUSE_URL)
out["unmatched"] = await error_of(agent.agentic_selector(action={"type": "click"}, selectors={"id": "nowhere"},
                                                         fallback_operator_query="the missing button"))
out["finder"] = await error_of(agent.agentic_matching_selectors_finder(prompt="every button"))
out["excel_before"] = (await agent.read_excel_sheet(workbook_url=WORKBOOK, range="Prices!A1:B3",
                                                    microsoft_account_email="ada@example.com")).values
await agent.write_excel_sheet(workbook_url="http://files.example/x/" + WORKBOOK, range="Prices!C1:C2",
                              microsoft_account_email="ada@example.com", values=[["note"], ["cheap"]])
out["excel_after"] = (await agent.read_excel_sheet(workbook_url=WORKBOOK, range="Prices!A1:C2",
                                                   microsoft_account_email="ada@example.com")).values
out["excel_missing"] = await error_of(agent.read_excel_sheet(workbook_url="file_nope", range="A1:B2",
                                                             microsoft_account_email="ada@example.com"))
out["google"] = [
    await error_of(agent.read_google_sheet(spreadsheet_id="s", range="A1:B2")),
    await error_of(agent.write_google_sheet(spreadsheet_id="s", range="A1", values=[["x"]])),
    await error_of(agent.append_google_sheet_row(spreadsheet_id="s", header_range="A1:B1", row={"a": 1})),
]
auth = {"x-api-key": os.environ["NARADA_API_KEY"]}
stores = VectorStoreCatalog(base_url=os.environ["NARADA_API_BASE_URL"], auth_headers=auth)
drive = GoogleDriveClient(base_url=os.environ["NARADA_API_BASE_URL"], auth_headers=auth)
out["vector_stores"] = [await error_of(stores.list()), await stores.get(id="vs_1"),
                        await stores.get(path="/ada@example.com/notes")]
out["drive"] = [await error_of(drive.list_files(folder="abc")), await error_of(drive.download_file(file="abc"))]
if IN_SESSION:  # the questions wait in the input-required flow: answered here as a person would, over the API
    import aiohttp
    base, headers = os.environ["NARADA_API_BASE_URL"], {"x-api-key": os.environ["NARADA_API_KEY"]}
    out["asked"] = []

    async def answer(reply):
        async with aiohttp.ClientSession() as http:
            while True:
                async with http.get(f"{base}/remote-dispatch/responses?status=input-required",
                                    headers=headers) as listed:
                    waiting = (await listed.json())["responses"]
                if waiting:
                    break
                await asyncio.sleep(0.2)
            metadata = waiting[0]["hitlInputMetadata"]
            out["asked"].append(metadata["action"]["prompt_message"])
            async with http.post(f"{base}/remote-dispatch/responses/{waiting[0]['requestId']}/input", headers=headers,
                                 json={"inputId": metadata["inputId"], "answer": reply}) as answered:
                answered.raise_for_status()

    async def asked(call, reply):
        return (await asyncio.gather(call, answer(reply)))[0]

    approved = await asked(agent.user_approval(prompt_message="Send it?", approve_label="Send", reject_label="No"),
                           "Send")
    values = await asked(agent.prompt_for_user_input(prompt_message="How many?", variables=[
        {"name": "n", "type": "number", "required": True}]), "3")
    file = await asked(agent.prompt_for_user_file(variable_name="prices", prompt_message="Which workbook?"), WORKBOOK)
    out["hitl"] = [approved, values, file["filename"], file["source"], base64.b64decode(file["base64"])[:2].decode()]
out["reset"] = await error_of(agent.reset_agent_state())
'''


@pytest.fixture(scope="module")
def service(app):
    live = LiveService(env={"WINDOW_OFFLINE_SECONDS": "60"})
    yield live
    live.stop()


@pytest.fixture(scope="module")
def web(service):
    """The extension's configured service URL is the live service's gunicorn."""
    return service.web


def tiny_pdf(text):
    """A one-page PDF showing `text` (Helvetica), written out by hand."""
    stream = f"BT /F1 12 Tf 10 50 Td ({text}) Tj ET"
    objects = ["<< /Type /Catalog /Pages 2 0 R >>", "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 100] /Contents 4 0 R "
               "/Resources << /Font << /F1 5 0 R >> >> >>",
               f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream",
               "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    table = "".join(f"{offset:010d} 00000 n \n" for offset in offsets)
    return out + (f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n{table}trailer\n"
                  f"<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{len(out)}\n%%EOF\n").encode()


INVOICE_PDF = tiny_pdf("Invoice 4711 as a PDF")


class PdfHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/pdf")
        self.send_header("Content-Length", str(len(INVOICE_PDF)))
        self.end_headers()
        self.wfile.write(INVOICE_PDF)


@pytest.fixture(scope="module")
def pages():
    server = PageServer({"/mouse": MOUSE})
    pdf = ThreadingHTTPServer(("127.0.0.1", 0), PdfHandler)
    threading.Thread(target=pdf.serve_forever, daemon=True).start()
    server.pdf_url = f"http://127.0.0.1:{pdf.server_address[1]}/files/invoice-4711.pdf"
    yield server
    pdf.shutdown()
    pdf.server_close()
    server.close()


def upload_workbook(service, key):
    book = Workbook()
    sheet = book.active
    sheet.title = "Prices"
    for row in (["item", "price"], ["tea", 3], ["cake", 4.5]):
        sheet.append(row)
    data = io.BytesIO()
    book.save(data)
    reply = requests.post(f"{service.api_base}/files", headers={"x-api-key": key}, timeout=30, files={
        "file": ("prices.xlsx", data.getvalue(), "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet")})
    assert reply.status_code == 201, reply.text
    return reply.json()["key"]


def script(environment, pages, workbook, in_session=False):
    return (f"MOUSE_URL, WORKBOOK, IN_SESSION = {pages.url('/mouse')!r}, {workbook!r}, {in_session}\n"
            f"PDF_URL = {pages.pdf_url!r}\nout = {{}}\n"
            f"{environment}\n"
            f"agent = Agent(environment=env)\ntry:\n"
            + "\n".join("    " + line for line in COMMON.strip("\n").splitlines())
            + "\nfinally:\n    await env.close()\nemit(**out)")


def assert_common(value, workbook_bytes):
    assert value["selector_log"].split() == ["click", "right", "click", "click", "double"]
    assert value["mouse"] == [None, None, None]  # the verification asked for: no status (no model checks it)
    assert value["mouse_log"].split() == ["click", "right", "click", "click", "double"]
    assert value["filled"] == "typed" and value["scrolled"] > 0
    assert value["outside"][0] == "NaradaError" and "outside the" in value["outside"][1]
    content, name, mime, stamped = value["pdf"]
    pdf = base64.b64decode(content)
    assert pdf[:5] == b"%PDF-" and name.endswith(".pdf") and mime == "application/pdf" and stamped
    assert "Quarterly invoice 4711" in "".join(page.extract_text() for page in PdfReader(io.BytesIO(pdf)).pages)
    assert value["shown_pdf"][0] == "invoice-4711.pdf" and base64.b64decode(value["shown_pdf"][1]) == INVOICE_PDF
    for error in (value["unmatched"], value["finder"]):
        assert error[0] == "NaradaError" and "LLM_BASE_URL" in error[1], error
    assert "No element matches the selectors" in value["unmatched"][1] and "the missing button" in value["unmatched"][1]
    assert value["excel_before"] == [["item", "price"], ["tea", "3"], ["cake", "4.5"]]
    assert value["excel_after"] == [["item", "price", "note"], ["tea", "3", "cheap"]]
    assert value["excel_missing"][0] == "NaradaError" and "uploaded with this API key" in value["excel_missing"][1]
    sheet = load_workbook(io.BytesIO(workbook_bytes))["Prices"]  # the stored upload itself changed
    assert [c.value for c in sheet["C"]][:2] == ["note", "cheap"] and sheet["B2"].value == 3
    for error in value["google"]:
        assert error[0] == "NaradaError" and "Google Sheets are not available here" in error[1], error
    listed, by_id, by_path = value["vector_stores"]
    assert "404" in listed[1] and "no Agent Studio vector stores" in listed[1] and by_id is None and by_path is None
    for error in value["drive"]:
        assert "404" in error[1] and "Google Drive is not reachable" in error[1], error


def stored_bytes(key):
    from app.extensions import db
    from app.models import StoredFile

    db.session.rollback()
    return db.session.get(StoredFile, key, populate_existing=True).data


def test_every_action_in_a_kept_cloud_session(service, pages):
    key = make_key("sdk-cloud", plan="pro")  # CloudBrowserEnvironment connects over CDP: a pro key
    workbook = upload_workbook(service, key)
    result = run_sdk(service, key, script('''
from narada import Agent, BrowserConfig, CloudBrowserEnvironment
env = CloudBrowserEnvironment(config=BrowserConfig(interactive=False), session_name="every action")
await env.start()''', pages, workbook, in_session=True))
    if not result.values:
        print(service.logs())
    value = result.value
    assert_common(value, stored_bytes(workbook))
    # No side panel in a cloud session: each question waited in the input-required flow until answered there.
    assert value["hitl"] == [True, {"n": 3}, "prices.xlsx", "inMemoryFile", "PK"]
    assert value["asked"] == ["Send it? (answer 'Send' or 'No')", "How many? (n)",
                              "Which workbook? (answer with the key of a file you uploaded with POST /fast/v2/files)"]
    # The SDK resets the agent by reloading the Narada side panel, which the relay shows it: nothing ran to cancel.
    assert value["reset"] is None


def test_reset_agent_state_cancels_the_task_running_in_the_session(service, pages):
    """reset_agent_state() ends what runs in the kept session as cancelled (a task another client started in its
    window), and the session stays open and usable by the SDK."""
    key = make_key("sdk-reset", plan="pro")
    result = run_sdk(service, key, f'''
        import aiohttp
        from narada import Agent, BrowserConfig, CloudBrowserEnvironment
        base, headers = os.environ["NARADA_API_BASE_URL"], {{"x-api-key": os.environ["NARADA_API_KEY"]}}
        env = CloudBrowserEnvironment(config=BrowserConfig(interactive=False), session_name="reset")
        await env.start()
        agent = Agent(environment=env)
        try:
            async with aiohttp.ClientSession() as http:
                async with http.post(f"{{base}}/remote-dispatch", headers=headers, json={{
                        "prompt": "wait 0.1\\nwait 120", "executionMode": "cloud_browser",
                        "cloudBrowserSessionId": env.cloud_browser_session_id,
                        "browserWindowId": env.browser_window_id}}) as submitted:
                    task = (await submitted.json())["requestId"]
                while True:  # its first step is done: it runs the long wait in the session's browser
                    async with http.get(f"{{base}}/remote-dispatch/responses/{{task}}", headers=headers) as polled:
                        if (await polled.json())["progress"]["actionTrace"]:
                            break
                    await asyncio.sleep(0.2)
            await agent.reset_agent_state()
            async with aiohttp.ClientSession() as http:
                while True:
                    async with http.get(f"{{base}}/remote-dispatch/responses/{{task}}", headers=headers) as polled:
                        body = await polled.json()
                    if body["status"] != "pending":
                        break
                    await asyncio.sleep(0.2)
            await agent.go_to_url(url={pages.url("/mouse")!r})  # the session's browser is free again
            title = await agent.execute_javascript_on_page(code="document.title")
            emit(task=task, status=body["status"], title=title, session=env.cloud_browser_session_id)
        finally:
            await env.close()
    ''')
    if not result.values:
        print(service.logs())
    value = result.value
    assert value["status"] == "error" and value["title"] == "Mouse"
    task = requests.get(f"{service.api_base}/remote-dispatch/responses/{value['task']}", headers={"x-api-key": key},
                        timeout=30).json()
    assert task["status"] == "error" and task["response"]["text"] == "cancelled", task
    assert [entry["action"] for entry in task["response"]["actionTrace"]][-1] == "error: cancelled"


def test_every_action_in_a_window_with_the_extension(service, browser, window, module_key, pages):
    workbook = upload_workbook(service, module_key)
    result = run_sdk(service, module_key, script(f'''
from narada import Agent, RemoteBrowserEnvironment
env = RemoteBrowserEnvironment(browser_window_id={window!r})''', pages, workbook).replace(
        "finally:\n    await env.close()", "finally:\n    pass"))
    if not result.values:
        print(service.logs())
    value = result.value
    assert_common(value, stored_bytes(workbook))
    assert value["reset"][0] == "ValueError" and "does not support agent state reset" in value["reset"][1]


def test_a_file_asked_for_in_the_side_panel_reaches_the_sdk(service, browser, window, side_panel, module_key):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    from selenium.webdriver.support.ui import WebDriverWait

    folder = tempfile.mkdtemp(prefix="rd-sdk-upload-")
    invoice = Path(folder) / "invoice.txt"
    invoice.write_text("Invoice 4711: 12.50 EUR\n")
    browser_owned(folder)  # the browser runs as its own user and reads the chosen file
    results = {}

    def ask():
        results["sdk"] = run_sdk(service, module_key, f'''
            from narada import Agent, RemoteBrowserEnvironment
            agent = Agent(environment=RemoteBrowserEnvironment(browser_window_id={window!r}))
            file = await agent.prompt_for_user_file(variable_name="invoice", prompt_message="Which invoice?")
            approved = await agent.user_approval(prompt_message="Pay it?", approve_label="Pay", reject_label="No")
            emit(file=file, approved=approved)
        ''')

    thread = threading.Thread(target=ask)
    thread.start()
    driver = browser.driver
    driver.switch_to.window(side_panel)
    try:
        chooser = WebDriverWait(driver, 60).until(
            EC.presence_of_element_located((By.CSS_SELECTOR, ".question input[type=file]")))
        assert "Which invoice?" in driver.find_element(By.CSS_SELECTOR, ".question").text
        chooser.send_keys(str(invoice))
        driver.find_element(By.CSS_SELECTOR, ".question .submit").click()
        WebDriverWait(driver, 60).until(EC.element_to_be_clickable((By.CSS_SELECTOR, ".question .approve"))).click()
    finally:
        thread.join(120)
        shutil.rmtree(folder, ignore_errors=True)
    value = results["sdk"].value
    assert value["approved"] is True
    assert value["file"]["filename"] == "invoice.txt" and value["file"]["source"] == "inMemoryFile"
    assert base64.b64decode(value["file"]["base64"]) == b"Invoice 4711: 12.50 EUR\n"


# The Excel actions and the window channel over plain HTTP, from a `free` key: the web process checks each call
# (bounded before its work) and a worker runs it (issue 43).

def action(client, key, window_id, name, **args):
    return client.post("/fast/v2/extension-actions", headers={"x-api-key": key}, json={
        "browserWindowId": window_id, "actionExecutionId": "action_1", "action": {"name": name, **args}})


def uploaded(client, key, book):
    data = io.BytesIO()
    book.save(data)
    reply = client.post("/fast/v2/files", headers={"x-api-key": key}, content_type="multipart/form-data",
                        data={"file": (io.BytesIO(data.getvalue()), "book.xlsx")})
    assert reply.status_code == 201, reply.get_json()
    return reply.get_json()["key"]


def big_book(rows=10_000, columns=10):
    """100,000 cells: about 200 KB of .xlsx, 3.4 MB unpacked."""
    book = Workbook()
    for r in range(rows):
        book.active.append([r + 1] * columns)
    return book


@pytest.fixture
def free_window(client):
    key = make_key("excel-free", plan="free")
    reply = client.post("/fast/v2/browser-windows", json={"label": "excel"}, headers={"x-api-key": key})
    assert reply.status_code == 201, reply.get_json()
    return key, reply.get_json()["browserWindowId"]


@pytest.fixture
def rows_parsed(monkeypatch):
    """How many worksheet rows openpyxl parsed (the work a read costs)."""
    from openpyxl.worksheet._reader import WorkSheetParser

    parsed, parse_row = [], WorkSheetParser.parse_row

    def counting(self, row):
        parsed.append(1)
        return parse_row(self, row)
    monkeypatch.setattr(WorkSheetParser, "parse_row", counting)
    return parsed


def test_one_cell_of_a_big_workbook_costs_one_row(app, client, free_window, worker, rows_parsed):
    from app.windows import workbooks

    key, window_id = free_window
    book = uploaded(client, key, big_book())
    reply = action(client, key, window_id, "read_excel_sheet", workbook_url=book, range="A1:A1")
    assert reply.status_code == 200, reply.get_json()
    assert reply.get_json()["data"] == '{"values": [["1"]]}'
    reply = action(client, key, window_id, "read_excel_sheet", workbook_url=book, range="B9999:C10001")
    assert reply.get_json()["data"] == '{"values": [["9999", "9999"], ["10000", "10000"], ["", ""]]}'
    assert rows_parsed == []  # the worker read it: the web process parsed no row
    data = io.BytesIO()
    big_book().save(data)
    assert workbooks.read_cells(data.getvalue(), "book.xlsx", "A1:A1") == {"values": [["1"]]}
    assert len(rows_parsed) <= 2  # streamed: the sheet's other 9,999 rows were never parsed


def test_the_excel_work_runs_in_a_worker_and_the_web_only_waits(client, free_window, worker, service, rows_parsed,
                                                               monkeypatch):
    """A worker logs each workbook command it answered; the web process parsed no row and rewrote nothing.
    (This module's workers all consume the control queue: either may answer.)"""
    from openpyxl.workbook.workbook import Workbook as OpenpyxlWorkbook

    key, window_id = free_window
    book = Workbook()
    book.active.append(["before"])
    workbook = uploaded(client, key, book)
    saved, save = [], OpenpyxlWorkbook.save
    monkeypatch.setattr(OpenpyxlWorkbook, "save", lambda self, *args: saved.append(1) or save(self, *args))
    workers = (worker, service.worker)
    logged = [len(each.output()) for each in workers]
    written = action(client, key, window_id, "write_excel_sheet", workbook_url=workbook, range="B1",
                     values=[["written"]])
    read = action(client, key, window_id, "read_excel_sheet", workbook_url=workbook, range="A1:B1")
    assert written.status_code == 200 and written.get_json()["status"] == "success", written.get_json()
    assert read.get_json()["data"] == '{"values": [["before", "written"]]}'
    assert rows_parsed == [] and saved == []  # neither the read nor the write ran in the web process
    assert load_workbook(io.BytesIO(stored_bytes(workbook))).active["B1"].value == "written"

    def answered():  # each pool process logs its own lines: they may come in either order
        lines = [line for each, offset in zip(workers, logged) for line in each.output()[offset:].splitlines()
                 if "answered by worker pid" in line]
        return lines if len(lines) >= 2 else None
    lines = wait_until(answered, "the worker's log of both commands")
    assert sorted(line.split("(")[1].split(")")[0] for line in lines) == ["read_excel_sheet",
                                                                           "write_excel_sheet"], lines


def test_an_excel_write_while_the_queue_is_down_is_a_503_and_never_runs_later(client, free_window, worker):
    """The web process does not do the work itself: with RabbitMQ unreachable the write is refused (503) and
    withdrawn, so the worker never writes it later; bad input is still an immediate 400 (checked first)."""
    from app import create_app

    key, window_id = free_window
    book = Workbook()
    book.active["A1"] = "kept"
    workbook = uploaded(client, key, book)
    queue_down = create_app({"BROKER_URL": "amqp://guest:guest@127.0.0.1:1//"})
    with queue_down.app_context():
        down = queue_down.test_client()
        refused = action(down, key, window_id, "write_excel_sheet", workbook_url=workbook, range="A1",
                         values=[["overwritten"]])
        bad = action(down, key, window_id, "write_excel_sheet", workbook_url=workbook, range="A0", values=[["x"]])
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "5", refused.get_json()
    assert refused.get_json() == {"error": "Service Unavailable", "message": (
        "The task queue is unavailable, so the action was not run; retry in a few seconds.")}
    assert bad.status_code == 400 and "range 'A0' is outside a worksheet" in bad.get_json()["message"]
    reply = action(client, key, window_id, "read_excel_sheet", workbook_url=workbook, range="A1:A1")
    assert reply.get_json()["data"] == '{"values": [["kept"]]}'  # the worker answers reads, and never wrote


@pytest.mark.parametrize("cell_range, words", [
    ("A1:Z20000", "covers 520,000 cells, over the 20,000 cells one call may read or write (EXCEL_MAX_CELLS)"),
    ("A1:XFD1048576", "covers 17,179,869,184 cells, over the 20,000 cells"),
    ("A1:XFE2", "is outside a worksheet: columns go from 1 to 16,384"),
    ("A0:B2", "is outside a worksheet: rows go from 1 to 1,048,576"),
    ("A1:B1048577", "is outside a worksheet: rows go from 1 to 1,048,576"),
    ("Sheet1!nonsense", "is not a cell range like 'Sheet1!A1:C3'"),
])
def test_a_wide_or_bad_range_is_a_400_naming_it(client, free_window, rows_parsed, cell_range, words):
    key, window_id = free_window
    book = Workbook()
    book.active["A1"] = "one cell"
    reply = action(client, key, window_id, "read_excel_sheet", workbook_url=uploaded(client, key, book),
                   range=cell_range)
    assert reply.status_code == 400, reply.get_json()
    assert reply.get_json()["error"] == "Invalid Request"
    assert f"range '{cell_range}'" in reply.get_json()["message"] and words in reply.get_json()["message"]
    assert rows_parsed == []  # refused before the workbook was opened


def test_an_open_range_over_the_cap_and_a_workbook_that_unpacks_too_far_are_400(client, app, free_window, worker,
                                                                                monkeypatch):
    key, window_id = free_window
    book = uploaded(client, key, big_book())
    reply = action(client, key, window_id, "read_excel_sheet", workbook_url=book, range="A:C")
    assert reply.status_code == 400 and "range 'A:C' covers 30,000 cells" in reply.get_json()["message"]
    monkeypatch.setitem(app.config, "EXCEL_MAX_UNPACKED_BYTES", 1_000_000)
    reply = action(client, key, window_id, "read_excel_sheet", workbook_url=book, range="A1:A1")
    assert reply.status_code == 400
    assert "'book.xlsx' unpacks to" in reply.get_json()["message"]
    assert "over the 1,000,000 a workbook may unpack to here (EXCEL_MAX_UNPACKED_BYTES)" in reply.get_json()["message"]


@pytest.mark.parametrize("cell_range, values, words", [
    ("A1048576", [["a"], ["b"]], "would go past the worksheet's last row (1,048,576) or column (XFD, 16,384)"),
    ("XFD1", [["a", "b"]], "would go past the worksheet's last row (1,048,576) or column (XFD, 16,384)"),
    ("a/b!A1", [["x"]], "sheet title 'a/b' cannot be a worksheet's: at most 31 characters, none of \\ / ? * [ ] :"),
    ("'what?'!A1", [["x"]], "sheet title 'what?' cannot be a worksheet's"),
    ("A1", [[{"a": 1}]], "values[0][0] is dict: a cell holds a string, a number, true/false or null"),
    ("A1", [["bell \x07"]], "values[0][0] cannot be stored in a cell"),
    ("A1", [["x"] * 200] * 101, "covers 20,200 cells, over the 20,000 cells one call may read or write"),
])
def test_a_write_out_of_the_sheet_or_to_a_bad_title_is_a_400_naming_it(client, free_window, worker, cell_range,
                                                                       values, words):
    key, window_id = free_window
    book = Workbook()
    book.active["A1"] = "kept"
    workbook = uploaded(client, key, book)
    reply = action(client, key, window_id, "write_excel_sheet", workbook_url=workbook, range=cell_range,
                   values=values)
    assert reply.status_code == 400, reply.get_json()
    assert words in reply.get_json()["message"], reply.get_json()
    reply = action(client, key, window_id, "read_excel_sheet", workbook_url=workbook, range="A1:B2")
    assert reply.get_json()["data"] == '{"values": [["kept", ""], ["", ""]]}'  # the upload is unchanged


def test_a_pdf_name_chosen_by_the_page_reaches_the_caller_as_a_base_name(app, client, free_window):
    """The window (the extension, or a kept session's worker) reports the name the page's URL gave its PDF."""
    key, window_id = free_window
    answered = {}

    def sdk():
        with app.app_context():
            answered["reply"] = action(app.test_client(), key, window_id, "save_pdf_file")
    caller = threading.Thread(target=sdk)
    caller.start()
    polled = None
    for _ in range(50):
        polled = client.post("/fast/v2/browser-windows/poll", headers={"x-api-key": key},
                             json={"browserWindowIds": [window_id], "wait": 1}).get_json()["commands"]
        if polled:
            break
    assert [c["name"] for c in polled] == ["save_pdf_file"]
    result = client.post(f"/fast/v2/browser-windows/commands/{polled[0]['commandId']}/result",
                         headers={"x-api-key": key}, json={"status": "success", "data": {
                             "base64_content": base64.b64encode(b"%PDF-1.4").decode(),
                             "name": "../../../../tmp/pwned.pdf", "mime_type": "application/pdf"}})
    assert result.get_json() == {"accepted": True}
    caller.join(30)
    reply = answered["reply"]
    assert reply.status_code == 200, reply.get_json()
    assert json.loads(reply.get_json()["data"])["name"] == "pwned.pdf"


def test_the_sdks_browser_environment_sign_in_is_a_404_that_says_what_works_here(client, free_window):
    key, _ = free_window
    reply = client.get("/fast/v2/auth/custom-token", headers={"x-api-key": key})
    assert reply.status_code == 404 and reply.content_type == "application/json"
    body = reply.get_json()
    assert body["error"] == "Not Available"
    assert "BrowserEnvironment signs a local Chrome into Narada's cloud" in body["message"]
    assert "RemoteBrowserEnvironment(browser_window_id=...)" in body["message"]
