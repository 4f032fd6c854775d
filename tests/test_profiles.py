"""Named profiles per API key: a sign-in (cookie + localStorage, or IndexedDB) saved by a `persist` task is there for
the key's next task and kept session with the profile, not for a task without it nor for another key's profile of the
same name; sealed in the database, nothing of it on disk once the browsers end; delete; the size cap; one writer at a
time."""
import os
import tempfile
import time

import pytest
from sqlalchemy import text

from app.extensions import db
from tests.conftest import WorkerProcess, submit, wait_for_status
from tests.page_server import PageServer

pytestmark = pytest.mark.slow
SID = "pr0file-s1gn-in-c00kie"
TOKEN = "pr0file-l0cal-t0ken"
LOGIN = f"""<html><head><title>Sign in</title></head><body><h1>Sign in</h1>
<button onclick="document.cookie = 'sid={SID}; path=/; max-age=86400'; localStorage.setItem('token', '{TOKEN}');
  location.href = '/check';">Sign in</button></body></html>"""
CHECK = f"""<html><head><title>Check</title></head><body><h1>Check</h1><p id="state"></p><script>
document.getElementById('state').textContent =
  'cookie=' + (document.cookie.indexOf('sid={SID}') >= 0 ? 'yes' : 'no') +
  ' local=' + (localStorage.getItem('token') === '{TOKEN}' ? 'yes' : 'no');
</script></body></html>"""
SIGNED_IN, SIGNED_OUT = "cookie=yes local=yes", "cookie=no local=no"
# A sign-in that keeps its token in IndexedDB, as Firebase Auth does (a store keyed by an in-line key path), with a
# Date and bytes beside it, which structured-clone but are not JSON.
IDB_TOKEN = "pr0file-1ndexeddb-t0ken"
SIGNED_AT = 1767225600000
IDB_OPEN = """function withStore(mode, use, missing) {
  var opening = indexedDB.open('authDb');
  opening.onupgradeneeded = function (event) { if (missing) { opening.transaction.abort(); missing(); }
                                               else opening.result.createObjectStore('auth', {keyPath: 'key'}); };
  opening.onsuccess = function () { var tx = opening.result.transaction('auth', mode);
    use(tx.objectStore('auth')); tx.oncomplete = function () { opening.result.close(); }; };
}"""
IDB_LOGIN = f"""<html><head><title>Sign in</title></head><body><h1>Sign in</h1><p id="state"></p><script>{IDB_OPEN}
function signIn() {{ withStore('readwrite', function (store) {{
  store.put({{key: 'user', token: '{IDB_TOKEN}', signedInAt: new Date({SIGNED_AT}), key32: new Uint8Array([7, 0, 255])}});
}}); setTimeout(function () {{ document.getElementById('state').textContent = 'stored'; }}, 300); }}
</script><button onclick="signIn()">Sign in</button></body></html>"""
IDB_CHECK = f"""<html><head><title>Check</title></head><body><h1>Check</h1><p id="state"></p><script>{IDB_OPEN}
function say(text) {{ document.getElementById('state').textContent = text; }}
withStore('readonly', function (store) {{ var read = store.get('user'); read.onsuccess = function () {{
  var user = read.result || {{}};
  say('idb=' + (user.token === '{IDB_TOKEN}' ? 'yes' : 'no') +
      ' date=' + (user.signedInAt instanceof Date && user.signedInAt.getTime() === {SIGNED_AT} ? 'yes' : 'no') +
      ' bytes=' + (user.key32 instanceof Uint8Array && user.key32.join() === '7,0,255' ? 'yes' : 'no'));
}}; }}, function () {{ say('idb=no date=no bytes=no'); }});
</script></body></html>"""
IDB_LOGOUT = """<html><head><title>Sign out</title></head><body><h1>Sign out</h1><p id="state"></p><script>
var deleting = indexedDB.deleteDatabase('authDb');
deleting.onsuccess = function () { document.getElementById('state').textContent = 'signed out'; };
</script></body></html>"""
CREATE = "/fast/v2/cloud-browser/create-and-initialize-cloud-browser-session"


@pytest.fixture(scope="module")
def site():
    server = PageServer({"/login": LOGIN, "/check": CHECK, "/idb/login": IDB_LOGIN, "/idb/check": IDB_CHECK,
                         "/idb/logout": IDB_LOGOUT})
    yield server
    server.close()


@pytest.fixture(scope="module")
def tasks_worker(app):
    proc = WorkerProcess(queues="tasks", concurrency=1, env={"BROWSER_POOL_SIZE": "1"}, name="profiles")
    yield proc
    proc.stop()


def run(client, key, site, steps, profile=None):
    body = {"prompt": "\n".join(["/Operator", *steps]), "executionMode": "cloud_browser"}
    if profile is not None:
        body["profile"] = profile
    reply = submit(client, key, body)
    assert reply.status_code == 202, reply.get_json()
    done = wait_for_status(client, key, reply.get_json()["requestId"], timeout=120)
    assert done["status"] == "success", done
    return done


def sign_in(client, key, site, profile):
    return run(client, key, site, [f"go to {site.url('/login')}", 'click "Sign in"', "extract #state"], profile)


def check(client, key, site, profile=None):
    return run(client, key, site, [f"go to {site.url('/check')}", "extract #state"], profile)["response"]["text"]


def actions(body):
    return [entry["action"] for entry in body["response"]["actionTrace"]]


def listing(client, key):
    reply = client.get("/fast/v2/profiles", headers={"x-api-key": key})
    assert reply.status_code == 200, reply.get_json()
    return {item["name"]: item for item in reply.get_json()["profiles"]}


def files_holding(secret, since, *roots):
    """Files under `roots` written since `since` (time.time()) whose bytes hold `secret`: what a browser of the test
    left behind (a checkout under the temporary folder, this one or another, names the secret in its tests)."""
    found = []
    for root in roots:
        for folder, _, names in os.walk(root):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    if os.stat(path).st_mtime < since:
                        continue
                    with open(path, "rb") as handle:
                        if secret.encode() in handle.read():
                            found.append(path)
                except OSError:
                    continue
    return found


def test_a_sign_in_saved_by_a_profile_is_there_for_the_next_task_and_session_only(
        client, api_key, other_key, site, tasks_worker):
    started = time.time()
    done = sign_in(client, api_key, site, {"name": "shop", "persist": True})
    assert done["response"]["text"] == SIGNED_IN
    assert any(a.startswith("profile 'shop' saved (1 cookie, localStorage of 1 origin") for a in actions(done))
    profile = listing(client, api_key)["shop"]
    assert profile["size"] > 0 and profile["updatedAt"] and profile["lastUsedAt"]

    later = run(client, api_key, site, [f"go to {site.url('/check')}", "extract #state"], {"name": "shop"})
    assert later["response"]["text"] == SIGNED_IN  # a reader: cookie and localStorage are back
    assert "profile 'shop' loaded (1 cookie, localStorage of 1 origin)" in actions(later)
    assert check(client, api_key, site) == SIGNED_OUT  # no profile: an empty browser
    assert check(client, other_key, site, {"name": "shop"}) == SIGNED_OUT  # another key's "shop" is another profile
    assert listing(client, other_key) == {}

    reply = client.post(CREATE, headers={"x-api-key": api_key}, json={"profile": {"name": "shop"}})
    assert reply.status_code == 200, reply.get_json()
    session_id = reply.get_json()["session_id"]
    try:
        in_session = submit(client, api_key, {"prompt": f"/Operator\ngo to {site.url('/check')}\nextract #state",
                                              "cloudBrowserSessionId": session_id})
        body = wait_for_status(client, api_key, in_session.get_json()["requestId"], timeout=120)
        assert body["response"]["text"] == SIGNED_IN, body
    finally:
        client.post("/fast/v2/cloud-browser/stop-cloud-browser-session", headers={"x-api-key": api_key},
                    json={"session_id": session_id})

    # Sealed at rest: the raw rows hold neither value; and no browser left a file with them behind.
    raw = db.session.execute(text("SELECT string_agg(profiles::text, '') FROM profiles")).scalar_one()
    db.session.commit()
    assert raw and SID not in raw and TOKEN not in raw
    roots = (os.environ["VAR_DIR"], tempfile.gettempdir())
    assert files_holding(SID, started, *roots) == [] and files_holding(TOKEN, started, *roots) == []
    assert SID not in tasks_worker.output()


def test_a_sign_in_kept_in_indexeddb_is_there_for_the_next_task(client, api_key, site, tasks_worker):
    done = run(client, api_key, site, [f"go to {site.url('/idb/login')}", 'click "Sign in"', 'wait for "stored"'],
               {"name": "app", "persist": True})
    assert any("IndexedDB: 1 database of 1 origin" in a for a in actions(done)), actions(done)

    check_idb = [f"go to {site.url('/idb/check')}", 'wait for "idb="', "extract #state"]
    later = run(client, api_key, site, check_idb, {"name": "app"})
    assert later["response"]["text"] == "idb=yes date=yes bytes=yes"
    assert run(client, api_key, site, check_idb)["response"]["text"] == "idb=no date=no bytes=no"  # no profile
    # A sign-out that deletes the database stays signed out on the next page of the task, and is what it saves.
    signed_out = run(client, api_key, site, [f"go to {site.url('/idb/logout')}", 'wait for "signed out"', *check_idb],
                     {"name": "app", "persist": True})
    assert signed_out["response"]["text"] == "idb=no date=no bytes=no"
    assert run(client, api_key, site, check_idb, {"name": "app"})["response"]["text"] == "idb=no date=no bytes=no"
    raw = db.session.execute(text("SELECT string_agg(profiles::text, '') FROM profiles")).scalar_one()
    db.session.commit()
    assert IDB_TOKEN not in raw


def test_a_persist_session_saves_its_sign_in_when_it_stops(client, api_key, site, tasks_worker):
    reply = client.post(CREATE, headers={"x-api-key": api_key}, json={"profile": {"name": "desk", "persist": True}})
    assert reply.status_code == 200, reply.get_json()
    session_id = reply.get_json()["session_id"]
    try:
        task = submit(client, api_key, {"prompt": f"/Operator\ngo to {site.url('/login')}\nclick \"Sign in\"",
                                        "cloudBrowserSessionId": session_id})
        assert wait_for_status(client, api_key, task.get_json()["requestId"], timeout=120)["status"] == "success"
    finally:
        stopped = client.post("/fast/v2/cloud-browser/stop-cloud-browser-session", headers={"x-api-key": api_key},
                              json={"session_id": session_id})
        assert stopped.status_code == 200
    assert listing(client, api_key)["desk"]["size"] > 0
    assert check(client, api_key, site, {"name": "desk"}) == SIGNED_IN


def test_a_second_persist_use_is_refused_naming_the_writer(client, api_key):
    """No worker runs: the first task stays pending, the profile's writer."""
    first = submit(client, api_key, {"prompt": "/Operator\ngo to https://example.com", "executionMode": "cloud_browser",
                                     "profile": {"name": "bank", "persist": True}})
    assert first.status_code == 202, first.get_json()
    holder = first.get_json()["requestId"]
    second = submit(client, api_key, {"prompt": "/Operator\ngo to https://example.com",
                                      "executionMode": "cloud_browser", "profile": {"name": "bank", "persist": True}})
    assert second.status_code == 409
    assert second.get_json()["error"] == "Profile In Use" and holder in second.get_json()["message"]
    session = client.post(CREATE, headers={"x-api-key": api_key}, json={"profile": {"name": "bank", "persist": True}})
    assert session.status_code == 409 and holder in session.get_json()["message"]
    reader = submit(client, api_key, {"prompt": "/Operator\ngo to https://example.com",
                                      "executionMode": "cloud_browser", "profile": {"name": "bank"}})
    assert reader.status_code == 202  # any number of readers
    client.post(f"/fast/v2/remote-dispatch/responses/{holder}/cancel", headers={"x-api-key": api_key})
    wait_for_status(client, api_key, holder, statuses=("error",), timeout=30)
    again = submit(client, api_key, {"prompt": "/Operator\ngo to https://example.com",
                                     "executionMode": "cloud_browser", "profile": {"name": "bank", "persist": True}})
    assert again.status_code == 202, again.get_json()  # the writer ended: the next one may write


def test_delete_removes_the_keys_profile_only(client, api_key, other_key, site, tasks_worker):
    sign_in(client, api_key, site, {"name": "gone", "persist": True})
    assert client.delete("/fast/v2/profiles/gone", headers={"x-api-key": other_key}).status_code == 404
    assert client.delete("/fast/v2/profiles/gone", headers={"x-api-key": api_key}).status_code == 204
    assert listing(client, api_key) == {}
    assert client.delete("/fast/v2/profiles/gone", headers={"x-api-key": api_key}).status_code == 404
    assert check(client, api_key, site, {"name": "gone"}) == SIGNED_OUT


@pytest.mark.parametrize("body, why", [
    ({"executionMode": "cloud_browser", "profile": {"name": "a b"}}, "letters, digits"),
    ({"executionMode": "cloud_browser", "profile": {"name": "x" * 101}}, "1 to 100 characters"),
    ({"executionMode": "cloud_browser", "profile": {"persist": True}}, "Missing data"),
    ({"executionMode": "client", "browserWindowId": "w", "profile": {"name": "a"}}, "executionMode 'cloud_browser'"),
    ({"executionMode": "cloud", "profile": {"name": "a"}}, "executionMode 'cloud_browser'"),
    ({"executionMode": "cloud_browser", "cloudBrowserSessionId": "cbs_x", "profile": {"name": "a"}},
     "when the session is created"),
    ({"executionMode": "cloud_browser", "profile": {"name": "a", "persist": "yes"}}, "persist"),
])
def test_a_profile_that_cannot_apply_is_a_400_naming_the_field(client, api_key, body, why):
    reply = submit(client, api_key, {"prompt": "/Operator\ngo to https://example.com", **body})
    assert reply.status_code == 400, reply.get_json()
    assert "profile" in reply.get_json()["message"] and why in reply.get_json()["message"]


def test_the_general_agent_with_a_profile_is_a_400(client, api_key):
    reply = submit(client, api_key, {"prompt": "what is 2+2", "executionMode": "cloud_browser",
                                     "profile": {"name": "a"}})
    assert reply.status_code == 400 and "profile" in reply.get_json()["message"]
