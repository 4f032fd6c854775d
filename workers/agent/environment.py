"""The base environment: the tools every agent has (answer, ask the user, wait, MCP tools, attachments)."""
import os
import shutil
import tempfile
import time
import uuid

from sqlalchemy import select

from app.extensions import db
from app.files.service import referenced_keys
from app.models import StoredFile

from .actions import ANSWER_VARIABLE, EXPECT, STRING, Finish, Observation, Outcome, Tool, params
from .mcp import McpFailure

from workers.browser.base import BrowserError

MAX_OBSERVATION_CHARS = 20000  # a tool result that is not a page view (attachments, cloud-mode pages)


class Environment:
    """The tools every agent has: answer, ask the user, wait, and the task's MCP tools."""

    mcp = None  # workers.agent.mcp.McpServers of the task, when it has MCP servers
    browser = None  # a workers.browser.base.Browser in the browser modes
    resumed = None  # after an input-required pause: the trace entry saying how the browser was taken up again

    def __init__(self, task, should_stop=lambda: False):
        self.task = task
        self.should_stop = should_stop
        self.deadline = float("inf")  # the loop's wall-clock limit (time.monotonic()); long waits end there
        self._temporary = []  # folders of attachments written for a file input, removed at close
        # Trace entries of the environment's own: `notes` open the run's trace (a profile loaded), `end_notes` come
        # before its final entry (a profile saved at close).
        self.notes, self.end_notes = [], []

    def tools(self, response_schema=None):
        expect = {"expect": EXPECT} if self.task.agent == "web" else {}
        answer = (params(["content"], content=response_schema, **expect) if response_schema is not None
                  else params(["text"], text=STRING, **expect))
        return [
            Tool("answer", "Finish the task with the final answer"
                 + (" (`content` must match the response JSON Schema)." if response_schema else "."), answer),
            Tool("ask_user", "Ask the user for information only they have.", params(["question"], question=STRING)),
            Tool("wait", "Wait some seconds.",
                 params(["seconds"], seconds={"type": "number", "minimum": 0, "maximum": 60})),
        ] + (self.mcp.tools() if self.mcp else []) + self._upload_tool()

    def _upload_tool(self):
        if self.task.agent != "web" or not self.attachment_keys():
            return []
        return [Tool("upload", "Put an attached file into a file input of the page (browser modes).",
                     params(["key", "target"], key=STRING, target=STRING))]

    def url(self):
        return ""

    def first_observation(self):
        """What the model is shown before its first step (the page a task starts on), or ""."""
        return ""

    def trace_fields(self):
        """Extra fields of each action's trace entry."""
        return {}

    def go_live(self, person):
        """Let live viewers watch (browser modes with a browser the live view can reach)."""

    def show_step(self, description=None, url=None):
        """For live viewers (browser modes): the step about to run, or the URL (secrets redacted) it left."""

    def between_steps(self):
        """Trace entries of a person's takeover that ended (browser modes wait here while one goes on)."""
        return []

    def fresh_page(self):
        """The page as it is now (an Observation), or None."""
        return None

    def execute(self, action):
        if self.mcp and action.name in self.mcp.tools_by_name:
            return self._call_mcp(self.mcp.tools_by_name[action.name], action.args)
        handler = getattr(self, f"do_{action.name}", None)
        if handler is None:  # a model can try something else; the built-in planner fails with this
            return Observation(self.unavailable(action.name), failed=True)
        args = action.args
        if isinstance(args.get("target"), int) and not isinstance(args["target"], bool):  # a model's element number
            args = {**args, "target": str(args["target"])}
        try:
            return handler(**args)
        except TypeError as exc:  # the planner passed arguments the tool does not take
            return Observation(f"Invalid arguments for {action.name}: {exc}", failed=True)

    def unavailable(self, name):
        return f"The action '{name}' is not available to this agent."

    def do_answer(self, text=None, content=None, expect=None):
        expect = expect if isinstance(expect, str) and expect.strip() else None
        if content is not None:
            raise Finish(Outcome("success", "", structured=content, expect=expect))
        raise Finish(Outcome("success", text if text is not None else "", expect=expect))

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
        if self.browser is None:
            return Observation("The step 'upload' needs a browser: use executionMode 'cloud_browser' or "
                               "'client'.", failed=True)
        path, problem = self.attachment_path(key)
        if path is None:
            return Observation(problem, failed=True)
        try:
            self.browser.upload(target, path)
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
        self._temporary.append(folder)
        return path, None

    def remove_temporary_files(self):
        for folder in self._temporary:
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
                           "variables": [{"name": ANSWER_VARIABLE, "type": "string", "required": True}]}}
        raise Finish(Outcome("input-required", question, hitl=hitl))

    def paused_seconds(self):
        """Seconds this run has been paused inside steps for a person's control (browser modes), so far."""
        return 0.0

    def do_wait(self, seconds):
        """Wait `seconds`; a person's takeover meanwhile pauses it (inside should_stop()), and the wait then goes on
        for what it had left."""
        seconds, paused = float(seconds), self.paused_seconds()
        ends = time.monotonic() + seconds
        while not self.should_stop():
            ends_now = min(ends + self.paused_seconds() - paused, self.deadline)
            if time.monotonic() >= ends_now:
                break
            time.sleep(min(0.25, max(0.0, ends_now - time.monotonic())))
        held = self.paused_seconds() - paused
        if held:
            text = f"waited {seconds:g} s (paused {held:.1f} s in the middle while a person had control, then went on)"
            return Observation(text, trace_result=text)
        return Observation(f"waited {seconds:g} s")

    def pause(self, keep_seconds=0):
        """At an input-required pause: (snapshot of the browser's state or None, whether the browser was kept). Only a
        cloud_browser task's browser is kept (workers/agent/browser_modes.py); the rest closes as at any ending."""
        self.close()
        return None, False

    def close(self):
        pass
