"""Benchmark: recording a browser run (rrweb, workers/browser/rrweb.py): the 10 actions of bench/browser.py
recorded ÷ not recorded, in the worker's own Selenium driver (sandboxed, behind the egress proxy), and the size."""
import gzip
import json
import os
import shutil
import tempfile
import time

from bench import common
from bench.browser import PageServer, descendants, median
from bench.common import Row

SECTION = "6 recording"
RUNS = common.scaled(5, 2)  # interleaved runs with and without recording (medians)
PACE = common.scaled(2.0, 0.5)  # seconds between actions in the size-per-minute run: a model's step


def actions(browser, base):
    """bench/browser.py's 10 actions, as the agent's browser calls them."""
    return [lambda: browser.open(f"{base}/start"), lambda: browser.extract("h1"), lambda: browser.click("Form"),
            lambda: browser.type("Name", "Ada"), lambda: browser.select("Color", "blue"),
            lambda: browser.scroll("down"), lambda: browser.click("Save"), lambda: browser.extract("h1"),
            browser.back, lambda: browser.click("Table")]


def run(config, proxy, base, record, pace=0.0):
    """One browser, 10 actions, each followed by the page view the agent reads (and, recording, as the environment
    does: a marker as each starts, the page's events taken in each page view's call). Returns (actions s, this
    process's CPU s, the browser's CPU s (chromedriver, Chromium and its renderers, where rrweb runs), recording
    bytes gzip, wall s)."""
    from workers.browser.egress import HARDENING_ARGUMENTS
    from workers.browser.rrweb import Recording
    from workers.browser.selenium_driver import SeleniumBrowser

    root = tempfile.mkdtemp(prefix="rd-bench-rec-")
    browser = SeleniumBrowser(label="bench-recording", proxy=proxy.address, extra_arguments=HARDENING_ARGUMENTS,
                              profile_root=root, chromium_path=config["CHROMIUM_PATH"],
                              chromedriver_path=config["CHROMEDRIVER_PATH"])
    try:
        recording = Recording(browser, config, 600) if record else None
        if recording is not None:
            recording.blank = True  # a new browser's first page, as a task's environment says
        group = browser.service.process.pid
        cpu, browser_cpu = time.process_time(), common.cpu_seconds(descendants(group))
        began, acting = time.monotonic(), 0.0
        for step, action in enumerate(actions(browser, base)):
            started = time.monotonic()
            if recording is not None:
                recording.mark({"step": step, "action": "bench"})
            action()
            reading = browser.read(max_chars=int(config.get("PAGE_VIEW_CHARS", 6000)),
                                   drain=recording.rider() if recording is not None else None)
            if recording is not None:
                recording.take(reading.recorded)
            acting += time.monotonic() - started
            time.sleep(pace)
        size = None
        if recording is not None:
            events = recording.finish()
            size = len(gzip.compress(json.dumps(events, separators=(",", ":")).encode(), compresslevel=6))
        browser_cpu = common.cpu_seconds(descendants(group)) - browser_cpu
        return acting, time.process_time() - cpu, browser_cpu, size, time.monotonic() - began
    finally:
        browser.close()
        shutil.rmtree(root, ignore_errors=True)


def measure(stack):
    from app.egress.proxy import EgressProxy
    from workers.browser.rrweb import available

    config = stack.flask_app.config
    if why := available(config):
        return [common.not_present(SECTION, "recording a 10-action run", why)]
    if not os.access(config["CHROMIUM_PATH"], os.X_OK):
        return [common.not_present(SECTION, "recording a 10-action run", "no Chromium (make browser)")]
    pages = PageServer()
    proxy = EgressProxy(config, "bench-recording").start()
    try:
        proxy.wait_ready()
        run(config, proxy, pages.base, True)  # warm-up (disk cache, fonts)
        plain, recorded = [], []
        for _ in range(RUNS):  # interleaved, so both see the same machine load
            plain.append(run(config, proxy, pages.base, False))
            recorded.append(run(config, proxy, pages.base, True))
        paced = run(config, proxy, pages.base, True, pace=PACE)
    finally:
        proxy.stop()
        pages.close()
    return [
        Row(SECTION, "10 actions + page views, recorded (s)", median(r[0] for r in recorded),
            "the same, not recorded", median(p[0] for p in plain)),
        Row(SECTION, "driver-side CPU of the 10 actions, recorded (s)", median(r[1] for r in recorded),
            "the same, not recorded", median(p[1] for p in plain), "this process: Selenium calls, events parsed"),
        Row(SECTION, "browser CPU of the 10 actions, recorded (s)", median(r[2] for r in recorded),
            "the same, not recorded", median(p[2] for p in plain), "chromedriver + Chromium; rrweb runs here"),
        Row(SECTION, "recording of the 10 actions, gzip (KiB)", median(r[3] for r in recorded) / 1024),
        Row(SECTION, f"recording size per minute, one action per {PACE:g} s (KiB/min)",
            paced[3] / 1024 / (paced[4] / 60), note=f"{paced[3] / 1024:.0f} KiB in {paced[4]:.0f} s"),
    ]


if __name__ == "__main__":
    common.main(measure)
