"""Environments execute actions: the general agent's server-side tools and the web agent's page reader.

Every environment also runs the task's MCP tools (`mcp`, set by the runner) and reads its attachments."""
import logging
import os
import tempfile
import time
import uuid
from dataclasses import replace
from datetime import datetime
from zoneinfo import ZoneInfo

from sqlalchemy import select

from app.egress import Policy
from app.egress_proxy import EgressProxy
from app.errors import ApiError
from app.extensions import db
from app.files.service import referenced_keys
from app.models import StoredFile
from app.sessions import browsers
from app.sessions import service as sessions

from . import attachments, pages
from .actions import STRING, Finish, Observation, Outcome, Tool, params
from .mcp import McpFailure
from .secrets import PLACEHOLDER

from workers.browser.base import BrowserError, BrowserUnavailable

log = logging.getLogger(__name__)
MAX_OBSERVATION_CHARS = 20000
BROWSER_ONLY = ("click", "type", "press", "upload", "select", "scroll", "wait_for", "go_back", "switch_tab",
                "hover", "read_page")


class Environment:
    """The tools every agent has: answer, ask the user, wait, and the task's MCP tools."""

    mcp = None  # workers.agent.mcp.McpServers of the task, when it has MCP servers

    def __init__(self, task, should_stop=lambda: False):
        self.task = task
        self.should_stop = should_stop
        self.deadline = float("inf")  # the loop's wall-clock limit (time.monotonic()); long waits end there

    def tools(self, response_schema=None):
        answer = (params(["content"], content=response_schema) if response_schema is not None
                  else params(["text"], text=STRING))
        return [
            Tool("answer", "Finish the task with the final answer"
                 + (" (its `content` must match the response JSON Schema)." if response_schema else "."), answer),
            Tool("ask_user", "Ask the user a question and wait for the answer; use it when the task cannot "
                 "go on without information only the user has.", params(["question"], question=STRING)),
            Tool("wait", "Wait some seconds (e.g. for something to happen).",
                 params(["seconds"], seconds={"type": "number", "minimum": 0, "maximum": 60})),
        ] + (self.mcp.tools() if self.mcp else []) + self._upload_tool()

    def _upload_tool(self):
        if self.task.agent != "web" or not self.attachment_keys():
            return []
        return [Tool("upload", "Put an attached file into a file input of the page (browser modes).",
                     params(["key", "target"], key=STRING, target=STRING))]

    def url(self):
        return ""

    def trace_fields(self):
        """Extra fields of each action's trace entry."""
        return {}

    def execute(self, action):
        if self.mcp and action.name in self.mcp.tools_by_name:
            return self._call_mcp(self.mcp.tools_by_name[action.name], action.args)
        handler = getattr(self, f"do_{action.name}", None)
        if handler is None:  # a model can try something else; the built-in planner fails with this
            return Observation(self.unavailable(action.name), failed=True)
        try:
            return handler(**action.args)
        except TypeError as exc:  # the planner passed arguments the tool does not take
            return Observation(f"Invalid arguments for {action.name}: {exc}", failed=True)

    def unavailable(self, name):
        return f"The action '{name}' is not available to this agent."

    def do_answer(self, text=None, content=None):
        if content is not None:
            raise Finish(Outcome("success", "", structured=content))
        raise Finish(Outcome("success", text if text is not None else ""))

    def do_use_tool(self, server, tool, arguments=None):
        """The built-in step `use <label>.<tool> with {json}`."""
        found = self.mcp.find(server, tool) if self.mcp else None
        if found is None:
            tools = self.mcp.tools_by_name.values() if self.mcp else []
            offered = ", ".join(f"{t.server.label}.{t.name}" for t in tools)
            return Observation(f"No MCP tool '{server}.{tool}' in this task"
                               + (f" (it has: {offered})." if offered else " (it has no mcpServers)."), failed=True)
        return self._call_mcp(found, arguments or {})

    def do_upload(self, key, target):
        """The step `upload "<key>" into "<target>"`: an attachment into the page's file input."""
        browser = getattr(self, "browser", None)
        if browser is None:
            return Observation("The step 'upload' needs a browser: use executionMode 'cloud_browser' or "
                               "'client'.", failed=True)
        path, problem = self.attachment_path(key)
        if path is None:
            return Observation(problem, failed=True)
        try:
            browser.upload(target, path)
        except BrowserError as exc:
            return Observation(str(exc), self.url(), failed=True)
        return Observation(f"uploaded {os.path.basename(path)} into {target}", self.url())

    def _call_mcp(self, tool, arguments):
        if not isinstance(arguments, dict):
            return Observation(f"The arguments of {tool.server.label}.{tool.name} must be a JSON object.", failed=True)
        try:
            return self.mcp.call(tool, arguments)
        except McpFailure as exc:  # the server stopped answering: the task cannot rely on it
            raise Finish(Outcome("error", str(exc))) from None

    def attachment_keys(self):
        """The files this task may read: attachments and the SDK's inputVariables file references."""
        return referenced_keys(self.task.options or {})

    def attachment(self, key=None):
        """(StoredFile, None) or (None, why not)."""
        keys = self.attachment_keys()
        if key is None and len(keys) == 1:
            key = keys[0]
        if key not in keys:
            listed = ", ".join(keys) if keys else "none"
            return None, f"No attachment with key {key!r} in this task (attachments: {listed})."
        stored = db.session.execute(select(StoredFile).where(
            StoredFile.key == key, StoredFile.api_key_id == self.task.api_key_id)).scalar_one_or_none()
        if stored is None:
            return None, f"The attachment {key!r} no longer exists (files expire after FILE_TTL_SECONDS)."
        return stored, None

    def attachment_path(self, key):
        """The attachment written to a private temporary file (for a browser's file input); removed at close."""
        stored, problem = self.attachment(key)
        if stored is None:
            return None, problem
        folder = tempfile.mkdtemp(prefix="rd-upload-")
        path = os.path.join(folder, os.path.basename(stored.filename) or "upload")
        with open(path, "wb") as out:
            out.write(stored.data or b"")
        self._temporary = getattr(self, "_temporary", []) + [folder]
        return path, None

    def remove_temporary_files(self):
        import shutil

        for folder in getattr(self, "_temporary", []):
            shutil.rmtree(folder, ignore_errors=True)
        self._temporary = []

    def do_fail(self, reason):
        raise Finish(Outcome("error", reason))

    def do_ask_user(self, question):
        input_id = str(uuid.uuid4())
        # The SDK's shape (PromptForUserInputRequest: step_id, variables, prompt_message) plus ours.
        hitl = {"inputId": input_id,
                "action": {"name": "prompt_for_user_input", "question": question, "inputType": "text",
                           "step_id": input_id, "prompt_message": question,
                           "variables": [{"name": "answer", "type": "string", "required": True}]}}
        raise Finish(Outcome("input-required", question, hitl=hitl))

    def do_wait(self, seconds):
        seconds = float(seconds)
        deadline = min(time.monotonic() + seconds, self.deadline)
        while time.monotonic() < deadline and not self.should_stop():
            time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
        return Observation(f"waited {seconds:g} s")

    def close(self):
        pass


class GeneralEnvironment(Environment):
    """The general agent: no browser; the time in the task's zone and the task's attachments."""

    def tools(self, response_schema=None):
        return super().tools(response_schema) + [
            Tool("current_time", "The current date and time in the task's time zone.", params()),
            Tool("read_attachment", "Read an attached file by its key: text, CSV, JSON or PDF (its text).",
                 params(["key"], key=STRING)),
        ]

    def unavailable(self, name):
        return (f"The action '{name}' is not available to the general agent; start the prompt with "
                "/Operator for the web agent.")

    def time_zone(self):
        return (self.task.options or {}).get("timeZone") or "America/Los_Angeles"

    def do_current_time(self):
        zone = self.time_zone()
        now = datetime.now(ZoneInfo(zone))
        return Observation(f"{now.strftime('%A %Y-%m-%d %H:%M:%S')} ({zone}, UTC{now.strftime('%z')})")

    def do_read_attachment(self, key=None):
        stored, problem = self.attachment(key)
        if stored is None:
            return Observation(problem, failed=True)
        try:
            text = attachments.read_text(stored.filename, stored.content_type, stored.data or b"")
        except attachments.Unreadable as exc:
            return Observation(str(exc), failed=True)
        return Observation(text[:MAX_OBSERVATION_CHARS])


def unknown_placeholder(url):
    """Why a URL still holding a ${NAME} after substitution is not opened: NAME is no secret of the task, and a
    small model writes such URLs (go to ${USER}); opening one would send a made-up host name to DNS."""
    found = PLACEHOLDER.search(url or "")
    if found is None:
        return None
    return (f"navigation refused: ${{{found[1]}}} is not a secret placeholder of this task; "
            "go to a real URL (the task's own placeholders are filled in when the step runs).")


class HttpPageEnvironment(Environment):
    """The web agent in `cloud` mode: no browser, so pages are read over HTTP (behind the outbound-URL guard)."""

    def __init__(self, task, should_stop=lambda: False, policy=None, timeout=15):
        super().__init__(task, should_stop)
        self.policy, self.timeout = policy or Policy(), timeout
        self.page = None

    def tools(self, response_schema=None):
        return super().tools(response_schema) + [
            Tool("go_to", "Open a web page by URL; returns its title and text.", params(["url"], url=STRING)),
            Tool("extract", "The text of the elements of the current page matching a CSS selector "
                 "(any CSS 3 selector: tag, #id, .class, [attr^=value], combinators, :nth-child(), ...).",
                 params(["selector"], selector=STRING)),
        ]

    def url(self):
        return self.page.url if self.page else ""

    def unavailable(self, name):
        if name in BROWSER_ONLY:
            return (f"The step '{name}' needs a browser, and executionMode 'cloud' has none: it can only "
                    "open pages and read them (go to, extract). Use executionMode 'cloud_browser' or "
                    "'client' for browser steps.")
        return super().unavailable(name)

    def do_go_to(self, url):
        if unknown := unknown_placeholder(url):
            return Observation(unknown, self.url(), failed=True)
        try:
            self.page = pages.fetch(url, policy=self.policy, timeout=self.timeout, base=self.url())
        except pages.PageError as exc:
            return Observation(str(exc), failed=True)
        text = f"{self.page.title()}\n{self.page.text()}".strip()
        return Observation(text[:MAX_OBSERVATION_CHARS], self.page.url)

    def do_extract(self, selector="body"):
        if self.page is None:
            return Observation("No page is open: use go_to first.", failed=True)
        try:
            return Observation(self.page.extract(selector)[:MAX_OBSERVATION_CHARS], self.page.url)
        except pages.PageError as exc:
            return Observation(str(exc), self.page.url, failed=True)


class BrowserEnvironment(Environment):
    """The web agent in a real browser. Drivers (Selenium, the extension) implement `workers.browser.base.Browser`;
    subclasses say how to get one (`start_browser`). With `generateGif` a screenshot follows each action."""

    def __init__(self, task, should_stop, config):
        super().__init__(task, should_stop)
        self.config = config
        options = task.options or {}
        self.recorder = None
        if options.get("generateGif"):
            from workers.browser.recorder import GifRecorder

            self.recorder = GifRecorder(config.get("GIF_WIDTH", 800), config.get("GIF_MAX_FRAMES", 100))
        try:
            self.browser = self.start_browser(task, should_stop, config)
        except BrowserError as exc:  # not installed, Grid down: the task ends as error with this message
            raise ValueError(str(exc)) from None
        self._resume_page()

    def start_browser(self, task, should_stop, config):
        raise NotImplementedError

    def _resume_page(self):
        """After an input-required pause the browser was closed: reopen the page the run paused on."""
        task = self.task
        if task.hitl and "answer" in task.hitl and task.trace:
            url = next((e.get("url") for e in reversed(task.trace) if e.get("url")), None)
            if url:
                try:
                    self.browser.open(url)
                except BrowserError as exc:
                    log.warning("task %s: could not reopen %s after the pause: %s", task.id, url, exc)

    def tools(self, response_schema=None):
        target = {"type": "string", "description": "An element number from the page view ([12] → \"12\"), "
                  "its visible text, or a CSS selector."}
        return super().tools(response_schema) + [
            Tool("go_to", "Open a URL in the current tab; returns the page view (numbered interactive elements "
                 "and visible text).", params(["url"], url=STRING)),
            Tool("read_page", "The current page view again (numbers of new elements are marked with *).",
                 params()),
            Tool("click", "Click an element; returns the page view after the click.",
                 params(["target"], target=target)),
            Tool("type", "Clear a text field and type into it; ${NAME} stands for a secret.",
                 params(["text", "target"], text=STRING, target=target)),
            Tool("select", "Choose an option (its text or value) of a <select>.",
                 params(["option", "target"], option=STRING, target=target)),
            Tool("press", "Press a key on the focused element, with modifiers: Enter, Tab, Control+a.",
                 params(["key"], key=STRING)),
            Tool("scroll", "Scroll the page (or an element) down or up.",
                 params(["direction"], direction={"type": "string", "enum": ["down", "up", "top", "bottom"]},
                        target=target)),
            Tool("hover", "Move the mouse over an element.", params(["target"], target=target)),
            Tool("wait_for", "Wait until the page shows a text (at most `seconds`, default 10).",
                 params(["text"], text=STRING, seconds={"type": "number", "minimum": 0, "maximum": 60})),
            Tool("go_back", "Go back to the previous page.", params()),
            Tool("switch_tab", "Switch to tab N (numbered from 1 in the order they opened).",
                 params(["index"], index={"type": "integer", "minimum": 1})),
            Tool("extract", "The text of every element matching a CSS selector, one per line.",
                 params(["selector"], selector=STRING)),
        ]

    def url(self):
        return self.browser.current_url() if getattr(self, "browser", None) else ""

    def trace_fields(self):
        return {"browserSession": self.browser.label}

    def execute(self, action):
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
        refused = tuple(f"{r['method']} {_host_port(r['host'], r['port'])}: {r['reason']}" for r in refusals[:20])
        here = [r for r in refusals if f"//{_host_port(r['host'], r['port'])}" in (observation.url or "")
                or f"//{r['host']}/" in (observation.url or "")]
        if not here or observation.failed:
            return replace(observation, refused=refused)
        why = f"Navigation refused by the egress policy: {here[0]['reason']}"
        return replace(observation, text=why, refused=refused, failed=True)

    def record(self):
        try:
            self.recorder.add(self.browser.screenshot())
        except (BrowserError, OSError, ValueError):  # a recording must never fail the task
            log.warning("task %s: screenshot for the GIF failed", self.task.id, exc_info=True)

    def _view(self, prefix=""):
        reading = self.browser.read()
        text = f"{prefix}{reading.title}\n{reading.text}".strip()
        return Observation(text[:MAX_OBSERVATION_CHARS], reading.url)

    def _act(self, what, done=None):
        """Run one browser action; its failure becomes a failed observation that says why."""
        try:
            result = what()
            return done(result) if done else self._view()
        except BrowserError as exc:
            return Observation(str(exc), self.url(), failed=True)

    def do_go_to(self, url):
        from workers.browser.egress import check_typed_url

        if unknown := unknown_placeholder(url):
            return Observation(unknown, self.url(), failed=True)
        if "://" not in url and not url.startswith(("data:", "about:")):
            url = "https://" + url
        return self._act(lambda: self.browser.open(check_typed_url(url)))

    def do_read_page(self):
        return self._act(lambda: None)

    def do_click(self, target):
        return self._act(lambda: self.browser.click(target),
                         lambda info: self._view(f"clicked [{info.get('index')}] {info.get('label', '')}\n"))

    def do_type(self, text, target):
        # `text` holds real secret values here: the observation names the field, never the text.
        return self._act(lambda: self.browser.type(target, text),
                         lambda info: Observation(f"typed into [{info.get('index')}] {info.get('label', '')}",
                                                  self.url()))

    def do_select(self, option, target):
        return self._act(lambda: self.browser.select(target, option),
                         lambda info: Observation(f"selected {info.get('selected')!r} in [{info.get('index')}]",
                                                  self.url()))

    def do_press(self, key):
        return self._act(lambda: self.browser.press(key),
                         lambda _: self._view(f"pressed {key}\n"))

    def do_scroll(self, direction="down", target=None):
        return self._act(lambda: self.browser.scroll(direction, target),
                         lambda r: self._view(f"scrolled {direction} "
                                              f"(at {'the end' if r.get('atEnd') else r.get('scrollY')})\n"))

    def do_hover(self, target):
        return self._act(lambda: self.browser.hover(target),
                         lambda info: Observation(f"hovering over [{info.get('index')}]", self.url()))

    def do_wait_for(self, text, seconds=10):
        seconds = min(float(seconds), max(0.0, self.deadline - time.monotonic()))
        return self._act(lambda: self.browser.wait_for(text=text, timeout=seconds),
                         lambda _: Observation(f"the page shows {text!r}", self.url()))

    def do_go_back(self):
        return self._act(self.browser.back)

    def do_switch_tab(self, index):
        return self._act(lambda: self.browser.switch_tab(int(index)),
                         lambda _: self._view(f"tab {index}\n"))

    def do_extract(self, selector="body"):
        def found(texts):
            texts = [t for t in texts if t]
            if not texts:
                raise BrowserError(f"Nothing on {self.url() or 'the page'} matches {selector!r}.")
            return Observation("\n".join(texts)[:MAX_OBSERVATION_CHARS], self.url())
        return self._act(lambda: self.browser.extract(selector), found)

    def close(self):
        browser = getattr(self, "browser", None)
        try:
            if self.recorder is not None and browser is not None:
                self.store_gif()
        finally:
            if browser is not None:
                browser.close()

    def store_gif(self):
        from workers.browser.gifs import save_gif

        try:
            save_gif(self.task.id, self.recorder, self.config)
        except Exception:
            log.warning("task %s: the GIF could not be stored", self.task.id, exc_info=True)


def _host_port(host, port):
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


ENDINGS_WITHOUT_PAGE = ("answer", "ask_user", "fail", "wait", "current_time", "read_attachment")


class CloudBrowserEnvironment(BrowserEnvironment):
    """`executionMode: "cloud_browser"`: a fresh Chromium per task (or a Grid session), closed with the task,
    behind an egress proxy of its own (workers/browser/egress.py) that is started and stopped with it."""

    def start_browser(self, task, should_stop, config):
        from workers.browser.egress import HARDENING_ARGUMENTS, EgressProxy
        from workers.browser.selenium_driver import SeleniumBrowser, browsers_dir

        options = task.options or {}
        label = options.get("cloudBrowserSessionName") or f"task-{task.id}"
        width, _, height = str(config.get("BROWSER_WINDOW_SIZE", "1280x900")).partition("x")
        # Started first and waited for last: Chromium starts while the proxy does.
        self.egress = EgressProxy(config, label).start()
        browser = None
        try:
            browser = SeleniumBrowser(
                label=label,
                chromium_path=config.get("CHROMIUM_PATH", "/usr/bin/chromium"),
                chromedriver_path=config.get("CHROMEDRIVER_PATH", "/usr/bin/chromedriver"),
                remote_url=config.get("SELENIUM_REMOTE_URL"), proxy=self.egress.address,
                extra_arguments=HARDENING_ARGUMENTS,
                window_size=(int(width), int(height or 900)), locale=config.get("BROWSER_LOCALE", "en-US"),
                time_zone=options.get("timeZone") or "America/Los_Angeles",
                download_dir=os.path.join(config["DOWNLOAD_DIR"], "remote-dispatch", task.id),
                profile_root=browsers_dir(config["VAR_DIR"]),
                page_load_timeout=config.get("BROWSER_PAGE_LOAD_TIMEOUT_SECONDS", 30), should_stop=should_stop)
            self.egress.wait_ready()
            self.egress.new_refusals()  # Chromium's own start-up requests are not the first step's
            return browser
        except BaseException:
            if browser is not None:
                browser.close()
            self.egress.stop()
            raise

    def close(self):
        try:
            super().close()
        finally:
            egress = getattr(self, "egress", None)
            if egress is not None:
                egress.stop()


class ClientBrowserEnvironment(BrowserEnvironment):
    """`executionMode: "client"`: the caller's own window, driven by our extension through the window channel."""

    def start_browser(self, task, should_stop, config):
        from workers.browser.extension_driver import ExtensionBrowser

        # The user's own browser, but the agent's navigation follows the service's outbound policy.
        return ExtensionBrowser(task.browser_window_id, task.id, timeout=config["WINDOW_COMMAND_TIMEOUT_SECONDS"],
                                check_url=Policy.from_config(config).check_url,
                                should_stop=should_stop).begin(task.prompt)

    def _act(self, what, done=None):
        try:
            result = what()
            return done(result) if done else self._view()
        except BrowserUnavailable as exc:  # the user closed the tab or window: no later step can work
            raise Finish(Outcome("error", str(exc))) from None
        except BrowserError as exc:
            return Observation(str(exc), self.url(), failed=True)

    def url(self):
        try:
            return super().url()
        except BrowserError:
            return ""

    def store_gif(self):
        super().store_gif()
        data = self.recorder.gif()
        if data:
            try:
                self.browser.save_gif(data)  # also into the user's Downloads/remote-dispatch/
            except BrowserError:
                log.warning("task %s: the extension could not save the GIF", self.task.id, exc_info=True)


class KeptSessionEnvironment(BrowserEnvironment):
    """`cloudBrowserSessionId`: the session's kept browser, one task at a time; it stays open after the task."""

    POLL_SECONDS = 0.25

    def start_browser(self, task, should_stop, config):
        from workers.browser.kept_session import KeptSessionBrowser

        deadline = time.monotonic() + config["TASK_TIMEOUT_SECONDS"]
        try:
            while (session := sessions.acquire(task.cloud_session_id, task.id)) is None:
                if should_stop() or time.monotonic() > deadline:  # another task of the session holds it
                    raise BrowserUnavailable("The cloud browser session stayed busy with another task.")
                time.sleep(self.POLL_SECONDS)
        except ApiError as exc:
            raise BrowserUnavailable(exc.message) from None
        self.session_id = session.id
        # The session's own egress proxy (app/sessions/browsers.py) checks its browser's connections; its
        # refusal log, read here, puts what it refused during each step into the trace. Never stopped here.
        self.egress = EgressProxy(config, directory=browsers.egress_dir(config, session.id))
        self.egress.new_refusals()  # earlier tasks' refusals are not this task's
        try:
            return KeptSessionBrowser(
                webdriver_url=session.webdriver_url, webdriver_session=session.webdriver_session,
                label=session.name or session.id, remote=session.host == "grid",
                uploads=None if session.host == "grid" else browsers.session_dir(config, session.id) / "uploads",
                page_load_timeout=config.get("BROWSER_PAGE_LOAD_TIMEOUT_SECONDS", 30), should_stop=should_stop)
        except BrowserUnavailable:
            sessions.release(session.id, task.id)
            raise

    def close(self):
        try:
            super().close()
        finally:
            if getattr(self, "session_id", None):
                sessions.release(self.session_id, self.task.id)


# executionMode → browser environment class for the web agent; the browser issues register theirs here.
BROWSER_ENVIRONMENTS = {"cloud_browser": CloudBrowserEnvironment, "client": ClientBrowserEnvironment}


def environment_for(task, should_stop, config):
    if task.agent != "web":
        return GeneralEnvironment(task, should_stop)
    if task.cloud_session_id:
        return KeptSessionEnvironment(task, should_stop, config)
    if task.execution_mode == "cloud":
        return HttpPageEnvironment(task, should_stop, policy=Policy.from_config(config),
                                   timeout=config["FETCH_TIMEOUT_SECONDS"])
    browser = BROWSER_ENVIRONMENTS.get(task.execution_mode)
    if browser is None:
        raise ValueError(f"The web agent has no '{task.execution_mode}' browser in this deployment yet; "
                         "use executionMode 'cloud' to read pages without a browser.")
    return browser(task, should_stop, config)
