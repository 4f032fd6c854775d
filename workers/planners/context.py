"""The conversation as it fits a model's context window (LLM_CONTEXT_TOKENS).

The rule, applied to what is sent (the stored conversation keeps everything), each step only if still over:
1. every page view but the latest is reduced to what its action did and its URL (always: a stale view of a
   page costs tokens and misleads; element numbers of the current page are in the latest view);
2. older tool results (all but the latest) are cut to their first OLD_RESULT_CHARS characters;
3. earlier tasks' turns (a conversation continued by `previousRequestId`-style history) are dropped;
4. the latest tool result is cut to what fits, and says so.
Tokens are estimated from characters (CHARS_PER_TOKEN, low on purpose: HTML-like page views tokenize densely).
"""
import json

from workers.agent import page_view

CHARS_PER_TOKEN = 3
MARGIN = 64  # tokens of chat-template framing per request, beyond the estimate
OLD_RESULT_CHARS = 300
CUT = "\n… (cut to fit the model's context)"


def tokens(value):
    """An upper estimate of the tokens of messages or tools (JSON-encoded, as they go over the wire)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return len(text) // CHARS_PER_TOKEN + 1


def fit(messages, room, start=0):
    """`messages` within `room` tokens; `start` is the index of this task's prompt (earlier tasks before it)."""
    messages = [dict(m) for m in messages]
    results = [i for i, m in enumerate(messages) if m.get("role") == "tool"]
    latest = results[-1] if results else None
    # The task's prompt may carry the page the task starts on: a page view like the results' ones.
    views = [i for i in [start] + results if isinstance(messages[i].get("content"), str)
             and page_view.is_view(messages[i]["content"])] if messages else []
    for i in views[:-1]:
        messages[i]["content"] = page_view.stale(messages[i]["content"])
    if tokens(messages) <= room:
        return messages
    for i in results:
        content = messages[i].get("content") or ""
        if i != latest and len(content) > OLD_RESULT_CHARS:
            messages[i]["content"] = content[:OLD_RESULT_CHARS] + CUT
    if tokens(messages) <= room:
        return messages
    messages = messages[start:]
    if latest is not None and tokens(messages) > room:
        latest -= start
        over = (tokens(messages) - room) * CHARS_PER_TOKEN
        content = messages[latest]["content"]
        messages[latest]["content"] = content[:max(0, len(content) - over - len(CUT))] + CUT
    return messages
