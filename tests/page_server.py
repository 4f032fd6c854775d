"""A loopback web server for the page-reading tool: fixed pages, plus /echo, and a record of every request."""
import html
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit


class PageServer:
    def __init__(self, pages=None, statuses=None, files=None, handlers=None, host="127.0.0.1"):
        self.pages = dict(pages or {})
        self.handlers = dict(handlers or {})  # path -> f(query dict) -> html: a page the server decides
        self.statuses = dict(statuses or {})  # path -> HTTP status of its page (default 200), e.g. a 404 page
        # path -> (bytes, headers[, seconds]): a response other than a page (a download), its second half sent
        # `seconds` after its first (a download still being written)
        self.files = dict(files or {})
        self.requests = []  # request paths with their query strings, exactly as received
        self.host = host  # another loopback address (127.0.0.2) is another host to the browser
        self._server = ThreadingHTTPServer((host, 0), self._handler())
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def url(self, path="/"):
        return f"http://{self.host}:{self._server.server_address[1]}{path}"

    @property
    def port(self):
        return self._server.server_address[1]

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
                elif parts.path in server.files:
                    data, headers, *pause = server.files[parts.path]
                    self.send_response(200)
                    for name, value in {"Content-Length": str(len(data)), **headers}.items():
                        self.send_header(name, value)
                    self.end_headers()
                    half = len(data) // 2 if pause else len(data)
                    self.wfile.write(data[:half])
                    self.wfile.flush()
                    if pause:
                        time.sleep(pause[0])
                        self.wfile.write(data[half:])
                    return
                elif parts.path in server.pages:
                    body = server.pages[parts.path]
                elif parts.path in server.handlers:
                    body = server.handlers[parts.path](dict(parse_qsl(parts.query)))
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
