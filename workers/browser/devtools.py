"""CDP straight to a browser's DevTools socket on this machine, for the page script's calls.

chromedriver's `executeCdpCommand` costs a WebDriver round trip, and chromedriver first checks for a pending
navigation and an open dialog: 2.5 ms a command at best, 5–20 ms while a page loads. The same command over the
browser's own DevTools socket takes some 0.6 ms. A web agent's action makes four or five such calls (the page
script's lookup, its call, the page view), so they go here when the browser has a socket on this machine (a box of
ours: app/sandbox/box.py); a Grid's browser keeps chromedriver's way.

What must outlive this connection stays with chromedriver: a script added for a tab's next documents
(`Page.addScriptToEvaluateOnNewDocument`) lasts as long as the CDP session that added it, and chromedriver's lasts
as long as the browser. Worlds and execution contexts are the renderer's, shared by both sessions; remote object
ids are this connection's own.
"""
import threading

import urllib3
from selenium.common.exceptions import NoSuchWindowException, TimeoutException, WebDriverException

from app.live.cdp import Cdp, CdpUnavailable


class DevToolsGone(urllib3.exceptions.HTTPError):
    """The browser's DevTools socket does not answer: the browser is gone, as when its WebDriver endpoint stops
    answering (urllib3's errors), which callers already take for that (a kept session's task ends saying so)."""


# A command that names a tab the browser no longer has (closed by its page, or by a person in the live view).
TAB_GONE = ("No session with given id", "Session with given id not found", "No target with given id",
            "Target closed")


# A tab's top frame's page events: a navigation that leaves the page, and its end (committed, within the document, or
# stopped: a download, a 204, a navigation cancelled).
LEAVING = ("Page.frameRequestedNavigation", "Page.frameStartedLoading")
ARRIVED = ("Page.frameNavigated", "Page.navigatedWithinDocument", "Page.frameStoppedLoading")


class DirectCdp:
    """One DevTools connection to a browser: a flattened CDP session per tab (its target id is chromedriver's window
    handle), opened at the tab's first command. Its page events say
    - when the tab's page is leaving: a navigation of its top frame (whose id is the tab's) was requested or started
      loading, and has not committed or stopped (`navigating`). chromedriver waits for that before its commands; a
      direct call would reach the page being left;
    - when a JavaScript dialog opens: it is dismissed, as chromedriver dismisses one ("dismiss and notify"), for while
      it is open the page answers nothing."""

    def __init__(self, endpoint, timeout, on_attach=()):
        self.endpoint, self.timeout = endpoint, timeout
        # (CDP command, params) for each tab's session as it opens: the renderer takes some overrides (the chosen
        # identity's navigator.platform) from the session that attached last, so this one sets them again.
        self.on_attach = list(on_attach)
        self._connection = None
        self._sessions = {}  # target id -> session id
        self._lock = threading.Lock()
        self._navigation = threading.Condition()
        self._navigating = set()  # target ids

    def navigating(self, target):
        return target in self._navigating

    def wait_navigated(self, target, timeout):
        """Until the tab's navigation committed or stopped, at most `timeout` seconds; whether it did."""
        with self._navigation:
            return self._navigation.wait_for(lambda: target not in self._navigating, timeout)

    def stay(self, target):
        """The tab's navigation is taken as not happening (it neither committed nor stopped in a settling's time)."""
        with self._navigation:
            self._navigating.discard(target)

    def tabs(self):
        """The browser's tabs (target ids, which are chromedriver's window handles), as the browser lists them: one
        call to the browser process, 0.5 ms where chromedriver's window handles take 2–4. None when not known."""
        try:
            infos = self._cdp().call("Target.getTargets", timeout=self.timeout).get("targetInfos") or []
        except (CdpUnavailable, DevToolsGone):
            return None
        return {info.get("targetId") for info in infos if info.get("type") == "page"}

    def call(self, target, method, params):
        """The result of `method` in the tab `target`. Failures as chromedriver's would come: NoSuchWindowException
        (the tab is gone), TimeoutException (no answer in `timeout` seconds), WebDriverException (CDP's error, its
        message as CDP words it); DevToolsGone when the browser is."""
        session = self._session(target)
        try:
            reply = self._cdp().reply(method, params, session, self.timeout)
        except CdpUnavailable as exc:
            raise DevToolsGone(str(exc)) from None
        if reply is None:
            raise TimeoutException(f"the page did not answer {method} in {self.timeout:g} s")
        if "error" in reply:
            message = reply["error"].get("message") or "refused"
            if any(marker in message for marker in TAB_GONE):
                self._sessions.pop(target, None)
                raise NoSuchWindowException(message)
            raise WebDriverException(f"{message} {reply['error'].get('data') or ''}".strip())
        return reply.get("result") or {}

    def _cdp(self):
        if self._connection is None or self._connection.closed.is_set():
            try:
                self._connection = Cdp(self.endpoint, self._event)
            except CdpUnavailable as exc:
                raise DevToolsGone(str(exc)) from None
            self._sessions, self._navigating = {}, set()
        return self._connection

    def attach(self, target):
        """Attach to the tab now, before it navigates: a session that attaches while a document loads takes its
        overrides back from that document for a moment (`on_attach`), which the page's scripts could read."""
        self._session(target)

    def _session(self, target):
        with self._lock:
            if target in self._sessions:
                return self._sessions[target]
            cdp = self._cdp()
            try:
                session = cdp.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
                cdp.call("Page.enable", session=session)  # for its navigations' and dialogs' events
                for command, params in self.on_attach:
                    cdp.call(command, params, session=session)
            except (CdpUnavailable, KeyError) as exc:
                if cdp.closed.is_set():
                    raise DevToolsGone(str(exc)) from None
                raise NoSuchWindowException(f"tab {target} cannot be attached to: {exc}") from None
            self._sessions[target] = session
            return session

    def _event(self, method, params, session):
        if method in LEAVING or method in ARRIVED:
            # The tab's own top frame only (its id is the tab's): the tab whose session this is, found by the frame.
            frame = params.get("frameId") or (params.get("frame") or {}).get("id")
            target = frame if session is not None and self._sessions.get(frame) == session else None
            if target is None or params.get("disposition", "currentTab") != "currentTab":
                return
            with self._navigation:
                if method in LEAVING:
                    self._navigating.add(target)
                else:
                    self._navigating.discard(target)
                    self._navigation.notify_all()
        elif method == "Page.javascriptDialogOpening" and session:
            try:
                self._connection.send("Page.handleJavaScriptDialog", {"accept": False}, session)
            except CdpUnavailable:
                pass
        elif method == "Target.detachedFromTarget":  # its tab closed (the reader's thread: no lock taken here)
            for target, known in list(self._sessions.items()):
                if known == params.get("sessionId"):
                    self._sessions.pop(target, None)

    def close(self):
        if self._connection is not None:
            self._connection.close()
            self._connection = None
