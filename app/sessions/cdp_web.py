"""CDP of kept sessions through any web process: the URL the API hands out names the web tier (PUBLIC_URL, or
CDP_PUBLIC_HOST), so a round-robin load balancer may send a caller to any web process of any machine.

The route checks the session's row and credential, then relays (app/sessions/cdp_proxy.py: every command checked by
the CDP policy) to the holding machine's stream endpoint with a token for that session alone
(workers/browser/host_endpoint.py), or to a Grid's se:cdp. It runs in the request's own thread (gunicorn's gthread),
on the connection's socket, with an event loop of its own: while it is open it re-reads the row every second, so a
stop on any machine closes it within a second, and a stopped session's credential is refused from that moment.
"""
import asyncio
import hashlib
import hmac
from pathlib import Path
from urllib.parse import urlsplit

from flask import Blueprint, current_app, request

from .. import browser_hosts
from ..crypto import unseal
from ..dispatch.service import cancel_window
from ..errors import ApiError
from ..extensions import db
from ..raw_connections import Handled, raw_socket
from ..models import CloudSession
from ..sandbox import unix_http
from .cdp_proxy import HEAD_LIMIT, Proxy
from .cdp_session import SessionRow
from .cdp_url import CDP_PATH, browser_path, public_url

pages = Blueprint("cdp", __name__, url_prefix=CDP_PATH)
REVOKED = ("No active cloud browser session with CDP access answers to this URL and credential: a stopped session's "
           "credential is revoked (start a session with CDP access, or fetch its headers again with "
           "generate-cdp-auth-headers).")


@pages.route("/<session_id>", defaults={"rest": ""}, websocket=True)
@pages.route("/<session_id>/<path:rest>", websocket=True)
@pages.route("/<session_id>/<path:rest>")  # the discovery documents: plain HTTP
def relay(session_id, rest):
    """A caller's CDP connection (or discovery request) to the session `session_id`."""
    proxy = _proxy(session_id, request.headers.get("Authorization", ""))
    sock, mode = raw_socket(request.environ)
    named = {name.lower(): value for name, value in request.headers.items()}
    asyncio.run(_serve(proxy, sock, request.method, "/" + rest, named))
    return Handled(mode)


def _proxy(session_id, authorization):
    """The relay of the session's DevTools for a caller with its credential; 401 for anything else (an unknown
    session and a wrong credential look alike), 503 when its machine cannot be reached."""
    config = current_app.config
    try:
        row = db.session.get(CloudSession, session_id)
        token = unseal(row.cdp_token_sealed) if row is not None and row.status == "active" \
            and row.cdp_token_sealed else None
        scheme, _, given = authorization.partition(" ")
        if token is None or scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(),
                                                                                   token.encode()):
            raise ApiError(401, "Unauthorized", REVOKED)
        owner, window_id, side_panel = row.api_key_id, row.browser_window_id, row.side_panel
        if row.host == "grid":  # a Grid's se:cdp URL: its path is the one endpoint allowed
            parts = urlsplit(row.debugger_address)
            target, prefix, stream, downloads = f"{parts.hostname}:{parts.port or 80}", parts.path, None, None
        else:
            url = browser_hosts.url_of(row.host)
            if not url or not (row.debugger_address or "").startswith("unix:"):
                raise ApiError(503, "Browser Unavailable", f"The machine holding this session's browser ({row.host}) "
                                                           "has no stream endpoint registered: is its worker running?")
            parts = urlsplit(url)
            target, prefix = f"{parts.hostname}:{parts.port}", "/devtools/"
            stream = browser_hosts.mint(config, row.host, browser_hosts.session_target(session_id))
            downloads = _downloads_of(row.debugger_address)
    finally:
        db.session.rollback()  # nothing held across the relay
    public = public_url(config, session_id)
    base = public[:public.index(f"{CDP_PATH}/{session_id}") + len(f"{CDP_PATH}/{session_id}")]
    return Proxy(target, hashlib.sha256(token.encode()).hexdigest(), prefix, downloads,
                 SessionRow(None, session_id, engine=db.engine), stream, (base, browser_path(session_id)),
                 (window_id, _reset(current_app._get_current_object(), owner, window_id)) if side_panel else None)


def _reset(app, api_key_id, window_id):
    """The side panel's reload (app/sessions/cdp_side_panel.py): the session's tasks cancelled, for the key the
    session belongs to alone, off the relay's event loop."""
    def cancel():
        with app.app_context():
            try:
                return cancel_window(api_key_id, window_id)
            finally:
                db.session.remove()

    async def reset():
        return await asyncio.to_thread(cancel)
    return reset



def _downloads_of(debugger_address):
    """The session's download folder on the machine holding it: beside its box's run/ folder, where the DevTools
    socket is (app/sandbox/box.py lays a box out so), whatever that machine's VAR_DIR."""
    return str(Path(unix_http.socket_path(debugger_address)).parent.parent / "downloads")


async def _serve(proxy, sock, method, path, named):
    reader, writer = await asyncio.open_connection(sock=sock, limit=HEAD_LIMIT)
    watch = asyncio.ensure_future(proxy.watch())
    try:
        await proxy.serve(reader, writer, method, path, named)
    finally:
        watch.cancel()
        await asyncio.gather(watch, return_exceptions=True)
