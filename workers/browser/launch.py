"""How our Chromium starts for Selenium: its options, chromedriver in the sandbox, the driver that keeps Runtime off."""
import contextlib
import logging
import os
import subprocess

from selenium import webdriver
from selenium.common.exceptions import NoSuchWindowException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.remote.command import Command
from selenium.webdriver.remote.webdriver import WebDriver

from app.sandbox import box as sandbox, processes as sandbox_processes, settings as browser_settings

log = logging.getLogger(__name__)
# Selenium logs each WebDriver command body at DEBUG: typed text (secret values) would land in logs.
for _name in ("selenium", "urllib3.connectionpool"):
    logging.getLogger(_name).setLevel(logging.WARNING)

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


class SandboxedService(Service):
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


def reason_of(exc):
    message = getattr(exc, "msg", None) or str(exc) or exc.__class__.__name__
    return message.strip().splitlines()[0][:300]
