"""The task console: server-rendered pages at /console where a person signs in with an API key
and sees, starts and steers that key's tasks. Pages read and write through the same service
functions as the API (app/dispatch/service.py, app/task_queries.py, app/webhooks/service.py)."""
from flask import Blueprint

from ..crypto import derive_key
from .session import ConsoleSessionInterface

blp = Blueprint("console", __name__, url_prefix="/console", template_folder="templates",
                static_folder="static", static_url_path="/static")


def init_app(app):
    """Signed-cookie sessions (holding the key's id and a CSRF token, never the key) and the pages."""
    if not app.secret_key:
        # One secret for every web process, derived from the data-at-rest key (never the key itself).
        app.secret_key = derive_key(app.config["ENCRYPTION_KEY"], b"console-session-cookie").hex()
    app.config.update(SESSION_COOKIE_NAME="rd_console", SESSION_COOKIE_HTTPONLY=True, SESSION_COOKIE_SAMESITE="Lax",
                      SESSION_COOKIE_PATH="/console")
    app.config.setdefault("CONSOLE_SESSION_HOURS", 12.0)
    app.session_interface = ConsoleSessionInterface()
    from . import views  # noqa: F401 (routes register on blp)

    app.register_blueprint(blp)
