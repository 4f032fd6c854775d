"""The agent loop: ask the planner, execute in the environment, trace, count, enforce budgets."""
import json
import logging
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone

from app import json_schemas

from . import completion, page_view
from .actions import Finish, Observation, Outcome, PlannerError, Stopped
from .secrets import ArrivalTimeout, AwaitingArrival, Secrets

log = logging.getLogger(__name__)
ENDINGS = ("answer", "ask_user", "fail")  # actions that end a run: allowed when the step budget is spent
CHECK_PROBLEM_CHARS = 2000  # what the stored schema check keeps of a problem (it can quote the whole answer)
SHOWN_WHILE_RUNNING = ("wait", "wait_for")  # long by design: a poller sees them in progress before they end
MAX_PUSHBACKS = 2  # answers the completion check sent back ("not done yet") before a third one ends the task


class BudgetExceeded(Exception):
    pass


def _ts(epoch_ms):
    """Whole milliseconds, so durationMs is exactly endTs - startTs (the official SDK checks it)."""
    stamp = datetime.fromtimestamp(epoch_ms // 1000, timezone.utc) + timedelta(milliseconds=epoch_ms % 1000)
    return stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _ms(epoch):
    return int(epoch * 1000)


def trace_entry(url, action, start, end):
    """An actionTrace entry for something that took from `start` to `end` (time.time())."""
    return {"url": url, "action": action, "startTs": _ts(_ms(start)), "endTs": _ts(_ms(end)),
            "durationMs": _ms(end) - _ms(start)}


@dataclass
class Budget:
    max_steps: int
    wall_clock_seconds: float
    max_repeats: int = 3  # the same action this many times in a row is no progress


@dataclass
class RunState:
    """What the loop accumulates; the runner persists it as the task runs (and across a pause)."""

    conversation: object
    trace: list = field(default_factory=list)
    actions: int = 0
    tokens: int = 0
    prior_credits: float = 0.0  # credits of the actions before a pause, already priced
    prior_actions: int = 0
    page_actions: int = 0  # actions on the page (completion.OFF_THE_PAGE are not), for the completion check
    last: Observation | None = None

    def usage(self, credits_per_action, credits_per_1k_tokens):
        credits = (self.prior_credits + (self.actions - self.prior_actions) * credits_per_action
                   + self.tokens / 1000 * credits_per_1k_tokens)
        return {"actions": self.actions, "credits": round(credits, 4)}


class AgentLoop:
    def __init__(self, planner, environment, budget, pricing, state, on_progress=None, should_stop=None,
                 secrets=None, response_schema=None, agent="general"):
        self.planner, self.environment, self.budget = planner, environment, budget
        self.pricing = pricing  # (credits per action, credits per 1k tokens)
        self.state = state
        self.on_progress = on_progress or (lambda state: None)
        self.should_stop = should_stop or (lambda: False)
        self.secrets = secrets or Secrets()
        self.response_schema = response_schema
        self.repaired = False
        # The last check of an answer against response_schema, stored with the task (the console shows it):
        # {"valid": true | false | null (could not be checked), "problem": why not, or null}.
        self.schema_check = None
        conversation = state.conversation
        first = conversation.messages[conversation.start].get("content") if conversation.messages else None
        # A task that asks for something on a page is done only on evidence (workers/agent/completion.py).
        self.page_task = completion.names_a_page(agent, first)
        self.must_act = self.page_task and completion.gives_a_url(first)  # else its start page may hold the answer
        self.task = completion.task_words(first)
        # The page view after the latest action that showed one (first, the page the task starts on), and whether
        # the last action on the page left it as it was: evidence for the completion check.
        self.view = completion.page_part(state.last.text if state.last is not None else completion.start_page(first))
        self.unchanged = False
        self.pushbacks = 0
        self.verdict = None  # the completion check's latest verdict (in the final trace entry)

    def usage(self):
        return self.state.usage(*self.pricing)

    def run(self):
        """Run to an Outcome; the final trace entry describes it and carries the credits."""
        started = time.time()
        self.environment.deadline = time.monotonic() + self.budget.wall_clock_seconds
        # A model call ends with the same budget, and at once on cancel (the planner reads these).
        self.planner.deadline, self.planner.budget_seconds = self.environment.deadline, self.budget.wall_clock_seconds
        self.planner.should_stop = self.should_stop
        try:
            outcome = self._steps(started)
        except (BudgetExceeded, PlannerError, ArrivalTimeout) as exc:
            outcome = Outcome("error", str(exc))
        except Stopped:
            outcome = Outcome("error", "cancelled")
        outcome = replace(outcome, text=self.secrets.redact(outcome.text),
                          structured=self.secrets.redact(outcome.structured))
        self._trace_final(outcome)
        return outcome

    def _steps(self, started):
        repeats, last_key = 0, None
        failed = {}  # key of a call that failed since the last success → why; the same call is not run again
        refused = 0
        # The last executed action's key when it succeeded, and whether it left the page as it was.
        done_key, unchanged = None, False
        asked = set()  # (action key, page) the completion check was asked about on a repeat
        # Bounded even when no action executes (answers being repaired or sent back): steps plus the answer,
        # its repair and the completion check's push-backs.
        for _ in range(self.budget.max_steps + 2 + MAX_PUSHBACKS):
            if self.should_stop():
                return Outcome("error", "cancelled")
            if time.time() - started > self.budget.wall_clock_seconds:
                raise BudgetExceeded(
                    f"Time limit reached: the task ran longer than {self.budget.wall_clock_seconds:g} s.")
            self._person()
            paused = self.environment.paused_seconds()
            with self._model_turn() as turn:
                if not turn:
                    return Outcome("error", "cancelled")
                try:
                    action = self.planner.next_action(self.state)
                finally:  # a planner that gives up has still spent its tokens
                    self.state.tokens += self.planner.tokens_used()
            if self.environment.paused_seconds() != paused and getattr(self.planner, "replans", False):
                continue  # a person took control during the model call: plan again from the page they left
            if self.state.actions >= self.budget.max_steps and action.name not in ENDINGS:
                break
            repeats = repeats + 1 if action.key() == last_key else 1
            last_key = action.key()
            # A successful action asked for again though the page did not change (or at the no-progress rule):
            # maybe the task is done and the model does not know how to say so. The check decides.
            if repeats > 1 and action.key() == done_key and (unchanged or repeats > self.budget.max_repeats):
                verdict = self._check_repeat(action, asked)
                if verdict is not None and verdict.done:
                    text = f"Done: {verdict.reason}" if verdict.reason else "Done."
                    self.state.conversation.add_answer(self.secrets.redact(text))
                    return Outcome("success", text)
                if verdict is not None and repeats <= self.budget.max_repeats:
                    # Not run again (the page did not change after it): the model hears what is missing instead.
                    self.state.conversation.add_call(action)
                    self.state.conversation.add_result(action.call_id, (
                        f"Not run: this action ran already and the page did not change. Not done yet: "
                        f"{verdict.reason} Do something else: another element, another action, or answer."))
                    continue
            if repeats > self.budget.max_repeats:
                raise BudgetExceeded(
                    f"No progress: the action '{self.secrets.redact(action.description or action.name)}' "
                    f"ran {repeats - 1} times in a row and was asked for again.")  # the trace shows those runs
            if action.key() in failed:
                refused += 1
                if refused > 1:
                    raise BudgetExceeded(
                        f"No progress: the failed action '{self.secrets.redact(action.description or action.name)}' "
                        "was tried again.")
                # Not run again: the model hears it failed already and must change something.
                self.state.conversation.add_call(action)
                self.state.conversation.add_result(action.call_id, (
                    f"Not run: this exact call failed already ({failed[action.key()][:300]}). "
                    "Do something else: another element, another action, or answer."))
                continue
            start = time.time()
            self.environment.show_step(self.secrets.redact(action.description or action.name))
            running = action.name in SHOWN_WHILE_RUNNING
            # Where the step starts: asked of the browser only when the entry needs it before the step's own URL.
            url = self.environment.url() if running else None
            if running:  # replaced by the finished entry below
                self.state.trace.append({"url": self.secrets.redact(url), "running": True,
                                         "action": self.secrets.redact(action.description or action.name),
                                         "startTs": _ts(_ms(start)), "endTs": _ts(_ms(start)), "durationMs": 0})
                self.on_progress(self.state)
            try:
                # The only place real secret values exist: the arguments handed to the environment.
                args = self.secrets.substitute(action.args)
                if action.name not in ("type", *ENDINGS) and (held := self.secrets.sites_for(args)):
                    # A stored credential is typed into a page on its sites, never sent anywhere else (a URL, a
                    # tool's arguments): the step fails, saying so. (An ending's text is redacted before it is kept.)
                    observation = Observation(
                        f"refused: {', '.join('${%s}' % name for name in held)} is a stored credential: it is only "
                        "typed into a field of a page on its sites, never used in a " + action.name + " step.",
                        self.environment.url() or "", failed=True)
                else:
                    observation = self.environment.execute(replace(action, args=args))
            except Finish as finish:
                outcome = self._finishing(action, finish.outcome)
                if outcome is None:
                    continue
                return outcome
            except AwaitingArrival as waiting:  # paused before the step: it runs when the code or link has come
                if running:
                    self.state.trace.pop()
                return waiting.outcome
            except BaseException:
                if running:
                    self.state.trace.pop()
                raise
            end = time.time()
            observation = replace(observation, text=self.secrets.redact(observation.text),
                                  url=self.secrets.redact(observation.url or url or self.environment.url()))
            self.state.actions += 1
            self.environment.show_step(url=observation.url)
            self.state.page_actions += completion.acted_on_the_page(action)
            self._saw(action, observation)
            previous = self.state.last.text if self.state.last is not None else None
            done_key = None if observation.failed else action.key()
            unchanged = observation.text == previous
            log.info("action %d: %s", self.state.actions, self.secrets.redact(action.description or action.name))
            entry = {
                "url": observation.url, "action": self.secrets.redact(action.description or action.name),
                "startTs": _ts(_ms(start)), "endTs": _ts(_ms(end)), "durationMs": _ms(end) - _ms(start),
            }
            if observation.trace_result is not None:
                entry["result"] = self.secrets.redact(observation.trace_result)
            if "target" in action.args and (target := getattr(self.environment, "acted_on", None)):
                entry["target"] = self.secrets.redact(page_view.element_line(target))  # as the page view showed it
            if observation.failed:  # the entry says why (element not found, navigation refused, timeout)
                entry.update(failed=True, error=observation.text[:500])
                failed[action.key()] = observation.text.split("\n", 1)[0]
            else:
                failed.clear()
            entry.update(self.environment.trace_fields())
            if self.secrets.waited:  # a code or link this step waited for ("waited 41 s for a code to ...")
                entry["waited"] = "; ".join(self.secrets.waited)
                self.secrets.waited.clear()
            if observation.refused:
                entry["refused"] = [self.secrets.redact(refusal) for refusal in observation.refused]
            if running:
                self.state.trace.pop()
            self.state.trace.append(entry)
            self.state.conversation.add_call(action)
            self.state.conversation.add_result(action.call_id, observation.text)
            self.state.last = observation
            self.on_progress(self.state)
        raise BudgetExceeded(f"Step limit reached: the task needed more than {self.budget.max_steps} actions.")

    def _saw(self, action, observation):
        """Keep the page view an action left, and whether an action on the page changed it (a later view that
        differs, after a wait for instance, says the page changed after all)."""
        view = completion.page_part(observation.text)
        if completion.acted_on_the_page(action) and not observation.failed:
            self.unchanged = bool(view) and view == self.view
        elif view and view != self.view:
            self.unchanged = False
        self.view = view or self.view

    def _person(self):
        """A person's takeover (live view): wait while they have control, then trace it and give the planner the
        page afresh (never a model call in between)."""
        entries = self.environment.between_steps()
        if not entries:
            return
        self.state.trace.extend(self.secrets.redact(entries))
        fresh = self.environment.fresh_page()
        if fresh is not None:
            fresh = replace(fresh, text=self.secrets.redact(fresh.text), url=self.secrets.redact(fresh.url))
            self.state.last = fresh
            self.view, self.unchanged = completion.page_part(fresh.text) or self.view, False
            self.state.conversation.add_note(f"A person had control of the browser and handed it back; the page "
                                             f"now:\n{fresh.text}")
        self.on_progress(self.state)

    def _model_turn(self):
        """A slot of the model's (LLM_CONCURRENCY) for one request; a wait for it shows in the progress trace."""
        slots = getattr(self.planner, "slots", None)
        if slots is None:
            return nullcontext(True)

        def on_wait(since, done):
            entry = {"url": self.secrets.redact(self.environment.url()),
                     "action": "waiting for the model (busy with other tasks)",
                     "startTs": _ts(_ms(since)), "endTs": _ts(_ms(time.time())),
                     "durationMs": _ms(time.time()) - _ms(since)}
            if done:
                self.state.trace[-1] = {**entry, "action": "waited for the model (busy with other tasks)"}
            else:
                self.state.trace.append(entry)
            self.on_progress(self.state)

        return slots.turn(self.should_stop, on_wait)

    def _finishing(self, action, outcome):
        """Record how the run ends; None means "not yet": the answer goes back for its one repair."""
        conversation = self.state.conversation
        if outcome.status == "input-required":
            conversation.add_call(action)
            return replace(outcome, text=self.secrets.redact(outcome.text),
                           hitl=self.secrets.redact(outcome.hitl))
        if outcome.status != "success":
            return outcome
        last = self.state.last
        if last is not None and last.error_page:  # an answer read off a 404 or a browser error page
            return Outcome("error", f"The last page read was an error page: {last.text.splitlines()[0]}")
        # A structured answer (responseFormat) is data read off the page, judged as a reading.
        verdict = self._check(outcome.text, expect=self.secrets.redact(outcome.expect),
                              reading=outcome.structured is not None)
        if verdict is not None and not verdict.done:
            if self.pushbacks < MAX_PUSHBACKS and self.planner.can_repair \
                    and self.state.actions < self.budget.max_steps:
                self.pushbacks += 1
                conversation.add_call(action)
                conversation.add_result(action.call_id, (
                    f"Not done yet: {verdict.reason} Act on the page (its elements are numbered in the page "
                    "view), then call answer." if self.state.page_actions == 0 else
                    f"Not done yet: {verdict.reason} Keep working on the task, then call answer."))
                return None
            return Outcome("error", f"The task was not done: {verdict.reason}")
        if self.response_schema is None:
            conversation.add_answer(self.secrets.redact(outcome.text))
            return outcome
        try:
            content, problem = _structured(outcome, self.response_schema)
        except json_schemas.CheckTooCostly as exc:
            self.schema_check = {"valid": None, "problem": str(exc)[:CHECK_PROBLEM_CHARS]}
            return Outcome("error", f"The answer could not be checked against the responseFormat JSON Schema: {exc}")
        self.schema_check = {"valid": problem is None, "problem": problem and problem[:CHECK_PROBLEM_CHARS]}
        if problem is None:
            text = json.dumps(content, ensure_ascii=False)
            conversation.add_answer(self.secrets.redact(text))
            return Outcome("success", text, structured=content)
        if not self.repaired and self.planner.can_repair:
            self.repaired = True
            conversation.add_call(action)
            conversation.add_result(action.call_id, (
                f"The answer does not match the required JSON Schema: {problem} "
                "Call answer again with content that matches the schema."))
            return None
        return Outcome("error", f"The answer does not match the responseFormat JSON Schema: {problem}")

    def _check(self, answer, repeat=False, expect=None, reading=False):
        """The completion check's Verdict for a task that names a page (else None): the built-in rules, then,
        when they pass and the planner has one, the trace's evidence and the model's check (their own trace
        entry, the model's tokens counted). `repeat`: asked on a repeated action, not on an answer; `expect`:
        what the answer says the page shows when done; `reading`: a structured answer, data read off the page."""
        if not self.page_task:
            return None
        checker = getattr(self.planner, "check_done", None)
        verdict = completion.rules(self.state.page_actions, None if checker else self.state.last, self.must_act)
        start = time.time()
        if verdict.done and checker is not None and (evidence := completion.evidence(
                self.task, self.state.trace, repeat, self.view, expect, self.unchanged,
                answer, reading)) is not None:
            verdict = evidence  # a model's judgement is not needed: the trace says what is missing
            self._trace_check(verdict, start)
        elif verdict.done and checker is not None:
            with self._model_turn() as turn:
                if not turn:
                    raise Stopped()
                try:
                    verdict = checker(self.state, self.secrets.redact(answer or "")) or completion.Verdict(
                        True, "The check's reply said neither yes nor no; the built-in rules passed.")
                finally:
                    self.state.tokens += self.planner.tokens_used()
            verdict = replace(verdict, reason=self.secrets.redact(verdict.reason))
            self._trace_check(verdict, start)
        self.verdict = verdict
        return verdict

    def _trace_check(self, verdict, start):
        log.info("completion check: %s (%s)", "done" if verdict.done else "not done", verdict.reason)
        end = time.time()
        self.state.trace.append({
            "url": self.secrets.redact(self.environment.url()),
            "action": f"completion check: {'done' if verdict.done else 'not done'} ({verdict.reason})",
            "check": verdict.trace(), "startTs": _ts(_ms(start)), "endTs": _ts(_ms(end)),
            "durationMs": _ms(end) - _ms(start)})
        self.on_progress(self.state)

    def _check_repeat(self, action, asked):
        """The completion check's Verdict on a repeated action's task, asked once per action and page; None when
        not asked (no check for this task, or asked already)."""
        if not self.page_task or self.response_schema is not None \
                or getattr(self.planner, "check_done", None) is None:
            return None
        page = self.state.last.text if self.state.last is not None else ""
        if (action.key(), page) in asked:
            return None
        asked.add((action.key(), page))
        return self._check("", repeat=True)

    def _trace_final(self, outcome):
        now = _ms(time.time())
        self.state.trace.append({
            "url": self.secrets.redact(self.environment.url()),
            "action": outcome.text if outcome.status == "success" else f"{outcome.status}: {outcome.text}",
            "credits": self.usage()["credits"],
            "startTs": _ts(now), "endTs": _ts(now), "durationMs": 0,
            "planner": getattr(self.planner, "label", "model"),
            **({"check": self.verdict.trace()} if self.verdict is not None else {}),
            # An answer that waited for the code or link it gives.
            **({"waited": "; ".join(self.secrets.waited)} if self.secrets.waited else {}),
        })


def _structured(outcome, schema):
    """(content, None) when the answer validates against the schema, else (None, what is wrong); raises
    json_schemas.CheckTooCostly when the check goes over its budget."""
    content = outcome.structured
    if content is None:
        try:
            content = json.loads(outcome.text)
        except ValueError:
            return None, "the answer is not JSON."
        except RecursionError:
            raise json_schemas.CheckTooCostly("the answer nests too deeply to be checked against the schema.") \
                from None
    try:
        error = json_schemas.first_error(schema, content)
    except json_schemas.UnsafeSchema as exc:
        return None, str(exc)
    if error is None:
        return content, None
    where = "/".join(str(p) for p in error.absolute_path)
    return None, f"{error.message}" + (f" (at {where})" if where else "") + "."
