"""Console forms (urlencoded) to and from the API's request bodies, validated by the API's schemas."""
import json

from marshmallow import ValidationError

from .. import schema_base, task_results
from ..dispatch import schemas as dispatch_schemas
from ..errors import _flatten

SECRET_ROWS = 3
ECHOED = ("prompt", "executionMode", "browserWindowId", "responseFormat", "callbackUrl", "generateGif", "wait",
          "inputVariables", "allowedDomains",
          *(f"secret_name_{n}" for n in range(SECRET_ROWS)))


def list_filters(args):
    """The Tasks page's query string as task_page() arguments, and problems to show."""
    query, problems = {}, []
    if args.get("status") in task_results.STATUSES:
        query["status"] = args["status"]
    if args.get("mode") in dispatch_schemas.EXECUTION_MODES:
        query["mode"] = args["mode"]
    if args.get("q", "").strip():
        query["search"] = args["q"].strip()[:200]
    if args.get("cursor"):
        try:
            query["cursor"] = schema_base.Cursor().deserialize(args["cursor"])
        except ValidationError:
            problems.append("That page link is not valid any more; showing the newest tasks.")
    return query, problems


def submit_body(form):
    """The submit body the New task form describes, and {field: problem} for what cannot be read."""
    data, errors = {"prompt": form.get("prompt", ""), "executionMode": form.get("executionMode", "cloud"),
                    "generateGif": form.get("generateGif") == "on", "wait": form.get("wait") == "on"}, {}
    if form.get("browserWindowId"):
        data["browserWindowId"] = form["browserWindowId"]
    if form.get("callbackUrl", "").strip():
        data["callbackUrl"] = form["callbackUrl"].strip()
    schema_text = form.get("responseFormat", "").strip()
    if schema_text:
        try:
            data["responseFormat"] = json.loads(schema_text)  # the API reads both forms (a plain JSON Schema)
        except ValueError as exc:
            errors["responseFormat"] = f"not valid JSON: {exc}."
    variables_text = form.get("inputVariables", "").strip()
    if variables_text:
        try:
            data["inputVariables"] = json.loads(variables_text)
        except ValueError as exc:
            errors["inputVariables"] = f"not valid JSON: {exc}."
        else:
            if not isinstance(data["inputVariables"], dict):
                errors["inputVariables"] = 'give a JSON object, e.g. {"user": "ada"}.'
    domains = form.get("allowedDomains", "").replace(",", " ").split()
    if domains:
        data["allowedDomains"] = domains
    secrets = {}
    for n in range(SECRET_ROWS):
        name, value = form.get(f"secret_name_{n}", "").strip(), form.get(f"secret_value_{n}", "")
        if name and value:
            secrets[name] = value
        elif name or value:
            errors[f"secret_{n}"] = "give both a name and a value (or neither)."
    if secrets:
        data["secretVariables"] = secrets
    return data, errors


def replay_inputs(form):
    """The replay form's input variables (var_<name>) and secrets (secret_<name>); empty ones are left out."""
    variables = {name[4:]: value for name, value in form.items() if name.startswith("var_") and value}
    secrets = {name[7:]: value for name, value in form.items() if name.startswith("secret_") and value}
    return variables, secrets


def describe(messages):
    """marshmallow's {field: problems} as {field: one sentence}."""
    described = {}
    for name, problems in messages.items():
        if name == "responseFormat" and isinstance(problems, dict):
            problems = problems.get("jsonSchema", problems)
        described[name] = _flatten(problems)
    return described


def echo(form):
    """What a re-shown form keeps: everything typed except secret values."""
    return {name: form.get(name, "") for name in ECHOED}


def prefill(task):
    """The New task form filled from an earlier task ("edit and run again"); secrets are not kept."""
    options = task.options or {}
    schema = (options.get("responseFormat") or {}).get("jsonSchema")
    return {"prompt": task.prompt, "executionMode": task.execution_mode,
            "browserWindowId": task.browser_window_id or "", "callbackUrl": task.callback_url or "",
            "responseFormat": json.dumps(schema, indent=2) if schema else "",
            "generateGif": "on" if options.get("generateGif") else "",
            "inputVariables": json.dumps(options["inputVariables"], indent=2) if options.get("inputVariables") else "",
            "allowedDomains": " ".join(options.get("allowedDomains") or [])}
