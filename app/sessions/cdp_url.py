"""Where a caller reaches a session's CDP: the relay's path and public URL (the relay itself: cdp_web.py)."""
from urllib.parse import urlsplit, urlunsplit

CDP_PATH = "/cdp"


def public_url(config, session_id):
    """The CDP URL of a session, as a caller reaches the web tier: ws(s)://<CDP_PUBLIC_HOST or PUBLIC_URL's host>
    <PUBLIC_URL's path>/cdp/<id>/devtools/browser/<id> (the browser's own id stays behind the relay)."""
    base = urlsplit(config["PUBLIC_URL"])
    netloc = base.netloc
    if config["CDP_PUBLIC_HOST"]:
        netloc = config["CDP_PUBLIC_HOST"] + (f":{base.port}" if base.port and ":" not in
                                              config["CDP_PUBLIC_HOST"].rpartition("]")[2] else "")
    scheme = "wss" if base.scheme == "https" else "ws"
    return urlunsplit((scheme, netloc, f"{base.path}{CDP_PATH}/{session_id}{browser_path(session_id)}", "", ""))


def browser_path(session_id):
    """The browser endpoint's path a caller sees: the session's id in place of the browser's own."""
    return f"/devtools/browser/{session_id}"
