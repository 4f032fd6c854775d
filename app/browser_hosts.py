"""The browser-holding machines' stream endpoints (workers/browser/host_endpoint.py), as the web tier reaches them.

A stream (a caller's CDP, a live view, a person's input) goes caller -> any web process -> the holding machine's
endpoint -> the browser's local DevTools socket. The endpoint serves only a request carrying a token minted here:
an HMAC, with a key derived from ENCRYPTION_KEY for this purpose alone, naming the machine, the one browser (a task
or a kept session) and an expiry a few seconds away. Every machine shares ENCRYPTION_KEY, so any web process mints
one and only the named machine accepts it, for that browser only.
"""
import base64
import hmac
import json
import socket
import time

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from .crypto import derive_key
from .extensions import db
from .models import SessionHost, now, now_plus

PURPOSE = b"browser-host-stream"
TOKEN_SECONDS = 30  # a token opens one connection now: it need not outlive a connect and its retries
BEATS_PER_LOSS = 6  # a machine is lost once it missed about this many heartbeats in a row
RESTART_SECONDS = 60  # a worker stopped cleanly (a deploy, a restart) counts as seen this much longer


def this_host():
    """The machine's name, as cloud_sessions.host, session_hosts.host and a task's live state name it."""
    return socket.gethostname()


def task_target(task_id):
    return f"t:{task_id}"


def session_target(session_id):
    return f"s:{session_id}"


def mint(config, host, target, seconds=TOKEN_SECONDS):
    """A token for `host`'s endpoint to open the DevTools of `target` (task_target / session_target)."""
    claims = _b64(json.dumps([host, target, int(time.time() + seconds)], separators=(",", ":")).encode())
    return f"{claims}.{_b64(_signature(config, claims))}"


def verify(config, token, host):
    """The target a valid, unexpired token of this `host` names; None for anything else (forged, expired, another
    machine's, malformed)."""
    claims, _, signature = (token or "").partition(".")
    try:
        if not hmac.compare_digest(base64.urlsafe_b64decode(signature + "=" * (-len(signature) % 4)),
                                   _signature(config, claims)):
            return None
        named, target, expiry = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    except (ValueError, TypeError):
        return None
    if named != host or not isinstance(target, str) or not isinstance(expiry, int) or expiry < time.time():
        return None
    return target


def url_of(host):
    """Where other machines reach `host`'s endpoint (its worker registers it), or None."""
    return db.session.execute(select(SessionHost.url).where(SessionHost.host == host)).scalar_one_or_none()


def _signature(config, claims):
    return hmac.new(derive_key(config["ENCRYPTION_KEY"], PURPOSE), claims.encode(), "sha256").digest()


def _b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def heartbeat_seconds(config):
    """How often a tasks worker says its machine is alive: a sixth of SESSION_HOST_LOST_SECONDS (2 s by default),
    at most 5 s. One late or failed beat (a busy database, a loaded machine) is far from a loss."""
    return min(_sixth_of_lost(config), 5.0)


def lost_sweep_seconds(config):
    """How often beat looks for silent machines: as often as they beat, at most every SWEEP_INTERVAL_SECONDS.
    A killed machine's sessions and tasks end between SESSION_HOST_LOST_SECONDS less one beat and that plus one
    sweep after the kill (10-14 s by default)."""
    return min(_sixth_of_lost(config), config["SWEEP_INTERVAL_SECONDS"])


def _sixth_of_lost(config):
    return max(config["SESSION_HOST_LOST_SECONDS"] / BEATS_PER_LOSS, 0.5)


def register(host, url):
    """This machine is alive and its endpoint is at `url` (every heartbeat_seconds, from its heartbeat thread)."""
    try:
        if not db.session.execute(update(SessionHost).where(SessionHost.host == host)
                                  .values(seen_at=now(), url=url)).rowcount:
            db.session.add(SessionHost(host=host, url=url))
        db.session.commit()
    except IntegrityError:  # another process of this machine registered it first: the next turn updates it
        db.session.rollback()


def unregister(host, url):
    """The endpoint at `url` stops: its address is no longer handed out (unless another process wrote its own).
    Its sessions' browsers outlive it and a worker started again holds them again, so a clean stop counts as
    seen RESTART_SECONDS from now: a restart slower than SESSION_HOST_LOST_SECONDS does not end them."""
    db.session.execute(update(SessionHost).where(SessionHost.host == host, SessionHost.url == url)
                       .values(url=None, seen_at=now_plus(RESTART_SECONDS)))
    db.session.commit()
