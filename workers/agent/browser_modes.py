"""How each browser mode gets its browser: a fresh Chromium (cloud_browser), the user's window (client), or a
kept cloud session (acquired for the task, released after it)."""
import os
import shutil
import socket
import time

from app.crypto import unseal
from app.egress.policy import Policy
from app.egress.proxy import EgressProxy
from app.errors import ApiError
from app.extensions import db
from app.files import service as files
from app.lifecycle import takes_up_a_pause
from app.profiles import service as profiles, state as profile_state
from app.live import state as live_state
from app.sandbox import settings as browser_settings
from app.sandbox.box import being_written
from app.sessions import browsers
from app.sessions import service as sessions

from .actions import Finish, Outcome
from .browsing import BrowserEnvironment, log
from .loop import trace_entry

from workers.browser.base import BrowserError, BrowserUnavailable


def task_policy(task, config):
    """The outbound policy, fenced to the task's allowedDomains when it has them."""
    return Policy.from_config(config).narrowed((task.options or {}).get("allowedDomains"))


class CloudBrowserEnvironment(BrowserEnvironment):
    """`executionMode: "cloud_browser"`: a fresh Chromium per task (or a Grid session), closed with the task,
    behind an egress proxy of its own (workers/browser/egress.py) that is started and stopped with it. Fresh means
    never used: taken from the host's warm pool (workers/browser/pool.py) when one is ready, else started cold."""

    starts_blank = True
    download_guard = None  # workers/browser/download_guard.py: the caps while a download is written
    profile = None  # {"name", "persist"}: the task's profile, loaded at the start, saved at the end with persist
    profile_state = None  # what was loaded: a save keeps the localStorage of origins no tab shows at the end

    def start_browser(self, task, should_stop, config):
        from workers.browser.download_guard import guard

        browser = self._browser(task, should_stop, config)
        self.download_guard = guard(browser, self.downloads_folder(browser), config)  # caps while written
        self.profile = (task.options or {}).get("profile")
        if self.profile and not takes_up_a_pause(task):  # resumed: the pause's state is newer
            try:
                self._load_profile(browser)
            except BaseException:
                browser.close()
                self.egress.stop()
                raise
        return browser

    def _load_profile(self, browser):
        """The profile's saved state into the browser (cold or pooled alike: over CDP, before the first page);
        the trace's first entry says what was loaded."""
        name, start = self.profile["name"], time.time()
        self.profile_state = profiles.load(self.task.api_key_id, name)
        if self.profile_state is None:
            what = f"profile '{name}' has no saved state yet: the browser starts empty"
        else:
            browser.load_profile(self.profile_state)
            what = f"profile '{name}' loaded ({profile_state.summary(self.profile_state)})"
        self.notes.append(trace_entry("", what, start, time.time()))

    def _save_profile(self):
        """With persist, at the task's end: the browser's state replaces the profile's (or the trace says why not)."""
        if not (self.profile and self.profile["persist"] and getattr(self, "browser", None) is not None):
            return
        start = time.time()
        try:
            state = self.browser.profile_state(self.profile_state, limit=self.config["PROFILE_MAX_BYTES"])
        except BrowserError as exc:
            profiles.release(self.task.id)
            what = f"profile '{self.profile['name']}' not saved: {exc}"
        else:
            what = profiles.save(self.task.api_key_id, self.profile["name"], self.task.id, state)
        self.end_notes.append(trace_entry("", what, start, time.time()))

    def _browser(self, task, should_stop, config):
        from workers.browser import pool
        from workers.browser.egress import HARDENING_ARGUMENTS, BrowserEgressProxy
        from workers.browser.launch import browsers_dir
        from workers.browser.selenium_driver import SeleniumBrowser

        options = task.options or {}
        label = options.get("cloudBrowserSessionName") or f"task-{task.id}"
        self.download_dir = os.path.join(config["DOWNLOAD_DIR"], "remote-dispatch", task.id)
        if takes_up_a_pause(task) and (kept := self._kept_browser(task, label, should_stop, config)):
            return kept
        settings = options.get("browserSettings")
        # A pooled browser has the default identity's flags: settings that need their own get a fresh browser.
        while (not pool.cold_reason(config) and not browser_settings.needs_fresh_browser(settings)
               and (pooled := pool.claim(config)) is not None):
            # Started ahead, never used: the task's fence first, then the browser is its own.
            self.egress = BrowserEgressProxy(config, label, directory=pooled.egress_dir)
            self.egress.fence(options.get("allowedDomains"))
            self.egress.chain(unseal(task.proxy_sealed))
            self.egress.new_refusals()  # Chromium's own start-up requests are not the first step's
            try:
                return pool.PooledBrowser(
                    pooled, label=label, time_zone=options.get("timeZone") or pool.DEFAULT_ZONE,
                    download_dir=self.download_dir, should_stop=should_stop, chromium_path=config["CHROMIUM_PATH"],
                    page_load_timeout=config["BROWSER_PAGE_LOAD_TIMEOUT_SECONDS"],
                    settings=settings)
            except BrowserUnavailable:
                continue  # it died since it was checked (and is destroyed): the next one, or a cold start
            except BaseException:
                pool.destroy(pooled)
                raise
        width, height = pool.window_size(config)
        # Started first and waited for last: Chromium starts while the proxy does.
        self.egress = BrowserEgressProxy(config, label).start()
        self.egress.fence(options.get("allowedDomains"))
        self.egress.chain(unseal(task.proxy_sealed))  # the caller's proxy, behind ours (app/egress/upstream.py)
        browser = None
        try:
            browser = SeleniumBrowser(
                label=label,
                chromium_path=config["CHROMIUM_PATH"],
                chromedriver_path=config["CHROMEDRIVER_PATH"],
                remote_url=config.get("SELENIUM_REMOTE_URL"), proxy=self.egress.address,
                extra_arguments=HARDENING_ARGUMENTS,
                window_size=(width, height), locale=config["BROWSER_LOCALE"],
                time_zone=options.get("timeZone") or pool.DEFAULT_ZONE,
                download_dir=self.download_dir,
                profile_root=browsers_dir(config["VAR_DIR"]),
                page_load_timeout=config["BROWSER_PAGE_LOAD_TIMEOUT_SECONDS"], devtools=True,
                should_stop=should_stop, settings=settings)
            self.egress.wait_ready()
            self.egress.new_refusals()  # Chromium's own start-up requests are not the first step's
            return browser
        except BaseException:
            if browser is not None:
                browser.close()
            self.egress.stop()
            raise

    def _kept_browser(self, task, label, should_stop, config):
        """The browser this task's pause parked on this machine, taken back as it was; None: it was let go (or ran
        on another machine), and the run takes up the pause's snapshot in a fresh browser."""
        from workers.browser import parking, pool
        from workers.browser.egress import BrowserEgressProxy

        kept = parking.take(config, task.id)
        if kept is None:
            return None
        self.egress = BrowserEgressProxy(config, label, directory=kept.egress_dir)  # the kept browser's, still running
        self.egress.fence((task.options or {}).get("allowedDomains"))
        self.egress.chain(unseal(task.proxy_sealed))
        self.egress.new_refusals()
        try:
            browser = pool.PooledBrowser(kept, label=label, time_zone=(task.options or {}).get("timeZone")
                                         or pool.DEFAULT_ZONE, download_dir=self.download_dir, should_stop=should_stop,
                                         chromium_path=config["CHROMIUM_PATH"],
                                         page_load_timeout=config["BROWSER_PAGE_LOAD_TIMEOUT_SECONDS"],
                                         settings=(task.options or {}).get("browserSettings"))
        except BrowserUnavailable:  # it died since it was checked (and is destroyed now)
            self.egress.stop()
            return None
        self.kept = True
        return browser

    def pause(self, keep_seconds=0):
        """The browser's snapshot first (for a fresh browser, should this one be gone when the answer comes); then the
        browser is parked (workers/browser/parking.py): kept as it is on this machine for `keep_seconds`, outside any
        task, so the run gives its worker slot back. A browser that cannot be kept (a Grid's) is closed."""
        from workers.browser import parking

        self.profile = None  # saved at the task's end, not at a pause
        snapshot = None
        try:
            snapshot = self.browser.snapshot()
        except BrowserError as exc:
            log.warning("task %s: no snapshot at the pause: %s", self.task.id, exc)
        self._store_run(self.browser)
        self.recording = self.recorder = None  # stored: the close below must not store them again
        record = None
        if keep_seconds > 0:
            try:
                record = parking.record_of(self.browser, getattr(self, "egress", None))
            except Exception as exc:  # the browser does not answer: it is closed, the snapshot stays
                log.warning("task %s: the browser cannot be kept at the pause: %s", self.task.id, exc)
        refused = None
        if record is not None:
            with parking.admission(self.config, self.task.api_key_id) as refused:
                if not refused and self.download_guard is not None:  # no task watches a parked browser
                    self.download_guard.cancel_running("cancelled at the pause: no download runs while the browser "
                                                       "is kept")
                if not refused:
                    self.browser.detach()
                    parking.park(self.config, self.task.id, record, keep_seconds, self.task.api_key_id)
        if record is None or refused:
            if refused:  # as after the keep time: the answer resumes from the snapshot
                log.info("task %s: its browser is not kept at the pause: %s", self.task.id, refused)
            self.close()
            return snapshot, False
        self.egress = None  # it stays with the parked browser
        self.close()  # the live view's publication and the task's empty downloads folder; the browser is detached
        return snapshot, True

    def close(self):
        try:
            self._save_profile()
        finally:
            self.profile = None
            self._close()

    def _close(self):
        try:
            super().close()
        finally:
            if self.download_guard is not None:
                self.download_guard.close()
            egress = getattr(self, "egress", None)
            if egress is not None:
                egress.stop()
            try:  # a task that downloaded nothing leaves no empty folder behind
                os.rmdir(self.download_dir)
            except (AttributeError, OSError):
                pass

    def downloads_folder(self, browser=None):
        browser = browser or self.browser
        pooled = getattr(browser, "pooled", None)
        if pooled is not None:
            return pooled.downloads
        # A cold start's sandbox saves into the task's folder itself; a Grid node's downloads stay on the node.
        return None if getattr(browser, "remote_url", None) else self.download_dir

    def keep_downloads(self):
        """The closed browser's downloads are in the task's folder, the service's alone (workers/browser): they
        become files of the key, and the folder goes (the database keeps them, FILE_TTL_SECONDS)."""
        folder = getattr(self, "download_dir", None)
        cut = self.download_guard.cut if self.download_guard is not None else []
        if not folder or not os.path.isdir(folder):
            return cut
        names = sorted(name for name in os.listdir(folder) if not being_written(name))
        try:
            return files.keep_downloads(self.task.api_key_id, folder, names, task_id=self.task.id) + cut
        finally:
            shutil.rmtree(folder, ignore_errors=True)


class ClientBrowserEnvironment(BrowserEnvironment):
    """`executionMode: "client"`: the caller's own window, driven by our extension through the window channel."""

    def start_browser(self, task, should_stop, config):
        from workers.browser.extension_driver import ExtensionBrowser

        # The user's own browser, but the agent's navigation follows the service's outbound policy.
        return ExtensionBrowser(task.browser_window_id, task.id, timeout=config["WINDOW_COMMAND_TIMEOUT_SECONDS"],
                                check_url=task_policy(task, config).check_url,
                                should_stop=should_stop).begin(task.prompt)

    def _failed(self, exc):
        if isinstance(exc, BrowserUnavailable):  # the user closed the tab or window: no later step can work
            raise Finish(Outcome("error", str(exc))) from None
        return super()._failed(exc)

    def url(self):
        try:
            return super().url()
        except BrowserError:
            return ""

    def store_gif(self):
        super().store_gif()
        data = self.recorder.gif()
        if data:
            try:
                self.browser.save_gif(data)  # also into the user's Downloads/remote-dispatch/
            except BrowserError:
                log.warning("task %s: the extension could not save the GIF", self.task.id, exc_info=True)


class KeptSessionEnvironment(BrowserEnvironment):
    """`cloudBrowserSessionId`: the session's kept browser, one task at a time; it stays open after the task."""

    POLL_SECONDS = 0.25

    def start_browser(self, task, should_stop, config):
        from workers.browser.kept_session import BrowserGone, KeptSessionBrowser

        deadline = time.monotonic() + config["TASK_TIMEOUT_SECONDS"]
        try:
            while (session := sessions.acquire(task.cloud_session_id, task.id)) is None:
                if should_stop() or time.monotonic() > deadline:  # another task of the session holds it
                    raise BrowserUnavailable("The cloud browser session stayed busy with another task.")
                time.sleep(self.POLL_SECONDS)
        except ApiError as exc:
            raise BrowserUnavailable(exc.message) from None
        self.session_id = session.id
        self.session_downloads = None if session.host == "grid" else browsers.downloads_dir(config, session.id)
        if self.session_downloads is not None:  # what the session downloaded before this task is the session's
            try:
                sessions.keep_downloads(session.api_key_id, session.id)
            except Exception:  # the task runs all the same
                log.warning("cloud session %s: its downloads could not be kept", session.id, exc_info=True)
                db.session.rollback()
        # The session's own egress proxy (app/sessions/browsers.py) checks its browser's connections; its
        # refusal log, read here, puts what it refused during each step into the trace. Never stopped here.
        self.egress = EgressProxy(config, directory=browsers.egress_dir(config, session.id))
        self.egress.new_refusals()  # earlier tasks' refusals are not this task's
        self.egress.fence((task.options or {}).get("allowedDomains"))  # this task's, or none
        try:
            return KeptSessionBrowser(
                webdriver_url=session.webdriver_url, webdriver_session=session.webdriver_session,
                label=session.name or session.id, remote=session.host == "grid",
                uploads=None if session.host == "grid" else browsers.session_dir(config, session.id) / "uploads",
                live_endpoint=live_state.session_endpoint(session), page_load_timeout=config["BROWSER_PAGE_LOAD_TIMEOUT_SECONDS"], should_stop=should_stop,
                chromium_path=config["CHROMIUM_PATH"], settings=session.browser_settings)
        except BrowserGone:
            sessions.release(session.id, task.id)
            if session.host == socket.gethostname():  # its browser died here: the session cannot serve again
                sessions.end(session.id, "error")
            raise
        except BrowserUnavailable:
            sessions.release(session.id, task.id)
            raise

    def execute(self, action):
        import urllib3

        from workers.browser.kept_session import UNREACHABLE

        try:
            return super().execute(action)
        except urllib3.exceptions.HTTPError:  # its WebDriver endpoint went away mid-task: no later step can work
            raise Finish(Outcome("error", UNREACHABLE)) from None

    def url(self):
        import urllib3

        try:
            return super().url()
        except urllib3.exceptions.HTTPError:  # gone (a stop, its machine): the run's last trace entry has no URL
            return ""
    def downloads_folder(self):
        return getattr(self, "session_downloads", None)

    def keep_downloads(self):
        """What the session's browser downloaded during the task: files of the key, and of the task. They stay
        in the session's downloads listing too."""
        if getattr(self, "session_downloads", None) is None:
            return []
        return sessions.keep_downloads(self.task.api_key_id, self.session_id, task_id=self.task.id)

    def close(self):
        try:
            super().close()
        finally:
            if getattr(self, "session_id", None):
                # The fence stays until the session's next task sets its own (or none): a request a fenced task's
                # page makes after the task ended (Chromium fetches a favicon late) is still that task's.
                sessions.release(self.session_id, self.task.id)
