"""The extension's pages, clicked like a user: options (connection states), the side panel (answer, Stop, SDK questions)."""
import json
import threading

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from tests.conftest import WorkerProcess, poll, submit, wait_for_status, wait_until
from tests.extension_support import action, browser, module_key, web, window  # noqa: F401 (fixtures)
from tests.page_server import PageServer
from tests.processes import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
SCREENSHOTS = None  # set RD_EXTENSION_SCREENSHOTS=<dir> to keep PNGs of the pages


@pytest.fixture(scope="module")
def pages():
    server = PageServer({
        "/login": "<html><head><title>Sign in</title></head><body><input aria-label='User'></body></html>",
        "/slow": "<html><head><title>Slow</title></head><body><p>Nothing comes.</p></body></html>"})
    yield server
    server.close()


@pytest.fixture
def client_worker(app):
    proc = WorkerProcess(queues="tasks", concurrency=1, name="client-ui")
    yield proc
    proc.stop()


def save(browser, name):
    import os

    folder = os.environ.get("RD_EXTENSION_SCREENSHOTS")
    if folder:
        os.makedirs(folder, exist_ok=True)
        browser.screenshot(os.path.join(folder, f"{name}.png"))


@pytest.fixture
def side_panel(browser, window):
    """The side panel page of the test's window, opened in a second browser window (as a tab it would become
    the window's active tab, the one tasks act in)."""
    driver = browser.driver
    main = driver.current_window_handle
    browser.page("options.html")
    chrome_id = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        chrome.storage.local.get("windows").then((s) => done(Object.entries(s.windows).find(([, id]) => id === arguments[0])[0]));
    """, window)
    driver.switch_to.new_window("window")
    panel = driver.current_window_handle
    browser.page(f"sidepanel.html?window={chrome_id}")
    WebDriverWait(driver, 20).until(EC.text_to_be_present_in_element((By.ID, "window-id"), window))
    yield panel
    driver.switch_to.window(panel)
    driver.close()
    driver.switch_to.window(main)


def test_options_page_shows_each_connection_state(browser, web, module_key):
    browser.configure(web.base, module_key)
    save(browser, "options-connected")
    assert browser.driver.find_element(By.CSS_SELECTOR, "#connection .state").text == "Connected"
    browser.configure_only(web.base, "rd_not-a-key")
    browser.wait_for_state("unauthorized")
    assert "401" in browser.driver.find_element(By.CSS_SELECTOR, "#connection .detail").text
    save(browser, "options-unauthorized")
    browser.configure_only(f"http://127.0.0.1:{free_port()}", module_key)  # nothing listens there
    browser.wait_for_state("reconnecting", timeout=20)
    browser.wait_for_state("unreachable", timeout=60)
    save(browser, "options-unreachable")
    browser.configure(web.base, module_key)


def test_popup_shows_the_window_id_and_copies_it(browser, window):
    browser.page("popup.html")
    driver = browser.driver
    WebDriverWait(driver, 20).until(EC.text_to_be_present_in_element((By.ID, "window-id"), window))
    assert driver.find_element(By.CSS_SELECTOR, "#connection .state").text == "Connected"
    save(browser, "popup")
    driver.find_element(By.ID, "copy").click()
    WebDriverWait(driver, 5).until(EC.text_to_be_present_in_element((By.ID, "copy"), "Copied"))


def test_side_panel_answers_a_question_and_shows_the_task(client, browser, window, side_panel, module_key, pages,
                                                          client_worker):
    driver = browser.driver
    request_id = submit(client, module_key, {
        "prompt": f"/Operator\ngo to {pages.url('/login')}\nask Which user should sign in?",
        "browserWindowId": window}).get_json()["requestId"]
    wait_for_status(client, module_key, request_id, statuses=("input-required", "error"), timeout=60)
    driver.switch_to.window(side_panel)
    WebDriverWait(driver, 20).until(EC.visibility_of_element_located((By.ID, "answer")))
    assert "Which user should sign in?" in driver.find_element(By.ID, "input-required").text
    assert driver.find_element(By.ID, "trace").text.startswith(f"go to {pages.url('/login')}")
    save(browser, "sidepanel-question")
    driver.find_element(By.ID, "answer").send_keys("ada")
    driver.find_element(By.ID, "send-answer").click()
    body = wait_for_status(client, module_key, request_id, timeout=60)
    assert body["status"] == "success" and body["response"]["text"] == "ada"
    WebDriverWait(driver, 20).until(EC.presence_of_element_located(
        (By.CSS_SELECTOR, f"#recent li[data-request-id='{request_id}'] .status-success")))
    save(browser, "sidepanel-recent")


def test_side_panel_stop_cancels_the_running_task(client, browser, window, side_panel, module_key, pages,
                                                  client_worker):
    driver = browser.driver
    request_id = submit(client, module_key, {
        "prompt": f"/Operator\ngo to {pages.url('/slow')}\nwait for \"never shown\"\nanswer done",
        "browserWindowId": window}).get_json()["requestId"]
    wait_until(lambda: (poll(client, module_key, request_id).get_json().get("progress") or {}).get("actionTrace"),
               what="the first action", timeout=60)
    driver.switch_to.window(side_panel)
    stop = WebDriverWait(driver, 20).until(EC.element_to_be_clickable((By.ID, "stop")))
    assert "elapsed" in driver.find_element(By.ID, "elapsed").text
    save(browser, "sidepanel-running")
    stop.click()
    body = wait_for_status(client, module_key, request_id, timeout=60)
    assert body["status"] == "error" and body["response"]["text"] == "cancelled"


def test_sdk_questions_and_messages_are_answered_in_the_side_panel(browser, window, side_panel, web, module_key):
    driver = browser.driver
    results = {}

    def ask(name, **args):
        results[name] = action(web.base, module_key, window, name, timeout=60, **args)

    assert action(web.base, module_key, window, "print_message", message="Reading the invoices").json()["status"] \
        == "success"
    thread = threading.Thread(target=ask, args=("user_approval",), kwargs={
        "prompt_message": "Send the invoice to ACME?", "approve_label": "Send it", "reject_label": "No"})
    thread.start()
    driver.switch_to.window(side_panel)
    approve = WebDriverWait(driver, 30).until(EC.element_to_be_clickable((By.CSS_SELECTOR, ".question .approve")))
    assert "Send the invoice to ACME?" in driver.find_element(By.CSS_SELECTOR, ".question").text
    assert approve.text == "Send it"
    assert "Reading the invoices" in driver.find_element(By.ID, "messages").text
    save(browser, "sidepanel-approval")
    approve.click()
    thread.join(60)
    assert json.loads(results["user_approval"].json()["data"]) == {"approved": True}

    thread = threading.Thread(target=ask, args=("prompt_for_user_input",), kwargs={
        "prompt_message": "Which invoice?", "step_id": "s1",
        "variables": [{"name": "number", "type": "string", "required": True},
                      {"name": "urgent", "type": "boolean", "required": False}]})
    thread.start()
    field = WebDriverWait(driver, 30).until(EC.element_to_be_clickable((By.CSS_SELECTOR, ".question input[name=number]")))
    field.send_keys("INV-7")
    driver.find_element(By.CSS_SELECTOR, ".question input[name=urgent]").click()
    driver.find_element(By.CSS_SELECTOR, ".question .submit").click()
    thread.join(60)
    assert json.loads(results["prompt_for_user_input"].json()["data"]) == {
        "values_by_name": {"number": "INV-7", "urgent": True}}

    thread = threading.Thread(target=ask, args=("user_approval",), kwargs={
        "prompt_message": "Delete it?", "approve_label": "Yes", "reject_label": "No"})
    thread.start()
    WebDriverWait(driver, 30).until(EC.element_to_be_clickable((By.CSS_SELECTOR, ".question .reject"))).click()
    thread.join(60)
    assert json.loads(results["user_approval"].json()["data"]) == {"approved": False}
