"""A SeleniumBrowser's state: the snapshot a pause keeps and restores (cookies, storage, tabs), a profile's state."""
import json

from selenium.common.exceptions import WebDriverException

from app.profiles import state as profile_state
from app.profiles.state import READ_STORAGE, cookie_param
from app.sandbox import box as sandbox

from .base import BrowserError
from .launch import reason_of


class BrowserState:
    """Snapshot and restore, load and save a profile (a mixin of SeleniumBrowser)."""

    def snapshot(self, indexed_db=False, limit=None):
        """The browser's state at a pause, for a fresh browser to take up: every cookie (HttpOnly ones too, through
        CDP), each tab's URL with the localStorage and sessionStorage of its page's origin, and the current tab. With
        `indexed_db` (a profile's save), each tab's "indexedDB" too: its origin's databases, within what is left of
        `limit` bytes once the rest is read (app/profiles/state.read_indexed_db)."""
        try:
            cookies = self._cdp("Network.getAllCookies").get("cookies") or []
            current = self.driver.current_window_handle
            handles = [h for h in self._known_handles if h in self.driver.window_handles] or [current]
            tabs = []
            for handle in handles:
                if handle != current:
                    self.driver.switch_to.window(handle)
                tabs.append(self.driver.execute_script(READ_STORAGE))
                if indexed_db:
                    left = None if limit is None else max(0, limit - profile_state.size({"c": cookies, "t": tabs}))
                    tabs[-1]["indexedDB"] = profile_state.read_indexed_db(self._cdp, left)
            if handles[-1] != current:
                self.driver.switch_to.window(current)
        except WebDriverException as exc:
            raise BrowserError(f"The browser's state could not be read: {reason_of(exc)}") from None
        return {"cookies": cookies, "tabs": tabs, "current": handles.index(current) if current in handles else 0}

    def restore(self, snapshot):
        """Take up a snapshot in this (fresh) browser: its cookies, then each tab opened on its URL with its origin's
        storage put back before the page's own scripts run; the tab that was current is current again."""
        try:
            cookies = [cookie_param(cookie) for cookie in snapshot.get("cookies") or []]
            if cookies:
                self._cdp("Network.setCookies", {"cookies": cookies})
            tabs = snapshot.get("tabs") or []
            for number, tab in enumerate(tabs):
                if number:
                    self.driver.switch_to.new_window("tab")
                    self._known_handles.append(self.driver.current_window_handle)
                    self._emulate(self.driver.current_window_handle)
                added = self._cdp("Page.addScriptToEvaluateOnNewDocument", {"source": _write_storage(tab)})
                try:
                    self.open(tab.get("url") or sandbox.START_PAGE)
                finally:
                    self._cdp("Page.removeScriptToEvaluateOnNewDocument", {"identifier": added.get("identifier")})
            handles, current = self._known_handles[-len(tabs):], int(snapshot.get("current") or 0)
            if tabs and 0 <= current < len(handles) - 1:  # the last one opened is current already
                self.driver.switch_to.window(handles[current])
        except WebDriverException as exc:
            raise BrowserError(f"The browser's state could not be restored: {reason_of(exc)}") from None

    # --- a named profile (app/profiles) ---------------------------------------------------------------------------
    def load_profile(self, state):
        """Start from a profile's saved state (cookies, localStorage, IndexedDB), before the task's first page."""
        try:
            profile_state.apply(self._cdp, state)
        except WebDriverException as exc:
            raise BrowserError(f"The profile could not be loaded into the browser: {reason_of(exc)}") from None

    def profile_state(self, earlier=None, limit=None):
        """The state to save into the profile at the end: the pause's snapshot, less what belongs to its tabs; what
        passes `limit` bytes (PROFILE_MAX_BYTES) is not read further (app/profiles/state.capture's "tooLarge")."""
        snapshot = self.snapshot(indexed_db=True, limit=limit)
        return profile_state.capture(snapshot["cookies"], snapshot["tabs"], earlier)


def _write_storage(tab):
    """The script a restored tab's documents run first: its origin's storage as it was at the pause."""
    return ("(function (origin, local, session) { if (location.origin !== origin) return; try {"
            " local.forEach(function (e) { localStorage.setItem(e[0], e[1]); });"
            " session.forEach(function (e) { sessionStorage.setItem(e[0], e[1]); }); } catch (e) {} })("
            f"{json.dumps(tab.get('origin') or '')}, {json.dumps(tab.get('local') or [])}, "
            f"{json.dumps(tab.get('session') or [])});")


