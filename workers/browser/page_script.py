"""page.js in the isolated world of the tab's documents (world.py): installed once per tab, then each call names it.

Each next document of a tab runs page.js in the world as it starts (one CDP call per tab); a document that was
already open when the tab got it (a kept session's page, a page opened before the first call) has it evaluated once.
An action is then one `Runtime.callFunctionOn` of a few hundred bytes on page.js's object in that world, which the
page cannot reach or alter: its globals, prototypes and JSON are the world's own, only the DOM is shared.
"""
import hmac
import json
import secrets
from pathlib import Path

from selenium.common.exceptions import WebDriverException

from .world import World, answer_value

PAGE_JS = Path(__file__).with_name("page.js").read_text()
API = "globalThis.__remoteDispatch"
CALL = "function (method, args) { return this[method].apply(this, args); }"
# Calls answering [JSON text, a DOM element or null], for a WebDriver reference to the element. LOCATE: where an
# element is and, when it lives in the top document, the element itself; with `describe`, also how to find it again
# (page.js describe: a replay script's locator, and the page it is on), taken before the action acts. TOWARD: whether
# the frame element to switch into next on the way to a frame of another origin is that frame (page.js frameToward),
# and the element.
LOCATE = """function (target, describe) {
  var info = this.locate(target);
  if (describe && info.ok) {
    var found = this.describe(String(info.index));
    if (found.ok) info.locator = found;
  }
  return [JSON.stringify(info), info.ok && info.inTop ? this.element(String(info.index)) : null];
}"""
TOWARD = """function (n) {
  var found = this.frameToward(n);
  return [JSON.stringify(found[1]), found[0]];
}"""
TOKEN = "function () { return this.token; }"
# The lookup of page.js's object in a document, which also leaves the document's readyState on it for the answer's
# serialization to carry: after a navigation, the settling's first question needs no call of its own.
LOOKUP = f"({API} && ({API}.documentState = document.readyState), {API})"
# A page.js call with the run's recorder drained in the same call: the recorder lives in the same world
# (rrweb.py) under a name only the run knows, and its answer carries its own token, which the worker checks.
# One call instead of two after each action, and no second lookup of the world in a new document.
CALL_DRAINING = """function (method, args, recorder, drainArgs) {
  var r = globalThis[recorder];
  return [this[method].apply(this, args), r ? r.drain.apply(r, drainArgs) : null];
}"""


def after_queued(declaration):
    """`declaration` (a function called on page.js's object) run after the tasks the page has queued: a message posted
    now comes after them. A click or an Enter only schedules a form's submission; by then it has been requested, and
    the tab has said so (devtools.py: its navigation) before this call's answer comes."""
    return f"""function () {{
  var self = this, args = arguments;
  return new Promise(function (resolve, reject) {{
    var channel = new MessageChannel();
    channel.port1.onmessage = function () {{
      try {{ resolve(({declaration}).apply(self, args)); }} catch (e) {{ reject(e); }}
    }};
    channel.port2.postMessage(null);
  }});
}}"""


CALL_QUEUED, CALL_DRAINING_QUEUED = after_queued(CALL), after_queued(CALL_DRAINING)
# Errors for an object whose document (its world's context) is gone, CDP's and chromedriver's words for them (it
# answers "timeout: from no such execution context"): the call never ran, so it is made again in the current document.
GONE = ("Could not find object with given id", "Cannot find context with specified id", "no such execution context")


def tokened(source, token):
    """`source` (page.js) with its object marked by `token`: only our world's page.js answers with it."""
    return f"{source}\n{API}.token = {json.dumps(token)};"


def install_source(token):
    """What each next document of a tab runs in the world: page.js in the top document only (it walks same-origin
    frames and open shadow roots from there), its object marked with the tab's token."""
    return f"if (window === window.top) {{\n{tokened(PAGE_JS, token)}\n}}"


class PageScript:
    """page.js's functions in the world of the current tab's top document, for one driver. Its object there is
    remembered (`api`) until a call finds its document gone, then looked up again in the tab's current document."""

    def __init__(self, driver, direct=None):
        self.world = World(driver, direct=direct)
        # Top frame id of a tab (a tab keeps it for its lifetime) → the token page.js's object carries in the tab's documents: a
        # secret of the world and this worker (a kept session's tab keeps the one an earlier run added it with).
        self.tokens = {}
        self.api = self.frame = None  # page.js's object in the document last used, and that tab's top frame id
        self.attached_state = None  # the document's readyState as the lookup of `api` saw it (None: not known)

    def install(self):
        """The current tab's next documents get page.js (a new browser's tab, before its first page)."""
        token = secrets.token_hex(16)
        self.world.add(install_source(token))
        self.tokens[self.world.top_frame()] = token

    def forget(self):
        """After an action that may have loaded another document: the next call looks page.js's object up first (two
        calls) rather than try the old one (chromedriver takes some 30 ms to say that its document is gone)."""
        self.api = None

    def call(self, method, *args):
        """page.js's `method(*args)` (JSON values in and out)."""
        return answer_value(self._on(CALL, [method, list(args)], returnByValue=True))

    def call_queued(self, method, *args):
        """page.js's `method(*args)` after the tasks the page has queued (after_queued): for the page view and the
        document's state after an action."""
        return answer_value(self._on(CALL_QUEUED, [method, list(args)], returnByValue=True, awaitPromise=True))

    def ready_state(self):
        """The document's readyState; right after a navigation, as the lookup of page.js's object there saw it."""
        if self.api is None:
            self._attach()
            if self.attached_state is not None:
                return self.attached_state
        return self.call_queued("readyState")

    def call_draining(self, method, args, recorder, drain_args):
        """(page.js's `method(*args)`, the answer of the world's recorder named `recorder` to `drain(*drain_args)` or
        None when this document has none), in one call, after the tasks the page has queued."""
        value = answer_value(self._on(CALL_DRAINING_QUEUED, [method, list(args), recorder, list(drain_args)],
                                      returnByValue=True, awaitPromise=True))
        return value[0], value[1]

    def locate(self, target, describe=False):
        """(page.js's `locate` info, the WebDriver element id of the element or None when it is not in the top
        document). `describe`: the info carries the element's `locator` too (page.js's `describe`)."""
        return self._with_element(LOCATE, target, describe)

    def toward(self, number):
        """(arrived, the WebDriver element id of the frame element to switch into next, or None) on the way to the
        frame of another origin numbered `number` (page.js's `frameToward`)."""
        return self._with_element(TOWARD, number)

    def _with_element(self, declaration, *arguments):
        """(the JSON value, the WebDriver element id of the element or None) of a call answering both. The element
        comes back as its backend node id in the same call; chromedriver's element ids are
        `f.<frame id>.d.<loader id>.e.<backend node id>`."""
        answer = self._on(declaration, list(arguments), serializationOptions={"serialization": "deep", "maxDepth": 1})
        answer_value(answer)
        text, node = answer["result"]["deepSerializedValue"]["value"]
        value = json.loads(text["value"])
        if node.get("type") != "node":
            return value, None
        return value, f"f.{self.frame}.d.{node['value']['loaderId']}.e.{node['value']['backendNodeId']}"

    def _on(self, declaration, args, **options):
        """CDP's answer to `declaration` called on page.js's object; made again on the object of the tab's current
        document when the remembered one's document is gone (a navigation, another tab)."""
        for fresh in (self.api is None, True):
            if fresh:
                self._attach()
            try:
                return self.world.on(self.api, declaration, args, **options)
            except WebDriverException as exc:
                if fresh or not any(marker in str(exc) for marker in GONE):
                    raise

    def _attach(self):
        """page.js's object in the world of the tab's current document. Two calls when the object answers with the
        tab's token (only our world's page.js knows it): the world's context looked up, the object taken with its
        token. Otherwise (the tab's first document in this run, a document without page.js, an answer from another
        context after a navigation to another process) the object is taken by the checked lookup (World.handle),
        evaluated there when the document has none, and the tab gets page.js for its next documents unless it has
        it (a kept session's tab, from an earlier run: its token is taken up)."""
        self.attached_state = None
        try:
            answer = self.world.cdp("Runtime.evaluate", expression=LOOKUP, contextId=self.world.context_id(),
                                    serializationOptions={"serialization": "deep", "maxDepth": 1})
            self.frame = self.world.frame
            if self.tokens.get(self.frame) and hmac.compare_digest(str(_property(answer, "token")),
                                                                   self.tokens[self.frame]):
                self.api = answer["result"]["objectId"]
                self.attached_state = _property(answer, "documentState")
                return
        except WebDriverException:
            pass  # the document went away meanwhile: the checked lookup below finds the current one
        self.api = self.world.handle(API)
        self.frame = self.world.frame
        if self.frame not in self.tokens:
            earlier = self.api and answer_value(self.world.on(self.api, TOKEN, returnByValue=True))
            if earlier:
                self.tokens[self.frame] = earlier
            else:
                self.install()
        if self.api is None:
            self.api = self.world.handle(f"{tokened(PAGE_JS, self.tokens[self.frame])}\n{API}")


def _property(answer, name):
    """The property `name` of the object CDP's answer serialized (deep), or None: whatever the page put there."""
    serialized = answer.get("result", {}).get("deepSerializedValue") or {}
    if serialized.get("type") != "object" or not isinstance(serialized.get("value"), list):
        return None
    return next((pair[1].get("value") for pair in serialized["value"] if isinstance(pair, list) and len(pair) == 2
                 and pair[0] == name and isinstance(pair[1], dict)), None)
