"""The vocabulary shared by planners, the loop and environments."""
import json
from dataclasses import dataclass, field

from app.scripts.format import points_text


@dataclass
class Action:
    """What a planner decided: a tool name, its arguments, and a line for the trace."""

    name: str
    args: dict = field(default_factory=dict)
    description: str = ""
    call_id: str = ""
    note: str = ""  # the model's words alongside the call, kept in the conversation
    batch: str = ""  # the id of the first call of the model's reply this call belongs to (several calls per reply)

    def key(self):
        """Identity for no-progress detection."""
        return (self.name, repr(sorted(self.args.items())))


@dataclass
class Tool:
    """A tool offered to planners: the model sees `parameters` (JSON Schema) and `description`."""

    name: str
    description: str
    parameters: dict = field(default_factory=lambda: {"type": "object", "properties": {}})
    # What a model is offered when it is narrower than what runs: a grammar-constrained server (llama.cpp,
    # vLLM, OpenAI strict) then emits that form (an element number), while `parameters` still accepts the rest.
    offered: dict | None = None


def params(required=(), **properties):
    """A JSON Schema object for tool arguments; each property is a JSON Schema."""
    return {"type": "object", "properties": properties, "required": list(required)}


STRING = {"type": "string"}
NUMBER = {"type": "number"}
# The web agent's answer says what on the page shows the task done: the completion check looks for it there.
EXPECT = {"type": "string", "maxLength": 200,
          "description": "Text the page now shows because the task is done, copied from the page view."}
ANSWER_VARIABLE = "answer"  # hitlInputMetadata.action.variables' one name; `{{answer}}` in a built-in step


@dataclass
class Observation:
    """What executing an action returned to the planner."""

    text: str = ""
    url: str = ""
    failed: bool = False  # the step did not do what it should (page unreachable, nothing matched)
    trace_result: str | None = None  # the result kept in the trace entry (a read, an MCP call)
    refused: tuple = ()  # what the browser's egress proxy refused during the step ("GET 10.0.0.1:80: why")
    error_page: bool = False  # the page now shown is an HTTP 4xx/5xx or the browser's error page
    image: bytes | None = None  # a PNG screenshot beside the page view, for a vision model (never stored)


@dataclass
class Outcome:
    """How a run ended: `success`, `error` or `input-required`."""

    status: str
    text: str
    structured: object = None
    hitl: dict | None = None
    expect: str | None = None  # the web agent's answer: what the page shows when done (the completion check's)


class Finish(Exception):
    """Raised by an action that ends the run (answer, ask_user, fail)."""

    def __init__(self, outcome):
        super().__init__(outcome.text)
        self.outcome = outcome


class PlannerError(Exception):
    """The planner cannot go on (model unreachable, refused the request); the task ends as error."""


class Stopped(Exception):
    """The run was told to stop (cancel, lease lost, worker shutdown) in the middle of a step."""


DESCRIPTIONS = {
    "go_to": "go to {url}", "click": 'click "{target}"', "type": 'type {text} into "{target}"',
    "press": "press {key}", "extract": "extract {selector}", "wait": "wait {seconds:g} s",
    "current_time": "current time", "read_attachment": "read attachment {key}", "ask_user": "ask: {question}",
    "answer": "answer", "fail": "fail: {reason}", "upload": 'upload {key} into "{target}"',
    "select": 'select "{option}" in "{target}"', "scroll": "scroll {direction}", "wait_for": 'wait for "{text}"',
    "go_back": "go back", "switch_tab": "switch to tab {index}", "hover": 'hover "{target}"',
    "read_page": "read page",
}


def describe(name, args):
    """The trace line for an action (arguments as the planner wrote them, so secrets stay placeholders)."""
    if name == "use_tool":
        arguments = json.dumps(args.get("arguments") or {}, ensure_ascii=False)
        return f"use {args.get('server')}.{args.get('tool')} with {arguments}"
    if name == "drag":
        return _drag_line(args)
    if name == "draw":
        return f'draw on "{args.get("target")}" through {points_text(args.get("points"))}'
    if "__" in name and name not in DESCRIPTIONS:  # an MCP tool offered to the model as <label>__<tool>
        server, tool = name.split("__", 1)
        return f"use {server}.{tool} with {json.dumps(args, ensure_ascii=False)}"
    try:
        return DESCRIPTIONS[name].format(**args)
    except (KeyError, ValueError, IndexError):
        return f"{name} {json.dumps(args, ensure_ascii=False)}" if args else name


def _drag_line(args):
    """drag "Item 3" to "Done", or drag "Slider" by 40,0: what was dragged, and where."""
    if args.get("target") not in (None, ""):
        return f'drag "{args.get("source")}" to "{args.get("target")}"'
    return f'drag "{args.get("source")}" by {args.get("x", 0):g},{args.get("y", 0):g}'
