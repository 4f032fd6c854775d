"""Whether a web task was done, on evidence: the built-in rules, and the verdict a model's check returns."""
import re
from dataclasses import dataclass

from . import page_view

# Actions that do nothing on a page: a task that asked for something on a page and took only these did not do it.
OFF_THE_PAGE = ("current_time", "read_attachment", "use_tool", "wait", "answer", "ask_user", "fail")
URL = re.compile(r"\b(?:https?://|www\.)\S", re.I)
WEB = re.compile(r"https?://", re.I)
# What a task names in quotes: 'Click on the "ok" button', 'Enter "Kasie" into the field'.
QUOTED = re.compile(r'"([^"\n]{1,100})"|\u201c([^\u201d\n]{1,100})\u201d')
# A task that asks for something to be pressed or sent after typing: typed text alone does not do it.
SUBMITS = re.compile(r"\b(press|click|submit|send|search|sign(?:s|ing)? in|log(?:s|ging)? ?in)\b", re.I)
# A task that asks for something to be done on a page, not only read off it: no action, not done.
ACTS = re.compile(r"\b(click|press|tap|enter|type|fill|select|choose|check|uncheck|tick|submit|send|search|close|"
                  r"open|focus|drag|scroll|hover|upload|sign(?:s|ing)? in|log(?:s|ging)? ?in)\b", re.I)
# A task that asks for a pointer gesture the web agent's actions cannot make (they click, type, choose, press keys
# and scroll), unless the word is a label of the page ("Drag" on a button): dragging, dropping (not a "drop-down"),
# drawing a figure (not "draw the number in the checkboxes", which clicks do).
GESTURES = re.compile(r"\b(drag|drop)(?![\w-])|\b(draw)\s+(?:an?|the)\s+(?:\w+\s+)?"
                      r"(?:line|circle|curve|shape|figure|square|rectangle|triangle)", re.I)
# A task of more than one step ("Find the midpoint, then press submit", "Expand the section and click submit"):
# one action, repeated, did not do it, unless a step asks for nothing ("Select nothing and click Submit").
STEPS = re.compile(r"\bthen\b|\band\s+(?:then\s+)?(?:click|press|hit|tap|submit)\b", re.I)
NOTHING = re.compile(r"\b(?:nothing|none)\b", re.I)
# A task that asks a question: a repeat gives no answer to it.
QUESTION = re.compile(r"\?|\btell (?:me|us)\b", re.I)
# A task that asks to open a page (or scroll it), which opening it does; and the trace lines of actions that only
# open, scroll or read a page.
OPENS = re.compile(r"\b(?:open|go to|visit|navigate to|load|scroll)\b", re.I)
LOOKS = ("go to ", "go back", "scroll ", "switch to tab", "read page", "extract ", "wait for ")
FILLS = ("type ", "select ")  # trace lines of actions that fill in a field and submit nothing
# Trace lines of steps that do nothing on a page (OFF_THE_PAGE as workers/agent/actions.py describes them), and of
# the loop's own entries (a wait for the model).
OFF_THE_PAGE_LINES = ("current time", "read attachment", "use ", "wait ", "waiting for", "waited for", "answer",
                      "ask:", "fail:")


@dataclass
class Verdict:
    """The completion check's answer: done or not, why, and who judged (`rules` or `model`)."""

    done: bool
    reason: str
    by: str = "rules"
    tokens: int = 0

    def trace(self):
        """How the verdict appears in the trace (`check`)."""
        return {"done": self.done, "reason": self.reason, "by": self.by, "tokens": self.tokens}


def task_words(first_message):
    """The task's own words: the first message without the start page shown with it."""
    text = first_message if isinstance(first_message, str) else ""
    return text.split(page_view.START_PAGE, 1)[0].strip()


def names_a_page(agent, first_message):
    """Does the task ask for something on a page: a web task whose prompt (its first message) gives a URL or
    shows the web page it starts on (a kept session's, the user's window; not the browser's new-tab page)."""
    text = first_message if isinstance(first_message, str) else ""
    task, _, start = text.partition(page_view.START_PAGE)
    where = re.search(rf"^{re.escape(page_view.HEADER)}(\S+)", start, re.M)
    return agent == "web" and bool(URL.search(task) or where and WEB.match(where[1]))


def gives_a_url(first_message):
    """Does the prompt itself give a URL (the agent must open it: an answer with no action cannot be done)? A task
    that only starts on a page (a kept session's, a window's) may be answered from the page view it was shown."""
    return bool(URL.search(task_words(first_message)))


def acted_on_the_page(action):
    return action.name not in OFF_THE_PAGE


def rules(page_actions, last, must_act=True):
    """The built-in rules (no model): a page task whose prompt gives a URL (`must_act`) is done only after an
    action on the page, and none is done when the last action failed."""
    if must_act and page_actions == 0:
        return Verdict(False, "No action was taken on the page, and the task asks for something on a page.")
    if last is not None and last.failed:
        return Verdict(False, f"The last action failed: {last.text.splitlines()[0][:200]}")
    return Verdict(True, "The actions ran and the last one succeeded.")


def evidence(task, trace, repeat, page=""):
    """What the trace shows against a model's run being done (a Verdict), or None. Small models answer without
    acting, click the wrong element or type without submitting, then repeat themselves as if done; these rules
    need no judge:
    - the task asks to drag, drop or draw a figure, which no action of the web agent does;
    - the task asks for something to be done (click, enter, select …) and no action was taken on the page (a
      task that only starts on a page may be answered from it, unless it asks for that);
    - the task asks to press, click or submit, and the last action on the page only filled a field.
    On a repeat (no answer given: the actions are all the evidence), also:
    - nothing was done on the page (a wait, again and again), or the task asks a question (a repeat answers none);
    - the actions only opened, scrolled or read the page, and the task asks for more than that;
    - the task names something that no action acted on, typed or chose: a name in quotes ('Click on the "ok"
      button' after a click on Cancel), or the label of one of the page's elements (`page`, the latest page view),
      as the page writes it ('Select ZrLIee and click Submit');
    - the task has more than one step ("… then …", "… and click submit") and one action, done again and again,
      is all the trace holds."""
    acted = [e for e in trace if "startTs" in e and "check" not in e and "by" not in e and "takeover" not in e
             and not e.get("running") and not e.get("failed")
             and not str(e.get("action", "")).startswith(OFF_THE_PAGE_LINES)]
    labels = page_view.element_labels(page)
    if (gesture := GESTURES.search(task)) and (verb := gesture[1] or gesture[2]) not in labels \
            and not any(str(e.get("action", "")).startswith("upload") for e in acted):  # a file dropped in
        return Verdict(False, f"The task asks to {verb.lower()}, and no action of this agent drags or draws.")
    if not acted and repeat:  # a wait or a clock read again and again
        return Verdict(False, "No action was taken on the page, and no answer was given.")
    if not acted:
        verb = ACTS.search(task)
        return verb and Verdict(False, f"No action was taken on the page, and the task asks to {verb[1].lower()}.")
    if str(acted[-1].get("action", "")).startswith(FILLS) and (verb := SUBMITS.search(task)):
        return Verdict(False, f"The last action only filled in a field, and the task asks to {verb[1].lower()}.")
    if not repeat:
        return None
    if QUESTION.search(task):
        return Verdict(False, "The task asks a question, and no answer was given.")
    looked = all(str(e.get("action", "")).startswith(LOOKS) for e in acted)
    more = [verb for verb in ACTS.findall(task) if verb.lower() not in ("open", "scroll")]
    if looked and (more or not OPENS.search(task)):
        return Verdict(False, "The actions only opened, scrolled or read the page, and the task asks for more.")
    lines = [f"{e.get('action', '')} {e.get('target', '')}" for e in acted]  # what each action did, to what
    seen = _words(" ".join(lines)).casefold()
    quoted = [_words(match[1] or match[2]) for match in QUOTED.finditer(task)]
    # A label counts only as the page writes it (case and all), so that "no" in a sentence is not the No button.
    labelled = [label for label in map(_words, labels) if _named(label, task)]
    for name in quoted + labelled:
        # A one-character name ("x", "+") is an icon more often than text: the element may say "Close".
        if len(name) > 1 and not _named(name.casefold(), seen):
            return Verdict(False, f'No action acted on "{name[:80]}", which the task names.')
    if len(set(lines)) == 1 and STEPS.search(task) and not NOTHING.search(task):  # one action on one element
        return Verdict(False, "The task asks for more than one step, and one action was all that was done.")
    return None


def _words(text):
    return " ".join(text.split())


def _named(name, text):
    """Is `name` in `text` as whole words?"""
    return bool(name) and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None
