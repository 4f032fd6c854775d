"""The agent loop: ask the planner, execute in the environment, trace, count, enforce budgets."""
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from .actions import Finish, Outcome


class BudgetExceeded(Exception):
    pass


def _ts(epoch):
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Budget:
    max_steps: int
    wall_clock_seconds: float
    max_repeats: int = 3  # the same action this many times in a row is no progress


@dataclass
class RunState:
    """What the loop accumulates; the runner persists it as the task runs."""

    trace: list = field(default_factory=list)
    actions: int = 0
    tokens: int = 0
    history: list = field(default_factory=list)  # (Action, Observation) pairs for the planner

    def usage(self, credits_per_action, credits_per_1k_tokens):
        credits = self.actions * credits_per_action + self.tokens / 1000 * credits_per_1k_tokens
        return {"actions": self.actions, "credits": round(credits, 4)}


class AgentLoop:
    def __init__(self, planner, environment, budget, pricing, on_progress=None, should_stop=None):
        self.planner, self.environment, self.budget = planner, environment, budget
        self.pricing = pricing  # (credits per action, credits per 1k tokens)
        self.on_progress = on_progress or (lambda state: None)
        self.should_stop = should_stop or (lambda: False)
        self.state = RunState()

    def usage(self):
        return self.state.usage(*self.pricing)

    def run(self):
        """Run to an Outcome; the final trace entry describes it and carries the credits."""
        started = time.time()
        outcome = None
        try:
            outcome = self._steps(started)
        except BudgetExceeded as exc:
            outcome = Outcome("error", str(exc))
        self._trace_final(outcome)
        return outcome

    def _steps(self, started):
        repeats, last_key = 0, None
        for _ in range(self.budget.max_steps):
            if self.should_stop():
                return Outcome("error", "cancelled")
            if time.time() - started > self.budget.wall_clock_seconds:
                raise BudgetExceeded(
                    f"Time limit reached: the task ran longer than {self.budget.wall_clock_seconds:g} s.")
            action = self.planner.next_action(self.state.history)
            self.state.tokens += getattr(self.planner, "tokens_used", lambda: 0)()
            repeats = repeats + 1 if action.key() == last_key else 1
            last_key = action.key()
            if repeats > self.budget.max_repeats:
                raise BudgetExceeded(
                    f"No progress: the action '{action.description or action.name}' was repeated "
                    f"{repeats} times in a row.")
            start = time.time()
            url = self.environment.url()
            try:
                observation = self.environment.execute(action)
            except Finish as finish:
                return finish.outcome
            end = time.time()
            self.state.actions += 1
            self.state.trace.append({
                "url": observation.url or url, "action": action.description or action.name,
                "startTs": _ts(start), "endTs": _ts(end), "durationMs": int((end - start) * 1000),
            })
            self.state.history.append((action, observation))
            self.on_progress(self.state)
        raise BudgetExceeded(f"Step limit reached: the task took more than {self.budget.max_steps} actions.")

    def _trace_final(self, outcome):
        now = time.time()
        self.state.trace.append({
            "url": self.environment.url(), "action": outcome.text if outcome.status == "success"
            else f"{outcome.status}: {outcome.text}",
            "credits": self.usage()["credits"],
            "startTs": _ts(now), "endTs": _ts(now), "durationMs": 0,
        })
