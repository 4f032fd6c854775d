"""executionMode "client": tasks run in the caller's own window (headless Chromium with the unpacked extension)."""
import io
import json
import os
from urllib.parse import quote_plus

import pytest
from PIL import Image

from tests.conftest import WorkerProcess, poll, submit, wait_for_status, wait_until
from tests.extension_support import browser, module_key, web, window  # noqa: F401 (fixtures)
from tests.llm_server import ScriptedModel, tool_call
from tests.page_server import PageServer
from tests.test_cloud_browser import HOME, LOGIN, REPORT, SCHEMA, SECRET, _number_of, assert_secret_nowhere, builtin_steps

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
GIF_WIDTH = 400
SLOW = "<html><head><title>Slow</title></head><body><p>Nothing comes.</p></body></html>"


@pytest.fixture(scope="module")
def pages():
    server = PageServer({"/login": LOGIN, "/home": HOME, "/report": REPORT, "/slow": SLOW})
    yield server
    server.close()


@pytest.fixture
def client_worker(app):
    """Per test: the scripted-model test needs its own worker to be the only consumer."""
    proc = WorkerProcess(queues="tasks", concurrency=1, env={"GIF_WIDTH": str(GIF_WIDTH)}, name="client")
    yield proc
    proc.stop()


def client_task(window_id, prompt, **options):
    return {"prompt": prompt, "browserWindowId": window_id, **options}  # executionMode defaults to client


def assert_gif_saved_by_the_extension(client, key, request_id, body, browser, actions):
    response = client.get(body["gifUrl"], headers={"x-api-key": key})
    assert response.status_code == 200 and response.mimetype == "image/gif"
    image = Image.open(io.BytesIO(response.data))
    assert image.is_animated and image.width <= GIF_WIDTH and actions - 3 <= image.n_frames <= actions
    # The extension also saved it with chrome.downloads into the user's Downloads/remote-dispatch/.
    path = os.path.join(browser.downloads, "remote-dispatch", f"{request_id}.gif")
    wait_until(lambda: os.path.exists(path), what="the GIF in the browser's downloads", timeout=20)
    with open(path, "rb") as saved:
        assert saved.read() == response.data


def test_builtin_steps_run_in_the_callers_window(client, browser, window, module_key, pages, client_worker):
    request_id = submit(client, module_key, client_task(
        window, builtin_steps(pages), secretVariables={"PASSWORD": SECRET}, generateGif=True,
        responseFormat={"type": "jsonSchema", "jsonSchema": {"type": "integer", "minimum": 0}},
    )).get_json()["requestId"]
    body = wait_for_status(client, module_key, request_id, timeout=180)
    assert body["status"] == "success", json.dumps(body)[:3000]
    assert body["browserWindowId"] == window
    assert body["response"]["structuredOutput"] == 42
    trace = body["response"]["actionTrace"]
    assert [e["action"] for e in trace[:-1]] == [
        f"go to {pages.url('/login')}", 'type ada into "Username"', 'type ${PASSWORD} into "Password"',
        'click "Sign in"', 'click "Open the sales report"', "switch to tab 1", "switch to tab 2",
        'select "South" in "Region"', 'wait for "South total"', "extract #total"]
    urls = [e["url"] for e in trace[:-1]]
    assert urls[3] == pages.url("/home") + "?username=ada&password=${PASSWORD}"
    assert urls[4] == pages.url("/report")  # the tab the page opened was followed
    assert urls[5] == urls[3]  # back in the first tab, and then in the second again
    assert urls[6:] == [pages.url("/report")] * 4
    assert [r for r in pages.requests if r.startswith("/home?")][-1] == f"/home?username=ada&password={quote_plus(SECRET)}"
    # The work happened in the user's window: its tabs show the pages.
    handles = browser.driver.window_handles
    titles = []
    for handle in handles:
        browser.driver.switch_to.window(handle)
        titles.append(browser.driver.title)
    assert "Sales report" in titles and "Home" in titles
    assert_secret_nowhere(request_id, body, client_worker.output())
    assert_gif_saved_by_the_extension(client, module_key, request_id, body, browser, actions=10)
    close_other_tabs(browser)


def close_other_tabs(browser):
    handles = browser.driver.window_handles
    for handle in handles[1:]:
        browser.driver.switch_to.window(handle)
        browser.driver.close()
    browser.driver.switch_to.window(handles[0])


def test_the_scripted_model_runs_in_the_callers_window(client, browser, window, module_key, pages, app):
    model = ScriptedModel()
    worker = WorkerProcess(queues="tasks", concurrency=1, name="client-model",
                           env=model.env(GIF_WIDTH=GIF_WIDTH, MAX_STEPS=12))
    try:
        answer = {"region": "South", "total": 42,
                  "rows": [{"product": "Kettle", "units": 12}, {"product": "Blender", "units": 30}]}
        model.script(
            tool_call("go_to", url=pages.url("/login")),
            lambda body: tool_call("type", text="ada", target=_number_of("Username", body)),
            tool_call("type", text="${PASSWORD}", target="#p"),
            lambda body: tool_call("click", target=_number_of("Sign in", body)),
            tool_call("click", target="Open the sales report"),
            tool_call("select", option="South", target="Region"),
            tool_call("extract", selector="#sales tr.row"),
            tool_call("answer", content=answer),
        )
        request_id = submit(client, module_key, client_task(
            window, "/Operator Sign in as ada and report the South sales as JSON.",
            secretVariables={"PASSWORD": SECRET}, generateGif=True,
            responseFormat={"type": "jsonSchema", "jsonSchema": SCHEMA})).get_json()["requestId"]
        body = wait_for_status(client, module_key, request_id, timeout=180)
        assert body["status"] == "success", json.dumps(body)[:3000]
        assert body["response"]["structuredOutput"] == answer
        last = model.bodies()[-1]["messages"]
        assert last[-1]["role"] == "tool" and last[-1]["content"] == "Kettle 12\nBlender 30"
        for raw in model.recorded():
            assert SECRET not in raw and quote_plus(SECRET) not in raw
        assert_secret_nowhere(request_id, body, worker.output())
        assert_gif_saved_by_the_extension(client, module_key, request_id, body, browser, actions=7)
    finally:
        worker.stop()
        model.close()
        close_other_tabs(browser)


def test_closing_the_tab_mid_task_ends_it_as_error_saying_so(client, browser, window, module_key, pages,
                                                              client_worker):
    driver = browser.driver
    keep = driver.current_window_handle
    driver.switch_to.new_window("tab")  # the task will drive this tab (the active one)
    driver.get(pages.url("/slow"))
    request_id = submit(client, module_key, client_task(
        window, f"/Operator\ngo to {pages.url('/slow')}\nwait for \"never shown\"\nextract p")).get_json()["requestId"]
    wait_until(lambda: (poll(client, module_key, request_id).get_json().get("progress") or {}).get("actionTrace"),
               what="the first action", timeout=60)
    driver.close()
    driver.switch_to.window(keep)
    body = wait_for_status(client, module_key, request_id, timeout=60)
    assert body["status"] == "error"
    assert body["response"]["text"] == "The tab the task was working in was closed by the user."


def test_a_web_restart_mid_task_loses_nothing(client, browser, window, web, module_key, pages, client_worker):
    request_id = submit(client, module_key, client_task(window, "\n".join([
        "/Operator", f"go to {pages.url('/login')}", "wait 3", 'type "ada" into "Username"', "wait 2",
        'click "Sign in"', "extract h1"]))).get_json()["requestId"]
    wait_until(lambda: (poll(client, module_key, request_id).get_json().get("progress") or {}).get("actionTrace"),
               what="the first action", timeout=60)
    web.restart()  # every poll and result post of the extension now fails until it is back
    body = wait_for_status(client, module_key, request_id, timeout=120)
    assert body["status"] == "success", body
    assert body["response"]["text"] == "Welcome back"
    close_other_tabs(browser)


def test_after_the_service_worker_was_stopped_the_next_task_runs(client, browser, window, module_key, pages,
                                                                 client_worker):
    """Chromium stops an idle extension service worker; the window reconnects and the next task runs."""
    browser.stop_service_worker()
    request_id = submit(client, module_key, client_task(
        window, f"/Operator\ngo to {pages.url('/home')}\nextract h1")).get_json()["requestId"]
    body = wait_for_status(client, module_key, request_id, timeout=120)
    assert body["status"] == "success", body
    assert body["response"]["text"] == "Welcome back"


def test_navigation_follows_the_outbound_policy(client, browser, window, module_key, pages, app):
    """The agent's go to in the user's window is checked like the cloud browser's: private addresses refused."""
    worker = WorkerProcess(queues="tasks", concurrency=1, name="client-egress", env={"ALLOW_PRIVATE_URLS": "false"})
    try:
        before = list(pages.requests)
        request_id = submit(client, module_key, client_task(
            window, f"/Operator\ngo to {pages.url('/report')}\nextract h1")).get_json()["requestId"]
        body = wait_for_status(client, module_key, request_id, timeout=60)
    finally:
        worker.stop()
    assert body["status"] == "error"
    assert body["response"]["text"].startswith(f"Refused to open {pages.url('/report')}")
    assert pages.requests == before  # the browser never asked for it
