"""What the console shows of tasks and windows, built from the API's service functions."""
import json
from datetime import datetime, timezone

from .. import task_queries
from ..dispatch import recording_store
from ..scripts.format import as_text, secrets_of
from ..windows.service import list_windows

STATUS_LABELS = {"pending": "Running", "success": "Succeeded", "error": "Failed",
                 "input-required": "Needs input"}
ACTIVE = ("pending", "input-required")


def _badge(task):
    """(badge status, label): a cancelled task ended as `error` in the API, but nothing failed."""
    if task.status == "error" and task.error == "cancelled":
        return "cancelled", "Cancelled"
    if task.status == "input-required" and (task.hitl or {}).get("type") == "arrival":  # no one is asked anything
        return task.status, f"Waiting for a {task.hitl.get('kind', 'code')}"
    return task.status, STATUS_LABELS.get(task.status, task.status)


def _elapsed(task):
    start = task.created_at
    end = task.completed_at or datetime.now(timezone.utc)
    return max(0, round((end - start).total_seconds())) if start else None


def row(task):
    """A task in the list: enough to recognise it and follow its progress."""
    badge, label = _badge(task)
    return {"id": task.id, "status": task.status, "badge": badge, "statusLabel": label,
            "mode": task.execution_mode, "agent": task.agent, "prompt": task.prompt[:300],
            "createdAt": task_queries.isoformat(task.created_at), "actions": (task.usage or {}).get("actions", len(task.trace or [])),
            "elapsedSeconds": _elapsed(task), "active": task.status in ACTIVE,
            "replay": bool((task.options or {}).get("replay"))}


def _failed(entry):
    return bool(entry.get("failed") or entry.get("error") or str(entry.get("action", "")).startswith("error:"))


def _step(entry):
    """A trace entry on the timeline; a failed one says so in words, with its reason."""
    action = str(entry.get("action") or "")
    failed = _failed(entry)
    if failed and action.startswith("error:"):
        action = action[len("error:"):].strip()
    reason = entry.get("error") if isinstance(entry.get("error"), str) and entry.get("error") != action else None
    return {"url": entry.get("url") or "", "action": action, "durationMs": entry.get("durationMs"),
            "failed": failed, "reason": reason, "replayed": entry.get("replayed"), "startTs": entry.get("startTs"),
            "waited": entry.get("waited") if isinstance(entry.get("waited"), str) else None}


def _script(task):
    """The task's replay script (a successful web run) and, for a replay, what it replayed."""
    replay = (task.options or {}).get("replay") or {}
    script = task.script
    if not script and not replay:
        return None
    return {"version": (script or {}).get("version"), "healed": (script or {}).get("healed") or [],
            "parameters": (script or {}).get("parameters") or [], "steps": len((script or {}).get("steps") or []),
            "secrets": secrets_of(script) if script else [], "defaults": (script or {}).get("defaults") or {},
            "text": as_text(script) if script else None,
            "replayOf": replay.get("replayOf"), "scriptId": replay.get("scriptId"),
            "replayedVersion": (replay.get("script") or {}).get("version") if replay else None}


def _output(task):
    """The output as text to show; structured output pretty-printed, with the check the worker stored when
    the task ended (never checked again here: a schema's check can cost seconds, a page view must not)."""
    response = task.response if task.status != "pending" else None
    if not response:
        return None
    output = response.get("output") or {"type": "text", "content": response.get("text")}
    content = output.get("content")
    view = {"type": output.get("type", "text"), "text": content if isinstance(content, str) else "",
            "valid": None, "problem": None, "check": None}
    schema = ((task.options or {}).get("responseFormat") or {}).get("jsonSchema")
    if view["type"] == "structured" or (schema and task.status == "success"):
        data = content
        if isinstance(content, str):
            try:
                data = json.loads(content)
            except ValueError:
                data = None
        if data is not None:
            view["text"] = json.dumps(data, indent=2, ensure_ascii=False)
    if schema and (task.schema_check or task.status == "success"):
        view.update(_check(task.schema_check))
    return view


def _check(stored):
    """The stored schema check in words: checked (valid or not), not checkable (over its budget), or not
    recorded (a task that succeeded before checks were stored)."""
    if not stored:
        return {"check": "Schema check: not recorded."}
    if stored.get("valid") is None:
        return {"problem": stored.get("problem"),
                "check": f"Not checked against the response schema: {stored.get('problem')}"}
    if stored["valid"]:
        return {"valid": True, "check": "✓ Matches the response schema."}
    return {"valid": False, "problem": stored.get("problem"),
            "check": f"✗ Does not match the response schema: {stored.get('problem')}"}


def task(task):
    """Everything the task page shows (also sent to its live updates)."""
    hitl = task.hitl if task.status == "input-required" else None
    question = ((hitl or {}).get("action") or {}).get("question") or (hitl or {}).get("question")
    usage = task.usage or {}
    badge, label = _badge(task)
    return {
        "id": task.id, "status": task.status, "badge": badge, "statusLabel": label,
        "mode": task.execution_mode, "agent": task.agent, "prompt": task.prompt,
        "browserWindowId": task.browser_window_id,
        "createdAt": task_queries.isoformat(task.created_at), "startedAt": task_queries.isoformat(task.started_at),
        "completedAt": task_queries.isoformat(task.completed_at), "elapsedSeconds": _elapsed(task),
        "actions": usage.get("actions", 0), "credits": usage.get("credits", 0),
        "output": _output(task),
        "trace": [_step(e) for e in (task.trace or [])],
        "question": question, "inputId": (hitl or {}).get("inputId"),
        "canCancel": task.status in ACTIVE, "canAnswer": task.status == "input-required" and (hitl or {}).get("type") != "arrival",
        "hasGif": task.status not in ACTIVE and task_queries.task_gif(task.api_key_id, task.id) is not None,
        "hasRecording": recording_store.exists(task.id),
        "schema": ((task.options or {}).get("responseFormat") or {}).get("jsonSchema"),
        "callbackUrl": task.callback_url,
        "script": _script(task),
        "files": (task.response or {}).get("files") or [],
    }


def gif(api_key_id, task_id):
    return task_queries.task_gif(api_key_id, task_id)  # 404 for another key's task


def windows(api_key_id):
    """The key's open browser windows, as GET /fast/v2/browser-windows lists them."""
    return [{"id": w["browserWindowId"], "name": w["label"] or w["browserWindowId"], "online": w["state"] == "online",
             "lastSeenAt": w["lastSeenAt"]}
            for w in list_windows(api_key_id)["windows"]]


def window_with_tasks(api_key_id, window):
    recent = task_queries.task_page(api_key_id, window=window["id"], limit=5)["tasks"]
    return {**window, "recentTasks": [row(t) for t in recent]}
