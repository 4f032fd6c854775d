"""One viewer's WebSocket: the page's screencast goes out, validated input events come in, never CDP."""
import json
import logging
import threading
import time

from marshmallow import ValidationError

from ..sessions.cdp_policy import shortcut_refusal
from . import service
from .cdp import Cdp, CdpUnavailable
from .schemas import VIEWER_MESSAGES

log = logging.getLogger(__name__)
REFRESH_SECONDS = 0.25  # how often the viewer re-reads what it watches (task row, the worker's live file)
MAX_MESSAGE_BYTES = 4096  # a bigger viewer message closes the connection (1009)
MAX_REFUSALS = 50  # refused messages before the viewer is closed (1008)
INPUT_COST_BYTES = 256  # a message counts once per this many bytes against LIVE_INPUT_PER_SECOND (a long text more)
MOUSE = {"down": "mousePressed", "up": "mouseReleased", "move": "mouseMoved"}
# Keys whose keyDown must carry text for the page to see a keypress (Enter submits a form).
KEY_TEXT = {"Enter": "\r", "Tab": "\t"}
SCREENCAST = {"format": "jpeg", "quality": 70, "everyNthFrame": 1}
MAX_FPS = 25  # enough to follow a person's hand; more costs the browser's CPU (a watched task's steps slow down)
# Chromium's screencast sends a tab's first frame at its next repaint, not when the screencast starts: a viewer that
# attaches to a page that has finished painting (a kept session's tab, a page waiting for its person; on a busy
# machine any page may be done before the viewer attaches) would see nothing until something on it moves. When no
# frame came this long after attaching, a screenshot of the tab is sent as the first frame (and tried again each
# STILL_PICTURE_SECONDS while none comes).
STILL_PICTURE_SECONDS = 1.0


class Viewer:
    """Serves one WebSocket (simple_websocket.Server) for the claims of a live token, until either side ends."""

    def __init__(self, ws, found, config):
        self.ws, self.found = ws, found
        self.rate = int(config["LIVE_INPUT_PER_SECOND"])
        self.allowance, self.counted = 2.0 * self.rate, time.monotonic()  # a token bucket: twice the rate at most
        self.told_rate = 0.0  # when the viewer was last told it went over the rate
        self.control = found["m"] == "control"
        self.by = found.get("n") or "a person"
        self._send_lock = threading.Lock()
        self.cdp = self.endpoint = self.session = self.target = None
        self.size = None  # (width, height) in CSS px of the page, from the latest frame
        self.page_url = None  # the watched tab's URL as the browser reports it (a person's navigation too)
        self.view, self.shown = {}, None
        self.refusals = 0
        self.frames, self.acked = 0, 0.0
        self.frames_before, self.still_due = 0, None  # (_still_picture)

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
        """False once the socket must close: what it watches has ended, its token expired or its key was revoked
        (each checked here, while the socket is open, not only when it opened)."""
        if self.found.get("x", 0) < time.time():
            view = {"alive": False, "why": service.EXPIRED, "code": 1008}
        else:
            view = service.watched(self.found)
        self.view = view
        if not view["alive"]:
            self._send({"type": "ended", "message": view["why"]})
            self.ws.close(reason=view.get("code", 1000), message=view["why"])
            return False
        problem = self._follow(view)
        if problem is None:
            self._still_picture()
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
            # Paused (between steps, or inside one at a safe point), or loading a page: the agent sends no input.
            return "person" if view.get("paused") or view.get("loading") else "pausing"
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
                self.cdp, self.endpoint = self._connect(view), endpoint
                self.cdp.send("Target.setDiscoverTargets", {"discover": True})  # URL changes of the watched tab
            target = view.get("targetId") or self.target or self._first_page()
            if target != self.target or self.session is None:
                self._attach(target)
        except CdpUnavailable as exc:
            self.cdp = None
            return f"The browser cannot be reached from here: {exc}."
        return None

    def _connect(self, view):
        """A Grid's browser directly (its se:cdp URL); one of ours through its machine's stream endpoint."""
        if not view["endpoint"].startswith("unix:"):
            return Cdp(view["endpoint"], self._event)
        url, token = service.stream_of(view)
        return Cdp(url, self._event, token)

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
        self.frames_before, self.still_due = self.frames, time.monotonic() + STILL_PICTURE_SECONDS
        self.cdp.send("Page.startScreencast", SCREENCAST, session=session)

    def _still_picture(self):
        """The attached tab's screenshot as its first frame when the screencast sent none (STILL_PICTURE_SECONDS)."""
        if self.still_due is None or time.monotonic() < self.still_due or self.session is None:
            return
        if self.frames > self.frames_before:  # the screencast's own frames came
            self.still_due = None
            return
        session = self.session
        self.still_due = time.monotonic() + STILL_PICTURE_SECONDS
        try:
            shot = self.cdp.call("Page.captureScreenshot", {"format": SCREENCAST["format"],
                                                            "quality": SCREENCAST["quality"]}, session=session)
            viewport = self.cdp.call("Page.getLayoutMetrics", session=session)["cssVisualViewport"]
        except (CdpUnavailable, KeyError):
            return  # tried again at the next refresh after still_due
        if session != self.session or self.frames > self.frames_before:
            return  # another tab by now, or the screencast's frame came meanwhile
        self.still_due = None
        self.size = (viewport["clientWidth"], viewport["clientHeight"])
        self._send({"type": "frame", "data": shot.get("data", ""), "width": self.size[0], "height": self.size[1],
                    "timestamp": time.time()})
        self.frames += 1

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
        if len(getattr(self.ws, "input_buffer", ())) > self.rate:
            # More than a second's worth already waits behind this one (simple_websocket reads ahead without
            # bound): a flood, which would keep the page busy long after it stopped. Closed, not worked through.
            self._send({"type": "error", "message": f"Too many messages: at most {self.rate} a second."})
            self.ws.close(reason=1008, message="Too many messages.")
            return False
        if not self._within_rate(len(message)):
            # Not sent, and said so at most once a second (a fast hand is not a hostile one: not counted either).
            if time.monotonic() - self.told_rate >= 1:
                self.told_rate = time.monotonic()
                self._send({"type": "error", "message": f"Too many messages: at most {self.rate} a second (some "
                                                        "were not sent)."})
            return True
        if isinstance(message, (bytes, bytearray)):
            return self._refuse("Binary messages are refused: send JSON text.")
        try:
            data = json.loads(message)
        except RecursionError:  # a viewer message is one flat object: deep nesting is not one
            self.ws.close(reason=1007, message="The message nests too deeply.")
            return False
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
            return self._refuse("Not sent: the agent is driving; take control first." if control != "pausing"
                                else "Not sent: the agent is pausing; you have control in a moment.")
        if self.session is None or not self.size:
            return self._refuse("There is no page picture yet to act on.")
        if "x" in data and not (data["x"] < self.size[0] and data["y"] < self.size[1]):
            return self._refuse(f"({data['x']:g}, {data['y']:g}) is outside the page ({self.size[0]}x{self.size[1]}).")
        try:
            recorded = self._dispatch(kind, data)
        except CdpUnavailable as exc:
            return self._refuse(f"The browser did not take the input: {exc}.")
        except Shortcut as exc:
            return self._refuse(str(exc))
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
        refusal = shortcut_refusal(params)
        if refusal:
            raise Shortcut(f"Not sent: {refusal}.")
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

    def _within_rate(self, size):
        """A token bucket of LIVE_INPUT_PER_SECOND: every message costs one per INPUT_COST_BYTES begun."""
        now = time.monotonic()
        self.allowance = min(2.0 * self.rate, self.allowance + (now - self.counted) * self.rate)
        self.counted = now
        cost = 1 + size // INPUT_COST_BYTES
        if self.allowance < cost:
            return False
        self.allowance -= cost
        return True

    def _refuse(self, why):
        self.refusals += 1
        if self.refusals > MAX_REFUSALS:
            self.ws.close(reason=1008, message="Too many refused messages.")
            return False
        self._send({"type": "error", "message": why})
        return True


class Shortcut(Exception):
    """A key of the browser's own (app/sessions/cdp_policy.py): refused, never sent."""
