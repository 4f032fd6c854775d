"""The `remote-dispatch` command (setup.cfg console_scripts): `keys create/list/revoke`,
`dev-key`, `db upgrade`, `openapi write`, `docs api`, `mcp`. It is Flask's CLI bound to `create_app`, so
it needs no FLASK_APP and no `flask` on PATH."""
import json
import os

import click
from flask import current_app
from flask.cli import AppGroup, with_appcontext
from sqlalchemy import func, select

from config import settings

from .crypto import hash_key, new_api_key, new_webhook_secret, seal, unseal
from .extensions import db
from .models import ApiKey, now_plus

keys = AppGroup("keys", help="Manage API keys.")


def create_key(name, plan):
    """Create a key; returns (ApiKey, raw key). The raw key is never stored."""
    raw = new_api_key()
    key = ApiKey(name=name, plan=plan, prefix=raw[:10], key_hash=hash_key(raw),
                 webhook_secret=seal(new_webhook_secret()))
    db.session.add(key)
    db.session.commit()
    return key, raw


def _find(ident):
    stmt = select(ApiKey).where((ApiKey.prefix == ident) | (ApiKey.name == ident))
    if ident.isdigit():
        stmt = select(ApiKey).where(ApiKey.id == int(ident))
    found = db.session.execute(stmt).scalars().all()
    if len(found) != 1:
        raise click.ClickException(f"{len(found)} keys match '{ident}'; give the id.")
    return found[0]


@keys.command("create")
@click.option("--name", required=True, help="Who the key is for.")
@click.option("--plan", default="free", show_default=True, help="Rate-limit plan.")
def create(name, plan):
    """Create a key and print it (it is shown only this once)."""
    key, raw = create_key(name, plan)
    click.echo(f"id:             {key.id}")
    click.echo(f"api key:        {raw}")
    click.echo(f"webhook secret: {unseal(key.webhook_secret)}")
    click.echo("Store the API key now: only its hash is kept.", err=True)


@keys.command("list")
def list_keys():
    """List keys (id, prefix, name, plan, state), one per line under a header row."""
    rows = [("ID", "PREFIX", "NAME", "PLAN", "STATE")]
    for key in db.session.execute(select(ApiKey).order_by(ApiKey.id)).scalars():
        state = f"revoked {key.revoked_at:%Y-%m-%d}" if key.revoked_at else "active"
        rows.append((str(key.id), f"{key.prefix}…", key.name, key.plan, state))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        click.echo("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())


@keys.command("revoke")
@click.argument("ident")
def revoke(ident):
    """Revoke a key by id, name or prefix."""
    key = _find(ident)
    key.revoked_at = func.now()
    db.session.commit()
    click.echo(f"revoked key {key.id} ({key.name})")


@keys.command("rotate-webhook-secret")
@click.argument("ident")
@click.option("--grace-hours", default=24, show_default=True,
              help="Hours during which deliveries carry both signatures.")
def rotate_webhook_secret(ident, grace_hours):
    """Issue a new webhook signing secret; the old one keeps signing during the grace period."""
    key = _find(ident)
    key.previous_webhook_secret = key.webhook_secret
    key.previous_webhook_secret_expires_at = now_plus(grace_hours * 3600)
    key.webhook_secret = seal(new_webhook_secret())
    db.session.commit()
    click.echo(f"webhook secret: {unseal(key.webhook_secret)}")


@keys.command("webhook-secret")
@click.argument("ident")
def show_webhook_secret(ident):
    """Print a key's current webhook signing secret."""
    click.echo(unseal(_find(ident).webhook_secret))


openapi = AppGroup("openapi", help="The OpenAPI document.")


@openapi.command("write")
@click.argument("path", default="openapi.json")
def write_openapi(path):
    """Write the generated OpenAPI document (checked in; a test fails when it drifts)."""
    with open(path, "w") as fh:
        fh.write(openapi_document() + "\n")
    click.echo(f"wrote {path}")


@openapi.command("markdown")
@click.argument("path", default="docs/api.md")
def write_markdown(path):
    """Write the API reference in Markdown (docs/api.md), generated from the OpenAPI document."""
    from .apidocs import markdown

    with open(path, "w") as fh:
        fh.write(markdown(json.loads(openapi_document())))
    click.echo(f"wrote {path}")


def openapi_document():
    from .api import api

    return json.dumps(api.spec.to_dict(), indent=2, sort_keys=True)


@click.command("dev-key")
@click.option("--port", default=lambda: settings.values()["PORT"], show_default="PORT, 8000")
def dev_key(port):
    """Make sure a development key exists (kept in var/dev-api-key) and print how to use it."""
    path = os.path.join(current_app.config["VAR_DIR"], "dev-api-key")
    raw = open(path).read().strip() if os.path.exists(path) else None
    if raw is None or db.session.execute(
            select(ApiKey.id).where(ApiKey.key_hash == hash_key(raw))).first() is None:
        _, raw = create_key("dev", "dev")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
            fh.write(raw + "\n")
    base = f"http://localhost:{port}"
    click.echo(f"""
Development API key: {raw}

  curl -s {base}/fast/v2/remote-dispatch -H 'x-api-key: {raw}' -H 'Content-Type: application/json' \\
       -d '{{"prompt": "answer Hello from Remote Dispatch", "executionMode": "cloud"}}'
  curl -s {base}/fast/v2/remote-dispatch/responses/<requestId> -H 'x-api-key: {raw}'

API docs: {base}/docs
""")


@click.command("flower", context_settings={"ignore_unknown_options": True})
@click.argument("flower_args", nargs=-1, type=click.UNPROCESSED)
def flower(flower_args):
    """Run Flower (Celery monitoring) on the service's broker, behind basic auth.

    FLOWER_BASIC_AUTH="user:password[,user2:password2]" is required; FLOWER_UNAUTHENTICATED=true
    runs it without (only where nothing else can reach it). Binds FLOWER_ADDRESS (127.0.0.1) and
    FLOWER_PORT (5555); other arguments go to `celery flower`.
    """
    import sys

    read = settings.values()
    auth, unauthenticated = read["FLOWER_BASIC_AUTH"], read["FLOWER_UNAUTHENTICATED"]
    if not auth and not unauthenticated:
        raise click.ClickException(
            "Flower shows every task's arguments and can stop workers: set FLOWER_BASIC_AUTH=user:password "
            "(or FLOWER_UNAUTHENTICATED=true to run it open on purpose).")
    if auth and not all(":" in pair and pair.split(":", 1)[1] for pair in auth.split(",")):
        raise click.ClickException("FLOWER_BASIC_AUTH must be user:password (comma-separated for several).")
    argv = [sys.executable, "-m", "celery", "-A", "workers", "flower",
            f"--address={read['FLOWER_ADDRESS']}", f"--port={read['FLOWER_PORT']}"]
    if auth:
        argv.append(f"--basic-auth={auth}")
    os.execv(sys.executable, argv + list(flower_args))


@click.command("mcp")
@click.option("--print-config", "print_config", type=click.Choice(["stdio", "http"]), default=None,
              help="Print an mcpServers entry for an LLM client's configuration file (stdio: this command; http: the "
                   "service's /mcp URL) with this command's path, the URL and the key filled in, and exit.")
def mcp_stdio(print_config):
    """Serve the MCP tools over stdio (for Claude Desktop, Cursor, ...): every call goes to the REST API of
    REMOTE_DISPATCH_URL (default http://127.0.0.1:8000) with the key in REMOTE_DISPATCH_API_KEY. See docs/mcp-server.md.
    """
    import sys

    from .mcp_server import stdio

    read = settings.values()
    url, key = read["REMOTE_DISPATCH_URL"], read["REMOTE_DISPATCH_API_KEY"]
    if not key:
        raise click.ClickException("Set REMOTE_DISPATCH_API_KEY to your API key (and REMOTE_DISPATCH_URL to the "
                                   "service's address, default http://127.0.0.1:8000).")
    if print_config == "stdio":
        entry = {"command": os.path.abspath(sys.argv[0]), "args": ["mcp"],
                 "env": {"REMOTE_DISPATCH_URL": url, "REMOTE_DISPATCH_API_KEY": key}}
    elif print_config == "http":
        entry = {"url": url.rstrip("/") + "/mcp", "headers": {"x-api-key": key}}
    else:
        return stdio.serve(url, key)
    click.echo(json.dumps({"mcpServers": {"remote-dispatch": entry}}, indent=2))


@click.command("mail")
@with_appcontext
def mail():
    """Run the SMTP receiver for one-time codes and sign-in links on SMTP_BIND (host:port).

    Mail to an address an API key claimed (POST /fast/v2/codes/addresses) is kept for that key; mail to any
    other address is refused. With SMTP_BIND unset the receiver is off: the process waits and does nothing.
    """
    import signal
    import threading

    from .codes.mail import receiver

    stopped = threading.Event()
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, lambda *_: stopped.set())
    bind = current_app.config["SMTP_BIND"]
    if not bind:
        click.echo("SMTP_BIND is not set: the mail receiver is off.")
        stopped.wait()
        return
    controller = receiver(current_app._get_current_object(), bind)
    controller.start()
    click.echo(f"mail receiver listening on {bind}")
    try:
        stopped.wait()
    finally:
        controller.stop()


def with_migrations(app):
    """Bind Flask-Migrate (Alembic, the `db` commands) to `app`, which returns. Only this CLI and the code that
    builds a schema (tests, benchmarks) need it: the web and worker processes do not import it, which keeps
    11 MiB out of each of them."""
    from flask_migrate import Migrate

    Migrate(app, db, directory=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                            "migrations"))
    return app


def main():
    """Entry point of the `remote-dispatch` console script."""
    import sys

    from flask.cli import FlaskGroup

    if sys.argv[1:2] == ["mcp"]:  # a client of the REST API: no app, no database, no var/ where it is launched
        return mcp_stdio.main(sys.argv[2:], prog_name="remote-dispatch mcp")

    from . import create_app

    FlaskGroup(create_app=lambda: with_migrations(create_app()), add_version_option=False, load_dotenv=False,
               help="Remote Dispatch: API keys, database migrations, the OpenAPI document.")(
        prog_name="remote-dispatch")


def register(app):
    app.cli.add_command(keys)
    app.cli.add_command(openapi)
    app.cli.add_command(dev_key)
    app.cli.add_command(flower)
    app.cli.add_command(mcp_stdio)
    app.cli.add_command(mail)

