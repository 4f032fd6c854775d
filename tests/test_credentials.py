"""Stored credentials and codes that arrive out of band: a loopback bank that checks the password and the code on
its server, signed in by a scheduled run from a stored credential with the code pushed by POST /fast/v2/codes or
mailed to the SMTP receiver, the run holding no worker slot while it waits; the site guard; values absent from poll,
row, recording, script, GIF and logs; key isolation."""
import io
import json
import random
import smtplib
import sys
from datetime import datetime
from email.message import EmailMessage

import pytest
from PIL import Image
from sqlalchemy import select, text, update

from app.extensions import db
from app.models import Task, now
from tests.conftest import WorkerProcess, make_key, poll, submit, wait_for_status
from tests.page_server import PageServer
from tests.processes import ManagedProcess, free_port
from workers import sweeps

PASSWORD, ROTATED, USERNAME = "correct-horse-4417", "battery-staple-9052", "ada.lovelace"
TO = "ada@example.test"
SIGN_IN = """<html><head><title>Loopback Bank</title></head><body><form action="/password">
<label>Username <input name="username"></label><label>Password <input name="password" type="password"></label>
<button>Sign in</button></form></body></html>"""
CODE_FORM = """<html><head><title>Enter your code</title></head><body><p>We sent a code to your email.</p>
<form action="/verify"><label>Code <input name="code"></label><button>Verify</button></form></body></html>"""
SIGN_IN_STEPS = ['type ${cred:bank.username} into "Username"', 'type ${cred:bank.password} into "Password"',
                 'click "Sign in"', 'type ${code:%s} into "Code"' % TO, 'click "Verify"', "extract #result"]


def page(heading):
    return f"<html><head><title>{heading}</title></head><body><h1 id='result'>{heading}</h1></body></html>"


@pytest.fixture(scope="module")
def bank():
    """Checks the username and password on its server, then 'sends' a fresh code (kept in `sent`) and checks it."""
    state = {"password": PASSWORD, "sent": [], "received": []}

    def password(query):
        state["received"].append(query)
        if (query.get("username"), query.get("password")) != (USERNAME, state["password"]):
            return page("Wrong password")
        state["sent"].append(f"{random.randrange(10**6):06d}")
        return CODE_FORM

    def verify(query):
        state["received"].append(query)
        return page("Signed in as ada" if state["sent"] and query.get("code") == state["sent"][-1] else "Wrong code")

    server = PageServer({"/sign-in": SIGN_IN}, handlers={"/password": password, "/verify": verify})
    server.state = state
    yield server
    server.close()


@pytest.fixture(scope="module")
def phishing(bank):
    """The same sign-in page on another host (127.0.0.2: another loopback address), as a look-alike site is."""
    server = PageServer({"/sign-in": SIGN_IN}, host="127.0.0.2")
    yield server
    server.close()


@pytest.fixture(scope="module")
def worker(app):
    worker = WorkerProcess(queues="tasks", concurrency=1, name="credentials", env={"CODE_WAIT_SECONDS": "120"})
    yield worker
    worker.stop()


def store(client, key, password=PASSWORD, sites=None, **extra):
    return client.post("/fast/v2/credentials", headers={"x-api-key": key}, json={
        "name": "bank", "username": USERNAME, "password": password, "sites": sites or ["127.0.0.1"], **extra})


def sign_in_task(bank):
    return {"executionMode": "cloud_browser", "generateGif": True, "prompt": "\n".join(
        ["/Operator", f"go to {bank.url('/sign-in')}", *SIGN_IN_STEPS])}


def sign_in(client, key, bank):
    return submit(client, key, sign_in_task(bank)).get_json()["requestId"]


def fire(client, key, schedule_id):
    """Beat's sweep at the schedule's next fire time (a clock the test sets, as in test_schedules.py): its run."""
    upcoming = client.get(f"/fast/v2/schedules/{schedule_id}", headers={"x-api-key": key}).get_json()["nextRuns"][0]
    fire_at = datetime.fromisoformat(upcoming)
    assert sweeps.fire_schedules(fire_at) == 1
    db.session.rollback()
    return db.session.execute(select(Task.id).where(Task.schedule_id == schedule_id, Task.fire_at == fire_at)
                              ).scalar_one()


def waits_in_no_worker_slot(client, key, request_id):
    """The run waits for its code as `input-required`, saying what for; meanwhile the worker, which runs one task
    at a time, runs another task to its end."""
    body = wait_for_status(client, key, request_id, statuses=("input-required", "success", "error"), timeout=120)
    assert body["status"] == "input-required", json.dumps(body)[:2000]
    assert {k: body["hitlInputMetadata"][k] for k in ("type", "kind", "to")} == {"type": "arrival", "kind": "code",
                                                                                  "to": TO}
    assert body["response"]["text"].startswith(f"Waiting for a one-time code sent to {TO} (until ")
    other = submit(client, key, {"prompt": "answer meanwhile", "executionMode": "cloud"}).get_json()["requestId"]
    assert wait_for_status(client, key, other, timeout=120)["status"] == "success"
    assert poll(client, key, request_id).get_json()["status"] == "input-required"
    return body


def values_nowhere(client, key, request_id, values, *texts):
    """None of `values` in the poll, the task's row, its recording, its script and `texts` (worker logs)."""
    headers = {"x-api-key": key}
    seen = [json.dumps(client.get(f"/fast/v2/remote-dispatch/responses/{request_id}{part}", headers=headers)
                       .get_json()) for part in ("", "/recording", "/script")]
    db.session.rollback()
    seen.append(db.session.execute(text("SELECT row_to_json(t)::text FROM tasks t WHERE id = :id"),
                                   {"id": request_id}).scalar_one())
    for shown in [*seen, *texts]:
        for value in values:
            assert value not in shown, (value, shown[:2000])
    return seen


def gif_frame(client, key, body, number):
    gif = Image.open(io.BytesIO(client.get(body["gifUrl"], headers={"x-api-key": key}).data))
    gif.seek(number)
    return gif.convert("RGB").tobytes()


def test_credentials_are_stored_sealed_and_only_their_names_and_sites_come_back(client, api_key, other_key):
    headers = {"x-api-key": api_key}
    totp = "otpauth://totp/Bank:ada?secret=JBSWY3DPEHPK3PXP"
    created = store(client, api_key, sites=["127.0.0.1:8124", "*.Bank.example"], totp=totp)
    assert created.status_code == 201, created.get_json()
    assert created.get_json()["fields"] == ["username", "password", "code"]
    assert created.get_json()["sites"] == ["127.0.0.1:8124", "*.bank.example"]
    listed = client.get("/fast/v2/credentials", headers=headers).get_json()
    one = client.get("/fast/v2/credentials/bank", headers=headers).get_json()
    row = db.session.execute(text("SELECT row_to_json(c)::text FROM credentials c")).scalar_one()
    for shown in (json.dumps(created.get_json()), json.dumps(listed), json.dumps(one), row):
        assert PASSWORD not in shown and USERNAME not in shown and "JBSWY3DP" not in shown
    assert [c["name"] for c in listed["credentials"]] == ["bank"]
    assert store(client, api_key).status_code == 409
    rotated = client.put("/fast/v2/credentials/bank", headers=headers,
                         json={"password": ROTATED, "sites": ["bank.example"]})
    assert rotated.status_code == 200 and rotated.get_json()["fields"] == ["password"]
    # Another key sees none of it, and cannot name it in a task.
    assert client.get("/fast/v2/credentials/bank", headers={"x-api-key": other_key}).status_code == 404
    assert client.get("/fast/v2/credentials", headers={"x-api-key": other_key}).get_json() == {"credentials": []}
    refused = submit(client, other_key, {"executionMode": "cloud_browser", "prompt": "/Operator type ${cred:bank.password} into \"Password\""})
    assert refused.status_code == 400 and "no stored credential named 'bank'" in refused.get_json()["message"]
    missing = submit(client, api_key, {"executionMode": "cloud_browser", "prompt": "/Operator type ${cred:bank.username} into \"Username\""})
    assert missing.status_code == 400 and "has no username" in missing.get_json()["message"]
    assert client.delete("/fast/v2/credentials/bank", headers=headers).status_code == 204
    assert client.get("/fast/v2/credentials/bank", headers=headers).status_code == 404


@pytest.mark.parametrize("body, why", [
    ({"sites": ["https://bank.example/login"]}, "is not a site"),
    ({"sites": ["*.example"]}, "a wildcard needs a domain"),
    ({"sites": []}, "sites"),
    ({"totp": "otpauth://totp/x?secret=!!"}, "totp"),
    ({"username": None, "password": None}, "at least one of username, password and totp"),
    ({"name": "bad name"}, "a credential name is"),
])
def test_a_bad_credential_is_a_400_saying_why(client, api_key, body, why):
    response = client.post("/fast/v2/credentials", headers={"x-api-key": api_key}, json={
        "name": "bank", "username": USERNAME, "password": PASSWORD, "sites": ["bank.example"], **body})
    assert response.status_code == 400 and why in json.dumps(response.get_json()), response.get_json()


def test_an_address_belongs_to_the_key_that_claims_it_first(client, api_key, other_key):
    claim = lambda key: client.post("/fast/v2/codes/addresses", headers={"x-api-key": key},  # noqa: E731
                                    json={"address": "Ada@Example.test"})
    assert claim(api_key).status_code == 201 and claim(api_key).status_code == 200
    taken = claim(other_key)
    assert taken.status_code == 409 and "claimed by another API key" in taken.get_json()["message"]
    # Nor does another key's task wait on it.
    assert submit(client, other_key, {"executionMode": "cloud_browser", "prompt": "/Operator type ${code:ada@example.test} into \"Code\""}
                  ).status_code == 409
    assert client.get("/fast/v2/codes/addresses", headers={"x-api-key": api_key}).get_json()["addresses"][0][
        "address"] == TO
    nothing = client.post("/fast/v2/codes", headers={"x-api-key": api_key}, json={"to": TO, "text": "Hello there"})
    assert nothing.status_code == 400 and "No one-time code" in nothing.get_json()["message"]
    pushed = client.post("/fast/v2/codes", headers={"x-api-key": api_key}, json={"to": TO, "text": "Code: 482910"})
    assert pushed.status_code == 202 and pushed.get_json() == {"to": TO, "code": True, "link": False}


def test_a_wait_for_a_code_that_never_comes_ends_saying_what_it_waited_for(client, api_key, bank, worker):
    assert store(client, api_key, sites=[f"127.0.0.1:{bank.port}"]).status_code == 201
    bank.state.update(password=PASSWORD, sent=[])
    request_id = sign_in(client, api_key, bank)
    body = wait_for_status(client, api_key, request_id, statuses=("input-required", "success", "error"), timeout=120)
    assert body["status"] == "input-required" and body["hitlInputMetadata"]["to"] == TO, body
    answered = client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/input", headers={"x-api-key": api_key},
                           json={"answer": "123456"})
    assert answered.status_code == 409 and "send it with POST /fast/v2/codes" in answered.get_json()["message"]
    # CODE_WAIT_SECONDS (120 s for this worker) pass: its deadline is now, and beat's sweep ends it.
    db.session.execute(update(Task).where(Task.id == request_id).values(input_deadline_at=now()))
    db.session.commit()
    assert sweeps.expire_input_requests() == 1
    body = poll(client, api_key, request_id).get_json()
    assert body["status"] == "error" and body["response"]["text"].startswith(
        f"Waited 120 s (CODE_WAIT_SECONDS) for a one-time code sent to {TO}; none arrived."), body
    assert body["response"]["actionTrace"][-1]["action"] == f"error: {body['response']['text']}"


def test_a_scheduled_run_signs_in_from_a_stored_credential_with_a_code_pushed_by_api_then_mailed(
        client, api_key, other_key, bank, worker):
    assert store(client, api_key, sites=[f"127.0.0.1:{bank.port}"]).status_code == 201
    bank.state.update(password=PASSWORD, sent=[], received=[])
    created = client.post("/fast/v2/schedules", headers={"x-api-key": api_key}, json={
        "name": "sign in at 7", "cron": "0 7 * * *", "timeZone": "Europe/Oslo", "task": sign_in_task(bank)})
    assert created.status_code == 201, created.get_json()
    schedule_id = created.get_json()["scheduleId"]
    request_id = fire(client, api_key, schedule_id)
    waits_in_no_worker_slot(client, api_key, request_id)
    assert len(bank.state["sent"]) == 1
    # Another key's message to the same address never reaches this task: the bank would refuse its code.
    client.post("/fast/v2/codes", headers={"x-api-key": other_key}, json={"to": TO, "code": "000000"})
    assert client.post("/fast/v2/codes", headers={"x-api-key": api_key}, json={
        "to": "ADA@example.test", "text": f"Your Loopback Bank code is {bank.state['sent'][-1]}."}).status_code == 202
    body = wait_for_status(client, api_key, request_id, timeout=120)
    assert body["status"] == "success", json.dumps(body)[:3000]
    assert body["trigger"] == "schedule" and body["scheduleId"] == schedule_id
    assert body["response"]["text"] == "Signed in as ada"  # the bank's server checked the password and the code
    assert bank.state["received"] == [{"username": USERNAME, "password": PASSWORD},
                                      {"code": bank.state["sent"][-1]}]
    trace = body["response"]["actionTrace"]
    assert trace[2]["action"] == 'type ${cred:bank.password} into "Password"'
    [typed] = [entry for entry in trace if entry["action"] == 'type ${code:%s} into "Code"' % TO]
    assert typed["waited"].startswith("waited ") and typed["waited"].endswith(f" s for a code to {TO}")
    assert "resumed in the browser kept since the pause (same tabs, page, cookies and storage)" in [
        entry["action"] for entry in trace]
    script = client.get(f"/fast/v2/remote-dispatch/responses/{request_id}/script",
                        headers={"x-api-key": api_key}).get_json()["script"]
    assert [s["args"]["text"] for s in script["steps"] if s["action"] == "type"] == [
        "${cred:bank.username}", "${cred:bank.password}", "${code:%s}" % TO]
    first_code = bank.state["sent"][-1]

    # Again, rotated, the code by mail through the SMTP receiver (the Procfile's `mail` process, a real SMTP client).
    port = free_port()
    mail = ManagedProcess([sys.executable, "-c", "from app.cli import main; main()", "mail"], "mail",
                          {"SMTP_BIND": f"127.0.0.1:{port}"})
    try:
        mail.wait_until(lambda: "listening" in mail.output())
        assert client.put("/fast/v2/credentials/bank", headers={"x-api-key": api_key}, json={
            "username": USERNAME, "password": ROTATED, "sites": [f"127.0.0.1:{bank.port}"]}).status_code == 200
        bank.state.update(password=ROTATED, sent=[], received=[])
        again = fire(client, api_key, schedule_id)
        waits_in_no_worker_slot(client, api_key, again)
        message = EmailMessage()
        message["From"], message["To"], message["Subject"] = "bank@bank.example", TO, "Your sign-in code"
        message.set_content(f"Hello Ada,\n\nyour sign-in code is {bank.state['sent'][-1]}. It expires in 10 minutes.")
        with smtplib.SMTP("127.0.0.1", port) as smtp:
            smtp.send_message(message)
            with pytest.raises(smtplib.SMTPRecipientsRefused):  # an address no key claimed
                smtp.sendmail("bank@bank.example", ["grace@example.test"], message.as_bytes())
        later = wait_for_status(client, api_key, again, timeout=120)
        assert later["status"] == "success" and later["response"]["text"] == "Signed in as ada", later
        assert bank.state["received"] == [{"username": USERNAME, "password": ROTATED},
                                          {"code": bank.state["sent"][-1]}]
        # The GIF's frame after the password was typed is the same picture for both passwords: dots.
        assert gif_frame(client, api_key, body, 3) == gif_frame(client, api_key, later, 3)
        codes = [first_code, bank.state["sent"][-1]]
        for done in (request_id, again):
            values_nowhere(client, api_key, done, [PASSWORD, ROTATED, USERNAME, *codes], worker.output(),
                           mail.output())
    finally:
        mail.stop()


def test_a_credential_is_never_typed_off_its_sites(client, api_key, bank, phishing, worker):
    assert store(client, api_key, sites=[f"127.0.0.1:{bank.port}"]).status_code == 201
    phishing.requests.clear()

    def run(*steps):
        request_id = submit(client, api_key, {"executionMode": "cloud_browser", "prompt": "\n".join(
            ["/Operator", *steps])}).get_json()["requestId"]
        body = wait_for_status(client, api_key, request_id, timeout=120)
        assert body["status"] == "error", json.dumps(body)[:2000]
        values_nowhere(client, api_key, request_id, [PASSWORD], worker.output())
        return body["response"]["text"]

    look_alike = run(f"go to {phishing.url('/sign-in')}", 'type ${cred:bank.password} into "Password"',
                     'click "Sign in"')
    assert f"the page is http://127.0.0.2:{phishing.port}" in look_alike and "stored credential" in look_alike
    bank.pages["/framed"] = (f"<html><body><h1>Loopback Bank</h1>"  # the bank's page, a frame of another origin
                             f"<iframe src='{phishing.url('/sign-in')}'></iframe></body></html>")
    framed = run(f"go to {bank.url('/framed')}", 'type ${cred:bank.password} into "Password"')
    assert f"the frame typed into is http://127.0.0.2:{phishing.port}" in framed
    sent = run(f"go to {phishing.url('/echo')}?p=${{cred:bank.password}}")
    assert "is a stored credential" in sent and "go_to step" in sent
    assert not any("password" in path or "/echo" in path for path in phishing.requests)


def test_the_console_lists_names_and_sites_never_values(client, api_key, other_key):
    import re

    assert store(client, api_key, sites=["bank.example", "*.bank.example"]).status_code == 201
    client.post("/fast/v2/codes/addresses", headers={"x-api-key": api_key}, json={"address": TO})
    token = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/console/signin").get_data(as_text=True))[1]
    assert client.post("/console/signin", data={"api_key": api_key, "csrf_token": token}).status_code == 302
    page = client.get("/console/credentials").get_data(as_text=True)
    assert "<code>bank</code>" in page and "<code>*.bank.example</code>" in page and TO in page
    assert "username, password" in page and PASSWORD not in page and USERNAME not in page


def test_a_sign_in_link_is_taken_from_the_message_opened_once_and_redacted(client, app, api_key):
    from workers.agent.arrivals import Arrivals
    from workers.agent.secrets import Secrets

    link = "https://bank.example/magic?token=4f9a2c77e1"
    secrets = Secrets(arrivals=[("link", TO)])
    key_id = db.session.execute(text("SELECT max(id) FROM api_keys")).scalar_one()
    secrets.wait = Arrivals(key_id, 5, secrets)  # the run starts, then the mail comes
    db.session.rollback()
    assert client.post("/fast/v2/codes", headers={"x-api-key": api_key}, json={
        "to": TO, "text": f"Hi Ada, see https://bank.example/ or sign in here: {link}. Thanks"}).status_code == 202
    assert secrets.substitute({"url": "${link:%s}" % TO}) == {"url": link}
    assert secrets.redact(f"opened {link}") == "opened ${link:%s}" % TO
    assert secrets.waited == [f"waited 0 s for a link to {TO}"]


def test_a_credentials_totp_code_is_guarded_by_its_sites():
    from workers.agent.secrets import Secrets

    secrets = Secrets(credentials={"cred:bank.code": ("otpauth://totp/Bank:ada?secret=JBSWY3DPEHPK3PXP",
                                                      ["bank.example"])})
    typed = secrets.substitute("${cred:bank.code}")
    assert typed.isdigit() and secrets.sites_for(typed) == {"cred:bank.code": ["bank.example"]}
    assert secrets.redact(typed) == "${cred:bank.code}" and secrets.sites_for("123") == {}
