"""The size cap of named profiles (PROFILE_MAX_BYTES), in a module of its own: its worker has a cap of 100 bytes, and
no other worker may take its task."""
import json
import os

import pytest

from app.extensions import db
from app.models import ApiKey
from app.profiles import service as profiles
from tests.conftest import WorkerProcess, wait_until
from tests.page_server import PageServer
from workers.browser.egress import BrowserEgressProxy
from workers.browser.launch import browsers_dir
from workers.browser.selenium_driver import SeleniumBrowser
from tests.test_profiles import SIGNED_OUT, actions, check, listing, sign_in, site  # noqa: F401  (site: a fixture)

pytestmark = pytest.mark.slow


def test_a_state_over_the_size_cap_is_not_saved_and_the_trace_says_so(client, api_key, site):
    worker = WorkerProcess(queues="tasks", concurrency=1, env={"PROFILE_MAX_BYTES": "100"}, name="cap")
    try:
        done = sign_in(client, api_key, site, {"name": "big", "persist": True})
        assert any("profile 'big' not saved: its state is" in a and "over PROFILE_MAX_BYTES (100)" in a
                   for a in actions(done)), actions(done)
        assert listing(client, api_key)["big"]["size"] == 0
        assert check(client, api_key, site, {"name": "big"}) == SIGNED_OUT
    finally:
        worker.stop()


# 40 records of 100 KB each in one database: 4 MB of IndexedDB on a page.
FILL = """<html><head><title>Fill</title></head><body><script>
var opening = indexedDB.open('big');
opening.onupgradeneeded = function () { opening.result.createObjectStore('blobs'); };
opening.onsuccess = function () {
  var tx = opening.result.transaction('blobs', 'readwrite'), chunk = 'x'.repeat(100 * 1024);
  for (var i = 0; i < 40; i++) tx.objectStore('blobs').put(chunk + i, 'k' + i);
  tx.oncomplete = function () { document.title = 'filled'; };
};
</script></body></html>"""


def test_a_state_over_the_cap_is_refused_before_it_is_read_whole(app, api_key):
    """What the worker receives of a profile's IndexedDB is bounded by PROFILE_MAX_BYTES: a page's 4 MB database
    against a cap of 200 KB is not carried across (the read stops past the cap), and the save says why."""
    limit = 200 * 1024
    server = PageServer({"/fill": FILL})
    with BrowserEgressProxy({"VAR_DIR": os.environ["VAR_DIR"], "ALLOW_PRIVATE_URLS": True}, "profile-cap") as proxy:
        browser = SeleniumBrowser(label="profile-cap", profile_root=browsers_dir(os.environ["VAR_DIR"]),
                                  proxy=proxy.address, devtools=True)
        try:
            browser.open(server.url("/fill"))
            wait_until(lambda: browser.driver.title == "filled", what="the page's IndexedDB to be written")
            replies, send = [], browser._cdp

            def counted(command, params=None):
                reply = send(command, params)
                replies.append(len(json.dumps(reply)))
                return reply

            browser._cdp = counted
            state = browser.profile_state(None, limit=limit)
        finally:
            browser.close()
            server.close()
    assert max(replies) < limit  # nothing near the database's 4 MB reached the worker
    key_id = db.session.query(ApiKey.id).filter(ApiKey.name == "alice").scalar()
    profiles.claim(key_id, "big", "task-big")
    db.session.commit()
    app.config["PROFILE_MAX_BYTES"], saved = limit, app.config["PROFILE_MAX_BYTES"]
    try:
        said = profiles.save(key_id, "big", "task-big", state)
    finally:
        app.config["PROFILE_MAX_BYTES"] = saved
    assert said.startswith(f"profile 'big' not saved: its state is over PROFILE_MAX_BYTES ({limit}):"), said
    assert profiles.listing(key_id)["profiles"][0]["size"] == 0
