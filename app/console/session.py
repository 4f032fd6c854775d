"""Console sign-in state: a signed cookie (HttpOnly, SameSite=Lax, Secure over https) holding the
API key's row id, when it was signed in, its console session's id and a CSRF token. The raw key never
leaves the sign-in request; every request re-reads the key row and the session row, so a revoked key
signs its sessions out, and sign-out ends the session server-side (a copy of the cookie is refused)."""
import hmac
import secrets
from datetime import datetime, timedelta, timezone
from functools import wraps

from flask import abort, current_app, g, redirect, request, session, url_for
from flask.sessions import SecureCookieSessionInterface
from sqlalchemy import delete, select

from ..crypto import hash_key
from ..extensions import db
from ..models import ApiKey, ConsoleSession, now_plus


class ConsoleSessionInterface(SecureCookieSessionInterface):
    def get_cookie_secure(self, app):
        """Secure whenever the browser reached us over https (directly or via X-Forwarded-Proto)."""
        return bool(app.config.get("SESSION_COOKIE_SECURE")) or request.is_secure

    def get_expiration_time(self, app, session):
        return None  # a browser-session cookie; the signed-in time below bounds its life


def csrf_token():
    if "csrf" not in session:
        session["csrf"] = secrets.token_urlsafe(32)
    return session["csrf"]


def check_csrf():
    """Every console POST carries the session's token in its form (a page of another site cannot)."""
    sent = request.form.get("csrf_token", "")
    expected = session.get("csrf")
    if not expected or not hmac.compare_digest(sent.encode(), expected.encode()):
        abort(403, "The form's security token is missing or out of date. Reload the page and try again.")


def sign_in(raw_key):
    """The ApiKey for `raw_key`, now signed in; None if the key is unknown or revoked."""
    key = db.session.execute(select(ApiKey).where(
        ApiKey.key_hash == hash_key(raw_key.strip()), ApiKey.revoked_at.is_(None))).scalar_one_or_none()
    if key is None:
        return None
    hours = current_app.config["CONSOLE_SESSION_HOURS"]
    db.session.execute(delete(ConsoleSession).where(ConsoleSession.created_at < now_plus(-hours * 3600)))
    row = ConsoleSession(id=secrets.token_urlsafe(32), api_key_id=key.id)
    db.session.add(row)
    db.session.commit()
    session.clear()  # a fresh session: nothing carried over from before sign-in
    session.update(key_id=key.id, key_check=key.key_hash[:16], sid=row.id,
                   signed_in=datetime.now(timezone.utc).timestamp(), csrf=secrets.token_urlsafe(32))
    return key


def sign_out():
    """Ends the session here, not only in this browser: the row goes, whoever still holds the cookie."""
    if isinstance(session.get("sid"), str):
        db.session.execute(delete(ConsoleSession).where(ConsoleSession.id == session["sid"]))
        db.session.commit()
    session.clear()


def current_key():
    """The signed-in ApiKey, or None (unknown, revoked, replaced or expired)."""
    key_id = session.get("key_id")
    if key_id is None:
        return None
    hours = current_app.config["CONSOLE_SESSION_HOURS"]
    signed_in = datetime.fromtimestamp(session.get("signed_in", 0), timezone.utc)
    if datetime.now(timezone.utc) - signed_in > timedelta(hours=hours):
        session.clear()
        return None
    key = db.session.get(ApiKey, key_id)
    sid = session.get("sid")
    live = isinstance(sid, str) and db.session.get(ConsoleSession, sid) is not None
    if not live or key is None or key.revoked_at is not None or key.key_hash[:16] != session.get("key_check"):
        session.clear()
        return None
    return key


def signed_in(view):
    """Pages for signed-in people: sets `g.api_key` (as the API does) or sends them to sign in."""

    @wraps(view)
    def wrapper(*args, **kwargs):
        key = current_key()
        if key is None:
            if request.method == "GET" and not request.path.endswith(".json"):
                return redirect(url_for("console.signin", next=request.full_path.rstrip("?")))
            abort(401, "Sign in again: your console session has ended.")
        g.api_key = key
        return view(*args, **kwargs)

    return wrapper
