"""The web agent in a real browser: the browser tools, and the page view the model gets after every action."""
import logging
import time
from dataclasses import replace
from urllib.parse import urljoin, urlsplit

from app.dispatch import recordings

from . import page_view
from .actions import STRING, Finish, Observation, Tool, params
from .environment import MAX_OBSERVATION_CHARS, Environment
from .secrets import unknown_placeholder

from workers.browser import recording
from workers.browser.base import BrowserError

log = logging.getLogger(__name__)
WEB = ("http", "https")
ENDINGS_WITHOUT_PAGE = ("answer", "ask_user", "fail", "wait", "current_time", "read_attachment")
BLANK = ("", "about:blank", "data:,", "chrome://newtab/")


class BrowserEnvironment(Environment):
    """The web agent in a real browser. Drivers (Selenium, the extension) implement `workers.browser.base.Browser`;
    subclasses say how to get one (`start_browser`). With `generateGif` a screenshot follows each action; with
    `screenshots` (a vision model) one goes to the model beside each page view. A Selenium browser's run is
    recorded (workers/browser/recording.py): the page's events are drained with each page view."""

    screenshots = False  # set by the runner when the planner shows the model images (LLM_VISION)
    acted_on = None  # page.js's description of the element the last action acted on, or None
    script_hook = None  # workers.replay.recorder.ScriptHook, set by the runner
    redact = None  # the task's Secrets.redact, set by the runner: applied to the recording's events
    person = None  # workers.agent.takeover.PersonControl once live viewers can watch (go_live)
    starts_blank = False  # a browser started for the task (one blank tab), not a window or session in use

    def __init__(self, task, should_stop, config):
        super().__init__(task, should_stop)
        self.config = config
        self.view_chars = int(config.get("PAGE_VIEW_CHARS", 6000))
        options = task.options or {}
        self.recorder = None
        if options.get("generateGif"):
            from workers.browser.recorder import GifRecorder

            self.recorder = GifRecorder(config.get("GIF_WIDTH", 800), config.get("GIF_MAX_FRAMES", 100))
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
        if why_not := recording.available(config):
            log.info("task %s is not recorded: %s", self.task.id, why_not)
        else:
            try:
                return recording.Recording(self.browser, config, config.get("TASK_TIMEOUT_SECONDS", 600))
            except OSError:  # rrweb unreadable: a recording must never fail the task
                log.warning("task %s is not recorded", self.task.id, exc_info=True)
        recording.discard(self.browser)  # a pooled browser's recorder, added while it waited: none in the pages
        return None

    def start_browser(self, task, should_stop, config):
        raise NotImplementedError

    def _resume_page(self):
        """After an input-required pause the browser was closed: reopen the page the run paused on. True if it did."""
        task = self.task
        if task.hitl and "answer" in task.hitl and task.trace:
            url = next((e.get("url") for e in reversed(task.trace) if e.get("url")), None)
            if url:
                try:
                    self.browser.open(url)
                except BrowserError as exc:
                    log.warning("task %s: could not reopen %s after the pause: %s", task.id, url, exc)
                return True
        return False

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
            Tool("select", "Choose an option of a select element.",
                 params(["target", "option"], target=target, option=STRING),
                 offered=params(["target", "option"], target=number, option=STRING)),
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
        try:
            observation = self._execute(action)
        except Finish as finish:
            hook.finished(action, finish.outcome)
            raise
        hook.after(action, observation)
        return observation

    def _execute(self, action):
        if self.recording is not None:  # a marker where this action starts (the events come with the page views)
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
        try:
            self.recorder.add(self.browser.screenshot())
        except (BrowserError, OSError, ValueError):  # a recording must never fail the task
            log.warning("task %s: screenshot for the GIF failed", self.task.id, exc_info=True)

    def _view(self, prefix=""):
        """The page after an action: what the action did, then the page view (and a screenshot for vision)."""
        if self.recording is None:  # (the extension's client mode has no recording, and its read no `also`)
            reading = self.browser.read(max_chars=self.view_chars)
        else:  # the recording's events so far, drained in the same call
            reading = self.browser.read(max_chars=self.view_chars, also=self.recording.drain_script)
            self.recording.take(reading.also)
        image = None
        if self.screenshots:
            try:
                image = self.browser.screenshot()
            except BrowserError:  # the text view still goes
                log.warning("task %s: screenshot for the model failed", self.task.id, exc_info=True)
        view = page_view.render(reading, prefix)
        if problem := reading.error():  # a 404 page has text too: it must not read as the page asked for
            return Observation(f"{problem}\n{view}", reading.url, failed=True, error_page=True, image=image)
        return Observation(view, reading.url, image=image)

    def _act(self, what, done=None):
        """Run one browser action; the page view follows it, and a failure says why."""
        self.acted_on = None
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
        return self._act(lambda: self.browser.open(check_typed_url(url)))

    def do_read_page(self):
        return self._act(lambda: None)

    def do_click(self, target):
        return self._act(lambda: self.browser.click(target), lambda info: f"clicked {page_view.element_line(info)}")

    def do_type(self, target, text):
        # `text` holds real secret values here: the observation names the field, never the text.
        return self._act(lambda: self.browser.type(target, text), lambda info: f"typed into {page_view.element_line(info)}")

    def do_select(self, target, option):
        return self._act(lambda: self.browser.select(target, option),
                         lambda info: f"selected {info.get('selected')!r} in [{info.get('index')}]")

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
        return self._act(self.browser.back, lambda _: "went back")

    def do_switch_tab(self, index):
        return self._act(lambda: self.browser.switch_tab(int(index)), lambda _: f"tab {index}")

    def do_extract(self, selector="body"):
        def found(texts):
            texts = [t for t in texts if t]
            if not texts:
                raise BrowserError(f"Nothing on {self.url() or 'the page'} matches {selector!r}.")
            return Observation("\n".join(texts)[:MAX_OBSERVATION_CHARS], self.url())
        return self._act(lambda: self.browser.extract(selector), found)

    def close(self):
        browser = self.browser
        try:
            if self.recording is not None and browser is not None:
                self.store_recording()
            if self.recorder is not None and browser is not None:
                self.store_gif()
        finally:
            if self.person is not None:
                self.person.close()
            if browser is not None:
                browser.close()

    def store_gif(self):
        from workers.browser.gifs import save_gif

        try:
            save_gif(self.task.id, self.recorder, self.config)
        except Exception:
            log.warning("task %s: the GIF could not be stored", self.task.id, exc_info=True)

    def store_recording(self):
        try:
            events = self.recording.finish()
            recordings.store(self.task.id, self.redact(events) if self.redact is not None else events)
        except Exception:  # a recording must never fail the task
            log.warning("task %s: the recording could not be stored", self.task.id, exc_info=True)
