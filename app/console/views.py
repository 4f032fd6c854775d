"""Console pages. Each view reads or writes through the API's service functions and renders a
template; live parts of a page poll the small `.json` views below (same session, same services)."""
import json

from flask import (Response, abort, current_app, flash, g, jsonify, redirect, render_template, request,
                   send_from_directory, url_for)
from marshmallow import ValidationError
from werkzeug.exceptions import HTTPException

from .. import schema_base, task_queries, task_results
from ..codes import service as codes
from ..credentials import service as stored_credentials
from ..dispatch import recording_store, schemas as dispatch_schemas, service as tasks
from ..errors import ApiError
from ..files import serving, service as files
from ..live import service as live
from ..ratelimits import limiter, polls_limit, requests_limit
from ..schedules import service as schedules
from ..webhooks import service as webhooks
from . import blp, forms, present
from .session import check_csrf, csrf_token, current_key, sign_in, sign_out, signed_in

PAGE_SIZE = 20


@blp.before_request
def _csrf():
    if request.method == "POST":
        check_csrf()


@blp.app_context_processor
def _globals():
    return {"csrf_token": csrf_token}


@blp.after_request
def _headers(response):
    """Pages are private and never framed; scripts and styles come only from this server."""
    response.headers.setdefault("Cache-Control", "no-store")
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    response.headers["Content-Security-Policy"] = g.get("csp") or (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
    if g.get("csp"):
        response.headers["X-Frame-Options"] = "SAMEORIGIN"
    return response


# The recording player, framed by the task page: rrweb rebuilds the recorded pages in a frame of this page, so their
# inline styles must apply; their images, fonts and scripts from elsewhere are not fetched (the viewer's browser
# never calls the recorded sites).
PLAYER_CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data: blob:; "
              "font-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'self'; form-action 'none'")
RRWEB_FILES = ("rrweb-player.min.js", "rrweb-player.css")


@blp.errorhandler(ApiError)
def _api_error(exc):
    return _error_page(exc.status, exc.error, exc.message)


@blp.errorhandler(HTTPException)
def _http_error(exc):
    return _error_page(exc.code, exc.name, exc.description)


def _error_page(status, title, message):
    if request.path.endswith(".json"):
        return jsonify({"error": title, "message": message}), status
    return render_template("console/error.html", status=status, title=title, message=message,
                           key=current_key()), status


@blp.route("/<path:unknown>")
def not_found(unknown):
    abort(404, "There is no such page in the console.")


@blp.route("/")
def home():
    return redirect(url_for("console.task_list"))


@blp.route("/signin", methods=["GET", "POST"])
@limiter.limit("20/minute", methods=["POST"])
def signin():
    target = request.values.get("next", "")
    if not target.startswith("/console/") or target.startswith("//"):
        target = url_for("console.task_list")
    if request.method == "POST":
        if sign_in(request.form.get("api_key", "")):
            return redirect(target)
        flash("That API key is not valid (unknown or revoked).", "error")
        return render_template("console/signin.html", next=target), 401
    if current_key() is not None:
        return redirect(target)
    return render_template("console/signin.html", next=target)


@blp.route("/signout", methods=["POST"])
def signout():
    sign_out()
    flash("You are signed out.", "info")
    return redirect(url_for("console.signin"))


@blp.route("/tasks")
@signed_in
def task_list():
    query, problems = forms.list_filters(request.args)
    for problem in problems:
        flash(problem, "error")
    page = task_queries.task_page(g.api_key.id, limit=PAGE_SIZE, **query)
    next_cursor = schema_base.Cursor()._serialize(page["nextCursor"], None, None)
    more = {k: v for k, v in request.args.items() if k in ("status", "mode", "q") and v}
    return render_template("console/tasks.html", key=g.api_key, rows=[present.row(t) for t in page["tasks"]],
                           filters=request.args, statuses=task_results.STATUSES,
                           modes=dispatch_schemas.EXECUTION_MODES,
                           next_url=url_for("console.task_list", cursor=next_cursor, **more) if next_cursor else None,
                           first_url=url_for("console.task_list", **more) if request.args.get("cursor") else None)


@blp.route("/tasks/progress.json")
@signed_in
@polls_limit
def task_list_progress():
    rows = []
    for task_id in request.args.getlist("id")[:100]:
        try:
            rows.append(present.row(task_queries.get_task(g.api_key.id, task_id)))
        except ApiError:
            continue
    return jsonify({"tasks": rows})


@blp.route("/tasks/new", methods=["GET", "POST"])
@signed_in
@requests_limit
def new_task():
    windows = present.windows(g.api_key.id)
    if request.method == "GET":
        values = forms.prefill(task_queries.get_task(g.api_key.id, request.args["from"])) if request.args.get("from") else {}
        return render_template("console/new.html", key=g.api_key, values=values, errors={}, windows=windows,
                               modes=dispatch_schemas.EXECUTION_MODES)
    data, errors = forms.submit_body(request.form)
    if not errors:
        try:
            data = dispatch_schemas.SubmitSchema().load(data)
        except ValidationError as exc:
            errors = forms.describe(exc.messages)
    if errors:
        return render_template("console/new.html", key=g.api_key, values=forms.echo(request.form), errors=errors,
                               windows=windows, modes=dispatch_schemas.EXECUTION_MODES), 400
    if data["wait"]:
        try:
            request_id = tasks.submit_and_wait(g.api_key.id, data)["requestId"]
        except ApiError as exc:
            if "requestId" not in exc.extra:
                raise
            flash(exc.message, "info")
            request_id = exc.extra["requestId"]
    else:
        request_id = tasks.submit(g.api_key.id, data)[0]
    return redirect(url_for("console.task_page", task_id=request_id), 303)


@blp.route("/tasks/<task_id>")
@signed_in
def task_page(task_id):
    task = task_queries.get_task(g.api_key.id, task_id)
    return render_template("console/task.html", key=g.api_key, task=present.task(task), live=_live(task),
                           deliveries=webhooks.delivery_log(g.api_key.id, task_id)["deliveries"])


def _live(task):
    """The control live view of a running browser task (its owner is signed in), else None."""
    try:
        return live.task_live_url(g.api_key.id, task.id, "control", by=g.api_key.name)["liveUrl"]
    except ApiError:  # finished, or no cloud browser to watch
        return None


@blp.route("/tasks/<task_id>/state.json")
@signed_in
@polls_limit
def task_state(task_id):
    state = present.task(task_queries.get_task(g.api_key.id, task_id))
    state["deliveries"] = webhooks.delivery_log(g.api_key.id, task_id)["deliveries"]
    return jsonify(state)


@blp.route("/tasks/<task_id>/files/<key>")
@signed_in
@polls_limit
def task_file(task_id, key):
    """A file the task's browser downloaded, as GET /fast/v2/files/{key} serves it (the signed-in key's only)."""
    task_queries.get_task(g.api_key.id, task_id)
    return serving.served(files.owned_file(g.api_key.id, key))


@blp.route("/tasks/<task_id>/gif")
@signed_in
@polls_limit
def task_gif(task_id):
    data = present.gif(g.api_key.id, task_id)
    if data is None:
        abort(404, "This task has no GIF recording.")
    return Response(data, mimetype="image/gif", headers={"Cache-Control": "private, max-age=300"})


@blp.route("/tasks/<task_id>/recording.json")
@signed_in
@polls_limit
def task_recording(task_id):
    data = recording_store.compressed(g.api_key.id, task_id)
    if data is None:
        abort(404, "This task has no recording.")
    return recording_store.response(data)


@blp.route("/tasks/<task_id>/player")
@signed_in
def task_player(task_id):
    task = present.task(task_queries.get_task(g.api_key.id, task_id))
    g.csp = PLAYER_CSP
    return render_template("console/player.html", task=task)


@blp.route("/rrweb/<name>")
def rrweb_file(name):
    """rrweb-player, from `make rrweb`'s folder."""
    if name not in RRWEB_FILES:
        abort(404, "No such file.")
    return send_from_directory(current_app.config["RRWEB_DIR"], name, max_age=3600)


def _act(task_id, action, done):
    """Run a POST action on a task; its outcome (or why it was refused) is flashed on the task page."""
    try:
        result = action()
    except ApiError as exc:
        if exc.status == 404 and exc.error == "Request Not Found":
            raise
        flash(exc.message, "error")
        return redirect(url_for("console.task_page", task_id=task_id), 303)
    flash(done, "info")
    return redirect(url_for("console.task_page", task_id=result if isinstance(result, str) else task_id), 303)


@blp.route("/tasks/<task_id>/cancel", methods=["POST"])
@signed_in
@requests_limit
def cancel(task_id):
    return _act(task_id, lambda: tasks.cancel(g.api_key.id, task_id) and None, "Cancel requested.")


@blp.route("/tasks/<task_id>/answer", methods=["POST"])
@signed_in
@requests_limit
def answer(task_id):
    data = {"answer": request.form.get("answer", ""), "inputId": request.form.get("input_id") or None}
    return _act(task_id, lambda: tasks.answer_input(g.api_key.id, task_id, data) and None,
                "Answer sent; the task runs on.")


@blp.route("/tasks/<task_id>/redeliver", methods=["POST"])
@signed_in
@requests_limit
def redeliver(task_id):
    webhook_id = request.form.get("webhook_id") or None
    return _act(task_id, lambda: webhooks.redeliver(g.api_key.id, task_id, webhook_id) and None,
                "Webhook queued for redelivery.")


@blp.route("/tasks/<task_id>/rerun", methods=["POST"])
@signed_in
@requests_limit
def rerun(task_id):
    return _act(task_id, lambda: tasks.resubmit(g.api_key.id, task_id), "Started again as a new task.")


@blp.route("/tasks/<task_id>/replay", methods=["POST"])
@signed_in
@requests_limit
def replay(task_id):
    variables, secrets = forms.replay_inputs(request.form)
    return _act(task_id, lambda: tasks.replay(g.api_key.id, task_id, variables, secrets),
                "Replaying its script as a new task.")


@blp.route("/windows")
@signed_in
def windows():
    return render_template("console/windows.html", key=g.api_key,
                           windows=[present.window_with_tasks(g.api_key.id, w) for w in present.windows(g.api_key.id)])


@blp.route("/schedules")
@signed_in
def schedules_page():
    shown = schedules.list_schedules(g.api_key.id, limit=100)["schedules"]
    for schedule in shown:
        schedule["recentRuns"] = task_queries.list_tasks(g.api_key.id, limit=5, scheduleId=schedule["scheduleId"])["responses"]
    return render_template("console/schedules.html", key=g.api_key, schedules=shown)


@blp.route("/schedules/<schedule_id>/pause", methods=["POST"])
@signed_in
@requests_limit
def schedule_pause(schedule_id):
    schedules.pause(g.api_key.id, schedule_id, "Paused in the console.")
    flash("Schedule paused: no runs until it is resumed.", "info")
    return redirect(url_for("console.schedules_page"), 303)


@blp.route("/schedules/<schedule_id>/resume", methods=["POST"])
@signed_in
@requests_limit
def schedule_resume(schedule_id):
    schedules.resume(g.api_key.id, schedule_id)
    flash("Schedule resumed: it runs at its next time.", "info")
    return redirect(url_for("console.schedules_page"), 303)


@blp.route("/credentials")
@signed_in
def credentials():
    """The key's stored credentials and claimed addresses: names, sites and fields, never a value."""
    return render_template("console/credentials.html", key=g.api_key,
                           credentials=stored_credentials.listing(g.api_key.id)["credentials"],
                           addresses=codes.addresses(g.api_key.id)["addresses"])


@blp.route("/schema-check.json", methods=["POST"])
@signed_in
@requests_limit
def check_schema():
    """The New task form's schema editor asks here (jsonschema, like submit) before submitting: under the key's
    rate limit, like submit, since each check spends the web process's CPU."""
    text = request.form.get("responseFormat", "").strip()
    if not text:
        return jsonify({"valid": True, "message": "No schema: the task answers with text."})
    _, errors = forms.submit_body({"prompt": "x", "responseFormat": text})
    if not errors:
        try:
            dispatch_schemas.ResponseFormatSchema().load({"type": "jsonSchema", "jsonSchema": json.loads(text)})
        except ValidationError as exc:
            errors = forms.describe({"responseFormat": exc.messages})
    if errors:
        return jsonify({"valid": False, "message": "Not a valid schema: " + errors["responseFormat"]})
    return jsonify({"valid": True, "message": "The schema is valid JSON Schema."})


@blp.app_template_filter("when")
def _when(value):
    """ISO timestamps as 'YYYY-MM-DD HH:MM:SS UTC'; a dash when unset."""
    if not value:
        return "—"
    return str(value).replace("T", " ")[:19] + " UTC"


@blp.app_template_filter("duration")
def _duration(seconds):
    if seconds is None:
        return "—"
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes} min {seconds} s" if minutes else f"{seconds} s"


@blp.app_template_filter("ms")
def _ms(value):
    if value is None:
        return ""
    return f"{value / 1000:.1f} s" if value >= 1000 else f"{value} ms"
