"""The window channel over plain HTTP: register, list, the long poll, results waking the sender, the 404s."""
import json
import threading
import time

from sqlalchemy import update

from app.crypto import seal
from app.extensions import db
from app.models import BrowserWindow, WindowCommand
from tests.conftest import make_key, submit

WINDOWS = "/fast/v2/browser-windows"


def register(client, key, label="main"):
    response = client.post(WINDOWS, json={"label": label}, headers={"x-api-key": key})
    assert response.status_code == 201, response.get_json()
    return response.get_json()["browserWindowId"]


def poll(client, key, window_ids, wait=0):
    response = client.post(WINDOWS + "/poll", json={"browserWindowIds": window_ids, "wait": wait},
                           headers={"x-api-key": key})
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def test_register_and_list_with_state(client, api_key, other_key):
    window_id = register(client, api_key)
    register(client, other_key, "bob's")
    listed = client.get(WINDOWS, headers={"x-api-key": api_key}).get_json()["windows"]
    assert [(w["browserWindowId"], w["label"], w["state"]) for w in listed] == [(window_id, "main", "online")]
    db.session.execute(update(BrowserWindow).values(last_seen_at=BrowserWindow.created_at.op("-")(
        db.text("interval '10 minutes'"))))
    db.session.commit()
    assert client.get(WINDOWS, headers={"x-api-key": api_key}).get_json()["windows"][0]["state"] == "offline"
    poll(client, api_key, [window_id])  # the heartbeat brings it back
    assert client.get(WINDOWS, headers={"x-api-key": api_key}).get_json()["windows"][0]["state"] == "online"


def test_client_submit_404s_unknown_offline_and_another_keys_window(client, api_key, other_key):
    mine, theirs = register(client, api_key), register(client, other_key)
    for window_id in ("no-such-window", theirs):
        response = submit(client, api_key, {"prompt": "/Operator answer hi", "browserWindowId": window_id})
        assert response.status_code == 404
        assert response.get_json()["error"] == "Browser Window Not Found"
    assert submit(client, api_key, {"prompt": "/Operator answer hi", "browserWindowId": mine}).status_code == 202
    db.session.execute(update(BrowserWindow).where(BrowserWindow.id == mine).values(
        last_seen_at=db.text("now() - interval '10 minutes'")))
    db.session.commit()
    response = submit(client, api_key, {"prompt": "/Operator answer hi", "browserWindowId": mine})
    assert response.status_code == 404
    assert "offline" in response.get_json()["message"]


def test_poll_reports_windows_it_does_not_own(client, api_key, other_key):
    theirs = register(client, other_key)
    assert poll(client, api_key, [theirs, "gone"]) == {"commands": [], "unknown": [theirs, "gone"]}


def test_a_command_wakes_the_long_poll_and_its_result_wakes_the_sender(app, client, api_key):
    from app.windows.service import send_command

    window_id = register(client, api_key)
    results = {}

    def sender():
        with app.app_context():
            results["result"] = send_command(window_id, "get_url", {}, timeout=30)

    polled = {}

    def extension():
        with app.app_context():
            polled["body"] = poll(app.test_client(), api_key, [window_id], wait=20)

    waiting = threading.Thread(target=extension)
    waiting.start()
    time.sleep(0.5)  # the poll is waiting before the command exists
    thread = threading.Thread(target=sender)
    thread.start()
    waiting.join(25)
    commands = polled["body"]["commands"]
    assert [(c["name"], c["browserWindowId"]) for c in commands] == [("get_url", window_id)]
    response = app.test_client().post(f"{WINDOWS}/commands/{commands[0]['commandId']}/result",
                                      json={"status": "success", "data": {"url": "http://x/"}},
                                      headers={"x-api-key": api_key})
    assert response.get_json() == {"accepted": True}
    thread.join(25)
    assert results["result"] == {"status": "success", "data": {"url": "http://x/"}, "error": None}
    assert db.session.query(WindowCommand).count() == 0  # consumed: nothing of it stays at rest


def test_a_delivered_command_is_handed_out_again_until_the_extension_says_it_runs_it(client, api_key):
    """A poll's answer can be lost (Chromium stopped the service worker while it waited): no command may be."""
    window_id = register(client, api_key)
    command = WindowCommand(window_id=window_id, name="get_url", args=seal({}),
                            expires_at=db.text("now() + interval '1 minute'"))
    db.session.add(command)
    db.session.commit()
    command_id = command.id
    assert [c["commandId"] for c in poll(client, api_key, [window_id])["commands"]] == [command_id]
    assert [c["commandId"] for c in poll(client, api_key, [window_id])["commands"]] == [command_id]
    response = client.post(WINDOWS + "/poll", json={"browserWindowIds": [window_id], "wait": 0,
                                                    "running": [command_id]}, headers={"x-api-key": api_key})
    assert response.get_json()["commands"] == []
    client.post(f"{WINDOWS}/commands/{command_id}/result", json={"status": "success", "data": {"url": "http://x/"}},
                headers={"x-api-key": api_key})
    assert poll(client, api_key, [window_id])["commands"] == []


def test_another_key_cannot_post_a_result(client, api_key, other_key):
    window_id = register(client, api_key)
    command = WindowCommand(window_id=window_id, name="get_url", args=seal({}),
                            expires_at=db.text("now() + interval '1 minute'"))
    db.session.add(command)
    db.session.commit()
    response = client.post(f"{WINDOWS}/commands/{command.id}/result", json={"status": "success"},
                           headers={"x-api-key": other_key})
    assert response.status_code == 404
    assert poll(client, api_key, [window_id])["commands"][0]["commandId"] == command.id


def test_extension_action_404s_and_504(app, client, api_key, other_key):
    mine, theirs = register(client, api_key), register(client, other_key)
    body = {"action": {"name": "get_url"}, "actionExecutionId": "action_1"}
    for window_id in ("unknown", theirs):
        response = client.post("/fast/v2/extension-actions", json={**body, "browserWindowId": window_id},
                               headers={"x-api-key": api_key})
        assert response.status_code == 404
        assert response.get_json()["error"] == "Browser Window Not Found"
    response = client.post("/fast/v2/extension-actions", json={**body, "browserWindowId": mine, "timeout": 1},
                           headers={"x-api-key": api_key})
    assert response.status_code == 504
    assert "did not answer 'get_url' within 1 s" in response.get_json()["message"]
    # The withdrawn command is never handed to the extension afterwards.
    assert poll(client, api_key, [mine])["commands"] == []
    response = client.post("/fast/v2/extension-actions", json={**body, "action": {"name": "rm_rf"},
                                                               "browserWindowId": mine},
                           headers={"x-api-key": api_key})
    assert response.status_code == 400
    assert "action.name must be one of" in json.dumps(response.get_json())


def send_later(app, window_id, name):
    """The worker's side in a thread: (thread, results), results["result"] once the command is answered."""
    from app.windows.service import send_command

    results = {}

    def sender():
        with app.app_context():
            results["result"] = send_command(window_id, name, {}, timeout=30)

    thread = threading.Thread(target=sender)
    thread.start()
    return thread, results


def test_closing_a_window_fails_its_waiting_command(app, client, api_key):
    window_id = register(client, api_key)
    thread, results = send_later(app, window_id, "get_url")
    time.sleep(0.5)
    assert client.delete(f"{WINDOWS}/{window_id}", headers={"x-api-key": api_key}).status_code == 204
    thread.join(25)
    assert results["result"]["error"] == "The browser window was closed."
    assert make_key  # noqa: the helper stays importable for the browser tests


def test_old_commands_are_purged(client, api_key):
    from app.windows.service import purge_old_commands

    window_id = register(client, api_key)
    for age in ("2 days", "1 minute"):
        db.session.add(WindowCommand(window_id=window_id, name="get_url", args={}, state="done",
                                     expires_at=db.text(f"now() - interval '{age}'"),
                                     completed_at=db.text(f"now() - interval '{age}'")))
    db.session.commit()
    assert purge_old_commands() == 1
    assert db.session.query(WindowCommand).count() == 1


def test_arguments_and_results_are_sealed_at_rest(app, client, api_key):
    """A `type` command carries a secret's value; a result can carry a page showing one."""
    from sqlalchemy import text

    from app.windows.service import send_command

    window_id = register(client, api_key)
    secret = "Horse!Battery staple#9"

    def sender():
        with app.app_context():
            send_command(window_id, "type", {"target": "#p", "text": secret}, timeout=30)

    thread = threading.Thread(target=sender)
    thread.start()
    commands = poll(client, api_key, [window_id], wait=10)["commands"]
    assert commands[0]["args"] == {"target": "#p", "text": secret}  # the extension gets the value
    at_rest = lambda: db.session.execute(text("SELECT row_to_json(c)::text FROM window_commands c")).scalars().all()  # noqa: E731
    assert at_rest() and all(secret not in row for row in at_rest())
    client.post(f"{WINDOWS}/commands/{commands[0]['commandId']}/result", json={"status": "success"},
                headers={"x-api-key": api_key})
    thread.join(25)
    # A result nobody has consumed yet (the sender would delete the row) is sealed too.
    command = WindowCommand(window_id=window_id, name="get_url", args=seal({}),
                            expires_at=db.text("now() + interval '1 minute'"))
    db.session.add(command)
    db.session.commit()
    client.post(f"{WINDOWS}/commands/{command.id}/result", json={"status": "success", "data": {"url": secret}},
                headers={"x-api-key": api_key})
    db.session.rollback()
    assert len(at_rest()) == 1 and secret not in at_rest()[0]


def test_a_result_of_the_wrong_shape_is_refused_and_the_command_keeps_waiting(app, client, api_key):
    window_id = register(client, api_key)
    thread, results = send_later(app, window_id, "tabs")
    command_id = poll(client, api_key, [window_id], wait=10)["commands"][0]["commandId"]
    url = f"{WINDOWS}/commands/{command_id}/result"
    for data, problem in ((None, "must be an array"), ({"index": 0}, "must be an array"),
                          (["tab"], "item 0 must be an object"), ([{"index": "0"}], "as an integer"),
                          ([{"index": True}], "as an integer")):
        response = client.post(url, json={"status": "success", "data": data}, headers={"x-api-key": api_key})
        assert response.status_code == 400, response.get_json()
        assert "'tabs' result" in response.get_json()["message"] and problem in response.get_json()["message"]
    assert thread.is_alive()  # still waiting: the bad replies were not its answer
    good = [{"index": 0, "url": "http://x/", "title": "x", "active": True}]
    response = client.post(url, json={"status": "success", "data": good}, headers={"x-api-key": api_key})
    assert response.get_json() == {"accepted": True}
    thread.join(25)
    assert results["result"] == {"status": "success", "data": good, "error": None}


def test_a_hostile_command_id_is_404(client, api_key):
    # A NUL anywhere in a path is 400 on every route (app.parsing.refuse_nul_characters); any other id no command
    # has is 404.
    for segment, status in (("%00", 400), ("not-a-uuid", 404), ("..%2F..", 404), ("0" * 5000, 404)):
        response = client.post(f"{WINDOWS}/commands/{segment}/result", json={"status": "success"},
                               headers={"x-api-key": api_key})
        assert response.status_code == status, (segment, response.status_code)
        assert set(response.get_json()) == {"error", "message"}


def test_go_to_url_in_a_window_follows_the_outbound_policy(app, client, api_key, monkeypatch):
    """The same check as a client-mode task's navigation: the window never gets what it refuses."""
    window_id = register(client, api_key)
    poll(client, api_key, [window_id])  # online
    monkeypatch.setitem(app.config, "ALLOW_PRIVATE_URLS", False)
    for url, reason in (("file:///etc/passwd", "scheme must be http or https"),
                        ("chrome://settings", "scheme must be http or https"),
                        ("javascript:alert(1)", "not an absolute URL"),
                        ("http://10.1.2.3/admin", "non-public address"),
                        ("http://127.0.0.1:5432/", "non-public address"), (42, "must be a string")):
        response = client.post("/fast/v2/extension-actions", headers={"x-api-key": api_key}, json={
            "action": {"name": "go_to_url", "url": url}, "actionExecutionId": "a1", "browserWindowId": window_id})
        assert response.status_code == 400, (url, response.get_json())
        assert response.get_json()["message"].startswith("action.url: refused: ") and reason in \
            response.get_json()["message"], response.get_json()
    assert poll(client, api_key, [window_id])["commands"] == []
