"""A request whose connection this app takes over once the handshake is done (a WebSocket it frames itself, or
simple_websocket's): its socket, and the response that tells the server nothing more is written to it."""
from flask import Response

from .errors import ApiError


def raw_socket(environ):
    """(the connection's socket, the server's mode) of a request served as something other than HTTP from here on
    (a WebSocket this app frames itself: app/sessions/cdp_web.py), as simple_websocket finds it."""
    if "werkzeug.socket" in environ:
        return environ["werkzeug.socket"], "werkzeug"
    if "gunicorn.socket" in environ:
        return environ["gunicorn.socket"], "gunicorn"
    raise ApiError(400, "Bad Request", "This server cannot hand over the connection for a WebSocket.")


class Handled(Response):
    """The response of a connection the WebSocket already used: nothing more is written to it."""

    def __init__(self, mode):
        super().__init__()
        self.mode = mode

    def __call__(self, environ, start_response):
        if self.mode == "gunicorn":
            raise StopIteration()
        if self.mode == "werkzeug":
            return super().__call__(environ, start_response)
        return []
