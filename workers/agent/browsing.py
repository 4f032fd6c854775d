"""The web agent in a real browser: the browser tools, and the page view the model gets after every action."""
import contextlib
import logging
import os
import time
from dataclasses import replace
from urllib.parse import urljoin, urlsplit

from app.crypto import unseal
from app.dispatch import recording_store
from app.dispatch.service import stored_gif
from app.lifecycle import takes_up_a_pause, waits_for_arrival
from app.extensions import db
from app.sandbox.box import being_written

from . import page_view
from .actions import NUMBER, STRING, Finish, Observation, Outcome, Tool, params
from .environment import MAX_OBSERVATION_CHARS, Environment
from .loop import trace_entry
from .secrets import unknown_placeholder

from workers.browser import rrweb
from workers.browser.base import BrowserError

log = logging.getLogger(__name__)
POINTS = {"type": "array", "minItems": 2, "items": {"type": "array", "items": NUMBER, "minItems": 2, "maxItems": 2}}
WEB = ("http", "https")
ENDINGS_WITHOUT_PAGE = ("answer", "ask_user", "fail", "wait", "current_time", "read_attachment")
BLANK = ("", "about:blank", "data:,", "chrome://newtab/")
# A GIF frame of a task with secrets: a value typed from ${NAME} into a text field (a one-time code, a password in
# a plain field) would be in the picture, so text fields are drawn as dots while the screenshot is taken.
MASK_FIELDS = """(function (on) {
  var id = "rd-gif-mask", old = document.getElementById(id);
  if (old) old.remove();
  if (!on) return;
  var style = document.createElement("style");
  style.id = id;
  style.textContent = "input:not([type]),input[type=text],input[type=email],input[type=search],input[type=tel]," +
    "input[type=url],input[type=number],textarea{-webkit-text-security:disc!important}";
  (document.head || document.documentElement).appendChild(style);
})(%s);"""


class BrowserEnvironment(Environment):
    """The web agent in a real browser. Drivers (Selenium, the extension) implement `workers.browser.base.Browser`;
    subclasses say how to get one (`start_browser`). With `generateGif` a screenshot follows each action; with
    `screenshots` (a vision model) one goes to the model beside each page view. A Selenium browser's run is
    recorded (workers/browser/rrweb.py): the page's events are taken after each page view."""

    screenshots = False  # set by the runner when the planner shows the model images (LLM_VISION)
    acted_on = None  # page.js's description of the element the last action acted on, or None
    script_hook = None  # workers.replay.script_hook.ScriptHook, set by the runner
    # The page the last page view read ({url, title}), until the next action starts: where a step planned on that
    # view starts (a replay script's step records it) without asking the browser again.
    viewed = None
    secrets = None  # the task's Secrets, set by the runner: the recording masks their values
    masks_fields = False  # set by the runner for a task with secrets: GIF frames show text fields as dots
    person = None  # workers.agent.takeover.PersonControl once live viewers can watch (go_live)
    starts_blank = False  # a browser started for the task (one blank tab), not a window or session in use
    kept = False  # the browser was kept at the task's input-required pause (workers/browser/parking.py)

    def __init__(self, task, should_stop, config):
        super().__init__(task, should_stop)
        self.config = config
        self.view_chars = int(config["PAGE_VIEW_CHARS"])
        options = task.options or {}
        self.recorder = None
        if options.get("generateGif"):
            from workers.browser.gif import GifRecorder

            self.recorder = GifRecorder(config["GIF_WIDTH"], config["GIF_MAX_FRAMES"])
            earlier = stored_gif(task.id) if waits_for_arrival(task) else None
            if earlier:  # the frames before its pause for a code or link: one GIF of the whole run
                self.recorder.go_on_from(earlier)
        try:
            self.browser = self.start_browser(task, should_stop, config)
        except BrowserError as exc:  # not installed, Grid down: the task ends as error with this message
            raise ValueError(str(exc)) from None
        self.recording, self.steps = self._start_recording(config), 0
        self.blank = self.starts_blank and not self._resume_page()
        if self.recording is not None:
            self.recording.blank = self.blank

    def _start_recording(self, config):
        """A recording of the run, for a browser driven by Selenium (the extension's client mode has none)."""
        if getattr(self.browser, "driver", None) is None:
            return None
        if why_not := rrweb.available(config):
            log.info("task %s is not recorded: %s", self.task.id, why_not)
        else:
            try:
                return rrweb.Recording(self.browser, config, config["TASK_TIMEOUT_SECONDS"])
            except OSError:  # rrweb unreadable: a recording must never fail the task
                log.warning("task %s is not recorded", self.task.id, exc_info=True)
        rrweb.discard(self.browser)  # a pooled browser's recorder, added while it waited: none in the pages
        return None

    def start_browser(self, task, should_stop, config):
        raise NotImplementedError

    def _resume_page(self):
        """After an input-required pause: a browser kept since the pause goes on as it is; a fresh one takes up the
        pause's snapshot (cookies, storage, tabs) or, without one, reopens the page the run paused on. True if it did
        either; `resumed` is then the trace entry that says which happened."""
        task = self.task
        if not (takes_up_a_pause(task) and task.trace):
            return False
        start = time.time()
        if self.kept:
            what = "resumed in the browser kept since the pause (same tabs, page, cookies and storage)"
        else:
            what = self._restore(task)
        self.resumed = trace_entry(self.url(), what, start, time.time())
        return True

    def _restore(self, task):
        snapshot = unseal(task.pause_snapshot) if getattr(task, "pause_snapshot", None) else None
        if snapshot and hasattr(self.browser, "restore"):
            try:
                self.browser.restore(snapshot)
                return ("resumed in a fresh browser with the pause's snapshot restored (cookies, storage, tabs): "
                        "the kept browser had been let go")
            except BrowserError as exc:
                log.warning("task %s: the pause's snapshot could not be restored: %s", task.id, exc)
        url = next((e.get("url") for e in reversed(task.trace) if e.get("url")), None)
        if url:
            try:
                self.browser.open(url)
            except BrowserError as exc:
                log.warning("task %s: could not reopen %s after the pause: %s", task.id, url, exc)
        return "resumed in a fresh browser on the page of the pause (no snapshot: cookies and storage are gone)"

    def tools(self, response_schema=None):
        # Few tools with short descriptions: the page view follows every action, so there is no read tool,
        # and a small model picks better among fewer (hover, wait_for, switch_tab, read_page stay steps of
        # the built-in planner).
        # A model is offered element numbers only: a small model whose calls a grammar constrains then picks a
        # number from the page view instead of copying a URL or the tool's name as the target. Text targets
        # (the built-in planner's, a free model's) still run.
        target = {"type": ["integer", "string"], "description": "Element number ([12] → 12) or its exact text."}
        number = {"type": "integer", "minimum": 0, "maximum": 9999,
                  "description": "The element's number N, shown as [N] in the page."}
        person = [Tool("ask_for_person", "Ask a person to take control of the browser for what you cannot do "
                       "(a login, a 2FA code, a captcha); they hand it back when done.",
                       params(["reason"], reason=STRING))] if self.person is not None else []
        return super().tools(response_schema) + person + [
            Tool("go_to", "Open a URL.", params(["url"], url=STRING)),
            Tool("click", "Click an element.", params(["target"], target=target),
                 offered=params(["target"], target=number)),
            Tool("type", "Type text into a field (replaces its text).",
                 params(["target", "text"], target=target, text=STRING),
                 offered=params(["target", "text"], target=number, text=STRING)),
            Tool("select", "Choose an option of a select element or a drop-down (combobox, listbox) by its text.",
                 params(["target", "option"], target=target, option=STRING),
                 offered=params(["target", "option"], target=number, option=STRING)),
            Tool("drag", "Drag an element onto another (target), or by x,y pixels (a slider's handle).",
                 params(["source"], source=target, target=target, x=NUMBER, y=NUMBER),
                 offered=params(["source"], source=number, target=number, x=NUMBER, y=NUMBER)),
            Tool("draw", "Draw a path with the pointer on an element (a canvas): through points, [x, y] pixels from "
                 "its top-left corner.",
                 params(["target", "points"], target=target, points=POINTS),
                 offered=params(["target", "points"], target=number, points=POINTS)),
            Tool("press", "Press a key, e.g. Enter.", params(["key"], key=STRING)),
            Tool("scroll", "Scroll the page to see more.",
                 params(["direction"], direction={"type": "string", "enum": ["down", "up"]})),
            Tool("extract", "Text of the elements matching a CSS selector.", params(["selector"], selector=STRING)),
            Tool("go_back", "Go back.", params()),
        ]

    def url(self):
        return self.browser.current_url() if self.browser is not None else ""

    # --- live view (app/live) and a person's takeover (workers/agent/takeover.py) ---------------------------
    def go_live(self, person):
        """Publish where viewers find this browser, and let a person take control; a browser the live view
        cannot reach (the user's own window) stays as it is."""
        if self.browser is None or not self.browser.live_endpoint:
            return
        self.person = person
        person.deadline, person.here = (lambda: self.deadline), self.url  # for a pause inside a step
        self.browser.paused_seconds = lambda: person.paused_seconds
        # A browser that was just started has one blank tab, which viewers attach to by themselves: no WebDriver
        # round trips before the first step (a pooled browser's task reaches its first page sooner).
        where = {} if self.blank else {"targetId": self.browser.live_target(), "url": self.url()}
        person.publish(endpoint=self.browser.live_endpoint, **where)

    def show_step(self, description=None, url=None):
        if self.person is None:
            return
        if url is None:
            self.person.publish(step=description)
        else:  # after the step: where the agent is now (a new tab included)
            self.person.publish(url=url, targetId=self.browser.live_target())

    def between_steps(self):
        return self.person.between_steps(self.deadline, self.url) if self.person is not None else []

    def paused_seconds(self):
        return self.person.paused_seconds if self.person is not None else 0.0

    def _loading(self, load):
        """A page load (chromedriver blocks until it ends): a person may take control meanwhile (the agent sends no
        input while loading), and the run pauses for them when the load ends, before the page view is read."""
        if self.person is None:
            return load()
        self.person.publish(loading=True)
        try:
            return load()
        finally:
            self.person.publish(loading=False)
            self.should_stop()  # the safe point: a takeover asked for during the load holds the run here

    def fresh_page(self):
        try:
            return self._view("A person had control; the page is as they left it.")
        except BrowserError:
            return None

    def do_ask_for_person(self, reason):
        """A login, a 2FA code or a captcha the agent cannot pass: `input-required` until a person, through the
        live view, takes control and hands it back; then the page afresh."""
        if self.person is None:
            return Observation("No person can take control of this browser: ask the user with ask_user.",
                               self.url(), failed=True)
        self.person.ask(reason, self.deadline, self.url)
        return self._act(lambda: None, lambda _: "A person had control and handed it back.")

    def first_observation(self):
        """The page a kept session or the user's window is on when the task starts (nothing on a blank tab)."""
        try:
            if self.url() in BLANK:
                return ""
            return page_view.START_PAGE + self._view().text
        except BrowserError:
            return ""

    def trace_fields(self):
        fields = {"browserSession": self.browser.label}
        return {**fields, **self.script_hook.trace_fields()} if self.script_hook is not None else fields

    def execute(self, action):
        hook = self.script_hook  # workers/replay: records the step, and checks a replayed step before it runs
        if hook is None:
            return self._execute(action)
        action, refused = hook.before(self, action)
        if refused is not None:
            return refused
        self.acted_on = None  # set by this action when it locates an element (_act)
        try:
            observation = self._execute(action)
        except Finish as finish:
            hook.finished(action, finish.outcome)
            raise
        hook.after(action, observation, self.acted_on)
        return observation

    def _execute(self, action):
        if self.recording is not None:  # a marker where this action starts (the events come after the page views)
            if not self.steps and self.secrets is not None:
                self.recording.use_secrets(self.secrets.forms())
            self.recording.mark({"step": self.steps, "action": action.name})
        self.steps += 1
        observation = super().execute(action)
        observation = self._with_refusals(observation)
        if self.recorder is not None and action.name not in ENDINGS_WITHOUT_PAGE:
            self.record()
        return observation

    def _with_refusals(self, observation):
        """What the egress proxy refused during the step goes into its trace entry; a navigation it refused
        (the page is the proxy's error) fails the step and says why."""
        egress = getattr(self, "egress", None)
        refusals = egress.new_refusals() if egress is not None else []
        if not refusals:
            return observation
        if failed := [r for r in refusals if r.get("kind") == "upstream"]:
            # The caller's proxy refused its credentials or cannot be reached: no later step can work either.
            raise Finish(Outcome("error", f"The task's network path failed: {failed[0]['reason']}."))
        refused = page_view.refusal_lines(refusals)
        # A navigation the proxy refused over HTTPS fails in Chromium as net::ERR_TUNNEL_CONNECTION_FAILED, which
        # says nothing: the failure naming the refused host gets the policy's reason (the fence and the host).
        named = [r for r in refusals if observation.failed and not observation.error_page
                 and page_view.names_host(observation.text or "", r["host"], r["port"])]
        if named:
            return replace(observation, text=f"Navigation refused by the egress policy: {named[0]['reason']}",
                           refused=refused, failed=True)
        here = [r for r in refusals if page_view.url_of_host(observation.url or "", r["host"], r["port"])]
        if not here or (observation.failed and not observation.error_page):  # the proxy's refusal page is one
            return replace(observation, refused=refused)
        why = f"Navigation refused by the egress policy: {here[0]['reason']}"
        return replace(observation, text=why, refused=refused, failed=True)

    def record(self):
        masked = False
        try:
            if self.masks_fields:  # if the page refuses the mask, no frame rather than one that may show a secret
                self.browser.run_js(MASK_FIELDS % "true")
                masked = True
            self.recorder.add(self.browser.screenshot())
        except (BrowserError, OSError, ValueError):  # a recording must never fail the task
            log.warning("task %s: screenshot for the GIF failed", self.task.id, exc_info=True)
        finally:
            if masked:
                with contextlib.suppress(BrowserError):
                    self.browser.run_js(MASK_FIELDS % "false")

    def _view(self, prefix=""):
        """The page after an action: what the action did, then the page view (and a screenshot for vision)."""
        recording = self.recording
        # The recording's events so far come in the page view's own call (one call after each action, not two).
        reading = self.browser.read(max_chars=self.view_chars, drain=recording.rider() if recording else None)
        if recording is not None:
            recording.take(reading.recorded)
        image = None
        if self.screenshots:
            try:
                image = self.browser.screenshot()
            except BrowserError:  # the text view still goes
                log.warning("task %s: screenshot for the model failed", self.task.id, exc_info=True)
        view = page_view.render(reading, prefix)
        self.viewed = {"url": reading.url, "title": reading.title}
        if problem := reading.error():  # a 404 page has text too: it must not read as the page asked for
            return Observation(f"{problem}\n{view}", reading.url, failed=True, error_page=True, image=image)
        return Observation(view, reading.url, image=image)

    def _act(self, what, done=None):
        """Run one browser action; the page view follows it, and a failure says why."""
        self.acted_on = self.viewed = None
        try:
            result = what()
            if isinstance(result, dict) and "index" in result:
                self.acted_on = result  # the element's descriptor (number, tag, label, attributes) for replay
            prefix = done(result) if done else ""
            return prefix if isinstance(prefix, Observation) else self._view(prefix)
        except BrowserError as exc:
            return self._failed(exc)

    def _failed(self, exc):
        # The error alone: the page did not change, and the latest page view stays whole in the model's context.
        return Observation(str(exc), self.url(), failed=True)

    def do_go_to(self, url):
        from workers.browser.egress import check_typed_url

        if unknown := unknown_placeholder(url):
            return Observation(unknown, self.url(), failed=True)
        if url.startswith(("/", "./", "../", "?", "#")) and urlsplit(here := self.url() or "").scheme in WEB:
            url = urljoin(here, url)  # a path on the current page's site, as a link's href would be
        elif "://" not in url and not url.startswith(("data:", "about:")):
            url = "https://" + url
        return self._act(lambda: self._loading(lambda: self.browser.open(check_typed_url(url))))

    def do_read_page(self):
        return self._act(lambda: None)

    def do_click(self, target):
        return self._act(lambda: self.browser.click(target), lambda info: f"clicked {page_view.element_line(info)}")

    def do_type(self, target, text):
        # `text` holds real secret values here: the observation names the field, never the text, and the recording
        # masks every element that gets the keys (an OTP widget moves the focus from box to box) for good.
        guard = self.recording is not None and self.secrets is not None and self.secrets.holds(text)
        held = self.secrets.sites_for(text) if self.secrets is not None else {}
        if guard:
            self.recording.guard(True)
        try:
            return self._act(lambda: self.browser.type(target, text, where=_on_sites(held) if held else None),
                             lambda info: f"typed into {page_view.element_line(info)}")
        finally:
            if guard:
                self.recording.guard(False)

    def do_select(self, target, option):
        return self._act(lambda: self.browser.select(target, option),
                         lambda info: f"selected {info.get('selected')!r} in [{info.get('index')}]")

    def do_drag(self, source, target=None, x=0, y=0):
        """Onto `target`, or by (x, y) pixels when no target is given."""
        offset = None if target not in (None, "") else (float(x or 0), float(y or 0))
        return self._act(lambda: self.browser.drag(source, None if offset else target, offset),
                         lambda result: "dragged " + page_view.drag_line(result, offset))

    def do_draw(self, target, points):
        try:
            path = [(float(x), float(y)) for x, y in points]
        except (TypeError, ValueError):
            path = []
        if len(path) < 2:
            return Observation("draw needs points: at least two [x, y] pairs.", self.url(), failed=True)
        return self._act(lambda: self.browser.draw(target, path),
                         lambda info: f"drew through {len(path)} points on [{info.get('index')}]")

    def do_press(self, key):
        return self._act(lambda: self.browser.press(key), lambda _: f"pressed {key}")

    def do_scroll(self, direction="down", target=None):
        return self._act(lambda: self.browser.scroll(direction, target),
                         lambda r: f"scrolled {direction} (at {'the end' if r.get('atEnd') else r.get('scrollY')})")

    def do_hover(self, target):
        return self._act(lambda: self.browser.hover(target), lambda info: f"hovering over {page_view.element_line(info)}")

    def do_wait_for(self, text, seconds=10):
        seconds = min(float(seconds), max(0.0, self.deadline - time.monotonic()))
        # A built-in step only (the model is not offered it): its answer is what it waited for, not a page view.
        return self._act(lambda: self.browser.wait_for(text=text, timeout=seconds),
                         lambda _: Observation(f"the page shows {text!r}", self.url()))

    def do_go_back(self):
        return self._act(lambda: self._loading(self.browser.back), lambda _: "went back")

    def do_switch_tab(self, index):
        return self._act(lambda: self.browser.switch_tab(int(index)), lambda _: f"tab {index}")

    def do_extract(self, selector="body"):
        viewed = self.viewed  # a read leaves the page as the last page view saw it
        here = (viewed or {}).get("url")

        def found(texts):
            texts = [t for t in texts if t]
            if not texts:
                raise BrowserError(f"Nothing on {here or self.url() or 'the page'} matches {selector!r}.")
            self.viewed = viewed
            text = "\n".join(texts)[:MAX_OBSERVATION_CHARS]
            return Observation(text, here or self.url(), trace_result=text)  # kept past a later failure
        return self._act(lambda: self.browser.extract(selector), found)

    def close(self):
        browser = self.browser
        try:
            self._store_run(browser)
            if browser is not None:
                self.wait_for_downloads()
        finally:
            if self.person is not None:
                self.person.close()
            if browser is not None:
                browser.close()
        try:
            self.downloads = self.keep_downloads() or []
        except Exception:  # the task's outcome stands; its files are what could be kept
            log.warning("task %s: its downloads could not be kept", self.task.id, exc_info=True)
            db.session.rollback()  # the task's finish comes next, in a transaction of its own

    # Downloads: each mode says where its browser saves them while it runs, and how they become files of the key
    # once it is closed (or, for a kept session, let go of). `downloads` is what keep_downloads returned.
    downloads = ()

    def downloads_folder(self):
        """Where the running browser saves its downloads, when this machine can see it (else None)."""
        return None

    def keep_downloads(self):
        """Store what the task's browser downloaded as files of the key: app/files/service.keep_downloads's list."""
        return []

    def wait_for_downloads(self):
        """A download still being written when the task ends (a click on a link was its last step) is waited for,
        up to DOWNLOAD_WAIT_SECONDS: Chromium writes it under a temporary name and renames it when done."""
        folder = self.downloads_folder()
        if not folder:
            return
        deadline = time.monotonic() + float(self.config["DOWNLOAD_WAIT_SECONDS"])
        while time.monotonic() < deadline and any(map(being_written, _names(folder))):
            time.sleep(0.2)

    def _store_run(self, browser):
        if self.recording is not None and browser is not None:
            self.store_recording()
        if self.recorder is not None and browser is not None:
            self.store_gif()

    def store_gif(self):
        from workers.browser.gifs import save_gif

        try:
            save_gif(self.task.id, self.recorder, self.config)
        except Exception:
            log.warning("task %s: the GIF could not be stored", self.task.id, exc_info=True)

    def store_recording(self):
        try:
            events = self.recording.finish()
            if self.secrets is not None:  # the values in every form, then four characters of their other forms
                events = self.secrets.mask_pieces(self.secrets.redact(events), keep=("tagName",))
            recording_store.store(self.task.id, events)
        except Exception:  # a recording must never fail the task
            log.warning("task %s: the recording could not be stored", self.task.id, exc_info=True)


def _names(folder):
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _on_sites(held):
    """The check a stored credential's value is typed under: `check(top URL, URL of the frame typed into)` raises
    BrowserError unless both are on each held credential's sites (a look-alike host, a redirect elsewhere, a frame
    of another origin are refused before a key is sent)."""
    from app.credentials.placeholders import on_sites, origin

    def check(top, frame):
        for name, sites in held.items():
            for what, url in (("the page", top), ("the frame typed into", frame)):
                if not on_sites(url, sites):
                    raise BrowserError(f"Not typed: ${{{name}}} is a stored credential for {', '.join(sites)}, and "
                                       f"{what} is {origin(url) or 'not a web page'}. It is only typed into a page "
                                       "whose address and frame are on its sites.")
    return check
