"""gunicorn settings: gthread workers, so requests blocked in `wait: true` do not starve the rest.

A waiting request holds one thread but no database connection (it hands its connection back
while blocked, and one LISTEN connection per process wakes it). The app admits at most
WAIT_MAX_CONCURRENT waiting requests per process (default WEB_THREADS - 8) and answers 503
beyond that, so some threads always remain for polls and submits.
`bench/concurrent_waits.py` measures how many waits one process sustains (README).
"""
import os

bind = f"0.0.0.0:{os.environ.get('PORT', '8000')}"
worker_class = "gthread"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
# Keep this default equal to the one config/settings.py derives WAIT_MAX_CONCURRENT from.
threads = int(os.environ.get("WEB_THREADS", "128"))
# Open client connections per worker, idle keep-alive ones included (those hold no thread);
# gthread keeps at most worker_connections - threads alive, so it must stay above threads.
worker_connections = int(os.environ.get("WEB_CONNECTIONS", str(max(1000, threads + 256))))
# The gthread arbiter heartbeat does not depend on requests finishing, so long waits are safe.
timeout = int(os.environ.get("WEB_TIMEOUT", "180"))
# On a reload or deploy, requests already waiting get the time to see their task end.
graceful_timeout = int(float(os.environ.get("WAIT_TIMEOUT_SECONDS", "120"))) + 10
keepalive = 5
accesslog = "-"
