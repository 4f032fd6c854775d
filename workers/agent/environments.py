"""Environments execute actions: the general agent's server-side tools and the web agent's page reader."""
import time
import uuid
from datetime import datetime
from zoneinfo import ZoneInfo

from sqlalchemy import select

from app.extensions import db
from app.models import StoredFile

from . import pages
from .actions import STRING, Finish, Observation, Outcome, Tool, params

MAX_OBSERVATION_CHARS = 20000
BROWSER_ONLY = ("click", "type", "press")


class Environment:
    """The tools every agent has: answer, ask the user, wait."""

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
        ]

    def url(self):
        return ""

    def execute(self, action):
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

    def do_fail(self, reason):
        raise Finish(Outcome("error", reason))

    def do_ask_user(self, question):
        hitl = {"inputId": str(uuid.uuid4()),
                "action": {"name": "prompt_for_user_input", "question": question, "inputType": "text"}}
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
    """The general agent: no browser; the time in the task's zone and the task's attachments.

    MCP tools join here when MCP support lands (they extend `tools()` and `execute()`).
    """

    def tools(self, response_schema=None):
        return super().tools(response_schema) + [
            Tool("current_time", "The current date and time in the task's time zone.", params()),
            Tool("read_attachment", "Read an attached file's text by its key.", params(["key"], key=STRING)),
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
        keys = [a["key"] for a in (self.task.options or {}).get("attachments") or []]
        if key is None and len(keys) == 1:
            key = keys[0]
        stored = db.session.execute(select(StoredFile).where(
            StoredFile.key == key, StoredFile.api_key_id == self.task.api_key_id)).scalar_one_or_none()
        if stored is None:
            return Observation(f"No attachment with key {key!r}.", failed=True)
        data = stored.data or b""
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return Observation(f"{stored.filename} ({stored.content_type or 'binary'}, {len(data)} bytes) "
                               "is not a text file.", failed=True)
        return Observation(f"{stored.filename}:\n{text[:MAX_OBSERVATION_CHARS]}")


class HttpPageEnvironment(Environment):
    """The web agent in `cloud` mode: no browser, so pages are read over HTTP (behind the outbound-URL guard)."""

    def __init__(self, task, should_stop=lambda: False, allow_private=False, timeout=15):
        super().__init__(task, should_stop)
        self.allow_private, self.timeout = allow_private, timeout
        self.page = None

    def tools(self, response_schema=None):
        return super().tools(response_schema) + [
            Tool("go_to", "Open a web page by URL; returns its title and text.", params(["url"], url=STRING)),
            Tool("extract", "The text of the elements of the current page matching a CSS selector "
                 "(tag, #id, .class, [attr=value], descendant and '>' combinators).",
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
        try:
            self.page = pages.fetch(url, allow_private=self.allow_private, timeout=self.timeout, base=self.url())
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


# executionMode → browser environment class for the web agent; the browser issues register theirs here.
BROWSER_ENVIRONMENTS = {}


def environment_for(task, should_stop, config):
    if task.agent != "web":
        return GeneralEnvironment(task, should_stop)
    if task.execution_mode == "cloud":
        return HttpPageEnvironment(task, should_stop, allow_private=config["ALLOW_PRIVATE_URLS"],
                                   timeout=config["FETCH_TIMEOUT_SECONDS"])
    browser = BROWSER_ENVIRONMENTS.get(task.execution_mode)
    if browser is None:
        raise ValueError(f"The web agent has no '{task.execution_mode}' browser in this deployment yet; "
                         "use executionMode 'cloud' to read pages without a browser.")
    return browser(task, should_stop, config)
