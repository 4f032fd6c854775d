"""Planners decide the next action: the built-in step parser, or an OpenAI-compatible model."""
import os
from dataclasses import dataclass, field
from typing import Protocol


class Planner(Protocol):
    can_repair: bool  # may an invalid structured answer go back to it once with the validation error?
    # Is its next action made from the page it last saw (a model's)? Then an action planned while a person took
    # control is not used: the loop plans again from the page they left. A script's next step stays as it is.
    replans: bool

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
    one_time_codes: list = field(default_factory=list)  # the secret names that type a fresh TOTP code each time
    response_schema: dict | None = None
    time_zone: str = "America/Los_Angeles"
    attachments: list = field(default_factory=list)


def model_configured(config):
    return bool(config.get("LLM_MODEL"))


def make_planner(brief, config):
    """The model when one is configured (LLM_MODEL), else the built-in planner. A prompt every line of which
    is a built-in step runs on the built-in planner anyway (BUILTIN_STEPS_FIRST): exact, instant, and no
    small model garbles it. The planner's `label` says which one ran (the trace's final entry)."""
    from .builtin import BuiltinPlanner

    if model_configured(config):
        if config["BUILTIN_STEPS_FIRST"]:
            try:
                return BuiltinPlanner(brief)
            except ValueError:  # not a complete program of steps: the model's prompt
                pass
        from .openai_chat import ChatPlanner

        planner = ChatPlanner(brief, config)
        planner.label = f"model {config['LLM_MODEL']}"
        if config.get("LLM_CONCURRENCY"):  # the agent loop takes a slot for each request (planners/slots.py)
            from .slots import ModelSlots

            planner.slots = ModelSlots(os.path.join(config["VAR_DIR"], "model-slots"), config["LLM_CONCURRENCY"])
        return planner
    return BuiltinPlanner(brief)
