"""One-time codes: an `otpauth://totp/...` secretVariables value types RFC 6238 codes that no one else sees."""
import base64
import io
import json
import re
import time

import pytest
from PIL import Image
from sqlalchemy import text

from app import totp
from app.extensions import db
from tests.conftest import WorkerProcess, submit, wait_for_status
from tests.llm_server import ScriptedModel, tool_call
from tests.page_server import PageServer
from workers.agent.secrets import Secrets

# RFC 6238 Appendix B: the seeds (ASCII "1234567890" repeated to the hash's size) and 8-digit codes.
SEEDS = {"SHA1": b"12345678901234567890", "SHA256": b"12345678901234567890123456789012",
         "SHA512": b"1234567890123456789012345678901234567890123456789012345678901234"}
VECTORS = [(59, "94287082", "46119246", "90693936"), (1111111109, "07081804", "68084774", "25091201"),
           (1111111111, "14050471", "67062674", "99943326"), (1234567890, "89005924", "91819424", "93441116"),
           (2000000000, "69279037", "90698825", "38618901"), (20000000000, "65353130", "77737706", "47863826")]
SEED = "JBSWY3DPEHPK3PXPJBSWY3DPEHPK3PXP"  # base32, 160 bits
URI = f"otpauth://totp/Loopback%20Bank:ada?secret={SEED}&issuer=Loopback%20Bank"
GENERATOR = totp.parse(URI)
SIGN_IN = """<html><head><title>Second factor</title><style>input { caret-color: transparent; }</style></head>
<body><h1>Loopback Bank</h1>
<form action="/verify" method="get"><label for="c">Code</label>
<input id="c" name="code" inputmode="numeric" autocomplete="one-time-code">
<button type="submit">Verify</button></form></body></html>"""
# A page that echoes each keystroke: what was typed so far, reversed, and spaced out (the field itself is masked).
ECHO = SIGN_IN.replace("</form>", """</form>
<p id="typed">.</p><p id="reversed">.</p><p id="spaced">.</p>
<script>
var echoed = "";
setInterval(function () {
  var value = document.getElementById("c").value, digits = value.split("");
  if (value === echoed) return;
  echoed = value;
  document.getElementById("typed").textContent += " " + value;
  document.getElementById("reversed").textContent = digits.slice().reverse().join("");
  document.getElementById("spaced").textContent = digits.join(" ");
}, 5);
</script>""")



def uri(**params):
    query = "&".join(f"{name}={value}" for name, value in {"secret": SEED, **params}.items())
    return f"otpauth://totp/x:ada?{query}"


@pytest.mark.parametrize("algorithm", ["SHA1", "SHA256", "SHA512"])
def test_the_generator_gives_rfc_6238_s_test_vectors(algorithm):
    secret = base64.b32encode(SEEDS[algorithm]).decode().rstrip("=")
    generator = totp.parse(f"otpauth://totp/ACME:ada?secret={secret}&digits=8&algorithm={algorithm}&period=30")
    column = ["SHA1", "SHA256", "SHA512"].index(algorithm) + 1
    assert [generator.code(vector[0]) for vector in VECTORS] == [vector[column] for vector in VECTORS]


def test_defaults_are_six_digits_every_30_seconds_with_sha1():
    generator = totp.parse(f"otpauth://totp/ada?secret={base64.b32encode(SEEDS['SHA1']).decode()}")
    assert (generator.digits, generator.period, generator.algorithm) == (6, 30, "SHA1")
    assert generator.code(59) == "287082"  # RFC 4226's dynamic truncation, the last 6 of the 8-digit vector
    assert "secret" not in repr(generator) and SEED not in repr(generator)  # a log of the object shows no seed


def test_a_code_about_to_expire_is_not_typed_the_next_one_is():
    slept, period = [], 1_000_000_020  # a period starts here (a multiple of 30 s)
    start = period + 20  # 10 s left: the current code
    assert GENERATOR.fresh_code(lambda: start, slept.append) == GENERATOR.code(start) and slept == []
    late = period + 27.5  # 2.5 s left (< FRESH_SECONDS): wait for the next period, type its code
    clock = iter([late, period + 30.0])
    assert GENERATOR.fresh_code(lambda: next(clock), slept.append) == GENERATOR.code(period + 30)
    assert slept == [2.5] and GENERATOR.code(late) != GENERATOR.code(period + 30)


@pytest.mark.parametrize("value, why", [
    ("otpauth://hotp/x?secret=" + SEED + "&counter=1", "only time-based codes (TOTP)"),
    ("otpauth://totp/x?secret=not-base32!", "not base32"),
    ("otpauth://totp/x?issuer=x", "no secret"),
    ("otpauth://totp/x?secret=JBSWY3DP", "too short"),
    (uri(digits=9), "digits must be 6, 7 or 8"),
    (uri(digits=5), "digits must be 6, 7 or 8"),
    (uri(algorithm="MD5"), "algorithm must be SHA1, SHA256 or SHA512"),
    (uri(period="abc"), "period is not a whole number"),
])
def test_a_malformed_uri_is_refused_naming_the_variable(client, api_key, value, why):
    for body in ({"prompt": "/Operator\ngo to https://example.com/"},
                 {"replayOf": "no-such-task"},  # replays take secretVariables too: the body is checked first
                 {"prompt": "/Operator\nread page", "cloudBrowserSessionId": "cbs_nosuch"}):
        response = submit(client, api_key, {**body, "executionMode": "cloud_browser",
                                            "secretVariables": {"PASSWORD": "plain", "BANK_OTP": value}})
        assert response.status_code == 400, response.get_json()
        problem = response.get_json()
        assert problem["error"] == "Invalid Request" and "secretVariables: BANK_OTP: " in problem["message"]
        assert why in problem["message"] and "PASSWORD" not in problem["message"]
        assert SEED not in problem["message"]  # the seed is a secret, even a malformed one


def test_a_code_is_typed_at_execution_and_redacted_everywhere_after():
    secrets = Secrets({"OTP": URI, "PASSWORD": "hunter2!"})
    assert secrets.names() == ["OTP", "PASSWORD"]
    typed = secrets.substitute({"text": "${OTP}", "target": "Code"})["text"]
    assert re.fullmatch(r"\d{6}", typed) and typed in (GENERATOR.code(time.time() - 30), GENERATOR.code(time.time()))
    # The code, the URI and its seed read back as the placeholder; a longer number holding the code does not.
    shown = secrets.redact(f"value={typed} url=/verify?code={typed}&u=1 seed {SEED.lower()} uri {URI} n=9{typed}9")
    assert shown == "value=${OTP} url=/verify?code=${OTP}&u=1 seed ${OTP} uri ${OTP} n=9" + typed + "9"


def test_a_run_resumed_after_a_pause_redacts_the_codes_of_the_periods_before_it():
    # The run that typed a code has ended at the pause; the page it typed into may still be shown after the answer.
    secrets, began = Secrets({"OTP": URI}), time.time() - 600
    typed = GENERATOR.code(began + 45)
    assert secrets.redact(f"Code: {typed}") == f"Code: {typed}"
    secrets.remember_codes(began, time.time())
    assert secrets.redact(f"Code: {typed}, then {GENERATOR.code(time.time())}") == "Code: ${OTP}, then ${OTP}"


@pytest.fixture(scope="module")
def bank():
    received, accepted = [], []

    def verify(query):  # the site checks the code on its server: this period's or the one before (RFC 6238 §5.2)
        received.append(query.get("code", ""))
        now = time.time()
        valid = query.get("code") in {GENERATOR.code(now), GENERATOR.code(now - 30)}
        if valid:
            accepted.append(query["code"])
        heading = "Signed in as ada" if valid else "Wrong code"
        return f"<html><head><title>{heading}</title></head><body><h1 id='result'>{heading}</h1></body></html>"

    def last(query):  # a site that shows the latest code it accepted (as "your code 123456 was used" pages do)
        return f"<html><body><p id='last'>Last code: {accepted[-1] if accepted else 'none'}</p></body></html>"

    server = PageServer({"/sign-in": SIGN_IN, "/keystrokes": ECHO}, handlers={"/verify": verify, "/last": last})
    server.received = received
    yield server
    server.close()


def codes_nowhere(client, api_key, request_id, codes, *texts):
    """Neither the seed nor the codes typed: in the poll, the task's row, its recording, its script and `texts`."""
    headers = {"x-api-key": api_key}
    seen = [json.dumps(client.get(f"/fast/v2/remote-dispatch/responses/{request_id}", headers=headers).get_json()),
            json.dumps(client.get(f"/fast/v2/remote-dispatch/responses/{request_id}/recording",
                                  headers=headers).get_json()),
            json.dumps(client.get(f"/fast/v2/remote-dispatch/responses/{request_id}/script",
                                  headers=headers).get_json()), *texts]
    db.session.rollback()
    seen.append(db.session.execute(text("SELECT row_to_json(t)::text FROM tasks t WHERE id = :id"),
                                   {"id": request_id}).scalar_one())
    for shown in seen:
        assert SEED.lower() not in shown.lower() and "otpauth" not in shown
        for code in codes:
            assert not re.search(rf"(?<![0-9]){code}(?![0-9])", shown), (code, shown[:2000])
            # Nor a field's text as typing left it, keystroke by keystroke (a recording's input events).
            assert not any(f'"{code[:n]}"' in shown for n in range(3, len(code))), (code, shown[:2000])
    return seen


@pytest.fixture
def browser_worker(app):
    """Per test: the model-planned test needs the only worker to be one of its own."""
    worker = WorkerProcess(queues="tasks", concurrency=1, name="one-time-codes")
    yield worker
    worker.stop()


def test_a_cloud_browser_task_signs_in_with_a_one_time_code_no_one_sees(client, api_key, bank, browser_worker):
    bank.received.clear()
    steps = ["/Operator", f"go to {bank.url('/sign-in')}", 'type ${BANK_OTP} into "Code"', 'click "Verify"',
             "extract #result"]
    request_id = submit(client, api_key, {"executionMode": "cloud_browser", "prompt": "\n".join(steps),
                                          "secretVariables": {"BANK_OTP": URI}}).get_json()["requestId"]
    body = wait_for_status(client, api_key, request_id, timeout=120)
    assert body["status"] == "success", body
    assert body["response"]["text"] == "Signed in as ada"  # the site's server accepted the code
    trace = body["response"]["actionTrace"]
    assert trace[1]["action"] == 'type ${BANK_OTP} into "Code"'
    assert trace[2]["url"] == bank.url("/verify") + "?code=${BANK_OTP}"
    (code,) = bank.received
    assert re.fullmatch(r"\d{6}", code)
    # The script keeps the placeholder: its replay types a fresh code.
    script = client.get(f"/fast/v2/remote-dispatch/responses/{request_id}/script",
                        headers={"x-api-key": api_key}).get_json()["script"]
    assert script["secrets"] == ["BANK_OTP"]
    assert [s["args"].get("text") for s in script["steps"] if s["action"] == "type"] == ["${BANK_OTP}"]
    replayed = submit(client, api_key, {"executionMode": "cloud_browser", "replayOf": request_id,
                                        "secretVariables": {"BANK_OTP": URI}}).get_json()["requestId"]
    again = wait_for_status(client, api_key, replayed, timeout=120)
    assert again["status"] == "success" and again["response"]["text"] == "Signed in as ada", again
    codes = set(bank.received)
    codes_nowhere(client, api_key, request_id, codes, browser_worker.output())
    codes_nowhere(client, api_key, replayed, codes, browser_worker.output())


def test_after_a_pause_a_code_typed_before_it_stays_hidden(client, api_key, bank, browser_worker):
    bank.received.clear()
    steps = ["/Operator", f"go to {bank.url('/sign-in')}", 'type ${BANK_OTP} into "Code"', 'click "Verify"',
             "ask Shall I go on?", f"go to {bank.url('/last')}", "extract #last"]
    request_id = submit(client, api_key, {"executionMode": "cloud_browser", "prompt": "\n".join(steps),
                                          "secretVariables": {"BANK_OTP": URI}}).get_json()["requestId"]
    body = wait_for_status(client, api_key, request_id, statuses=("input-required", "error"), timeout=120)
    assert body["status"] == "input-required", body
    assert client.post(f"/fast/v2/remote-dispatch/responses/{request_id}/input", headers={"x-api-key": api_key},
                       json={"answer": "yes"}).status_code == 202
    body = wait_for_status(client, api_key, request_id, timeout=120)
    assert body["status"] == "success", body
    # The site shows, after the answer, the code the run typed before the question: the resumed run hides it too.
    assert body["response"]["text"] == "Last code: ${BANK_OTP}"
    codes_nowhere(client, api_key, request_id, bank.received, browser_worker.output())


def test_a_recording_keeps_no_run_of_a_code_a_page_echoed(client, api_key, bank, browser_worker):
    typed = []
    steps = ["/Operator", f"go to {bank.url('/keystrokes')}", 'type ${BANK_OTP} into "Code"', "extract #spaced"]
    submitted = submit(client, api_key, {"executionMode": "cloud_browser", "prompt": "\n".join(steps),
                                         "secretVariables": {"BANK_OTP": URI}})
    assert submitted.status_code == 202, submitted.get_json()
    request_id = submitted.get_json()["requestId"]
    body = wait_for_status(client, api_key, request_id, timeout=120)
    assert body["status"] == "success", body["response"]["actionTrace"]
    shown = json.dumps(client.get(f"/fast/v2/remote-dispatch/responses/{request_id}/recording",
                                  headers={"x-api-key": api_key}).get_json())
    assert '"spaced"' in shown  # the page was recorded (its text, the URI's issuer among it, is masked)
    # The code the run typed: this period's or the one before (the page echoed it, so the recording had it).
    now = time.time()
    typed = [code for code in {GENERATOR.code(now), GENERATOR.code(now - 30), GENERATOR.code(now - 60)}
             if body["response"]["text"] in (" ".join(code), "${BANK_OTP}")]
    assert typed, body["response"]["text"]
    for code in typed:
        for digits in (code, code[::-1]):
            for i in range(len(digits) - 3):  # any four digits of it in a row, spaced out or not
                piece = digits[i:i + 4]
                assert piece not in shown and " ".join(piece) not in shown, (piece, shown[:3000])


def typed_frame(client, api_key, bank, value):
    """The GIF frame after typing the secret `value` into the sign-in page's text field, as RGB bytes."""
    request_id = submit(client, api_key, {
        "executionMode": "cloud_browser", "generateGif": True, "secretVariables": {"BANK_OTP": value},
        "prompt": "\n".join(["/Operator", f"go to {bank.url('/sign-in')}", 'type ${BANK_OTP} into "Code"'])}
    ).get_json()["requestId"]
    body = wait_for_status(client, api_key, request_id, timeout=120)
    assert body["status"] == "success", body
    gif = Image.open(io.BytesIO(client.get(body["gifUrl"], headers={"x-api-key": api_key}).data))
    assert gif.n_frames == 2  # the page, then the page with the field filled
    gif.seek(1)
    return gif.convert("RGB").tobytes()


def test_gif_frames_of_a_task_with_secrets_show_its_text_fields_as_dots(client, api_key, bank, browser_worker):
    # The same page with different values typed draws the same picture: the digits are nowhere in it.
    assert typed_frame(client, api_key, bank, "111111") == typed_frame(client, api_key, bank, "987654")


def test_a_model_planned_sign_in_never_shows_the_model_the_seed_or_the_code(client, api_key, bank, app):
    model = ScriptedModel()
    worker = WorkerProcess(queues="tasks", concurrency=1, name="one-time-codes-model", env=model.env(MAX_STEPS=8))
    try:
        bank.received.clear()
        model.script(
            tool_call("go_to", url=bank.url("/sign-in")),
            tool_call("type", text="${BANK_OTP}", target="Code"),
            tool_call("click", target="Verify"),
            tool_call("extract", selector="#result"),
            tool_call("answer", text="Signed in as ada"),
        )
        request_id = submit(client, api_key, {
            "executionMode": "cloud_browser", "prompt": "/Operator Sign in to the Loopback Bank with the code.",
            "secretVariables": {"BANK_OTP": URI}}).get_json()["requestId"]
        body = wait_for_status(client, api_key, request_id, timeout=120)
        assert body["status"] == "success", json.dumps(body)[:3000]
        (code,) = bank.received
        requests = model.recorded()
        last = model.bodies()[-1]["messages"]
        system = model.bodies()[0]["messages"][0]["content"]  # told the placeholder's name, never its value
        assert "${BANK_OTP} (a one-time code: each use types the current one)" in system
        assert any("Signed in as ada" in (m.get("content") or "") for m in last if m["role"] == "tool")
        # What the model read after typing: the field holds the placeholder, the next page's URL too.
        assert any("code=${BANK_OTP}" in (m.get("content") or "") for m in last if m["role"] == "tool")
        codes_nowhere(client, api_key, request_id, [code], worker.output(), *requests)
    finally:
        worker.stop()
        model.close()
