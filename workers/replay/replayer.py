"""The replay planner: a script's steps in order, no model; a step that cannot run hands over to the model
(self-healing) when one is configured, or ends the task naming the step."""
from workers.agent.actions import Action, describe
from workers.agent.conversation import new_call_id

from app.scripts import format as scripts


class ReplayPlanner:
    can_repair = False

    def __init__(self, script, hook, variables, heal=None, kept=None):
        """`kept`: the place of a replay that paused for a code or link (`kept()`), where it goes on."""
        kept = kept or {}
        self.steps = list(script.get("steps") or [])
        self.hook, self.heal = hook, heal  # heal(): the model planner, or None without a model
        self.variables = {k: str(v) for k, v in (variables or {}).items()}
        self.position = kept.get("position", 0)
        self.current = None  # (step number, action) of the step handed out last
        self.model = heal() if kept.get("healing") and heal is not None else None

    def kept(self):
        """Where a replay paused for a code or link goes on: at the step that waited (handed out, never run)."""
        if self.model is not None:
            return {"position": self.position, "healing": True}
        return {"position": self.position - 1 if self.current is not None else self.position, "healing": False}

    def tokens_used(self):
        return self.model.tokens_used() if self.model is not None else 0

    def next_action(self, state):
        if self.model is not None:
            return self.model.next_action(state)
        if self.current is not None and state.last is not None and state.last.failed:
            number, action = self.current
            if self.heal is not None:
                self.model = self.heal()  # from here the model plans, with the prompt and the trace so far
                return self.model.next_action(state)
            why = state.last.text
            if not why.startswith("Replay step"):
                why = f"Replay step {number} ({action.description}) failed: {why}"
            return Action("fail", {"reason": why}, "fail", new_call_id())
        if self.position >= len(self.steps):
            return Action("answer", {"text": state.conversation.last_result()}, "answer", new_call_id())
        step = self.steps[self.position]
        self.position += 1
        number = self.position
        args = scripts.fill(dict(step.get("args") or {}), self.variables)
        if step["action"] == "answer":
            args = scripts.fill_answer(args, self.hook.results)
            return Action("answer", args, "answer", new_call_id())
        for key in scripts.ELEMENTS.get(step["action"], ()):
            if step.get(key) or args.get(key) not in (None, ""):
                args[key] = scripts.target_text(step, key)
        action = Action(step["action"], args, describe(step["action"], args), new_call_id())
        self.hook.pending = (number, step)
        self.current = (number, action)
        return action
