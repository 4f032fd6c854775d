"""API-key authentication: `x-api-key` is looked up by its SHA-256 hash."""
from flask import g, request
from sqlalchemy import select

from .crypto import hash_key
from .errors import ApiError
from .extensions import db
from .models import ApiKey


def require_api_key():
    """`before_request` hook: sets `g.api_key` or answers 401."""
    if request.method == "OPTIONS":
        return
    g.api_key = authenticate(request.headers.get("x-api-key", ""), "send it in the x-api-key header")


def authenticate(raw, where):
    """The active key whose hash `raw` has, or 401 (`where`: how to send one, for the message)."""
    if not raw:
        raise ApiError(401, "Unauthorized", f"Missing API key: {where}.")
    key = db.session.execute(
        select(ApiKey).where(ApiKey.key_hash == hash_key(raw), ApiKey.revoked_at.is_(None))
    ).scalar_one_or_none()
    if key is None:
        raise ApiError(401, "Unauthorized", "Invalid API key.")
    return key
