"""The live view under attack (issue 43): another key's viewers, hostile messages, expired tokens and revoked keys,
control that arrives inside a long step, and input that must reach the page only, never the browser's own
shortcuts nor a kept session's last tab. Real gunicorn, worker, Chromium and CDP relay."""
import json
import time
from datetime import datetime

import pytest
import requests
import websocket
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait
from sqlalchemy import func, update

from app.crypto import hash_key
from app.extensions import db
from app.live import service as live_service
from app.models import ApiKey
from tests.conftest import make_key, poll, submit, wait_for_status, wait_until
from tests.test_hostile_cdp import RawCdp, refused
from tests.test_live import (  # noqa: F401 (module fixtures)
    BROWSER, BUTTON, FIELD, Viewer, chromium, frame_image, live_url, model, pages, running, stack, waits)

pytestmark = [pytest.mark.slow, pytest.mark.alone]
CTRL, ALT = 2, 1
CTRL_T = {"type": "key", "event": "down", "key": "t", "code": "KeyT", "keyCode": 84, "modifiers": CTRL}
CTRL_W = {"type": "key", "event": "down", "key": "w", "code": "KeyW", "keyCode": 87, "modifiers": CTRL}
ALT_HOME = {"type": "key", "event": "down", "key": "Home", "code": "Home", "keyCode": 36, "modifiers": ALT}


def task_viewer(client, stack, key, pages, mode="control", steps=60):
    prompt = "\n".join(["/Operator", f"go to {pages.url('/form')}", *waits(steps), "answer done"])
    request_id = submit(client, key, {**BROWSER, "prompt": prompt}).get_json()["requestId"]
    running(client, key, request_id)
    reply = live_url(stack, key, f"remote-dispatch/responses/{request_id}", mode)
    assert reply.status_code == 200, reply.text
    return request_id, reply.json()["liveUrl"]


def cancel(client, key, request_id):
    client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/cancel", headers={"x-api-key": key})


def socket_url(live):
    return live.replace("http", "ws", 1) + "/socket"


def test_another_keys_viewers_leave_the_owners_control_socket_alone(client, api_key, pages, stack):
    flooder = make_key("flooder")
    session = client.post("/fast/v2/cloud-browser/create-and-initialize-cloud-browser-session", json={},
                          headers={"x-api-key": flooder}).get_json()["session_id"]
    theirs = live_url(stack, flooder, f"cloud-browser/sessions/{session}").json()["liveUrl"]
    request_id, mine = task_viewer(client, stack, api_key, pages)
    flood, statuses = [], []
    try:
        for _ in range(40):  # more than LIVE_MAX_VIEWERS (16) in each of the two web processes: all of it before
            try:
                flood.append(websocket.create_connection(socket_url(theirs), timeout=10))
            except websocket.WebSocketBadStatusException as exc:
                statuses.append((exc.status_code, json.loads(exc.resp_body)))
        watcher, controller = Viewer(live_url(stack, api_key, f"remote-dispatch/responses/{request_id}").json()
                                     ["liveUrl"]), Viewer(mine)
        try:
            wait_until(lambda: watcher.of("frame") and controller.of("frame"), what="the owner's frames")
            controller.send({"type": "take"})
            wait_until(lambda: controller.control() == "person", what="the owner's control", timeout=30)
            controller.send({"type": "handback"})
        finally:
            watcher.close()
            controller.close()
        # The flooding key got its own share, and was told why it got no more.
        assert flood and len(statuses) == 40 - len(flood)
        status, body = statuses[0]
        assert status == 429 and body["error"] == "Too Many Live Viewers" and "already has" in body["message"]
    finally:
        for ws in flood:
            ws.close()
        cancel(client, api_key, request_id)


def test_hostile_messages_get_a_close_code(client, api_key, pages, stack):
    request_id, live = task_viewer(client, stack, api_key, pages)
    try:
        nested = Viewer(live)
        wait_until(lambda: nested.of("state"), what="the viewer's first state")
        nested.send('{"type": "mouse", "x": ' + "[" * 1400 + "]" * 1400 + "}")  # about 3 KB
        assert wait_until(lambda: nested.closed, what="the nested message to close the socket") == 1007
        flooder = Viewer(live)
        flooder.send({"type": "take"})
        wait_until(lambda: flooder.control() == "person" and flooder.of("frame"), what="control", timeout=30)
        for _ in range(600):  # as fast as the socket takes them: far more than LIVE_INPUT_PER_SECOND (100)
            try:
                flooder.send({"type": "wheel", "x": 10, "y": 10, "deltaY": 5})
            except (websocket.WebSocketException, OSError):
                break
        # Closed (1008; a reset if it outran the close frame), not worked through for minutes.
        assert wait_until(lambda: flooder.closed, what="the flood to close the socket") in (1008, -1)
        assert any("Too many messages" in m["message"] for m in flooder.of("error")) or flooder.closed == -1
        # The server and the task go on.
        assert poll(client, api_key, request_id).get_json()["status"] == "pending"
    finally:
        cancel(client, api_key, request_id)


def test_a_socket_closes_when_its_token_expires_and_when_its_key_is_revoked(app, client, pages, stack):
    key = make_key("short-lived")
    request_id, live = task_viewer(client, stack, key, pages, mode="view")
    token = live.rsplit("/", 1)[1]
    with app.app_context():
        soon = live_service._signer().dumps({**live_service.claims(token), "x": int(time.time()) + 4})
    expiring, revoked = Viewer(live.rsplit("/", 1)[0] + "/" + soon), Viewer(live)
    try:
        wait_until(lambda: expiring.of("frame") and revoked.of("frame"), what="both viewers' frames")
        assert wait_until(lambda: expiring.closed, what="the expired token's socket to close", timeout=30) == 1008
        assert "expired" in expiring.of("ended")[-1]["message"]
        assert not revoked.closed
        with app.app_context():
            db.session.execute(update(ApiKey).where(ApiKey.key_hash == hash_key(key)).values(revoked_at=func.now()))
            db.session.commit()
        assert wait_until(lambda: revoked.closed, what="the revoked key's socket to close", timeout=30) == 1008
        assert "revoked" in revoked.of("ended")[-1]["message"]
    finally:
        expiring.close()
        revoked.close()
    with app.app_context():
        db.session.execute(update(ApiKey).where(ApiKey.key_hash == hash_key(key)).values(revoked_at=None))
        db.session.commit()
    cancel(client, key, request_id)


def test_take_control_during_a_long_wait_pauses_it_at_once_and_the_wait_goes_on(client, api_key, pages, stack,
                                                                                  chromium):
    prompt = "\n".join(["/Operator", f"go to {pages.url('/form')}", "wait 30", "extract #greeting"])
    request_id = submit(client, api_key, {**BROWSER, "prompt": prompt}).get_json()["requestId"]
    running(client, api_key, request_id)

    def in_the_wait():
        trace = (poll(client, api_key, request_id).get_json().get("progress") or {}).get("actionTrace")
        return bool(trace) and trace[-1].get("running") and trace[-1]["action"].startswith("wait 30")

    wait_until(in_the_wait, what="the agent to be in its 30 s wait", timeout=60)
    live = live_url(stack, api_key, f"remote-dispatch/responses/{request_id}", "control").json()["liveUrl"]
    # The viewer page: a click while the agent drives is not sent, and the page says so.
    chromium.get(live)
    box = chromium.find_element(By.CSS_SELECTOR, ".live")
    WebDriverWait(chromium, 30, poll_frequency=0.1).until(
        lambda d: int(box.get_attribute("data-frames")) > 0 and box.get_attribute("data-control") == "agent")
    chromium.find_element(By.CSS_SELECTOR, ".live-frame").click()
    assert chromium.find_element(By.CSS_SELECTOR, ".live-note").text == "Not sent: take control first."
    viewer = Viewer(live)
    try:
        wait_until(lambda: viewer.of("frame"), what="a frame")
        viewer.send({"type": "take"})
        wait_until(lambda: viewer.control() == "person", what="control during the wait", timeout=10)
        assert in_the_wait()  # well before the 30 s wait ended: it is paused in the middle
        viewer.click(FIELD)
        viewer.send({"type": "text", "text": "ada"})
        frames = len(viewer.of("frame"))
        viewer.click(BUTTON)
        wait_until(lambda: len(viewer.of("frame")) > frames, what="a frame of the changed page")
        viewer.send({"type": "handback"})
        done = wait_for_status(client, api_key, request_id, timeout=120)
    finally:
        viewer.close()
    assert done["status"] == "success", done
    assert done["response"]["text"] == "Thanks ada"
    trace = done["response"]["actionTrace"]
    wait = next(e for e in trace if e["action"].startswith("wait 30"))
    held = next(e for e in trace if "takeover" in e)
    assert "paused" in wait["result"] and "then went on" in wait["result"]
    stamp = datetime.fromisoformat
    # The person's control sits inside the wait, and the wait went on after the hand-back.
    assert stamp(wait["startTs"]) < stamp(held["startTs"]) <= stamp(held["endTs"]) < stamp(wait["endTs"])
    assert [e["action"] for e in trace if e.get("by") == "alice"][0].startswith("alice: clicked at")


def test_browser_shortcuts_and_the_last_tab_are_out_of_reach(client, pages, stack):
    key = make_key("shortcuts", plan="pro")
    # Through the web process: the CDP URL it hands out names it (any web process relays a session's CDP).
    created = requests.post(stack.base + "/fast/v2/cloud-browser/create-cloud-browser-session", json={},
                            headers={"x-api-key": key}, timeout=120).json()
    session = created["session_id"]
    cdp = RawCdp(created["cdp_websocket_url"], created["cdp_auth_headers"])
    viewer = Viewer(live_url(stack, key, f"cloud-browser/sessions/{session}", "control").json()["liveUrl"])

    def pages_open():
        return [t for t in cdp.send("Target.getTargets")["result"]["targetInfos"] if t["type"] == "page"]

    try:
        first = pages_open()
        assert len(first) == 1
        page = cdp.send("Target.attachToTarget", {"targetId": first[0]["targetId"], "flatten": True})["result"][
            "sessionId"]
        cdp.send("Page.navigate", {"url": pages.url("/form")}, session=page)
        wait_until(lambda: viewer.of("frame") and viewer.control() == "idle", what="the session's picture")
        for message, words in ((CTRL_T, "Ctrl+T"), (CTRL_W, "Ctrl+W"), (ALT_HOME, "Alt+Home")):
            assert words in viewer.error_after(message) and "browser's own shortcuts" in viewer.of("error")[-1]["message"]
        for params, words in ((CTRL_T, "Ctrl+T"), (ALT_HOME, "Alt+Home"),
                              ({**CTRL_T, "key": "i", "code": "KeyI", "keyCode": 73, "modifiers": CTRL | 8},
                               "Ctrl+Shift+I")):
            refused(cdp.send("Input.dispatchKeyEvent", {
                "type": "rawKeyDown", "key": params["key"], "code": params["code"],
                "windowsVirtualKeyCode": params["keyCode"], "modifiers": params["modifiers"]}, session=page),
                "Input.dispatchKeyEvent", words)
        refused(cdp.send("Target.closeTarget", {"targetId": first[0]["targetId"]}), "last tab")
        refused(cdp.send("Page.close", session=page), "last tab")
        # What a person types still reaches the page, and the page is still the one it was.
        viewer.click(FIELD)
        viewer.send({"type": "text", "text": "kim"})
        viewer.click(BUTTON)
        wait_until(lambda: "Thanks kim" in str(cdp.send("Runtime.evaluate", {
            "expression": "document.body.innerText", "returnByValue": True}, session=page)), what="the typed text")
        assert [p["url"] for p in pages_open()] == [pages.url("/form")]
        # With a second tab, closing one is fine.
        second = cdp.send("Target.createTarget", {"url": "about:blank"})["result"]["targetId"]
        assert "error" not in cdp.send("Target.closeTarget", {"targetId": second})
    finally:
        viewer.close()
        cdp.close()
        client.post("/fast/v2/cloud-browser/stop-cloud-browser-session", json={"session_id": session},
                    headers={"x-api-key": key})


def test_a_viewer_of_a_page_that_stopped_painting_gets_its_picture(client, pages, stack):
    """Chromium's screencast sends a frame at the page's next repaint: a viewer opened on a page that has finished
    painting (a kept session's tab, left as it is) still gets the page's picture, and can act on it."""
    key = make_key("still", plan="pro")
    created = requests.post(stack.base + "/fast/v2/cloud-browser/create-cloud-browser-session", json={},
                            headers={"x-api-key": key}, timeout=120).json()
    session = created["session_id"]
    cdp = RawCdp(created["cdp_websocket_url"], created["cdp_auth_headers"])
    viewer = None
    try:
        tab = [t for t in cdp.send("Target.getTargets")["result"]["targetInfos"] if t["type"] == "page"][0]
        page = cdp.send("Target.attachToTarget", {"targetId": tab["targetId"], "flatten": True})["result"]["sessionId"]
        cdp.send("Page.navigate", {"url": pages.url("/form")}, session=page)
        # Loaded, and two animation frames later painted: nothing on the form moves after this.
        painted = "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(document.readyState))))"
        wait_until(lambda: cdp.send("Runtime.evaluate", {"expression": painted, "awaitPromise": True,
                                                         "returnByValue": True}, session=page)
                   .get("result", {}).get("result", {}).get("value") == "complete", what="the form painted")
        viewer = Viewer(live_url(stack, key, f"cloud-browser/sessions/{session}", "control").json()["liveUrl"])
        wait_until(lambda: viewer.of("frame") and viewer.control() == "idle", what="the still page's picture")
        frame = viewer.of("frame")[0]
        assert frame["width"] > 0 and frame["height"] > 0 and frame_image(frame).size[0] > 0
        viewer.click(FIELD)
        viewer.send({"type": "text", "text": "lee"})
        viewer.click(BUTTON)
        wait_until(lambda: "Thanks lee" in str(cdp.send("Runtime.evaluate", {
            "expression": "document.body.innerText", "returnByValue": True}, session=page)), what="the typed text")
    finally:
        if viewer is not None:
            viewer.close()
        cdp.close()
        client.post("/fast/v2/cloud-browser/stop-cloud-browser-session", json={"session_id": session},
                    headers={"x-api-key": key})
