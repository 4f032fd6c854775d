"""A run's recording in a Selenium browser: rrweb in an isolated world of every document of the tab, its events taken
in bounded chunks between actions, the step markers the worker's own."""
import hmac
import json
import logging
import os
import secrets
import time
from functools import lru_cache

from selenium.common.exceptions import WebDriverException

from app.dispatch.recording_store import STEP_TAG, TRUNCATED_TAG

from .world import World, WorldError

log = logging.getLogger(__name__)
BOOTSTRAP = os.path.join(os.path.dirname(__file__), "rrweb.js")
MAX_PAGE_EVENTS = 200_000  # events one page holds undrained before it stops recording
CHUNK_CHARS = 1 << 20  # what one drain call brings into the worker at most (one event at least)
CUSTOM_EVENT = 5  # rrweb's event type of a custom event: a step marker (tagged STEP_TAG), the worker's only


# rrweb (2.1.6) checks that the DOM's prototypes are the browser's own before it uses them, and for `Element` it looks
# for two methods (querySelector, querySelectorAll) among the property getters, so the check always fails: each
# document it records then gets a hidden frame appended to the page's body, to borrow a clean prototype from, and
# removed. That is a node the page's own observers see, and a document, a JavaScript context and a copy of every world
# script per page (about 20 ms of each navigation here, bench/recording.py). In our isolated world the prototypes are
# the world's own, which no page script reaches: the methods are checked as methods, as rrweb means them to be.
UNTAINTED_CHECK = (
    ('Element:["shadowRoot","querySelector","querySelectorAll"],MutationObserver:[]}',
     'Element:["shadowRoot"],MutationObserver:[]}'),
    ('Element:[],MutationObserver:["constructor"]}',
     'Element:["querySelector","querySelectorAll"],MutationObserver:["constructor"]}'),
)


@lru_cache(maxsize=4)
def _sources(rrweb_dir):
    with open(os.path.join(rrweb_dir, "rrweb-record.min.js"), encoding="utf-8") as rrweb, \
            open(BOOTSTRAP, encoding="utf-8") as bootstrap:
        return _checked_as_meant(rrweb.read()), bootstrap.read()


def _checked_as_meant(rrweb):
    """rrweb with its prototype check of `Element` corrected (UNTAINTED_CHECK); unchanged, and said so, when this build
    of it does not have the lists (another version: it records as well, with a frame per document)."""
    if not all(rrweb.count(old) == 1 for old, _ in UNTAINTED_CHECK):
        log.warning("recording: this rrweb build's prototype check is not the one corrected here: each recorded "
                    "document gets rrweb's hidden frame")
        return rrweb
    for old, new in UNTAINTED_CHECK:
        rrweb = rrweb.replace(old, new)
    return rrweb


def available(config):
    """Why recordings cannot be made here, or None (they can)."""
    if not config["RECORDINGS"]:
        return "RECORDINGS is off"
    if not os.path.isfile(os.path.join(config["RRWEB_DIR"], "rrweb-record.min.js")):
        return f"rrweb is not installed in {config['RRWEB_DIR']} (run `make rrweb`)"
    return None


def new_names():
    """A recorder's (name, token), random per run: its name in the world (runs of a kept session's tab do not meet),
    and the token every answer of it carries (only the world and the worker know it)."""
    return f"__rd{secrets.token_hex(8)}", secrets.token_hex(16)


def max_bytes(config):
    return int(config["RECORDING_MAX_BYTES"])


def recorder_source(rrweb_dir, name, token, until, budget):
    """The script each recorded document runs in the world: rrweb and rrweb.js under `name` with `token`,
    recording until `until` (ms since the epoch; 0: until the browser ends), keeping at most `budget` characters."""
    rrweb, bootstrap = _sources(rrweb_dir)
    # The UMD bundle sees a local `module`, so rrweb never becomes a global, even of the world. Only a tab's top document
    # is recorded (rrweb reads its same-origin frames from there): a frame's world does not evaluate rrweb at all.
    return (f"(function () {{ if (window !== window.top) return;\n"
            f"var module = {{exports: {{}}}}, exports = module.exports, define;\n{rrweb}\n;"
            f"({bootstrap})(module.exports, {json.dumps(name)}, {json.dumps(token)}, {int(until)}, {int(budget)}, "
            f"{MAX_PAGE_EVENTS}); }})();")


def discard(browser):
    """A run that is not recorded removes the recorder its pooled browser's tab got while waiting: none in its pages."""
    ready = getattr(browser, "ready_recorder", None)
    if not ready or not ready.get("identifier"):
        return
    try:
        World(browser.driver).remove(ready["identifier"])
    except WebDriverException as exc:
        log.info("recording: could not remove the pooled browser's recorder: %s", _first_line(exc))


class Recording:
    """rrweb events of one run. The recorder runs where the page's scripts cannot reach it, answers with a token
    the page never sees, and holds no more than the run's RECORDING_MAX_BYTES; past it the recording ends, marked
    truncated. What comes back is still checked (JSON, a list of events, no custom event, within the budget)."""

    def __init__(self, browser, config, seconds):
        self.driver = browser.driver
        self.world = World(self.driver)
        self.max_bytes = max_bytes(config)
        self.started_ms = int(time.time() * 1000)
        self.scripts = {}  # window handle → the CDP script ids its documents get (the recorder, the secrets' forms)
        ready = getattr(browser, "ready_recorder", None)
        if ready:  # a pooled browser's tab got it while it waited (workers/browser/pool.py): adopted, not added again
            self.name, self.token, until = ready["name"], ready["token"], 0
            self.scripts[ready["handle"]] = [ready["identifier"]]
        else:
            (self.name, self.token), until = new_names(), self.started_ms + int(seconds * 1000)
        self.source = recorder_source(config["RRWEB_DIR"], self.name, self.token, until, self.max_bytes)
        self.forms, self.armed = [], set()  # the secrets' forms the recorder masks; tabs whose documents get them
        self.events, self.size, self.full, self.truncated, self.started = [], 0, False, False, False
        # Set by the environment when the tab shows a new browser's blank first page: nothing there to record, so the
        # recorder is only added for the tab's next documents (running rrweb in this one costs a call carrying its
        # whole source, before the task's first page).
        self.blank = False

    def use_secrets(self, forms):
        """Mask these forms of the task's secret values in the pages (workers/agent/secrets.py `forms`): given
        before the first action, they reach every document the recorder is added to."""
        self.forms = list(forms)

    def mark(self, mark):
        """A step marker ({step, action}) at this moment, kept here (no page call). The first adds the recorder to
        the tab (to its next documents, and to the page it shows), unless the tab has it already (a pooled
        browser's, added while it waited)."""
        if self.full:
            return
        if not self.started:  # the run's first action: the tab gets its recorder
            self.started = True
            try:
                self._instrument(current=not self.blank)
            except (WebDriverException, WorldError) as exc:
                log.info("recording: could not add the recorder: %s", _first_line(exc))
            if not self.blank:  # the page shown before the run, taken now: the action may leave it (no handoff)
                self.pull()
        self.events.append({"type": CUSTOM_EVENT, "timestamp": int(time.time() * 1000),
                            "data": {"tag": STEP_TAG, "payload": mark}})

    def guard(self, on):
        """While the worker types a secret (on), every element that gets the focus or the keys is masked for good,
        with its subtree, and whatever text the page shows meanwhile."""
        if self.full:
            return
        try:
            if self._ask(f"guard({'true' if on else 'false'})") is None and on:
                self._instrument()
                self._ask("guard(true)")
        except (WebDriverException, WorldError) as exc:
            log.info("recording: could not guard the secret's field: %s", _first_line(exc))

    def rider(self):
        """What a page view's call can ask of the recorder on the way (`read(drain=)`): (its name, drain's arguments),
        or None when the recording takes nothing more."""
        if self.full or not self.started:
            return None
        return self.name, [CHUNK_CHARS, max(0, self.max_bytes - self.size)]

    def take(self, out):
        """The recorder's answer to the drain that rode on a page view's call: its events kept; what it did not bring
        (more events, or a document without the recorder) taken by `pull`."""
        if self.full:
            return
        if not self._ours(out) or not self._took(out):
            self.pull()

    def pull(self):
        """Take the page's new events, a chunk per call, until the page has none or the run's budget is spent (first
        adding the recorder to a tab or document that has none). A failure costs the recording events, never the run."""
        if self.full:
            return
        instrumented = False
        try:
            while not self.full:
                out = self._ask(f"drain({CHUNK_CHARS}, {max(0, self.max_bytes - self.size)})")
                if out is None:
                    if instrumented:
                        return
                    self._instrument()
                    instrumented = True
                    continue
                if self._took(out):
                    return
        except (WebDriverException, WorldError) as exc:
            log.info("recording: could not read the page's events: %s", _first_line(exc))

    def _took(self, out):
        """Keep a drain's events; True when the page holds no more for now."""
        self._add(out.get("events"))
        if out.get("more"):
            return False
        if out.get("capped"):  # what the recorder held before it reached the budget is kept
            self._truncate()
        return True

    def _ask(self, call):
        """The answer of the recorder of the tab's current document to `call` (a method and its arguments, nothing
        secret), or None when that document has none. Only an answer with the run's token is the recorder's."""
        return self.world.evaluate(f"var r = globalThis[{json.dumps(self.name)}]; r ? r.{call} : null",
                                   valid=self._ours)

    def _ours(self, value):
        return isinstance(value, dict) and hmac.compare_digest(str(value.get("token")), self.token)

    def _instrument(self, current=True):
        """This tab's next documents get the recorder (and the secrets' forms) in the world, once per tab; with
        `current` its current document gets them now, by a call checked to reach the world."""
        handle = self.driver.current_window_handle
        scripts = self.scripts.setdefault(handle, [])
        if not scripts:
            scripts.append(self.world.add(self.source))
        if self.forms and handle not in self.armed:
            scripts.append(self.world.add(f"(function () {{ var r = globalThis[{json.dumps(self.name)}]; "
                                          f"if (r) r.secrets({json.dumps(self.forms)}); }})();"))
        self.armed.add(handle)
        if current:
            self.world.call(f"function (forms) {{ {self.source}\nvar r = globalThis[{json.dumps(self.name)}];"
                            "if (r && forms.length) r.secrets(forms); return !!r; }", self.forms)

    def _add(self, out):
        if not isinstance(out, str) or not out:
            return
        if self.size + len(out) > self.max_bytes:  # the recorder keeps to the budget; a page cannot make it send more
            self._truncate()
            return
        self.size += len(out)
        try:
            events = json.loads(out)
        except ValueError:
            return
        if isinstance(events, list):
            self.events.extend(e for e in events if isinstance(e, dict) and isinstance(e.get("type"), int)
                               and e["type"] != CUSTOM_EVENT and isinstance(e.get("timestamp"), (int, float)))

    def _truncate(self):
        """The run's budget is spent: nothing more is recorded, and the recording says where it ends."""
        if self.full:
            return
        self.full = self.truncated = True
        self.events.append({"type": CUSTOM_EVENT, "timestamp": int(time.time() * 1000),
                            "data": {"tag": TRUNCATED_TAG, "payload": {"maxBytes": self.max_bytes}}})
        log.warning("recording: RECORDING_MAX_BYTES reached; the rest of the run is not recorded")

    def finish(self):
        """The last events; then the recorder stops and leaves every tab it was added to (a kept session's browser
        outlives the run), and the agent's tab is current again. Returns the run's events."""
        self.pull()
        try:
            current = self.driver.current_window_handle
        except WebDriverException:
            return self.events  # the browser is gone: so are its recorders
        for handle, scripts in sorted(self.scripts.items(), key=lambda item: item[0] == current):
            try:
                if handle != current:
                    self.driver.switch_to.window(handle)
                self._ask("stop()")
                for identifier in filter(None, scripts):
                    self.world.remove(identifier)
            except WebDriverException:
                pass  # that tab was closed: its recorder with it
        try:
            self.driver.switch_to.window(current)
        except WebDriverException:
            pass
        return self.events


def _first_line(exc):
    return str(exc).splitlines()[0] if str(exc) else repr(exc)
