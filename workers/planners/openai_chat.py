"""The model planner: OpenAI-compatible chat completions with tool calling (OpenAI, Ollama, vLLM, LiteLLM...)."""
import base64
import json
import logging
import re
import time

import jsonschema
import openai

from app import json_schemas
from workers.agent import page_view
from workers.agent.actions import Action, PlannerError, Stopped, describe
from workers.agent.conversation import new_call_id

from . import completion_check, context, model_call, tool_schemas

log = logging.getLogger(__name__)

AGENTS = {
    "web": ("You are a web agent. After each action you see the page: its URL, title, and elements numbered "
            "like [N]<button>OK</button>. Act on an element by its number N. Stay on the task's site: open only "
            "URLs the task or the page gives. When you answer, put in `expect` a text the page now shows because the "
            "task is done."),
    "general": "You are a general-purpose assistant agent. Use the tools when they help.",
}
# Models that take images (LLM_VISION=auto): OpenAI's current models and the open vision families by name.
VISION_MODELS = ("gpt-4o", "gpt-4.1", "gpt-5", "o3", "o4", "claude", "gemini", "vision", "-vl", "llava", "pixtral",
                 "gemma-3", "gemma3", "qwen2.5vl", "minicpm-v", "moondream")


def vision_enabled(config):
    """LLM_VISION: on, off, or auto (on for a model whose name says it reads images)."""
    setting = str(config.get("LLM_VISION") or "auto").lower()
    if setting in ("on", "off"):
        return setting == "on"
    model = str(config.get("LLM_MODEL") or "").lower()
    return any(name in model for name in VISION_MODELS)


def _kind_of_secret(name, brief):
    if name in brief.one_time_codes:
        return " (a one-time code: each use types the current one)"
    if name.startswith("code:"):
        return f" (the one-time code sent to {name[5:]}: type it when the site has sent it; it is waited for)"
    if name.startswith("link:"):
        return f" (the sign-in link sent to {name[5:]}: go_to it when the site has sent it; it is waited for)"
    if name.startswith("cred:"):
        return " (a stored credential: typed only into a page on its own sites)"
    return ""


def system_prompt(brief):
    parts = [AGENTS[brief.agent],
             "When the task is done, call `answer`; when you need information only the user has, call `ask_user`.",
             f"The user's time zone is {brief.time_zone}."]
    if brief.secret_names:
        parts.append("Secret placeholders (their values are hidden from you and filled in when a tool runs; "
                     "write them exactly like this in tool arguments): "
                     + ", ".join("${%s}" % name + _kind_of_secret(name, brief) for name in brief.secret_names) + ".")
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
    replans = True
    # The agent loop sets these: a model call ends with the task's time budget, and on cancel.
    deadline = None  # time.monotonic() value
    budget_seconds = None
    should_stop = staticmethod(lambda: False)
    MAX_MALFORMED = 2  # a malformed reply gets one repair turn (with the exact error); a second ends the task
    MAX_NUDGES = 2  # empty replies in a row answered with a reminder before the task ends

    def __init__(self, brief, config):
        self.brief = brief
        self.model = config["LLM_MODEL"]
        self.tools = [self._offered(tool) for tool in brief.tools]
        self.schemas = {tool.name: self._validated(tool) for tool in brief.tools}
        self.system = system_prompt(brief)
        # Retries (connection errors, 408, 409, 429, 5xx) are model_call's, within the task's time budget.
        http_client, self._transport = model_call.http_client()
        self.client = openai.OpenAI(
            base_url=config.get("LLM_BASE_URL") or None, api_key=config.get("LLM_API_KEY") or "not-needed",
            timeout=config["LLM_TIMEOUT_SECONDS"], max_retries=0, http_client=http_client)
        self.timeout, self.retries = config["LLM_TIMEOUT_SECONDS"], config["LLM_MAX_RETRIES"]
        self.max_tokens = int(config.get("LLM_MAX_TOKENS") or 512)
        self.context_tokens = int(config.get("LLM_CONTEXT_TOKENS") or 8192)
        self.vision = vision_enabled(config)
        # LLM_CONSTRAINED: tool_choice "required" makes servers that constrain decoding (llama.cpp's grammar,
        # vLLM's guided decoding, OpenAI) emit a valid call of an offered tool every turn (`answer` is one).
        # "auto" asks that of the web agent, which must act on pages (a small model otherwise replies with
        # prose that ends the task), not of the general agent, which often just answers; "on" asks it of both,
        # "off" of neither. A server that refuses "required" is asked again, and from then on, with "auto".
        self.constrained = str(config.get("LLM_CONSTRAINED") or "auto").lower()
        required = self.constrained == "on" or self.constrained == "auto" and brief.agent == "web"
        self.tool_choice = "required" if required else "auto"
        self._fixed = context.tokens([{"role": "system", "content": self.system}]) + context.tokens(self.tools)
        self._tokens = 0
        self._queue = []  # the rest of the last reply's tool calls, one action per step, in order
        self._returned = None  # call id of the action returned last

    def _offered(self, tool):
        """The tool as the model sees it: parameters reduced to what grammar-compiling servers accept."""
        if tool.name == "answer" and self.brief.response_schema is not None:
            schema = tool_schemas.answer_parameters(self.brief.response_schema)
            if "expect" in tool.parameters["properties"]:  # the web agent's (workers/agent/environment.py)
                schema["properties"]["expect"] = tool.parameters["properties"]["expect"]
        else:
            schema = tool_schemas.parameters(tool.offered or tool.parameters)
        return {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                                 "parameters": schema}}

    def _validated(self, tool):
        """The schema arguments are checked against (answer's `content` is the loop's to check)."""
        if tool.name == "answer" and self.brief.response_schema is not None:
            return {**tool.parameters, "properties": {**tool.parameters["properties"], "content": {}}}
        return tool.parameters

    def tokens_used(self):
        tokens, self._tokens = self._tokens, 0
        return tokens

    def next_action(self, state):
        conversation = state.conversation
        if self._queue and conversation.messages[-1].get("tool_call_id") == self._returned:
            return self._give(self._queue.pop(0))
        self._queue = []
        malformed = nudges = 0
        while True:
            message = self._complete(conversation.messages, nudge=nudges > 0, image=_image(state),
                                     start=conversation.start)
            if not message.tool_calls:
                content = (message.content or "").strip()
                if content:
                    return self._answer(content)
                nudges += 1
                if nudges > self.MAX_NUDGES:
                    raise PlannerError(f"The language model replied with neither text nor a tool call "
                                       f"{nudges} times in a row.")
                continue
            nudges = 0
            actions, problems = self._parse(message)
            if not problems:
                self._queue = actions[1:]
                return self._give(actions[0])
            # Nothing of a reply with a malformed call runs; the model hears why and tries again.
            malformed += 1
            for action in actions:
                conversation.add_call(action)
            for action in actions:
                conversation.add_result(action.call_id, problems.get(action.call_id) or (
                    "Not run: another tool call of the same reply was malformed. Send the calls again."))
            if malformed >= self.MAX_MALFORMED:
                raise PlannerError(f"The language model made malformed tool calls {malformed} times in a row: "
                                   f"{_short(next(iter(problems.values())))}")

    def _give(self, action):
        self._returned = action.call_id
        return action

    def _complete(self, messages, nudge=False, image=None, start=0):
        """One chat completion; its message (tokens counted)."""
        # The conversation as it fits the model's context (LLM_CONTEXT_TOKENS, the reply's LLM_MAX_TOKENS kept
        # free): older page views shortened, then older results, then earlier tasks' turns (workers/planners/
        # context.py); the stored conversation keeps everything.
        room = self.context_tokens - self.max_tokens - self._fixed - context.MARGIN
        wire = [{"role": "system", "content": self.system}] + [_wire(m) for m in context.fit(messages, room, start)]
        if nudge:
            wire = _with_user_text(wire, NUDGE)
        tools = _targets_on_the_page(self.tools, messages)
        if image is not None and self.vision:
            wire = wire + [{"role": "user", "content": [
                {"type": "text", "text": "A screenshot of the page now:"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,"
                                                           + base64.b64encode(image).decode()}}]}]
        return self._ask(wire, tools, self.max_tokens)

    def check_done(self, state, answer):
        """The completion check (workers/planners/completion_check.py): a Verdict, or None when the reply said
        neither yes nor no. Its tokens count with the planner's."""
        conversation = state.conversation
        room = self.context_tokens - completion_check.MAX_TOKENS - context.MARGIN
        wire = completion_check.request(conversation.messages[conversation.start].get("content"), state.trace,
                                        conversation.messages, answer, room)
        before = self._tokens
        message = self._ask(wire, completion_check.TOOLS, completion_check.MAX_TOKENS)
        return completion_check.verdict(message, self._tokens - before)

    def _ask(self, wire, tools, max_tokens):
        """One chat completion; its message (tokens counted)."""
        try:
            try:
                completion = self._call(wire, tools, max_tokens)
            except openai.APIStatusError as exc:
                if not (self.tool_choice == "required" and exc.status_code in (400, 422, 500, 501)):
                    raise
                log.info("the model server refused tool_choice=required (HTTP %s): asking with auto",
                         exc.status_code)
                self.tool_choice = "auto"
                completion = self._call(wire, tools, max_tokens)
        except model_call.OutOfTime:
            budget = self.budget_seconds or self.timeout * (1 + self.retries)
            raise PlannerError(f"Time limit reached: task time budget of {budget:g} s exhausted "
                               "during a model call.") from None
        except model_call.Stopped:
            raise Stopped() from None
        except openai.APIStatusError as exc:
            raise PlannerError(f"The language model refused the request (HTTP {exc.status_code}): "
                               f"{_short(_reason(exc))}") from None
        except openai.APITimeoutError:  # not retried: the server may still be computing it
            raise PlannerError(f"The language model did not answer within {self.timeout:g} s "
                               "(LLM_TIMEOUT_SECONDS).") from None
        except openai.APIConnectionError as exc:  # after model_call's retries
            raise PlannerError(f"The language model could not be reached at {self.client.base_url} "
                               f"({exc.__class__.__name__}).") from None
        except openai.OpenAIError as exc:  # e.g. a reply that is not a chat completion
            raise PlannerError(f"The language model's reply could not be used: {_short(exc)}") from None
        if completion.usage is not None:
            self._tokens += completion.usage.total_tokens or 0
        if not completion.choices:
            raise PlannerError("The language model returned no choices.")
        return completion.choices[0].message

    def _call(self, wire, tools, max_tokens):
        """One request, bounded by the task's time budget and ended by cancel (workers/planners/model_call.py)."""
        deadline = self.deadline or time.monotonic() + self.timeout * (1 + self.retries)
        return model_call.complete(
            self.client, self._transport,
            dict(model=self.model, messages=wire, tools=tools, tool_choice=self.tool_choice,
                 max_tokens=max_tokens),
            timeout=self.timeout, retries=self.retries, deadline=deadline, should_stop=self.should_stop)

    def _parse(self, message):
        """The reply's calls as Actions, and {call id: what is wrong} for those that cannot run."""
        actions, problems, batch = [], {}, None
        for call in message.tool_calls:
            name = (call.function.name if call.function else "") or ""
            raw = (call.function.arguments if call.function else "") or "{}"
            call_id = call.id if call.id and all(call.id != a.call_id for a in actions) else new_call_id()
            batch = batch or call_id
            args, problem = self._arguments(name, raw)
            if problem is not None:
                problems[call_id] = problem
            # The arguments go back as JSON even when the model's were not (servers re-read them).
            name = name or "unnamed_call"  # what the model sees of its own nameless call
            actions.append(Action(name, args if problem is None else (args or {}), describe(name, args or {}),
                                  call_id, note=(message.content or "") if not actions else "", batch=batch))
        return actions, problems

    def _arguments(self, name, raw):
        """(args, None), or (args or None, why the call cannot run)."""
        if not name:
            return None, "A tool call without a tool name; the tools are: " + ", ".join(self.schemas) + "."
        try:
            args = json.loads(raw)
        except ValueError as exc:
            return None, f"The arguments of {name} are not valid JSON ({exc}): {_short(raw, 200)}"
        if not isinstance(args, dict):
            return None, f"The arguments of {name} must be a JSON object, not {_short(raw, 200)}"
        schema = self.schemas.get(name)
        if schema is None:  # the environment says what this agent can do instead
            return args, None
        try:
            error = json_schemas.first_error(schema, args)
        except (jsonschema.exceptions.SchemaError, json_schemas.UnsafeSchema, json_schemas.CheckTooCostly):
            # e.g. an MCP server's schema: its server judges the call (nothing is fetched, no pattern
            # backtracks here, and a schema too costly to check stops within its budget)
            return args, None
        if error is None:
            return args, None
        where = "/".join(str(p) for p in error.absolute_path)
        return args, (f"Not run: the arguments of {name} do not match its parameters: {error.message}"
                      + (f" (at {where})" if where else "") + ".")

    def _answer(self, content):
        """A reply without a tool call is the final answer."""
        if self.brief.response_schema is not None:
            try:
                return self._give(Action("answer", {"content": json.loads(content)}, "answer", new_call_id()))
            except ValueError:
                pass
        return self._give(Action("answer", {"text": content}, "answer", new_call_id()))


def _image(state):
    """The screenshot beside the latest page view, when the last action took one."""
    last = getattr(state, "last", None)
    return getattr(last, "image", None)


NUDGE = "Reply with a tool call: use the tools, and call `answer` with the final answer when the task is done."


def _wire(message):
    """A stored message as every chat-completions server accepts it: `content` a string, never null or absent
    (llama.cpp's server refuses null, and its chat templates fail on a message without it)."""
    if isinstance(message.get("content"), str):
        return message
    return {**message, "content": ""}


def _with_user_text(messages, text):
    """`text` as the user's latest words; joined to a trailing user message (some templates need turns to
    alternate)."""
    if messages[-1]["role"] == "user":
        return messages[:-1] + [{**messages[-1], "content": f"{messages[-1]['content']}\n\n{text}"}]
    return messages + [{"role": "user", "content": text}]


def _reason(exc):
    """The server's own words when it sent an OpenAI-style error body."""
    body = exc.body if isinstance(exc.body, dict) else {}
    body = body.get("error", body) if isinstance(body.get("error", body), dict) else body
    return body.get("message") or exc.message


def _short(text, limit=300):
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "…"


ELEMENT = re.compile(r"\[(\d+)\]<")  # a numbered element of a page view: [12]<button ...>
ELEMENT_ARGS = ("target", "source")  # the arguments that name an element of the page (a drag has two)
MAX_TARGETS = 300  # beyond this many elements the list would cost more prompt than it saves


def _targets_on_the_page(tools, messages):
    """The tools as offered this turn: an element number `target` (or a drag's `source`) is one of the numbers of the
    latest page view
    (a failed action's reply has none: the view before it still stands). A server that constrains decoding then
    cannot make up a number the page does not have."""
    view = next((m["content"] for m in reversed(messages)
                 if isinstance(m.get("content"), str) and page_view.is_view(m["content"])), None)
    numbers = sorted({int(n) for n in ELEMENT.findall(view)}) if view else []
    if not numbers or len(numbers) > MAX_TARGETS:
        return tools
    offered = []
    for tool in tools:
        parameters = tool["function"]["parameters"]
        properties = parameters.get("properties") or {}
        numbered = {name: {**schema, "enum": numbers} for name, schema in properties.items()
                    if name in ELEMENT_ARGS and schema.get("type") == "integer"}
        if numbered:
            parameters = {**parameters, "properties": {**properties, **numbered}}
            tool = {**tool, "function": {**tool["function"], "parameters": parameters}}
        offered.append(tool)
    return offered
