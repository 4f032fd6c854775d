"""The SDK's questions to a person (user_approval, prompt_for_user_input, prompt_for_user_file) in a kept cloud session:
it has no side panel, so a task in the session asks through the input-required flow and the answer is the action's."""
import base64
import json
import time

from flask import current_app
from sqlalchemy import select

from ..dispatch import service as dispatch
from ..dispatch.schemas import SubmitSchema
from ..errors import ApiError
from ..extensions import db
from ..models import StoredFile

QUESTIONS = ("user_approval", "prompt_for_user_input", "prompt_for_user_file")
RECHECK_SECONDS = 0.5  # how often a waiting question is looked at again (the wait holds no transaction)
YES = {"yes", "y", "true", "ok", "approve", "approved"}


class BadAnswer(Exception):
    """The answer is not what the question asked for (the action's error)."""


def ask(api_key_id, body):
    """Ask the question as a task in the session (`ask …`: the built-in step, whatever the model), wait for its
    answer through POST /remote-dispatch/responses/{id}/input, and give it the SDK's shape."""
    action = dict(body["action"])
    name = action.pop("name")
    question = " ".join(_question(name, action).split())  # one line: the step's
    data = SubmitSchema().load({"prompt": f"/Operator\nask {question}", "executionMode": "client",
                                "browserWindowId": body["browserWindowId"]})
    task_id, _ = dispatch.submit(api_key_id, data)
    config = current_app.config
    deadline = time.monotonic() + min(body.get("timeout") or config["WINDOW_COMMAND_TIMEOUT_SECONDS"],
                                      config["EXTENSION_ACTION_MAX_SECONDS"])
    while True:
        result = dispatch.wait_for_result(api_key_id, task_id)  # returns at input-required too
        if result["status"] in ("success", "error"):
            break
        if time.monotonic() >= deadline:
            try:
                dispatch.cancel(api_key_id, task_id)
            except ApiError:  # answered meanwhile: the answer came too late for this call anyway
                pass
            raise ApiError(504, "Gateway Timeout", f"Nobody answered the question (request {task_id}) in time.")
        time.sleep(RECHECK_SECONDS)
    text = (result.get("response") or {}).get("text") or ""
    if result["status"] != "success":
        return {"status": "aborted" if text == "cancelled" else "error", "data": None,
                "error": f"The question (request {task_id}) was not answered: {text}"}
    try:
        return {"status": "success", "data": json.dumps(_shaped(api_key_id, name, action, text)), "error": None}
    except BadAnswer as exc:
        return {"status": "error", "data": None, "error": f"The answer to request {task_id} {exc}"}


def _question(name, action):
    asked = action.get("prompt_message") or "Your input is needed."
    if name == "user_approval":
        return f"{asked} (answer '{action.get('approve_label') or 'yes'}' or '{action.get('reject_label') or 'no'}')"
    if name == "prompt_for_user_file":
        return f"{asked} (answer with the key of a file you uploaded with POST /fast/v2/files)"
    names = [v.get("name") for v in action.get("variables") or []]
    if len(names) == 1:
        return f"{asked} ({names[0]})"
    return f"{asked} (answer with a JSON object of {', '.join(map(str, names))})"


def _shaped(api_key_id, name, action, text):
    if name == "user_approval":
        return {"approved": text.strip().lower() in YES | {str(action.get("approve_label") or "").lower()}}
    if name == "prompt_for_user_file":
        stored = db.session.execute(select(StoredFile).where(
            StoredFile.key == text.strip(), StoredFile.api_key_id == api_key_id)).scalar_one_or_none()
        db.session.rollback()
        if stored is None:
            raise BadAnswer(f"'{text.strip()}' is not the key of a file uploaded with this API key.")
        return {"file": {"source": "inMemoryFile", "filename": stored.filename,
                         "mimeType": stored.content_type or "application/octet-stream",
                         "base64": base64.b64encode(stored.data or b"").decode()}}
    variables = action.get("variables") or []
    if len(variables) == 1:
        values = {variables[0].get("name"): text}
    else:
        try:
            values = json.loads(text)
        except ValueError:
            values = None
        if not isinstance(values, dict):
            raise BadAnswer("is not a JSON object of the asked values.")
    kinds = {v.get("name"): v.get("type") for v in variables}
    return {"values_by_name": {key: _typed(kinds.get(key), value) for key, value in values.items()}}


def _typed(kind, value):
    if not isinstance(value, str):
        return value
    if kind == "number":
        try:
            return float(value) if any(c in value for c in ".eE") else int(value)
        except ValueError:
            raise BadAnswer(f"'{value}' is not a number.") from None
    if kind == "boolean":
        return value.strip().lower() in YES
    return value
