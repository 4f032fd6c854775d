"""Routes of the live view: the two `/live` endpoints (API key), and the viewer page and its WebSocket (the
signed token in the URL is their whole permission)."""
from flask import Blueprint as FlaskBlueprint, current_app, g, render_template, request
from flask.views import MethodView
from simple_websocket import ConnectionClosed, Server

from ..auth import require_api_key
from ..errors import ApiError
from ..parsing import Blueprint
from ..ratelimits import polls_limit
from ..raw_connections import Handled
from . import service
from .schemas import LiveQuerySchema, LiveUrlSchema
from .slots import Slots
from .viewer import MAX_MESSAGE_BYTES, Viewer

blp = Blueprint("live-view", __name__, url_prefix="/fast/v2",
                description="Watch a running browser task or kept session live, and take control of it.")
blp.before_request(require_api_key)
pages = FlaskBlueprint("live", __name__, url_prefix=service.VIEWER_PATH)

@blp.route("/remote-dispatch/responses/<request_id>/live")
class TaskLive(MethodView):
    @polls_limit
    @blp.arguments(LiveQuerySchema, location="query")
    @blp.response(200, LiveUrlSchema)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Request not found (or another key's)")
    @blp.alt_response(409, schema="Error", description="The task has finished, or has no cloud browser")
    def get(self, args, request_id):
        """Live view of a running browser task

        `liveUrl` is a page of ours showing the task's browser as it changes; with `mode=control` a person can
        also take control (the agent pauses at once, inside a long step too), click, type and scroll, then hand
        back. Its signed token is the whole permission, until `expiresAt`.
        """
        return service.task_live_url(g.api_key.id, request_id, args["mode"], by=g.api_key.name)


@blp.route("/cloud-browser/sessions/<session_id>/live")
class SessionLive(MethodView):
    @polls_limit
    @blp.arguments(LiveQuerySchema, location="query")
    @blp.response(200, LiveUrlSchema)
    @blp.alt_response(401, schema="Error", description="Invalid API key")
    @blp.alt_response(404, schema="Error", description="Session not found (or another key's)")
    @blp.alt_response(409, schema="Error", description="The session has ended")
    def get(self, args, session_id):
        """Live view of a kept cloud browser session

        As for a task: the session's browser live, and with `mode=control` a person's input; while a task runs
        in the session, taking control pauses that task at once.
        """
        return service.session_live_url(g.api_key.id, session_id, args["mode"], by=g.api_key.name)


@pages.after_request
def _headers(response):
    """Private pages, framed only by our own console; scripts and styles only from this server."""
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"  # the token is in the URL
    response.headers["Content-Security-Policy"] = (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; connect-src 'self' "
        "ws: wss:; object-src 'none'; base-uri 'none'; frame-ancestors 'self'; form-action 'none'")
    return response


@pages.route("/<token>")
def viewer(token):
    found = service.claims(token)
    return render_template("console/live.html", mode=found["m"], token=token, key=None)


@pages.route("/<token>/socket", websocket=True)
def socket(token):
    """The viewer's WebSocket: refused before the handshake when the token is forged or expired, or when its key,
    its task (or session) or this process has no viewer slot left for it (app/live/slots.py)."""
    found = service.claims(token)
    with _slots().held(found):
        try:
            ws = Server(request.environ, max_message_size=MAX_MESSAGE_BYTES, ping_interval=25)
        except Exception:  # not a WebSocket handshake
            raise ApiError(400, "Bad Request", "This URL takes a WebSocket connection.") from None
        try:
            Viewer(ws, found, current_app.config).run()
        except ConnectionClosed:
            pass
        finally:
            try:
                ws.close()
            except Exception:
                pass
    return Handled(ws.mode)


def _slots():
    """This web process's viewer slots: each open viewer holds one of gunicorn's threads."""
    extensions = current_app.extensions
    if "live_viewer_slots" not in extensions:
        config = current_app.config
        extensions["live_viewer_slots"] = Slots(int(config["LIVE_MAX_VIEWERS"]), int(config["LIVE_VIEWERS_PER_KEY"]),
                                                int(config["LIVE_VIEWERS_PER_TASK"]),
                                                int(config["LIVE_CONTROLLERS_PER_TASK"]))
    return extensions["live_viewer_slots"]
