"""The benchmark's WSGI app: the real create_app() with the trivial endpoint mounted at /bench, one server."""
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from app import create_app
from bench.trivial import app as trivial

app = DispatcherMiddleware(create_app(), {"/bench": trivial})
