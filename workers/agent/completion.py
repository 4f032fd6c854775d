"""Whether a web task was done, on evidence: the built-in rules, and the verdict a model's check returns."""
import re
from dataclasses import dataclass

from . import page_view

# Actions that do nothing on a page: a task that asked for something on a page and took only these did not do it.
OFF_THE_PAGE = ("current_time", "read_attachment", "use_tool", "wait", "answer", "ask_user", "fail")
URL = re.compile(r"\b(?:https?://|www\.)\S", re.I)
WEB = re.compile(r"https?://", re.I)


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
    text = first_message if isinstance(first_message, str) else ""
    return bool(URL.search(text.partition(page_view.START_PAGE)[0]))


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
