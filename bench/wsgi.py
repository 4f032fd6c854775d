"""The benchmark's WSGI app: the real create_app() with the trivial endpoint (/bench/trivial) and the
submit floor (/bench/floor, bench/floor.py) mounted beside it, one server."""
from werkzeug.middleware.dispatcher import DispatcherMiddleware

from app import create_app
from bench.floor import app as floor
from bench.trivial import app as trivial

app = DispatcherMiddleware(create_app(), {"/bench/floor": floor, "/bench": trivial})
