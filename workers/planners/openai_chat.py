"""The model planner: OpenAI-compatible chat completions with tool calling (OpenAI, Ollama, vLLM, LiteLLM...)."""
import json
import logging

import openai

from workers.agent.actions import Action, PlannerError, describe
from workers.agent.conversation import new_call_id

log = logging.getLogger(__name__)

AGENTS = {
    "web": "You are a web automation agent. Use the tools to open and read web pages and act on them.",
    "general": "You are a general-purpose assistant agent. Use the tools when they help.",
}


def system_prompt(brief):
    parts = [AGENTS[brief.agent],
             "Work step by step: call one tool at a time. When the task is done, call `answer`; when you "
             "need information only the user has, call `ask_user`.",
             f"The user's time zone is {brief.time_zone}."]
    if brief.secret_names:
        parts.append("Secret placeholders (their values are hidden from you and filled in when a tool runs; "
                     "write them exactly like this in tool arguments): "
                     + ", ".join("${%s}" % name for name in brief.secret_names) + ".")
    if brief.variables:
        parts.append("Input variables (the `variables` dictionary): "
                     + json.dumps(brief.variables, ensure_ascii=False, default=str))
    if brief.additional_context:
        parts.append("Additional context:\n" + "\n".join(
            f"- {key}: {value}" for key, value in brief.additional_context.items()))
    if brief.attachments:
        parts.append("Attached files (read them with read_attachment): " + ", ".join(brief.attachments))
    if brief.response_schema is not None:
        parts.append("The final answer must be JSON matching this JSON Schema, passed as `content` to `answer`:\n"
                     + json.dumps(brief.response_schema, ensure_ascii=False))
    return "\n\n".join(parts)


class ChatPlanner:
    can_repair = True

    def __init__(self, brief, config):
        self.brief = brief
        self.model = config["LLM_MODEL"]
        self.tools = [tool.as_openai() for tool in brief.tools]
        self.system = system_prompt(brief)
        # The client retries connection errors, 408, 409, 429 and 5xx with backoff.
        self.client = openai.OpenAI(
            base_url=config.get("LLM_BASE_URL") or None, api_key=config.get("LLM_API_KEY") or "not-needed",
            timeout=config["LLM_TIMEOUT_SECONDS"], max_retries=config["LLM_MAX_RETRIES"])
        self._tokens = 0

    def tokens_used(self):
        tokens, self._tokens = self._tokens, 0
        return tokens

    def next_action(self, state):
        messages = [{"role": "system", "content": self.system}] + state.conversation.messages
        try:
            completion = self.client.chat.completions.create(
                model=self.model, messages=messages, tools=self.tools, tool_choice="auto")
        except openai.APIStatusError as exc:
            raise PlannerError(f"The language model refused the request (HTTP {exc.status_code}): "
                               f"{_short(_reason(exc))}") from None
        except openai.APIConnectionError as exc:  # includes timeouts, after the client's retries
            raise PlannerError(f"The language model could not be reached at {self.client.base_url} "
                               f"({exc.__class__.__name__}).") from None
        except openai.OpenAIError as exc:  # e.g. a reply that is not a chat completion
            raise PlannerError(f"The language model's reply could not be used: {_short(exc)}") from None
        if completion.usage is not None:
            self._tokens += completion.usage.total_tokens or 0
        if not completion.choices:
            raise PlannerError("The language model returned no choices.")
        message = completion.choices[0].message
        if message.tool_calls:
            # One action per turn: later calls of a parallel batch are dropped (the model sees only the first).
            call = message.tool_calls[0]
            try:
                args = json.loads(call.function.arguments or "{}")
            except ValueError:
                args = {"unparseable_arguments": call.function.arguments}
            if not isinstance(args, dict):
                args = {"unparseable_arguments": call.function.arguments}
            return Action(call.function.name, args, describe(call.function.name, args),
                          call.id or new_call_id(), note=message.content or "")
        return self._answer(message.content or "")

    def _answer(self, content):
        """A reply without a tool call is the final answer."""
        if self.brief.response_schema is not None:
            try:
                return Action("answer", {"content": json.loads(content)}, "answer", new_call_id())
            except ValueError:
                pass
        return Action("answer", {"text": content}, "answer", new_call_id())


def _reason(exc):
    """The server's own words when it sent an OpenAI-style error body."""
    body = exc.body if isinstance(exc.body, dict) else {}
    body = body.get("error", body) if isinstance(body.get("error", body), dict) else body
    return body.get("message") or exc.message


def _short(text, limit=300):
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "…"
