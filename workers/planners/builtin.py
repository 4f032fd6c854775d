"""The built-in planner: runs explicit step-by-step instructions, one step per line, no model."""
import re

from workers.agent.actions import Action


class UnparseableStep(ValueError):
    pass


# step grammar: (regex, builder(match) -> Action)
STEPS = [
    (re.compile(r"^answer\s+(?P<text>.+)$", re.I | re.S),
     lambda m: Action("answer", {"text": m["text"].strip()}, "answer")),
    (re.compile(r"^wait\s+(?P<seconds>\d+(?:\.\d+)?)\s*(?:s|sec|seconds?)?$", re.I),
     lambda m: Action("wait", {"seconds": float(m["seconds"])}, f"wait {m['seconds']} s")),
]


def parse_step(line):
    for pattern, build in STEPS:
        match = pattern.match(line.strip())
        if match:
            return build(match)
    raise UnparseableStep(line)


def split_steps(prompt):
    """Steps are the prompt's non-empty lines, after the `/Operator` prefix."""
    body = re.sub(r"^\s*/Operator\b", "", prompt)
    return [line.strip() for line in body.splitlines() if line.strip()]


class BuiltinPlanner:
    """Walks the steps in order; when they run out without an answer, answers with the last observation."""

    no_model_hint = ("The built-in planner runs explicit steps only (see the README's "
                     "'Built-in planner' section); set LLM_BASE_URL, LLM_API_KEY and LLM_MODEL "
                     "to run free-form prompts with a language model.")

    def __init__(self, prompt):
        lines = split_steps(prompt)
        try:
            self.steps = [parse_step(line) for line in lines]
        except UnparseableStep as exc:
            raise ValueError(f"Cannot understand the step {str(exc)!r}. {self.no_model_hint}") from None
        if not self.steps:
            raise ValueError(f"The prompt has no steps. {self.no_model_hint}")

    def next_action(self, history):
        position = len(history)
        if position < len(self.steps):
            return self.steps[position]
        last = history[-1][1].text if history else ""
        return Action("answer", {"text": last}, "answer")


__all__ = ["BuiltinPlanner", "parse_step", "split_steps"]
