"""Whether a web task was done, on evidence: the built-in rules, the trace's and the page's evidence, and the verdict
a model's check returns. No rule reads the task's language: they compare what the task quotes and what the page
labels with what the actions acted on, what the page shows with what the answer expects, and the page before and
after the last action."""
import re
from dataclasses import dataclass

from . import page_view

# Actions that do nothing on a page: a task that asked for something on a page and took only these did not do it.
OFF_THE_PAGE = ("current_time", "read_attachment", "use_tool", "wait", "answer", "ask_user", "fail")
URL = re.compile(r"\b(?:https?://|www\.)\S", re.I)
WEB = re.compile(r"https?://", re.I)
# What a task names in quotes, in the quotation marks of many languages: "ok", “ok”, „ok“, «ok», 「ok」, 『ok』.
# Quotes are punctuation, not words: they say the same in any language.
QUOTED = re.compile(r'"([^"\n]{1,100})"|[\u201c\u201e]([^\u201c\u201d\n]{1,100})[\u201c\u201d]|\u00ab\s?([^\u00bb\n]{1,100}?)\s?\u00bb'
                    r'|\u300c([^\u300d\n]{1,100})\u300d|\u300e([^\u300f\n]{1,100})\u300f')
# A task that asks a question (a repeat gives no answer to it), in the question marks of many scripts.
QUESTION = re.compile(r"[?\uff1f\u061f]")
# Trace lines (our own words, whatever the task's language) of actions that only open, scroll or read a page.
LOOKS = ("go to ", "go back", "scroll ", "switch to tab", "read page", "extract ", "wait for ")
# Targets whose click has no effect the page view shows: a text field (the click focuses it) or a drop-down.
FIELDS = ("<input>", "<textarea>", "<select>")
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


def evidence(task, trace, repeat, page="", expect=None, unchanged=False, answer=None, reading=False):
    """What the trace and the page show against a model's run being done (a Verdict), or None. Small models answer
    without acting, click the wrong element or type without submitting, then repeat themselves as if done. These
    rules need no judge, and read no words of the task's language; `page` is the latest page view (the start page
    when nothing was done), `expect` what the answer says the page shows when done, `unchanged` whether the last
    action on the page left its view as it was:
    - the answer expects the page to show a text that it does not show;
    - the task names something that no action acted on, typed or chose: a name in quotes ('Click on the "ok"
      button' after a click on Cancel; on an answer, only a name the page's elements carry), or the label of one
      of the page's elements as the page writes it ('Select ZrLIee and click Submit'), unless the task asks a
      question, which an answer may answer from the page;
    - no action was taken on a page that offered elements to act on, and the answer names nothing the page shows
      that bears it out: its `expect` (a text of the page that is neither an element's label nor the task's own
      words), or the answer itself read off the page (a label too: a task that names the element is held to
      acting on it by the rule above); a structured answer (`reading`: responseFormat's data) is a reading;
    - the last action on the page changed nothing there (aside from opening or reading a page, which need not
      change it, and a click on a text field, which focuses it).
    On a repeat (no answer given: the actions are all the evidence), also:
    - nothing was done on the page (a wait, again and again), or the task asks a question (a repeat answers none);
    - the actions only opened, scrolled or read the page, and the task gives no URL that opening was the task."""
    acted = [e for e in trace if "startTs" in e and "check" not in e and "by" not in e and "takeover" not in e
             and not e.get("running") and not e.get("failed")
             and not str(e.get("action", "")).startswith(OFF_THE_PAGE_LINES)]
    view, labels = _words(page_part(page)), page_view.element_labels(page)
    if expect and _words(expect).casefold() not in view.casefold():
        return Verdict(False, f'The answer expects the page to show "{_words(expect)[:80]}", and it does not.')
    if not acted and repeat:  # a wait or a clock read again and again
        return Verdict(False, "No action was taken on the page, and no answer was given.")
    if (missing := _not_acted_on(task, acted, labels, repeat)) is not None:
        return Verdict(False, f'No action acted on "{missing[:80]}", which the task names.')
    if not acted and labels and not (reading or _bears_out(expect, task, labels) or _read_off(answer, task, view)):
        return Verdict(False, "No action was taken on the page, which offered elements to act on, and the answer "
                              "names nothing the page shows that bears it out.")
    if not acted:
        return None
    last = str(acted[-1].get("action", ""))
    if unchanged and not repeat and not last.startswith(LOOKS) \
            and not str(acted[-1].get("target", "")).split("] ", 1)[-1].startswith(FIELDS):
        return Verdict(False, f"The last action ({last[:80]}) changed nothing on the page.")
    if not repeat:
        return None
    if QUESTION.search(task):
        return Verdict(False, "The task asks a question, and no answer was given.")
    if all(str(e.get("action", "")).startswith(LOOKS) for e in acted) and not URL.search(task):
        return Verdict(False, "The actions only opened, scrolled or read the page, and the task asks for more.")
    return None


def _not_acted_on(task, acted, labels, repeat):
    """The first name the task gives that no action acted on, typed or chose, or None. A name counts: in quotes
    (on an answer, only when one of the page's elements carries it), or as the page writes an element's label (case
    and all, so that "no" in a sentence is not the No button); not in a question answered from the page."""
    if not repeat and QUESTION.search(task):
        return None
    lines = [f"{e.get('action', '')} {e.get('target', '')}" for e in acted]  # what each action did, to what
    seen = _words(" ".join(lines)).casefold()
    on_page = {_words(label).casefold() for label in labels}
    quoted = [_words(next(filter(None, match.groups()))) for match in QUOTED.finditer(task)]
    quoted = [name for name in quoted if repeat or name.casefold() in on_page]
    labelled = [label for label in map(_words, labels) if _named(label, task)]
    # A one-character name ("x", "+") is an icon more often than text: the element may say "Close".
    return next((name for name in quoted + labelled if len(name) > 1 and not _named(name.casefold(), seen)), None)


def _bears_out(expect, task, labels):
    """Does the answer's expectation (already found on the page) say something the page shows of its own: not
    an element's label (any answer could name one) nor words of the task (the page may show the task)?"""
    text = _words(expect or "").strip(" .,;:!?").casefold()
    return bool(text) and not any(text in _words(label).casefold() for label in labels) \
        and text not in _words(task).casefold()


def _read_off(answer, task, view):
    """Is a short answer a text of the page (not the task's own words): a reading, which needs no action?"""
    text = _words(answer or "").strip(" .,;:!?").casefold()
    return bool(text) and len(text) <= 200 and text in view.casefold() and text not in _words(task).casefold()


def page_part(text):
    """The page view in an observation or a first message (from its URL line on), its new-element marks (`*[13]`)
    taken off, so that two readings of the same page compare equal; "" when it holds none."""
    if not text or not page_view.is_view(text):
        return ""
    rest = text.partition(page_view.HEADER if text.startswith(page_view.HEADER) else f"\n{page_view.HEADER}")[2]
    return re.sub(r"^\*\[", "[", page_view.HEADER + rest, flags=re.M)


def start_page(first_message):
    """The view of the page the task starts on (a kept session's, a window's), shown after its prompt; or ""."""
    text = first_message if isinstance(first_message, str) else ""
    return text.partition(page_view.START_PAGE)[2]


def _words(text):
    return " ".join(text.split())


def _named(name, text):
    """Is `name` in `text` as whole words?"""
    return bool(name) and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None
