"""The Narada side panel a kept session's CDP shows Playwright: a page that is no browser target, served by the relay.

The SDK's CloudBrowserEnvironment.reset_agent_state() connects Playwright over the session's CDP, looks for the page
at chrome-extension://<Narada's id>/sidepanel.html?browserWindowId=<the session's window> and reloads it: reloading
Narada's side panel ends what its agent runs. A session's browser has no such extension (it could not have Narada's
id, and the relay hides every extension target), so the relay announces this page itself, to a caller that
auto-attaches as Playwright does, after the browser's own pages (the SDK's start navigates `context.pages[0]`). Its
CDP session never reaches the browser: Playwright's set-up commands are answered here, Page.reload cancels the
session's running and queued tasks (as the API's cancel does, for the key the session belongs to) and then reports
a finished reload; every other command is refused.
"""
import itertools
import secrets

NARADA_EXTENSION_ID = "bhioaidlggjdkheaajakomifblpjmokn"  # the SDK's BrowserConfig.extension_id default
ORIGIN = f"chrome-extension://{NARADA_EXTENSION_ID}"
REFUSED = ("this page is Remote Dispatch's stand-in for the Narada side panel (no browser target is behind it): "
           "only Page.reload is served, which cancels the session's running and queued tasks")
# Commands Playwright sends a page it attaches to, which the stand-in takes without doing anything.
SET_UP = {"Page.enable", "Page.setLifecycleEventsEnabled", "Log.enable", "Runtime.enable", "Network.enable",
          "Target.setAutoAttach", "Runtime.runIfWaitingForDebugger", "Inspector.enable", "Page.setFontFamilies",
          "Page.setInterceptFileChooserDialog", "Page.setBypassCSP", "Security.setIgnoreCertificateErrors",
          "Network.setCacheDisabled", "Network.setExtraHTTPHeaders", "Network.setUserAgentOverride",
          "Network.setBypassServiceWorker", "Network.emulateNetworkConditions", "Fetch.enable", "Fetch.disable",
          "Runtime.addBinding", "Page.removeScriptToEvaluateOnNewDocument", "Page.setDownloadBehavior",
          "Runtime.disable", "Page.disable", "Log.disable", "Network.disable", "Page.bringToFront"}
SET_UP_DOMAINS = ("Emulation.",)


class SidePanel:
    """The stand-in of one relay connection. `window_id`: the session's browser window (the SDK's browserWindowId);
    `reset`: a coroutine function that cancels the session's tasks."""

    def __init__(self, window_id, reset):
        self.url = f"{ORIGIN}/sidepanel.html?browserWindowId={window_id}"
        self.reset = reset
        self.target_id = secrets.token_hex(16).upper()
        self.session_id = secrets.token_hex(16).upper()
        self.loader_id = secrets.token_hex(16).upper()
        self.auto_attached = False  # the caller asked the browser to auto-attach to its targets, flat
        self.announced = False
        self.identifiers = itertools.count(1)

    def attached_event(self):
        """Target.attachedToTarget for the stand-in, as Chromium sends it for a page waiting for its debugger."""
        self.announced = True
        return {"method": "Target.attachedToTarget", "params": {
            "sessionId": self.session_id, "waitingForDebugger": True, "targetInfo": {
                "targetId": self.target_id, "type": "page", "title": "Narada", "url": self.url, "attached": True,
                "canAccessOpener": False, "browserContextId": "side-panel"}}}

    def announce_before(self, message):
        """Whether the stand-in is announced before the caller's (checked) root `message` goes to the browser:
        Playwright asks Target.getTargetInfo once the browser's auto-attach has named every page it has."""
        if "sessionId" in message:
            return False
        params = message.get("params") or {}
        if message["method"] == "Target.setAutoAttach":
            self.auto_attached = bool(params.get("autoAttach") and params.get("flatten"))
            return False
        return (message["method"] == "Target.getTargetInfo" and "targetId" not in params and self.auto_attached
                and not self.announced)

    async def answer(self, message):
        """The messages (replies and events, in order) the stand-in sends for a command of its session."""
        method, reply = message["method"], {"id": message.get("id"), "sessionId": self.session_id}
        if method == "Page.getFrameTree":
            return [{**reply, "result": {"frameTree": {"frame": self._frame()}}}]
        if method == "Page.createIsolatedWorld":
            return [{**reply, "result": {"executionContextId": next(self.identifiers)}}]
        if method == "Page.addScriptToEvaluateOnNewDocument":
            return [{**reply, "result": {"identifier": str(next(self.identifiers))}}]
        if method == "Page.reload":
            await self.reset()
            self.loader_id = secrets.token_hex(16).upper()
            return [{**reply, "result": {}}, *self._reloaded()]
        if method in SET_UP or method.startswith(SET_UP_DOMAINS):
            return [{**reply, "result": {}}]
        return [{**reply, "error": {"code": -32000, "message": f"{method} is refused by Remote Dispatch: {REFUSED}"}}]

    def _frame(self):
        return {"id": self.target_id, "loaderId": self.loader_id, "url": self.url, "domainAndRegistry": "",
                "securityOrigin": ORIGIN, "mimeType": "text/html", "secureContextType": "Secure",
                "crossOriginIsolatedContextType": "NotIsolated", "gatedAPIFeatures": []}

    def _reloaded(self):
        """The events of a finished reload of the panel: a new document committed, then loaded."""
        def event(method, **params):
            return {"method": method, "params": params, "sessionId": self.session_id}
        frame_id, loader_id = self.target_id, self.loader_id
        return [event("Page.frameStartedLoading", frameId=frame_id),
                event("Page.frameNavigated", frame=self._frame(), type="Navigation"),
                event("Page.lifecycleEvent", frameId=frame_id, loaderId=loader_id, name="DOMContentLoaded",
                      timestamp=0),
                event("Page.domContentEventFired", timestamp=0),
                event("Page.lifecycleEvent", frameId=frame_id, loaderId=loader_id, name="load", timestamp=0),
                event("Page.loadEventFired", timestamp=0),
                event("Page.frameStoppedLoading", frameId=frame_id)]
