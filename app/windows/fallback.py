"""What a window cannot do by itself, done with a task in it: the SDK's agentic actions' model fallback (what the
selectors could not do, for the configured model), and a kept session's questions to a person (windows/questions)."""
import json

from ..dispatch import service as dispatch
from ..dispatch.schemas import SubmitSchema
from ..sessions import service as sessions
from . import questions
from . import service as windows

SELECTOR_KEYS = ("id", "data_testid", "name", "aria_label", "role", "type", "text_content", "tag_name",
                 "class_name", "dom_path", "xpath")
# agentic_matching_selectors_finder's answer: the SDK's AgenticSelectors, each a string.
FINDER_SCHEMA = {"type": "object", "required": ["selectors"], "properties": {"selectors": {
    "type": "array", "items": {"type": "object", "properties": {key: {"type": "string"} for key in SELECTOR_KEYS}}}}}
READS = ("getText", "getProperty")


def run_extension_action(api_key_id, body):
    """POST /extension-actions: the action in its window; if it found nothing to act on and a model is configured,
    the same step by the model, as a task in that window. A kept session's questions are asked by a task."""
    name, action = body["action"].get("name"), body["action"]
    if name in questions.QUESTIONS and sessions.serving_window(api_key_id, body["browserWindowId"]) is not None:
        return questions.ask(api_key_id, body)
    model = windows.model_configured()
    if name == "agentic_matching_selectors_finder" and model:
        prompt = (f"Find every visible element on the current page that matches: {action.get('prompt') or ''}. "
                  "Answer with one selector object per element.")
        return _by_the_model(api_key_id, body, prompt, FINDER_SCHEMA)
    answer = windows.run_extension_action(api_key_id, body)
    if not (model and name in windows.MODEL_ACTIONS and answer["status"] == "error"
            and (answer["error"] or "").startswith(windows.NO_MATCH)):
        return answer
    step = dict(action.get("action") or {})
    kind = step.pop("type", "click")
    what = f"; the action: {kind} {json.dumps(step)}" if step else f"; the action: {kind}"
    prompt = f"{action.get('fallback_operator_query') or ''}{what}."
    if kind in READS:
        prompt += " Answer with the value you read, and nothing else."
    return _by_the_model(api_key_id, body, prompt, None, reads=kind in READS)


def _by_the_model(api_key_id, body, prompt, schema, reads=False):
    data = SubmitSchema().load({"prompt": f"/Operator\n{prompt}", "executionMode": "client",
                                "browserWindowId": body["browserWindowId"],
                                **({"responseFormat": {"type": "jsonSchema", "jsonSchema": schema}} if schema else {})})
    result = dispatch.submit_and_wait(api_key_id, data)
    response = result.get("response") or {}
    if result.get("status") != "success":
        return {"status": "error", "data": None,
                "error": f"The model fallback did not succeed ({result.get('status')}): {response.get('text') or ''}"}
    if schema is not None:
        found = response.get("structuredOutput") or json.loads(response.get("text") or "{}")
        return {"status": "success", "data": json.dumps({"selectors": found.get("selectors") or []}), "error": None}
    value = {"value": response.get("text") if reads else None}
    if body["action"].get("verification_description"):
        value["verified"] = None
    return {"status": "success", "data": json.dumps(value), "error": None}
