"""The conversation in OpenAI chat format: what planners read and what a task stores (secrets redacted)."""
import json
import uuid

NO_ANSWER = "The user did not answer this; they continue with the next message."


class Conversation:
    """Earlier messages, this task's prompt (the last `user` message), then its calls and results."""

    def __init__(self, messages):
        self.messages = messages
        users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
        self.start = users[-1] if users else 0

    @classmethod
    def begin(cls, earlier, prompt):
        return cls(_closed(list(earlier)) + [{"role": "user", "content": prompt}])

    @classmethod
    def resume(cls, stored, answer):
        """A paused task's conversation, its pending question answered."""
        conversation = cls(list(stored))
        for call_id in conversation._unanswered():
            conversation.add_result(call_id, answer)
        return conversation

    def add_call(self, action):
        """The assistant's tool call; calls of one reply (`action.batch`) share one assistant message."""
        call = {"id": action.call_id, "type": "function",
                "function": {"name": action.name, "arguments": json.dumps(action.args)}}
        reply = self._reply(action.batch)
        if reply is not None:
            reply["tool_calls"].append(call)
            return
        # A string, even empty: llama.cpp's server refuses null and its chat templates fail when it is absent.
        self.messages.append({"role": "assistant", "content": action.note or "", "tool_calls": [call]})

    def _reply(self, batch):
        """The assistant message of reply `batch` when only its tool results follow it, else None."""
        if not batch:
            return None
        for message in reversed(self.messages[self.start:]):
            if message.get("role") == "tool":
                continue
            calls = message.get("tool_calls") or ()
            return message if message.get("role") == "assistant" and calls and calls[0]["id"] == batch else None
        return None

    def add_result(self, call_id, text):
        self.messages.append({"role": "tool", "tool_call_id": call_id, "content": text})

    def add_note(self, text):
        """Something that happened between calls (a person had control): told with the latest tool result, or
        with the prompt before any (a message of its own would count as a call to the built-in planner)."""
        for message in reversed(self.messages):
            if message.get("role") in ("tool", "user") and isinstance(message.get("content"), str):
                message["content"] = f"{message['content']}\n\n{text}"
                return

    def add_answer(self, text):
        self.messages.append({"role": "assistant", "content": text})

    def calls(self):
        """This task's tool calls so far, as (name, args)."""
        return [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                for m in self.messages[self.start:] for c in m.get("tool_calls") or ()]

    def last_result(self):
        """The latest tool result of this task ("" if none)."""
        for message in reversed(self.messages[self.start:]):
            if message.get("role") == "tool":
                return message["content"]
        return ""

    def latest_answer(self):
        """The answer to this task's latest question (`ask_user`'s result), or None while none was answered."""
        asked = [c["id"] for m in self.messages[self.start:] for c in m.get("tool_calls") or ()
                 if c["function"]["name"] == "ask_user"]
        for message in self.messages[self.start:]:
            if asked and message.get("role") == "tool" and message.get("tool_call_id") == asked[-1]:
                return message["content"]
        return None

    def _unanswered(self):
        answered = {m.get("tool_call_id") for m in self.messages if m.get("role") == "tool"}
        return [c["id"] for m in self.messages for c in m.get("tool_calls") or () if c["id"] not in answered]


def _closed(messages):
    """Chat APIs reject a tool call without a result: an earlier task paused on a question gets one."""
    conversation = Conversation(messages)
    for call_id in conversation._unanswered():
        index = next(i for i, m in enumerate(messages)
                     if any(c["id"] == call_id for c in m.get("tool_calls") or ()))
        messages.insert(index + 1, {"role": "tool", "tool_call_id": call_id, "content": NO_ANSWER})
    return messages


def new_call_id():
    return "call_" + uuid.uuid4().hex[:24]
