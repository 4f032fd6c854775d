"""One model request bounded by the task's clock and its cancel: abandoned at once, its connection dropped."""
import logging
import socket
import threading
import time

import httpcore2
import httpx2
import openai

from app.metrics import events as metrics

log = logging.getLogger(__name__)

STOP_CHECK_SECONDS = 0.5  # how soon a cancel is noticed while the model computes
RETRY_PAUSE_SECONDS = (0.5, 1, 2, 4, 8)


class Stopped(Exception):
    """`should_stop()` turned true while the model computed: the request was abandoned."""


class OutOfTime(Exception):
    """The task's time budget ended during the model call: the request was abandoned."""


class _Backend(httpcore2.SyncBackend):
    """Keeps the sockets it opens, so the waiting thread can drop a request still in flight."""

    def __init__(self):
        super().__init__()
        self._lock = threading.Lock()
        self._sockets = []

    def connect_tcp(self, *args, **kwargs):
        stream = super().connect_tcp(*args, **kwargs)
        with self._lock:
            self._sockets = [s for s in self._sockets if s.fileno() != -1] + [stream.get_extra_info("socket")]
        return stream

    def drop(self):
        """shutdown(), not close(): only shutdown wakes a thread blocked reading and tells the server (FIN),
        so a server that serves one request at a time (llama.cpp) stops computing for nobody."""
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed
                pass


class DroppableTransport(httpx2.HTTPTransport):
    """httpx's transport whose open connections another thread can drop."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.backend = _Backend()
        # httpcore takes a network backend only when the pool is built, and httpx builds the pool itself.
        self._pool._network_backend = self.backend

    def drop(self):
        self.backend.drop()


def http_client():
    """The HTTP client of a planner whose calls go through `complete` (its openai client: max_retries=0)."""
    transport = DroppableTransport()
    return httpx2.Client(transport=transport), transport


def complete(client, transport, request, *, timeout, retries, deadline, should_stop):
    """client.chat.completions.create(**request) within `timeout` s per attempt and the monotonic `deadline`.

    Connection failures, 408, 409, 429 and 5xx are retried (at most `retries` times, only within the
    remaining time); a request that timed out is not: the server may still be computing it.
    Raises Stopped, OutOfTime, or the last openai error."""
    started, outcome, result = time.monotonic(), "error", None
    try:
        result = _complete(client, transport, request, timeout, retries, deadline, should_stop)
        outcome = "ok"
        return result
    except Stopped:
        outcome = "stopped"
        raise
    except OutOfTime:
        outcome = "out_of_time"
        raise
    except openai.APITimeoutError:
        outcome = "timeout"
        raise
    finally:
        metrics.model_call(request.get("model"), outcome, time.monotonic() - started, getattr(result, "usage", None))


def _complete(client, transport, request, timeout, retries, deadline, should_stop):
    attempt = 0
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise OutOfTime()
        try:
            return _attempt(client, transport, request, min(timeout, remaining), deadline, should_stop)
        except openai.APITimeoutError:
            raise
        except (openai.APIConnectionError, openai.APIStatusError) as exc:
            if attempt >= retries or not _retryable(exc):
                raise
            pause = RETRY_PAUSE_SECONDS[min(attempt, len(RETRY_PAUSE_SECONDS) - 1)]
            if deadline - time.monotonic() <= pause:
                raise
            attempt += 1
            log.info("model request failed (%s); retry %d in %g s", exc.__class__.__name__, attempt, pause)
            _pause(pause, should_stop)


def _retryable(exc):
    return not isinstance(exc, openai.APIStatusError) or exc.status_code in (408, 409, 429) \
        or exc.status_code >= 500


def _pause(seconds, should_stop):
    until = time.monotonic() + seconds
    while (left := until - time.monotonic()) > 0:
        if should_stop():
            raise Stopped()
        time.sleep(min(left, STOP_CHECK_SECONDS))


def _attempt(client, transport, request, limit, deadline, should_stop):
    """One request on a helper thread; this thread watches the cancel and the clock meanwhile (and keeps
    its database session: should_stop() reads the task's row)."""
    outcome = {}
    done = threading.Event()

    def call():
        try:
            outcome["value"] = client.chat.completions.create(**request, timeout=limit)
        except BaseException as exc:  # handed to the waiting thread
            outcome["error"] = exc
        finally:
            done.set()

    ends = time.monotonic() + limit
    budget_ends_first = ends >= deadline - 0.01
    threading.Thread(target=call, name="model-call", daemon=True).start()
    try:
        while not done.wait(max(0.0, min(STOP_CHECK_SECONDS, ends - time.monotonic()))):
            if should_stop():
                raise Stopped()
            if time.monotonic() >= ends:
                if budget_ends_first:
                    raise OutOfTime()
                raise openai.APITimeoutError(request=httpx2.Request("POST", str(client.base_url)))
    except BaseException:  # also Celery's soft time limit, raised in this thread: the request goes too
        _abandon(transport, done)
        raise
    if "error" in outcome:
        if isinstance(outcome["error"], openai.APITimeoutError) and budget_ends_first:
            raise OutOfTime()
        raise outcome["error"]
    return outcome["value"]


def _abandon(transport, done):
    transport.drop()
    done.wait(5)  # the helper thread ends as its read fails; a straggler is a daemon and holds nothing
