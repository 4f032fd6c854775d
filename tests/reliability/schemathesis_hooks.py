"""schemathesis checks of our own, loaded by tests/reliability/test_fuzz.py (SCHEMATHESIS_HOOKS)."""
import re

import schemathesis
from schemathesis.core.failures import Failure

SUBMIT = ("POST", "/fast/v2/remote-dispatch")
# A schema-valid submit may still be refused for what the document describes in words, because JSON
# Schema cannot say it: state (another key's or an unknown request, file, window), a jsonSchema that is
# not a JSON Schema, two MCP servers whose labels give one tool prefix, a time zone the server's tz
# database does not know, callbackHeaders other than Authorization / x-… (422 alone, 400 with others),
# a reused Idempotency-Key, a callbackUrl host written in a form parsers disagree on.
DESCRIBED_STATE = ("previousRequestId '", "attachment key '")  # refused by the service, one at a time
DESCRIBED_FIELD_ERRORS = (  # validation: "<field>: <problem>" parts, one per field
    "responseFormat: jsonSchema: not a valid JSON Schema",
    "mcpServers: each MCP server needs its own label",
    "mcpServers: N: url: URL ",  # a host that is no valid name or canonical address (the field's description)
    "timeZone: '",
    "callbackHeaders: header(s) ",
    "callbackUrl: URL ",  # a host that is no valid name or canonical address (the field's description)
    "allowedDomains: N: ",  # a host pattern the egress parser refuses (the field's description)
    "prompt: Missing data",  # required unless the task replays a script (the field's description)
    "script: ",  # a replay script is the object GET …/script returns (the field's description), checked as such
    "executionMode: a replay needs a browser",  # replayOf/script/scriptId with cloud (replayOf's description)
    "replayOf: give one of", "script: give one of", "scriptId: give one of",  # two of them (replayOf's description)
    # A browser of ours only: cloud_browser, not a task in a kept session (the fields' descriptions).
    "profile: profile needs a browser", "profile: a kept session's browser takes",
    "proxy: proxy needs a browser", "proxy: a kept session's browser takes", "proxy: the ", "profile: this task's agent",
    "proxy: server: ",  # an address the egress check refuses, or a name that does not resolve (its description)
)
SUBMIT_FIELDS = ("prompt", "browserWindowId", "executionMode", "clearChat", "previousRequestId", "generateGif",
                 "responseFormat", "attachments", "timeZone", "mcpServers", "secretVariables", "inputVariables",
                 "chatHistory", "additionalContext", "reasoningMode", "callbackUrl", "callbackSecret",
                 "callbackHeaders", "wait", "cloudBrowserSessionName", "cloudBrowserSessionId", "allowedDomains",
                 "replayOf", "script", "scriptId", "profile", "proxy", "body")
ITEM_INDEX = re.compile(r"^(\w+: )\d+: ")
FIELD_PART = re.compile(r"(?:^| )(?=(?:" + "|".join(SUBMIT_FIELDS) + r"): )")


def only_described_refusals(message):
    if message.startswith(DESCRIBED_STATE):
        return True
    parts = [part for part in FIELD_PART.split(message) if part]
    parts = [ITEM_INDEX.sub(r"\1N: ", part) for part in parts]  # "mcpServers: 2: …" → "mcpServers: N: …"
    return bool(parts) and all(part.startswith(DESCRIBED_FIELD_ERRORS) for part in parts)


ACCEPTED = (401, 404, 408, 409, 422, 429)  # window not found, wait timeout, callbackHeaders and key reuse


@schemathesis.check
def error_bodies_are_error_and_message(ctx, response, case):
    """Every error is `{error, message}` with string values (README, errors)."""
    if response.status_code < 400:
        return None
    try:
        body = response.json()
    except ValueError:
        body = None
    if not (isinstance(body, dict) and isinstance(body.get("error"), str) and isinstance(body.get("message"), str)):
        raise Failure(operation=case.operation.label, title="Error body is not {error, message}",
                      message=f"{response.status_code}: {response.text[:300]!r}")
    return None


@schemathesis.check
def submit_accepts_what_its_document_allows(ctx, response, case):
    """positive_data_acceptance for submit (disabled there in the config), with DESCRIBED_REFUSALS."""
    if (case.operation.method.upper(), case.operation.path) != SUBMIT or case.meta is None:
        return None
    if not case.meta.generation.mode.is_positive or response.status_code < 400:
        return None
    if response.status_code in ACCEPTED:
        return None
    message = (response.json() or {}).get("message", "") if response.status_code == 400 else ""
    if response.status_code == 400 and only_described_refusals(message):
        return None
    raise Failure(operation=case.operation.label, title="Schema-valid submit rejected",
                  message=f"{response.status_code}: {response.text[:500]}")
