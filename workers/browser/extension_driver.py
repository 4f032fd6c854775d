"""The extension driver: the Browser interface carried out by our extension in the caller's own window.

Each method is one command through `app.windows.service` (a row the extension long-polls for, its result a
row whose NOTIFY wakes this worker). Screenshots are `chrome.tabs.captureVisibleTab`: no "being debugged"
banner in the user's window, at the price of Chromium's 2 captures a second (the extension waits and
retries; the agent takes at most one per action). Key presses use `chrome.debugger` only for the moment of
the press, so they are trusted events like Selenium's.
"""
import base64

from app.windows.service import CommandStopped, CommandTimeout, send_command

from .base import FRAME_PLACEHOLDER, Browser, BrowserError, BrowserUnavailable, NavigationRefused, PageReading

# Errors the extension reports when the user took the window or tab away: the task cannot go on.
GONE = ("was closed", "moved to another window", "not one of this extension's windows",
        "The window has no tab")


class ExtensionBrowser(Browser):
    def __init__(self, window_id, task_id, timeout=60, check_url=None, should_stop=lambda: False):
        self.label = window_id
        self.window_id, self.task_id, self.timeout = window_id, task_id, timeout
        self.check_url = check_url  # the egress policy, as for the cloud browser
        self.should_stop = should_stop
        self._closed = False

    def begin(self, prompt=""):
        self._command("task_begin", prompt=prompt[:500])
        return self

    def _command(self, name, timeout=None, **args):
        try:
            result = send_command(self.window_id, name, args, timeout or self.timeout, task_id=self.task_id,
                                  should_stop=self.should_stop)
        except CommandTimeout as exc:
            raise BrowserUnavailable(
                f"{exc} Is the browser still open and the extension connected?") from None
        except CommandStopped as exc:
            raise BrowserError(str(exc)) from None
        if result.get("status") != "success":
            error = result.get("error") or f"The extension could not do '{name}'."
            if any(marker in error for marker in GONE):
                raise BrowserUnavailable(error)
            raise BrowserError(error)
        return result.get("data")

    # navigation and tabs
    def open(self, url, new_tab=False):
        if self.check_url is not None:
            try:
                self.check_url(url)
            except ValueError as exc:
                raise NavigationRefused(f"Refused to open {url}: {exc}") from None
        self._command("open", url=url, newTab=bool(new_tab))

    def current_url(self):
        return self._command("current_url")["url"]

    def title(self):
        return self._command("title")["title"]

    def back(self):
        self._command("back")

    def tabs(self):
        return [{**tab, "index": tab["index"] + 1} for tab in self._command("tabs")]

    def switch_tab(self, index):
        self._command("switch_tab", index=int(index) - 1)

    def close_tab(self, index=None):
        self._command("close_tab", index=None if index is None else int(index) - 1)

    # reading
    def read(self, max_chars=40000, drain=None):  # no recorder in the caller's window
        result = self._command("read", maxChars=int(max_chars))
        # page.js in the user's tab reaches its same-origin frames only; the extension does not read the others.
        text = FRAME_PLACEHOLDER.sub("(a frame of another origin: not read in client mode)", result["text"])
        return PageReading(url=result["url"], title=result["title"], text=text,
                           elements=result.get("elements", []), status=result.get("status") or 0,
                           truncated=bool(result.get("truncated")))

    def html(self):
        return self._command("html")["html"]

    def extract(self, selector):
        return self._command("extract", selector=selector)["texts"]

    def screenshot(self):
        return base64.b64decode(self._command("screenshot")["base64"])

    # acting
    def click(self, target):
        return self._command("click", target=str(target))

    def type(self, target, text, where=None):
        if where is not None:  # the extension reports the tab's URL, not a frame's: a frame counts as the tab
            here = self.current_url()
            where(here, here)
        return self._command("type", target=str(target), text=text)

    def select(self, target, option):
        return self._command("select", target=str(target), option=option)

    def press(self, keys):
        self._command("press", keys=keys)

    def scroll(self, direction="down", target=None):
        return self._command("scroll", direction=direction, target=target)

    def hover(self, target):
        return self._command("hover", target=str(target))

    def drag(self, source, target=None, offset=None):
        x, y = offset or (0, 0)
        return self._command("drag", source=str(source), target=None if target is None else str(target), x=x, y=y)

    def draw(self, target, points):
        raise BrowserError("Drawing is not available in client mode: the extension has no real pointer. Use "
                           "executionMode 'cloud_browser'.")

    def wait_for(self, text=None, selector=None, navigation=False, timeout=10):
        found = self._command("wait_for", timeout=float(timeout) + self.timeout, text=text, selector=selector,
                              navigation=navigation, seconds=float(timeout))
        if not found.get("found"):
            what = f"the text {text!r}" if text is not None else f"an element matching {selector!r}"
            raise BrowserError(f"Timed out after {float(timeout):g} s waiting for {what}.")

    def upload(self, target, path):
        raise BrowserError("Uploading files is not available in client mode: the extension cannot fill a "
                           "file input with a file from the service. Use executionMode 'cloud_browser'.")

    def describe(self, target):
        return self._command("describe", target=str(target))

    def resolve(self, locator):
        return self._command("resolve", locator=locator)

    def run_js(self, code):
        return self._command("run_js", code=code)["result"]

    def save_gif(self, gif_bytes):
        """Also put the run's GIF into the user's Downloads/remote-dispatch/<requestId>.gif."""
        self._command("save_gif", requestId=self.task_id, base64=base64.b64encode(gif_bytes).decode())

    def close(self, status=""):
        """Leave the user's window as it is; tell the side panel the task is over. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.should_stop = lambda: False  # a cancelled task still tells the side panel it is over
        try:
            self._command("task_end", timeout=10, status=status)
        except BrowserError:
            pass  # the window went away: nothing to tell it
