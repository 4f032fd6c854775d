"""One viewer's WebSocket: the page's screencast goes out, validated input events come in, never CDP."""
import json
import logging
import threading
import time

from marshmallow import ValidationError

from . import service
from .cdp import Cdp, CdpUnavailable
from .schemas import VIEWER_MESSAGES

log = logging.getLogger(__name__)
REFRESH_SECONDS = 0.25  # how often the viewer re-reads what it watches (task row, the worker's live file)
MAX_MESSAGE_BYTES = 4096  # a bigger viewer message closes the connection (1009)
MAX_REFUSALS = 50  # refused messages before the viewer is closed (1008)
MOUSE = {"down": "mousePressed", "up": "mouseReleased", "move": "mouseMoved"}
# Keys whose keyDown must carry text for the page to see a keypress (Enter submits a form).
KEY_TEXT = {"Enter": "\r", "Tab": "\t"}
SCREENCAST = {"format": "jpeg", "quality": 70, "everyNthFrame": 1}
MAX_FPS = 25  # enough to follow a person's hand; more costs the browser's CPU (a watched task's steps slow down)


class Viewer:
    """Serves one WebSocket (simple_websocket.Server) for the claims of a live token, until either side ends."""

    def __init__(self, ws, found):
        self.ws, self.found = ws, found
        self.control = found["m"] == "control"
        self.by = found.get("n") or "a person"
        self._send_lock = threading.Lock()
        self.cdp = self.endpoint = self.session = self.target = None
        self.size = None  # (width, height) in CSS px of the page, from the latest frame
        self.page_url = None  # the watched tab's URL as the browser reports it (a person's navigation too)
        self.view, self.shown = {}, None
        self.refusals = 0
        self.frames, self.acked = 0, 0.0

    def run(self):
        try:
            refreshed = 0.0
            while True:
                if time.monotonic() - refreshed >= REFRESH_SECONDS:
                    refreshed = time.monotonic()
                    if not self._refresh():
                        return
                message = self.ws.receive(timeout=REFRESH_SECONDS)
                if message is not None and not self._handle(message):
                    return
        finally:
            if self.cdp is not None:
                self.cdp.close()

    # --- out: state and frames ---------------------------------------------------------------------------
    def _send(self, message):
        with self._send_lock:
            self.ws.send(json.dumps(message))

    def _refresh(self):
        self.view = view = service.watched(self.found)
        if not view["alive"]:
            self._send({"type": "ended", "message": view["why"]})
            self.ws.close(reason=1000, message=view["why"])
            return False
        problem = self._follow(view)
        shown = {"type": "state", "mode": self.found["m"], "url": self.page_url or view.get("url"),
                 "step": view.get("step"),
                 "control": self._control(), "waiting": view.get("waiting"), "problem": problem}
        if shown != self.shown:
            self.shown = shown
            self._send(shown)
        return True

    def _control(self):
        """Who drives the browser now: agent, pausing (a person asked), person, or idle (no agent at all)."""
        view = self.view
        if not view.get("task"):
            return "idle"
        if (view.get("takeover") or {}).get("active"):
            return "person" if view.get("paused") else "pausing"
        return "waiting" if view.get("status") == "input-required" else "agent"

    def _follow(self, view):
        """Connect to the browser and screencast the tab the agent is on; None, or why there is no picture."""
        endpoint = view.get("endpoint")
        if not endpoint:
            return "The browser is starting."
        try:
            if self.cdp is None or self.cdp.closed.is_set() or endpoint != self.endpoint:
                if self.cdp is not None:
                    self.cdp.close()
                self.session = self.target = None
                self.cdp, self.endpoint = Cdp(endpoint, self._event), endpoint
                self.cdp.send("Target.setDiscoverTargets", {"discover": True})  # URL changes of the watched tab
            target = view.get("targetId") or self.target or self._first_page()
            if target != self.target or self.session is None:
                self._attach(target)
        except CdpUnavailable as exc:
            self.cdp = None
            return f"The browser cannot be reached from here: {exc}."
        return None

    def _first_page(self):
        pages = [t for t in self.cdp.call("Target.getTargets").get("targetInfos", [])
                 if t.get("type") == "page" and not str(t.get("url", "")).startswith(("chrome", "devtools"))]
        if not pages:
            raise CdpUnavailable("the browser has no page open")
        return pages[0]["targetId"]

    def _attach(self, target):
        if self.session is not None:
            self.cdp.send("Page.stopScreencast", session=self.session)
            self.cdp.send("Target.detachFromTarget", {"sessionId": self.session})
        self.session = None
        session = self.cdp.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.target, self.session, self.page_url = target, session, None
        self.cdp.send("Page.startScreencast", SCREENCAST, session=session)

    def _event(self, method, params, session):
        """The CDP reader thread: a frame of the watched page goes to the viewer, then is acknowledged, no sooner
        than 1/MAX_FPS after the previous one. The browser sends the next frame only after that ack: a slow viewer
        (the send blocks) gets fewer frames, never a queue, and an animated page costs the browser at most
        MAX_FPS encodings a second."""
        if method == "Page.screencastFrame" and session == self.session:
            meta = params.get("metadata") or {}
            self.size = (meta.get("deviceWidth") or 0, meta.get("deviceHeight") or 0)
            try:
                self._send({"type": "frame", "data": params.get("data", ""), "width": self.size[0],
                            "height": self.size[1], "timestamp": meta.get("timestamp")})
                self.frames += 1
            except Exception:  # the viewer is gone: its own thread ends the session
                return
            time.sleep(max(0.0, self.acked + 1 / MAX_FPS - time.monotonic()))
            self.acked = time.monotonic()
            try:
                self.cdp.send("Page.screencastFrameAck", {"sessionId": params.get("sessionId")}, session=session)
            except CdpUnavailable:
                pass
        elif method == "Target.targetInfoChanged" and (params.get("targetInfo") or {}).get("targetId") == self.target:
            self.page_url = params["targetInfo"].get("url")
        elif method == "Target.detachedFromTarget" and params.get("sessionId") == self.session:
            self.session = None  # the tab closed: the next refresh attaches to the agent's current one

    # --- in: validated viewer messages -------------------------------------------------------------------
    def _handle(self, message):
        """Act on one viewer message; False ends the connection."""
        if isinstance(message, (bytes, bytearray)):
            return self._refuse("Binary messages are refused: send JSON text.")
        try:
            data = json.loads(message)
        except ValueError:
            return self._refuse("The message is not JSON.")
        kind = data.get("type") if isinstance(data, dict) else None
        schema = VIEWER_MESSAGES.get(kind) if isinstance(kind, str) else None
        if schema is None:
            return self._refuse("Unknown message type: send one of " + ", ".join(sorted(VIEWER_MESSAGES)) + ".")
        try:
            data = schema.load(data)
        except ValidationError as exc:
            return self._refuse(f"Invalid {kind} message: {json.dumps(exc.messages)[:300]}")
        if not self.control:
            return self._refuse("This live view is view-only (mode=view): input and takeover are refused.")
        if kind in ("take", "handback"):
            return self._takeover(kind)
        control = self._control()
        if control not in ("person", "idle"):
            return self._refuse("The agent is driving: take control first." if control != "pausing"
                                else "The agent is finishing its step: you have control in a moment.")
        if self.session is None or not self.size:
            return self._refuse("There is no page picture yet to act on.")
        if "x" in data and not (data["x"] < self.size[0] and data["y"] < self.size[1]):
            return self._refuse(f"({data['x']:g}, {data['y']:g}) is outside the page ({self.size[0]}x{self.size[1]}).")
        try:
            recorded = self._dispatch(kind, data)
        except CdpUnavailable as exc:
            return self._refuse(f"The browser did not take the input: {exc}.")
        if recorded and self.view.get("task"):
            service.record(self.view["task"], recorded)
        return True

    def _dispatch(self, kind, data):
        """The input as CDP Input.* commands built here, field by field; what the trace records of it, or None."""
        send = self.cdp.send
        if kind == "mouse":
            send("Input.dispatchMouseEvent", {
                "type": MOUSE[data["event"]], "x": data["x"], "y": data["y"], "modifiers": data["modifiers"],
                "button": data["button"] if data["event"] != "move" else "none",
                "clickCount": data["clickCount"] if data["event"] != "move" else 0}, session=self.session)
            if data["event"] == "down":
                return f"clicked at ({data['x']:.0f}, {data['y']:.0f})"
            return None
        if kind == "wheel":
            send("Input.dispatchMouseEvent", {"type": "mouseWheel", "x": data["x"], "y": data["y"],
                                              "deltaX": data["deltaX"], "deltaY": data["deltaY"]}, session=self.session)
            return "scrolled"
        if kind == "text":
            send("Input.insertText", {"text": data["text"]}, session=self.session)
            return "typed text"  # never the value: it may be a password or a one-time code
        params = {"key": data["key"], "code": data["code"], "windowsVirtualKeyCode": data["keyCode"],
                  "nativeVirtualKeyCode": data["keyCode"], "modifiers": data["modifiers"]}
        if data["event"] == "down":
            text = KEY_TEXT.get(data["key"])
            params.update({"type": "keyDown", "text": text} if text else {"type": "rawKeyDown"})
        else:
            params["type"] = "keyUp"
        send("Input.dispatchKeyEvent", params, session=self.session)
        return f"pressed {data['key']}" if data["event"] == "down" else None

    def _takeover(self, kind):
        task = self.view.get("task")
        if not task:
            return self._refuse("No agent is running in this browser: it is yours to use as it is.")
        done = service.take(task, self.by) if kind == "take" else service.hand_back(task)
        if not done:
            return self._refuse("The task is no longer running.")
        self._refresh()
        return True

    def _refuse(self, why):
        self.refusals += 1
        if self.refusals > MAX_REFUSALS:
            self.ws.close(reason=1008, message="Too many refused messages.")
            return False
        self._send({"type": "error", "message": why})
        return True
