"""The vocabulary shared by planners, the loop and environments."""
from dataclasses import dataclass, field


@dataclass
class Action:
    """What a planner decided: a tool name, its arguments, and a line for the trace."""

    name: str
    args: dict = field(default_factory=dict)
    description: str = ""

    def key(self):
        """Identity for no-progress detection."""
        return (self.name, repr(sorted(self.args.items())))


@dataclass
class Observation:
    """What executing an action returned to the planner."""

    text: str = ""
    url: str = ""


@dataclass
class Outcome:
    """How a run ended: `success`, `error` or `input-required`."""

    status: str
    text: str
    structured: object = None
    hitl: dict | None = None


class Finish(Exception):
    """Raised by an action that ends the run (answer, ask_user, fail)."""

    def __init__(self, outcome):
        super().__init__(outcome.text)
        self.outcome = outcome
