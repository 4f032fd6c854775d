"""The CDP relay against a scripted browser: what reaches the browser is what was checked, and refusals never split a reply."""
import asyncio
import base64
import hashlib
import json
import threading
import time

import pytest
import websocket
from wsproto.connection import Connection, ConnectionType
from wsproto.events import TextMessage

from app.sessions.cdp_proxy import WS_GUID, Proxy
from app.sessions.cdp_side_panel import ORIGIN

TOKEN = "relay-test-token"
TARGETS = {"page": {"targetId": "page", "type": "page", "url": "https://example.test/"},
           "omnibox": {"targetId": "omnibox", "type": "browser_ui", "url": "chrome://omnibox-popup.top-chrome/"},
           "settings": {"targetId": "settings", "type": "page", "url": "chrome://settings/"},
           "extension": {"targetId": "extension", "type": "service_worker", "url": "chrome-extension://abc/sw.js"}}
SMALL_REPLIES = {"Target.getTargetInfo": lambda params: {"targetInfo": TARGETS.get(params.get("targetId"))},
                 "Page.printToPDF": lambda params: {"data": "", "stream": "pdf-17"},
                 "IO.read": lambda params: {"data": "%PDF", "eof": True}}


class ScriptedBrowser:
    """A DevTools WebSocket endpoint that records the commands it gets and answers each one in three
    fragments, the last sent a moment later (so a refusal of the relay could land in between)."""

    def __init__(self, loop):
        self.received = []
        self.loop = loop
        self.resets = 0  # reloads of the side panel the relay shows (the session's tasks cancelled)

    async def reset(self):
        self.resets += 1

    async def handle(self, reader, writer):
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        if head.startswith("GET /json/version"):  # the relay asks where the browser endpoint is
            body = json.dumps({"webSocketDebuggerUrl": "ws://127.0.0.1/devtools/browser/abc"}).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            return await writer.drain()
        key = next(line.split(":", 1)[1].strip() for line in head.split("\r\n")
                   if line.lower().startswith("sec-websocket-key:"))
        accept = base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()
        writer.write(f"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     f"Sec-WebSocket-Accept: {accept}\r\n\r\n".encode())
        ws = Connection(ConnectionType.SERVER)
        while data := await reader.read(65536):
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, TextMessage):
                    command = json.loads(event.data)
                    self.received.append(command)
                    if command["method"] in SMALL_REPLIES:  # answered at once, in one frame, as Chromium does
                        result = SMALL_REPLIES[command["method"]](command.get("params") or {})
                        writer.write(ws.send(TextMessage(data=json.dumps({"id": command["id"], "result": result}))))
                        await writer.drain()
                        continue
                    reply = json.dumps({"id": command["id"], "result": {"echo": "x" * 300_000}})
                    third = len(reply) // 3
                    writer.write(ws.send(TextMessage(data=reply[:third], message_finished=False)))
                    writer.write(ws.send(TextMessage(data=reply[third:2 * third], message_finished=False)))
                    await writer.drain()
                    await asyncio.sleep(0.5)
                    writer.write(ws.send(TextMessage(data=reply[2 * third:], message_finished=True)))
                    await writer.drain()


@pytest.fixture
def relay(tmp_path):
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    browser = ScriptedBrowser(loop)

    async def start():
        upstream = await asyncio.start_server(browser.handle, "127.0.0.1", 0)
        proxy = Proxy(f"127.0.0.1:{upstream.sockets[0].getsockname()[1]}", hashlib.sha256(TOKEN.encode()).hexdigest(),
                      "/devtools/", str(tmp_path / "downloads"), side_panel=("window-1", browser.reset))
        front = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
        return upstream, front

    upstream, front = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    url = f"ws://127.0.0.1:{front.sockets[0].getsockname()[1]}/devtools/browser/abc"
    yield url, browser, tmp_path / "downloads"
    async def stop():
        for server in (upstream, front):
            server.close()
        for task in asyncio.all_tasks() - {asyncio.current_task()}:
            task.cancel()

    asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)
    loop.close()


def test_commands_reach_the_browser_as_checked_and_refusals_wait_for_whole_replies(relay):
    url, browser, downloads = relay
    ws = websocket.create_connection(url, header=[f"Authorization: Bearer {TOKEN}"], timeout=30)
    try:
        ws.send(json.dumps({"id": 1, "method": "Browser.setDownloadBehavior",
                            "params": {"behavior": "allow", "downloadPath": "/usr/lib/python3/site-packages"}}))
        time.sleep(0.25)  # the browser is now between the fragments of its reply (on a slow machine, maybe not yet)
        ws.send(json.dumps({"id": 2, "method": "SystemInfo.getInfo", "sessionId": "S1"}))
        ws.send('{"id": 3, "method": "Runtime.evaluate", "params": {"expression": NaN}}')
        replies = [json.loads(ws.recv()) for _ in range(3)]  # a reply split by ours would fail to parse here
    finally:
        ws.close()
    by_id = {reply["id"]: reply for reply in replies}
    assert len(by_id[1]["result"]["echo"]) == 300_000
    assert by_id[2]["sessionId"] == "S1"
    assert by_id[2]["error"] == {"code": -32000, "message": "SystemInfo.getInfo is refused by Remote Dispatch: it "
                                                            "describes the server machine, not the session"}
    assert "not valid JSON" in by_id[None]["error"]["message"]
    # Only the checked command reached the browser, its download path rewritten into the session's folder.
    assert browser.received == [{"id": 1, "method": "Browser.setDownloadBehavior",
                                 "params": {"behavior": "allow", "downloadPath": str(downloads)}}]


def test_without_the_credential_nothing_is_relayed(relay):
    url, browser, _ = relay
    for headers in ([], ["Authorization: Bearer wrong"], ["Authorization: Basic " + TOKEN]):
        with pytest.raises(websocket.WebSocketBadStatusException) as refused:
            websocket.create_connection(url, header=headers, timeout=10)
        assert refused.value.status_code == 401
    with pytest.raises(websocket.WebSocketBadStatusException) as elsewhere:
        websocket.create_connection(url.replace("/devtools/", "/other/"), header=[f"Authorization: Bearer {TOKEN}"],
                                    timeout=10)
    assert elsewhere.value.status_code == 404
    assert browser.received == []


def test_cdp_reaches_pages_only_and_no_trace_nor_stream_it_was_not_given(relay):
    """The issue's WebUI and tracing attempts: Chromium's own targets are neither attached nor listed, tracing is
    refused, and only streams the browser handed this caller are read."""
    url, browser, _ = relay
    ws = websocket.create_connection(url, header=[f"Authorization: Bearer {TOKEN}"], timeout=30)
    sent = [
        ("Target.attachToTarget", {"targetId": "omnibox", "flatten": True}),
        ("Target.attachToTarget", {"targetId": "settings", "flatten": True}),
        ("Target.activateTarget", {"targetId": "extension"}),
        ("Target.sendMessageToTarget", {"targetId": "omnibox", "message": '{"id":1,"method":"Runtime.evaluate"}'}),
        ("Target.attachToTarget", {"targetId": "gone", "flatten": True}),
        ("Tracing.start", {"transferMode": "ReturnAsStream"}),
        ("Tracing.end", {}),
        ("IO.read", {"handle": "trace-1"}),
        ("Target.attachToTarget", {"targetId": "page", "flatten": True}),
        ("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": True, "flatten": True}),
        ("Target.getTargets", {"filter": [{"type": "page"}]}),
        ("Page.printToPDF", {"transferMode": "ReturnAsStream"}),
        ("IO.read", {"handle": "pdf-17"}),
    ]
    try:
        replies = {}
        for number, (method, params) in enumerate(sent, 1):
            ws.send(json.dumps({"id": number, "method": method, "params": params}))
            while number not in replies:
                reply = json.loads(ws.recv())
                replies[reply["id"]] = reply
    finally:
        ws.close()
    errors = {number: replies[number].get("error", {}).get("message", "") for number in replies}
    assert "'browser_ui' targets are the browser's own" in errors[1]
    assert "chrome: pages are the browser's own" in errors[2] and "'service_worker'" not in errors[3]
    assert "chrome-extension: pages are the browser's own" in errors[3] and "browser's own" in errors[4]
    assert "no such target" in errors[5]
    assert "command line" in errors[6] and "command line" in errors[7]
    assert "only a stream this session was given" in errors[8]
    assert not [errors[number] for number in range(9, 14) if errors[number]], [errors[n] for n in range(9, 14)]
    forwarded = [(c["method"], c.get("params")) for c in browser.received if c["method"] != "Target.getTargetInfo"]
    hidden = [{"type": kind, "exclude": True} for kind in ("browser_ui", "other", "background_page", "webview")]
    assert forwarded[0] == ("Target.attachToTarget", {"targetId": "page", "flatten": True})
    assert forwarded[1][0] == "Target.setAutoAttach" and forwarded[1][1]["filter"][:4] == hidden
    assert forwarded[1][1]["filter"][-3:] == [{"type": "browser", "exclude": True}, {"type": "tab", "exclude": True}, {}]
    assert forwarded[2][1]["filter"][:4] == hidden and forwarded[2][1]["filter"][-1] == {"type": "page"}
    assert [method for method, _ in forwarded[3:]] == ["Page.printToPDF", "IO.read"]


def test_the_side_panel_is_shown_to_playwright_only_and_never_reaches_the_browser(relay):
    """The SDK's reset_agent_state() reloads Narada's side panel: the relay shows a page at its URL to a caller that
    auto-attaches as Playwright does, answers its session itself, and a reload resets the session; nothing sent to
    that page reaches the browser, and it does nothing else (no script runs there, it opens nothing)."""
    url, browser, _ = relay
    panel_url = f"{ORIGIN}/sidepanel.html?browserWindowId=window-1"

    def exchange(ws, message):
        """The messages up to the command's reply, the events before it included."""
        ws.send(json.dumps(message))
        received = []
        while not received or received[-1].get("id") != message["id"]:
            received.append(json.loads(ws.recv()))
        return received

    raw = websocket.create_connection(url, header=[f"Authorization: Bearer {TOKEN}"], timeout=30)
    try:  # a caller that does not auto-attach is not shown it
        assert len(exchange(raw, {"id": 1, "method": "Target.getTargetInfo"})) == 1
    finally:
        raw.close()
    ws = websocket.create_connection(url, header=[f"Authorization: Bearer {TOKEN}"], timeout=30)
    try:
        exchange(ws, {"id": 1, "method": "Target.setAutoAttach",
                      "params": {"autoAttach": True, "waitForDebuggerOnStart": True, "flatten": True}})
        attached, info = exchange(ws, {"id": 2, "method": "Target.getTargetInfo"})
        assert attached["method"] == "Target.attachedToTarget" and info["id"] == 2
        assert attached["params"]["targetInfo"]["url"] == panel_url
        panel = attached["params"]["sessionId"]
        (tree,) = exchange(ws, {"id": 3, "method": "Page.getFrameTree", "sessionId": panel})
        assert tree["result"]["frameTree"]["frame"]["url"] == panel_url
        refused = [exchange(ws, {"id": number, "method": method, "params": params, "sessionId": panel})[0]
                   for number, (method, params) in enumerate([
                       ("Runtime.evaluate", {"expression": "1"}), ("Page.navigate", {"url": "https://a.test/"}),
                       ("Page.captureScreenshot", {}), ("Target.createTarget", {"url": "about:blank"})], 4)]
        assert all("only Page.reload is served" in reply["error"]["message"] for reply in refused), refused
        assert browser.resets == 0
        reload = exchange(ws, {"id": 8, "method": "Page.reload", "sessionId": panel})
        assert browser.resets == 1 and reload[0] == {"id": 8, "sessionId": panel, "result": {}}
        events = []
        while "Page.frameStoppedLoading" not in events:
            events.append(json.loads(ws.recv())["method"])
        assert "Page.frameNavigated" in events and "Page.loadEventFired" in events
        assert len(exchange(ws, {"id": 9, "method": "Target.getTargetInfo"})) == 1  # announced once
    finally:
        ws.close()
    assert not [command for command in browser.received if command.get("sessionId") == panel]
    assert [command["method"] for command in browser.received] == [
        "Target.getTargetInfo", "Target.setAutoAttach", "Target.getTargetInfo", "Target.getTargetInfo"]
