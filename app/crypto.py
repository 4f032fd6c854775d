"""Encryption at rest (Fernet) and API-key hashing."""
import hashlib
import hmac
import json
import secrets

from cryptography.fernet import Fernet
from flask import current_app


def _fernet():
    return Fernet(current_app.config["ENCRYPTION_KEY"].encode())


def seal(value):
    """Encrypt a JSON-serialisable value; None stays None."""
    if value is None:
        return None
    return _fernet().encrypt(json.dumps(value).encode()).decode()


def unseal(token):
    if token is None:
        return None
    return json.loads(_fernet().decrypt(token.encode()))


def seal_text(text):
    """Encrypt a string so that unseal_text gives back exactly the same characters."""
    return _fernet().encrypt(text.encode()).decode()


def unseal_text(token):
    return _fernet().decrypt(token.encode()).decode()


def derive_key(secret, purpose):
    """A key for one purpose (`purpose`: bytes naming it), derived from ENCRYPTION_KEY (`secret`) and never the key
    itself: a token of one purpose can never pass for another's."""
    return hmac.new(secret.encode(), purpose, hashlib.sha256).digest()


def hash_key(raw_key):
    """API keys are 256-bit random tokens, so one SHA-256 is enough (no dictionary to defend)."""
    return hashlib.sha256(raw_key.encode()).hexdigest()


def new_api_key():
    return "rd_" + secrets.token_urlsafe(32)


def new_webhook_secret():
    import base64

    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
