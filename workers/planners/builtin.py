"""The built-in planner: runs explicit step-by-step instructions, one step per line, no model."""
import json
import re

from app.agents import split_prefix
from app.scripts.format import fill
from workers.agent.actions import ANSWER_VARIABLE, Action, describe
from workers.agent.conversation import new_call_id

_Q = r"""(?:"(?P<{0}q>[^"]*)"|'(?P<{0}s>[^']*)'|(?P<{0}b>.+?))"""


def _quoted(name):
    return _Q.format(name)


def _value(match, name):
    for suffix in ("q", "s", "b"):
        if match[name + suffix] is not None:
            return match[name + suffix]
    return None


def _points(text):
    """10,10 60,10 60,60 → [[10.0, 10.0], [60.0, 10.0], [60.0, 60.0]]"""
    return [[float(n) for n in pair.split(",")] for pair in re.sub(r"\s*,\s*", ",", text.strip()).split()]


# The step grammar (docs/agent.md "Built-in planner"): regex → (tool name, argument builder).
class UnparseableStep(ValueError):
    pass


# A URL is one word ("open http://x/ and tell me the title" is a sentence, not a URL); only a data: URL,
# which carries its page inline, may hold spaces.
STEPS = [
    (r"(?:go to|open|navigate to)\s+(?P<url>data:.+|\S+)", "go_to", lambda m: {"url": m["url"].strip()}),
    (r"click(?: on)?\s+" + _quoted("target"), "click", lambda m: {"target": _value(m, "target")}),
    (r"type\s+" + _quoted("text") + r"\s+into\s+" + _quoted("target"), "type",
     lambda m: {"text": _value(m, "text"), "target": _value(m, "target")}),
    (r"select\s+" + _quoted("option") + r"\s+(?:in|from)\s+" + _quoted("target"), "select",
     lambda m: {"option": _value(m, "option"), "target": _value(m, "target")}),
    (r"drag\s+" + _quoted("source") + r"\s+by\s+(?P<x>-?\d+(?:\.\d+)?)\s*,\s*(?P<y>-?\d+(?:\.\d+)?)", "drag",
     lambda m: {"source": _value(m, "source"), "x": float(m["x"]), "y": float(m["y"])}),
    (r"drag\s+" + _quoted("source") + r"\s+(?:to|onto|into|on)\s+" + _quoted("target"), "drag",
     lambda m: {"source": _value(m, "source"), "target": _value(m, "target")}),
    (r"draw\s+on\s+" + _quoted("target") + r"\s+through\s+(?P<points>-?\d+(?:\.\d+)?\s*,\s*-?\d+(?:\.\d+)?"
     r"(?:\s+-?\d+(?:\.\d+)?\s*,\s*-?\d+(?:\.\d+)?)+)", "draw",
     lambda m: {"target": _value(m, "target"), "points": _points(m["points"])}),
    (r"scroll(?:\s+(?P<direction>down|up|to top|to bottom))?", "scroll",
     lambda m: {"direction": (m["direction"] or "down").lower().replace("to ", "")}),
    (r"wait for\s+" + _quoted("text"), "wait_for", lambda m: {"text": _value(m, "text")}),
    (r"(?:go back|back)", "go_back", lambda m: {}),
    (r"switch to tab\s+(?P<index>\d+)", "switch_tab", lambda m: {"index": int(m["index"])}),
    (r"hover(?: over)?\s+" + _quoted("target"), "hover", lambda m: {"target": _value(m, "target")}),
    (r"read(?: the)? page", "read_page", lambda m: {}),
    (r"press\s+(?P<key>\S+)", "press", lambda m: {"key": m["key"].strip()}),
    (r"extract(?:\s+(?P<selector>.+))?", "extract", lambda m: {"selector": (m["selector"] or "body").strip()}),
    (r"(?:what is the )?(?:current )?time\??", "current_time", lambda m: {}),
    (r"read attachment(?:\s+(?P<key>\S+))?", "read_attachment",
     lambda m: {"key": m["key"]} if m["key"] else {}),
    (r"wait\s+(?P<seconds>\d+(?:\.\d+)?)\s*(?:s|sec|seconds?)?", "wait",
     lambda m: {"seconds": float(m["seconds"])}),
    (r"upload\s+" + _quoted("key") + r"\s+into\s+" + _quoted("target"), "upload",
     lambda m: {"key": _value(m, "key"), "target": _value(m, "target")}),
    (r"use\s+(?P<server>[^\s.]+)\.(?P<tool>\S+)(?:\s+with\s+(?P<arguments>\{.*\}))?", "use_tool",
     lambda m: {"server": m["server"], "tool": m["tool"], "arguments": _json_object(m["arguments"])}),
    (r"ask for a person:?\s+(?P<reason>.+)", "ask_for_person", lambda m: {"reason": m["reason"].strip()}),
    (r"ask\s+(?P<question>.+)", "ask_user", lambda m: {"question": m["question"].strip()}),
    (r"answer\s+(?P<text>.+)", "answer", lambda m: {"text": m["text"].strip()}),
]
STEPS = [(re.compile(rf"^{pattern}$", re.I | re.S), name, build) for pattern, name, build in STEPS]


def _json_object(text):
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UnparseableStep(f"the arguments {text!r} are not JSON ({exc})") from None
    return value


VARIABLE = re.compile(r"\{\{\s*([A-Za-z_][\w.-]*)\s*\}\}")  # {{name}}: an inputVariables value


# An unquoted element that reads like a sentence ("Click the button.", "select Rhona from the list and click
# Submit") is an instruction for a model, not the text of an element: matching it would click something else.
SENTENCE = re.compile(r"^(?:the|a|an|on|any|each|every|all)\s|[.!?;:]$|,|\s(?:and|then)\s", re.I)
ELEMENT_ARGS = {"click": ("target",), "hover": ("target",), "type": ("target",), "select": ("option", "target"),
                "upload": ("target",), "drag": ("source", "target"), "draw": ("target",)}


def parse_step(line):
    for pattern, name, build in STEPS:
        match = pattern.match(line.strip())
        if match:
            try:
                args = build(match)
            except UnparseableStep as exc:
                raise UnparseableStep(f"{line.strip()}: {exc}") from None
            for arg in ELEMENT_ARGS.get(name, ()):
                if arg + "b" in pattern.groupindex and match[arg + "b"] is not None \
                        and SENTENCE.search(match[arg + "b"]):
                    raise UnparseableStep(f"{line.strip()}: an unquoted element that reads as a sentence; quote "
                                          "the element's text, as in click \"Sign in\"")
            return Action(name, args, describe(name, args))
    raise UnparseableStep(line)


def split_steps(prompt):
    """Steps are the prompt's non-empty lines, after its agent prefix (`app.agents`)."""
    body = split_prefix(prompt)[1]
    return [line.strip() for line in body.splitlines() if line.strip()]


class BuiltinPlanner:
    """Walks the steps in order. A step that fails ends the task as error; when the steps run out
    without an answer, the task answers with the last step's result."""

    can_repair = False
    label = "builtin"
    no_model_hint = ("The built-in planner runs explicit steps only (see docs/agent.md, "
                     "'Built-in planner'); set LLM_BASE_URL, LLM_API_KEY and LLM_MODEL "
                     "to run free-form prompts with a language model.")

    def __init__(self, brief):
        variables = {name: str(value) for name, value in brief.variables.items()}
        lines = [VARIABLE.sub(lambda m: variables.get(m[1], m[0]), line) for line in split_steps(brief.prompt)]
        try:
            self.steps = [parse_step(line) for line in lines]
        except UnparseableStep as exc:
            raise ValueError(f"Cannot understand the step {str(exc)!r}. {self.no_model_hint}") from None
        if not self.steps:
            raise ValueError(f"The prompt has no steps. {self.no_model_hint}")

    def tokens_used(self):
        return 0

    def next_action(self, state):
        if state.last is not None and state.last.failed:
            return self._with_id(Action("fail", {"reason": state.last.text}, "fail"))
        position = len(state.conversation.calls())
        if position < len(self.steps):
            return self._with_id(_answered(self.steps[position], state.conversation.latest_answer()))
        return self._with_id(Action("answer", {"text": state.conversation.last_result()}, "answer"))

    @staticmethod
    def _with_id(action):
        return Action(action.name, dict(action.args), action.description, new_call_id())


def _answered(step, answer):
    """A step after a question gets its answer for `{{answer}}` (an inputVariables `answer` was put in already); the
    trace keeps the step as written."""
    if answer is None:
        return step
    return Action(step.name, fill(step.args, {ANSWER_VARIABLE: answer}), step.description)


__all__ = ["BuiltinPlanner", "parse_step", "split_steps"]
