"""Task submission, waiting, cancelling and answers (the write side; reads are in .queries): these
functions own the transaction and enqueue after commit."""
import hashlib
import json
import logging
import time
from datetime import datetime, timezone

from flask import current_app
from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from .. import agents, lifecycle, totp
from ..codes import service as codes
from ..credentials import service as credentials
from ..credentials.placeholders import placeholder_text
from ..crypto import seal, unseal
from ..egress import upstream
from ..errors import ApiError, invalid
from ..extensions import db
from ..files.service import referenced_keys, require_files
from ..metrics import events as metrics
from ..models import IdempotencyKey, Task, TaskGif, new_id, now_plus
from ..profiles import service as profiles
from ..scripts import service as scripts
from ..sessions import service as sessions
from ..task_publish import dispatch
from ..task_queries import _owns_task, get_task, result
from ..windows import service as windows
from .mcp_schemas import mcp_namespace

log = logging.getLogger(__name__)

# Submitted options kept with the task, under their API names.
OPTION_FIELDS = (
    "clearChat", "generateGif", "responseFormat", "attachments", "timeZone", "mcpServers",
    "inputVariables", "chatHistory", "additionalContext", "reasoningMode",
    "cloudBrowserSessionName", "allowedDomains", "profile", "browserSettings",
)


def agent_for(prompt):
    """The prompt's agent prefix (`app.agents`) picks the agent; no prefix, the general agent."""
    return agents.agent_for(prompt)


def submit(api_key_id, data, idempotency_key=None, schedule=None):
    """Store a task, commit, then publish it; returns (requestId, replayed).

    `schedule`: (scheduleId, fire time) of a schedule's run (app/schedules), committed with whatever the caller's
    transaction holds; a second task for the same fire time fails the commit (IntegrityError).

    With an idempotency key, a repeat of the same body within IDEMPOTENCY_TTL_SECONDS returns
    the original requestId (replayed=True) and creates nothing.
    """
    body_hash = _body_hash(data) if idempotency_key else None
    if idempotency_key:
        original = _idempotent_replay(api_key_id, idempotency_key, body_hash)
        if original:
            return original, True
    replay, data = scripts.replay_for(api_key_id, data)
    mode = data["executionMode"]
    agent = agent_for(data["prompt"])
    if data.get("proxy") and agent != "web":
        raise invalid(f"proxy: the {agent} agent's task starts no browser, so it would not use the proxy; "
                      "a proxy applies to the web agent's cloud_browser tasks.")
    window_id = data.get("browserWindowId") if mode == "client" else None
    # A kept cloud session (by its id, or by its window) runs the web agent in its own browser.
    session = sessions.for_task(api_key_id, data.get("cloudBrowserSessionId"), window_id)
    node = None
    if session is not None:
        node = sessions.node_of(session)  # its task runs on the machine holding its browser (or its egress proxy)
        window_id = session.browser_window_id
        mode = "cloud_browser"  # what runs it, whatever mode the caller named (the SDK sends "client")
    elif mode == "client":
        _require_window(api_key_id, window_id)
    previous = data.get("previousRequestId")
    if previous and not _owns_task(api_key_id, previous):
        raise invalid(f"previousRequestId '{previous}' is not a request made with this API key.")
    require_files(api_key_id, referenced_keys(data))
    options = {name: data[name] for name in OPTION_FIELDS if data.get(name) is not None}
    if replay is not None:
        options["replay"] = replay
    named = placeholder_text(data["prompt"], options)
    credentials.check_named(api_key_id, named)  # 400 naming a credential the key does not have
    codes.claim_for_task(api_key_id, named)  # the addresses it waits on become the key's (409: another key's)
    mcp_credentials = None
    if data.get("mcpServers"):
        options["mcpServers"], mcp_credentials = split_mcp_credentials(data["mcpServers"])

    callback = None
    if data.get("callbackUrl"):
        callback = {"secret": data.get("callbackSecret"), "headers": data.get("callbackHeaders") or {}}
    # The id is ours before the commit: reading task.id after it would reload the expired row.
    task_id = new_id()
    if data.get("profile"):
        _use_profile(api_key_id, data["profile"], task_id, agent_for(data["prompt"]))
    # A Core INSERT, not session.add(Task(...)): the ORM's unit-of-work flush (dependency sort,
    # identity map) was a fifth of a submit's CPU (make bench-profile).
    db.session.execute(_INSERT_TASK, dict(
        id=task_id,
        api_key_id=api_key_id,
        status="pending",
        agent=agent,
        execution_mode=mode,
        browser_window_id=window_id,
        cloud_session_id=session.id if session is not None else None,
        prompt=data["prompt"],
        options=options,
        previous_request_id=previous,
        callback_url=data.get("callbackUrl"),
        callback_sealed=seal(callback),
        secrets_sealed=seal(data.get("secretVariables") or None),
        mcp_sealed=seal(mcp_credentials),
        proxy_sealed=seal(upstream.settings(data["proxy"]) if data.get("proxy") else None),
        dispatched_at=datetime.now(timezone.utc),  # see dispatch(premarked=True)
        schedule_id=schedule[0] if schedule else None,
        fire_at=schedule[1] if schedule else None,
    ))
    if idempotency_key:
        db.session.add(IdempotencyKey(api_key_id=api_key_id, key=idempotency_key,
                                      body_hash=body_hash, task_id=task_id))
    try:
        db.session.commit()
    except IntegrityError:  # a concurrent request with the same key committed first
        db.session.rollback()
        original = idempotency_key and _idempotent_replay(api_key_id, idempotency_key, body_hash)
        if not original:
            raise
        return original, True
    dispatch(task_id, premarked=True, node=node)
    metrics.task_submitted(mode, agent)
    return task_id, False


def _use_profile(api_key_id, profile, task_id, agent):
    """A profile starts the web agent's browser; with persist the task becomes its one writer (409 while another
    runs)."""
    if agent != "web":
        raise invalid("profile: this task's agent starts no browser (a profile is for the web agent: start the "
                      "prompt with /Operator).")
    if profile["persist"]:
        profiles.claim(api_key_id, profile["name"], task_id)


def split_mcp_credentials(servers):
    """(servers as stored in options, their authentication to seal): options keep the type only."""
    stored, credentials = [], []
    for index, server in enumerate(servers):
        auth = server.get("authentication") or {"type": "none"}
        stored.append({"url": server["url"], "label": server.get("label"),
                       "namespace": mcp_namespace(server.get("label"), index), "description": server.get("description"),
                       "authentication": {"type": auth["type"]}, "selectedTools": server.get("selectedTools")})
        credentials.append({"type": auth["type"], "bearerToken": auth.get("bearerToken"),
                            "customHeaders": auth.get("customHeaders") or []})
    return stored, credentials


def _body_hash(data):
    """`wait` only says how to answer, so a replay may add it (e.g. to re-attach after a 408)."""
    canonical = {name: value for name, value in data.items() if name != "wait"}
    return hashlib.sha256(json.dumps(canonical, sort_keys=True, default=str).encode()).hexdigest()


def _idempotent_replay(api_key_id, key, body_hash):
    """The task an unexpired use of `key` created, or None; 422 if its body was different."""
    ttl = current_app.config["IDEMPOTENCY_TTL_SECONDS"]
    row = db.session.execute(
        select(IdempotencyKey, IdempotencyKey.created_at > now_plus(-ttl))
        .where(IdempotencyKey.api_key_id == api_key_id, IdempotencyKey.key == key)
    ).first()
    if row is None:
        return None
    used, fresh = row
    if not fresh:  # expired: the key is free again, in this transaction
        db.session.execute(delete(IdempotencyKey).where(IdempotencyKey.id == used.id))
        return None
    if used.body_hash != body_hash:
        raise ApiError(422, "Idempotency Key Reused",
                       f"Idempotency-Key '{key}' was already used with a different request body "
                       f"(request '{used.task_id}'); use a new key for a new task.")
    return used.task_id


_TASKS = Task.__table__
_INSERT_TASK = insert(_TASKS)  # parameters per call; compiled once (statement cache)


def answer_input(api_key_id, task_id, data):
    """Resume a task paused on a question (`input-required`) with the user's answer."""
    task = get_task(api_key_id, task_id)
    hitl = task.hitl or {}
    if task.status == "input-required" and lifecycle.waits_for_arrival(task):
        raise ApiError(409, "Conflict", f"Request '{task_id}' waits for {codes.WHAT[hitl['kind']]} sent to "
                                        f"{hitl['to']}, not for an answer: send it with POST /fast/v2/codes.")
    if task.status != "input-required" or not hitl.get("inputId"):
        raise ApiError(409, "Conflict", f"Request '{task_id}' is not waiting for input (status: {task.status}).")
    if data.get("inputId") and data["inputId"] != hitl["inputId"]:
        raise ApiError(409, "Conflict", f"inputId '{data['inputId']}' is not the question request "
                                        f"'{task_id}' is waiting on ('{hitl['inputId']}').")
    # The answer rides in `hitl` until the worker puts it into the conversation.
    resumed = db.session.execute(
        update(Task).where(Task.id == task_id, Task.status == "input-required", Task.lease_owner.is_(None))
        .values(status="pending", hitl={**hitl, "answer": data["answer"]}, response=None,
                input_deadline_at=None, dispatched_at=None)
        .returning(Task.id)
    ).first() is not None
    db.session.commit()
    if not resumed:  # answered twice at once, or the input timeout ended it meanwhile
        raise ApiError(409, "Conflict", f"Request '{task_id}' is no longer waiting for input.")
    dispatch(task_id, node=task.browser_node)  # to the worker that keeps its browser, if one does
    return task_id


def _require_window(api_key_id, window_id):
    windows.online_window(api_key_id, window_id)


def stored_gif(task_id):
    """The GIF a task's run stored (bytes), or None; read in a transaction of its own."""
    with db.engine.connect() as conn:
        return conn.execute(select(TaskGif.data).where(TaskGif.task_id == task_id)).scalar_one_or_none()


def store_gif(task_id, data, frames=None):
    """Keep a task's GIF recording (a run resumed after a question replaces it)."""
    with db.engine.begin() as conn:  # its own transaction: a worker's session is not committed under it
        conn.execute(delete(TaskGif).where(TaskGif.task_id == task_id))
        conn.execute(insert(TaskGif).values(task_id=task_id, data=data, frames=frames or 0))



# `wait: true` returns once the task has an outcome or needs input from the caller.
WAIT_OVER = ("success", "error", "input-required")


def submit_and_wait(api_key_id, data, idempotency_key=None):
    """Submit, then block until the task is over: the poll-shaped body, or 408."""
    waiters = current_app.extensions["task_waiters"]
    with waiters.slot():
        request_id, _ = submit(api_key_id, data, idempotency_key)
        return wait_for_result(api_key_id, request_id)


def wait_for_result(api_key_id, task_id):
    """The poll-shaped body once the task is over; 408 after WAIT_TIMEOUT_SECONDS (it runs on)."""
    waiters = current_app.extensions["task_waiters"]
    timeout = current_app.config["WAIT_TIMEOUT_SECONDS"]
    deadline = time.monotonic() + timeout
    with waiters.watch(task_id) as woken:  # registered before the first read: no lost wake-up
        while True:
            woken.clear()
            task = get_task(api_key_id, task_id, fresh=True)
            status, body = task.status, result(task)
            db.session.rollback()  # give the connection back to the pool while blocked
            if status in WAIT_OVER:
                return body
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ApiError(408, "Request Timeout",
                               f"The task did not finish within {timeout:g} s; it keeps running. "
                               "Poll its requestId for the result.", requestId=task_id)
            waiters.wait(woken, remaining)


def cancel(api_key_id, task_id):
    """Cancel a task: returns (poll-shaped body, ended_now).

    A task no worker holds (queued, or waiting for input) ends at once as error "cancelled";
    a running one is flagged, and its worker ends it that way before its next action.
    """
    task = get_task(api_key_id, task_id)
    if task.status in lifecycle.TERMINAL:
        raise _already_finished(task)
    db.session.execute(update(Task).where(Task.id == task_id, Task.status.in_(("pending", "input-required")))
                       .values(cancel_requested=True))
    db.session.commit()
    usage = task.usage or lifecycle.NO_USAGE
    response = lifecycle.failure_response("cancelled")
    response["actionTrace"] = (task.trace or []) + [lifecycle.final_trace_entry("error: cancelled", usage)]
    ended = lifecycle.finish(task_id, "error", response, usage, trace=response["actionTrace"],
                             error="cancelled")
    task = get_task(api_key_id, task_id, fresh=True)
    if task.status in lifecycle.TERMINAL and not ended and task.error != "cancelled":
        raise _already_finished(task)  # it finished on its own in the meantime
    return result(task), ended


def cancel_window(api_key_id, window_id):
    """Cancel every task of the key in the browser window `window_id` that has not ended (the SDK's
    reset_agent_state() in a kept session: app/sessions/cdp_side_panel.py); the ids of those ended now or flagged."""
    task_ids = db.session.execute(select(Task.id).where(
        Task.api_key_id == api_key_id, Task.browser_window_id == window_id,
        Task.status.notin_(lifecycle.TERMINAL))).scalars().all()
    db.session.rollback()
    cancelled = []
    for task_id in task_ids:
        try:
            cancel(api_key_id, task_id)
            cancelled.append(task_id)
        except ApiError:  # it finished on its own in the meantime
            db.session.rollback()
    return cancelled


def _already_finished(task):
    return ApiError(409, "Request Already Finished",
                    f"Request '{task.id}' already finished with status '{task.status}'.")


def resubmit(api_key_id, task_id):
    """Run a task again: a new task with the same body (prompt, mode, window, options, callback).

    Secret variables are kept only while the original runs (they are erased when it ends), so a
    finished task runs again without them.
    """
    task = get_task(api_key_id, task_id)
    data = {"prompt": task.prompt, "executionMode": task.execution_mode,
            "browserWindowId": task.browser_window_id, **(task.options or {})}
    replay = data.pop("replay", None)  # a replay runs again as the same replay
    if replay:
        data.update({k: replay[k] for k in ("replayOf", "scriptId") if k in replay}
                    or {"script": replay["script"]})
    if task.callback_url:
        callback = unseal(task.callback_sealed) or {}
        data.update(callbackUrl=task.callback_url, callbackSecret=callback.get("secret"),
                    callbackHeaders=callback.get("headers") or None)
    if task.secrets_sealed:
        data["secretVariables"] = unseal(task.secrets_sealed)
    if task.proxy_sealed:  # kept with the task (encrypted): it runs again through the same proxy
        data["proxy"] = unseal(task.proxy_sealed)
    if task.previous_request_id:
        data["previousRequestId"] = task.previous_request_id
    return submit(api_key_id, data)[0]


def replay(api_key_id, task_id, variables=None, secrets=None):
    """Replay a task's script (the console's button): a new task like the original, with replayOf.

    `variables` replace the original's inputVariables by name; `secrets` are the script's secret
    variables (the original's were erased when it ended).
    """
    task = get_task(api_key_id, task_id)
    data = {"prompt": None, "executionMode": task.execution_mode, "browserWindowId": task.browser_window_id,
            "cloudBrowserSessionId": task.cloud_session_id, "replayOf": task.id,
            **{k: v for k, v in (task.options or {}).items() if k in ("inputVariables", "timeZone", "generateGif")}}
    if task.proxy_sealed:
        data["proxy"] = unseal(task.proxy_sealed)
    if variables:
        data["inputVariables"] = {**(data.get("inputVariables") or {}), **variables}
    if secrets:
        for name, why in totp.problems(secrets).items():  # the console's form: no schema between it and here
            raise invalid(f"secretVariables: {name}: {why}.")
        data["secretVariables"] = secrets
    return submit(api_key_id, data)[0]
