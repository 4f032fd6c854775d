"""Routes of /fast/v2/cloud-browser (kept browser sessions) and /fast/v2/sdk/config."""
from flask import Response, g, render_template_string, request
from flask.views import MethodView

from ..auth import require_api_key
from ..errors import ApiError
from ..files.serving import served
from ..links import public_url
from ..parsing import Blueprint
from ..ratelimits import plan_allows, requests_limit
from . import service
from .schemas import (
    CdpHeadersRequestSchema, CdpHeadersSchema, CdpSessionCreatedSchema, CreateSessionSchema, DownloadQuerySchema,
    DownloadsSchema, DownloadUrlSchema, SdkConfigSchema,
    SessionCreatedSchema, SessionQuerySchema, StopResultSchema, StopSessionSchema,
)

blp = Blueprint("cloud-browser", __name__, url_prefix="/fast/v2",
                description="Cloud browser sessions kept between tasks, for the official SDK.")

UNAUTHENTICATED = ("cloud-browser.DownloadedFile", "cloud-browser.SessionLogin")


@blp.before_request
def _authenticate():
    """Download links carry their permission in the URL; everything else needs the API key."""
    if request.endpoint not in UNAUTHENTICATED:
        require_api_key()


@blp.route("/cloud-browser/create-and-initialize-cloud-browser-session")
class CreateSession(MethodView):
    @requests_limit
    @blp.arguments(CreateSessionSchema, required=False)
    @blp.response(200, SessionCreatedSchema)
    @blp.alt_response(400, schema="Error", description="Invalid request")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(409, schema="Error", description="The profile is being written (persist) by another task or session")
    @blp.alt_response(429, schema="Error", description="Too many open sessions for this key")
    @blp.alt_response(503, schema="Error", description="No browser could be started")
    def post(self, data):
        """Start a cloud browser session

        A server-side browser that stays open between tasks until stopped or idle for
        `session_timeout` seconds. Submit tasks with `cloudBrowserSessionId` and `browserWindowId`.
        """
        row = service.create(g.api_key.id, data.get("session_name"), data.get("session_timeout"), data.get("profile"),
                             data.get("proxy"), data.get("browser_settings"))
        return {"browser_window_id": row.browser_window_id, "session_id": row.id}


@blp.route("/cloud-browser/create-cloud-browser-session")
class CreateCdpSession(MethodView):
    @requests_limit
    @blp.arguments(CreateSessionSchema, required=False)
    @blp.response(200, CdpSessionCreatedSchema)
    @blp.alt_response(400, schema="Error", description="Invalid request")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(403, schema="Error", description="The key's plan has no CDP access (`free` by default)")
    @blp.alt_response(409, schema="Error", description="The profile is being written (persist) by another task or session")
    @blp.alt_response(429, schema="Error", description="Too many open sessions for this key")
    @blp.alt_response(503, schema="Error", description="No browser could be started")
    def post(self, data):
        """Start a cloud browser session with CDP access

        The same session, plus its Chrome DevTools Protocol WebSocket (for Playwright's
        `connect_over_cdp`): connect with `cdp_auth_headers`, a credential valid for this session
        only, until it ends. `login_url` shows the session's window id in `#narada-browser-window-id`.
        Commands that would reach the server's files or network around the egress policy are answered
        with a CDP error (docs/cloud-sessions.md); downloads always land in the session's own folder. Keys whose
        plan has no CDP access (`free` by default) get 403.
        """
        _require_cdp_plan()
        row, token = service.create_with_cdp(g.api_key.id, data.get("session_name"), data.get("session_timeout"),
                                             data.get("profile"), data.get("proxy"), data.get("browser_settings"),
                                             side_panel=bool(data.get("require_extension")))
        return {"cdp_websocket_url": row.cdp_url, "session_id": row.id, "browser_window_id": row.browser_window_id,
                "login_url": public_url("cloud-browser.SessionLogin", token=service.login_token(row)),
                "cdp_auth_headers": {"Authorization": f"Bearer {token}"}}


@blp.route("/cloud-browser/generate-cdp-auth-headers")
class CdpHeaders(MethodView):
    @requests_limit
    @blp.arguments(CdpHeadersRequestSchema)
    @blp.response(200, CdpHeadersSchema)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(403, schema="Error", description="The key's plan has no CDP access")
    @blp.alt_response(404, schema="Error", description="No session of this key has that CDP URL")
    @blp.alt_response(409, schema="Error", description="The session has ended")
    def post(self, data):
        """Get the CDP credential of a session again (to reconnect)"""
        _require_cdp_plan()
        return service.cdp_auth_headers(g.api_key.id, data["cdp_websocket_url"])


def _require_cdp_plan():
    if not plan_allows("cdp"):
        raise ApiError(403, "CDP Not In Plan",
                       f"The '{g.api_key.plan}' plan of this API key has no CDP access: start a session without "
                       f"CDP (create-and-initialize-cloud-browser-session), or use a key of a plan with \"cdp\": "
                       f"true in RATE_LIMIT_PLANS.")


LOGIN_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>Remote Dispatch cloud session</title></head>
<body><h1>Cloud browser session ready</h1><p>Browser window id:
<span id="narada-browser-window-id">{{ window_id }}</span></p></body></html>"""


@blp.route("/cloud-browser/login/<string:token>")
class SessionLogin(MethodView):
    @blp.response(200, description="An HTML page holding the window id in #narada-browser-window-id")
    @blp.alt_response(403, schema="Error", description="Invalid or expired link")
    @blp.doc(security=[])
    def get(self, token):
        """The session's start page (shows its browser window id)"""
        row = service.window_for_login(token)
        page = Response(render_template_string(LOGIN_PAGE, window_id=row.browser_window_id),
                        mimetype="text/html")
        page.headers["Cache-Control"] = "no-store"
        return page


@blp.route("/cloud-browser/stop-cloud-browser-session")
class StopSession(MethodView):
    @requests_limit
    @blp.arguments(StopSessionSchema)
    @blp.response(200, StopResultSchema)
    @blp.alt_response(400, schema="Error", description="Invalid request")
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Unknown session, or another key's")
    def post(self, data):
        """Stop a cloud browser session

        Ends the session and closes its browser; its window can take no more tasks.
        """
        return service.stop(g.api_key.id, data["session_id"], data.get("status") or "complete")


@blp.route("/cloud-browser/replay/downloads")
class Downloads(MethodView):
    @requests_limit
    @blp.arguments(SessionQuerySchema, location="query", error_status_code=400)
    @blp.response(200, DownloadsSchema)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Unknown session, or another key's")
    def get(self, query):
        """List a session's downloaded files"""
        return service.downloads(g.api_key.id, query["session_id"])


@blp.route("/cloud-browser/replay/download-url")
class DownloadUrl(MethodView):
    @requests_limit
    @blp.arguments(DownloadQuerySchema, location="query", error_status_code=400)
    @blp.response(200, DownloadUrlSchema)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Unknown session or file")
    def get(self, query):
        """Get a download link for a session's file

        The link needs no API key and expires after an hour.
        """
        token, ttl = service.download_token(g.api_key.id, query["session_id"], query["key"])
        return {"presigned_url": public_url("cloud-browser.DownloadedFile", token=token),
                "expires_in": ttl}


@blp.route("/cloud-browser/replay/file/<string:token>")
class DownloadedFile(MethodView):
    @blp.response(200, description="The file")
    @blp.alt_response(403, schema="Error", description="Invalid or expired link")
    @blp.alt_response(404, schema="Error", description="The file is gone")
    @blp.doc(security=[])
    def get(self, token):
        """Download a session's file with a link"""
        return served(service.downloaded_file(token))


@blp.route("/sdk/config")
class SdkConfig(MethodView):
    @blp.response(200, SdkConfigSchema)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    def get(self):
        """The official SDK's configuration

        The oldest `narada` package version this service works with.
        """
        return service.sdk_config()
