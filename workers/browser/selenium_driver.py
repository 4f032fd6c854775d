"""The Selenium driver of `Browser`: a fresh local Chromium per task (Debian's packages), or a Grid session.

SeleniumBrowser is composed along its seams: how the browser starts (launch.py: options, the sandboxed chromedriver,
the driver that keeps Runtime off), its tabs, navigations and frames (navigation.py), its actions on a page
(page_actions.py) and its state (browser_state.py: the snapshot a pause keeps, a profile's state). This module holds
the session itself: its start, its identity per tab, the calls into page.js and DevTools, its end."""
import logging
import os
import shutil
import subprocess
import tempfile
import uuid
from functools import cached_property

from celery.exceptions import SoftTimeLimitExceeded
from selenium.common.exceptions import (InvalidSessionIdException, JavascriptException, NoSuchWindowException,
                                        TimeoutException, WebDriverException)
from selenium.webdriver.remote.file_detector import LocalFileDetector, UselessFileDetector

from app.live import state as live_state
from app.sandbox import box as sandbox, settings as browser_settings
from app.sandbox.box import BrowserBox, HostUnavailable

from .base import Browser, BrowserError, BrowserUnavailable
from .browser_state import BrowserState
from .devtools import DirectCdp
from .launch import (SCRIPT_SECONDS, TrackedDriver, SandboxedService, chrome_options, kill_group, missing_browser,
                     quiet_runtime, reason_of)
from .navigation import FRAME_CALL, Navigation
from .page_actions import PageActions
from .page_script import PageScript
from .unix_connection import UnixRemoteConnection
from .world import WorldError

log = logging.getLogger(__name__)


class SeleniumBrowser(Navigation, PageActions, BrowserState, Browser):
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
    # the same call (workers/replay/script_hook.py turns it on).
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
            raise BrowserUnavailable(f"Could not start {where}: {reason_of(exc)}") from None
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
        self.service = SandboxedService(self.box, chromedriver_path)
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
            raise BrowserError(f"The page script failed: {reason_of(exc)}") from None
        except TimeoutException:
            raise BrowserError("Timed out waiting for the page to answer.") from None
        except (InvalidSessionIdException, NoSuchWindowException):
            self._recover_tab()
            raise BrowserError("The tab was closed.") from None
        except WebDriverException as exc:
            raise BrowserError(reason_of(exc)) from None

    def _result(self, result):
        if not isinstance(result, dict) or not result.get("ok"):
            raise BrowserError((result or {}).get("error") or "The action failed on the page.")
        return result

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



