"""Webhook delivery: one signed HTTPS POST per attempt through app.egress (checked and pinned at the moment of use)."""
import base64
import hashlib
import hmac
import logging
import time
from email.utils import parsedate_to_datetime
from datetime import datetime, timezone
from urllib.parse import urlsplit

import certifi
import requests
from flask import current_app

from app.metrics import events as metrics
from app.egress import client as egress_http
from app.crypto import unseal
from app.egress.policy import EgressRefused, Policy
from app.extensions import db
from app.models import ApiKey, Task, WebhookDelivery
from app.webhooks import delivery, outbox
from app.webhooks.delivery import Outcome

from .runner import worker_identity

log = logging.getLogger(__name__)

USER_AGENT = "Remote-Dispatch-Webhooks/1"
# requests' own default headers the receiver has no use for (None removes them).
NO_CLIENT_DEFAULTS = {"Accept": None, "Connection": None}


def deliver(delivery_id):
    """Make one attempt of a delivery if it is due and nobody else is making it; idempotent.
    Returns the attempt's Outcome, or None when there was nothing to do."""
    owner = worker_identity()
    claimed = delivery.claim(delivery_id, owner)
    if claimed is None:
        log.info("webhook %s not due or already being sent; message ignored", delivery_id)
        return None
    row = db.session.get(WebhookDelivery, delivery_id)
    url, body, headers = row.url, None, None
    try:
        body = outbox.body(row)
        headers = request_headers(row, db.session.get(Task, row.task_id), claimed.started_at, body)
    except Exception:  # e.g. a secret sealed under another ENCRYPTION_KEY: a failed attempt, logged
        log.exception("cannot prepare webhook %s", delivery_id)
    db.session.commit()  # no transaction stays open while we wait on the receiver
    outcome = post(url, body, headers) if headers else Outcome(error="internal error preparing the request")
    delivery.record(delivery_id, owner, claimed, outcome)
    metrics.webhook_attempt(outcome, not outcome.delivered and delivery.final(claimed, outcome), outcome.duration_ms)
    log.info("webhook %s attempt %d: %s", delivery_id, claimed.attempt,
             outcome.status_code or outcome.error)
    return outcome


def request_headers(row, task, started_at, body):
    """The caller's callbackHeaders as given, then ours (Standard Webhooks)."""
    callback = unseal(task.callback_sealed) or {}
    timestamp = int(started_at.timestamp())
    return {
        **(callback.get("headers") or {}),
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "webhook-id": row.id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature(signing_secrets(task.api_key_id, started_at),
                                       row.id, timestamp, body),
    }


def signing_secrets(api_key_id, at):
    """The key's current secret, and during a rotation's grace period also the previous one."""
    key = db.session.get(ApiKey, api_key_id)
    secrets = [unseal(key.webhook_secret)]
    if key.previous_webhook_secret and key.previous_webhook_secret_expires_at \
            and key.previous_webhook_secret_expires_at > at:
        secrets.append(unseal(key.previous_webhook_secret))
    return [secret for secret in secrets if secret]


def signature(secrets, msg_id, timestamp, body):
    """`v1,<base64 HMAC-SHA256 of "id.timestamp.body">` per secret, space-separated."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return " ".join(
        "v1," + base64.b64encode(hmac.new(_key_bytes(secret), signed, hashlib.sha256).digest()).decode()
        for secret in secrets)


def _key_bytes(secret):
    return base64.b64decode(secret.removeprefix("whsec_"))


def post(url, body, headers):
    """POST through app.egress: the URL checked now, the connection pinned to the checked address
    (so a second DNS answer cannot redirect us), TLS verified against the name; no redirects are
    followed and the receiver's body is not read. Never raises: any error is a failed attempt."""
    config = current_app.config
    started = time.monotonic()
    timeout = config["WEBHOOK_TIMEOUT_SECONDS"]
    try:
        response = egress_http.fetch(Policy.from_config(config), "POST", url, timeout=timeout, max_bytes=0,
                                headers={**headers, **NO_CLIENT_DEFAULTS}, data=body, follow_redirects=False,
                                verify=config["WEBHOOK_CA_BUNDLE"] or certifi.where(), schemes=("https",))
    except EgressRefused as exc:
        return Outcome(error=f"refused: {exc}")
    except requests.ConnectTimeout:
        return Outcome(error="timed out connecting", duration_ms=_ms_since(started))
    except requests.ReadTimeout:
        return Outcome(error=f"no response within {timeout:g} s", duration_ms=_ms_since(started))
    except requests.exceptions.SSLError as exc:
        return Outcome(error=f"TLS error: {_reason(exc)}", duration_ms=_ms_since(started))
    except requests.ConnectionError as exc:
        return Outcome(error=str(exc), duration_ms=_ms_since(started))
    except Exception as exc:  # e.g. a header value http.client cannot send: a failed attempt, logged
        # Without the exception's text or traceback: it can quote a header value (a caller's token).
        log.error("webhook request to %s failed: %s", urlsplit(url).hostname, exc.__class__.__name__)
        return Outcome(error=f"cannot send the request: {exc.__class__.__name__}",
                       duration_ms=_ms_since(started))
    return _outcome(response, _ms_since(started))


def _outcome(response, duration_ms):
    code = response.status_code
    error = None
    if 300 <= code < 400:
        error = f"HTTP {code}: redirect to {response.headers.get('Location')!r} not followed"
    elif code == 410:
        error = "HTTP 410: the receiver is gone; no more attempts"
    elif not 200 <= code < 300:
        error = f"HTTP {code}"
    return Outcome(status_code=code, error=error, duration_ms=duration_ms,
                   retry_after=None if error is None else retry_after(response.headers.get("Retry-After")))


def retry_after(value):
    """Seconds from a Retry-After header (delay-seconds or HTTP-date); None if absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())


def _reason(exc):
    reason = exc.args[-1] if exc.args else exc
    return str(getattr(reason, "reason", None) or reason)


def _ms_since(started):
    return int((time.monotonic() - started) * 1000)
