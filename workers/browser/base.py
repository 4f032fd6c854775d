"""The one browser interface the web agent drives: a Selenium session, the extension's window, a kept cloud session.

Drivers implement `Browser`; the page-side logic they share lives in `page.js` (one file, in an isolated world of the
page either way: installed through CDP by the Selenium driver (page_script.py), injected unchanged by the extension).
Nothing outside `workers/browser/` imports Selenium.
"""
import re
from dataclasses import dataclass, field

# Where page.js leaves out the view of a frame of another origin, for the driver to put it in (or say why not).
FRAME_PLACEHOLDER = re.compile("\x01frame (\\d+)\x01")


class BrowserError(Exception):
    """An action could not be done; the message says why (element not found, navigation refused, timeout)."""


class BrowserUnavailable(BrowserError):
    """No browser could be started or reached (not installed, Grid down, window gone): the task cannot go on."""


class NavigationRefused(BrowserError):
    """The egress policy refused a URL (private address, file:, chrome:, ...)."""


@dataclass
class PageReading:
    """What `read()` returns: the page as the agent sees it."""

    url: str
    title: str
    text: str  # the simplified view: numbered interactive elements `[N]<tag ...>label</tag>` and visible text
    elements: list = field(default_factory=list)  # [{"index", "tag", "label", "new": bool, ...}]
    status: int = 0  # the main document's HTTP status: 0 unknown (data:, about:), -1 the browser's error page
    truncated: bool = False  # the view was cut at the budget (its text ends with a marker saying so)
    recorded: object = None  # the recorder's answer to a drain made in the same call (`read(drain=)`), or None

    def error(self):
        """Why this page is an error page (HTTP 4xx/5xx or the browser's own), or None."""
        if self.status == -1:
            return f"The browser could not load {self.url}: {self.title or 'an error page'}."
        if self.status >= 400:
            return f"The page answered HTTP {self.status}."
        return None


class Browser:
    """A browser the web agent acts in. Targets are an element number (int or "12"), visible text, or a CSS
    selector; drivers resolve them with page.js. Every method raises BrowserError with a reason on failure.

    Conventions every driver keeps (the web agent's environment relies on them):
    - tabs are numbered from 1 in the order they opened; a tab the page opens becomes the current one;
    - click/type/hover/upload return page.js's element info {"index", "tag", "label", ...}; select returns it
      with "selected" (the option's text, of a <select> or an ARIA combobox or listbox); scroll returns
      {"scrollY", "moved", "atEnd"};
    - elements inside frames of any origin are numbered in the page view and acted on like the others;
    - `type` never puts its text in an error message or a log (it may hold a secret);
    - `should_stop` (a callable, set by the constructor) is read inside waits, so a cancel lands within an action."""

    label = ""  # cloudBrowserSessionName or the window id: for logs and the trace
    # Where the live view (app/live) reaches this browser's DevTools: "unix:<socket>" or a Grid's se:cdp URL;
    # None for a browser it cannot watch (the user's own window).
    live_endpoint = None
    # Seconds the run has been paused so far for a person's control (workers/agent/takeover.py), which happens
    # inside `should_stop`: a wait does not count them against its timeout.
    paused_seconds = staticmethod(lambda: 0.0)

    def live_target(self):
        """The DevTools target id of the tab the agent is on (the live view follows it), or None."""
        return None

    # navigation and tabs
    def open(self, url, new_tab=False): raise NotImplementedError
    def current_url(self): raise NotImplementedError
    def title(self): raise NotImplementedError
    def back(self): raise NotImplementedError
    def tabs(self): raise NotImplementedError  # [{"index" (from 1), "url", "title", "active"}]
    def switch_tab(self, index): raise NotImplementedError  # from 1
    def close_tab(self, index=None): raise NotImplementedError

    # reading
    # -> PageReading, the view cut at max_chars. `drain` ((recorder name, drain arguments), rrweb.py `rider`):
    # the run's recorder in the page's world drained in the same call, where the browser can (`recorded`).
    def read(self, max_chars=40000, drain=None): raise NotImplementedError
    def html(self): raise NotImplementedError
    def extract(self, selector): raise NotImplementedError  # -> [text of each match]
    def screenshot(self): raise NotImplementedError  # -> PNG bytes

    # acting
    def click(self, target): raise NotImplementedError
    # clears first; `text` has real secret values. `where(top URL, URL of the target's frame)`, when given, is
    # called just before the keys are sent, in the target's frame, and raises BrowserError to refuse.
    def type(self, target, text, where=None): raise NotImplementedError
    def select(self, target, option): raise NotImplementedError
    def press(self, keys): raise NotImplementedError  # "Enter", "Control+a"
    def scroll(self, direction="down", target=None): raise NotImplementedError
    def hover(self, target): raise NotImplementedError
    def wait_for(self, text=None, selector=None, navigation=False, timeout=10): raise NotImplementedError
    def upload(self, target, path): raise NotImplementedError
    # `source` onto the element `target`, or moved by `offset` (x, y) pixels; -> {"source": info, "target": info or
    # None, "html5": bool (HTML5 drag-and-drop events) or a real pointer's down, moves, up}
    def drag(self, source, target=None, offset=None): raise NotImplementedError
    # a real pointer pressed at the first of `points` ((x, y) pixels from the element's top-left corner), moved
    # through the others and released at the last (a canvas, a signature pad); -> the element's info
    def draw(self, target, points): raise NotImplementedError
    def run_js(self, code): raise NotImplementedError

    # replay scripts (workers/replay/): page.js's describe/resolve
    def describe(self, target): raise NotImplementedError  # -> locator of the element (page.js describe)
    def resolve(self, locator): raise NotImplementedError  # -> {"count", "index"?, "matches", "by"}

    def close(self):
        """Release the browser (end the session, or leave the user's window as it is). Idempotent."""
