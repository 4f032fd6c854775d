"""Webhook delivery: one signed HTTPS POST per attempt, to an address checked at the moment of use."""
import base64
import hashlib
import hmac
import logging
import time
from email.utils import parsedate_to_datetime
from datetime import datetime, timezone
from urllib.parse import urlsplit

import certifi
import urllib3
from flask import current_app

from app.crypto import unseal
from app.extensions import db
from app.models import ApiKey, Task, WebhookDelivery
from app.netguard import UnsafeUrl, check_url
from app.webhooks import delivery
from app.webhooks.delivery import Outcome

from .runner import worker_identity

log = logging.getLogger(__name__)

USER_AGENT = "Remote-Dispatch-Webhooks/1"


def deliver(delivery_id):
    """Make one attempt of a delivery if it is due and nobody else is making it; idempotent.
    Returns the attempt's Outcome, or None when there was nothing to do."""
    owner = worker_identity()
    claimed = delivery.claim(delivery_id, owner)
    if claimed is None:
        log.info("webhook %s not due or already being sent; message ignored", delivery_id)
        return None
    row = db.session.get(WebhookDelivery, delivery_id)
    url, body = row.url, row.payload.encode()
    try:
        headers = request_headers(row, db.session.get(Task, row.task_id), claimed.started_at)
    except Exception:  # e.g. a secret sealed under another ENCRYPTION_KEY: a failed attempt, logged
        log.exception("cannot prepare webhook %s", delivery_id)
        headers = None
    db.session.commit()  # no transaction stays open while we wait on the receiver
    outcome = post(url, body, headers) if headers else Outcome(error="internal error preparing the request")
    delivery.record(delivery_id, owner, claimed, outcome)
    log.info("webhook %s attempt %d: %s", delivery_id, claimed.attempt,
             outcome.status_code or outcome.error)
    return outcome


def request_headers(row, task, started_at):
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
                                       row.id, timestamp, row.payload.encode()),
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
    """POST to `url` on an address that passed the netguard just now (pinned, so a second
    DNS answer cannot redirect us); no redirects are followed. Never raises."""
    config = current_app.config
    started = time.monotonic()
    try:
        addresses = check_url(url, allow_private=config["ALLOW_PRIVATE_URLS"], schemes=("https",))
    except UnsafeUrl as exc:
        return Outcome(error=f"refused: {exc}")
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    host_header = _bracketed(parts.hostname) + (f":{parts.port}" if parts.port else "")
    error = None
    for address in addresses:
        pool = urllib3.HTTPSConnectionPool(
            _bracketed(address), parts.port or 443, maxsize=1, retries=False,
            timeout=urllib3.Timeout(total=config["WEBHOOK_TIMEOUT_SECONDS"]),
            cert_reqs="CERT_REQUIRED", ca_certs=config["WEBHOOK_CA_BUNDLE"] or certifi.where(),
            server_hostname=parts.hostname, assert_hostname=parts.hostname)
        try:
            with pool:
                # The body is never read: only the status and headers matter.
                response = pool.urlopen("POST", target, body=body, headers={"Host": host_header, **headers},
                                        redirect=False, retries=False, assert_same_host=False,
                                        preload_content=False)
        except urllib3.exceptions.NewConnectionError as exc:
            error = f"cannot connect to {_bracketed(address)}:{parts.port or 443}: {exc.__cause__ or exc}"
            continue  # another address of the host may answer
        except urllib3.exceptions.HTTPError as exc:
            return Outcome(error=_describe(exc), duration_ms=_ms_since(started))
        return _outcome(response, _ms_since(started))
    return Outcome(error=error, duration_ms=_ms_since(started))


def _outcome(response, duration_ms):
    code = response.status
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


def _describe(exc):
    if isinstance(exc, urllib3.exceptions.ConnectTimeoutError):
        return "timed out connecting"
    if isinstance(exc, urllib3.exceptions.ReadTimeoutError):
        return f"no response within {current_app.config['WEBHOOK_TIMEOUT_SECONDS']:g} s"
    if isinstance(exc, urllib3.exceptions.SSLError):
        return f"TLS error: {_reason(exc)}"
    return f"{exc.__class__.__name__}: {_reason(exc)}"


def _reason(exc):
    reason = getattr(exc, "reason", None) or (exc.args[-1] if exc.args else exc)
    return str(reason)


def _bracketed(host):
    return f"[{host}]" if ":" in host else host


def _ms_since(started):
    return int((time.monotonic() - started) * 1000)
