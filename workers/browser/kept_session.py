"""A kept cloud session's browser, re-attached: the Selenium driver over the session's existing WebDriver session.

The session (app/sessions) started the browser; a task attaches to it, drives it, and detaches when it ends,
leaving the browser, its cookies and its tabs for the session's next task.
"""
import urllib3
from selenium.common.exceptions import NoSuchWindowException, WebDriverException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.remote.file_detector import LocalFileDetector

from app.sandbox import box as sandbox, settings as browser_settings

from .base import BrowserUnavailable
from .launch import TrackedDriver, reason_of
from .selenium_driver import SeleniumBrowser
from .unix_connection import remote_connection


class _AttachedDriver(TrackedDriver):
    """A Remote driver bound to an existing session: it creates none (and KeptSessionBrowser never quits it)."""

    def __init__(self, url, session_id):
        self._existing_session = session_id
        super().__init__(command_executor=remote_connection(url), options=Options())

    def start_session(self, capabilities):
        self.session_id = self._existing_session
        self.caps = {"browserName": "chrome"}


class BrowserGone(BrowserUnavailable):
    """The session's WebDriver endpoint does not answer at all: its browser (or the machine holding it) is gone."""


UNREACHABLE = ("The cloud browser session's browser cannot be reached from this worker: its WebDriver endpoint "
               "does not answer (the browser, or the machine holding it, is gone). Stop the session and create a "
               "new one.")


def attach(url, session_id):
    """Selenium over a WebDriver session someone else started (a kept session's, a pooled box's)."""
    return _AttachedDriver(url, session_id)


class KeptSessionBrowser(SeleniumBrowser):
    """SeleniumBrowser on a session it did not start: close() detaches and the browser stays up."""

    def __init__(self, *, webdriver_url, webdriver_session, label="", remote=False, page_load_timeout=30.0,
                 uploads=None, live_endpoint=None, should_stop=lambda: False, chromium_path=SeleniumBrowser.chromium_path,
                 settings=None):
        self.label, self.live_endpoint = label, live_endpoint
        self.chromium_path = chromium_path
        # The session's browserSettings: its launch had their flags; each tab a task meets gets their emulation.
        self.chosen = browser_settings.identity(settings, None if remote else sandbox.chromium_version(chromium_path),
                                                time_zone=None) if settings else None
        self.remote_url = webdriver_url if remote else None
        self.time_zone = None  # the session's browser keeps one zone for all its tasks
        self.should_stop = should_stop
        self.download_dir = None
        self.profile = None  # owned by the session, removed when it ends
        self.box = None
        self.uploads = uploads  # the session's sandbox shows its browser only this folder of files to upload
        self.service = None
        self._closed = False
        self._history_tabs = {}
        self._frames = {}  # element number -> the frames of another origin it is in (SeleniumBrowser.read)
        try:
            self.driver = attach(webdriver_url, webdriver_session)
            if remote:
                self.driver.file_detector = LocalFileDetector()
            self.driver.set_page_load_timeout(page_load_timeout)
            self.page_load_timeout = page_load_timeout
            self.driver.set_script_timeout(30)
            self._known_handles = list(self.driver.window_handles)
            try:
                self.driver.current_window_handle
            except NoSuchWindowException:  # the previous task closed the tab it ended on
                self._recover_tab()
            self._emulate(self.current_handle())  # Runtime off (its launch turned it off too), the client hints
        except WebDriverException as exc:
            raise BrowserUnavailable(f"The cloud browser session's browser is not reachable: {reason_of(exc)}") from None
        except (urllib3.exceptions.HTTPError, OSError):
            # Its WebDriver endpoint is gone (a socket that no longer exists, a machine that does not answer):
            # no retry can help, so the task ends now with this, not after its lease expired three times.
            raise BrowserGone(UNREACHABLE) from None

    def close(self):
        """Detach: the session's browser, cookies and tabs stay for its next task."""
        self._closed = True
        self._let_go_of_devtools()
