"""Benchmark: the client-mode window channel. Command issued by the worker → received by the extension's long
poll, and result posted → worker woken, beside a bare NOTIFY → LISTEN; then the same through the real extension
in headless Chromium (one action's round trip), and a 10-action task in `client` ÷ `cloud_browser`."""
import threading
import time

from bench import common
from bench.latency import notify_latencies

SAMPLES = common.scaled(100, 15)
SECTION = "8 client-mode channel"
NOTIFY_BASELINE = "bare Postgres NOTIFY → LISTEN"


def measure(stack):
    web = stack.web
    http = common.http()
    headers = {"x-api-key": stack.api_key}
    window_id = http.post(f"{web.url}/fast/v2/browser-windows", json={"label": "bench"}, headers=headers,
                          timeout=10).json()["browserWindowId"]
    received_ms, woken_ms = channel_latencies(stack, web.url, window_id, headers)
    notify_ms = notify_latencies()
    rows = common.latency_rows(SECTION, "command issued → received by the poll", received_ms, NOTIFY_BASELINE,
                               notify_ms)
    rows += common.latency_rows(SECTION, "result posted → worker woken", woken_ms, NOTIFY_BASELINE, notify_ms)
    rows += browser_rows(stack, received_ms, woken_ms)
    return rows


def channel_latencies(stack, base, window_id, headers):
    """An extension stand-in (the same HTTP calls as extension/background.js) polls while this process, like the
    worker's extension driver, sends commands with `app.windows.service.send_command` and waits for results."""
    from app.extensions import db
    from app.windows.service import send_command

    issued, received, posted = {}, {}, {}
    stop = threading.Event()

    def extension():
        http = common.http()
        while not stop.is_set():
            answer = http.post(f"{base}/fast/v2/browser-windows/poll", json={"browserWindowIds": [window_id],
                               "wait": 5}, headers=headers, timeout=30).json()
            for command in answer["commands"]:
                received[command["args"]["n"]] = time.time()
                posted[command["args"]["n"]] = time.time()
                http.post(f"{base}/fast/v2/browser-windows/commands/{command['commandId']}/result",
                          json={"status": "success", "data": {"url": "about:blank", "n": command["args"]["n"]}},
                          headers=headers, timeout=30)

    thread = threading.Thread(target=extension, daemon=True)
    thread.start()
    time.sleep(0.5)  # the first poll is waiting
    received_ms, woken_ms = [], []
    for n in range(SAMPLES):
        # Each command in a transaction of its own: its expiry counts from now, not from an old transaction's start.
        db.session.remove()
        issued[n] = time.time()
        send_command(window_id, "get_url", {"n": n}, timeout=30)
        woken = time.time()
        received_ms.append((received[n] - issued[n]) * 1000)
        woken_ms.append((woken - posted[n]) * 1000)
        time.sleep(0.02)  # the stand-in is back in its poll
    stop.set()
    return received_ms, woken_ms


def browser_rows(stack, received_ms, woken_ms):
    """The real extension: one extension action's round trip, and a 10-action task in each browser mode."""
    try:
        from tests.extension_support import ExtensionBrowser, action, wait_for_window
        from tests.page_server import PageServer
    except ImportError as exc:  # the bench needs the test helpers and Selenium
        return [common.not_present(SECTION, "extension round trip", str(exc))]
    pages = PageServer({"/p": "<html><head><title>P</title></head><body><input aria-label='Name'>"
                              "<button onclick=\"document.querySelector('h1').textContent='clicked'\">Go</button><h1>Page</h1></body></html>"})
    chromium = ExtensionBrowser()
    try:
        chromium.configure(stack.web.url, stack.api_key)
        window_id = wait_for_window(stack.web.url, stack.api_key)
        action(stack.web.url, stack.api_key, window_id, "go_to_url", url=pages.url("/p"), new_tab=False)
        round_trips = []
        for _ in range(common.scaled(50, 10)):
            started = time.time()
            assert action(stack.web.url, stack.api_key, window_id, "get_url").json()["status"] == "success"
            round_trips.append((time.time() - started) * 1000)
        stand_in = [r + w for r, w in zip(received_ms, woken_ms)]
        rows = common.latency_rows(SECTION, "extension action get_url round trip (real extension)", round_trips,
                                   "channel alone (stand-in: received + woken)", stand_in)
        steps = "\n".join(["/Operator", f"go to {pages.url('/p')}"] + ['type "x" into "Name"', 'click "Go"',
                                                                          "extract h1"] * 3)
        stack.tasks_worker
        durations = {}
        for mode in ("cloud_browser", "client"):
            body = {"prompt": steps, "executionMode": mode, **({"browserWindowId": window_id} if mode == "client" else {})}
            samples = []
            for _ in range(common.scaled(3, 1)):
                import json

                request_id = stack.submit(json.dumps(body)).json()["requestId"]
                stack.wait_finished([request_id], 120)
                (seconds,), = stack.sql("SELECT extract(epoch FROM completed_at - started_at) FROM tasks "
                                        "WHERE id = :id AND status = 'success'", id=request_id) or [(None,)]
                if seconds is not None:
                    samples.append(float(seconds) * 1000)
            durations[mode] = sorted(samples)[len(samples) // 2] if samples else None
        rows.append(common.Row(SECTION, "10-action task in client mode (ms, median)", durations["client"],
                               "the same task in cloud_browser", durations["cloud_browser"]))
        return rows
    finally:
        chromium.quit()
        pages.close()


if __name__ == "__main__":
    common.main(measure)
