"""A scripted OpenAI-compatible chat-completions server on loopback that records every request it receives.

It checks each request as strictly as the real servers do (OpenAI, llama.cpp's server): a request in a
shape one of them refuses gets HTTP 400 with the reason, so a protocol slip fails here too.
"""
import json
import re
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def tool_call(name, **arguments):
    """A scripted reply: the model calls one tool."""
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def tool_calls(*calls):
    """A scripted reply: several tool calls at once; each is tool_call(...)'s single call or raw_call(...)."""
    return {"tool_calls": [call["tool_calls"][0] for call in calls]}


def raw_call(name, arguments):
    """A scripted reply: one tool call whose arguments are exactly this text (valid JSON or not)."""
    return {"tool_calls": [{"name": name, "raw": arguments}]}


def text(content):
    """A scripted reply: the model answers in plain text (no tool call)."""
    return {"content": content}


CHECK_TOOL = "task_done"  # workers/planners/completion_check.py


def check(done, reason="scripted"):
    """A scripted reply to the completion check: done "yes" or "no" with a reason."""
    return tool_call(CHECK_TOOL, done="yes" if done else "no", reason=reason)


def is_check(body):
    """Is this request the agent's completion check (only its tool offered)?"""
    return [t.get("function", {}).get("name") for t in body.get("tools") or ()] == [CHECK_TOOL]


def _for_check(reply):
    return isinstance(reply, dict) and [c.get("name") for c in reply.get("tool_calls") or ()] == [CHECK_TOOL]


def held(seconds, reply):
    """A scripted reply sent only after `seconds` (a model computing); if the client drops the connection
    meanwhile, nothing is sent and the drop is counted in ScriptedModel.dropped."""
    return {"hold": seconds, "then": reply}


def failure(status, message="scripted failure"):
    """A scripted reply: the server answers with an HTTP error."""
    return {"status": status, "message": message}


ROLES = {"system": {"content", "name"}, "developer": {"content", "name"}, "user": {"content", "name"},
         "assistant": {"content", "name", "tool_calls", "refusal"}, "tool": {"content", "tool_call_id"}}
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def protocol_problem(body):
    """Why a chat-completions request would be refused by a strict server, or None."""
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        return "'model' must be a string"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array"
    pending = []  # tool call ids of the latest assistant message not answered yet
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ROLES:
            return f"{where}: unknown role {role!r}"
        extra = set(message) - ROLES[role] - {"role"}
        if extra:
            return f"{where}: unexpected fields {sorted(extra)}"
        if role != "tool" and pending:
            return f"{where}: the tool calls {pending} have no tool message answering them"
        content = message.get("content")
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                return f"{where}: tool message for {message.get('tool_call_id')!r}, which no pending call has"
            pending.remove(message["tool_call_id"])
            if not isinstance(content, str):
                return f"{where}.content: Input should be a valid string"
        elif role == "assistant":
            # llama.cpp's server refuses null ("Input should be a valid string"), and its chatml templates
            # fail on a message without content ("'dict object' has no attribute 'content'", HTTP 500).
            if "content" not in message:
                return f"{where}: 'dict object' has no attribute 'content'"
            if not isinstance(content, str):
                return f"{where}.content: Input should be a valid string"
            calls = message.get("tool_calls")
            if calls is not None:
                if not isinstance(calls, list) or not calls:
                    return f"{where}.tool_calls must be a non-empty array"
                for call in calls:
                    problem = _call_problem(call)
                    if problem:
                        return f"{where}.tool_calls: {problem}"
                pending = [call["id"] for call in calls]
                if len(set(pending)) != len(pending):
                    return f"{where}.tool_calls: duplicate ids"
        elif role == "user" and isinstance(content, list):  # OpenAI content parts: text and image_url
            for part in content:
                kind = part.get("type") if isinstance(part, dict) else None
                if kind == "text" and isinstance(part.get("text"), str):
                    continue
                if kind == "image_url" and isinstance((part.get("image_url") or {}).get("url"), str):
                    continue
                return f"{where}.content: invalid content part {str(part)[:100]}"
        elif not isinstance(content, str):
            return f"{where}.content: Input should be a valid string"
    if pending:
        return f"the tool calls {pending} have no tool message answering them"
    return _tools_problem(body.get("tools"), body.get("tool_choice"))


def _call_problem(call):
    if not isinstance(call, dict) or call.get("type") != "function" or not isinstance(call.get("id"), str) \
            or not call["id"]:
        return "each call needs a non-empty 'id' and 'type': 'function'"
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        return "each call needs a function name"
    if not isinstance(function.get("arguments"), str):
        return "function.arguments must be a string"
    try:  # llama.cpp's server parses them to render the chat template
        if not isinstance(json.loads(function["arguments"]), dict):
            raise ValueError("not an object")
    except ValueError:
        return f"function.arguments is not a JSON object: {function['arguments']!r}"
    return None


def _tools_problem(tools, tool_choice):
    if tools is None:
        return None
    if not isinstance(tools, list):
        return "'tools' must be an array"
    names = set()
    for tool in tools:
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
        if not isinstance(function, dict) or not TOOL_NAME.match(str(function.get("name"))):
            return f"invalid tool {tool!r}: function name must match {TOOL_NAME.pattern}"
        if function["name"] in names:
            return f"duplicate tool name {function['name']!r}"
        names.add(function["name"])
        parameters = function.get("parameters", {})
        if not isinstance(parameters, dict) or parameters.get("type") != "object":
            return f"tool {function['name']}: parameters must be a JSON Schema of type object"
        problem = grammar_problem(parameters)
        if problem:
            return f"tool {function['name']}: its parameters cannot be compiled into a grammar: {problem}"
    if tool_choice not in (None, "auto", "none", "required") and not isinstance(tool_choice, dict):
        return f"invalid tool_choice {tool_choice!r}"
    return None


def grammar_problem(schema):
    """What llama.cpp's JSON-Schema-to-grammar conversion says about a schema (None: it compiles)."""
    from llama_cpp.llama_grammar import LlamaGrammar

    try:
        LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)
    except Exception as exc:  # the converter raises ValueError, AssertionError, KeyError...
        return f"{exc.__class__.__name__}: {exc}"[:500]
    return None


class ScriptedModel:
    """Replies come from `script` in order; a reply may also be a function of the request body."""

    def __init__(self):
        self.requests = []
        self.refusals = []  # why requests were refused as malformed (a test expecting none checks it is empty)
        self.dropped = 0  # held replies whose client hung up before they were sent
        self.defaulted_checks = 0  # completion checks answered "yes" without a scripted reply
        self._script = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def base_url(self):
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def env(self, **extra):
        """Environment for a worker process that plans with this model."""
        return {"LLM_BASE_URL": self.base_url, "LLM_API_KEY": "test-key", "LLM_MODEL": "scripted-model",
                **{key: str(value) for key, value in extra.items()}}

    def script(self, *replies):
        with self._lock:
            self._script = list(replies)
            self.requests.clear()
            self.refusals.clear()
            self.dropped = 0
            self.defaulted_checks = 0

    def recorded(self):
        """Every request body received so far, as raw text (to search for what the model must never see)."""
        with self._lock:
            return [entry["raw"] for entry in self.requests]

    def bodies(self):
        with self._lock:
            return [entry["body"] for entry in self.requests]

    def close(self):
        self._server.shutdown()
        self._server.server_close()

    def _next(self, body):
        """The script's next reply. A completion check the script has no check(...) reply for next is answered
        "yes" (scripts written before the check, or that do not test it, stay as they are)."""
        with self._lock:
            if is_check(body) and not (self._script and _for_check(self._script[0])):
                self.defaulted_checks += 1
                return check(True, "the scripted model's default verdict")
            if not self._script:
                return failure(500, "the scripted model ran out of replies")
            reply = self._script.pop(0)
        return reply(body) if callable(reply) else reply

    def _handler(self):
        model = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                body = json.loads(raw or "{}")
                with model._lock:
                    model.requests.append({"path": self.path, "raw": raw, "body": body,
                                           "headers": dict(self.headers)})
                if not self.path.endswith("/chat/completions"):
                    return self._send(404, {"error": {"message": "not found"}})
                problem = protocol_problem(body)
                if problem:
                    with model._lock:
                        model.refusals.append(problem)
                    return self._send(400, {"error": {"message": problem, "type": "invalid_request_error"}})
                reply = model._next(body)
                if "hold" in reply:
                    if self._client_left_within(reply["hold"]):
                        with model._lock:
                            model.dropped += 1
                        return
                    reply = reply["then"]
                if "status" in reply:
                    return self._send(reply["status"], {"error": {"message": reply["message"], "type": "scripted"}})
                message = {"role": "assistant", "content": reply.get("content")}
                if reply.get("tool_calls"):
                    message["tool_calls"] = [
                        {"id": f"call_{len(model.requests)}_{i}", "type": "function",
                         "function": {"name": call["name"],
                                      "arguments": call["raw"] if "raw" in call else json.dumps(call["arguments"])}}
                        for i, call in enumerate(reply["tool_calls"])]
                self._send(200, {
                    "id": f"chatcmpl-{len(model.requests)}", "object": "chat.completion", "created": 0,
                    "model": body.get("model", "scripted"),
                    "choices": [{"index": 0, "message": message,
                                 "finish_reason": "tool_calls" if reply.get("tool_calls") else "stop"}],
                    "usage": {"prompt_tokens": 900, "completion_tokens": 100, "total_tokens": 1000},
                })

            def _client_left_within(self, seconds):
                deadline = time.monotonic() + seconds
                while (left := deadline - time.monotonic()) > 0:
                    readable, _, _ = select.select([self.connection], [], [], min(left, 0.05))
                    if readable:
                        try:
                            if self.connection.recv(1, socket.MSG_PEEK) == b"":
                                return True
                        except OSError:
                            return True
                return False

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
