"""SeleniumBrowser's tabs, navigations and frames: following the tabs a page opens, waiting for loads, reading a page
with its frames, and routing an action into the frame its element is in."""
import contextlib
import json
import time

import urllib3
from selenium.common.exceptions import NoSuchWindowException, TimeoutException, WebDriverException
from selenium.webdriver.remote.webelement import WebElement

from .base import FRAME_PLACEHOLDER, BrowserError, PageReading
from .launch import reason_of
from .page_script import PAGE_JS
from .world import WorldError

FRAME_DEPTH = 3  # frames of another origin inside frames of another origin, read this deep
MAX_HOPS = 10  # same-origin frames on the way to a frame of another origin, entered this deep
# The page view right after an action whose settling followed the tabs this recently (seconds) does not ask for them
# again: a tab the page opens later is followed at the next action or view, as one opened just after any view is.
SETTLED_JUST_NOW = 0.1
# page.js's call in the document of a frame WebDriver is switched into (its source sent along, run in its main world).
FRAME_CALL = PAGE_JS + "\nreturn window.__remoteDispatch[arguments[0]].apply(null, arguments[1]);"
# On Chromium's error page (a navigation that failed), its network error code ("ERR_NAME_NOT_RESOLVED"); else null.
ERROR_CODE = ("location.protocol === 'chrome-error:' ? "
              "((document.querySelector('.error-code') || {}).textContent || '').trim() : null")


class Navigation:
    """The tabs and frames of a SeleniumBrowser (a mixin: the driver, page.js and DevTools calls are
    selenium_driver.py's)."""

    def _follow_tabs(self):
        """A tab opened by the page (target=_blank, window.open) becomes the current one."""
        if self.direct_cdp is not None and self.direct_cdp.tabs() == set(self._known_handles):
            return  # the tabs of the last look, as the browser lists them (chromedriver's list only when they differ)
        try:
            handles = self.driver.window_handles
        except WebDriverException:
            return
        new = [h for h in handles if h not in self._known_handles]
        gone = len(self._known_handles) - (len(handles) - len(new))
        self._known_handles = [h for h in self._known_handles if h in handles] + new
        if new:
            self.driver.switch_to.window(new[-1])
            self._emulate(new[-1])
            return
        if not gone or self.driver.handle in handles:  # the current tab is still there
            return
        try:
            self.driver.current_window_handle
        except (NoSuchWindowException, WebDriverException):
            self._recover_tab()

    def _recover_tab(self):
        try:
            handles = self.driver.window_handles
            if handles:
                self.driver.switch_to.window(handles[-1])
        except WebDriverException:
            pass

    def _settle(self, opens_tab=False):
        """After an action: follow a new tab, then give a navigation it started time to finish loading
        (chromedriver already waits for navigations its own clicks start). The document's state is asked of page.js,
        so the page view after the action finds its object in the new document already looked up."""
        self.page.forget()
        deadline = time.monotonic() + (3 if opens_tab else 0)
        known = len(self._known_handles)
        while True:
            self._follow_tabs()
            if len(self._known_handles) > known or time.monotonic() >= deadline or self.should_stop():
                break
            time.sleep(0.05)
        followed = time.monotonic()
        deadline = followed + 10
        while time.monotonic() < deadline and not self.should_stop():
            try:
                if self._framed:  # a frame of another origin: one small script, not page.js's source with it
                    state = self.driver.execute_script("return document.readyState")
                else:
                    state = self._page(self.page.ready_state)
                if state == "complete" and not self._navigating():
                    self._settled_at = followed
                    return
                if state == "complete":  # the document is leaving: the next one is asked once it has come
                    left = max(0.0, deadline - time.monotonic())
                    self.direct_cdp.wait_navigated(self.current_handle(), min(0.25, left))
                    self.page.forget()
                    continue
            except (WebDriverException, BrowserError):  # the document went away meanwhile: the next one is asked
                self.page.forget()
            time.sleep(0.1)
        if time.monotonic() >= deadline and self._navigating():  # it neither committed nor stopped in all that time:
            self.direct_cdp.stay(self.current_handle())  # the page is the one the tab has (no later view waits again)

    def _native(self, target):
        """(WebElement, info) for an element of the current document (the top one, or the frame WebDriver is in),
        or (None, info) for one in a same-origin frame or a shadow root of it."""
        if self._framed:
            info = self._result(self._call("locate", target))
            return (self._call("element", str(info["index"])) if info.get("inTop") else None), info
        info, element = self._page(self.page.locate, target, self.describes)
        return self._element(element), self._result(info)

    def _element(self, element_id):
        return WebElement(self.driver, element_id) if element_id else None

    # --- navigation and tabs ---------------------------------------------------------------------------
    def open(self, url, new_tab=False):
        try:
            if new_tab:
                self.driver.switch_to.new_window("tab")
                self._known_handles.append(self.current_handle())
                self._emulate(self.current_handle())
            self.page.forget()
            self.driver.get(url)
        except TimeoutException:
            raise BrowserError(f"Timed out loading {url}.") from None
        except WebDriverException as exc:
            raise BrowserError(f"Could not open {url}: {reason_of(exc)}") from None
        self._await_load(url)
        self._refuse_error_page(url)
        self._follow_tabs()
        self._settled_at = time.monotonic()

    def _await_load(self, url):
        """Until the tab's top document has loaded (readyState "complete", asked of page.js, which the page view then
        finds looked up), at most the page load timeout; then its loading is stopped and the step fails, as
        chromedriver's own wait would (LOAD_STRATEGY)."""
        deadline = time.monotonic() + self.page_load_timeout
        while time.monotonic() < deadline and not self.should_stop():
            if not self._navigating():
                try:
                    if self._ready_state() == "complete":
                        return
                except BrowserError:  # the document is being replaced: the next one is asked
                    self.page.forget()
            time.sleep(0.05)
        if self.should_stop():
            return
        with contextlib.suppress(WebDriverException, WorldError):
            self.page.world.cdp("Page.stopLoading")
        raise BrowserError(f"Timed out loading {url}.")

    def _refuse_error_page(self, url):
        """A navigation that failed (a refused tunnel, an unknown host) ends on Chromium's error page: the step fails
        naming the network error, as chromedriver's own navigation says it (LOAD_STRATEGY)."""
        try:
            code = self.run_in_world(ERROR_CODE)
        except BrowserError:  # the document went away meanwhile: no error page to tell
            return
        if code is not None:
            raise BrowserError(f"Could not open {url}: net::{code or 'ERR_FAILED'}")

    def _ready_state(self):
        try:
            return self._page(self.page.ready_state)
        except BrowserError:  # a document page.js does not run in (Chromium's PDF viewer): asked in our world plainly
            return self.run_in_world("document.readyState")

    def live_target(self):
        try:  # chromedriver's window handle is the tab's DevTools target id
            return self.current_handle()
        except (WebDriverException, urllib3.exceptions.HTTPError):  # gone too: the next step says so, not the viewer
            return None

    def current_url(self):
        try:
            return self.driver.current_url
        except WebDriverException:
            return ""

    def title(self):
        try:
            return self.driver.title
        except WebDriverException:
            return ""

    def back(self):
        try:
            self.driver.back()
        except WebDriverException as exc:
            raise BrowserError(f"Could not go back: {reason_of(exc)}") from None
        self._settle()

    def tabs(self):
        handles, current = self.driver.window_handles, self.driver.current_window_handle
        out = []
        for number, handle in enumerate(handles, 1):
            self.driver.switch_to.window(handle)
            out.append({"index": number, "url": self.driver.current_url, "title": self.driver.title,
                        "active": handle == current})
        self.driver.switch_to.window(current)
        return out

    def switch_tab(self, index):
        handles = self.driver.window_handles
        if not 1 <= int(index) <= len(handles):
            raise BrowserError(f"No tab {index}: there {'is' if len(handles) == 1 else 'are'} {len(handles)} "
                               f"tab{'s' if len(handles) != 1 else ''} (numbered from 1).")
        self.driver.switch_to.window(handles[int(index) - 1])

    def close_tab(self, index=None):
        handles = self.driver.window_handles
        if len(handles) <= 1:
            raise BrowserError("The last tab cannot be closed.")
        if index is not None:
            self.switch_tab(index)
        self.driver.close()
        self._recover_tab()

    # --- reading ---------------------------------------------------------------------------------------
    def read(self, max_chars=40000, drain=None):
        settled, self._settled_at = self._settled_at, float("-inf")
        if time.monotonic() - settled >= SETTLED_JUST_NOW:
            self._follow_tabs()  # a tab a script opened since the last action
        options, recorded = {"maxChars": int(max_chars)}, None
        if self._framed:
            result = self._call("read", options)
        elif drain is not None:
            result, recorded = self._page(self.page.call_draining, "read", [options], *drain)
        else:
            result = self._page(self.page.call_queued, "read", options)
        if self._navigating():  # the last action started a navigation: the view is the new page's
            self._settle()
            result = self._call("read", options)
        self._frames = {}
        if result.get("frames"):
            result = self._with_frames(result, (), int(max_chars), "")
            self._call("reserve", result["next"])  # the top document's counter: the highest number of all
        text = FRAME_PLACEHOLDER.sub("(frames this deep are not read)", result["text"])
        return PageReading(url=result["url"], title=result["title"], text=text,
                           elements=result["elements"], status=result.get("status") or 0,
                           truncated=bool(result.get("truncated")), recorded=recorded)

    def _with_frames(self, result, path, max_chars, where):
        """A document's reading with the views of its frames of other origins put in their places (page.js leaves a
        placeholder for each): each frame read in it through WebDriver frame switching, its numbers going on from
        the document's, so every number of the view is one element."""
        text, elements, number = result["text"], list(result["elements"]), result["next"]
        for frame in result.get("frames") or []:
            inner_path, src = path + (frame["index"],), frame.get("src") or ""
            inner_where = f"{where} > {src}" if where else src
            budget = max(0, max_chars - len(text))
            inner = self._frame_reading(inner_path, {"maxChars": budget, "next": number}) if budget else None
            if inner is not None and inner.get("frames") and len(inner_path) < FRAME_DEPTH:
                inner = self._with_frames(inner, inner_path, budget, inner_where)
            shown = "(this frame could not be read)" if inner is None else inner["text"]
            text = text.replace(f"\x01frame {frame['index']}\x01", shown, 1)
            if inner is None:
                continue
            number = max(number, inner["next"])
            for element in inner["elements"]:
                self._frames[element["index"]] = inner_path
                elements.append({**element, "frame": f"{inner_where} > {element['frame']}"
                                 if element.get("frame") else inner_where})
        return {**result, "text": text, "elements": elements, "next": number}

    def _frame_reading(self, path, options):
        try:
            with self._inside(path):
                return self._call("read", options)
        except BrowserError:
            return None

    @contextlib.contextmanager
    def _inside(self, path):
        """In the frame at `path` (frame numbers from the top document), then back in the top document."""
        try:
            for number in path:
                self._enter(number)
            yield
        except WebDriverException as exc:
            raise BrowserError(f"The frame could not be entered: {reason_of(exc)}") from None
        finally:
            self._framed = False
            try:
                self.driver.switch_to.default_content()
            except WebDriverException:
                pass

    def _enter(self, number):
        """Into the frame numbered `number` of the current document, through the same-origin frames that hold it
        (one in a same-origin iframe or an open shadow root, at any depth)."""
        for _ in range(MAX_HOPS):
            element, arrived = self._frame_toward(number)
            if not isinstance(element, WebElement):
                break
            self.driver.switch_to.frame(element)
            self._framed = True
            if arrived:
                return
        raise BrowserError(f"The frame [{number}] cannot be entered.")

    def _frame_toward(self, number):
        """page.js's frameToward(number) in the current document: [the frame element to switch into next, arrived]."""
        if self._framed:
            return self._call("frameToward", number)
        arrived, element = self._page(self.page.toward, number)
        return self._element(element), arrived

    def _routed(self, target, act):
        """`act()` where `target` is: the top document (same-origin frames and shadow roots included) or a frame of
        another origin the last reading found. An element number names its document; a text or selector is matched
        in every document by the same rules as in one (page.js rank), so a text in the page and in a frame is as
        ambiguous as twice in the page. A page without such frames costs nothing more than the top document."""
        number = _number(target)
        path = self._frames.get(number) if number is not None else self._document_with(target) if self._frames else ()
        if not path:
            return act()
        return self._in_frame(path, act)

    def _in_frame(self, path, act):
        """`act()` in the frame at `path`, numbering new elements on from the whole page's highest number."""
        top_next = self._call("reserve", 0)
        with self._inside(path):
            self._call("reserve", top_next)  # a number stamped in the frame is new to the whole page
            result = act()
            top_next = self._call("reserve", 0)
        self._call("reserve", top_next)
        return result

    def _document_with(self, target):
        """The path of the document whose match of `target` is the strongest kind (() the top document; also when
        nothing matches, for the top document's "no element" to say so); several at that kind in several documents
        are ambiguous, as page.js says of one document."""
        ranked = [((), self._result(self._call("rank", target)))]
        for path in dict.fromkeys(self._frames.values()):
            try:
                ranked.append((path, self._in_frame(path, lambda: self._result(self._call("rank", target)))))
            except BrowserError:  # a frame that went away: the others still answer
                continue
        found = [(path, rank) for path, rank in ranked if rank["count"]]
        if not found:
            return ()
        strongest = min(rank["kind"] for _, rank in found)
        best = [(path, rank) for path, rank in found if rank["kind"] == strongest]
        if len(best) > 1:
            listed = [f"[{m['index']}] <{m['tag']}> {m['label']}" for _, rank in best for m in rank["matches"]]
            raise BrowserError(f"Several elements match {json.dumps(str(target).strip())} in the page and its "
                               f"frames: {', '.join(listed[:5])}. Use the element number.")
        return best[0][0]


def _number(target):
    """The element number a target names (12, "12", "[12]"), or None for a text or a selector."""
    text = str(target).strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return int(text) if text.isdigit() else None


