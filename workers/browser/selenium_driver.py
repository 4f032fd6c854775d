"""The Selenium driver of `Browser`: a fresh local Chromium per task (Debian's packages), or a Grid session."""
import logging
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from celery.exceptions import SoftTimeLimitExceeded
from selenium import webdriver
from selenium.common.exceptions import (ElementClickInterceptedException, ElementNotInteractableException,
                                        InvalidSessionIdException, JavascriptException,
                                        NoSuchWindowException, StaleElementReferenceException,
                                        TimeoutException, WebDriverException)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.file_detector import LocalFileDetector, UselessFileDetector
from selenium.webdriver.remote.webelement import WebElement

from app.live import state as live_state
from app.sandbox import box as sandbox, processes as sandbox_processes
from app.sandbox.box import BrowserBox, HostUnavailable

from .base import Browser, BrowserError, BrowserUnavailable, PageReading
from .unix_connection import UnixRemoteConnection

log = logging.getLogger(__name__)
# Selenium logs each WebDriver command body at DEBUG: typed text (secret values) would land in logs.
for _name in ("selenium", "urllib3.connectionpool"):
    logging.getLogger(_name).setLevel(logging.WARNING)

PAGE_JS = (Path(__file__).with_name("page.js")).read_text()
_CALL = PAGE_JS + "\nreturn window.__remoteDispatch[arguments[0]].apply(null, arguments[1]);"
# One round trip for "where is it" and, when it lives in the top document, the element itself.
_LOCATE = PAGE_JS + """
var rd = window.__remoteDispatch, info = rd.locate(arguments[0]);
return [info, info.ok && info.inTop ? rd.element(String(info.index)) : null];"""
KEYS = {name.lower(): getattr(Keys, name) for name in dir(Keys) if name.isupper()}
KEYS.update({"ctrl": Keys.CONTROL, "cmd": Keys.COMMAND, "meta": Keys.META, "esc": Keys.ESCAPE,
             "del": Keys.DELETE, "return": Keys.ENTER, "pageup": Keys.PAGE_UP, "pagedown": Keys.PAGE_DOWN,
             "arrowup": Keys.ARROW_UP, "arrowdown": Keys.ARROW_DOWN, "arrowleft": Keys.ARROW_LEFT,
             "arrowright": Keys.ARROW_RIGHT, "up": Keys.ARROW_UP, "down": Keys.ARROW_DOWN,
             "left": Keys.ARROW_LEFT, "right": Keys.ARROW_RIGHT, "space": Keys.SPACE})
MODIFIERS = {Keys.CONTROL, Keys.SHIFT, Keys.ALT, Keys.META, Keys.COMMAND}


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


def chrome_options(window_size=(1280, 900), locale="en-US", proxy=None, download_dir=None, extra_arguments=()):
    """The ChromeOptions of every Chromium of ours, cold or pooled (workers/browser/pool.py): flags, proxy, prefs."""
    options = webdriver.ChromeOptions()
    options.page_load_strategy = "normal"
    for flag in sandbox.chromium_flags(window_size, locale):
        options.add_argument(flag)
    for argument in extra_arguments:
        options.add_argument(argument)
    if proxy:
        options.add_argument(f"--proxy-server=http://{proxy}")
        # Chromium sends loopback directly unless told not to: the proxy must see those requests too.
        options.add_argument("--proxy-bypass-list=<-loopback>")
    prefs = {"intl.accept_languages": locale, "credentials_enable_service": False,
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


class SeleniumBrowser(Browser):
    """One Chromium session. Local: chromedriver (and the Chromium it starts) in a process group of its
    own, a fresh profile under `profile_root` with a marker file, TZ set for the whole browser. Remote
    (`remote_url`): `webdriver.Remote` with the capability `se:name` = `label`.

    `proxy` ("host:port"): every request, loopback included, goes through that HTTP proxy (the egress
    policy lives there). `should_stop` is read inside waits so a cancel lands within one action. `devtools`:
    DevTools on, for the live view (`live_endpoint`: the box's socket, or the Grid's se:cdp)."""

    group = None  # a pooled browser's process group (workers/browser/pool.py started it, not a Service of ours)
    zone_per_tab = False  # the browser's own TZ is not the task's (a Grid node, a pooled browser): set it per tab

    def __init__(self, *, label="", chromium_path="/usr/bin/chromium", chromedriver_path="/usr/bin/chromedriver",
                 remote_url=None, proxy=None, window_size=(1280, 900), locale="en-US", time_zone=None,
                 download_dir=None, profile_root=None, page_load_timeout=30.0, extra_arguments=(),
                 devtools=False, should_stop=lambda: False):
        self.label = label or f"rd-{uuid.uuid4().hex[:8]}"
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
        if not remote_url:
            problem = missing_browser(chromium_path, chromedriver_path)
            if problem:
                raise BrowserUnavailable(problem)
        options = chrome_options(window_size, locale, proxy, download_dir, extra_arguments)
        try:
            if remote_url:
                options.set_capability("se:name", self.label)
                self.driver = webdriver.Remote(command_executor=remote_url, options=options)
                self.driver.file_detector = LocalFileDetector()
                # chromedriver's CDP endpoint, which the Grid forwards to the node (time zone per tab).
                self.driver.command_executor.add_command("executeCdpCommand", "POST",
                                                         "/session/$sessionId/goog/cdp/execute")
                if devtools:
                    self.live_endpoint = self.driver.capabilities.get("se:cdp")
            else:
                self._start_local(options, chromium_path, chromedriver_path, profile_root, proxy)
            self.driver.set_page_load_timeout(page_load_timeout)
            self.driver.set_script_timeout(30)
            self._known_handles = list(self.driver.window_handles)
            self._emulate(self.driver.current_window_handle)
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
        self.driver = webdriver.Remote(command_executor=UnixRemoteConnection(self.box.driver_url), options=options)
        self.driver.file_detector = UselessFileDetector()  # chromedriver here reads the (staged) path itself

    def _emulate(self, handle):
        """A Grid node's or a pooled browser's TZ is not the task's: override the time zone per tab through CDP."""
        if not (self.zone_per_tab and self.time_zone):
            return
        try:
            self.driver.execute("executeCdpCommand", {"cmd": "Emulation.setTimezoneOverride",
                                                      "params": {"timezoneId": self.time_zone}})
        except Exception:
            log.warning("browser %s: the time zone could not be set on tab %s", self.label, handle)

    # --- plumbing ------------------------------------------------------------------------------------
    def _call(self, method, *args, script=None):
        try:
            if script is not None:
                return self.driver.execute_script(script, *args)
            return self.driver.execute_script(_CALL, method, list(args))
        except JavascriptException as exc:
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
        if not gone:  # no tab closed, so the current one is still there (one round trip fewer per action)
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
        (chromedriver already waits for navigations its own clicks start)."""
        deadline = time.monotonic() + (3 if opens_tab else 0)
        known = len(self._known_handles)
        while True:
            self._follow_tabs()
            if len(self._known_handles) > known or time.monotonic() >= deadline or self.should_stop():
                break
            time.sleep(0.05)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not self.should_stop():
            try:
                if self.driver.execute_script("return document.readyState") == "complete":
                    return
            except WebDriverException:
                pass
            time.sleep(0.1)

    def _native(self, target):
        """(WebElement, info) for an element of the top document, or (None, info) for one in a frame/shadow root."""
        info, element = self._call(None, target, script=_LOCATE)
        self._result(info)
        return (element if isinstance(element, WebElement) else None), info

    # --- navigation and tabs ---------------------------------------------------------------------------
    def open(self, url, new_tab=False):
        try:
            if new_tab:
                self.driver.switch_to.new_window("tab")
                self._known_handles.append(self.driver.current_window_handle)
                self._emulate(self.driver.current_window_handle)
            self.driver.get(url)
        except TimeoutException:
            raise BrowserError(f"Timed out loading {url}.") from None
        except WebDriverException as exc:
            raise BrowserError(f"Could not open {url}: {_reason(exc)}") from None
        self._follow_tabs()

    def live_target(self):
        try:  # chromedriver's window handle is the tab's DevTools target id
            return self.driver.current_window_handle
        except WebDriverException:
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
    def read(self, max_chars=40000, also=None):
        """The page view; `also` (a function body: a recording's drain) runs in the page in the same round trip, and
        what it returns is the reading's `also`."""
        self._follow_tabs()  # a tab a script opened since the last action
        options = {"maxChars": int(max_chars)}
        extra = None
        if also is None:
            result = self._call("read", options)
        else:
            script = f"{PAGE_JS}\nreturn [window.__remoteDispatch.read(arguments[0]), (function () {{ {also} }})()];"
            result, extra = self._call("read", options, script=script)
        return PageReading(url=result["url"], title=result["title"], text=result["text"],
                           elements=result["elements"], status=result.get("status") or 0,
                           truncated=bool(result.get("truncated")), also=extra)

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
        element, info = self._native(target)
        done = False
        if element is not None:
            try:
                element.click()  # a real click (scrolled into view): user activation, so target=_blank opens its tab
                done = True
            except (ElementClickInterceptedException, ElementNotInteractableException,
                    StaleElementReferenceException):
                pass
            except TimeoutException:
                raise BrowserError(f"Timed out loading the page after clicking [{info['index']}].") from None
        if not done:
            self._result(self._call("click", str(info["index"])))
        self._settle(opens_tab=bool(info.get("opensTab")))
        return info

    def type(self, target, text):
        element, info = self._native(target)
        if element is not None and element.tag_name.lower() in ("input", "textarea"):
            try:
                element.clear()
                element.send_keys(text)
                return info
            except (ElementNotInteractableException, StaleElementReferenceException):
                pass
            except WebDriverException as exc:
                raise BrowserError(f"Could not type into [{info['index']}]: {_reason(exc)}") from None
        self._result(self._call("type", str(info["index"]), text, {"clear": True}))
        return info

    def select(self, target, option):
        result = self._result(self._call("select", target, option))
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
        element, info = self._native(target)
        if element is not None:
            try:
                ActionChains(self.driver).move_to_element(element).perform()
                return info
            except WebDriverException:
                pass
        return self._result(self._call("hover", str(info["index"])))

    def wait_for(self, text=None, selector=None, navigation=False, timeout=10):
        start_url = self.current_url()
        deadline = time.monotonic() + float(timeout)
        while True:
            self._follow_tabs()
            if text is not None and self._call("hasText", text):
                return
            if selector is not None and self._call("hasElement", selector):
                return
            if navigation and self.current_url() != start_url:
                return
            if time.monotonic() >= deadline or self.should_stop():
                break
            time.sleep(0.2)
        what = (f"the text {text!r}" if text is not None else f"an element matching {selector!r}"
                if selector is not None else "a navigation")
        raise BrowserError(f"Timed out after {float(timeout):g} s waiting for {what}.")

    def upload(self, target, path):
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

    def close(self):
        """Quit the session, then make sure nothing of it is left: its process group, its profile."""
        if self._closed:
            return
        self._closed = True
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


def _reason(exc):
    message = getattr(exc, "msg", None) or str(exc) or exc.__class__.__name__
    return message.strip().splitlines()[0][:300]
