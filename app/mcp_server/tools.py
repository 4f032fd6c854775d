"""The MCP tools: each a JSON Schema, a description a model can act on, and calls of the REST API (rest.py) with the
caller's key. Nothing here decides what a key may do: the REST API does, as for any other client."""
import base64
import contextlib
import json
import time
import uuid

import jsonschema
import mcp_types as types

from .rest import ToolError

API = "/fast/v2"
TASKS = API + "/remote-dispatch"
POLL_SECONDS = 0.5  # how often a waiting tool reads the task (for its steps as they happen)
DEFAULT_WAIT_SECONDS = 60
MAX_WAIT_SECONDS = 300  # below the clients' usual request limits
MAX_TEXT_BYTES = 200_000  # a file read back as text; larger or binary files come as a resource blob
# Submit fields that are another tool's business (replay_script) or the tool's own (waiting).
NOT_RUN_OPTIONS = ("wait", "replayOf", "scriptId", "script")

_ID = {"type": "string", "minLength": 1, "maxLength": 64}
_WAIT = {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_SECONDS, "default": DEFAULT_WAIT_SECONDS,
         "description": f"Seconds to wait for the task to finish or ask a question (0: return at once; at most "
                        f"{MAX_WAIT_SECONDS}). A task still running then is returned as pending: call get_task "
                        "with its requestId to wait more."}
_WINDOW = {**_ID, "description": "The browserWindowId that session_create returned"}
_TARGET = {
    "selector": {"type": "string", "minLength": 1, "description": "A CSS selector of the element"},
    "text": {"type": "string", "minLength": 1,
             "description": "The element's visible text or label (a button's text, a field's label)"},
}
_ONE_TARGET = [{"required": ["selector"]}, {"required": ["text"]}]


def _schema(properties, required=(), **extra):
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False,
            **extra}


STATIC = {
    "get_task": (
        "Get a task by its requestId: status (pending, success, error, input-required), output, the steps so far "
        "(progress.actionTrace while pending), files it downloaded, usage. With waitSeconds, waits until it is over "
        "or asks a question.",
        _schema({"requestId": _ID, "waitSeconds": {**_WAIT, "default": 0}}, ["requestId"])),
    "answer_task": (
        "Answer the question of a task in status input-required (its output holds the question); the task resumes "
        "and this waits for it like run_task.",
        _schema({"requestId": _ID, "answer": {"type": "string", "minLength": 1, "maxLength": 100_000},
                 "waitSeconds": _WAIT}, ["requestId", "answer"])),
    "cancel_task": (
        "Cancel a task that is pending or waiting for an answer; it ends as error 'cancelled'.",
        _schema({"requestId": _ID}, ["requestId"])),
    "list_tasks": (
        "List this key's tasks, newest first (requestId, status, output). Pass nextCursor back as cursor for "
        "older ones.",
        _schema({"status": {"type": "string", "enum": ["pending", "success", "error", "input-required"]},
                 "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
                 "cursor": {"type": "string"}})),
    "session_create": (
        "Start a kept cloud browser session: a server-side Chromium that stays open between calls (logins carry "
        "over) until session_stop or idle for timeoutSeconds. Returns sessionId (for session_stop, and run_task's "
        "cloudBrowserSessionId) and browserWindowId (for the session_* page tools and run_task's browserWindowId).",
        _schema({"name": {"type": "string", "maxLength": 200},
                 "timeoutSeconds": {"type": "integer", "minimum": 1,
                                    "description": "Idle limit in seconds (the service's default when omitted)"},
                 "profile": {"type": "object", "description": "A named profile of the key: {name, persist}"}})),
    "session_navigate": (
        "Open a URL in the session's browser (the current tab) and wait for the page to load.",
        _schema({"browserWindowId": _WINDOW, "url": {"type": "string", "minLength": 1}},
                ["browserWindowId", "url"])),
    "session_click": (
        "Click an element of the session's current page, named by a CSS selector or by its visible text.",
        _schema({"browserWindowId": _WINDOW, **_TARGET}, ["browserWindowId"], anyOf=_ONE_TARGET)),
    "session_type": (
        "Type a value into a field of the session's current page (its previous value is replaced), named by a "
        "CSS selector or by its label; pressEnter submits it.",
        _schema({"browserWindowId": _WINDOW, **_TARGET, "value": {"type": "string"},
                 "pressEnter": {"type": "boolean", "default": False}}, ["browserWindowId", "value"],
                anyOf=_ONE_TARGET)),
    "session_read": (
        "Read the session's current page: its URL and its content as text (interactive elements marked).",
        _schema({"browserWindowId": _WINDOW}, ["browserWindowId"])),
    "session_screenshot": (
        "A PNG screenshot of the session's current page, returned as an image.",
        _schema({"browserWindowId": _WINDOW}, ["browserWindowId"])),
    "session_stop": (
        "Stop a kept session: its browser closes and its window takes no more calls.",
        _schema({"sessionId": _ID}, ["sessionId"])),
    "list_files": (
        "List this key's files (uploads and files its tasks' browsers downloaded), newest first; with requestId, "
        "only the files that task downloaded. Each has a key for read_file.",
        _schema({"requestId": _ID, "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
                 "cursor": {"type": "string"}})),
    "read_file": (
        "Read one of this key's files by its key (from list_files or a task's response.files): text as text, an "
        "image as an image, anything else as a base64 resource.",
        _schema({"key": {"type": "string", "minLength": 1, "maxLength": 300}}, ["key"])),
    "replay_script": (
        "Replay a recorded run without a model: a saved script (scriptId) or a finished browser task's own script "
        "(replayOf: its requestId), with new inputVariables ({{name}} in the script) and secretVariables "
        "(${name}). Waits like run_task, with the same progress.",
        _schema({"scriptId": _ID, "replayOf": _ID,
                 "inputVariables": {"type": "object", "additionalProperties": {"type": "string"}},
                 "secretVariables": {"type": "object", "additionalProperties": {"type": "string"}},
                 "executionMode": {"type": "string", "enum": ["cloud_browser", "client"], "default": "cloud_browser"},
                 "browserWindowId": {"type": "string"}, "cloudBrowserSessionId": {"type": "string"},
                 "waitSeconds": _WAIT}, anyOf=[{"required": ["scriptId"]}, {"required": ["replayOf"]}])),
}

RUN_TASK = (
    "Run an automation task and wait for it (up to waitSeconds). The prompt is natural language; a prompt "
    "starting with /Operator uses the web agent in a browser (executionMode cloud_browser: a fresh headless "
    "browser; or a kept session: cloudBrowserSessionId + browserWindowId), any other prompt the general agent "
    "(executionMode cloud, no browser). Without a language model configured on the service, each prompt line is a "
    "step of the built-in planner (go to URL, click \"text\", type ${secret} into \"label\", extract css, answer "
    "text). Progress notifications carry the steps as they run. Returns the finished task (status, output, files, "
    "usage), or, still running after waitSeconds, the task as pending with its requestId: call get_task to wait "
    "more. A task that asks a question returns as input-required: answer it with answer_task. Other fields are "
    "the submit options of the REST API (docs/api.md).")


def submit_schema(openapi):
    """run_task's schema: the Submit body of the instance's own OpenAPI document, as JSON Schema, with waitSeconds
    and executionMode defaulting to cloud (a client-mode task needs a browserWindowId)."""
    components = openapi["components"]["schemas"]
    schema = _json_schema(components["Submit"], components, depth=0)
    for name in NOT_RUN_OPTIONS:
        schema["properties"].pop(name, None)
    schema.pop("anyOf", None)  # the client-mode rule: the service answers it, with its own message
    schema["properties"]["executionMode"]["default"] = "cloud"
    schema["properties"]["waitSeconds"] = _WAIT
    schema["required"] = ["prompt"]
    schema["additionalProperties"] = False  # a misspelt option is refused by name, not ignored
    return schema


def _json_schema(node, components, depth):
    """OpenAPI 3.0 → JSON Schema: $refs inlined, `nullable` as a null type."""
    if depth > 12:
        return {}
    if isinstance(node, list):
        return [_json_schema(item, components, depth) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return _json_schema(components[node["$ref"].rsplit("/", 1)[1]], components, depth + 1)
    out = {k: _json_schema(v, components, depth) for k, v in node.items()
           if k not in ("nullable", "readOnly", "writeOnly", "example", "title")}
    if node.get("nullable"):
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


class Tools:
    """The tools of one caller (one key), over its REST client."""

    def __init__(self, rest, openapi_cache=None):
        self.rest = rest
        self._openapi_cache = openapi_cache if openapi_cache is not None else {}

    def definitions(self):
        """{name: (description, inputSchema)}; run_task's schema is read from the instance's OpenAPI document."""
        if "run_task" not in self._openapi_cache:
            openapi = self.rest.call("GET", "/openapi.json").checked().json()
            self._openapi_cache["run_task"] = (RUN_TASK, submit_schema(openapi))
        return {"run_task": self._openapi_cache["run_task"], **STATIC}

    def listed(self):
        return [types.Tool(name=name, description=description, input_schema=schema)
                for name, (description, schema) in self.definitions().items()]

    def call(self, name, arguments, progress=None):
        """A CallToolResult; the service's refusals and bad arguments as isError with their {error, message}."""
        definitions = self.definitions()
        arguments = arguments or {}
        try:
            _validate(name, definitions[name][1], arguments)
            return getattr(self, "_" + name)(dict(arguments), progress or (lambda n, message: None))
        except ToolError as exc:
            return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(exc.body))],
                                        is_error=True)

    # Tasks
    def _run_task(self, args, progress):
        wait = args.pop("waitSeconds", DEFAULT_WAIT_SECONDS)
        args.setdefault("executionMode", "cloud")
        return self._submit_and_wait(args, wait, progress)

    def _replay_script(self, args, progress):
        wait = args.pop("waitSeconds", DEFAULT_WAIT_SECONDS)
        args.setdefault("executionMode", "cloud_browser")
        return self._submit_and_wait(args, wait, progress)

    def _submit_and_wait(self, body, wait, progress):
        with self._waiting(wait):  # taken before the submit, as wait: true does: refused, nothing was submitted
            request_id = self.rest.call("POST", TASKS, body).checked().json()["requestId"]
            return _json_result(self._waited(request_id, wait, progress))

    def _get_task(self, args, progress):
        wait = args.get("waitSeconds", 0)
        with self._waiting(wait):
            return _json_result(self._waited(args["requestId"], wait, progress))

    def _answer_task(self, args, progress):
        wait = args.get("waitSeconds", DEFAULT_WAIT_SECONDS)
        with self._waiting(wait):
            self.rest.call("POST", f"{TASKS}/responses/{args['requestId']}/input", {"answer": args["answer"]}).checked()
            return _json_result(self._waited(args["requestId"], wait, progress))

    def _cancel_task(self, args, _):
        return _json_result(self.rest.call("POST", f"{TASKS}/responses/{args['requestId']}/cancel").checked().json())

    def _list_tasks(self, args, _):
        return _json_result(self.rest.call("GET", f"{TASKS}/responses", query=args).checked().json())

    def _waiting(self, seconds):
        return self.rest.waiting() if seconds > 0 else contextlib.nullcontext()

    def _waited(self, request_id, seconds, progress):
        """The task once it is over or asks a question, or as it is after `seconds`; each new step reported."""
        task = self._polled(request_id, seconds, progress)
        if task["status"] == "pending":
            task["note"] = (f"Still running after {seconds:g} s: call get_task with requestId "
                            f"{request_id!r} and waitSeconds to wait more, or cancel_task to stop it.")
        elif task["status"] == "input-required":
            task["note"] = "The task asks a question (response.output): answer it with answer_task."
        return task

    def _polled(self, request_id, seconds, progress):
        deadline = time.monotonic() + seconds
        reported = 0
        while True:
            task = self.rest.call("GET", f"{TASKS}/responses/{request_id}").checked().json()
            steps = ((task.get("progress") or {}).get("actionTrace") if task["status"] == "pending"
                     else (task.get("response") or {}).get("actionTrace")) or []
            for step in steps[reported:]:
                reported += 1
                progress(reported, _step_line(step))
            if task["status"] != "pending" or time.monotonic() >= deadline:
                return task
            time.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))

    # Kept sessions
    def _session_create(self, args, _):
        body = {"session_name": args.get("name"), "session_timeout": args.get("timeoutSeconds"),
                "profile": args.get("profile")}
        created = self.rest.call("POST", API + "/cloud-browser/create-and-initialize-cloud-browser-session",
                                 {k: v for k, v in body.items() if v is not None}).checked().json()
        return _json_result({"sessionId": created["session_id"], "browserWindowId": created["browser_window_id"]})

    def _session_stop(self, args, _):
        return _json_result(self.rest.call("POST", API + "/cloud-browser/stop-cloud-browser-session",
                                           {"session_id": args["sessionId"]}).checked().json())

    def _action(self, window_id, action):
        """One direct action in the session's browser (POST /extension-actions): its data, or a ToolError."""
        answer = self.rest.call("POST", API + "/extension-actions", {
            "action": action, "actionExecutionId": str(uuid.uuid4()), "browserWindowId": window_id}).checked().json()
        if answer["status"] != "success":
            raise ToolError("Action Failed", answer.get("error") or f"The action {action['name']} {answer['status']}.")
        return json.loads(answer["data"]) if answer.get("data") else None

    def _session_navigate(self, args, _):
        self._action(args["browserWindowId"], {"name": "go_to_url", "url": args["url"]})
        return _json_result(self._action(args["browserWindowId"], {"name": "get_url"}))

    def _session_click(self, args, _):
        self._action(args["browserWindowId"], {"name": "agentic_selector", "action": {"type": "click"},
                                               "selectors": _selectors(args)})
        return _json_result({"clicked": True, **self._action(args["browserWindowId"], {"name": "get_url"})})

    def _session_type(self, args, _):
        self._action(args["browserWindowId"], {
            "name": "agentic_selector", "selectors": _selectors(args),
            "action": {"type": "fill", "value": args["value"], "pressEnter": bool(args.get("pressEnter"))}})
        return _json_result({"typed": True})

    def _session_read(self, args, _):
        url = self._action(args["browserWindowId"], {"name": "get_url"})["url"]
        text = self._action(args["browserWindowId"], {"name": "get_simplified_html"})["html"]
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"URL: {url}\n\n{text}")])

    def _session_screenshot(self, args, _):
        shot = self._action(args["browserWindowId"], {"name": "get_screenshot"})
        return types.CallToolResult(content=[types.ImageContent(
            type="image", data=shot["base64_content"], mime_type=shot.get("mime_type") or "image/png")])

    # Files
    def _list_files(self, args, _):
        if args.get("requestId"):
            task = self.rest.call("GET", f"{TASKS}/responses/{args['requestId']}").checked().json()
            return _json_result({"files": (task.get("response") or {}).get("files") or []})
        return _json_result(self.rest.call("GET", API + "/files", query=args).checked().json())

    def _read_file(self, args, _):
        reply = self.rest.call("GET", f"{API}/files/{args['key']}").checked()
        mime = reply.content_type.split(";")[0].strip() or "application/octet-stream"
        if mime.startswith("image/"):
            return types.CallToolResult(content=[types.ImageContent(
                type="image", data=base64.b64encode(reply.data).decode(), mime_type=mime)])
        if len(reply.data) <= MAX_TEXT_BYTES:
            try:
                return types.CallToolResult(content=[types.TextContent(type="text", text=reply.data.decode())])
            except UnicodeDecodeError:
                pass
        return types.CallToolResult(content=[types.EmbeddedResource(type="resource", resource=types.BlobResourceContents(
            uri=f"remote-dispatch:file/{args['key']}", mime_type=mime, blob=base64.b64encode(reply.data).decode()))])


def _validate(name, schema, arguments):
    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(arguments), key=lambda e: list(e.path))
    if errors:
        problems = "; ".join(f"{'.'.join(map(str, e.path)) or 'arguments'}: {e.message}" for e in errors[:5])
        raise ToolError("Invalid Arguments", f"The arguments of {name} do not fit its input schema: {problems}.")


def _selectors(args):
    if args.get("selector"):
        return {"domPath": {"value": args["selector"]}}
    return {"textContent": {"value": args["text"]}}


def _step_line(step):
    where = f" ({step['url']})" if step.get("url") else ""
    return f"{step.get('action', '')}{where}"[:1000]


def _json_result(body):
    return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(body, ensure_ascii=False))])

