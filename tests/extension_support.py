"""Headless Chromium with the unpacked extension, configured through its options page against a real gunicorn."""
import base64
import hashlib
import json

import shutil
import tempfile
import time
from pathlib import Path

import pytest
import requests

from app.sandbox.box import browser_owned, unprivileged_chromedriver
from tests.processes import ROOT, WebProcess, free_port

EXTENSION_DIR = ROOT / "extension"


def extension_id():
    """Chromium derives an unpacked extension's id from the manifest's `key`: sha256 of it, in letters a-p."""
    key = json.loads((EXTENSION_DIR / "manifest.json").read_text())["key"]
    digest = hashlib.sha256(base64.b64decode(key)).hexdigest()[:32]
    return "".join(chr(ord("a") + int(c, 16)) for c in digest)


class ExtensionBrowser:
    """A Chromium of our own (its profile under a temporary directory we made) with the extension loaded (with
    `extension=False`, the same Chromium without it: what the extension adds to a page is the difference)."""

    def __init__(self, downloads=None, extension=True):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        # Chromium runs as the browsers' own user with its sandbox on (never as root, never --no-sandbox).
        self.profile = browser_owned(tempfile.mkdtemp(prefix="rd-ext-profile-"))
        self.downloads = browser_owned(downloads or tempfile.mkdtemp(prefix="rd-ext-downloads-"))
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        loaded = (f"--load-extension={EXTENSION_DIR}", f"--disable-extensions-except={EXTENSION_DIR}") if extension \
            else ("--disable-extensions",)
        for arg in ("--headless=new", *loaded, "--disable-gpu",
                    "--no-first-run", "--disable-background-networking", "--disable-component-update",
                    "--disable-sync", f"--user-data-dir={self.profile}", "--window-size=1200,900"):
            options.add_argument(arg)
        options.add_experimental_option("prefs", {"download.default_directory": self.downloads,
                                                  "download.prompt_for_download": False})
        self.driver = webdriver.Chrome(service=Service(unprivileged_chromedriver()), options=options)
        self.id = extension_id()
        self.base = f"chrome-extension://{self.id}"

    def page(self, name):
        self.driver.get(f"{self.base}/{name}")

    def configure(self, service_url, api_key):
        self.configure_only(service_url, api_key)
        self.wait_for_state("connected")

    def configure_only(self, service_url, api_key):
        """Fill in and save the options page, as a user would."""
        from selenium.webdriver.common.by import By

        self.page("options.html")
        url = self.driver.find_element(By.ID, "service-url")
        url.clear()
        url.send_keys(service_url)
        key = self.driver.find_element(By.ID, "api-key")
        key.clear()
        key.send_keys(api_key)
        self.driver.find_element(By.ID, "save").click()

    def connection_state(self):
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, "#connection .state").get_attribute("data-state")

    def wait_for_state(self, state, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.connection_state() == state:
                return
            time.sleep(0.2)
        raise AssertionError(f"the extension page shows {self.connection_state()!r}, not {state!r}")

    def stop_service_worker(self):
        """Stop the extension's service worker as Chromium does when it is idle (DevTools: ServiceWorker.stopWorker)."""
        self.driver.execute_cdp_cmd("ServiceWorker.enable", {})
        targets = self.driver.execute_cdp_cmd("Target.getTargets", {})["targetInfos"]
        worker = [t for t in targets if t["type"] == "service_worker" and self.id in t["url"]]
        assert worker, f"no service worker of the extension among {targets}"
        self.driver.execute_cdp_cmd("ServiceWorker.stopAllWorkers", {})
        deadline = time.monotonic() + 10
        while any(t["type"] == "service_worker" and self.id in t["url"]
                  for t in self.driver.execute_cdp_cmd("Target.getTargets", {})["targetInfos"]):
            assert time.monotonic() < deadline, "the extension's service worker did not stop"
            time.sleep(0.1)
        return worker[0]

    def screenshot(self, path):
        self.driver.save_screenshot(str(path))

    def quit(self):
        try:
            self.driver.quit()
        finally:
            shutil.rmtree(self.profile, ignore_errors=True)


def windows_of(base, api_key):
    return requests.get(f"{base}/fast/v2/browser-windows", headers={"x-api-key": api_key}, timeout=10).json()["windows"]


def wait_for_window(base, api_key, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        online = [w for w in windows_of(base, api_key) if w["state"] == "online"]
        if online:
            return online[0]["browserWindowId"]
        time.sleep(0.2)
    raise AssertionError("the extension's window never registered")


def action(base, api_key, window_id, name, timeout=None, **args):
    body = {"action": {"name": name, **args}, "actionExecutionId": f"action_{time.time_ns()}",
            "browserWindowId": window_id}
    if timeout is not None:
        body["timeout"] = timeout
    return requests.post(f"{base}/fast/v2/extension-actions", json=body, headers={"x-api-key": api_key}, timeout=320)




class RestartableWeb(WebProcess):
    """gunicorn on a port that stays the same across restarts (the extension's configured service URL)."""

    def __init__(self, env=None, port=None):
        self._env = env or {}
        self._fixed = port or free_port()
        super().__init__(env={**self._env, "PORT": str(self._fixed)})
        self.port, self.base = self._fixed, f"http://127.0.0.1:{self._fixed}"

    def _healthy(self):
        try:
            return requests.get(f"http://127.0.0.1:{self._fixed}/healthz", timeout=1).ok
        except requests.RequestException:
            return False

    def restart(self):
        """Stop gunicorn and start a new one on the same port, in place (the fixture keeps working)."""
        self.stop()
        self.__init__(self._env, self._fixed)


@pytest.fixture(scope="module")
def web(app):
    server = RestartableWeb(env={"WINDOW_OFFLINE_SECONDS": "60"})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def browser(web):
    chromium = ExtensionBrowser()
    yield chromium
    chromium.quit()


@pytest.fixture
def module_key():
    """Each test starts from empty tables: a new key, which the test configures through the options page."""
    from tests.conftest import make_key  # not at import: conftest points the environment at the test database

    return make_key("extension-user", plan="dev")


@pytest.fixture
def window(browser, web, module_key):
    browser.configure(web.base, module_key)
    return wait_for_window(web.base, module_key)
