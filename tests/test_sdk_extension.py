"""The official `narada` SDK, unchanged, in the caller's own window through our extension."""
import pytest

from tests.conftest import make_key
from tests.extension_support import browser, module_key, window, windows_of  # noqa: F401 (fixtures)
from tests.page_server import PageServer
from tests.sdk_support import LiveService, run_sdk
from tests.test_client_mode import close_other_tabs
from tests.test_cloud_browser import HOME, LOGIN, REPORT, SECRET, assert_secret_nowhere, builtin_steps
from tests.test_extension import PAGES as FORM_PAGES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def service(app):
    live = LiveService(env={"WINDOW_OFFLINE_SECONDS": "60"})
    yield live
    live.stop()


@pytest.fixture(scope="module")
def web(service):
    """The extension's configured service URL is the live service's gunicorn (its worker runs the tasks)."""
    return service.web


@pytest.fixture(scope="module")
def pages():
    server = PageServer({"/login": LOGIN, "/home": HOME, "/report": REPORT, **FORM_PAGES})
    yield server
    server.close()


def sdk(service, key, body):
    result = run_sdk(service, key, body)
    if not result.values:
        print(service.logs())
    return result


def test_agent_run_in_the_window_gets_the_result(service, browser, window, module_key, pages):
    steps = builtin_steps(pages).removeprefix("/Operator\n")  # the SDK adds the prefix of Agent's kind
    result = sdk(service, module_key, f'''
        from narada import Agent, AgentKind, RemoteBrowserEnvironment
        env = RemoteBrowserEnvironment(browser_window_id={window!r})
        response = await Agent(environment=env, kind=AgentKind.OPERATOR).run(
            {steps!r}, secret_variables={{"PASSWORD": {SECRET!r}}}, timeout=240)
        emit(status=response.status, text=response.text, request_id=response.request_id,
             actions=response.usage.actions)
    ''')
    value = result.value
    assert value["status"] == "success" and value["text"] == "42", value
    assert value["actions"] == 10
    body = service_poll(service, module_key, value["request_id"])
    assert body["browserWindowId"] == window and body["executionMode"] == "client"
    assert [e["action"] for e in body["response"]["actionTrace"][:3]] == [
        f"go to {pages.url('/login')}", 'type ada into "Username"', 'type ${PASSWORD} into "Password"']
    assert SECRET not in result.stdout + result.stderr
    assert_secret_nowhere(value["request_id"], body, service.worker.output())
    # The work happened in the user's own window: it shows the report the task opened.
    titles = []
    for handle in browser.driver.window_handles:
        browser.driver.switch_to.window(handle)
        titles.append(browser.driver.title)
    assert "Sales report" in titles
    close_other_tabs(browser)


def service_poll(service, key, request_id):
    import requests

    return requests.get(f"{service.api_base}/remote-dispatch/responses/{request_id}",
                        headers={"x-api-key": key}, timeout=30).json()


def test_every_direct_action_of_the_sdk_works_in_the_window(service, browser, window, module_key, pages):
    result = sdk(service, module_key, f'''
        import base64
        from narada import Agent, RemoteBrowserEnvironment
        agent = Agent(environment=RemoteBrowserEnvironment(browser_window_id={window!r}))
        out, js, select = {{}}, agent.execute_javascript_on_page, agent.agentic_selector
        out["go_to_url"] = await agent.go_to_url(url={pages.url("/form")!r})
        out["url"] = (await agent.get_url()).url
        shot = await agent.get_screenshot()
        out["screenshot"] = dict(png=base64.b64decode(shot.base64_content)[:8].hex(), mime=shot.mime_type,
                                 name=shot.name, timestamp=shot.timestamp)
        out["full_html"] = (await agent.get_full_html()).html
        out["simplified_html"] = (await agent.get_simplified_html()).html
        out["js"] = await agent.execute_javascript_on_page(code="document.title + ' ' + (1 + 1)")
        out["js_list"] = await agent.execute_javascript_on_page(code="return [location.pathname, 3]")
        await agent.agentic_selector(action={{"type": "fill", "value": "hello", "press_enter": False}},
                                     selectors={{"data_testid": "query"}}, fallback_operator_query="query")
        await agent.agentic_selector(action={{"type": "click"}},
                                     selectors={{"class_name": "btn primary", "tag_name": "button"}},
                                     fallback_operator_query="Go")
        out["text"] = (await agent.agentic_selector(action={{"type": "get_text"}}, selectors={{"id": "out"}},
                                                    fallback_operator_query="out")).value
        out["property"] = (await agent.agentic_selector(
            action={{"type": "get_property", "property_name": "value"}}, selectors={{"aria_label": "Query"}},
            fallback_operator_query="q")).value
        await agent.agentic_selector(action={{"type": "select_option_by_value", "value": "l"}},
                                     selectors={{"name": "size"}}, fallback_operator_query="size")
        out["selected_by_value"] = await js(code="document.getElementById('size').value")
        await select(action={{"type": "select_option_by_index", "value": 0}},
                     selectors={{"xpath": "//select[@id='size']"}}, fallback_operator_query="size")
        out["selected_by_index"] = await js(code="document.getElementById('size').value")
        out["by_text"] = (await select(action={{"type": "get_text"}},
                                       selectors={{"text_content": "Go", "tag_name": "button"}},
                                       fallback_operator_query="Go")).value
        out["appears"] = await agent.wait_for_element(selectors={{"class_name": "late"}}, state="visible",
                                                      timeout=5000)
        out["never"] = await agent.wait_for_element(selectors={{"id": "nothing"}}, state="visible",
                                                    timeout=500)
        await agent.agentic_selector(action={{"type": "fill", "value": "v1"}}, selectors={{"id": "k"}},
                                     fallback_operator_query="k")
        out["press_key"] = await agent.press_key(events=[{{"type": "press", "code": "Enter",
                                                           "key": "Enter"}}])
        out["after_enter"] = (await agent.get_url()).url
        out["print_message"] = await agent.print_message(message="hello from the SDK")
        await agent.go_to_url(url={pages.url("/other")!r}, new_tab=True)
        out["new_tab"] = [(await agent.get_url()).url,
                          await js(code="document.querySelector('h1').textContent")]
        out["close_tab"] = await agent.close_tab()
        out["after_close"] = (await agent.get_url()).url
        try:
            await agent.agentic_selector(action={{"type": "click"}}, selectors={{"id": "missing"}},
                                         fallback_operator_query="missing")
        except Exception as exc:
            out["missing"] = [type(exc).__name__, str(exc)]
        emit(**out)
    ''')
    value = result.value
    assert value["go_to_url"] is None and value["url"] == pages.url("/form")
    assert value["screenshot"]["png"] == b"\x89PNG\r\n\x1a\n".hex()
    assert value["screenshot"]["mime"] == "image/png"
    assert value["screenshot"]["name"] and value["screenshot"]["timestamp"]
    assert '<button id="go"' in value["full_html"] and "<title>Form</title>" in value["full_html"]
    assert "Go" in value["simplified_html"]
    assert value["js"] == "Form 2" and value["js_list"] == ["/form", 3]
    assert value["text"] == "clicked hello" and value["property"] == "hello" and value["by_text"] == "Go"
    assert value["selected_by_value"] == "l" and value["selected_by_index"] == "s"
    assert value["appears"] is True and value["never"] is False
    assert value["press_key"] is None and value["after_enter"] == pages.url("/echo?k=v1")
    assert value["print_message"] is None
    assert value["new_tab"] == [pages.url("/other"), "Other page"]
    assert value["close_tab"] is None and value["after_close"] == pages.url("/echo?k=v1")
    assert value["missing"][0] == "NaradaError" and "No element matches" in value["missing"][1]
    # The user's window really did all this: the tab the SDK closed is gone, the form's echo is shown.
    assert len(browser.driver.window_handles) == 1


def test_another_keys_window_is_a_clear_sdk_error(service, window, module_key):
    intruder = make_key("intruder", plan="dev")
    result = sdk(service, intruder, f'''
        from narada import Agent, RemoteBrowserEnvironment
        agent = Agent(environment=RemoteBrowserEnvironment(browser_window_id={window!r}))
        errors = {{}}
        try:
            await agent.get_url()
        except Exception as exc:
            errors["action"] = str(exc)
        try:
            await agent.run("go to http://127.0.0.1:9/\\nextract h1")
        except Exception as exc:
            errors["run"] = str(exc)
        emit(**errors)
    ''')
    for message in (result.value["action"], result.value["run"]):
        assert "404" in message and "is not available to this API key" in message, message
    # The owner's window is untouched and still online.
    assert [w["state"] for w in windows_of(service.base, module_key)] == ["online"]


def test_closing_the_environment_closes_its_window(service, browser, window, module_key, pages):
    """RemoteBrowserEnvironment.close() sends close_window: the window closes and leaves the key's list."""
    from tests.conftest import wait_until

    driver = browser.driver
    main = driver.current_window_handle
    driver.switch_to.new_window("window")
    second = wait_until(lambda: [w["browserWindowId"] for w in windows_of(service.base, module_key)
                                 if w["browserWindowId"] != window], what="the second window to register")[0]
    try:
        result = sdk(service, module_key, f'''
            from narada import Agent, RemoteBrowserEnvironment
            env = RemoteBrowserEnvironment(browser_window_id={second!r})
            agent = Agent(environment=env)
            await agent.go_to_url(url={pages.url("/other")!r})
            title = await agent.execute_javascript_on_page(code="document.title")
            await env.close()
            emit(title=title)
        ''')
        assert result.value == {"title": "Other"}
        wait_until(lambda: len(driver.window_handles) == 1, what="the window to close")
    finally:
        driver.switch_to.window(main)
    wait_until(lambda: [w["browserWindowId"] for w in windows_of(service.base, module_key)] == [window],
               what="the closed window to leave the list")
