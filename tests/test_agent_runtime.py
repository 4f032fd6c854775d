"""The agent runtime's parts, run in-process (no broker): budgets, redaction, page reading."""
import logging

import pytest

from app.crypto import seal
from app.extensions import db
from app.models import ApiKey, Task
from tests.conftest import poll
from workers import runner
from workers.agent import pages
from workers.agent.secrets import Secrets


def _task(api_key, prompt, mode="cloud", secrets=None, **options):
    key = db.session.query(ApiKey).filter_by(prefix=api_key[:10]).one()
    task = Task(api_key_id=key.id, status="pending", agent="web" if prompt.startswith("/Operator") else "general",
                execution_mode=mode, prompt=prompt, options=options, secrets_sealed=seal(secrets))
    db.session.add(task)
    db.session.commit()
    return task.id


@pytest.fixture
def config(app):
    saved = dict(app.config)
    yield app.config
    app.config.clear()
    app.config.update(saved)


def test_wall_clock_budget(client, api_key, config):
    config["TASK_TIMEOUT_SECONDS"] = 0.2
    task_id = _task(api_key, "wait 3600\nanswer too late")  # the wait ends at the limit
    runner.execute_task(task_id)
    body = poll(client, api_key, task_id).get_json()
    assert body["status"] == "error"
    assert body["response"]["text"] == "Time limit reached: the task ran longer than 0.2 s."
    assert body["usage"]["actions"] == 1


def test_the_last_allowed_step_may_still_answer(client, api_key, config):
    config["MAX_STEPS"] = 2
    task_id = _task(api_key, "wait 0\nwait 0\nanswer done")
    runner.execute_task(task_id)
    assert poll(client, api_key, task_id).get_json()["response"]["text"] == "done"
    task_id = _task(api_key, "wait 0\nwait 0\nwait 0\nanswer done")
    runner.execute_task(task_id)
    body = poll(client, api_key, task_id).get_json()
    assert body["status"] == "error"
    assert body["response"]["text"] == "Step limit reached: the task needed more than 2 actions."


def test_without_a_model_the_built_in_rules_judge_a_task_that_names_a_page(client, api_key, config):
    # Answered without acting on the page the task names: never a success (workers/agent/completion.py).
    task_id = _task(api_key, "/Operator\nanswer http://127.0.0.1:9/ says hello")
    runner.execute_task(task_id)
    body = poll(client, api_key, task_id).get_json()
    assert body["status"] == "error"
    assert body["response"]["text"] == ("The task was not done: No action was taken on the page, and the task asks "
                                        "for something on a page.")
    assert body["response"]["actionTrace"][-1]["check"] == {"done": False, "by": "rules", "tokens": 0,
                                                            "reason": body["response"]["text"][23:]}
    # A web task that names no page is not judged; a general one never is.
    for prompt in ("/Operator answer hi", "answer http://127.0.0.1:9/ says hello"):
        task_id = _task(api_key, prompt)
        runner.execute_task(task_id)
        body = poll(client, api_key, task_id).get_json()
        assert body["status"] == "success" and "check" not in body["response"]["actionTrace"][-1], body


def test_web_agent_without_its_browser_says_what_to_install(client, api_key, config):
    config["CHROMEDRIVER_PATH"] = "/nonexistent/chromedriver"
    task_id = _task(api_key, "/Operator go to https://example.com", mode="cloud_browser")
    runner.execute_task(task_id)
    body = poll(client, api_key, task_id).get_json()
    assert body["status"] == "error"
    assert body["response"]["text"] == (
        "No browser is installed for executionMode 'cloud_browser': chromedriver "
        "(CHROMEDRIVER_PATH=/nonexistent/chromedriver) not found. Install Debian's packages: "
        "`apt-get install chromium chromium-driver` (or `make browser`), or set SELENIUM_REMOTE_URL to a "
        "Selenium Grid.")


def test_unsafe_urls_are_refused_by_the_page_reader(client, api_key, config):
    config["ALLOW_PRIVATE_URLS"] = False
    task_id = _task(api_key, "/Operator go to http://127.0.0.1:9/admin")
    runner.execute_task(task_id)
    body = poll(client, api_key, task_id).get_json()
    assert body["status"] == "error"
    assert body["response"]["text"].startswith("Refused to open the page:")


def test_unparseable_prompt_names_the_model_settings(client, api_key):
    task_id = _task(api_key, "please book me a flight", secrets={"X": "y"})
    runner.execute_task(task_id)
    body = poll(client, api_key, task_id).get_json()
    assert body["status"] == "error" and "LLM_MODEL" in body["response"]["text"]
    assert db.session.get(Task, task_id).secrets_sealed is None


def test_logs_are_redacted_while_a_task_runs(caplog):
    secrets = Secrets({"PW": "hunter2", "PIN": "hunter"})
    logger = logging.getLogger("some.library")
    caplog.set_level(logging.INFO)
    with secrets.redacting_logs():
        logger.info("connecting with %s", "hunter2")
        try:
            raise RuntimeError("bad password hunter2")
        except RuntimeError:
            logger.exception("failed")
    logger.info("after: %s", "hunter2")  # the filter is gone once the task has run
    text = caplog.text
    assert "connecting with ${PW}" in text and "bad password ${PW}" in text
    assert text.count("hunter2") == 1 and "after: hunter2" in text


def test_secrets_substitute_and_redact():
    secrets = Secrets({"USER": "ada", "TOKEN": "t-123"})
    args = {"url": "https://x/?u=${USER}&t=${TOKEN}&k=${OTHER}", "n": 3, "list": ["${USER}"]}
    real = secrets.substitute(args)
    assert real == {"url": "https://x/?u=ada&t=t-123&k=${OTHER}", "n": 3, "list": ["ada"]}
    assert secrets.redact(real) == args


def test_a_recording_keeps_no_four_characters_of_a_secrets_forms():
    import base64

    secrets = Secrets({"PIN": "Zq7!kW3#mP9x", "SHORT": "ab1"})
    encoded = base64.b64encode(b"user:Zq7!kW3#mP9x").decode()  # the value inside a longer base64 text
    events = [{"type": 3, "data": {"texts": [{"value": "typed: Zq7!k"}, {"value": "reversed x9Pm#3Wk"}],
               "attributes": [{"attributes": {"title": "ZQ7!KW"}}], "adds": [{"node": {"tagName": "zq7!"}}]}},
              {"type": 4, "data": {"href": f"http://x/?auth={encoded}&code=ab1&n=Zq7"}}]
    masked = secrets.mask_pieces(secrets.redact(events), keep=("tagName",))
    assert masked[0]["data"]["texts"] == [{"value": "typed: *****"}, {"value": "reversed ********"}]
    assert masked[0]["data"]["attributes"][0]["attributes"]["title"] == "******"  # ASCII case ignored
    assert masked[0]["data"]["adds"][0]["node"]["tagName"] == "zq7!"  # structure is kept
    href = masked[1]["data"]["href"]
    assert "code=${SHORT}&n=Zq7" in href  # a short value where whole; three characters of a long one stay
    inner = encoded[8:20]  # the groups of the base64 text that hold the value's bytes only
    assert inner not in href and not any(inner[i:i + 4] in href for i in range(len(inner) - 3))
    assert secrets.holds("say Zq7!kW3#mP9x") and not secrets.holds("Zq7!")


@pytest.mark.parametrize("selector, expected", [
    ("h1", "Title"),
    ("#main > p", "one\ntwo"),
    ("div.box p", "one\ntwo"),
    ("div section .note", "nested"),
    ("a[href^='https']", "link"),
    ("li", "a\nb"),
    ("td", "1\n2"),
    ("h1, .note", "Title\nnested"),
    ("ul li:nth-child(2)", "b"),
    ("td + td", "2"),
    ("div:not(.narrow) > section span", "nested"),
    ("a[href$='.com']", "link"),
])
def test_css_selectors(selector, expected):
    page = pages.Page("u", "<html><head><title>T</title><script>x()</script></head><body><h1>Title</h1>"
                           "<div id=main class='box wide'><p>one<p>two<section><span class=note>nested</span>"
                           "</section></div><a href='https://e.com'>link</a><ul><li>a<li>b</ul>"
                           "<table><tr><td>1<td>2</table></body></html>")
    assert page.extract(selector) == expected


def test_extract_reads_a_page_without_body_and_refuses_a_broken_selector():
    page = pages.Page("u", "<title>Bare</title><p>no body tag</p><script>x()</script>")
    assert page.extract("body") == "no body tag"
    with pytest.raises(pages.PageError, match="Invalid CSS selector '\\[\\['"):
        page.extract("[[")


def test_data_urls_need_no_network():
    page = pages.fetch("data:text/html,<h1>Hi%20there</h1>", allow_private=False, timeout=1)
    assert page.extract("h1") == "Hi there"


def test_the_context_rule_keeps_the_latest_page_view_and_fits_the_room():
    from workers.planners import context

    view = lambda n: f"clicked [{n}] <a> Next\nURL: http://shop.test/{n}\nTitle: Page {n}\n" + "row text " * 400  # noqa: E731
    messages = [{"role": "user", "content": "Old task."}, {"role": "assistant", "content": "Old answer."},
                {"role": "user", "content": "Browse.\n\nThe browser is on this page:\n" + view(0).split("\n", 1)[1]}]
    for n in range(1, 4):
        messages += [{"role": "assistant", "content": "", "tool_calls": [
            {"id": f"c{n}", "type": "function", "function": {"name": "click", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"c{n}", "content": view(n)}]
    roomy = context.fit(messages, 100_000, start=2)
    assert roomy[2]["content"] == ("Browse.\n\nThe browser is on this page:\nURL: http://shop.test/0 "
                                   "(page view left out: a newer one follows)")
    assert [m["content"] for m in roomy if m["role"] == "tool"] == [
        f"clicked [{n}] <a> Next\nURL: http://shop.test/{n} (page view left out: a newer one follows)"
        for n in (1, 2)] + [view(3)]
    assert roomy[:2] == messages[:2] and messages[-1]["content"] == view(3)  # the stored conversation is intact
    tight = context.fit(messages, 600, start=2)
    assert tight[0]["content"] == "Browse." + roomy[2]["content"][len("Browse."):]  # earlier turns dropped
    assert tight[-1]["content"].startswith("clicked [3] <a> Next\nURL: http://shop.test/3\n")
    assert tight[-1]["content"].endswith("\n… (cut to fit the model's context)")
    assert context.tokens(tight) <= 600


def test_the_bundled_models_chat_format_shows_tool_results_as_written():
    from config.local_chat import render

    tools = [{"type": "function", "function": {"name": "click", "description": "Click an element.", "parameters": {
        "type": "object", "properties": {"target": {"type": "string", "description": "Element number"}},
        "required": ["target"]}}}]
    prompt = render([{"role": "system", "content": "Be brief."}, {"role": "user", "content": 'Click "Tom & Jerry".'},
                     {"role": "assistant", "content": "", "tool_calls": [
                         {"id": "c1", "type": "function", "function": {"name": "click",
                                                                        "arguments": '{"target": "4"}'}}]},
                     {"role": "tool", "tool_call_id": "c1", "content": 'clicked [4] <a> Tom & "Jerry"'}], tools)
    assert "click(target: string (Element number)): Click an element.\n" in prompt
    assert 'Click "Tom & Jerry".' in prompt and '<tool_call>{"name": "click", "arguments": {"target": "4"}}' in prompt
    assert prompt.endswith('<|im_start|>user\nResult of click:\nclicked [4] <a> Tom & "Jerry"<|im_end|>\n'
                           "<|im_start|>assistant\n")
    assert "&#34;" not in prompt and "&amp;" not in prompt
