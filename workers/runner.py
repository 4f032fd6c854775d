"""Runs one task: claim it, hold the lease while the agent works, finish (or pause) it in one transaction."""
import logging
import os
import socket
import threading
import time
import uuid
from datetime import datetime

from celery.exceptions import SoftTimeLimitExceeded
from flask import current_app
from sqlalchemy.exc import InterfaceError, OperationalError

from app import lifecycle
from app.agents import split_prefix
from app.task_publish import dispatch
from app.codes import service as codes
from app.credentials import service as credentials
from app.credentials.placeholders import arrivals, placeholder_text
from app.crypto import seal, unseal
from app.extensions import db
from app.files.service import referenced_keys, task_files
from app.models import Task, now_plus
from app.scripts.format import secrets_of
from app.scripts.service import add_version

from .agent.actions import Outcome
from .agent.arrivals import Arrivals
from .agent.conversation import Conversation
from .agent.environments import environment_for
from .agent.loop import AgentLoop, Budget, RunState, _ms, _ts
from . import shutdown
from .agent.mcp import credential_values, open_servers
from .agent.secrets import Secrets
from .agent.takeover import PersonControl
from .planners import Brief, make_planner, model_configured
from .replay.script_hook import ScriptHook
from .replay.replayer import ReplayPlanner
from .planners.builtin import split_steps
from .shown import Shown

log = logging.getLogger(__name__)
FLAGS_SECONDS = 0.1  # a running task reads its cancel and takeover flags at most this often


def worker_identity():
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class Lease:
    """Renews the task's lease on a background thread while the agent runs."""

    def __init__(self, task_id, owner, seconds):
        self.task_id, self.owner, self.seconds = task_id, owner, seconds
        self.engine = db.engine
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name=f"lease-{task_id}", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _renew(self):
        while not self._stop.wait(self.seconds / 3):
            try:
                with self.engine.begin() as conn:
                    if not lifecycle.renew(conn, self.task_id, self.owner, self.seconds):
                        self.lost.set()
                        return
            except Exception:  # database blip: try again at the next beat, the lease has slack
                log.warning("lease renewal for %s failed", self.task_id, exc_info=True)


def execute_task(task_id, node=None):
    """Idempotent: a task that is not claimable (done, or held by another worker) is left alone. `node`: the Celery
    worker running it, whose own queue (worker_direct) the answer to a pause that kept its browser is sent to."""
    owner = worker_identity()
    # Read once, from the claim, and let go: no transaction stays open across the run's slow work (browser
    # start, model calls, steps), and nothing of the row is reloaded in one.
    task = lifecycle.claim(task_id, owner)
    if task is None:
        log.info("task %s not claimable; duplicate or finished message ignored", task_id)
        return
    config = current_app.config
    named = placeholder_text(task.prompt, task.options)  # stored credentials and codes it names
    secrets = Secrets(unseal(task.secrets_sealed), credentials.for_task(task.api_key_id, named), arrivals(named))
    secrets.hide(credential_values(unseal(task.mcp_sealed)))  # MCP credentials: never in traces or logs
    if task.hitl and secrets.generators:  # resumed: a one-time code typed before the pause may still be shown
        secrets.remember_codes(task.created_at.timestamp(), time.time())
    # `shown`: the live state and trace so far, written beside the run; leaving the block writes what is left of
    # them, so the finish below comes after them.
    with Lease(task_id, owner, config["LEASE_SECONDS"]) as lease, Shown(task_id, owner) as shown, \
            secrets.redacting_logs():
        cancel_read = [task.cancel_requested]  # the claim just read it: the first check needs no query
        seen = {"takeover": task.takeover}  # a person's control (live view), as the latest check read it

        def halted():
            return lease.lost.is_set() or shutdown.requested.is_set()

        read_at, cancelled = [time.monotonic()], [False]

        def stop():
            """Read between steps and inside long ones: a cancel stops the run (and says so at every later check), a
            person's takeover pauses it here (PersonControl.hold), at once. The row is read at most every
            FLAGS_SECONDS (a step's settling asks many times in a row)."""
            if halted():
                return True
            if cancel_read:
                cancelled[0] = cancel_read.pop()
            elif not cancelled[0] and time.monotonic() - read_at[0] >= FLAGS_SECONDS:
                read_at[0] = time.monotonic()
                cancelled[0] = _run_flags(task_id, seen)[0]
            return cancelled[0] or person.hold()

        person = PersonControl(task, owner, lambda: _run_flags(task_id, seen), seen, shown, halted)
        waited = unseal(task.wait_sealed) if lifecycle.waits_for_arrival(task) and task.wait_sealed else {}
        if secrets.arrivals:
            secrets.wait = Arrivals(task.api_key_id, config["CODE_WAIT_SECONDS"], secrets, waited.get("arrivals"))
        loop, snapshot, kept = None, None, False
        time_up = Outcome("error", "Time limit reached: the worker's time limit for one task "
                                   f"({config['TASK_SOFT_TIME_LIMIT_SECONDS']} s) interrupted it.")
        try:
            loop = build_loop(task, stop, secrets, shown, person, waited)
        except ValueError as exc:  # the prompt cannot be planned, or the agent cannot run here
            outcome = Outcome("error", secrets.redact(str(exc)))
        except SoftTimeLimitExceeded:  # while its browser was starting
            outcome = time_up
        else:
            outcome = None
            try:
                outcome = loop.run()
            except SoftTimeLimitExceeded:
                outcome = time_up
            except Exception:
                log.exception("task %s failed", task_id)
                outcome = Outcome("error", "The task failed because of an internal error.")
            finally:
                pausing = outcome is not None and outcome.status == "input-required" and not halted()
                snapshot, kept = close_environment(loop.environment, pausing)
    if lease.lost.is_set():
        log.warning("lease on %s lost; another worker or a sweep owns it now", task_id)
        return
    if shutdown.requested.is_set() and not outcome_is_final(outcome, loop, task_id):
        if lifecycle.hand_back(task_id, owner):  # lease released, marked undispatched
            # Back in the queue now (this message is acked); if the broker is down, the
            # undispatched sweep publishes it after DISPATCH_GRACE_SECONDS.
            requeued = dispatch(task_id)
            log.info("worker stopping: task %s handed back%s", task_id,
                     " to the queue" if requeued else "; beat will re-publish it")
        return
    trace = loop.state.trace if loop else []
    trace, files = _with_downloads(task, loop, trace, secrets)
    if loop is not None and loop.environment.end_notes:
        trace = trace[:-1] + secrets.redact(loop.environment.end_notes) + trace[-1:]
    usage = loop.usage() if loop else lifecycle.NO_USAGE
    extra = {"messages": loop.state.conversation.messages} if loop else {}
    script = recorded_script(task, loop, outcome)
    if script is not None:
        extra["script"] = script
    if loop is not None and loop.schema_check is not None:
        extra["schema_check"] = secrets.redact(loop.schema_check)
    arrival = outcome.status == "input-required" and (outcome.hitl or {}).get("type") == "arrival"
    if outcome.status == "input-required":
        # The browser's state, sealed, for a fresh browser should the kept one be gone when the answer comes.
        extra.update(hitl=outcome.hitl, input_deadline_at=now_plus(config["INPUT_TIMEOUT_SECONDS"]),
                     pause_snapshot=seal(snapshot) if snapshot else None, browser_node=node if kept else None)
    if arrival:  # until the code or link comes, or CODE_WAIT_SECONDS after the wait began
        extra.update(input_deadline_at=datetime.fromisoformat(outcome.hitl["waitingUntil"]),
                     wait_sealed=seal(_waited(secrets, loop)))
    response = _response(outcome, trace)
    if files:
        response["files"] = files
    paused = _finish_while_leased(config["LEASE_SECONDS"], task_id, outcome.status, response, usage,
                                  trace=trace, error=outcome.text if outcome.status == "error" else None,
                                  owner=owner, **extra)
    if paused and arrival and secrets.wait.arrived():  # it came while the run paused: no one else resumes it
        codes.resume_waiting(task.api_key_id, outcome.hitl["to"], [outcome.hitl["kind"]], task_id=task_id)
    saved = ((task.options or {}).get("replay") or {}).get("scriptId")
    if saved and script is not None and script.get("healed"):
        add_version(saved, script, task_id)


DATABASE_DOWN = (OperationalError, InterfaceError)


def outcome_is_final(outcome, loop, task_id):
    """While stopping, an outcome the run reached on its own is written; one the stop forced is not."""
    stopped_early = loop is not None and outcome.status == "error" and outcome.text == "cancelled"
    return not stopped_early or _cancel_requested(task_id)


def _finish_while_leased(lease_seconds, *args, **kwargs):
    """A database outage at the end must not throw a finished run away: keep trying while our
    lease would still hold; after that the lease sweep owns the task anyway."""
    deadline = time.monotonic() + lease_seconds
    while True:
        try:
            return lifecycle.finish(*args, **kwargs)
        except DATABASE_DOWN:
            db.session.remove()
            if time.monotonic() > deadline:
                raise
            log.warning("database unavailable while finishing %s; retrying", args[0])
            time.sleep(1)


def _run_flags(task_id, seen):
    """Between actions: (cancel requested, takeover, status) in one read; `seen` keeps the takeover for the
    loop. While the database is unreachable the run goes on as it was."""
    try:
        flags = lifecycle.run_flags(task_id)
    except DATABASE_DOWN:
        db.session.remove()
        return False, seen.get("takeover"), "pending"
    finally:
        db.session.rollback()  # as below: no transaction stays open across the slow work that follows
    seen["takeover"] = flags[1]
    return flags


def _cancel_requested(task_id):
    """Between actions and while one waits; while the database is unreachable the run goes on (no cancel
    can land)."""
    try:
        return lifecycle.cancel_requested(task_id)
    except DATABASE_DOWN:
        db.session.remove()
        return False
    finally:
        # The read's transaction ends here: what follows a check is slow work (a model call, a step), and
        # an open transaction would pin a connection and freeze now() for the task's final write.
        db.session.rollback()


def close_environment(environment, pausing=False):
    """Close the run's environment; at an input-required pause its browser may be kept instead. Returns
    (the browser's snapshot or None, whether the browser was kept)."""
    try:
        if pausing:
            return environment.pause(current_app.config["INPUT_KEEP_BROWSER_SECONDS"])
        environment.close()
        return None, False
    finally:
        environment.remove_temporary_files()
        if environment.mcp is not None:
            environment.mcp.close()


def _waited(secrets, loop):
    """What the run that takes up a pause for a code or link goes on from: the arrivals' state, the script recorded
    so far and a replay's place (the step that waits runs again)."""
    hook = getattr(loop.environment, "script_hook", None)
    planner = loop.planner
    return {"arrivals": secrets.wait.kept(), "script": hook.kept() if hook is not None else None,
            "replay": planner.kept() if isinstance(planner, ReplayPlanner) else None}


def build_loop(task, should_stop, secrets, shown, person=None, waited=None):
    config = current_app.config
    options = task.options or {}
    schema = (options.get("responseFormat") or {}).get("jsonSchema")
    # One session per MCP server for the whole run; a server that cannot be used ends the task (ValueError).
    mcp = open_servers(task, config, unseal(task.mcp_sealed))
    try:
        environment = environment_for(task, should_stop, config)
    except BaseException:
        if mcp is not None:
            mcp.close()
        raise
    environment.mcp = mcp
    environment.secrets = secrets  # a browser run's recording keeps no secret value (page URLs, fields, echoes)
    environment.masks_fields = bool(secrets.names())  # nor its GIF: text fields are dots in its frames
    try:
        if person is not None:  # live viewers can watch the browser, and a person take control of it
            environment.go_live(person)
        # The agent prefix chose the agent at submit; the planner gets the prompt without it.
        body = split_prefix(task.prompt)[1]
        prompt = "\n".join(split_steps(body)) if task.agent == "web" else body
        # A value the caller also wrote out in plain text still reaches the planner only as its placeholder.
        brief = Brief(
            prompt=secrets.redact(prompt), agent=task.agent, tools=environment.tools(schema),
            variables=secrets.redact(options.get("inputVariables") or {}),
            additional_context=secrets.redact(options.get("additionalContext") or {}),
            secret_names=secrets.names(), one_time_codes=sorted(secrets.generators), response_schema=schema,
            time_zone=options.get("timeZone") or "America/Los_Angeles",
            attachments=referenced_keys(options),
        )
        planner = replay_planner(task, environment, secrets, brief, config, waited or {}) or make_planner(
            brief, config)
        # A vision model gets a screenshot beside each page view, unless the task has secrets: a value typed
        # into a visible text field would reach the model in the picture.
        environment.screenshots = getattr(planner, "vision", False) and not secrets.names()
        resumed = _resumed_state(task, secrets)
        if resumed is not None and environment.resumed:  # the trace says whether the browser was kept or restored
            resumed.trace.append(secrets.redact(environment.resumed))
        state = resumed or RunState(
            Conversation.begin(secrets.redact(_earlier_messages(task)), _with_start_page(
                brief.prompt, environment, config, secrets)))
        state.trace.extend(secrets.redact(environment.notes))
        budget = Budget(config["MAX_STEPS"], config["TASK_TIMEOUT_SECONDS"], config["NO_PROGRESS_REPEATS"])
        pricing = (config["CREDITS_PER_ACTION"], config["CREDITS_PER_1K_TOKENS"])

        def progress(state):  # the trace so far, for pollers
            shown.progress(state.trace, state.usage(*pricing))

        return AgentLoop(planner, environment, budget, pricing, state, on_progress=progress,
                         should_stop=should_stop, secrets=secrets, response_schema=schema, agent=task.agent)
    except BaseException:
        close_environment(environment)
        raise


def _with_start_page(prompt, environment, config, secrets):
    """A model is shown the page a task starts on (a kept session's, the user's window) with the prompt; the
    built-in planner parses the prompt alone."""
    if not model_configured(config):
        return prompt
    first = environment.first_observation()
    return f"{prompt}\n\n{secrets.redact(first)}" if first else prompt


def replay_planner(task, environment, secrets, brief, config, waited):
    """Browser runs record their script; a replay (options.replay) runs one without a model, and heals with
    the model from a step that cannot run when one is configured. None: the usual planner. `waited`: what a pause
    for a code or link kept (`_waited`), from which the script and the replay go on."""
    if not hasattr(environment, "script_hook") or (task.hitl and not lifecycle.waits_for_arrival(task)):
        return None  # no browser, or resumed after a question: the trace before it is not recorded
    replay = (task.options or {}).get("replay")
    variables = {**((replay or {}).get("script", {}).get("defaults") or {}),
                 **((task.options or {}).get("inputVariables") or {})}
    environment.script_hook = ScriptHook(secrets, variables, base=replay and replay["script"],
                                         kept=waited.get("script"))
    if not replay:
        return None
    missing = sorted(set(secrets_of(replay["script"])) - set(secrets.names()))
    if missing:
        raise ValueError("The script types secrets this replay was not given: "
                         + ", ".join(f"${{{name}}}" for name in missing) + " (send them in secretVariables).")
    heal = (lambda: make_planner(brief, config)) if model_configured(config) else None
    return ReplayPlanner(replay["script"], environment.script_hook, variables, heal=heal, kept=waited.get("replay"))


def recorded_script(task, loop, outcome):
    """The finished run's script (success only), with the model's steps numbered in `healed`."""
    hook = getattr(loop.environment, "script_hook", None) if loop else None
    if hook is None or outcome.status != "success":
        return None
    return hook.script(task.prompt, task.id)


def _resumed_state(task, secrets):
    """A task answered after `input-required` continues where it paused, with the answer in its history (after a
    pause for a code or link there is no answer: the step that waited runs again)."""
    if not (lifecycle.takes_up_a_pause(task) and task.messages):
        return None
    trace = [dict(entry) for entry in task.trace or []]
    if trace:
        trace[-1].pop("credits", None)  # the pause's entry is no longer the final one
    usage = task.usage or {}
    answer = task.hitl.get("answer")
    conversation = Conversation(list(task.messages)) if answer is None else Conversation.resume(
        task.messages, secrets.redact(answer))
    return RunState(conversation, trace=trace,
                    actions=usage.get("actions", 0), prior_actions=usage.get("actions", 0),
                    page_actions=usage.get("actions", 0),
                    prior_credits=usage.get("credits", 0.0))


def _earlier_messages(task):
    """The linked conversation (`previousRequestId` with `clearChat: false`), then the SDK's chatHistory."""
    options = task.options or {}
    earlier = []
    if task.previous_request_id and options.get("clearChat") is False:
        previous = db.session.get(Task, task.previous_request_id)
        if previous is not None and previous.api_key_id == task.api_key_id:
            earlier.extend(previous.messages or [])
    earlier.extend({"role": m["role"], "content": m["content"]} for m in options.get("chatHistory") or [])
    return earlier


def _with_downloads(task, loop, trace, secrets):
    """(the trace with an entry per file the browser downloaded in this run, kept or left out and why, before the
    final entry; the task's files, of this run and of any earlier one), or (trace, None) for the general agent."""
    kept = getattr(loop.environment, "downloads", None) if loop else None
    if kept is None:
        return trace, None
    now = _ts(_ms(time.time()))
    url = trace[-1].get("url", "") if trace else ""
    entries = []
    for item in kept:
        entry = {"url": url, "action": f"download {item['name']}", "startTs": now, "endTs": now, "durationMs": 0}
        if "file" in item:
            stored = item["file"]
            entry["result"] = f"kept as {stored['key']} ({stored['size']} bytes, {stored['contentType']})"
        else:
            entry.update(failed=True, error=f"left out: {item['leftOut']}")
        entries.append(secrets.redact(entry))
    if entries:
        trace = trace[:-1] + entries + trace[-1:]
    return trace, task_files(task.id)


def _response(outcome, trace):
    if outcome.status == "error":
        response = lifecycle.failure_response(outcome.text)
        response["actionTrace"] = trace
        return response
    structured = outcome.structured
    output = ({"type": "structured", "content": structured} if structured is not None
              else {"type": "text", "content": outcome.text})
    return {"output": output, "actionTrace": trace, "text": outcome.text,
            "structuredOutput": structured}
