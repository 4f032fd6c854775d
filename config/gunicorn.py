"""gunicorn settings: gthread workers so blocking `wait` calls do not starve other requests."""
import os

bind = f"0.0.0.0:{os.environ.get('PORT', '8000')}"
worker_class = "gthread"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
threads = int(os.environ.get("WEB_THREADS", "32"))
timeout = int(os.environ.get("WEB_TIMEOUT", "180"))
keepalive = 5
accesslog = "-"
