"""Planners decide the next action: the built-in step parser, or an OpenAI-compatible model."""
from dataclasses import dataclass, field
from typing import Protocol


class Planner(Protocol):
    can_repair: bool  # may an invalid structured answer go back to it once with the validation error?

    def next_action(self, state):
        """The next Action, given the loop's RunState (its `conversation` holds what happened so far)."""

    def tokens_used(self):
        """Model tokens spent since the previous call (for usage credits)."""


@dataclass
class Brief:
    """What a planner is told about its task; secrets appear only as their names."""

    prompt: str
    agent: str  # "web" or "general"
    tools: list
    variables: dict = field(default_factory=dict)
    additional_context: dict = field(default_factory=dict)
    secret_names: list = field(default_factory=list)
    response_schema: dict | None = None
    time_zone: str = "America/Los_Angeles"
    attachments: list = field(default_factory=list)


def model_configured(config):
    return bool(config.get("LLM_MODEL"))


def make_planner(brief, config):
    """The model when one is configured (LLM_MODEL), else the built-in planner."""
    if model_configured(config):
        from .openai_chat import ChatPlanner

        return ChatPlanner(brief, config)
    from .builtin import BuiltinPlanner

    return BuiltinPlanner(brief)
