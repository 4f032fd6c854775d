"""Replay scripts: a task's script, what a replay submits, and saved scripts with their versions (per API key)."""
from sqlalchemy import delete, func, select

from ..task_queries import get_task
from ..errors import ApiError
from ..extensions import db
from ..models import Script, ScriptVersion, new_id
from . import format as scripts


def _iso(ts):
    return ts.isoformat(timespec="milliseconds").replace("+00:00", "Z") if ts else None


def _script_of(task):
    if task.script is None:
        why = ("it has not finished" if task.status in ("pending", "input-required") else
               "only a successful web task (/Operator, in a browser mode) yields one" if task.status == "success"
               and task.agent != "web" else "it did not succeed" if task.status != "success" else
               "its run had no browser step to replay")
        raise ApiError(404, "Script Not Found", f"The request '{task.id}' has no replay script: {why}.")
    return task.script


def task_script(api_key_id, request_id):
    """GET /remote-dispatch/responses/{requestId}/script."""
    task = get_task(api_key_id, request_id)
    script = _script_of(task)
    return {"requestId": task.id, "version": script.get("version", 1), "parameters": script.get("parameters", []),
            "secrets": script.get("secrets", []), "healed": script.get("healed", []), "script": script,
            "text": scripts.as_text(script)}


def replay_for(api_key_id, data):
    """What a submit with replayOf, script or scriptId replays: ({"script", ...}, the prompt), or (None, None)."""
    if data.get("replayOf") is not None:
        script = _script_of(get_task(api_key_id, data["replayOf"]))
        replay = {"script": script, "replayOf": data["replayOf"]}
    elif data.get("scriptId") is not None:
        saved, version = _latest(api_key_id, data["scriptId"])
        replay = {"script": version.body, "scriptId": saved.id}
        data = {**data, "inputVariables": {**(saved.parameters or {}), **(data.get("inputVariables") or {})}}
    elif data.get("script") is not None:
        replay = {"script": dict(data["script"])}
    else:
        return None, data
    prompt = data.get("prompt") or replay["script"].get("prompt") or ("/Operator\n" + scripts.as_text(
        replay["script"]).removeprefix("/Operator\n"))
    if not prompt.lstrip().lower().startswith("/operator"):
        prompt = "/Operator " + prompt  # a script is a web run
    return replay, {**data, "prompt": prompt}


def _saved(api_key_id, script_id):
    saved = db.session.get(Script, script_id) if _is_uuid(script_id) else None
    if saved is None or saved.api_key_id != api_key_id:
        raise ApiError(404, "Script Not Found", f"No saved script '{script_id}' for this API key.")
    return saved


def _is_uuid(value):
    import uuid

    try:
        return str(uuid.UUID(value)) == value.lower()
    except (ValueError, AttributeError, TypeError):
        return False


def _versions(script_id):
    return db.session.execute(select(ScriptVersion).where(ScriptVersion.script_id == script_id)
                              .order_by(ScriptVersion.version)).scalars().all()


def _latest(api_key_id, script_id):
    saved = _saved(api_key_id, script_id)
    return saved, _versions(saved.id)[-1]


def _view(saved, versions, full=True):
    latest = versions[-1]
    body = {"scriptId": saved.id, "name": saved.name, "parameters": saved.parameters or {},
            "createdAt": _iso(saved.created_at), "version": latest.version,
            "versions": [{"version": v.version, "requestId": v.task_id, "healed": v.body.get("healed") or [],
                          "createdAt": _iso(v.created_at)} for v in versions]}
    if full:
        body.update(script=latest.body, text=scripts.as_text(latest.body))
    return body


def save(api_key_id, data):
    """POST /scripts: the script of a finished task of this key becomes version 1 of a saved script."""
    task = get_task(api_key_id, data["requestId"])
    body = {**_script_of(task), "version": 1}
    saved = Script(id=new_id(), api_key_id=api_key_id, name=data["name"], parameters=data.get("parameters") or {})
    db.session.add(saved)
    db.session.add(ScriptVersion(script_id=saved.id, version=1, body=body, task_id=task.id))
    db.session.commit()
    return _view(saved, _versions(saved.id))


def list_scripts(api_key_id):
    saved = db.session.execute(select(Script).where(Script.api_key_id == api_key_id)
                               .order_by(Script.created_at.desc())).scalars().all()
    return {"scripts": [_view(s, _versions(s.id), full=False) for s in saved]}


def get(api_key_id, script_id):
    saved = _saved(api_key_id, script_id)
    return _view(saved, _versions(saved.id))


def remove(api_key_id, script_id):
    saved = _saved(api_key_id, script_id)
    db.session.execute(delete(ScriptVersion).where(ScriptVersion.script_id == saved.id))
    db.session.delete(saved)
    db.session.commit()


def add_version(script_id, body, task_id):
    """A healed replay of a saved script: its script becomes the next version (the worker calls this after
    the task's finish). A script deleted meanwhile gets none."""
    if db.session.get(Script, script_id) is None:
        return None
    number = (db.session.execute(select(func.max(ScriptVersion.version))
                                 .where(ScriptVersion.script_id == script_id)).scalar() or 0) + 1
    db.session.add(ScriptVersion(script_id=script_id, version=number, body={**body, "version": number},
                                 task_id=task_id))
    db.session.commit()
    return number
