"""The Selenium driver of `Browser`: a fresh local Chromium per task (Debian's packages), or a Grid session."""
import contextlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from functools import cached_property

import urllib3
from celery.exceptions import SoftTimeLimitExceeded
from selenium import webdriver
from selenium.common.exceptions import (InvalidSessionIdException, JavascriptException, NoSuchWindowException,
                                        TimeoutException, WebDriverException)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.command import Command
from selenium.webdriver.remote.file_detector import LocalFileDetector, UselessFileDetector
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

from app.live import state as live_state
from app.profiles import state as profile_state
from app.profiles.state import READ_STORAGE, cookie_param
from app.sandbox import box as sandbox, processes as sandbox_processes, settings as browser_settings
from app.sandbox.box import BrowserBox, HostUnavailable

from .base import FRAME_PLACEHOLDER, Browser, BrowserError, BrowserUnavailable, PageReading
from .devtools import DirectCdp
from .page_script import PAGE_JS, PageScript
from .unix_connection import UnixRemoteConnection
from .world import WorldError, answer_value

log = logging.getLogger(__name__)
# Selenium logs each WebDriver command body at DEBUG: typed text (secret values) would land in logs.
for _name in ("selenium", "urllib3.connectionpool"):
    logging.getLogger(_name).setLevel(logging.WARNING)

KEYS = {name.lower(): getattr(Keys, name) for name in dir(Keys) if name.isupper()}
KEYS.update({"ctrl": Keys.CONTROL, "cmd": Keys.COMMAND, "meta": Keys.META, "esc": Keys.ESCAPE,
             "del": Keys.DELETE, "return": Keys.ENTER, "pageup": Keys.PAGE_UP, "pagedown": Keys.PAGE_DOWN,
             "arrowup": Keys.ARROW_UP, "arrowdown": Keys.ARROW_DOWN, "arrowleft": Keys.ARROW_LEFT,
             "arrowright": Keys.ARROW_RIGHT, "up": Keys.ARROW_UP, "down": Keys.ARROW_DOWN,
             "left": Keys.ARROW_LEFT, "right": Keys.ARROW_RIGHT, "space": Keys.SPACE})
MODIFIERS = {Keys.CONTROL, Keys.SHIFT, Keys.ALT, Keys.META, Keys.COMMAND}
DRAG_MOVES = 12  # a pointer drag's moves between down and up: libraries wait for a few before a drag starts
CHOICE_SECONDS = 5  # how long a custom drop-down may take to show its options, and to show the chosen one
FRAME_DEPTH = 3  # frames of another origin inside frames of another origin, read this deep
MAX_HOPS = 10  # same-origin frames on the way to a frame of another origin, entered this deep
# The page view right after an action whose settling followed the tabs this recently (seconds) does not ask for them
# again: a tab the page opens later is followed at the next action or view, as one opened just after any view is.
SETTLED_JUST_NOW = 0.1
# page.js's call in the document of a frame WebDriver is switched into (its source sent along, run in its main world).
FRAME_CALL = PAGE_JS + "\nreturn window.__remoteDispatch[arguments[0]].apply(null, arguments[1]);"
SCRIPT_SECONDS = 30  # a script's time to answer (WebDriver's script timeout, and a direct CDP call's)


# The WebDriver commands chromedriver carries out without its Runtime domain (no script of its own in the page):
# the others get it on for their length (TrackedDriver.execute).
QUIET_COMMANDS = {"executeCdpCommand", Command.GET, Command.W3C_GET_CURRENT_WINDOW_HANDLE,
                  Command.W3C_GET_WINDOW_HANDLES, Command.SWITCH_TO_WINDOW, Command.NEW_WINDOW, Command.CLOSE,
                  Command.QUIT, Command.SCREENSHOT, Command.SET_TIMEOUTS, Command.NEW_SESSION}


# chromedriver returns from a navigation once it has begun: its own wait for the load reads the document through its
# Runtime domain, which stays off (quiet_runtime), and then hangs on a document it cannot read (Chromium's PDF viewer).
# SeleniumBrowser.open waits for the load itself, in our world; an action's navigation is waited for by _settle.
LOAD_STRATEGY = "none"
# On Chromium's error page (a navigation that failed), its network error code ("ERR_NAME_NOT_RESOLVED"); else null.
ERROR_CODE = ("location.protocol === 'chrome-error:' ? "
              "((document.querySelector('.error-code') || {}).textContent || '').trim() : null")


class TrackedDriver(WebDriver):
    """A Remote driver that knows its current window handle: the one it last switched to or was told (`handle`, None
    when not known). The worker learns which tab it drives with no round trip: the live view's target after each
    step, and the tab a direct CDP call goes to (devtools.py)."""

    handle = None
    quiet = False  # chromedriver's Runtime domain is off in its tabs (quiet_runtime): on only for its own commands

    def execute(self, driver_command, params=None):
        loud = self.quiet and driver_command not in QUIET_COMMANDS
        try:
            if loud:  # its frame tracker learns the documents' contexts again (Runtime.enable replays them)
                super().execute("executeCdpCommand", {"cmd": "Runtime.enable", "params": {}})
            try:
                response = super().execute(driver_command, params)
            finally:
                if loud:
                    with contextlib.suppress(WebDriverException):
                        super().execute("executeCdpCommand", {"cmd": "Runtime.disable", "params": {}})
        except NoSuchWindowException:
            self.handle = None
            raise
        if driver_command == Command.SWITCH_TO_WINDOW:
            self.handle = params["handle"]
        elif driver_command == Command.W3C_GET_CURRENT_WINDOW_HANDLE:
            self.handle = response.get("value")
        elif driver_command == Command.CLOSE:
            self.handle = None
        return response


def browsers_dir(var_dir):
    """Where every local session's profile lives: the reaper only ever looks here."""
    return os.path.join(var_dir, "browsers")


def missing_browser(chromium_path, chromedriver_path):
    """None when both binaries are there, else a sentence saying what to install."""
    missing = [f"{what} ({setting}={path})" for what, setting, path in (
        ("Chromium", "CHROMIUM_PATH", chromium_path), ("chromedriver", "CHROMEDRIVER_PATH", chromedriver_path))
        if not (path and os.path.isfile(path) and os.access(path, os.X_OK))]
    if not missing:
        return None
    return ("No browser is installed for executionMode 'cloud_browser': " + " and ".join(missing)
            + " not found. Install Debian's packages: `apt-get install chromium chromium-driver` "
            "(or `make browser`), or set SELENIUM_REMOTE_URL to a Selenium Grid.")


def chrome_options(window_size=(1280, 900), locale="en-US", proxy=None, download_dir=None, extra_arguments=(),
                   chromium_path=None, identity=None):
    """The ChromeOptions of every Chromium of ours, cold or pooled (workers/browser/pool.py): flags, proxy, prefs.
    `chromium_path`: the local Chromium (its version goes into the User-Agent); None for a Grid's. `identity`: the
    caller's browserSettings (app/sandbox/settings.py Identity), whose window, screen and languages it takes."""
    options = webdriver.ChromeOptions()
    options.page_load_strategy = LOAD_STRATEGY
    for flag in sandbox.chromium_flags(window_size, locale, chromium_path, identity=identity):
        options.add_argument(flag)
    for argument in extra_arguments:
        options.add_argument(argument)
    if proxy:
        options.add_argument(f"--proxy-server=http://{proxy}")
        # Chromium sends loopback directly unless told not to: the proxy must see those requests too.
        options.add_argument("--proxy-bypass-list=<-loopback>")
    languages = identity.accept_languages if identity else browser_settings.accept_languages(locale)
    prefs = {"intl.accept_languages": languages,
             "credentials_enable_service": False,
             "profile.password_manager_enabled": False, "download.prompt_for_download": False,
             "autofill.profile_enabled": False, "autofill.credit_card_enabled": False,
             "safebrowsing.enabled": False}
    if download_dir:
        prefs.update({"download.default_directory": download_dir, "download.directory_upgrade": True,
                      "savefile.default_directory": download_dir})
    options.add_experimental_option("prefs", prefs)
    # chromedriver turns Chromium's own log on (--enable-logging): it would hold page console messages
    # and, at start, Chromium deletes and recreates its log file, which must never be a shared path.
    options.add_experimental_option("excludeSwitches", ["enable-logging"])
    return options


def quiet_runtime(driver, handle=None):
    """Turn chromedriver's Runtime domain off in its current tab. chromedriver enables it in every tab it attaches to,
    and while any DevTools client has it on, V8 reads each Error a page logs to the console (its `stack`, through the
    page's own Error.prepareStackTrace): the classic sign of automation (fpscanner's hasCDP). Nothing we use needs
    it: page.js runs in a world of ours by context id (page_script.py), navigations are followed on the Page
    domain."""
    try:
        driver.execute("executeCdpCommand", {"cmd": "Runtime.disable", "params": {}})
        driver.quiet = True
    except Exception:
        log.warning("chromedriver's Runtime domain could not be turned off in tab %s", handle)


class SeleniumBrowser(Browser):
    """One Chromium session. Local: chromedriver (and the Chromium it starts) in a process group of its
    own, a fresh profile under `profile_root` with a marker file, TZ set for the whole browser. Remote
    (`remote_url`): `webdriver.Remote` with the capability `se:name` = `label`.

    `proxy` ("host:port"): every request, loopback included, goes through that HTTP proxy (the egress
    policy lives there). `should_stop` is read inside waits so a cancel lands within one action. `devtools`:
    DevTools on, for the live view (`live_endpoint`: the box's socket, or the Grid's se:cdp)."""

    identity = None  # Emulation.setUserAgentOverride's parameters for each tab (identity_override), once known
    chosen = None  # the caller's browserSettings as app/sandbox/settings.py resolves them (an Identity), if any
    _granted = False  # the chosen identity's browser-wide permissions were granted
    chromium_path = "/usr/bin/chromium"  # the local Chromium: its version names the User-Agent and client hints
    group = None  # a pooled browser's process group (workers/browser/pool.py started it, not a Service of ours)
    zone_per_tab = False  # the browser's own TZ is not the task's (a Grid node, a pooled browser): set it per tab
    _framed = False  # WebDriver is switched into a frame (`_inside`): page.js is called in that frame's document
    _settled_at = float("-inf")  # when an action's settling (or a navigation) last followed the tabs (monotonic)
    # The element actions whose answer is the element as located before acting (page.js's info); with `describes` on,
    # it carries the element's replay `locator` (page.js describe) when the element is in the top document, taken in
    # the same call (workers/replay/recorder.py turns it on).
    described, describes = ("click", "type", "hover", "draw"), False

    def __init__(self, *, label="", chromium_path="/usr/bin/chromium", chromedriver_path="/usr/bin/chromedriver",
                 remote_url=None, proxy=None, window_size=(1280, 900), locale="en-US", time_zone=None,
                 download_dir=None, profile_root=None, page_load_timeout=30.0, extra_arguments=(),
                 devtools=False, should_stop=lambda: False, settings=None):
        self.label = label or f"rd-{uuid.uuid4().hex[:8]}"
        # The caller's browserSettings: a Grid's version is known once its session starts (_emulate takes it then).
        self.chosen = browser_settings.identity(
            settings, None if remote_url else sandbox.chromium_version(chromium_path), window_size, locale,
            time_zone) if settings else None
        self.chromium_path = chromium_path
        self.remote_url, self.time_zone, self.should_stop = remote_url, time_zone, should_stop
        self.download_dir, self.devtools = download_dir, devtools
        self.profile = None
        self.box = None
        self.uploads = None
        self.service = None
        self.zone_per_tab = bool(remote_url)
        self.driver = None
        self._closed = False
        self._known_handles = []
        self._history_tabs = {}
        self._frames = {}  # element number -> the path of frame numbers (from the top document) it is in
        if not remote_url:
            problem = missing_browser(chromium_path, chromedriver_path)
            if problem:
                raise BrowserUnavailable(problem)
        options = chrome_options(window_size, locale, proxy, download_dir, extra_arguments,
                                 None if remote_url else chromium_path, self.chosen)
        try:
            if remote_url:
                options.set_capability("se:name", self.label)
                self.driver = TrackedDriver(command_executor=remote_url, options=options)
                self.driver.file_detector = LocalFileDetector()
                # chromedriver's CDP endpoint, which the Grid forwards to the node (time zone per tab).
                self.driver.command_executor.add_command("executeCdpCommand", "POST",
                                                         "/session/$sessionId/goog/cdp/execute")
                if devtools:
                    self.live_endpoint = self.driver.capabilities.get("se:cdp")
            else:
                self._start_local(options, chromium_path, chromedriver_path, profile_root, proxy)
            self.driver.set_page_load_timeout(page_load_timeout)
            self.page_load_timeout = page_load_timeout
            self.driver.set_script_timeout(SCRIPT_SECONDS)
            self._known_handles = list(self.driver.window_handles)
            self._emulate(self.current_handle())
            self.page.install()  # before the task's first page, which then has page.js from its start
        except BrowserError:
            self.close()
            raise
        except HostUnavailable as exc:
            self.close()
            raise BrowserUnavailable(f"Could not start Chromium: {exc}") from None
        except SoftTimeLimitExceeded:  # the task's time is up (a slow start): the runner says so, not "could not start"
            self.close()
            raise
        except Exception as exc:  # WebDriverException, OSError: the browser could not start
            self.close()
            where = f"the Selenium Grid at {remote_url}" if remote_url else "Chromium"
            raise BrowserUnavailable(f"Could not start {where}: {_reason(exc)}") from None
        log.info("browser session %s started", self.label)

    def _start_local(self, options, chromium_path, chromedriver_path, profile_root, proxy):
        """chromedriver and its Chromium in their sandbox (app/sandbox/box.py), as the browsers' own user."""
        root = profile_root or tempfile.gettempdir()
        os.makedirs(root, exist_ok=True)
        self.profile = tempfile.mkdtemp(prefix="rd-", dir=root)
        self.box = BrowserBox(self.profile, owner_pid=os.getpid(), proxy=proxy, downloads=self.download_dir,
                              time_zone=self.time_zone, binaries=(chromium_path, chromedriver_path),
                              devtools=self.devtools).prepare()
        options.binary_location = chromium_path  # set: Selenium Manager is never asked for a browser
        if self.devtools:
            options.add_argument(f"--remote-debugging-port={sandbox.INNER_DEVTOOLS_PORT}")
            self.live_endpoint = live_state.box_endpoint(self.box.directory)
        options.add_argument(f"--user-data-dir={self.box.profile}")
        self.uploads = self.box.uploads
        self.service = _SandboxedService(self.box, chromedriver_path)
        self.service.start()  # waits for chromedriver's /status on its socket; close() ends its process group
        self.driver = TrackedDriver(command_executor=UnixRemoteConnection(self.box.driver_url), options=options)
        self.driver.file_detector = UselessFileDetector()  # chromedriver here reads the (staged) path itself

    def _emulate(self, handle, prepared=False):
        """Per tab, once chromedriver has attached to it: its Runtime domain off (quiet_runtime), a local Chromium's
        User-Agent with a desktop's client hints (box.identity_override), and where the browser's TZ is not the
        task's (a Grid node, a pooled browser), the time zone overridden through CDP. `prepared`: a pooled browser's
        first tab, whose Runtime and client hints its pool set (pool.py _new_session). With the caller's
        browserSettings (`chosen`), its User-Agent and client hints instead, and its per-tab emulation (device
        metrics, touch, colour scheme, geolocation: app/sandbox/settings.py); its browser-wide grants once."""
        if not prepared:
            quiet_runtime(self.driver, handle)
        if self.identity is None:
            self.identity = self._identity() or {}
        if self.identity and not prepared:
            self._tab_cdp(handle, "Emulation.setUserAgentOverride", self.identity)
        chosen = self.chosen
        for command, params in chosen.tab_commands if chosen else ():
            self._tab_cdp(handle, command, params)
        if chosen and not self._granted:
            for command, params in chosen.browser_commands:
                self._tab_cdp(handle, command, params)
            self._granted = True
        if chosen and self.direct_cdp is not None:
            self.direct_cdp.attach(handle)  # its own override set before the tab's next document, never during it
        if not (self.zone_per_tab and self.time_zone):
            return
        try:
            self.driver.execute("executeCdpCommand", {"cmd": "Emulation.setTimezoneOverride",
                                                      "params": {"timezoneId": self.time_zone}})
        except Exception:
            log.warning("browser %s: the time zone could not be set on tab %s", self.label, handle)

    def _identity(self):
        """setUserAgentOverride's parameters for this browser's tabs: the chosen identity's, else a local Chromium's
        desktop one; a Grid's from the version its session reports (its node's Chromium is not known before)."""
        chosen = self.chosen
        version = (self.driver.capabilities or {}).get("browserVersion") if self.remote_url else None
        if chosen is not None and version and chosen.user_agent_override is None:
            self.chosen = chosen = browser_settings.identity_of_version(chosen, version)
        if chosen is not None:
            return chosen.user_agent_override
        if self.remote_url:
            return sandbox.identity_override_of(version) if version else None
        return sandbox.identity_override(self.chromium_path)

    def _tab_cdp(self, handle, command, params):
        try:
            self.driver.execute("executeCdpCommand", {"cmd": command, "params": params})
        except WebDriverException:
            log.warning("browser %s: %s failed on tab %s", self.label, command, handle)

    # --- plumbing ------------------------------------------------------------------------------------
    @cached_property
    def page(self):
        """page.js in the isolated world of the tab's documents (page_script.py), its calls straight to the browser's
        DevTools when it has a socket on this machine (devtools.py)."""
        return PageScript(self.driver, self._direct if self.direct_cdp else None)

    @cached_property
    def direct_cdp(self):
        """The browser's DevTools without chromedriver: a box's socket on this machine (ours, a pooled one, a kept
        session's); None for a Grid's browser or one without DevTools."""
        endpoint = self.live_endpoint or ""
        if not endpoint.startswith("unix:") or not os.path.exists(endpoint[len("unix:"):]):
            return None
        override = self.chosen.user_agent_override if self.chosen else None
        return DirectCdp(endpoint, SCRIPT_SECONDS, [("Emulation.setUserAgentOverride", override)] if override else ())

    def _direct(self, cmd, params):
        """CDP's `cmd` in the current tab over the direct connection."""
        return self.direct_cdp.call(self.current_handle(), cmd, params)

    def _navigating(self):
        """Whether the current tab has a navigation requested or loading that has not committed (devtools.py): a page
        view of it now would be the page it leaves. Through chromedriver, its own commands wait for that instead."""
        return self.direct_cdp is not None and self.direct_cdp.navigating(self.current_handle())

    def current_handle(self):
        """The tab WebDriver drives: as the driver remembers it (TrackedDriver), asked when it does not."""
        return self.driver.handle or self.driver.current_window_handle

    def _call(self, method, *args):
        """page.js's `method(*args)` in the document WebDriver is in: the top document's through page.js's object in
        our isolated world (installed once per tab); a frame's (`_inside`) by execute_script with page.js's source,
        whose DOM elements come back as WebElements: a frame of another origin is another renderer's document,
        which the top document's world does not reach."""
        if self._framed:
            return self._page(self.driver.execute_script, FRAME_CALL, method, list(args))
        return self._page(self.page.call, method, *args)

    def _page(self, function, *args):
        """`function(*args)` of the page script, its failures as BrowserError."""
        try:
            return function(*args)
        except (WorldError, JavascriptException) as exc:
            raise BrowserError(f"The page script failed: {_reason(exc)}") from None
        except TimeoutException:
            raise BrowserError("Timed out waiting for the page to answer.") from None
        except (InvalidSessionIdException, NoSuchWindowException):
            self._recover_tab()
            raise BrowserError("The tab was closed.") from None
        except WebDriverException as exc:
            raise BrowserError(_reason(exc)) from None

    def _result(self, result):
        if not isinstance(result, dict) or not result.get("ok"):
            raise BrowserError((result or {}).get("error") or "The action failed on the page.")
        return result

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
            raise BrowserError(f"Could not open {url}: {_reason(exc)}") from None
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
            raise BrowserError(f"Could not go back: {_reason(exc)}") from None
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
            raise BrowserError(f"The frame could not be entered: {_reason(exc)}") from None
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

    def html(self):
        return self._call("html")

    def extract(self, selector):
        return self._result(self._call("extract", selector))["texts"]

    def screenshot(self):
        try:
            return self.driver.get_screenshot_as_png()
        except WebDriverException as exc:
            raise BrowserError(f"Could not take a screenshot: {_reason(exc)}") from None

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
            raise BrowserError(f"Could not press {keys}: {_reason(exc)}") from None
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
            raise BrowserError(f"Could not upload into [{info['index']}]: {_reason(exc)}") from None
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
            raise BrowserError(f"Could not drag [{result['source']['index']}]: {_reason(exc)}") from None

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
            raise BrowserError(f"Could not draw on [{info['index']}]: {_reason(exc)}") from None
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
            raise BrowserError(f"The script failed: {_reason(exc)}") from None

    def run_in_world(self, expression):
        """`expression`'s value (a promise awaited) in our isolated world of the tab's top document, through CDP alone:
        chromedriver's Runtime domain stays off and nothing runs in the page's world. For a document chromedriver's
        scripts cannot reach, such as Chromium's PDF viewer (its renderer never answers them)."""
        world = self.page.world
        try:
            return answer_value(world.cdp("Runtime.evaluate", expression=expression, contextId=world.context_id(),
                                          awaitPromise=True, returnByValue=True))
        except WebDriverException as exc:
            raise BrowserError(f"The script failed: {_reason(exc)}") from None
        except WorldError as exc:
            raise BrowserError(f"The script failed: {exc}") from None

    def close(self):
        """Quit the session, then make sure nothing of it is left: its process group, its profile."""
        if self._closed:
            return
        self._closed = True
        self._let_go_of_devtools()
        if self.driver is not None:
            try:
                self.driver.quit()
            except Exception:
                log.warning("browser %s did not quit cleanly; killing its processes", self.label)
        if self.service is not None and self.service.process is not None:
            kill_group(self.service.process.pid)
            try:
                self.service.process.wait(5)  # reap chromedriver: no zombie
            except subprocess.TimeoutExpired:
                pass
        if self.group is not None:
            kill_group(self.group)  # the pool's process reaps it
        if self.box is not None:
            for name in os.listdir(self.box.downloads):  # the service's alone from now on
                sandbox.private_file(os.path.join(self.box.downloads, name))
        if self.profile:
            shutil.rmtree(self.profile, ignore_errors=True)
        log.info("browser session %s closed", self.label)


    def _let_go_of_devtools(self):
        direct = self.__dict__.get("direct_cdp")  # made at the first page.js call, if any
        if direct is not None:
            direct.close()

    # --- a pause's snapshot (workers/browser/parking.py) ------------------------------------------------------
    def _cdp(self, command, params=None):
        return self.driver.execute("executeCdpCommand", {"cmd": command, "params": params or {}}).get("value") or {}

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
            raise BrowserError(f"The browser's state could not be read: {_reason(exc)}") from None
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
            raise BrowserError(f"The browser's state could not be restored: {_reason(exc)}") from None

    # --- a named profile (app/profiles) ---------------------------------------------------------------------------
    def load_profile(self, state):
        """Start from a profile's saved state (cookies, localStorage, IndexedDB), before the task's first page."""
        try:
            profile_state.apply(self._cdp, state)
        except WebDriverException as exc:
            raise BrowserError(f"The profile could not be loaded into the browser: {_reason(exc)}") from None

    def profile_state(self, earlier=None, limit=None):
        """The state to save into the profile at the end: the pause's snapshot, less what belongs to its tabs; what
        passes `limit` bytes (PROFILE_MAX_BYTES) is not read further (app/profiles/state.capture's "tooLarge")."""
        snapshot = self.snapshot(indexed_db=True, limit=limit)
        return profile_state.capture(snapshot["cookies"], snapshot["tabs"], earlier)

    def detach(self):
        """Let go of the browser without ending it (it is parked for the task's answer): close() does nothing now."""
        self._closed = True
        self._let_go_of_devtools()
        if self.service is not None:
            self.service.process = None  # Selenium's Service ends its process when collected
        if self.driver is not None:
            try:
                self.driver.command_executor.close()
            except Exception:
                pass


def _write_storage(tab):
    """The script a restored tab's documents run first: its origin's storage as it was at the pause."""
    return ("(function (origin, local, session) { if (location.origin !== origin) return; try {"
            " local.forEach(function (e) { localStorage.setItem(e[0], e[1]); });"
            " session.forEach(function (e) { sessionStorage.setItem(e[0], e[1]); }); } catch (e) {} })("
            f"{json.dumps(tab.get('origin') or '')}, {json.dumps(tab.get('local') or [])}, "
            f"{json.dumps(tab.get('session') or [])});")


class _SandboxedService(Service):
    """chromedriver's Service, started inside a BrowserBox and reached through its Unix socket (no TCP port)."""

    def __init__(self, box, chromedriver_path):
        self.box, self.chromedriver_path = box, chromedriver_path
        # Its own process group: one killpg ends the sandbox, its forwarders and every browser process.
        # port: never listened on (Selenium's Service would otherwise probe the host for a free one).
        super().__init__(executable_path="/bin/sh", port=sandbox.INNER_DRIVER_PORT, log_output=subprocess.DEVNULL,
                         popen_kw={"start_new_session": True})

    def command_line_args(self):
        # Its log stays off: at any level that logs commands it would write typed text (secrets) to disk.
        return self.box.command([self.chromedriver_path, f"--port={sandbox.INNER_DRIVER_PORT}",
                                 f"--log-path={self.box.run / 'chromedriver.log'}", "--log-level=OFF"])[1:]

    @property
    def service_url(self):
        return self.box.driver_url

    def is_connectable(self):
        # Selenium's own check swallows every exception, a task's soft time limit included.
        return sandbox.driver_ready(self.box.driver_url)


def kill_group(pgid):
    sandbox_processes.kill_group(pgid, grace=0)


def _number(target):
    """The element number a target names (12, "12", "[12]"), or None for a text or a selector."""
    text = str(target).strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return int(text) if text.isdigit() else None


def _reason(exc):
    message = getattr(exc, "msg", None) or str(exc) or exc.__class__.__name__
    return message.strip().splitlines()[0][:300]
