"""Planners decide the next action: the built-in step parser, or an OpenAI-compatible model.

A planner has `next_action(state) -> Action` (state: the loop's RunState, whose `conversation`
holds what happened so far) and `tokens_used()` (model tokens spent by the latest call).
"""
from dataclasses import dataclass, field


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
