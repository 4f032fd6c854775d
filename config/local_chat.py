"""The bundled model's chat format (`--chat_format rd-chatml-tools`): ChatML with tools, rendered as plain text.

llama-cpp-python's `chatml-function-calling` renders messages through Jinja with HTML autoescape on (a `"`
reaches the model as `&#34;`, and a small model copies that into its own arguments), never renders `tool`
messages (the model never sees what its calls returned) and ignores `max_tokens` when it chooses tools. This
format shows every message as written, the tool results included, honours `max_tokens`, and constrains each
reply with grammars: the tool name one of the offered ones, then its arguments valid JSON for the tool's
schema (so a small model's calls always parse). `python -m config.local_chat <llama_cpp.server arguments>`
registers it and runs llama-cpp-python's server.
"""
import json
import time
import uuid

from llama_cpp import llama_chat_format, llama_grammar

from config import settings

NAME = "rd-chatml-tools"
# The sampling temperature for every request (llama-cpp-python's server sends its own default, 0.8, when a
# request has none, and our planner sends none): `make eval` sets 0.2, so its runs compare.
TEMPERATURE = settings.values()["LOCAL_MODEL_TEMPERATURE"]
CALL = '<tool_call>{"name": "'
# No example call: a small model copies an example's argument ("3") instead of reading the page.
TOOLS_INTRO = 'Tools (reply with one call, <tool_call>{"name": ..., "arguments": {...}}</tool_call>):\n<tools>\n'


def signature(function):
    """A tool as one line, `name(arg: type, optional?: type): description` (a JSON schema costs 3x the tokens)."""
    schema = function.get("parameters") or {}
    required = set(schema.get("required") or ())
    args = []
    for name, prop in (schema.get("properties") or {}).items():
        # An element number's enum (the page's numbers, a new list each step) is left to the grammar: the
        # page view lists them, and the prompt's head stays the same from step to step (llama.cpp's cache).
        kind = ("|".join(json.dumps(v) for v in prop["enum"]) if "enum" in prop and prop.get("type") != "integer"
                else prop.get("type") if prop.get("type") in ("string", "number", "integer", "boolean")
                else json.dumps(prop, ensure_ascii=False))
        note = f" ({prop['description']})" if prop.get("description") else ""
        args.append(f"{name}{'' if name in required else '?'}: {kind}{note}")
    return f"{function['name']}({', '.join(args)}): {function.get('description', '')}".strip()


def render(messages, tools):
    """The ChatML prompt: system (with the tools), the turns, tool results as the user's turn."""
    out = []
    listing = "".join(signature(t["function"]) + "\n" for t in tools or ())
    names = {}
    for message in messages:
        role, content = message["role"], _text(message.get("content"))
        if role in ("system", "developer"):
            if tools:
                content = f"{content}\n\n{TOOLS_INTRO}{listing}</tools>".strip()
            tools = None  # listed once, in the first system message
            out.append(f"<|im_start|>system\n{content}<|im_end|>\n")
        elif role == "assistant":
            calls = "".join(
                '<tool_call>{"name": "%s", "arguments": %s}</tool_call>' % (c["function"]["name"],
                                                                             c["function"].get("arguments") or "{}")
                for c in message.get("tool_calls") or ())
            for c in message.get("tool_calls") or ():
                names[c.get("id")] = c["function"]["name"]
            out.append(f"<|im_start|>assistant\n{content}{calls}<|im_end|>\n")
        elif role == "tool":
            name = names.get(message.get("tool_call_id"), "the tool")
            out.append(f"<|im_start|>user\nResult of {name}:\n{content}<|im_end|>\n")
        else:
            out.append(f"<|im_start|>user\n{content}<|im_end|>\n")
    if tools:  # no system message: the tools get one of their own
        out.insert(0, f"<|im_start|>system\n{TOOLS_INTRO}{listing}</tools><|im_end|>\n")
    return "".join(out) + "<|im_start|>assistant\n"


def _text(content):
    """A message's text (image parts are left out: this model reads text only)."""
    if isinstance(content, list):
        return "\n".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content or ""


def _literal(text):
    return json.dumps(text)


# A JSON string's character: no raw control character (a newline must be written \n). llama-cpp-python's converter
# lets any character but `"` and `\` through, so the 135M model once wrote a selector with raw newlines in it.
JSON_CHAR = llama_grammar.BuiltinRule(
    r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F] [0-9a-fA-F])', [])


class _Converter(llama_grammar.SchemaConverter):
    """llama-cpp-python's JSON Schema → grammar converter, with two fixes: a string's characters are JSON's
    (JSON_CHAR), and a non-negative integer or number with a `maximum` gets at most as many digits as the maximum
    has (an element number, not a 16-digit run; `wait`'s seconds, not 240 of them), where it ignored the bounds."""

    def _add_primitive(self, name, rule):
        return super()._add_primitive(name, JSON_CHAR if name == "char" else rule)

    def visit(self, schema, name):
        maximum, minimum = schema.get("maximum"), schema.get("minimum")
        if schema.get("type") in ("integer", "number") and "enum" not in schema \
                and isinstance(maximum, (int, float)) and isinstance(minimum, (int, float)) and minimum >= 0:
            return self._add_rule(name or "root", f"[0-9]{{1,{len(str(int(maximum)))}}} space")
        return super().visit(schema, name)


def arguments_grammar(parameters):
    """The grammar of a tool's arguments: JSON valid for its parameters (any JSON object where the converter
    cannot compile them)."""
    try:
        converter = _Converter(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
        converter.visit(converter.resolve_refs(parameters, "tool"), "")
        return llama_grammar.LlamaGrammar.from_string(converter.format_grammar(), verbose=False)
    except Exception:
        return llama_grammar.LlamaGrammar.from_string(llama_grammar.JSON_GBNF, verbose=False)


@llama_chat_format.register_chat_completion_handler(NAME)
def chat(llama, messages, tools=None, functions=None, tool_choice=None, max_tokens=None, temperature=0.2,
         stream=False, stop=None, **_):
    if stream:
        raise ValueError(f"The {NAME} chat format does not stream.")
    tools = tools or [{"type": "function", "function": f} for f in functions or ()]
    if tool_choice == "none":
        tools = []
    by_name = {t["function"]["name"]: t["function"] for t in tools}
    prompt = render(messages, tools)
    budget = max_tokens if max_tokens and max_tokens > 0 else 512
    temperature = TEMPERATURE if TEMPERATURE is not None else temperature
    used = {"prompt": 0, "completion": 0, "cut": False}

    def complete(text, grammar=None, tokens=budget, stops=("<|im_end|>",)):
        result = llama.create_completion(prompt=text, max_tokens=tokens, temperature=temperature,
                                         stop=list(stops) + list(stop or ()), grammar=grammar)
        used["prompt"] = used["prompt"] or result["usage"]["prompt_tokens"]
        used["completion"] += result["usage"]["completion_tokens"]
        used["cut"] = result["choices"][0]["finish_reason"] == "length"  # the last part ran out of max_tokens
        return result["choices"][0]["text"]

    content, calls = None, []
    if by_name:
        if isinstance(tool_choice, dict):
            name = tool_choice["function"]["name"]
        else:
            names = " | ".join(_literal(_literal(n)[1:]) for n in by_name)  # each name followed by its quote
            start = f'root ::= {_literal(CALL)} ({names})'
            if tool_choice != "required":  # "auto": a plain-text reply is allowed too
                start = f'root ::= {_literal(CALL)} ({names}) | [^<] [^<]*'
            head = complete(prompt, llama_grammar.LlamaGrammar.from_string(start, verbose=False), tokens=16)
            name = head[len(CALL):-1] if head.startswith(CALL) and head[:-1][len(CALL):] in by_name else None
            if name is None:
                content = head + complete(prompt + head, tokens=max(1, budget - 16))
        if name is not None:
            grammar = arguments_grammar(by_name[name].get("parameters") or {"type": "object"})
            arguments = complete(f'{prompt}{CALL}{name}", "arguments": ', grammar)
            calls = [{"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
                      "function": {"name": name, "arguments": arguments.strip()}}]
    else:
        content = complete(prompt)
    message = {"role": "assistant", "content": content.strip() if content is not None else None}
    if calls:
        message["tool_calls"] = calls
    return {"id": "chatcmpl-" + uuid.uuid4().hex, "object": "chat.completion", "created": int(time.time()),
            "model": getattr(llama, "model_path", NAME),
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": "length" if used["cut"] else "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": used["prompt"], "completion_tokens": used["completion"],
                      "total_tokens": used["prompt"] + used["completion"]}}


if __name__ == "__main__":
    from llama_cpp.server.__main__ import main

    main()
