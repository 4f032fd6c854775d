"""How each browser mode gets its browser: a fresh Chromium (cloud_browser), the user's window (client), or a
kept cloud session (acquired for the task, released after it)."""
import os
import time

from app.egress.policy import Policy
from app.egress.proxy import EgressProxy
from app.errors import ApiError
from app.live import state as live_state
from app.sessions import browsers
from app.sessions import service as sessions

from .actions import Finish, Outcome
from .browsing import BrowserEnvironment, log

from workers.browser.base import BrowserError, BrowserUnavailable


def task_policy(task, config):
    """The outbound policy, fenced to the task's allowedDomains when it has them."""
    return Policy.from_config(config).narrowed((task.options or {}).get("allowedDomains"))


class CloudBrowserEnvironment(BrowserEnvironment):
    """`executionMode: "cloud_browser"`: a fresh Chromium per task (or a Grid session), closed with the task,
    behind an egress proxy of its own (workers/browser/egress.py) that is started and stopped with it. Fresh means
    never used: taken from the host's warm pool (workers/browser/pool.py) when one is ready, else started cold."""

    starts_blank = True

    def start_browser(self, task, should_stop, config):
        from workers.browser import pool
        from workers.browser.egress import HARDENING_ARGUMENTS, EgressProxy
        from workers.browser.selenium_driver import SeleniumBrowser, browsers_dir

        options = task.options or {}
        label = options.get("cloudBrowserSessionName") or f"task-{task.id}"
        self.download_dir = os.path.join(config["DOWNLOAD_DIR"], "remote-dispatch", task.id)
        while not pool.cold_reason(config) and (pooled := pool.claim(config)) is not None:
            # Started ahead, never used: the task's fence first, then the browser is its own.
            self.egress = EgressProxy(config, label, directory=pooled.egress_dir)
            self.egress.fence(options.get("allowedDomains"))
            self.egress.new_refusals()  # Chromium's own start-up requests are not the first step's
            try:
                return pool.PooledBrowser(
                    pooled, label=label, time_zone=options.get("timeZone") or pool.DEFAULT_ZONE,
                    download_dir=self.download_dir, should_stop=should_stop)
            except BrowserUnavailable:
                continue  # it died since it was checked (and is destroyed): the next one, or a cold start
            except BaseException:
                pool.destroy(pooled)
                raise
        width, height = pool.window_size(config)
        # Started first and waited for last: Chromium starts while the proxy does.
        self.egress = EgressProxy(config, label).start()
        self.egress.fence(options.get("allowedDomains"))
        browser = None
        try:
            browser = SeleniumBrowser(
                label=label,
                chromium_path=config.get("CHROMIUM_PATH", "/usr/bin/chromium"),
                chromedriver_path=config.get("CHROMEDRIVER_PATH", "/usr/bin/chromedriver"),
                remote_url=config.get("SELENIUM_REMOTE_URL"), proxy=self.egress.address,
                extra_arguments=HARDENING_ARGUMENTS,
                window_size=(width, height), locale=config.get("BROWSER_LOCALE", "en-US"),
                time_zone=options.get("timeZone") or pool.DEFAULT_ZONE,
                download_dir=self.download_dir,
                profile_root=browsers_dir(config["VAR_DIR"]),
                page_load_timeout=config.get("BROWSER_PAGE_LOAD_TIMEOUT_SECONDS", 30), devtools=True,
                should_stop=should_stop)
            self.egress.wait_ready()
            self.egress.new_refusals()  # Chromium's own start-up requests are not the first step's
            return browser
        except BaseException:
            if browser is not None:
                browser.close()
            self.egress.stop()
            raise

    def close(self):
        try:
            super().close()
        finally:
            egress = getattr(self, "egress", None)
            if egress is not None:
                egress.stop()
            try:  # a task that downloaded nothing leaves no empty folder behind
                os.rmdir(self.download_dir)
            except (AttributeError, OSError):
                pass


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
        from workers.browser.kept_session import KeptSessionBrowser

        deadline = time.monotonic() + config["TASK_TIMEOUT_SECONDS"]
        try:
            while (session := sessions.acquire(task.cloud_session_id, task.id)) is None:
                if should_stop() or time.monotonic() > deadline:  # another task of the session holds it
                    raise BrowserUnavailable("The cloud browser session stayed busy with another task.")
                time.sleep(self.POLL_SECONDS)
        except ApiError as exc:
            raise BrowserUnavailable(exc.message) from None
        self.session_id = session.id
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
                live_endpoint=live_state.session_endpoint(config, session), page_load_timeout=config.get("BROWSER_PAGE_LOAD_TIMEOUT_SECONDS", 30), should_stop=should_stop)
        except BrowserUnavailable:
            sessions.release(session.id, task.id)
            raise

    def close(self):
        try:
            super().close()
        finally:
            if getattr(self, "session_id", None):
                # The fence stays until the session's next task sets its own (or none): a request a fenced task's
                # page makes after the task ended (Chromium fetches a favicon late) is still that task's.
                sessions.release(self.session_id, self.task.id)
