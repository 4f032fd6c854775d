"""The task console in a real headless Chromium (Selenium), against a live gunicorn and a worker.

Screenshots of every main page at 1280 and 390 px land in var/screenshots/ (test artifacts)."""
import io
import itertools
import json
import os
import re
from datetime import timedelta
from pathlib import Path

import pytest
import requests
from selenium import webdriver
from selenium.common.exceptions import (NoAlertPresentException, NoSuchElementException,
                                        StaleElementReferenceException, WebDriverException)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from app import lifecycle
from app.sandbox.box import unprivileged_chromedriver
from app import task_queries
from app.dispatch import service as dispatch_service
from tests.conftest import ROOT, WorkerProcess, make_key
from tests.processes import WebProcess

pytestmark = pytest.mark.slow
SHOTS = Path(os.environ.get("SCREENSHOT_DIR", ROOT / "var" / "screenshots"))
CLOUD = {"executionMode": "cloud"}
MANY_WAITS = "\n".join(f"wait 0.{n:02d}5" for n in range(10, 60)) + "\nanswer should never happen"
EVIL = '<script>window.__xss = 1</script>"><img src=x onerror="window.__xss = 2">'


@pytest.fixture(scope="module")
def live(app, webhook_ca):
    """gunicorn + one worker (every queue, trusting the test webhook CA)."""
    env = {"WEBHOOK_CA_BUNDLE": webhook_ca[1]}
    worker = WorkerProcess(name="console", env=env)
    web = WebProcess(env=env)
    yield web
    web.stop()
    worker.stop()


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,900", "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(unprivileged_chromedriver()), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


@pytest.fixture
def key():
    return make_key("alice")


def wait_for(driver, condition, what, timeout=30):
    """`condition` may read a page that is being replaced (a form post): those reads are retried. An element
    found in the old document and read after the new one arrived is stale, or, to Chromium, "Node with given id
    does not belong to the document" (a plain WebDriverException)."""
    return WebDriverWait(driver, timeout, poll_frequency=0.1,
                         ignored_exceptions=(StaleElementReferenceException, NoSuchElementException,
                                             WebDriverException)).until(
        lambda d: condition(d), message=f"timed out waiting for {what}")


def text_of(driver, css):
    return driver.find_element(By.CSS_SELECTOR, css).text


def sign_in(driver, live, key):
    driver.delete_all_cookies()
    driver.get(live.base + "/console/")
    wait_for(driver, lambda d: "/console/signin" in d.current_url, "the sign-in page")
    driver.find_element(By.ID, "api_key").send_keys(key)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    wait_for(driver, lambda d: d.current_url.split("?")[0].endswith("/console/tasks"), "the tasks page")


def screenshot(driver, name):
    """The page at 1280 and at 390 px wide, full height; back to 1280 afterwards."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    for width in (1280, 390):
        driver.set_window_size(width, 900)
        driver.execute_script("document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)")
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(width, min(max(height + 200, 700), 5000))
        driver.save_screenshot(str(SHOTS / f"{name}-{width}.png"))
        overflow = driver.execute_script(
            "return document.documentElement.scrollWidth - document.documentElement.clientWidth")
        assert overflow <= 1, f"{name} scrolls sideways at {width} px"
    driver.set_window_size(1280, 900)


def mark_page(driver):
    """A flag that survives only as long as this page is not reloaded."""
    driver.execute_script("window.__sameDocument = true")


def same_document(driver):
    return driver.execute_script("return window.__sameDocument === true")


def status_text(driver, scope="#task-status"):
    return text_of(driver, f"{scope} .status-text")


@pytest.fixture
def unpublished(monkeypatch):
    """Tasks submitted by the test itself stay queued: no worker takes them, the test finishes them."""
    monkeypatch.setattr(dispatch_service, "dispatch", lambda task_id, **_: True)


def submit_hidden(app_key, prompt, **fields):
    return dispatch_service.submit(app_key.id, {"prompt": prompt, **CLOUD, **fields})[0]


def key_row(raw):
    from sqlalchemy import select

    from app.crypto import hash_key
    from app.extensions import db
    from app.models import ApiKey

    return db.session.execute(select(ApiKey).where(ApiKey.key_hash == hash_key(raw))).scalar_one()


def test_sign_in_start_a_task_from_the_form_and_watch_it_succeed(live, browser, key):
    sign_in(browser, live, key)
    assert "No tasks" in text_of(browser, "main")
    screenshot(browser, "tasks-empty")
    browser.find_element(By.LINK_TEXT, "New task").click()
    browser.find_element(By.ID, "prompt").send_keys('wait 0.4\nwait 0.6\nwait 0.8\nanswer {"city": "Paris", "n": 3}')
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "n": {"type": "integer"}},
              "required": ["city", "n"]}
    area = browser.find_element(By.ID, "responseFormat")
    area.send_keys('{"type": "object", "required": 5}')
    browser.find_element(By.ID, "check-schema").click()
    wait_for(browser, lambda d: "Not a valid schema" in text_of(d, "#schema-status"), "the schema check")
    area.clear()
    area.send_keys(json.dumps(schema))
    browser.find_element(By.ID, "secret_name_0").send_keys("pin")
    browser.find_element(By.ID, "secret_value_0").send_keys("s3cret-1234")
    screenshot(browser, "new-task")
    browser.find_element(By.CSS_SELECTOR, "#new-task-form button.primary").click()
    wait_for(browser, lambda d: "/console/tasks/" in d.current_url and "new" not in d.current_url, "the task page")

    mark_page(browser)
    wait_for(browser, lambda d: status_text(d) == "Succeeded", "the task to succeed")
    assert same_document(browser), "the page reloaded"
    assert [li.text.splitlines()[0] for li in browser.find_elements(By.CSS_SELECTOR, "#timeline li")][:3] == [
        "wait 0.4 s", "wait 0.6 s", "wait 0.8 s"] or len(browser.find_elements(By.CSS_SELECTOR, "#timeline li")) >= 4
    assert json.loads(text_of(browser, "#output")) == {"city": "Paris", "n": 3}
    assert "Matches the response schema" in text_of(browser, "#output-check")
    assert text_of(browser, "#actions") != "0"
    assert "s3cret-1234" not in browser.page_source
    screenshot(browser, "task-success")

    first = browser.current_url
    browser.find_element(By.XPATH, "//button[normalize-space()='Run again']").click()
    wait_for(browser, lambda d: d.current_url != first and "Started again" in text_of(d, "main"), "the new task")
    wait_for(browser, lambda d: status_text(d) == "Succeeded", "the new task to succeed")
    assert json.loads(text_of(browser, "#output")) == {"city": "Paris", "n": 3}

    browser.find_element(By.LINK_TEXT, "Tasks").click()
    assert len(browser.find_elements(By.CSS_SELECTOR, "table.tasks tbody tr")) == 2
    assert "Succeeded" in text_of(browser, "table.tasks")
    browser.get(live.base + "/console/no-such-page")
    assert "404" in text_of(browser, "h1")


def test_tasks_list_follows_running_tasks_filters_and_pages(live, browser, key, unpublished):
    owner = key_row(key)
    for n in range(22):
        request_id = submit_hidden(owner, f"answer old task {n}")
        lifecycle.finish(request_id, "success", lifecycle.failure_response(f"old {n}"), {"actions": 1, "credits": 1.0})
    sign_in(browser, live, key)
    running = api_submit(live, key, "wait 0.5\nwait 0.7\nwait 0.9\nanswer listed")
    browser.get(live.base + "/console/tasks")
    mark_page(browser)
    row = f"tr[data-task-id='{running}']"
    wait_for(browser, lambda d: "Succeeded" in text_of(d, row + " .cell-status"), "the row to finish")
    assert same_document(browser)
    assert text_of(browser, row + " .cell-actions") == "3"  # the answer is not an action
    browser.find_element(By.LINK_TEXT, "Older tasks").click()
    assert len(browser.find_elements(By.CSS_SELECTOR, "table.tasks tbody tr")) == 3
    browser.get(live.base + "/console/tasks?q=old+task+1&status=success&mode=cloud")
    prompts = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "td.prompt")]
    assert prompts and all("old task 1" in p for p in prompts)
    browser.get(live.base + "/console/tasks?q=100%25")
    assert "No tasks match" in text_of(browser, "main")
    browser.get(live.base + "/console/tasks")
    screenshot(browser, "tasks")


def test_answer_an_input_required_task(live, browser, key):
    sign_in(browser, live, key)
    request_id = api_submit(live, key, "ask Which colour do you want?\nanswer thanks")
    browser.get(f"{live.base}/console/tasks/{request_id}")
    wait_for(browser, lambda d: status_text(d) == "Needs input", "the question")
    assert text_of(browser, "#question") == "Which colour do you want?"
    screenshot(browser, "task-input-required")
    browser.find_element(By.ID, "answer").send_keys("blue")
    browser.find_element(By.CSS_SELECTOR, "#answer-box button").click()
    wait_for(browser, lambda d: "Answer sent" in text_of(d, "main"), "the answer to be sent")
    wait_for(browser, lambda d: status_text(d) == "Succeeded", "the task to finish")
    assert text_of(browser, "#output") == "thanks"
    assert not browser.find_element(By.ID, "answer-box").is_displayed()


def test_cancel_a_running_task(live, browser, key):
    sign_in(browser, live, key)
    request_id = api_submit(live, key, MANY_WAITS)
    browser.get(f"{live.base}/console/tasks/{request_id}")
    wait_for(browser, lambda d: int(text_of(d, "#actions") or 0) >= 1, "the task to run")
    screenshot(browser, "task-running")
    browser.find_element(By.CSS_SELECTOR, "#cancel-form button").click()
    wait_for(browser, lambda d: status_text(d) == "Cancelled", "the task to end")
    assert text_of(browser, "#output") == "cancelled"
    assert not browser.find_element(By.ID, "cancel-form").is_displayed()
    assert "should never happen" not in text_of(browser, "#timeline")


def test_redeliver_a_webhook(live, browser, key, receiver):
    sign_in(browser, live, key)
    request_id = api_submit(live, key, "answer hooked", callbackUrl=receiver.url)
    [first] = receiver.wait_for(1)
    browser.get(f"{live.base}/console/tasks/{request_id}")
    wait_for(browser, lambda d: "delivered" in text_of(d, "#deliveries"), "the delivery")
    screenshot(browser, "task-webhook")
    browser.find_element(By.CSS_SELECTOR, "#deliveries button").click()
    wait_for(browser, lambda d: "queued for redelivery" in text_of(d, "main"), "the redelivery")
    second = receiver.wait_for(2)[1]
    assert second.header("webhook-id") == first.header("webhook-id") and second.body == first.body
    wait_for(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#deliveries tbody tr")) == 2, "two attempts")
    assert "HTTP 200" in text_of(browser, "#deliveries")


def test_sign_out(live, browser, key):
    sign_in(browser, live, key)
    browser.find_element(By.CSS_SELECTOR, ".signout button").click()
    wait_for(browser, lambda d: "/console/signin" in d.current_url, "the sign-in page")
    assert "You are signed out" in text_of(browser, "main")
    screenshot(browser, "signin")
    browser.get(live.base + "/console/tasks")
    assert "/console/signin" in browser.current_url
    browser.get(live.base + "/console/windows")
    assert "/console/signin" in browser.current_url


def test_sign_out_ends_the_session_server_side(client, key):
    """A copy of the cookie kept from before sign-out (another tab, a stolen cookie) no longer signs in."""
    def token(path):
        return re.search(r'name="csrf_token" value="([^"]+)"', client.get(path).get_data(as_text=True))[1]

    signed = client.post("/console/signin", data={"api_key": key, "csrf_token": token("/console/signin")})
    assert signed.status_code == 302 and signed.headers["Location"].endswith("/console/tasks")
    kept = client.get_cookie("rd_console", path="/console").value
    assert client.get("/console/tasks").status_code == 200
    assert client.post("/console/signout", data={"csrf_token": token("/console/tasks")}).status_code == 302
    client.set_cookie("rd_console", kept, path="/console")
    again = client.get("/console/tasks")
    assert again.status_code == 302 and "/console/signin" in again.headers["Location"]
    assert client.get("/console/tasks/progress.json").status_code == 401


def test_another_keys_task_is_a_404_page(live, browser, key):
    other = make_key("bob")
    foreign = api_submit(live, other, "answer mine")
    sign_in(browser, live, key)
    browser.get(f"{live.base}/console/tasks/{foreign}")
    assert "404" in text_of(browser, "h1")
    assert "mine" not in browser.page_source
    screenshot(browser, "not-found")
    for suffix in ("state.json", "gif"):
        browser.get(f"{live.base}/console/tasks/{foreign}/{suffix}")
        assert "Request Not Found" in browser.page_source


def test_markup_in_prompt_and_output_is_shown_as_text(live, browser, key):
    sign_in(browser, live, key)
    request_id = api_submit(live, key, f"wait 0.3\nanswer {EVIL}")
    browser.get(f"{live.base}/console/tasks/{request_id}")
    wait_for(browser, lambda d: status_text(d) == "Succeeded", "the task to finish")  # output added live
    browser.get(f"{live.base}/console/tasks/{request_id}")  # and rendered by the server
    for page in (f"/console/tasks/{request_id}", "/console/tasks"):
        browser.get(live.base + page)
        assert EVIL in browser.find_element(By.TAG_NAME, "main").text
        assert browser.execute_script("return window.__xss") is None
        with pytest.raises(NoAlertPresentException):
            browser.switch_to.alert.text  # noqa: B018
    assert text_of(browser, "td.prompt").startswith("wait 0.3 answer <script>")
    # The form re-shown after an error keeps the prompt as text too.
    browser.get(live.base + "/console/tasks/new")
    browser.find_element(By.ID, "prompt").send_keys(EVIL)
    browser.find_element(By.ID, "executionMode").send_keys("client")
    browser.find_element(By.CSS_SELECTOR, "#new-task-form button.primary").click()
    wait_for(browser, lambda d: "browserWindowId" in text_of(d, "main"), "the form error")
    assert browser.find_element(By.ID, "prompt").get_attribute("value") == EVIL
    assert browser.execute_script("return window.__xss") is None


def test_a_form_post_without_the_csrf_token_is_refused(live, key):
    http = requests.Session()
    page = http.get(live.base + "/console/signin").text
    token = re.search(r'name="csrf_token" value="([^"]+)"', page)[1]
    assert http.post(live.base + "/console/signin", data={"api_key": key}).status_code == 403
    signed = http.post(live.base + "/console/signin", data={"api_key": key, "csrf_token": token})
    assert signed.ok and signed.url.endswith("/console/tasks")
    cookie = next(c for c in http.cookies if c.name == "rd_console")
    assert cookie.has_nonstandard_attr("HttpOnly") and key not in cookie.value
    refused = http.post(live.base + "/console/tasks/new", data={"prompt": "answer forged", "executionMode": "cloud"})
    assert refused.status_code == 403 and "security token" in refused.text
    forged = http.post(live.base + "/console/tasks/new",
                       data={"prompt": "answer forged", "executionMode": "cloud", "csrf_token": "x" * 43})
    assert forged.status_code == 403
    assert task_queries.task_page(key_row(key).id)["tasks"] == []
    # Behind an https proxy the cookie is Secure.
    via_proxy = requests.get(live.base + "/console/signin", headers={"X-Forwarded-Proto": "https"})
    assert "Secure" in via_proxy.headers["Set-Cookie"] and "SameSite=Lax" in via_proxy.headers["Set-Cookie"]


def test_a_browser_task_shows_its_timeline_and_gif(live, browser, key, unpublished):
    owner = key_row(key)
    request_id = submit_hidden(owner, "/Operator go to http://127.0.0.2/shop\nclick Buy", generateGif=True,
                               executionMode="cloud_browser")
    trace = [
        {"url": "http://127.0.0.2/shop", "action": "go to http://127.0.0.2/shop", "durationMs": 420,
         "startTs": "2026-01-01T00:00:00.000Z", "endTs": "2026-01-01T00:00:00.420Z"},
        {"url": "http://127.0.0.2/shop", "action": "click 'Buy'", "durationMs": 1530, "failed": True,
         "error": "element 'Buy' not found", "startTs": "2026-01-01T00:00:00.500Z", "endTs": "2026-01-01T00:00:02.030Z"},
        {"url": "http://127.0.0.2/shop", "action": "error: element 'Buy' not found", "durationMs": 0,
         "startTs": "2026-01-01T00:00:02.100Z", "endTs": "2026-01-01T00:00:02.100Z"},
    ]
    lifecycle.finish(request_id, "error", lifecycle.failure_response("element 'Buy' not found"),
                     {"actions": 2, "credits": 2.0}, trace=trace)
    dispatch_service.store_gif(request_id, _tiny_gif())
    sign_in(browser, live, key)
    browser.get(f"{live.base}/console/tasks/{request_id}")
    steps = browser.find_elements(By.CSS_SELECTOR, "#timeline li")
    assert len(steps) == 3
    assert "http://127.0.0.2/shop" in steps[0].text and "420 ms" in steps[0].text
    assert "Failed:" in steps[1].text and "1.5 s" in steps[1].text and "failed" in steps[1].get_attribute("class")
    assert "Reason: element 'Buy' not found" in steps[1].text
    assert steps[2].text.startswith("Failed: element 'Buy' not found")
    assert "Failed:" not in steps[0].text
    wait_for(browser, lambda d: d.execute_script(
        "const i = document.getElementById('gif'); return i && i.complete && i.naturalWidth > 0"), "the GIF")
    screenshot(browser, "task-browser")


def test_a_task_waiting_for_a_code_says_so_and_its_timeline_shows_how_long_it_waited(live, browser, key, unpublished):
    from app.codes.service import waiting_for
    from app.models import clock

    owner = key_row(key)
    to = "ada@example.test"
    request_id = submit_hidden(owner, "/Operator go to http://127.0.0.2/sign-in\ntype ${code:%s} into Code" % to,
                               executionMode="cloud_browser")
    opened = {"url": "http://127.0.0.2/sign-in", "action": "go to http://127.0.0.2/sign-in", "durationMs": 420,
              "startTs": "2026-01-01T00:00:00.000Z", "endTs": "2026-01-01T00:00:00.420Z"}
    since = clock()
    question, hitl = waiting_for("code", to, since, since.replace(microsecond=0) + timedelta(seconds=300))
    lifecycle.finish(request_id, "input-required", {"output": {"type": "text", "content": question},
                                                    "text": question, "actionTrace": [opened]},
                     {"actions": 1, "credits": 1.0}, trace=[opened], hitl=hitl)
    sign_in(browser, live, key)
    browser.get(f"{live.base}/console/tasks/{request_id}")
    assert status_text(browser) == "Waiting for a code"
    assert text_of(browser, "#output").startswith(f"Waiting for a one-time code sent to {to} (until ")
    assert not browser.find_element(By.ID, "answer-box").is_displayed()  # no one is asked anything
    mark_page(browser)
    typed = {"url": "http://127.0.0.2/sign-in", "action": "type ${code:%s} into \"Code\"" % to,
             "waited": f"waited 41 s for a code to {to}", "durationMs": 300,
             "startTs": "2026-01-01T00:00:41.500Z", "endTs": "2026-01-01T00:00:41.800Z"}
    lifecycle.finish(request_id, "success", {"output": {"type": "text", "content": "Signed in"}, "text": "Signed in",
                                             "actionTrace": [opened, typed]},
                     {"actions": 2, "credits": 2.0}, trace=[opened, typed])
    wait_for(browser, lambda d: status_text(d) == "Succeeded", "the task to go on and finish")
    assert same_document(browser)  # the live update drew the timeline
    steps = browser.find_elements(By.CSS_SELECTOR, "#timeline li")
    assert f"Waited 41 s for a code to {to}" in steps[1].find_element(By.CSS_SELECTOR, ".step-waited").text
    screenshot(browser, "task-code-waited")
    browser.refresh()  # and the page as the server draws it
    steps = browser.find_elements(By.CSS_SELECTOR, "#timeline li")
    assert steps[1].find_element(By.CSS_SELECTOR, ".step-waited").text == f"Waited 41 s for a code to {to}"
    assert not steps[0].find_elements(By.CSS_SELECTOR, ".step-waited")


def test_windows_page_and_window_picker(live, browser, key, unpublished):
    from sqlalchemy import update

    from app.extensions import db
    from app.models import BrowserWindow, now_plus

    owner = key_row(key)
    db.session.add_all([BrowserWindow(id="win-laptop", api_key_id=owner.id, label="Work laptop"),
                        BrowserWindow(id="win-desktop", api_key_id=owner.id, label="Old desktop")])
    db.session.commit()
    db.session.execute(update(BrowserWindow).where(BrowserWindow.id == "win-desktop")
                       .values(last_seen_at=now_plus(-86400)))
    db.session.commit()
    submit_hidden(owner, "/Operator answer from the laptop", executionMode="client", browserWindowId="win-laptop")
    sign_in(browser, live, key)
    browser.find_element(By.LINK_TEXT, "Windows").click()
    assert "Browser windows" in text_of(browser, "h1")
    laptop, desktop = (browser.find_element(By.XPATH, f"//section[.//h2[contains(., '{name}')]]")
                       for name in ("Work laptop", "Old desktop"))
    assert "Online" in laptop.text and "answer from the laptop" in laptop.text
    assert "Offline" in desktop.text
    screenshot(browser, "windows")
    browser.get(live.base + "/console/tasks/new")
    options = [o.text for o in browser.find_elements(By.CSS_SELECTOR, "#browserWindowId option")]
    assert options == ["None", "Work laptop (online)"]


def test_schedules_page_shows_next_runs_and_last_results_and_pauses(live, browser, key, unpublished):
    from datetime import datetime, timezone

    from app.schedules import service as schedules
    from workers import sweeps

    owner = key_row(key)
    start = datetime(2030, 1, 1, tzinfo=timezone.utc)
    daily = schedules.create(owner.id, {"name": "Invoices at 7", "cron": "0 7 * * 1-5", "timeZone": "Europe/Oslo",
                                        "task": {"prompt": "answer invoices fetched", **CLOUD}, "overlap": "skip",
                                        "catchUp": "once"}, cap=10, now=start)["scheduleId"]
    sweeps.fire_schedules(datetime(2030, 1, 1, 6, 0, 5, tzinfo=timezone.utc))  # 07:00 in Oslo
    run = schedules.last_run(daily)["requestId"]
    assert lifecycle.finish(run, "success", {"output": {"type": "text", "content": "12 invoices"}, "text": "12 invoices",
                                             "actionTrace": [], "structuredOutput": None}, None)
    sign_in(browser, live, key)
    browser.find_element(By.LINK_TEXT, "Schedules").click()
    card = browser.find_element(By.ID, f"schedule-{daily}")
    assert "Invoices at 7" in card.text and "0 7 * * 1-5" in card.text and "Europe/Oslo" in card.text
    next_runs = card.find_element(By.CSS_SELECTOR, "[data-next-runs]").text.splitlines()
    assert len(next_runs) == 3 and all(line.endswith("06:00:00 UTC") for line in next_runs)
    last = card.find_element(By.CSS_SELECTOR, "[data-last-run]").text
    assert "2030-01-01 06:00:00 UTC" in last and "success" in last and "12 invoices" in last
    screenshot(browser, "schedules")
    card.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_for(browser, lambda d: "Paused" in text_of(d, f"#schedule-{daily} [data-schedule-status]"), "paused")
    assert "Paused in the console." in text_of(browser, f"#schedule-{daily}")
    assert text_of(browser, f"#schedule-{daily} [data-next-runs]") == "—"
    browser.find_element(By.CSS_SELECTOR, f"#schedule-{daily} button[type=submit]").click()
    wait_for(browser, lambda d: "Active" in text_of(d, f"#schedule-{daily} [data-schedule-status]"), "active again")
    other = make_key("mallory")
    sign_in(browser, live, other)
    browser.get(live.base + "/console/schedules")
    assert "Invoices at 7" not in text_of(browser, "main")


def api_submit(live, key, prompt, **fields):
    response = requests.post(live.base + "/fast/v2/remote-dispatch", headers={"x-api-key": key},
                             json={"prompt": prompt, **CLOUD, **fields}, timeout=10)
    assert response.status_code == 202, response.text
    return response.json()["requestId"]


def _tiny_gif():
    from PIL import Image

    frames = [Image.new("RGB", (80, 50), colour) for colour in ("white", "navy")]
    out = io.BytesIO()
    frames[0].save(out, format="GIF", save_all=True, append_images=frames[1:], duration=300, loop=0)
    return out.getvalue()


_SIGN_INS = itertools.count(2)


def _signed_in_client(client, key):
    # Each test is a person of their own: sign-in is limited per address (20 a minute), and this file signs in more
    # often than that.
    person = next(_SIGN_INS)
    client.environ_base["REMOTE_ADDR"] = f"127.0.{person // 250}.{person % 250 + 1}"
    page = client.get("/console/signin").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page)[1]
    response = client.post("/console/signin", data={"api_key": key, "csrf_token": token})
    assert response.status_code == 302
    return token


def test_revoking_the_key_ends_its_console_sessions(client, key):
    from sqlalchemy import update

    from app.extensions import db
    from app.models import ApiKey, now

    _signed_in_client(client, key)
    assert client.get("/console/tasks").status_code == 200
    db.session.execute(update(ApiKey).values(revoked_at=now()))
    db.session.commit()
    response = client.get("/console/tasks")
    assert response.status_code == 302 and "/console/signin" in response.headers["Location"]
    state = client.get("/console/tasks/anything/state.json")
    assert state.status_code == 401 and state.get_json()["error"] == "Unauthorized"


def test_sign_in_only_sends_people_back_into_the_console(client, key):
    def sign_in_to(target, raw=key):
        fresh = client.application.test_client()
        page = fresh.get("/console/signin").get_data(as_text=True)
        token = re.search(r'name="csrf_token" value="([^"]+)"', page)[1]
        return fresh.post("/console/signin", data={"api_key": raw, "csrf_token": token, "next": target})

    for target in ("https://evil.example/", "//evil.example/console/", "/fast/v2/remote-dispatch"):
        assert sign_in_to(target).headers["Location"] == "/console/tasks"
    assert sign_in_to("/console/windows").headers["Location"] == "/console/windows"
    wrong = sign_in_to("/console/tasks", raw="rd_not-a-key")
    assert wrong.status_code == 401 and "not valid" in wrong.get_data(as_text=True)


def test_a_bad_page_link_falls_back_to_the_newest_tasks(client, key):
    _signed_in_client(client, key)
    response = client.get("/console/tasks?cursor=not-a-cursor&status=bogus")
    assert response.status_code == 200 and "not valid any more" in response.get_data(as_text=True)


def test_the_new_task_form_takes_input_variables_and_allowed_domains(client, key, unpublished):
    from app.extensions import db
    from app.models import Task

    _signed_in_client(client, key)
    form = client.get("/console/tasks/new").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', form)[1]
    assert 'name="inputVariables"' in form and 'name="allowedDomains"' in form
    started = client.post("/console/tasks/new", data={
        "csrf_token": token, "prompt": "/Operator\ngo to http://127.0.0.1:8124/\ntype {{user}} into \"Name\"",
        "executionMode": "cloud_browser", "inputVariables": '{"user": "ada"}',
        "allowedDomains": "127.0.0.1:8124, *.example.com"})
    assert started.status_code == 303, started.get_data(as_text=True)[:2000]
    task = db.session.get(Task, started.headers["Location"].rsplit("/", 1)[1])
    assert task.options["inputVariables"] == {"user": "ada"}
    assert task.options["allowedDomains"] == ["127.0.0.1:8124", "*.example.com"]
    # "Edit and run again" brings them back; what the API refuses, the form says.
    again = client.get(f"/console/tasks/new?from={task.id}").get_data(as_text=True)
    assert "127.0.0.1:8124 *.example.com" in again and "&#34;user&#34;: &#34;ada&#34;" in again
    for fields, problem in (({"inputVariables": "[1]"}, "inputVariables: give a JSON object"),
                            ({"inputVariables": "{user"}, "inputVariables: not valid JSON"),
                            ({"allowedDomains": "http://x/"}, "allowedDomains")):
        refused = client.post("/console/tasks/new", data={"csrf_token": token, "prompt": "answer x",
                                                          "executionMode": "cloud", **fields})
        assert refused.status_code == 400 and problem in refused.get_data(as_text=True), fields
