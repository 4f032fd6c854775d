"""A run's recording in a Selenium browser: rrweb added to every document of the tab, its events drained between actions."""
import json
import logging
import os
import secrets
import time
from functools import lru_cache

from selenium.common.exceptions import WebDriverException

from app.dispatch.recordings import STEP_TAG

log = logging.getLogger(__name__)
BOOTSTRAP = os.path.join(os.path.dirname(__file__), "recording.js")
MAX_PAGE_EVENTS = 200_000  # events one page holds undrained before it stops recording
CUSTOM_EVENT = 5  # rrweb's event type of a custom event: a step marker (tagged STEP_TAG)


@lru_cache(maxsize=4)
def _sources(rrweb_dir):
    with open(os.path.join(rrweb_dir, "rrweb-record.min.js"), encoding="utf-8") as rrweb, \
            open(BOOTSTRAP, encoding="utf-8") as bootstrap:
        return rrweb.read(), bootstrap.read()


def available(config):
    """Why recordings cannot be made here, or None (they can)."""
    if not config.get("RECORDINGS", True):
        return "RECORDINGS is off"
    if not os.path.isfile(os.path.join(config["RRWEB_DIR"], "rrweb-record.min.js")):
        return f"rrweb is not installed in {config['RRWEB_DIR']} (run `make rrweb`)"
    return None


def new_names():
    """A recorder's (name, sessionStorage key), random per run: a page cannot guess them before the recorder exists."""
    return f"__rd{secrets.token_hex(8)}", f"rd-recording-{secrets.token_hex(8)}"


def recorder_source(rrweb_dir, name, key, until):
    """The script each recorded document runs: rrweb and recording.js under `name` and `key`, recording until
    `until` (ms since the epoch; 0: until the browser ends)."""
    rrweb, bootstrap = _sources(rrweb_dir)
    # The UMD bundle sees a local `module`, so rrweb never becomes a global of the page.
    return (f"(function () {{ var module = {{exports: {{}}}}, exports = module.exports, define;\n{rrweb}\n;"
            f"({bootstrap})(module.exports, {json.dumps(name)}, {json.dumps(key)}, {int(until)}, "
            f"{MAX_PAGE_EVENTS}); }})();")


def discard(browser):
    """A run that is not recorded removes the recorder its pooled browser's tab got while waiting: none in its pages."""
    ready = getattr(browser, "ready_recorder", None)
    if not ready or not ready.get("identifier"):
        return
    try:
        browser.driver.execute("executeCdpCommand", {"cmd": "Page.removeScriptToEvaluateOnNewDocument",
                                                     "params": {"identifier": ready["identifier"]}})
    except WebDriverException as exc:
        log.info("recording: could not remove the pooled browser's recorder: %s", _first_line(exc))


class Recording:
    """rrweb events of one run. The recorder's name is random per run, so a page cannot guess it before it
    exists; whatever a page sends back is still checked (JSON, a list of events, within `max_bytes`)."""

    def __init__(self, browser, config, seconds):
        self.driver = browser.driver
        self.max_bytes = int(config.get("RECORDING_MAX_BYTES", 50 * 1024 * 1024))
        self.started_ms = int(time.time() * 1000)
        self.scripts = {}  # window handle → CDP script id
        ready = getattr(browser, "ready_recorder", None)
        if ready:  # a pooled browser's tab got it while it waited (workers/browser/pool.py): adopted, not added again
            self.name, key, until = ready["name"], ready["key"], 0
            self.scripts[ready["handle"]] = ready["identifier"]
        else:
            (self.name, key), until = new_names(), self.started_ms + int(seconds * 1000)
        self.source = recorder_source(config["RRWEB_DIR"], self.name, key, until)  # for the run's other tabs
        # Run on its own (pull) or after each page view's read, in the same WebDriver call (take).
        self.drain_script = f"var r = window[{json.dumps(self.name)}]; return r ? r.drain() : null;"
        self.events, self.size, self.full = [], 0, False
        # Set by the environment when the tab shows a new browser's blank first page: nothing there to record, so the
        # recorder is only added for the tab's next documents (running rrweb in this one costs a WebDriver call of
        # its whole source: a fifth of a second, before the task's first page).
        self.blank = False

    def mark(self, mark):
        """A step marker ({step, action}) at this moment, kept here (no page call: the page's events come with the
        page views). The first adds the recorder to the tab (to its next documents, and to the page it shows), unless
        the tab has it already (a pooled browser's, added while it waited)."""
        if self.full:
            return
        if not self.scripts:  # the run's first action: the tab gets its recorder (the page it shows too, unless blank)
            try:
                self._instrument(current=not self.blank)
            except WebDriverException as exc:
                log.info("recording: could not add the recorder: %s", _first_line(exc))
        self.events.append({"type": CUSTOM_EVENT, "timestamp": int(time.time() * 1000),
                            "data": {"tag": STEP_TAG, "payload": mark}})

    def take(self, out):
        """The events a page view's read drained (`drain_script` run with it); None: this document has no recorder
        yet (a new tab, a page opened before), which gets one now."""
        if self.full:
            return
        if out is None:
            try:
                self._instrument()
            except WebDriverException as exc:
                log.info("recording: could not add the recorder: %s", _first_line(exc))
            return
        self._add(out)

    def pull(self):
        """Take the page's new events (first adding the recorder to a tab or document that has none). A failure costs
        the recording events, never the run."""
        if self.full:
            return
        try:
            out = self.driver.execute_script(self.drain_script)
            if out is None:
                self._instrument()
                out = self.driver.execute_script(self.drain_script)
        except WebDriverException as exc:
            log.info("recording: could not read the page's events: %s", _first_line(exc))
            return
        self._add(out)

    def _instrument(self, current=True):
        """This tab's next documents get the recorder (CDP, per tab; once), and with `current` its current document
        gets it now."""
        handle = self.driver.current_window_handle
        if handle not in self.scripts:
            added = self.driver.execute("executeCdpCommand", {"cmd": "Page.addScriptToEvaluateOnNewDocument",
                                                              "params": {"source": self.source}})
            self.scripts[handle] = (added.get("value") or {}).get("identifier")
        if current:
            self.driver.execute_script(self.source)

    def _add(self, out):
        if not isinstance(out, str) or not out:
            return
        self.size += len(out)
        if self.size > self.max_bytes:
            self.full = True
            log.warning("recording: larger than RECORDING_MAX_BYTES; the rest of the run is not recorded")
            return
        try:
            events = json.loads(out)
        except ValueError:
            return
        if isinstance(events, list):
            # Events kept in a site's sessionStorage by an earlier run (a kept session) are not this run's.
            self.events.extend(e for e in events if isinstance(e, dict) and isinstance(e.get("timestamp"), (int, float))
                               and isinstance(e.get("type"), int) and e["timestamp"] >= self.started_ms - 1000)

    def finish(self):
        """The last events; then the recorder stops and leaves every tab it was added to (a kept session's browser
        outlives the run), and the agent's tab is current again. Returns the run's events."""
        self.pull()
        try:
            current = self.driver.current_window_handle
        except WebDriverException:
            return self.events  # the browser is gone: so are its recorders
        stop = f"var r = window[{json.dumps(self.name)}]; if (r) r.stop();"
        for handle, identifier in sorted(self.scripts.items(), key=lambda item: item[0] == current):
            try:
                if handle != current:
                    self.driver.switch_to.window(handle)
                self.driver.execute_script(stop)
                if identifier:
                    self.driver.execute("executeCdpCommand", {"cmd": "Page.removeScriptToEvaluateOnNewDocument",
                                                              "params": {"identifier": identifier}})
            except WebDriverException:
                pass  # that tab was closed: its recorder with it
        try:
            self.driver.switch_to.window(current)
        except WebDriverException:
            pass
        return self.events


def _first_line(exc):
    return str(exc).splitlines()[0] if str(exc) else repr(exc)
