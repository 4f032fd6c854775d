"""A kept cloud session's browser is behind its own egress proxy: pages reach only what the policy allows."""
import pytest

from app.egress.proxy import proxies_under
from app.extensions import db
from app.models import CloudSession
from app.sessions import browsers
from tests.browser_pages import Canary, RecordingServer, UdpCanary
from tests.sdk_support import LiveService
from tests.test_browser_egress import SCRIPTS
from tests.test_sessions import api, create, run_and_wait, session_row

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _no_session_left(app):
    yield
    from app.sessions import service as sessions

    db.session.rollback()
    for session_id in db.session.query(CloudSession.id).filter(CloudSession.status != "ended").all():
        sessions.end(session_id[0], "terminated")


def test_a_sessions_pages_reach_nothing_but_the_allowed_server_and_its_proxy_ends_with_it(app, api_key):
    canary, udp = Canary(), UdpCanary()
    urls = {"canary": f"http://127.0.0.3:{canary.port}", "other": f"http://127.0.0.1:{canary.port}",
            "localhost": f"http://localhost:{canary.port}", "v6": f"http://[::1]:{canary.port}",
            "ws": f"ws://127.0.0.1:{canary.port}", "udp": udp.port, "proxy": "127.0.0.1:9"}
    page = RecordingServer({
        "/iframes": "".join(f'<iframe src="{urls[k]}/frame"></iframe>' for k in ("canary", "other", "v6")),
        "/scripts": SCRIPTS % urls,
        "/navigate": f'<script>location.href = "{urls["other"]}/navigated";</script>',
    })
    service = None
    try:
        # The web process (which starts the session's browser) and the worker both under the strict policy.
        service = LiveService(env={"ALLOW_PRIVATE_URLS": "false", "EGRESS_ALLOW_HOSTS": f"127.0.0.1:{page.port}"})
        created = create(service, api_key, session_name="egress")
        session_id = created["session_id"]
        egress = browsers.egress_dir(app.config, session_id)
        assert proxies_under(egress)  # the session's proxy runs beside its browser

        steps = [f"go to {page.url('/iframes')}", f"go to {page.url('/scripts')}", 'wait for "all settled"',
                 f"go to {page.url('/navigate')}"]
        body = run_and_wait(service, api_key, {"prompt": "\n".join(["/Operator", *steps]),
                                               "cloudBrowserSessionId": session_id})
        typed = run_and_wait(service, api_key, {"prompt": f"/Operator\ngo to {urls['canary']}/typed",
                                                "cloudBrowserSessionId": session_id})
        scheme = run_and_wait(service, api_key, {"prompt": "/Operator\ngo to file:///etc/hostname",
                                                 "cloudBrowserSessionId": session_id})

        assert canary.connections == [] and udp.datagrams == 0
        assert "/scripts" in [path for path, _ in page.requests]  # the allowed server was reached
        trace = body["response"]["actionTrace"]
        refused = " ".join(" ".join(entry.get("refused", [])) for entry in trace)
        for where in (f"127.0.0.3:{canary.port}", f"127.0.0.1:{canary.port}", f"[::1]:{canary.port}"):
            assert where in refused, (where, trace)
        assert "non-public address" in refused
        assert body["status"] == "error" and "Navigation refused by the egress policy" in body["response"]["text"]
        assert f"GET 127.0.0.3:{canary.port}" in " ".join(typed["response"]["actionTrace"][0].get("refused", []))
        assert "navigation refused: file scheme is not allowed" in scheme["response"]["text"]

        stopped = api(service, api_key, "POST", "/cloud-browser/stop-cloud-browser-session",
                      json={"session_id": session_id})
        assert stopped.status_code == 200 and stopped.json()["success"] is True
        assert proxies_under(egress) == [] and not egress.exists()
        assert session_row(session_id).status == "ended"
    finally:
        if service is not None:
            service.stop()
        page.close()
        canary.close()
        udp.close()


def test_a_session_whose_browser_cannot_start_leaves_no_proxy(app, tmp_path):
    config = {**app.config, "VAR_DIR": str(tmp_path), "CHROMEDRIVER_PATH": str(tmp_path / "no-chromedriver"),
              "SELENIUM_REMOTE_URL": None}
    with pytest.raises(browsers.LaunchFailed, match="no-chromedriver is not installed"):
        browsers.launch(config, "cbs_failing")
    egress = browsers.egress_dir(config, "cbs_failing")
    assert proxies_under(egress) == [] and not list(egress.glob("*"))
