"""What one task may store: long outputs and trace entries are cut, with a visible marker."""
from flask import current_app


def truncate(text, limit):
    """`text` cut to at most `limit` characters plus a marker saying how much was cut."""
    if not isinstance(text, str) or len(text) <= limit:
        return text
    return f"{text[:limit]}… [truncated: {len(text) - limit} more characters]"


def bounded_trace(trace):
    """Every text of every trace entry cut to MAX_TRACE_ENTRY_CHARS."""
    if not trace:
        return trace
    limit = current_app.config["MAX_TRACE_ENTRY_CHARS"]
    return [{name: truncate(value, limit) for name, value in entry.items()}
            if isinstance(entry, dict) else entry for entry in trace]


def bounded_response(response):
    """A task's `response` with its text output cut to MAX_OUTPUT_CHARS and its trace bounded."""
    if not isinstance(response, dict):
        return response
    limit = current_app.config["MAX_OUTPUT_CHARS"]
    response = dict(response)
    if "text" in response:
        response["text"] = truncate(response["text"], limit)
    output = response.get("output")
    if isinstance(output, dict) and isinstance(output.get("content"), str):
        response["output"] = {**output, "content": truncate(output["content"], limit)}
    if response.get("actionTrace"):
        response["actionTrace"] = bounded_trace(response["actionTrace"])
    return response
