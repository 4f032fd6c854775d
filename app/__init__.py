"""Remote Dispatch web application."""
from flask import Flask


def create_app(overrides=None, web=True):
    """Build the Flask app: config and extensions; with `web` (the web process, the CLI, tests) also the API's
    blueprints, the console, error handlers and CLI. A worker or beat (workers/celery.py) builds it without: it
    serves no request, and its start does not import every blueprint, the MCP server's protocol types and the
    document's schemas."""
    from config import settings

    from .broker import Broker
    from .extensions import db
    from .waiting import TaskWaiters

    app = Flask(__name__)
    app.config.update(settings.load())
    app.config.update(SQLALCHEMY_ENGINE_OPTIONS=_engine_options(app.config["SQLALCHEMY_DATABASE_URI"]))
    app.config.update(overrides or {})
    db.init_app(app)
    app.extensions["broker"] = Broker(app)
    TaskWaiters.for_app(app)
    if web:
        _serve(app)
    return app


def _serve(app):
    """The web process's part of the app: the API, its pages and handlers."""
    from werkzeug.middleware.proxy_fix import ProxyFix

    from . import cli, console, errors, health, parsing, ratelimits
    from .accounts.routes import blp as accounts_blp
    from .api import SWAGGER_UI_ASSETS, api, swagger_ui_assets
    from .codes.routes import blp as codes_blp
    from .credentials.routes import blp as credentials_blp
    from .dispatch.routes import blp as dispatch_blp
    from .files.routes import blp as files_blp
    from .live.routes import blp as live_blp, pages as live_pages
    from .mcp_server.routes import blp as mcp_blp
    from .metrics.routes import blp as metrics_blp
    from .profiles.routes import blp as profiles_blp
    from .sessions.cdp_web import pages as cdp_pages
    from .schedules.routes import blp as schedules_blp
    from .scripts.routes import blp as scripts_blp
    from .sessions.routes import blp as sessions_blp
    from .webhooks.routes import blp as webhooks_blp
    from .windows.routes import blp as windows_blp

    for name, value in dict(
        API_TITLE="Remote Dispatch",
        API_VERSION="2",
        OPENAPI_VERSION="3.0.3",
        OPENAPI_URL_PREFIX="/",
        OPENAPI_JSON_PATH="openapi.json",
        OPENAPI_SWAGGER_UI_PATH="/docs",
        OPENAPI_SWAGGER_UI_URL=SWAGGER_UI_ASSETS + "/",  # served locally (app.api.swagger_ui_assets)
        API_SPEC_OPTIONS={"security": [{"ApiKey": []}], "info": {"description": API_DESCRIPTION}},
    ).items():
        app.config.setdefault(name, value)  # overrides (given to create_app) win
    app.json.sort_keys = False

    app.before_request(parsing.refuse_nul_characters)
    ratelimits.init_app(app)
    api.init_app(app)

    api.register_blueprint(dispatch_blp)
    api.register_blueprint(webhooks_blp)
    api.register_blueprint(files_blp)
    api.register_blueprint(sessions_blp)
    api.register_blueprint(windows_blp)
    api.register_blueprint(scripts_blp)
    api.register_blueprint(schedules_blp)
    api.register_blueprint(profiles_blp)
    api.register_blueprint(credentials_blp)
    api.register_blueprint(codes_blp)
    api.register_blueprint(accounts_blp)
    api.register_blueprint(live_blp)
    app.register_blueprint(live_pages)
    app.register_blueprint(cdp_pages)
    app.register_blueprint(health.blp)
    app.register_blueprint(mcp_blp)
    app.register_blueprint(metrics_blp)
    console.init_app(app)
    # Behind a TLS-terminating proxy, X-Forwarded-Proto tells the console to mark its cookie Secure.
    app.wsgi_app = ProxyFix(app.wsgi_app, x_for=0, x_proto=1)
    app.register_blueprint(swagger_ui_assets())

    errors.register(app)
    cli.register(app)


API_DESCRIPTION = (
    "Every error is `{error, message}`. Request bodies are JSON objects sent with "
    "`Content-Type: application/json` (415 otherwise); text in them must not contain NUL (U+0000) "
    "(nor may a path, a query string or a form) or lone surrogates, numbers must be finite, and nesting is limited to 64 levels (400 otherwise).")


def _engine_options(url):
    if url.startswith("sqlite"):
        return {"connect_args": {"timeout": 30}}
    return {"pool_pre_ping": True, "pool_size": 10, "max_overflow": 20, "pool_timeout": 5}
