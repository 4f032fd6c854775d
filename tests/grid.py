"""A real Selenium Grid 4 (standalone) on loopback for the Grid tests, driving Debian's chromedriver and Chromium."""
import json
import os

import pytest
import requests

from app.sandbox.box import unprivileged_chromedriver  # noqa: F401 (tests import it from here)
from tests.processes import ManagedProcess, free_port

CHROMEDRIVER = "/usr/bin/chromedriver"


def grid_argv(jar, port, max_sessions=2):
    # No Selenium Manager (it would download drivers) and no driver discovery: one explicit driver
    # configuration that runs Debian's chromedriver for "chrome" sessions.
    stereotype = json.dumps({"browserName": "chrome", "platformName": "linux"})
    return ["java", "-jar", jar, "standalone", "--host", "127.0.0.1", "--port", str(port),
            "--selenium-manager", "false", "--detect-drivers", "false",
            "--driver-configuration", "display-name=chromium", f"stereotype={stereotype}",
            f"webdriver-executable={unprivileged_chromedriver()}", f"max-sessions={max_sessions}"]


def grid_ready(url):
    try:
        return requests.get(f"{url}/status", timeout=2).json()["value"]["ready"] is True
    except (requests.RequestException, ValueError, KeyError):
        return False


class Grid(str):
    """The Grid's URL (for SELENIUM_REMOTE_URL), with its log."""

    process = None

    def output(self):
        return self.process.output()


@pytest.fixture(scope="session")
def selenium_grid():
    """A running Grid (its URL, a str). `make test` fetches the jar (make grid-jar)."""
    jar = os.environ.get("SELENIUM_SERVER_JAR", "")
    if not os.path.isfile(jar):
        pytest.fail(f"no Selenium server jar at {jar!r}: run the suite with `make test` (it runs `make grid-jar`)")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    grid = ManagedProcess(grid_argv(jar, port), "selenium-grid")
    grid.wait_until(lambda: grid_ready(url), timeout=120)
    url = Grid(url)
    url.process = grid
    yield url
    grid.stop()
