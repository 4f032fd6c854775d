"""/docs renders Swagger UI from the service's own assets, in a real headless Chromium that has no
way out: every request that is not to loopback goes to a proxy that refuses connections."""
import re

import pytest
import requests
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from app.sandbox.box import unprivileged_chromedriver
from tests.processes import WebProcess

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def web(app):
    proc = WebProcess(env={"WEB_CONCURRENCY": "1", "WEB_THREADS": "16"})
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def offline_chromium():
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--disable-dev-shm-usage", "--disable-gpu",
                # No network: anything but loopback goes to a closed port.
                "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=127.0.0.1"):
        options.add_argument(arg)
    options.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(service=Service(unprivileged_chromedriver()), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def test_docs_page_refers_only_to_the_service_itself(web):
    page = requests.get(web.base + "/docs", timeout=10)
    assert page.status_code == 200
    assert not re.findall(r"(?:src|href)=\"(?:https?:)?//", page.text), page.text
    for asset in ("swagger-ui-bundle.js", "swagger-ui-standalone-preset.js", "swagger-ui.css"):
        assert requests.get(f"{web.base}/docs/assets/{asset}", timeout=10).status_code == 200


def test_swagger_ui_lists_the_operations_with_no_network(web, offline_chromium):
    offline_chromium.get(web.base + "/docs")
    WebDriverWait(offline_chromium, 30).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, ".opblock-summary-path"),
        "Swagger UI rendered no operations")
    paths = {e.get_attribute("data-path") or e.text for e in
             offline_chromium.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")}
    assert "/fast/v2/remote-dispatch" in paths
    assert "/fast/v2/remote-dispatch/responses/{request_id}" in paths
    assert "Remote Dispatch" in offline_chromium.find_element(By.CSS_SELECTOR, ".info .title").text
