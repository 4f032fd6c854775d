"""A scripted OpenAI-compatible chat-completions server on loopback that records every request it receives."""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def tool_call(name, **arguments):
    """A scripted reply: the model calls one tool."""
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def text(content):
    """A scripted reply: the model answers in plain text (no tool call)."""
    return {"content": content}


def failure(status, message="scripted failure"):
    """A scripted reply: the server answers with an HTTP error."""
    return {"status": status, "message": message}


class ScriptedModel:
    """Replies come from `script` in order; a reply may also be a function of the request body."""

    def __init__(self):
        self.requests = []
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
        with self._lock:
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
                reply = model._next(body)
                if "status" in reply:
                    return self._send(reply["status"], {"error": {"message": reply["message"], "type": "scripted"}})
                message = {"role": "assistant", "content": reply.get("content")}
                if reply.get("tool_calls"):
                    message["tool_calls"] = [
                        {"id": f"call_{len(model.requests)}_{i}", "type": "function",
                         "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])}}
                        for i, call in enumerate(reply["tool_calls"])]
                self._send(200, {
                    "id": f"chatcmpl-{len(model.requests)}", "object": "chat.completion", "created": 0,
                    "model": body.get("model", "scripted"),
                    "choices": [{"index": 0, "message": message,
                                 "finish_reason": "tool_calls" if reply.get("tool_calls") else "stop"}],
                    "usage": {"prompt_tokens": 900, "completion_tokens": 100, "total_tokens": 1000},
                })

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
