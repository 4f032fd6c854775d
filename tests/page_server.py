"""A loopback web server for the page-reading tool: fixed pages, plus /echo, and a record of every request."""
import html
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit


class PageServer:
    def __init__(self, pages=None, statuses=None):
        self.pages = dict(pages or {})
        self.statuses = dict(statuses or {})  # path -> HTTP status of its page (default 200), e.g. a 404 page
        self.requests = []  # request paths with their query strings, exactly as received
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def url(self, path="/"):
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def close(self):
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests.append(self.path)
                parts = urlsplit(self.path)
                if parts.path == "/echo":  # shows what it received, as a page that echoes a form would
                    items = "".join(f"<li class='param'>{html.escape(k)}={html.escape(v)}</li>"
                                    for k, v in parse_qsl(parts.query))
                    body = f"<html><head><title>Echo</title></head><body><h1>Received</h1><ul>{items}</ul></body></html>"
                elif parts.path in server.pages:
                    body = server.pages[parts.path]
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                data = body.encode()
                self.send_response(server.statuses.get(parts.path, 200))
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
