"""The Selenium driver and page.js on a real headless Chromium: what the agent reads and what its actions do."""
import os
import re

import pytest

from config import settings
from tests.conftest import wait_until
from tests.page_server import PageServer
from workers.agent.actions import describe
from workers.browser.base import BrowserError, BrowserUnavailable
from workers.browser.egress import BrowserEgressProxy
from workers.browser.reaper import our_browser_processes
from workers.browser.launch import browsers_dir
from workers.browser.selenium_driver import SeleniumBrowser
from workers.planners.builtin import parse_step

pytestmark = pytest.mark.slow

MAIN = """<html><head><title>Main</title></head><body>
<h1>Shop</h1>
<label for="q">Search</label><input id="q" name="q" placeholder="Find products">
<label for="pw">Password</label><input id="pw" type="password">
<button id="go" onclick="document.getElementById('out').textContent = 'searched ' + q.value">Go</button>
<div style="display:none"><button>Hidden button</button></div>
<span id="fancy" style="cursor:pointer">Fancy toggle</span>
<a href="/second" target="_blank">Open second</a>
<div id="keys" tabindex="0">keys</div>
<div id="hoverme" onmouseover="this.textContent = 'hovered'">hover me</div>
<input type="file" id="file" onchange="out.textContent = 'file ' + this.files[0].name">
<p id="out"></p>
<iframe id="frame" src="/frame"></iframe>
<div id="host"></div>
<div style="height: 3000px"></div><p>Bottom</p>
<script>
document.getElementById("host").attachShadow({mode: "open"}).innerHTML = "<button>Shadow button</button>";
document.getElementById("fancy").addEventListener("click", () => { out.textContent = "toggled"; });
document.getElementById("keys").addEventListener("keydown", (e) => {
  out.textContent = "key " + e.key + (e.ctrlKey ? " with ctrl" : ""); });
</script></body></html>"""
FRAME = """<html><body><button onclick="document.body.append(' frame clicked')">Frame button</button></body></html>"""
DOWNLOAD = """<html><body><a href="/second" download="notes.html">Get the notes</a></body></html>"""
SECOND = """<html><head><title>Second</title></head><body><h1>Second tab</h1></body></html>"""
# 7,000 interactive elements (and as many text runs): the page view must stay within its budget and say so.
BIG = ("<html><head><title>Catalogue</title></head><body><h1>Catalogue</h1>"
       + "".join(f"<div><a href='/item/{i}'>Item {i}</a> <span>costs {i} euros</span></div>" for i in range(7000))
       + "</body></html>")
# A shape of an SVG drawing (no click() of its own, as MiniWoB's pie menu has) under a clear layer that takes the
# pointer: the native click is intercepted, and page.js clicks instead.
SHAPES = """<html><head><title>Shapes</title></head><body>
<svg width="300" height="300"><circle id="dot" cx="150" cy="150" r="60" fill="teal" style="cursor:pointer"
 onclick="out.textContent = 'dot clicked'"></circle></svg>
<div style="position:absolute; left:0; top:0; width:400px; height:400px; opacity:0"></div>
<p id="out"></p></body></html>"""
CASES = """<html><head><title>Cases</title></head><body>
<a href="#lower" onclick="out.textContent = 'the lower-case one'">eget</a>
<a href="#upper" onclick="out.textContent = 'the capitalised one'">Eget</a>
<button onclick="out.textContent = 'first'">Buy</button> <button onclick="out.textContent = 'second'">Buy</button>
<div onclick="out.textContent = 'card'" style="cursor:pointer"><button onclick="event.stopPropagation();
 out.textContent = 'inner'">Details</button></div>
<p id="out"></p></body></html>"""

# An HTML5 sortable list (draggable="true", dragstart/dragover/drop with the DataTransfer): the dragged item goes
# before the one it is dropped on. WebDriver's pointer fires none of these events in Chromium.
SORTABLE = """<html><head><title>Sortable</title></head><body>
<ul id="list">
<li draggable="true" id="a">Item 1</li><li draggable="true" id="b">Item 2</li><li draggable="true" id="c">Item 3</li>
</ul><p id="order"></p>
<script>
const list = document.getElementById("list");
function show() { order.textContent = "order: " + [...list.children].map((li) => li.id).join(","); }
list.addEventListener("dragstart", (e) => e.dataTransfer.setData("text/plain", e.target.id));
list.addEventListener("dragover", (e) => e.preventDefault());
list.addEventListener("drop", (e) => {
  e.preventDefault();
  const moved = document.getElementById(e.dataTransfer.getData("text/plain"));
  const onto = e.target.closest("li");
  if (moved && onto && moved !== onto) list.insertBefore(moved, onto);
  show();
});
show();
</script></body></html>"""
# A slider of its own (no <input type=range>): pointer events on the handle and the document, 2 px per unit.
SLIDER = """<html><head><title>Slider</title></head><body style="margin:40px">
<div id="track" style="position:relative; width:240px; height:10px; background:#ccc; margin:40px">
  <div id="handle" role="slider" aria-label="Volume" aria-valuenow="10"
       style="position:absolute; left:15px; top:-10px; width:10px; height:30px; background:#333"></div>
</div><p id="value">value 10</p>
<script>
let start = null, startValue = 10, value = 10;
handle.addEventListener("pointerdown", (e) => { start = e.clientX; startValue = value; });
document.addEventListener("pointermove", (e) => {
  if (start === null) return;
  value = Math.max(0, Math.min(120, Math.round(startValue + (e.clientX - start) / 2)));
  handle.style.left = (value * 2 - 5) + "px";
  handle.setAttribute("aria-valuenow", value);
  document.getElementById("value").textContent = "value " + value;
});
document.addEventListener("pointerup", () => { start = null; });
</script></body></html>"""
# A drop-down of its own: a button that opens a listbox (its options come a moment later, as from a server), and
# shows the chosen option.
COMBOBOX = """<html><head><title>Paint</title></head><body>
<span id="colour-label">Colour</span>
<div role="combobox" id="colour" tabindex="0" aria-labelledby="colour-label" aria-haspopup="listbox"
     aria-controls="colours" aria-expanded="false" style="border:1px solid; width:120px">Pick one</div>
<ul role="listbox" id="colours" style="display:none"></ul>
<p id="out"></p>
<script>
const box = document.getElementById("colour"), pop = document.getElementById("colours");
box.addEventListener("click", () => {
  box.setAttribute("aria-expanded", "true");
  pop.style.display = "block";
  setTimeout(() => {
    pop.innerHTML = ["Red", "Blue", "Green"].map((c) => `<li role="option" id="o-${c}">${c}</li>`).join("");
  }, 300);
});
pop.addEventListener("click", (e) => {
  const option = e.target.closest("[role=option]");
  if (!option) return;
  box.textContent = option.textContent;
  box.setAttribute("aria-expanded", "false");
  pop.style.display = "none";
  out.textContent = "chosen " + option.textContent;
});
</script></body></html>"""
# A form served from another origin (another port) inside an iframe: it submits to /echo within the frame.
OUTER = """<html><head><title>Outer</title></head><body><h1>Checkout</h1><button>Outer button</button>
<iframe id="pay" src="%s" style="width:600px; height:400px"></iframe></body></html>"""
FORM = """<html><body><form action="/echo">
<label>Name <input name="name"></label>
<label>Email <input name="email"></label>
<select name="plan"><option>Basic</option><option>Pro</option></select>
<input type="file" id="doc" onchange="picked.textContent = 'picked ' + this.files[0].name">
<p id="picked"></p>
<button type="submit">Send</button>
</form></body></html>"""
# The same form of another origin one level deeper: in a same-origin iframe, and in an open shadow root.
NESTED = """<html><head><title>Nested</title></head><body><h1>Shop</h1>
<iframe src="/inner" style="width:700px; height:500px"></iframe></body></html>"""
INNER = """<html><body><p>Inner frame</p><iframe src="%s" style="width:650px; height:450px"></iframe></body></html>"""
SHADOWED = """<html><head><title>Shadowed</title></head><body><h1>Shop</h1><div id="host"></div><script>
document.getElementById("host").attachShadow({mode: "open"}).innerHTML =
  '<p>In the shadow</p><iframe src="%s" style="width:650px; height:450px"></iframe>';
</script></body></html>"""
# A button of the top document whose text is the frame's button's too, or only holds it.
BOTH = """<html><head><title>Both</title></head><body><button onclick="out.textContent = 'top %s'">%s</button>
<p id="out"></p><iframe src="%s" style="width:600px; height:400px"></iframe></body></html>"""
# A drawing pad: a stroke from pointer down to up, drawn through each move.
CANVAS = """<html><head><title>Pad</title></head><body style="margin:30px">
<canvas id="pad" width="200" height="100"></canvas><p id="out"></p><script>
const pad = document.getElementById("pad"), ctx = pad.getContext("2d");
let drawing = false;
pad.addEventListener("pointerdown", (e) => {
  drawing = true; ctx.lineWidth = 3; ctx.beginPath(); ctx.moveTo(e.offsetX, e.offsetY);
  out.textContent = "from " + e.offsetX + "," + e.offsetY; });
pad.addEventListener("pointermove", (e) => { if (drawing) { ctx.lineTo(e.offsetX, e.offsetY); ctx.stroke(); } });
pad.addEventListener("pointerup", (e) => { drawing = false; out.textContent += " to " + e.offsetX + "," + e.offsetY; });
</script></body></html>"""

# A search box that submits on Enter (to /echo), and a button whose click later opens a dialog, as a page that confirms
# a save does: nothing on the page answers while a dialog is open.
SEARCH = """<html><head><title>Search</title></head><body><form action="/echo"><label for="query">Query</label>
<input id="query" name="query"></form>
<button onclick="setTimeout(function () { alert('Saved'); out.textContent = 'after the dialog'; }, 200)">Save</button>
<p id="out"></p></body></html>"""
# A page that notes every node added to it once it is parsed (it adds none itself).
WATCHED = """<html><head><title>Watched</title><script>
var added = [];
document.addEventListener("DOMContentLoaded", function () {
  new MutationObserver(function (records) {
    records.forEach(function (r) { r.addedNodes.forEach(function (n) { added.push(n.nodeName); }); });
  }).observe(document, {childList: true, subtree: true});
});
</script></head><body><h1>Watched page</h1></body></html>"""


@pytest.fixture(scope="module")
def pages():
    server = PageServer({"/main": MAIN, "/frame": FRAME, "/second": SECOND, "/download": DOWNLOAD, "/big": BIG,
                         "/cases": CASES, "/shapes": SHAPES, "/sortable": SORTABLE, "/slider": SLIDER,
                         "/combobox": COMBOBOX, "/canvas": CANVAS, "/watched": WATCHED,
                         "/search": SEARCH})
    yield server
    server.close()


@pytest.fixture(scope="module")
def other_origin(pages):
    """A second loopback origin (another port): the outer page on `pages` frames a form of this one."""
    server = PageServer({"/form": FORM})
    pages.pages.update({"/outer": OUTER % server.url("/form"), "/nested": NESTED, "/inner": INNER % server.url("/form"),
                        "/shadowed": SHADOWED % server.url("/form"),
                        "/both": BOTH % ("send", "Send", server.url("/form")),
                        "/holds": BOTH % ("copy", "Send a copy", server.url("/form"))})
    yield server
    server.close()


@pytest.fixture(scope="module")
def egress():
    """Our browsers have no network but their egress proxy (app/sandbox/box.py): this one lets loopback pages in."""
    with BrowserEgressProxy({"VAR_DIR": os.environ["VAR_DIR"], "ALLOW_PRIVATE_URLS": True}, "driver-test") as proxy:
        yield proxy.address


@pytest.fixture
def browser(pages, egress):
    """As a task's browser is (workers/agent/browser_modes.py): DevTools on, which page.js's calls then go through
    (workers/browser/devtools.py). A Grid's browser (tests/test_grid_sessions.py) has them go through chromedriver."""
    browser = SeleniumBrowser(label="driver-test", profile_root=browsers_dir(os.environ["VAR_DIR"]),
                              time_zone="Asia/Tokyo", window_size=(1000, 700), proxy=egress, devtools=True)
    browser.open(pages.url("/main"))
    yield browser
    browser.close()


def test_the_page_view_numbers_visible_interactive_elements_everywhere(browser):
    reading = browser.read()
    assert reading.title == "Main" and "Shop" in reading.text
    labels = {e["label"]: e for e in reading.elements}
    assert {"Search", "Password", "Go", "Fancy toggle", "Open second", "Frame button", "Shadow button"} <= set(labels)
    assert "Hidden button" not in labels and "Hidden button" not in reading.text
    assert labels["Frame button"]["frame"] == "/frame"
    assert f'[{labels["Go"]["index"]}]<button id="go">Go</button>' in reading.text
    assert not any(e["new"] for e in reading.elements)  # the first reading marks nothing new

    browser.run_js("document.body.insertAdjacentHTML('afterbegin', '<button>Late button</button>')")
    again = browser.read()
    numbers = {e["label"]: e["index"] for e in again.elements}
    assert all(numbers[label] == labels[label]["index"] for label in labels)  # stable within the page
    late = next(e for e in again.elements if e["label"] == "Late button")
    assert late["new"] and f"*[{late['index']}]<button>Late button</button>" in again.text
    assert [e["label"] for e in again.elements if e["new"]] == ["Late button"]


def test_a_huge_page_is_read_within_its_budget_and_says_what_it_left_out(browser, pages):
    browser.open(pages.url("/big"))
    reading = browser.read(max_chars=4000)
    lines = reading.text.splitlines()
    assert reading.truncated and len(reading.text) <= 4000 + len(lines[-1]) + 1
    assert lines[-1].startswith("… view cut at 4000 characters: about ")
    assert lines[-1].endswith("more elements and more text below. Scroll down, or extract with a CSS selector, "
                              "to see the rest.")
    more = int(lines[-1].split("about ")[1].split()[0])
    assert 6500 < more < 7000
    # Whole lines only, and the walk stopped at the budget (it numbered only what it showed).
    assert lines[-2].startswith("[") and lines[-2].endswith("</a>") or lines[-2].startswith("costs ")
    assert "Item 0</a>" in reading.text and "Item 6999" not in reading.text
    assert len(reading.elements) < 200
    # What the marker promises: scrolled down, the view shows what comes next (and says what is above).
    browser.scroll("down")
    browser.scroll("down")
    later = browser.read(max_chars=4000)
    assert later.text.startswith("(scrolled: the content above is not shown; scroll up to see it)")
    assert "Item 0</a>" not in later.text
    first_shown = int(later.text.split("Item ", 1)[1].split("<", 1)[0])
    assert first_shown > 20


def test_exact_case_is_preferred_and_an_ambiguous_target_is_reported(browser, pages):
    browser.open(pages.url("/cases"))
    out = lambda: browser.extract("#out")[0]  # noqa: E731
    browser.click("Eget")
    assert out() == "the capitalised one"
    browser.click("eget")
    assert out() == "the lower-case one"
    with pytest.raises(BrowserError, match=r'^Several elements match "Buy": \[\d+\] <button> Buy, \[\d+\] <button> Buy\. '
                                           r"Use the element number\.$"):
        browser.click("Buy")
    assert out() == "the lower-case one"  # nothing was clicked
    with pytest.raises(BrowserError, match="Several elements match"):
        browser.click("egeT")  # no exact match; both match ignoring case
    browser.click("Details")  # a clickable card and its button: the innermost, not an ambiguity
    assert out() == "inner"


def test_typed_text_shows_in_fields_but_never_a_password(browser):
    browser.type("Search", "kettle")
    browser.type("Password", "hunter2-secret")
    browser.type("Search", "blender")  # clears first
    text = browser.read().text
    assert 'value="blender"' in text and "hunter2-secret" not in text
    browser.click("#go")
    assert browser.extract("#out") == ["searched blender"]
    # Nothing the browser keeps on disk while it runs holds the typed secret (logs, autofill, history).
    for folder, _, files in os.walk(browser.profile):
        for name in files:
            try:
                data = open(os.path.join(folder, name), "rb").read()
            except OSError:  # a lock or socket
                continue
            assert b"hunter2-secret" not in data, os.path.join(folder, name)


def test_click_by_number_text_selector_in_frames_and_shadow_roots(browser):
    numbers = {e["label"]: e["index"] for e in browser.read().elements}
    browser.click(str(numbers["Fancy toggle"]))  # a click handler found by its pointer cursor
    assert browser.extract("#out") == ["toggled"]
    browser.click("Frame button")
    assert "frame clicked" in browser.extract("body")[1]  # the frame's own body, reached from the top
    browser.click("Shadow button")
    assert browser.extract("button")[-1] == "Shadow button"  # querySelectorAll reaches the shadow root
    with pytest.raises(BrowserError, match=r'No element matching "Checkout" on this page\.'):
        browser.click("Checkout")
    with pytest.raises(BrowserError, match=r"No element \[999\] on this page"):
        browser.click("999")


def test_a_shape_of_a_drawing_is_clicked_even_under_a_layer_that_takes_the_pointer(browser, pages):
    browser.open(pages.url("/shapes"))
    browser.click("#dot")
    assert browser.extract("#out") == ["dot clicked"]


def test_keys_hover_scroll_wait_and_upload(browser, tmp_path):
    browser.click("#keys")
    browser.press("Control+a")
    assert browser.extract("#out") == ["key a with ctrl"]
    browser.press("Enter")
    assert browser.extract("#out") == ["key Enter"]
    browser.hover("hover me")
    assert browser.extract("#hoverme") == ["hovered"]
    down = browser.scroll("down")
    assert down["moved"] > 0 and browser.run_js("return window.scrollY") > 0
    assert browser.scroll("up")["scrollY"] < down["scrollY"]
    browser.run_js("setTimeout(() => document.body.append('Arrived late'), 300)")
    browser.wait_for(text="arrived LATE", timeout=5)
    with pytest.raises(BrowserError, match=r"Timed out after 0.5 s waiting for the text 'never'"):
        browser.wait_for(text="never", timeout=0.5)
    upload = tmp_path / "report.csv"
    upload.write_text("a,b\n")
    browser.upload("#file", str(upload))
    assert browser.extract("#out") == ["file report.csv"]
    with pytest.raises(BrowserError, match="is not a file input"):
        browser.upload("Go", str(upload))


def test_new_tabs_are_followed_and_the_time_zone_is_the_tasks(browser, pages):
    assert browser.run_js("return Intl.DateTimeFormat().resolvedOptions().timeZone") == "Asia/Tokyo"
    browser.click("Open second")
    assert browser.current_url() == pages.url("/second") and browser.title() == "Second"
    assert [t["url"] for t in browser.tabs()] == [pages.url("/main"), pages.url("/second")]
    browser.switch_tab(1)
    assert browser.title() == "Main"
    with pytest.raises(BrowserError, match="No tab 3: there are 2 tabs"):
        browser.switch_tab(3)
    browser.open(pages.url("/second"))
    browser.back()
    assert browser.title() == "Main"


def test_close_ends_every_process_and_removes_the_profile(pages, egress):
    var_dir = os.environ["VAR_DIR"]
    browser = SeleniumBrowser(profile_root=browsers_dir(var_dir), proxy=egress)
    browser.open(pages.url("/second"))
    processes = our_browser_processes(var_dir)
    assert len(processes) >= 2  # chromedriver and chromium, both found by their marked profile
    assert browser.profile in set(processes.values())
    browser.close()
    browser.close()  # idempotent
    assert not our_browser_processes(var_dir) and not os.path.exists(browser.profile)


def test_downloads_land_in_the_sessions_directory(pages, tmp_path, egress):
    folder = tmp_path / "task-downloads"
    browser = SeleniumBrowser(profile_root=browsers_dir(os.environ["VAR_DIR"]), download_dir=str(folder),
                              proxy=egress)
    try:
        browser.open(pages.url("/download"))
        browser.click("Get the notes")
        # Chromium writes a download under a temporary name (`.crdownload`, or a hidden `.org.chromium…` one) and
        # renames it when done: the file's own name is what says so.
        wait_until(lambda: "notes.html" in os.listdir(folder), what="the download", timeout=15)
    finally:
        browser.close()
    assert os.listdir(folder) == ["notes.html"]
    assert "Second tab" in (folder / "notes.html").read_text()
    mode = (folder / "notes.html").stat()
    assert (mode.st_uid, mode.st_mode & 0o777) == (os.geteuid(), 0o600)  # the service's alone once closed


def test_no_chromium_says_what_to_install(tmp_path):
    with pytest.raises(BrowserUnavailable, match=r"CHROMIUM_PATH=/nonexistent/chromium\) not found.*"
                                                 r"apt-get install chromium chromium-driver"):
        SeleniumBrowser(chromium_path="/nonexistent/chromium", profile_root=str(tmp_path))


def test_a_remote_webdriver_endpoint_runs_the_session_with_the_tasks_time_zone(pages):
    """SELENIUM_REMOTE_URL's path (webdriver.Remote, se:name, the time zone through CDP), against chromedriver
    serving as the remote end on loopback; a Selenium Grid speaks the same protocol."""
    import signal
    import subprocess

    from tests.grid import unprivileged_chromedriver
    from tests.processes import free_port

    port = free_port()
    server = subprocess.Popen([unprivileged_chromedriver(), f"--port={port}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_until(lambda: _answers(port), what="chromedriver to listen", timeout=15)
        browser = SeleniumBrowser(remote_url=f"http://127.0.0.1:{port}", label="remote-check",
                                  time_zone="Europe/Oslo")
        try:
            browser.open(pages.url("/second"))
            assert browser.extract("h1") == ["Second tab"]
            assert browser.run_js("return Intl.DateTimeFormat().resolvedOptions().timeZone") == "Europe/Oslo"
            assert browser.driver.capabilities["browserName"] in ("chrome", "chromium")
        finally:
            browser.close()
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(10)


def _answers(port):
    import requests

    try:
        return requests.get(f"http://127.0.0.1:{port}/status", timeout=1).ok
    except requests.RequestException:
        return False


# --- the hand: drag and drop, custom drop-downs, frames of another origin ---------------------------------
def test_an_html5_sortable_list_item_is_dragged_onto_another(browser, pages):
    browser.open(pages.url("/sortable"))
    done = browser.drag("Item 3", "Item 1")
    assert done["html5"] and done["accepted"] and done["source"]["label"] == "Item 3"
    assert browser.extract("#order") == ["order: c,a,b"]
    numbers = {e["label"]: e["index"] for e in browser.read().elements}
    browser.drag(numbers["Item 1"], f"[{numbers['Item 2']}]")  # by element numbers, as the page view shows them
    assert browser.extract("#order") == ["order: c,a,b"]  # Item 1 was already before Item 2
    browser.drag(numbers["Item 2"], numbers["Item 3"])
    assert browser.extract("#order") == ["order: b,c,a"]


def test_a_pointer_driven_slider_is_dragged_to_a_value(browser, pages):
    browser.open(pages.url("/slider"))
    done = browser.drag("Volume", offset=(60, 0))
    assert not done["html5"] and done["target"] is None
    assert browser.extract("#value") == ["value 40"]
    browser.drag("Volume", offset=(-40, 0))
    assert browser.extract("#value") == ["value 20"]


def test_an_aria_combobox_is_opened_and_its_option_chosen_by_text(browser, pages):
    browser.open(pages.url("/combobox"))
    chosen = browser.select("Colour", "blue")
    assert chosen["selected"] == "Blue" and chosen["role"] == "combobox"
    assert browser.extract("#out") == ["chosen Blue"] and browser.extract("#colour") == ["Blue"]
    browser.click("Colour")
    wait_until(lambda: "Green" in browser.read().text, timeout=5)
    line = next(line for line in browser.read().text.splitlines() if 'role="combobox"' in line)
    assert 'options="Red | Blue | Green"' in line  # the view lists an open combobox's options
    with pytest.raises(BrowserError, match=r'No option "Purple" in \[\d+\] \(options: Red, Blue, Green\)'):
        browser.select("Colour", "Purple")


def test_a_form_in_a_frame_of_another_origin_is_read_filled_and_submitted(browser, pages, other_origin, tmp_path):
    browser.open(pages.url("/outer"))
    reading = browser.read()
    framed = [e for e in reading.elements if e.get("frame")]
    assert {e["label"] for e in framed} >= {"Name", "Email", "Send"}, reading.text
    assert all(e["frame"] == other_origin.url("/form") for e in framed)
    numbers = [e["index"] for e in reading.elements]
    assert len(numbers) == len(set(numbers)), reading.text  # one number, one element, across both origins
    assert re.search(rf"\(frame \d+: {re.escape(other_origin.url('/form'))}\)\n(.*\n)*\[\d+\]<input name=\"name\">Name",
                     reading.text), reading.text  # the frame's elements under the line that names it
    email = next(e["index"] for e in framed if e["label"] == "Email")
    browser.type("Name", "Ada")  # by its label: found in the frame
    browser.type(email, "ada@example.com")  # by its number
    assert browser.select("plan", "Pro")["selected"] == "Pro"
    upload = tmp_path / "id.pdf"
    upload.write_bytes(b"%PDF-1.4\n")
    browser.upload("#doc", str(upload))
    assert "picked id.pdf" in browser.read().text
    browser.click("Send")
    wait_until(lambda: "name=Ada" in browser.read().text, timeout=10)
    text = browser.read().text
    assert "email=ada@example.com" in text and "plan=Pro" in text
    assert browser.current_url() == pages.url("/outer")  # the frame navigated, the page did not
    browser.click("Outer button")  # and the top document is still where actions go by default


@pytest.mark.parametrize("page", ["/nested", "/shadowed"])
def test_a_form_of_another_origin_in_a_same_origin_frame_or_a_shadow_root_is_filled_and_submitted(
        browser, pages, other_origin, page):
    browser.open(pages.url(page))
    reading = browser.read()
    framed = {e["label"]: e for e in reading.elements if e.get("frame")}
    assert {"Name", "Email", "Send"} <= set(framed), reading.text
    assert framed["Name"]["frame"].endswith(other_origin.url("/form")), framed["Name"]
    browser.type("Name", "Ada")  # by its label
    browser.type(framed["Email"]["index"], "ada@example.com")  # by its number
    browser.click("Send")
    wait_until(lambda: "name=Ada" in browser.read().text, timeout=10)
    assert "email=ada@example.com" in browser.read().text
    assert browser.current_url() == pages.url(page)


def test_a_text_in_the_page_and_in_a_frame_of_another_origin_is_ambiguous_and_the_stronger_match_wins(
        browser, pages, other_origin):
    browser.open(pages.url("/both"))
    reading = browser.read()
    sends = [e["index"] for e in reading.elements if e["label"] == "Send"]
    with pytest.raises(BrowserError, match=r'Several elements match "Send" .*\[\d+\] <button> Send, '
                                           r'\[\d+\] <button> Send\. Use the element number'):
        browser.click("Send")
    assert "top send" not in browser.read().text  # nothing was clicked
    browser.type("Name", "Bo")
    browser.click(sends[1])  # the number says which: the frame's
    wait_until(lambda: "name=Bo" in browser.read().text, timeout=10)
    assert "top send" not in browser.read().text

    # The frame's exact "Send" is a stronger match than the page's "Send a copy", as it would be in one document.
    browser.open(pages.url("/holds"))
    browser.read()
    browser.type("Name", "Ada")
    browser.click("Send")
    wait_until(lambda: "name=Ada" in browser.read().text, timeout=10)
    assert "top copy" not in browser.read().text
    browser.click("send a copy")
    assert "top copy" in browser.read().text


def test_the_built_in_steps_and_the_trace_say_what_was_dragged_where():
    by_text, by_number, by_offset = (parse_step(line) for line in (
        'drag "Item 3" to "Done"', "drag [3] to [7]", 'drag "Slider" by 40,0'))
    assert by_text.args == {"source": "Item 3", "target": "Done"}
    assert by_number.args == {"source": "[3]", "target": "[7]"}
    assert by_offset.args == {"source": "Slider", "x": 40.0, "y": 0.0}
    assert describe("drag", by_offset.args) == 'drag "Slider" by 40,0'
    assert describe("drag", {"source": 3, "target": 7}) == 'drag "3" to "7"'


def test_a_path_is_drawn_through_points_on_a_canvas(browser, pages):
    browser.open(pages.url("/canvas"))
    step = parse_step('draw on "#pad" through 10,10 150,10 150,60')
    assert step.args == {"target": "#pad", "points": [[10.0, 10.0], [150.0, 10.0], [150.0, 60.0]]}
    browser.draw("#pad", step.args["points"])
    assert browser.extract("#out") == ["from 10,10 to 150,60"]
    ink = "return document.getElementById('pad').getContext('2d').getImageData(%d, %d, 1, 1).data[3]"
    assert browser.run_js(ink % (80, 10)) > 0 and browser.run_js(ink % (150, 35)) > 0  # along both segments
    assert browser.run_js(ink % (80, 50)) == 0  # and nowhere else


def test_the_page_view_brings_the_page_s_recorded_events_in_the_same_call(browser, pages):
    """A recorded run's events come with each page view (one call after an action, not two): the recorder's answer,
    with the run's token, rides on the reading, in the same document and in the next one."""
    from workers.browser.rrweb import Recording

    recording = Recording(browser, settings.load(), 60)
    recording.mark({"step": 0, "action": "click"})  # the recorder, in this document and the tab's next ones
    browser.click("Go")
    reading = browser.read(drain=recording.rider())
    assert reading.recorded["token"] == recording.token and "searched" in reading.recorded["events"]
    recording.take(reading.recorded)

    browser.open(pages.url("/second"))
    reading = browser.read(drain=recording.rider())
    assert reading.title == "Second" and "Second tab" in reading.recorded["events"]  # the new page's snapshot
    recording.take(reading.recorded)
    events = recording.finish()
    assert any("searched" in str(e) for e in events) and any("Second tab" in str(e) for e in events)


def test_the_recorder_adds_nothing_to_the_page_it_records(browser, pages):
    """rrweb borrows a clean prototype from a hidden frame it adds to the page when it thinks the page's prototypes
    may be tampered with; ours are its isolated world's own, so it need not: a recorded page sees no node added (and
    a document costs no frame)."""
    from workers.browser.rrweb import Recording

    recording = Recording(browser, settings.load(), 60)
    recording.mark({"step": 0, "action": "open"})
    browser.open(pages.url("/watched"))
    reading = browser.read(drain=recording.rider())
    assert "Watched page" in reading.recorded["events"]  # the page's snapshot was taken
    assert browser.run_js("return added") == []
    recording.take(reading.recorded)
    recording.finish()


def test_the_page_view_after_typing_enter_is_the_page_the_form_loaded(browser, pages):
    """The page view after an action that navigates is the new page's, not the one it left: page.js's calls go to the
    browser directly, and the first after an action waits for a navigation the action started."""
    browser.open(pages.url("/search"))
    browser.read()
    browser.type("Query", "blue shoes\n")
    reading = browser.read()
    assert "query=blue shoes" in reading.text and reading.url.startswith(pages.url("/echo"))
    assert "Query" not in {e["label"] for e in reading.elements}


def test_a_dialog_the_page_opens_is_dismissed_and_the_page_answers_again(browser, pages):
    """While a JavaScript dialog is open the page answers nothing; the agent's browser dismisses it (as chromedriver
    does), so the page view after it comes at once and shows what the page did next."""
    browser.open(pages.url("/search"))
    browser.click("Save")
    wait_until(lambda: "after the dialog" in browser.read().text, timeout=5)
    assert browser.read().title == "Search"
