"""The model's completion check: one constrained request (the task, the trace, the latest page view) → yes/no + reason."""
import json

from workers.agent import completion, page_view
from workers.agent.completion import Verdict

from . import context

TOOL = "task_done"
# Small on purpose: with the latest page view it must fit a 4k-context model (the page view gets the rest).
SYSTEM = ("You check a web agent's work. From the task, the actions it took and the page now, say in a short "
          "reason whether the task is done, then done: \"yes\" only if the actions and the page show it was done, "
          "else \"no\".")
# The reason comes first: a grammar-constrained model writes its arguments in this order, and a verdict that
# follows its reason agrees with it (the bundled model, asked for the verdict first, wrote done "yes" with the
# reason "No task was done").
TOOLS = [{"type": "function", "function": {
    "name": TOOL, "description": "Say whether the task is done.",
    "parameters": {"type": "object", "properties": {
        "reason": {"type": "string", "maxLength": 160},
        "done": {"type": "string", "enum": ["yes", "no"]}}, "required": ["reason", "done"]}}}]
MAX_TOKENS = 96  # the reply: a name, "yes"/"no" and a 160-character reason
ACTIONS_SHOWN = 12
ACTION_CHARS = 120
TASK_CHARS = 600
# The page view is cut at this many characters per token of room left: a view's element numbers and prices
# tokenize a digit at a time (SmolLM2: 1.7 characters per token for a list of numbered items, 2.9 for form HTML),
# so the check fits the context whatever the page.
VIEW_CHARS_PER_TOKEN = 1.5


def request(prompt, trace, messages, answer, room):
    """The check's messages within `room` tokens (the page view is cut to what is left)."""
    steps = [e for e in trace if "startTs" in e and not e.get("running") and "check" not in e
             and not str(e.get("action", "")).startswith(("waiting for the model", "waited for the model"))]
    # What each action acted on, as the page view showed it: a click's number alone says nothing to the judge.
    lines = [f"- {str(e['action'])[:ACTION_CHARS]}" + (f" → {str(e['target'])[:ACTION_CHARS]}" if e.get("target") else "")
             + (" (failed)" if e.get("failed") else "") for e in steps[-ACTIONS_SHOWN:]] or ["- none"]
    head = (f"Task: {completion.task_words(prompt)[:TASK_CHARS]}\n\nActions:\n" + "\n".join(lines)
            + (f"\n\nThe agent's answer: {answer[:300]}" if answer else "") + "\n\nThe page now:\n")
    tail = "\n\nIs the task done?"
    view = latest_view(messages)
    fixed = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": head + tail}]
    left = int((room - context.tokens(fixed) - context.tokens(TOOLS)) * VIEW_CHARS_PER_TOKEN)
    if len(view) > left:
        view = view[:max(0, left - len(context.CUT))] + context.CUT
    return [fixed[0], {"role": "user", "content": head + view + tail}]


def latest_view(messages):
    view = next((m["content"] for m in reversed(messages)
                 if isinstance(m.get("content"), str) and page_view.is_view(m["content"])), "")
    return view or "(no page view)"


def verdict(message, tokens):
    """The reply as a Verdict, or None when it says neither yes nor no."""
    for call in message.tool_calls or ():
        if call.function and call.function.name == TOOL:
            try:
                args = json.loads(call.function.arguments or "{}")
            except ValueError:
                return None
            done = str(args.get("done", "")).strip().lower() if isinstance(args, dict) else ""
            if done in ("yes", "no"):
                return Verdict(done == "yes", str(args.get("reason") or "").strip()[:300], "model", tokens)
            return None
    words = (message.content or "").strip().lower()  # a server that ignored tool_choice: "yes, …" / "no …"
    for word in ("yes", "no"):
        if words.startswith(word):
            return Verdict(word == "yes", (message.content or "").strip()[len(word):].lstrip(" ,.:-")[:300],
                           "model", tokens)
    return None
