"""The browser environment's script hook: records each executed step with its page and locator, and before a
replayed step checks its page and finds its element (exactly one match, or the step fails)."""
import logging
import time

from workers.agent.actions import Observation
from workers.browser.base import BrowserError

from app.scripts import format as scripts

log = logging.getLogger(__name__)
PAGE_WAIT_SECONDS = 5  # a step's page may still be loading after the previous step's click
ELEMENT_WAIT_SECONDS = 3  # and its element appear a moment later; an ambiguous match is never waited out
LOCATOR_KEYS = ("tag", "role", "name", "text", "label", "attrs", "css", "index")  # of page.js describe's answer


class ScriptHook:
    def __init__(self, secrets, variables, base=None, kept=None):
        """`kept`: what the run recorded before it paused for a code or link (`kept()`), recorded on from there."""
        kept = kept or {}
        self.secrets, self.variables = secrets, {k: str(v) for k, v in (variables or {}).items()}
        self.base = base  # the script being replayed, if any
        self.steps = list(kept.get("steps") or [])  # recorded, secrets as ${name}, variables as {{name}}
        # recorded step number -> the (redacted) text the read returned
        self.reads = {int(number): text for number, text in (kept.get("reads") or {}).items()}
        self.pending = None  # (step number, step) the replay planner hands over for the next action
        self.replaying = None  # the current action's replayed step number, None when planned
        self.planned = list(kept.get("planned") or [])  # recorded step numbers the model planned (healed)
        # replayed step number -> text it returned (for the answer)
        self.results = {int(number): text for number, text in (kept.get("results") or {}).items()}
        self.answer = None
        self._record = None
        self._unlocated = None  # a step whose element's locator comes with the action's answer (after())

    # --- called by BrowserEnvironment.execute ---------------------------------------------------------
    def before(self, environment, action):
        """(action to run, None) or (action, a failed Observation that replaces running it)."""
        self._record, self._unlocated, self.replaying = None, None, None
        browser = environment.browser
        if self.pending is not None:
            number, step = self.pending
            self.pending, self.replaying = None, number
            problem, action = self._prepare(browser, number, step, action, environment.viewed)
            if problem is not None:
                return action, Observation(problem, environment.url(), failed=True)
            self._record = step  # a step that ran as recorded is kept as it was (parameters and all)
        elif action.name in scripts.RECORDED:
            self._record = self._snapshot(browser, action, environment.viewed)
        return action, None

    def after(self, action, observation, acted_on=None):
        """`acted_on`: the element the action located (its answer), with the locator it took before acting."""
        if observation.failed:
            return
        if self._unlocated is not None:
            locator = (acted_on or {}).get("locator")
            self._record = self._finished(self._unlocated, {"target": locator} if locator else {})
        if self._record is None:
            return
        step = self._record
        self.steps.append(step)
        number = len(self.steps)
        if self.replaying is None:
            self.planned.append(number)
        else:
            self.results[self.replaying] = observation.text
        if action.name in ("extract", "read_page"):
            self.reads[number] = self.secrets.redact(observation.text)

    def finished(self, action, outcome):
        if action.name == "answer" and outcome.status == "success":
            answer = {"text": outcome.text} if outcome.structured is None else {"content": outcome.structured}
            self.answer = scripts.answer_template(self.secrets.redact(answer), self.reads)

    def trace_fields(self):
        if self.base is None:
            return {}
        return {"replayed": self.replaying is not None}

    def kept(self):
        """What a run paused for a code or link has recorded, for the run that takes it up (sealed with the task:
        a replayed step's result may hold a value)."""
        return {"steps": self.steps, "reads": self.reads, "planned": self.planned, "results": self.results}

    # --- the script this run yields -------------------------------------------------------------------
    def script(self, prompt, source):
        """The recorded script, or None when the run did nothing a browser can replay."""
        if not self.steps:
            return None
        steps = list(self.steps)
        if self.answer is not None:
            steps.append({"action": "answer", "args": self.answer})
        version = 1
        if self.base is not None:
            version = int(self.base.get("version") or 1) + (1 if self.planned else 0)
        script = {"format": scripts.FORMAT, "version": version, "prompt": self.secrets.redact(prompt),
                  "source": source, "healed": list(self.planned) if self.base is not None else [],
                  "steps": steps}
        script["parameters"] = scripts.parameters_of(script)
        # The values this run used: a replay without new inputVariables uses them again.
        script["defaults"] = self.secrets.redact(
            {name: self.variables[name] for name in script["parameters"] if name in self.variables})
        script["secrets"] = scripts.secrets_of(script)
        return script

    # --- internals ------------------------------------------------------------------------------------
    def _snapshot(self, browser, action, viewed=None):
        """The step as it runs now; `viewed`: the page the last page view read ({url, title}), the one this step was
        planned on, when no action ran since (else the browser is asked). None when its element's locator comes with
        the action itself (`_unlocated`, finished in after())."""
        step = {"action": action.name, "args": dict(action.args)}
        keys = _elements(action.name, action.args)
        if keys == ["target"] and action.name in getattr(browser, "described", ()):
            browser.describes = True  # the action's own locate call describes its element: no call of its own here
            self._unlocated = step
            return None
        locators = {}
        try:
            if keys:  # each with the page's url and title: one call each
                locators = {key: browser.describe(action.args[key]) for key in keys}
            elif action.name != "go_to":  # where it starts does not matter
                url, title = (viewed["url"], viewed["title"]) if viewed else (browser.current_url(), browser.title())
                step["page"] = {"url": scripts.page_pattern(url), "title": title}
        except BrowserError as exc:  # recording must never fail the task: this step stays without a locator
            log.info("no locator for %s: %s", action.name, exc)
        return self._finished(step, locators)

    def _finished(self, step, locators):
        """The step with its elements' locators (and their page) in place of their arguments; secrets as ${name},
        variables as {{name}}. An element without a locator keeps its argument (the number, the text)."""
        for key, locator in locators.items():
            step.setdefault("page", {"url": scripts.page_pattern(locator.get("url")), "title": locator.get("title")})
            step[key] = {k: locator[k] for k in LOCATOR_KEYS if k in locator}
            step["args"].pop(key, None)
        return scripts.parameterize(self.secrets.redact(step), self.variables)

    def _prepare(self, browser, number, step, action, viewed=None):
        """Check the step's page, find its elements; (why it cannot run, action) or (None, action to run). `viewed`:
        as in _snapshot, the page as the last page view left it (the first look at the page, when it is known)."""
        what = f"Replay step {number} ({action.description or step['action']})"
        if step["action"] not in scripts.RECORDED:  # a script of another version: never run, never skipped
            return f"{what}: a replay cannot run the action {step['action']!r}.", action
        expected = self.secrets.substitute(scripts.fill(step.get("page") or {}, self.variables))
        check_page = bool(expected) and step["action"] != "go_to"
        keys = [key for key in scripts.ELEMENTS.get(step["action"], ()) if step.get(key)]
        if not (check_page or keys):
            return None, action
        locators = {key: scripts.fill(step[key], self.variables) for key in keys}
        started = time.monotonic()
        while True:
            try:
                if keys:  # one call each: the matches and the page they are on
                    found = {key: browser.resolve(locator) for key, locator in locators.items()}
                    url, title = found[keys[0]].get("url"), found[keys[0]].get("title")
                elif viewed:
                    found, url, title, viewed = {}, viewed["url"], viewed["title"], None
                else:
                    found, url, title = {}, browser.current_url(), browser.title()
            except BrowserError as exc:
                return f"{what}: the page could not be read ({exc}).", action
            on_page = not check_page or scripts.same_page(expected, url, title)
            waited = time.monotonic() - started
            missing = [key for key in keys if not found[key].get("count")]
            if on_page and not missing:
                break
            # The page may still be loading after the previous step, and its element appear a moment later;
            # an ambiguous match is never waited out.
            if not on_page and waited > PAGE_WAIT_SECONDS:
                return (f"{what}: expected the page {expected.get('url')} ({expected.get('title')!r}) but the "
                        f"browser is on {scripts.page_pattern(url)} ({title!r})."), action
            if on_page and waited > ELEMENT_WAIT_SECONDS:
                return f"{what}: no element on the page matches {_named(locators[missing[0]])} any more.", action
            time.sleep(0.2)
        for key, match in found.items():
            if match.get("count", 0) > 1:
                names = ", ".join(f"[{m['index']}] <{m['tag']}> {m['name']!r}" for m in match.get("matches", []))
                return (f"{what}: {match['count']} elements match {_named(locators[key])} by {match.get('by')} "
                        f"({names}); an ambiguous target is never guessed."), action
            action.args[key] = str(match["index"])
        return None, action


def _elements(name, args):
    """The arguments of the action `name` that name an element of the page (a drag by an offset has one)."""
    return [key for key in scripts.ELEMENTS.get(name, ()) if args.get(key) not in (None, "")]


def _named(locator):
    attrs = locator.get("attrs") or {}
    name = locator.get("name") or locator.get("text") or attrs.get("id") or locator.get("css") or "?"
    return f"<{locator.get('tag')}> {name!r}"
