"""The web agent in `cloud` mode: no browser; pages are fetched over HTTP behind the outbound-URL guard."""
from app.egress.policy import Policy

from . import pages
from .actions import STRING, Observation, Tool, params
from .environment import MAX_OBSERVATION_CHARS, Environment
from .secrets import unknown_placeholder

# The browser steps a cloud-mode task cannot run (the built-in planner's words for them).
BROWSER_ONLY = ("click", "type", "press", "upload", "select", "scroll", "wait_for", "go_back", "switch_tab",
                "hover", "read_page", "drag")


class HttpPageEnvironment(Environment):
    """The web agent in `cloud` mode: no browser, so pages are read over HTTP (behind the outbound-URL guard)."""

    def __init__(self, task, should_stop=lambda: False, policy=None, timeout=15):
        super().__init__(task, should_stop)
        self.policy, self.timeout = policy or Policy(), timeout
        self.page = None

    def tools(self, response_schema=None):
        return super().tools(response_schema) + [
            Tool("go_to", "Open a web page by URL; returns its title and text.", params(["url"], url=STRING)),
            Tool("extract", "The text of the elements of the current page matching a CSS selector "
                 "(any CSS 3 selector: tag, #id, .class, [attr^=value], combinators, :nth-child(), ...).",
                 params(["selector"], selector=STRING)),
        ]

    def url(self):
        return self.page.url if self.page else ""

    def unavailable(self, name):
        if name in BROWSER_ONLY:
            return (f"The step '{name}' needs a browser, and executionMode 'cloud' has none: it can only "
                    "open pages and read them (go to, extract). Use executionMode 'cloud_browser' or "
                    "'client' for browser steps.")
        return super().unavailable(name)

    def do_go_to(self, url):
        if unknown := unknown_placeholder(url):
            return Observation(unknown, self.url(), failed=True)
        try:
            self.page = pages.fetch(url, policy=self.policy, timeout=self.timeout, base=self.url())
        except pages.PageError as exc:
            return Observation(str(exc), failed=True, error_page=isinstance(exc, pages.ErrorPage))
        text = f"{self.page.title()}\n{self.page.text()}".strip()
        return Observation(text[:MAX_OBSERVATION_CHARS], self.page.url)

    def do_extract(self, selector="body"):
        if self.page is None:
            return Observation("No page is open: use go_to first.", failed=True)
        try:
            text = self.page.extract(selector)[:MAX_OBSERVATION_CHARS]
            return Observation(text, self.page.url, trace_result=text)  # kept in the trace entry
        except pages.PageError as exc:
            return Observation(str(exc), self.page.url, failed=True)
