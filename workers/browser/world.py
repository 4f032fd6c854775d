"""An isolated world in a tab's documents (CDP): our scripts there share the page's DOM, never its JavaScript."""
from selenium.common.exceptions import WebDriverException

NAME = "remote-dispatch"  # one world for our scripts (the recorder, page.js): no page script enters it
# Commands that go through chromedriver even when the browser's DevTools are reached directly (devtools.py):
# - a script for a tab's next documents lasts as long as the CDP session that added it: chromedriver's, which the
#   browser's life bounds (a direct connection ends with the run, and a kept session's browser outlives it);
# - the world's context in the current document: chromedriver first waits for a navigation an action started (a
#   click's, a history step's) to commit, so the context is the new document's, never the one it replaces.
THROUGH_DRIVER = ("Page.addScriptToEvaluateOnNewDocument", "Page.removeScriptToEvaluateOnNewDocument",
                  "Page.createIsolatedWorld")


class WorldError(Exception):
    pass


class World:
    """Scripts of ours in a world of the tab's documents that the page cannot reach: its globals, prototypes and
    JSON are the world's own, while the DOM is the page's. Installed per tab for its next documents (`add`); called
    in the current top document by `evaluate` (cheap: the context id is remembered, so callers authenticate what comes
    back) or by `call` (the context checked first: for secrets and installs)."""

    def __init__(self, driver, name=NAME, direct=None):
        """`direct(cmd, params)`: CDP in the current tab without chromedriver (devtools.py), or None."""
        self.driver, self.name, self.direct = driver, name, direct
        self.frame = self.context = None  # the tab's top frame, and the world's context id in the document last used

    def cdp(self, cmd, **params):
        if self.direct is not None and cmd not in THROUGH_DRIVER:
            return self.direct(cmd, params)
        return self.driver.execute("executeCdpCommand", {"cmd": cmd, "params": params}).get("value") or {}

    def add(self, source):
        """`source` runs in this world at the start of each next document of the current tab (each frame, before
        any script of the page); returns its id for `remove`."""
        return self.cdp("Page.addScriptToEvaluateOnNewDocument", source=source, worldName=self.name).get("identifier")

    def remove(self, identifier):
        self.cdp("Page.removeScriptToEvaluateOnNewDocument", identifier=identifier)

    def top_frame(self):
        """The id of the current tab's top frame (a tab keeps it for its lifetime)."""
        self.frame = self.cdp("Page.getFrameTree")["frameTree"]["frame"]["id"]
        return self.frame

    def context_id(self):
        """The world's context id in the tab's current top document (created there if it has none). Not checked: after
        a navigation to another renderer process it can name another context there, so an answer from it must be
        authenticated (a token only our script holds), or the context checked (`handle`)."""
        # A tab's top frame keeps its id across navigations: asked again only when it is not this tab's.
        for known in (self.frame is not None, False):
            if not known:
                self.top_frame()
            try:  # creates the world in the document if it has none yet; else the same world's context
                self.context = self.cdp("Page.createIsolatedWorld", frameId=self.frame,
                                        worldName=self.name)["executionContextId"]
                return self.context
            except WebDriverException:
                if not known:
                    raise
        raise WorldError("no top frame")

    def evaluate(self, expression, valid):
        """The value of `expression` in this world of the tab's top document, or None. Context ids are numbered per
        renderer process: after a navigation to another process a remembered id can name another context there,
        even one of the page. So `valid(value)` must authenticate the answer (a token only our script holds), and
        `expression` carries nothing secret; an answer that is not valid is asked again of the world looked up anew."""
        for fresh in (False, True):
            try:
                context = self.context_id() if fresh or self.context is None else self.context
                value = answer_value(self.cdp("Runtime.evaluate", expression=expression, contextId=context,
                                        returnByValue=True))
            except (WebDriverException, WorldError, KeyError):
                continue
            if valid(value):
                return value
        return None

    def handle(self, expression):
        """A remote object id of `expression`'s value in this world of the tab's top document (None when the value is
        no object), checked to come from that world: the world's context is looked up and the value taken in one
        renderer process, whose isolate id the object id carries. A call on it later (`on`) reaches that world of that
        document or fails: the id names its context, and no other process or tab can resolve it."""
        for _ in range(3):
            isolate = str(_signed(self.cdp("Runtime.getIsolateId")["id"]))
            answer = self.cdp("Runtime.evaluate", expression=expression, contextId=self.context_id())
            answer_value(answer)
            handle = answer["result"].get("objectId")
            if handle is None or handle.split(".")[0] == isolate:
                return handle
        raise WorldError("the page kept changing renderer process")

    def on(self, handle, declaration, args=(), **options):
        """CDP's answer to the function `declaration` called on the object `handle` with `args` (JSON values);
        `options` say how the result comes back (returnByValue, serializationOptions)."""
        return self.cdp("Runtime.callFunctionOn", objectId=handle, functionDeclaration=declaration,
                        arguments=[{"value": arg} for arg in args], **options)

    def call(self, declaration, *args):
        """The function `declaration` called with `args` (JSON values) in this world of the tab's top document, after
        checking that the context is that world (`handle`): for secrets and installs."""
        return answer_value(self.on(self.handle("globalThis"), declaration, args, returnByValue=True))


def _signed(hex_id):
    """An isolate id as remote object ids spell it (a signed 64-bit decimal; Runtime.getIsolateId says hex)."""
    value = int(hex_id, 16)
    return value - (1 << 64) if value >= 1 << 63 else value


def answer_value(answer):
    """The value CDP's answer carries by value; WorldError with the script's exception."""
    if answer.get("exceptionDetails"):
        raise WorldError((answer["exceptionDetails"].get("exception") or {}).get("description")
                         or answer["exceptionDetails"].get("text") or "the script failed")
    return answer.get("result", {}).get("value")
