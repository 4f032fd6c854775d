"""SeleniumBrowser's actions on a page: click, type, select, keys, pointer drags and drawings, uploads, scripts."""
import time

from selenium.common.exceptions import TimeoutException, WebDriverException
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys

from app.sandbox import box as sandbox

from .base import BrowserError
from .launch import reason_of
from .world import WorldError, answer_value

KEYS = {name.lower(): getattr(Keys, name) for name in dir(Keys) if name.isupper()}
KEYS.update({"ctrl": Keys.CONTROL, "cmd": Keys.COMMAND, "meta": Keys.META, "esc": Keys.ESCAPE,
             "del": Keys.DELETE, "return": Keys.ENTER, "pageup": Keys.PAGE_UP, "pagedown": Keys.PAGE_DOWN,
             "arrowup": Keys.ARROW_UP, "arrowdown": Keys.ARROW_DOWN, "arrowleft": Keys.ARROW_LEFT,
             "arrowright": Keys.ARROW_RIGHT, "up": Keys.ARROW_UP, "down": Keys.ARROW_DOWN,
             "left": Keys.ARROW_LEFT, "right": Keys.ARROW_RIGHT, "space": Keys.SPACE})
MODIFIERS = {Keys.CONTROL, Keys.SHIFT, Keys.ALT, Keys.META, Keys.COMMAND}
DRAG_MOVES = 12  # a pointer drag's moves between down and up: libraries wait for a few before a drag starts
CHOICE_SECONDS = 5  # how long a custom drop-down may take to show its options, and to show the chosen one


class PageActions:
    """What a SeleniumBrowser does on its page (a mixin: elements are located and routed into frames by Navigation)."""

    def html(self):
        return self._call("html")

    def extract(self, selector):
        return self._result(self._call("extract", selector))["texts"]

    def screenshot(self):
        try:
            return self.driver.get_screenshot_as_png()
        except WebDriverException as exc:
            raise BrowserError(f"Could not take a screenshot: {reason_of(exc)}") from None

    # --- acting ------------------------------------------------------------------------------------------
    def click(self, target):
        return self._routed(target, lambda: self._click(target))

    def _click(self, target):
        element, info = self._native(target)
        done = False
        if element is not None:
            try:
                element.click()  # a real click (scrolled into view): user activation, so target=_blank opens its tab
                done = True
            except TimeoutException:
                raise BrowserError(f"Timed out loading the page after clicking [{info['index']}].") from None
            except WebDriverException:  # intercepted, not interactable, stale; or WebDriver's own scripts broken by
                pass  # the page (they run in its world): page.js clicks from ours
        if not done:
            self._result(self._call("click", str(info["index"])))
        self._settle(opens_tab=bool(info.get("opensTab")))
        return info

    def type(self, target, text, where=None):
        return self._routed(target, lambda: self._type(target, text, where))

    def _type(self, target, text, where=None):
        element, info = self._native(target)
        if where is not None:
            # The browser's own top-level URL, and the frame's `location` (unforgeable by the page) where WebDriver
            # is now: the document the element is in, or the same-origin document holding it.
            where(self.driver.current_url, self._page(self.driver.execute_script, "return location.href;"))
        if element is not None and info.get("tag") in ("input", "textarea"):
            try:
                element.clear()
                element.send_keys(text)
                return info
            except WebDriverException:  # not interactable, stale, or WebDriver's scripts broken by the page: page.js types
                pass
        self._result(self._call("type", str(info["index"]), text, {"clear": True}))
        return info

    def select(self, target, option):
        return self._routed(target, lambda: self._select(target, option))

    def _select(self, target, option):
        """A <select>'s option; or a custom drop-down's (ARIA combobox or listbox): opened with a click, its options
        waited for, the option clicked by its text, then waited for until the drop-down shows it."""
        result = self._result(self._call("select", target, option, {"open": True}))
        deadline = time.monotonic() + CHOICE_SECONDS
        while result.get("pending"):
            if time.monotonic() >= deadline or self.should_stop():
                raise BrowserError(f"The drop-down {target!r} showed no options to choose from.")
            time.sleep(0.1)
            result = self._result(self._call("select", target, option, {"open": False}))
        if result.get("widget"):
            self._settle()
            while not self._call("shows", str(result["index"]), result["selected"]):
                if time.monotonic() >= deadline or self.should_stop():
                    raise BrowserError(f"The option {result['selected']!r} was clicked, but [{result['index']}] "
                                       "does not show it.")
                time.sleep(0.1)
        self._settle()
        return result

    def press(self, keys):
        parts = [part.strip() for part in str(keys).split("+") if part.strip()] or [str(keys)]
        codes = [KEYS.get(part.lower().replace(" ", ""), part) for part in parts]
        modifiers, rest = [c for c in codes[:-1] if c in MODIFIERS], codes[-1]
        chain = ActionChains(self.driver)
        for modifier in modifiers:
            chain.key_down(modifier)
        chain.send_keys(rest)
        for modifier in reversed(modifiers):
            chain.key_up(modifier)
        try:
            chain.perform()
        except TimeoutException:
            raise BrowserError(f"Timed out loading the page after pressing {keys}.") from None
        except WebDriverException as exc:
            raise BrowserError(f"Could not press {keys}: {reason_of(exc)}") from None
        self._settle()

    def scroll(self, direction="down", target=None):
        return self._result(self._call("scroll", direction, target))

    def hover(self, target):
        return self._routed(target, lambda: self._hover(target))

    def _hover(self, target):
        element, info = self._native(target)
        if element is not None:
            try:
                ActionChains(self.driver).move_to_element(element).perform()
                return info
            except WebDriverException:
                pass
        self._result(self._call("hover", str(info["index"])))
        return info

    def wait_for(self, text=None, selector=None, navigation=False, timeout=10):
        start_url = self.current_url()
        deadline, paused = time.monotonic() + float(timeout), self.paused_seconds()
        while True:
            self._follow_tabs()
            if text is not None and self._call("hasText", text):
                return
            if selector is not None and self._call("hasElement", selector):
                return
            if navigation and self.current_url() != start_url:
                return
            if self.should_stop() or time.monotonic() >= deadline + self.paused_seconds() - paused:
                break
            time.sleep(0.2)
        what = (f"the text {text!r}" if text is not None else f"an element matching {selector!r}"
                if selector is not None else "a navigation")
        raise BrowserError(f"Timed out after {float(timeout):g} s waiting for {what}.")

    def upload(self, target, path):
        return self._routed(target, lambda: self._upload(target, path))

    def _upload(self, target, path):
        element, info = self._native(target)
        if element is None or element.get_attribute("type") != "file":
            raise BrowserError(f"The element [{info['index']}] is not a file input of the page.")
        if self.uploads:
            path = sandbox.stage_upload(self.uploads, path)  # the sandboxed browser sees only its own folders
        try:
            element.send_keys(path)
        except WebDriverException as exc:
            raise BrowserError(f"Could not upload into [{info['index']}]: {reason_of(exc)}") from None
        return info

    def drag(self, source, target=None, offset=None):
        return self._routed(source, lambda: self._drag(source, target, offset))

    def _drag(self, source, target, offset):
        """page.js drags an HTML5-draggable source itself (WebDriver's pointer does not fire HTML5 drag-and-drop in
        Chromium); any other source is dragged by a real pointer: down on it, moves along the line, up at the end."""
        x, y = offset or (0, 0)
        result = self._result(self._call("drag", source, target, {"x": x, "y": y}))
        if not result["html5"]:
            self._pointer_drag(result)
        self._settle()
        return result

    def _pointer_drag(self, result):
        start, end = result["from"], result["to"]
        element, _ = self._native(str(result["source"]["index"]))
        chain = ActionChains(self.driver, duration=20)
        if element is not None:
            chain.move_to_element(element)
        else:  # page.js's point, in this document's viewport
            chain.w3c_actions.pointer_action.move_to_location(round(start["x"]), round(start["y"]))
        chain.click_and_hold()
        done_x = done_y = 0
        for step in range(1, DRAG_MOVES + 1):
            to_x = round((end["x"] - start["x"]) * step / DRAG_MOVES)
            to_y = round((end["y"] - start["y"]) * step / DRAG_MOVES)
            chain.move_by_offset(to_x - done_x, to_y - done_y)
            done_x, done_y = to_x, to_y
        chain.release()
        try:
            chain.perform()
        except WebDriverException as exc:
            raise BrowserError(f"Could not drag [{result['source']['index']}]: {reason_of(exc)}") from None

    def draw(self, target, points):
        return self._routed(target, lambda: self._draw(target, points))

    def _draw(self, target, points):
        """WebDriver places a pointer relative to an element's centre: each point is moved there from the corner."""
        element, info = self._native(target)
        if element is None:
            raise BrowserError(f"[{info['index']}] is in a same-origin frame or a shadow root, where drawing is not "
                               "available; draw on an element of the page or of a frame of another origin.")
        try:
            self.driver.execute_script("arguments[0].scrollIntoView({block: 'center', inline: 'center'})", element)
            size = element.size
            chain = ActionChains(self.driver, duration=20)
            for number, (x, y) in enumerate(points):
                chain.move_to_element_with_offset(element, round(x - size["width"] / 2),
                                                  round(y - size["height"] / 2))
                if number == 0:
                    chain.click_and_hold()
            chain.release()
            chain.perform()
        except WebDriverException as exc:
            raise BrowserError(f"Could not draw on [{info['index']}]: {reason_of(exc)}") from None
        self._settle()
        return info

    def describe(self, target):
        return self._result(self._call("describe", str(target)))

    def resolve(self, locator):
        return self._result(self._call("resolve", locator))

    def match(self, selectors):
        """The SDK's selector kinds (page.js `match`): {"count", "visible", "index", "text", ...}."""
        return self._result(self._call("match", selectors))

    def element_property(self, target, name):
        return self._result(self._call("property", str(target), name))["value"]

    def run_js(self, code):
        try:
            return self.driver.execute_script(code)
        except WebDriverException as exc:
            raise BrowserError(f"The script failed: {reason_of(exc)}") from None

    def run_in_world(self, expression):
        """`expression`'s value (a promise awaited) in our isolated world of the tab's top document, through CDP alone:
        chromedriver's Runtime domain stays off and nothing runs in the page's world. For a document chromedriver's
        scripts cannot reach, such as Chromium's PDF viewer (its renderer never answers them)."""
        world = self.page.world
        try:
            return answer_value(world.cdp("Runtime.evaluate", expression=expression, contextId=world.context_id(),
                                          awaitPromise=True, returnByValue=True))
        except WebDriverException as exc:
            raise BrowserError(f"The script failed: {reason_of(exc)}") from None
        except WorldError as exc:
            raise BrowserError(f"The script failed: {exc}") from None
