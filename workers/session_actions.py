"""Direct SDK actions (POST /extension-actions) in a kept cloud session: its window has no extension, so a worker
claims the window's commands and runs them in the session's browser, with the extension's data shapes."""
import base64
import json
import logging
import time
from contextlib import contextmanager
from datetime import datetime, timezone

from flask import current_app
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.actions.action_builder import ActionBuilder
from selenium.webdriver.common.actions.wheel_input import ScrollOrigin
from sqlalchemy import text

from app.extensions import db
from app.models import CloudSession
from app.windows import service as windows

from .browser.base import BrowserError, BrowserUnavailable

log = logging.getLogger(__name__)
IDLE_SECONDS = 3.0  # how long to wait for (more) commands after the publish or the last command
LOCK_CLASS = 22_005  # the advisory-lock namespace of "serving a kept session's direct actions"

# Like the extension's runInPage: an expression, or a function body; promises are awaited (W3C Execute Script).
_RUN_IN_PAGE = """const source = %s;
let value;
try { value = (0, eval)(source); }
catch (error) { if (!(error instanceof SyntaxError)) throw error; value = new Function(source)(); }
return Promise.resolve(value).then((v) => v === undefined ? null : JSON.parse(JSON.stringify(v)));"""
# A tab showing a PDF (Chromium's viewer): its own bytes, fetched again from the page (cookies included), in our
# isolated world (SeleniumBrowser.run_in_world: chromedriver's scripts get no answer from the viewer's renderer).
_SHOWN_PDF = """(async () => {
if (document.contentType !== "application/pdf") return null;
const blob = await (await fetch(location.href)).blob();
const data = await new Promise((resolve) => { const r = new FileReader(); r.onload = () => resolve(r.result);
  r.readAsDataURL(blob); });
const name = decodeURIComponent(location.pathname.split("/").pop() || "document.pdf");
return {base64: String(data).slice(String(data).indexOf(",") + 1), name: /\\.pdf$/i.test(name) ? name : name + ".pdf"};
})();"""


def serve(session_id):
    """Answer the session window's pending commands until none came for IDLE_SECONDS; one server per session.

    A server that finds another one holding the session stops at once: that one looks for pending commands
    after it lets go, and carries on if it finds any (the web publishes only after the command commits)."""
    session = db.session.get(CloudSession, session_id)
    if session is None or session.status != "active":
        return 0
    window_id = session.browser_window_id
    db.session.commit()
    served = 0
    while True:
        with _only_server(session_id) as mine:
            if not mine:
                return served
            served += _serve_commands(session_id)
        if not windows.has_pending(window_id):
            return served


@contextmanager
def _only_server(session_id):
    """A Postgres advisory lock on its own autocommit connection: held while serving, never in a transaction;
    a dead worker's connection closes and lets go. SQLite (embedded) runs one worker."""
    if db.engine.dialect.name != "postgresql":
        yield True
        return
    key = {"kind": LOCK_CLASS, "session": session_id}
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        held = connection.execute(text("SELECT pg_try_advisory_lock(:kind, hashtext(:session))"), key).scalar()
        try:
            yield held
        finally:
            if held:
                connection.execute(text("SELECT pg_advisory_unlock(:kind, hashtext(:session))"), key)


def _serve_commands(session_id):
    from .browser.kept_session import KeptSessionBrowser

    session = db.session.get(CloudSession, session_id, populate_existing=True)
    if session is None or session.status != "active":
        return 0
    window_id, api_key_id = session.browser_window_id, session.api_key_id
    try:
        browser = KeptSessionBrowser(webdriver_url=session.webdriver_url, webdriver_session=session.webdriver_session,
                                     label=session.name or session.id, remote=session.host == "grid",
                                     page_load_timeout=current_app.config["BROWSER_PAGE_LOAD_TIMEOUT_SECONDS"],
                                     chromium_path=current_app.config["CHROMIUM_PATH"],
                                     settings=session.browser_settings)
    except BrowserUnavailable as exc:  # its browser (or its machine) is gone: the callers learn it now, not by 504
        db.session.rollback()
        return _refuse_commands(window_id, api_key_id, str(exc))
    db.session.commit()  # no transaction while the browser works
    served, last = 0, time.monotonic()
    try:
        while time.monotonic() - last < IDLE_SECONDS:
            command = windows.claim_next(window_id)
            if command is None:
                time.sleep(0.1)
                continue
            windows.post_result(api_key_id, command["commandId"],
                                run_action(browser, command["name"], command["args"] or {}))
            served += 1
            last = time.monotonic()
    finally:
        browser.close()  # detaches; the session's browser stays
    return served


def _refuse_commands(window_id, api_key_id, reason):
    """Answer the window's pending commands with `reason`; returns how many."""
    refused = 0
    while (command := windows.claim_next(window_id)) is not None:
        windows.post_result(api_key_id, command["commandId"], {"status": "error", "data": None, "error": reason})
        refused += 1
    return refused


def run_action(browser, name, args):
    """{"status", "data", "error"} of one SDK action, as the extension answers it."""
    handler = ACTIONS.get(name)
    if handler is None:
        return {"status": "error", "data": None,
                "error": f"The action '{name}' is not available in a cloud browser session "
                         f"(available: {', '.join(sorted(ACTIONS))})."}
    try:
        return {"status": "success", "data": handler(browser, args), "error": None}
    except BrowserError as exc:
        return {"status": "error", "data": None, "error": str(exc)}
    except (TypeError, ValueError, KeyError, AttributeError) as exc:  # arguments of the wrong shape
        return {"status": "error", "data": None, "error": f"Invalid arguments for '{name}': {exc}"}


def _screenshot(browser, _):
    stamp = datetime.now(timezone.utc)
    return {"base64_content": base64.b64encode(browser.screenshot()).decode(),
            "name": f"screenshot-{int(stamp.timestamp() * 1000)}.png", "mime_type": "image/png",
            "timestamp": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")}


def _go_to_url(browser, args):
    browser.open(args["url"], new_tab=bool(args.get("new_tab")))


def _close_tab(browser, _):
    if len(browser.tabs()) <= 1:  # the session's last tab: keep the browser, leave a blank page
        browser.open("about:blank")
    else:
        browser.close_tab()
    return {"closes_window": False}


def _key(event):
    """The key of an SDK key event as Selenium names it: {"key": "Enter"} or {"code": "KeyA"} → "a"."""
    name = str(event.get("key") or event.get("code") or "")
    for prefix in ("Key", "Digit", "Numpad"):
        if name.startswith(prefix) and len(name) == len(prefix) + 1:
            return name[-1].lower()
    return name


def _press_key(browser, args):
    """Each keyDown or press of the SDK's events, with its modifiers held (a press lets the key go again, so
    keyUps have nothing left to do)."""
    for event in args.get("events") or []:
        if not isinstance(event, dict) or event.get("type") == "keyUp":
            continue
        held = event.get("modifiers") if isinstance(event.get("modifiers"), dict) else {}
        browser.press("+".join([name for name in ("ctrl", "alt", "shift", "meta") if held.get(name)] + [_key(event)]))


def _wait_for_element(browser, args):
    hidden = args.get("state") == "hidden"
    seconds = min(float(args.get("timeout") or 10_000) / 1000,
                  current_app.config["EXTENSION_ACTION_MAX_SECONDS"])
    deadline = time.monotonic() + seconds
    while True:
        match = browser.match(args.get("selectors") or {})
        if (not match["count"] or not match["visible"]) if hidden else (match["count"] and match["visible"]):
            return {"found": True}
        if time.monotonic() >= deadline:
            return {"found": False}
        time.sleep(0.2)


def _agentic_selector(browser, args):
    """A deterministic selector and an action on its element, as the extension does it (no model fallback)."""
    selectors = args.get("selectors") or {}
    match = browser.match(selectors)
    if not match["count"]:
        raise BrowserError(f"No element matches the selectors {json.dumps(selectors)}.")
    action = args.get("action") or {"type": "click"}
    kind, target = action.get("type"), str(match["index"])
    if kind == "click":
        browser.click(target)
    elif kind in ("rightClick", "doubleClick"):
        element, _ = browser._native(target)
        if element is None:
            raise BrowserError(f"The element [{target}] is inside a frame or shadow root: no {kind} there.")
        _pointer(browser, kind, element=element)
    elif kind == "hover":
        browser.hover(target)
    elif kind == "fill":
        browser.type(target, str(action.get("value") or ""))
        if action.get("pressEnter"):
            browser.press("Enter")
    elif kind == "selectOptionByValue":
        return {"value": browser.select(target, str(action.get("value")))["selected"]}
    elif kind == "selectOptionByIndex":
        texts = browser.extract(f'[data-rd-index="{match["index"]}"] option')
        index = action.get("value")
        if not isinstance(index, int) or not 0 <= index < len(texts):
            raise BrowserError(f"No option at index {index} ({len(texts)} options).")
        return {"value": browser.select(target, texts[index])["selected"]}
    elif kind == "getText":
        return {"value": match["text"]}
    elif kind == "getProperty":
        return {"value": browser.element_property(target, str(action.get("propertyName")))}
    else:
        raise BrowserError(f"The selector action '{kind}' is not supported in a cloud browser session.")
    return {"value": None, **_verified(args)}


def _verified(args):
    """verified: null when a verification was asked: checking it is the model's (not done here)."""
    return {"verified": None} if args.get("verification_description") else {}


def _pointer(browser, kind, element=None, at=None):
    """A real (trusted) click, right click or double click on an element or at viewport coordinates."""
    builder = ActionBuilder(browser.driver)
    pointer = builder.pointer_action
    if element is not None:
        pointer.move_to(element)
    else:
        pointer.move_to_location(*at)
    {"click": pointer.click, "rightClick": pointer.context_click, "doubleClick": pointer.double_click}[kind]()
    try:
        builder.perform()
    except WebDriverException as exc:
        raise BrowserError(f"Could not {kind} there: {exc.msg or exc}") from None
    browser._settle()


def _agentic_mouse_action(browser, args):
    """The SDK's mouse action at a recorded point: scaled from the recorded viewport to this one when
    resize_window is set (the window keeps its size: a kept session's window is shared by its tasks)."""
    click, action = args["recorded_click"], args.get("action") or {"type": "click"}
    x, y = float(click["x"]), float(click["y"])
    width, height = browser.run_js("return [window.innerWidth, window.innerHeight];")
    recorded = click.get("viewport") or {}
    if args.get("resize_window") and recorded.get("width") and recorded.get("height"):
        x, y = x * width / float(recorded["width"]), y * height / float(recorded["height"])
    if not (0 <= x < width and 0 <= y < height):
        raise BrowserError(f"No element matches the selectors: the point ({x:g}, {y:g}) is outside the "
                           f"{width}x{height} viewport.")
    point, kind = (int(x), int(y)), action.get("type")
    if kind == "scroll":
        delta = int(action.get("deltaX") or 0), int(action.get("deltaY") or 0)
        ActionChains(browser.driver).scroll_from_origin(ScrollOrigin.from_viewport(*point), *delta).perform()
    elif kind in ("click", "rightClick", "doubleClick"):
        _pointer(browser, kind, at=point)
    elif kind == "fill":
        _pointer(browser, "click", at=point)
        browser.run_js("const e = document.activeElement; if (e && 'value' in e) { e.select && e.select(); }")
        ActionChains(browser.driver).send_keys(str(action.get("text") or "")).perform()
        if action.get("pressEnter"):
            browser.press("Enter")
    else:
        raise BrowserError(f"The mouse action '{kind}' is not supported.")
    return _verified(args) or None


def _save_pdf_file(browser, _):
    """The PDF the tab shows (its own bytes), else the page printed to PDF (Page.printToPDF)."""
    shown = browser.run_in_world(_SHOWN_PDF)
    stamp = datetime.now(timezone.utc)
    if shown and shown.get("base64"):
        content, name = shown["base64"], shown["name"]
    else:
        try:
            content = browser.driver.execute("executeCdpCommand", {
                "cmd": "Page.printToPDF", "params": {"printBackground": True}})["value"]["data"]
        except WebDriverException as exc:
            raise BrowserError(f"Could not print the page to PDF: {exc.msg or exc}") from None
        name = f"page-{int(stamp.timestamp() * 1000)}.pdf"
    return {"base64_content": content, "name": name, "mime_type": "application/pdf",
            "timestamp": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")}


ACTIONS = {
    "go_to_url": _go_to_url,
    "get_url": lambda browser, _: {"url": browser.current_url()},
    "get_full_html": lambda browser, _: {"html": browser.html()},
    "get_simplified_html": lambda browser, _: {"html": browser.read().text},
    "get_screenshot": _screenshot,
    "execute_javascript_on_page": lambda browser, args: {
        "result": browser.run_js(_RUN_IN_PAGE % json.dumps(args.get("code", "")))},
    "print_message": lambda browser, args: None,
    "close_tab": _close_tab,
    "press_key": _press_key,
    "wait_for_element": _wait_for_element,
    "agentic_selector": _agentic_selector,
    "agentic_mouse_action": _agentic_mouse_action,
    "save_pdf_file": _save_pdf_file,
}
