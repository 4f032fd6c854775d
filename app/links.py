"""Absolute URLs the service hands out, built on PUBLIC_URL: never on the request's Host header."""
from urllib.parse import urlsplit

from flask import current_app, url_for


def public_url(endpoint, **values):
    return current_app.config["PUBLIC_URL"] + url_for(endpoint, **values)


def public_host():
    """PUBLIC_URL's host as a URL writes it (IPv6 in brackets)."""
    host = urlsplit(current_app.config["PUBLIC_URL"]).hostname
    return f"[{host}]" if ":" in host else host
