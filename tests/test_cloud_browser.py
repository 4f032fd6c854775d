"""`cloud_browser`: the web agent in a real headless Chromium, on pages served by the suite on loopback."""
import io
import json
import os
import re
from urllib.parse import quote_plus

import pytest
from PIL import Image
from sqlalchemy import text

from app.extensions import db
from tests.conftest import WorkerProcess, poll, submit, wait_for_status, wait_until
from tests.identity_pages import STILL_SEEN, IdentityServer, detect_steps, detections
from tests.llm_server import ScriptedModel, tool_call
from tests.page_server import PageServer
from workers.browser.reaper import our_browser_processes

pytestmark = pytest.mark.slow
SECRET = "Horse!Battery staple#9"
GIF_WIDTH = 400
BROWSER = {"executionMode": "cloud_browser"}

LOGIN = """<html><head><title>Sign in</title></head><body><h1>Shop admin</h1>
<form action="/home" method="get">
  <label for="u">Username</label> <input id="u" name="username">
  <label for="p">Password</label> <input id="p" name="password" type="password">
  <button type="submit">Sign in</button>
</form></body></html>"""
HOME = """<html><head><title>Home</title></head><body><h1>Welcome back</h1>
<p><a href="/report" target="_blank">Open the sales report</a></p></body></html>"""
REPORT = """<html><head><title>Sales report</title></head><body><h1>Sales</h1>
<label for="region">Region</label>
<select id="region"><option value="">Choose…</option><option value="n">North</option><option value="s">South</option></select>
<table id="sales"><tr><th>Product</th><th>Units</th></tr></table>
<p id="summary"></p>
<script>
const DATA = {n: [["Kettle", 3], ["Toaster", 4]], s: [["Kettle", 12], ["Blender", 30]]};
document.getElementById("region").addEventListener("change", (e) => {
  const rows = DATA[e.target.value] || [];
  const table = document.getElementById("sales");
  table.querySelectorAll("tr.row").forEach((r) => r.remove());
  let total = 0;
  for (const [name, units] of rows) {
    const tr = document.createElement("tr"); tr.className = "row";
    tr.innerHTML = `<td>${name}</td><td>${units}</td>`; table.appendChild(tr); total += units;
  }
  document.getElementById("summary").innerHTML =
    `${e.target.selectedOptions[0].text} total: <b id="total">${total}</b>`;
});
</script></body></html>"""
SCHEMA = {"type": "object", "required": ["region", "rows", "total"], "additionalProperties": False,
          "properties": {"region": {"type": "string"}, "total": {"type": "integer"},
                         "rows": {"type": "array", "items": {"type": "object", "required": ["product", "units"],
                                                             "properties": {"product": {"type": "string"},
                                                                            "units": {"type": "integer"}}}}}}


def ours():
    """The chromium and chromedriver processes started under this test run's VAR_DIR (no one else's)."""
    return our_browser_processes(os.environ["VAR_DIR"])


def no_browser_left():
    wait_until(lambda: not ours(), what="every browser process of the suite to end", timeout=15)


@pytest.fixture(scope="module")
def pages():
    server = PageServer({"/login": LOGIN, "/home": HOME, "/report": REPORT, "/tampered": TAMPERED,
                         "/slow": "<html><head><title>Slow</title></head><body><p>Nothing comes.</p></body></html>"})
    yield server
    server.close()


@pytest.fixture
def browser_worker(app):
    """Per test: the tests that need a worker of another configuration must be the only consumer."""
    proc = WorkerProcess(queues="tasks", concurrency=1, env={"GIF_WIDTH": str(GIF_WIDTH)}, name="browser")
    yield proc
    proc.stop()


def builtin_steps(pages):
    return "\n".join([
        "/Operator",
        f"go to {pages.url('/login')}",
        'type "ada" into "Username"',
        'type "${PASSWORD}" into "Password"',
        'click "Sign in"',
        'click "Open the sales report"',
        "switch to tab 1",
        "switch to tab 2",
        'select "South" in "Region"',
        'wait for "South total"',
        "extract #total",
    ])


def assert_secret_nowhere(request_id, body, *logs):
    assert SECRET not in json.dumps(body) and quote_plus(SECRET) not in json.dumps(body)
    db.session.rollback()
    row = db.session.execute(text("SELECT row_to_json(t)::text FROM tasks t WHERE id = :id"),
                             {"id": request_id}).scalar_one()
    assert SECRET not in row and quote_plus(SECRET) not in row
    for log in logs:
        assert SECRET not in log and quote_plus(SECRET) not in log


def assert_gif(client, api_key, other_key, request_id, body, actions):
    assert body["gifUrl"] == f"/fast/v2/remote-dispatch/responses/{request_id}/gif"
    response = client.get(body["gifUrl"], headers={"x-api-key": api_key})
    assert response.status_code == 200 and response.mimetype == "image/gif"
    image = Image.open(io.BytesIO(response.data))
    assert image.format == "GIF" and image.is_animated
    assert image.width <= GIF_WIDTH
    # One frame per browser action, less those that left the page as it was (typing into a field
    # changes it; an extract does not).
    assert actions - 3 <= image.n_frames <= actions
    path = os.path.join(os.environ["VAR_DIR"], "downloads", "remote-dispatch", f"{request_id}.gif")
    with open(path, "rb") as saved:
        assert saved.read() == response.data
    assert client.get(body["gifUrl"], headers={"x-api-key": other_key}).status_code == 404


def test_builtin_steps_sign_in_follow_a_new_tab_select_and_read_a_table(
        client, api_key, other_key, pages, browser_worker):
    assert not ours()
    request_id = submit(client, api_key, {
        **BROWSER, "prompt": builtin_steps(pages), "secretVariables": {"PASSWORD": SECRET},
        "generateGif": True, "cloudBrowserSessionName": "sales-check",
        "responseFormat": {"type": "jsonSchema", "jsonSchema": {"type": "integer", "minimum": 0}},
    }).get_json()["requestId"]
    body = wait_for_status(client, api_key, request_id, timeout=120)
    assert body["status"] == "success", body
    assert body["response"]["structuredOutput"] == 42  # 12 + 30 for South, read from the page's table
    trace = body["response"]["actionTrace"]
    assert [e["action"] for e in trace[:-1]] == [
        f"go to {pages.url('/login')}", 'type ada into "Username"', 'type ${PASSWORD} into "Password"',
        'click "Sign in"', 'click "Open the sales report"', "switch to tab 1", "switch to tab 2",
        'select "South" in "Region"',
        'wait for "South total"', "extract #total"]
    urls = [e["url"] for e in trace[:-1]]
    assert urls[:3] == [pages.url("/login")] * 3
    # The form was sent with the secret; the trace shows the page's URL with the placeholder.
    assert urls[3] == pages.url("/home") + "?username=ada&password=${PASSWORD}"
    assert urls[4] == pages.url("/report")  # the new tab was followed
    assert urls[5] == urls[3]  # back in the first tab, and then in the second again
    assert urls[6:] == [pages.url("/report")] * 4
    assert {e["browserSession"] for e in trace[:-1]} == {"sales-check"}
    assert body["usage"]["actions"] == 10
    received = [r for r in pages.requests if r.startswith("/home?")]
    assert received == [f"/home?username=ada&password={quote_plus(SECRET)}"]
    assert_secret_nowhere(request_id, body, browser_worker.output())
    assert_gif(client, api_key, other_key, request_id, body, actions=10)
    no_browser_left()


def _number_of(label, body):
    """The number the page view gave the element labelled `label` (the model reads it like this)."""
    for message in reversed(body["messages"]):
        if message["role"] == "tool":
            found = re.search(r"\[(\d+)\]<[a-z]+[^>]*>" + re.escape(label), message["content"])
            if found:
                return found[1]
    raise AssertionError(f"{label!r} is not in the page view the model received")


def test_the_scripted_model_does_the_same_and_answers_the_schema(client, api_key, other_key, pages, app):
    model = ScriptedModel()
    worker = WorkerProcess(queues="tasks", concurrency=1, name="browser-model",
                           env=model.env(GIF_WIDTH=GIF_WIDTH, MAX_STEPS=12))
    try:
        answer = {"region": "South", "total": 42,
                  "rows": [{"product": "Kettle", "units": 12}, {"product": "Blender", "units": 30}]}
        model.script(
            tool_call("go_to", url=pages.url("/login")),
            lambda body: tool_call("type", text="ada", target=_number_of("Username", body)),
            tool_call("type", text="${PASSWORD}", target="#p"),
            # As the model is offered it (what a grammar-constrained server emits): the number as a JSON integer.
            lambda body: tool_call("click", target=int(_number_of("Sign in", body))),
            tool_call("click", target="Open the sales report"),
            tool_call("select", option="South", target="Region"),
            tool_call("extract", selector="#sales tr.row"),
            tool_call("answer", content=answer),
        )
        request_id = submit(client, api_key, {
            **BROWSER, "prompt": "/Operator Sign in as ada and report the South sales as JSON.",
            "secretVariables": {"PASSWORD": SECRET}, "generateGif": True,
            "responseFormat": {"type": "jsonSchema", "jsonSchema": SCHEMA},
        }).get_json()["requestId"]
        body = wait_for_status(client, api_key, request_id, timeout=120)
        assert body["status"] == "success", json.dumps(body)[:3000]
        assert body["response"]["structuredOutput"] == answer
        trace = body["response"]["actionTrace"]
        assert [e["url"] for e in trace[:-1]] == [pages.url("/login")] * 3 + [
            pages.url("/home") + "?username=ada&password=${PASSWORD}"] + [pages.url("/report")] * 3
        requests = model.bodies()
        tools = {t["function"]["name"]: t["function"]["parameters"] for t in requests[0]["tools"]}
        assert {"go_to", "click", "type", "select", "scroll", "go_back", "extract"} <= set(tools)
        for name in ("click", "type", "select"):  # offered: element numbers (text targets still run, above)
            assert tools[name]["properties"]["target"]["type"] == "integer", tools[name]
        # The browser starts on about:blank: the model is never shown Chromium's new-tab page (nor its links).
        assert not any("chrome" in (m.get("content") or "") for m in requests[0]["messages"])
        # Each turn, an element number is one the latest page view shows (the login form's, before and after typing).
        for request in requests[1:3]:
            view = next(m["content"] for m in reversed(request["messages"]) if "URL: " in (m.get("content") or ""))
            shown = sorted({int(n) for n in re.findall(r"\[(\d+)\]<", view)})
            offered = {t["function"]["name"]: t["function"]["parameters"] for t in request["tools"]}
            assert shown and offered["click"]["properties"]["target"]["enum"] == shown, (shown, offered["click"])
        assert "Username" in view and len(shown) >= 3
        # What the model saw: the table's rows after the select, the new tab's page after the click.
        last = requests[-1]["messages"]
        assert last[-1]["role"] == "tool" and last[-1]["content"] == "Kettle 12\nBlender 30"
        assert any("Sales report" in m.get("content") or "" for m in last if m["role"] == "tool")
        for raw in model.recorded():
            assert SECRET not in raw and quote_plus(SECRET) not in raw
        assert any(r == f"/home?username=ada&password={quote_plus(SECRET)}" for r in pages.requests)
        assert_secret_nowhere(request_id, body, worker.output())
        assert_gif(client, api_key, other_key, request_id, body, actions=7)
    finally:
        worker.stop()
        model.close()
    no_browser_left()


def test_a_task_s_browser_shows_the_detectors_no_automation(client, api_key, browser_worker):
    """BotD and fpscanner run in the task's page find no automation (docs/browser-identity.md)."""
    site = IdentityServer()
    try:
        request_id = submit(client, api_key, {"prompt": detect_steps(site), "executionMode": "cloud_browser"}
                            ).get_json()["requestId"]
        body = wait_for_status(client, api_key, request_id, timeout=120)
        assert body["status"] == "success" and body["response"]["text"] == "Detectors done", body
        found = site.wait("detect")
        assert set(detections(found)) == STILL_SEEN and found["botd"] == {"bot": False}
    finally:
        site.close()


def test_a_failed_action_says_why_and_the_browser_is_closed(client, api_key, pages, browser_worker):
    request_id = submit(client, api_key, {
        **BROWSER, "prompt": f"/Operator\ngo to {pages.url('/login')}\nclick \"Delete everything\""}
    ).get_json()["requestId"]
    body = wait_for_status(client, api_key, request_id, timeout=60)
    assert body["status"] == "error"
    assert 'No element matching "Delete everything" on this page.' in body["response"]["text"]
    failed = body["response"]["actionTrace"][1]
    assert failed["url"] == pages.url("/login") and failed["action"] == 'click "Delete everything"'
    assert failed["failed"] is True and failed["error"] == 'No element matching "Delete everything" on this page.'
    assert "gifUrl" not in body  # no generateGif: nothing recorded
    no_browser_left()


def test_go_to_a_path_opens_it_on_the_current_page_s_site(client, api_key, pages, browser_worker):
    """`go to /report`, as a small model writes it, is the path on the site of the page the browser is on (as a
    link's href would be), not a host named "report"."""
    request_id = submit(client, api_key, {
        **BROWSER, "prompt": f"/Operator\ngo to {pages.url('/login')}\ngo to /report\nextract h1"}
    ).get_json()["requestId"]
    body = wait_for_status(client, api_key, request_id, timeout=60)
    assert body["status"] == "success", body["response"]["text"]
    went = body["response"]["actionTrace"][1]
    assert went["action"] == "go to /report" and went["url"] == pages.url("/report") and "failed" not in went
    assert body["response"]["text"] == "Sales"
    no_browser_left()


def test_a_url_with_a_placeholder_that_is_no_secret_is_not_opened(client, api_key, pages, browser_worker):
    # A small model writes `go to ${USER}`: the browser must not send a made-up host name to DNS.
    request_id = submit(client, api_key, {
        **BROWSER, "prompt": f"/Operator\ngo to {pages.url('/login')}\ngo to https://${{USER}}.example/\nextract h1",
        "secretVariables": {"PASSWORD": SECRET}}).get_json()["requestId"]
    body = wait_for_status(client, api_key, request_id, timeout=60)
    refused = body["response"]["actionTrace"][1]
    assert refused["action"] == "go to https://${USER}.example/" and refused["failed"] is True
    assert refused["error"].startswith("navigation refused: ${USER} is not a secret placeholder of this task")
    assert refused["url"] == pages.url("/login")  # the browser stayed where it was
    assert "refused" not in refused  # nothing reached the egress proxy
    no_browser_left()


def test_at_a_question_the_browser_is_kept_and_the_answer_resumes_on_the_same_page(
        client, api_key, pages, browser_worker):
    request_id = submit(client, api_key, {
        **BROWSER, "prompt": f"/Operator\ngo to {pages.url('/report')}\nask Which region?\nextract h1"}
    ).get_json()["requestId"]
    body = wait_for_status(client, api_key, request_id, statuses=("input-required", "error"), timeout=60)
    assert body["status"] == "input-required", body
    assert ours()  # kept for the answer (tests/test_pause_keeps_browser.py), outside any task
    input_id = body["hitlInputMetadata"]["inputId"]
    assert client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/input", headers={"x-api-key": api_key},
                       json={"inputId": input_id, "answer": "South"}).status_code == 202
    body = wait_for_status(client, api_key, request_id, timeout=60)
    assert body["status"] == "success", body
    assert body["response"]["text"] == "Sales"  # read in the browser kept on the page of the pause
    assert body["response"]["actionTrace"][-2]["url"] == pages.url("/report")
    no_browser_left()


def test_cancel_ends_the_task_within_one_action_and_closes_the_browser(client, api_key, pages, browser_worker):
    request_id = submit(client, api_key, {
        **BROWSER, "prompt": f"/Operator\ngo to {pages.url('/slow')}\nwait for \"never shown\"\nanswer done"}
    ).get_json()["requestId"]
    wait_until(lambda: ours(), what="the browser to start", timeout=60)
    wait_until(lambda: (poll(client, api_key, request_id).get_json().get("progress") or {}).get("actionTrace"),
               what="the first action", timeout=60)
    assert client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/cancel",
                       headers={"x-api-key": api_key}).status_code == 202
    body = wait_for_status(client, api_key, request_id, timeout=8)  # the wait step alone lasts 10 s
    assert body["status"] == "error" and body["response"]["text"] == "cancelled"
    no_browser_left()


def test_the_time_limit_closes_the_browser(client, api_key, pages):
    worker = WorkerProcess(queues="tasks", concurrency=1, env={"TASK_TIMEOUT_SECONDS": "4"}, name="browser-budget")
    try:
        request_id = submit(client, api_key, {
            **BROWSER, "prompt": f"/Operator\ngo to {pages.url('/slow')}\nwait for \"never shown\"\nanswer done"}
        ).get_json()["requestId"]
        body = wait_for_status(client, api_key, request_id, timeout=60)
    finally:
        worker.stop()
    assert body["status"] == "error"
    assert "Time limit reached" in body["response"]["text"]
    no_browser_left()


def test_celery_soft_time_limit_closes_the_browser(client, api_key, pages):
    worker = WorkerProcess(queues="tasks", concurrency=1, env={"TASK_SOFT_TIME_LIMIT_SECONDS": "4"},
                           name="browser-soft-limit")
    try:
        request_id = submit(client, api_key, {
            **BROWSER, "prompt": f"/Operator\ngo to {pages.url('/slow')}\nwait for \"never shown\"\nanswer done"}
        ).get_json()["requestId"]
        body = wait_for_status(client, api_key, request_id, timeout=60)
        no_browser_left()
    finally:
        worker.stop()
    assert body["status"] == "error"
    assert body["response"]["text"] == ("Time limit reached: the worker's time limit for one task (4 s) "
                                        "interrupted it.")


def test_worker_sigterm_closes_the_browser_and_hands_the_task_back(client, api_key, pages):
    worker = WorkerProcess(queues="tasks", concurrency=1, name="browser-term")
    request_id = submit(client, api_key, {
        **BROWSER, "prompt": f"/Operator\ngo to {pages.url('/slow')}\nwait for \"never shown\"\nanswer done"}
    ).get_json()["requestId"]
    try:
        wait_until(lambda: ours(), what="the browser to start", timeout=60)
    finally:
        worker.stop()  # SIGTERM to the worker's process group
    assert not ours()
    assert poll(client, api_key, request_id).get_json()["status"] == "pending"


def test_browsers_of_a_sigkilled_worker_are_reaped_when_a_worker_starts(client, api_key, pages):
    doomed = WorkerProcess(queues="tasks", concurrency=1, name="browser-doomed")
    submit(client, api_key, {
        **BROWSER, "prompt": f"/Operator\ngo to {pages.url('/slow')}\nwait for \"never shown\"\nwait 30"})
    try:
        wait_until(lambda: len(ours()) >= 2, what="chromedriver and chromium to start", timeout=60)
        profiles = set(ours().values())
    finally:
        doomed.kill()
    # The sandbox dies with the worker (--die-with-parent); what is left (its folder, its egress proxy) goes
    # when a worker starts, as it does with beat's sweep (tests/test_browser_isolation.py).
    rescuer = WorkerProcess(queues="webhooks", concurrency=1, name="browser-rescuer")  # takes no task
    try:
        no_browser_left()
        # the reaper removes each profile after its processes are gone
        wait_until(lambda: not any(os.path.exists(profile) for profile in profiles),
                   what="the orphans' profiles to be removed", timeout=30)
    finally:
        rescuer.stop()


def test_without_chromium_a_cloud_browser_task_ends_with_what_to_install(client, api_key, pages):
    worker = WorkerProcess(queues="tasks", concurrency=1, name="browser-none",
                           env={"CHROMIUM_PATH": "/nonexistent/chromium"})
    try:
        request_id = submit(client, api_key, {**BROWSER, "prompt": f"/Operator\ngo to {pages.url('/login')}"}
                            ).get_json()["requestId"]
        body = wait_for_status(client, api_key, request_id, timeout=60)
    finally:
        worker.stop()
    assert body["status"] == "error"
    message = body["response"]["text"]
    assert "CHROMIUM_PATH=/nonexistent/chromium" in message and "apt-get install chromium chromium-driver" in message


# A page that breaks or fakes everything its scripts can reach of the page's JavaScript world: what the agent reads
# and does there must not depend on any of it (page.js runs in an isolated world of its own).
TAMPERED = """<html><head><title>Tampered</title><script>
Object.defineProperty(window, "__remoteDispatch", {configurable: false, writable: false, value: {
  version: "3", read: function () { return {url: "forged", title: "Forged", text: "[1]<button>Forged</button>",
  elements: [], status: 200}; }, locate: function () { return {ok: false, error: "faked"}; }}});
JSON.stringify = function () { return '{"ok":false,"error":"forged JSON"}'; };
JSON.parse = function () { return {ok: false}; };
Array.prototype.map = function () { return ["forged"]; };
Array.prototype.push = function () { return 0; };
Array.prototype.indexOf = function () { return 0; };
Array.prototype.join = function () { return "forged"; };
Function.prototype.apply = function () { return {ok: false, error: "forged apply"}; };
String.prototype.trim = function () { return "forged"; };
String.prototype.replace = function () { return "forged"; };
Object.keys = function () { return []; };
document.querySelectorAll = function () { return []; };
Document.prototype.querySelectorAll = Element.prototype.querySelectorAll = function () { return []; };
Element.prototype.getAttribute = function () { return "forged"; };
Element.prototype.getBoundingClientRect = function () {
  return {x: 0, y: 0, left: 0, top: 0, right: 0, bottom: 0, width: 0, height: 0}; };
Element.prototype.checkVisibility = function () { return false; };
HTMLElement.prototype.click = function () {};
window.getComputedStyle = function () { return {display: "none", visibility: "hidden", opacity: "0"}; };
</script></head><body><h1>Greetings desk</h1>
<label for="who">Your name</label> <input id="who">
<button id="go" onclick="document.getElementById('out').textContent = 'Hello ' + document.getElementById('who').value">
Greet</button>
<p id="out"></p></body></html>"""


def test_a_page_that_tampers_with_its_javascript_is_read_and_acted_on_correctly(
        client, api_key, pages, browser_worker):
    request_id = submit(client, api_key, {**BROWSER, "prompt": "\n".join([
        "/Operator", f"go to {pages.url('/tampered')}", 'type "Ada" into "Your name"', 'click "Greet"', "read page"])}
    ).get_json()["requestId"]
    body = wait_for_status(client, api_key, request_id, timeout=90)
    assert body["status"] == "success", json.dumps(body["response"])[:3000]
    trace = body["response"]["actionTrace"]
    assert [e["url"] for e in trace[:-1]] == [pages.url("/tampered")] * 4 and not any(e.get("failed") for e in trace)
    view = body["response"]["text"]  # the page view after typing and clicking, as the model would read it
    assert "Greetings desk" in view and "Hello Ada" in view  # typed, then clicked: the page's own handler ran
    assert re.search(r'\[\d+\]<input id="who"', view) and re.search(r'\[\d+\]<button id="go">Greet</button>', view)
    assert "orged" not in view  # nothing of what the page forged
    no_browser_left()
