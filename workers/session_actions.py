"""Direct SDK actions (POST /extension-actions) in a kept cloud session: its window has no extension, so a worker
claims the window's commands and runs them in the session's browser, with the extension's data shapes."""
import base64
import json
import logging
import time
from datetime import datetime, timezone

from flask import current_app

from app.extensions import db
from app.models import CloudSession
from app.windows import service as windows

from .browser.base import BrowserError

log = logging.getLogger(__name__)
IDLE_SECONDS = 3.0  # how long to wait for (more) commands after the publish or the last command

# Like the extension's runInPage: an expression, or a function body; promises are awaited (W3C Execute Script).
_RUN_IN_PAGE = """const source = %s;
let value;
try { value = (0, eval)(source); }
catch (error) { if (!(error instanceof SyntaxError)) throw error; value = new Function(source)(); }
return Promise.resolve(value).then((v) => v === undefined ? null : JSON.parse(JSON.stringify(v)));"""


def serve(session_id):
    """Answer the session window's pending commands until none came for IDLE_SECONDS."""
    from .browser.kept_session import KeptSessionBrowser

    session = db.session.get(CloudSession, session_id)
    if session is None or session.status != "active":
        return 0
    window_id, api_key_id = session.browser_window_id, session.api_key_id
    browser = KeptSessionBrowser(webdriver_url=session.webdriver_url, webdriver_session=session.webdriver_session,
                                 label=session.name or session.id, remote=session.host == "grid",
                                 page_load_timeout=current_app.config.get("BROWSER_PAGE_LOAD_TIMEOUT_SECONDS", 30))
    served, last = 0, time.monotonic()
    try:
        while time.monotonic() - last < IDLE_SECONDS:
            # The channel's own hand-out (marks them delivered); nothing runs them twice: results are first-wins.
            commands = windows._deliver([window_id], set())
            if not commands:
                time.sleep(0.1)
                continue
            for command in commands:
                windows.post_result(api_key_id, command["commandId"], run_action(browser, command["name"],
                                                                                   command["args"] or {}))
                served += 1
            last = time.monotonic()
    finally:
        browser.close()  # detaches; the session's browser stays
    return served


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
}
