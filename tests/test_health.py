"""Liveness, readiness and the keys CLI."""
from app import create_app


def test_healthz(client):
    assert client.get("/healthz").get_json() == {"status": "ok"}


def test_readyz_with_database_and_broker_up(client):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.get_json() == {"status": "ready"}


def test_readyz_is_503_when_the_broker_is_unreachable():
    broken = create_app({"BROKER_URL": "amqp://guest:guest@127.0.0.1:1//"})
    response = broken.test_client().get("/readyz")
    assert response.status_code == 503
    assert response.get_json() == {"error": "Service Unavailable",
                                   "message": "Not ready: broker: OperationalError"}


def test_readyz_is_503_when_the_database_is_unreachable():
    broken = create_app({"SQLALCHEMY_DATABASE_URI": "postgresql+psycopg2://postgres@127.0.0.1:1/x"})
    response = broken.test_client().get("/readyz")
    assert response.status_code == 503
    assert response.get_json()["message"].startswith("Not ready: database:")


def test_api_answers_503_with_error_body_when_the_database_is_down():
    broken = create_app({"SQLALCHEMY_DATABASE_URI": "postgresql+psycopg2://postgres@127.0.0.1:1/x"})
    response = broken.test_client().post("/fast/v2/remote-dispatch", json={"prompt": "x"},
                                         headers={"x-api-key": "k"})
    assert response.status_code == 503
    assert response.get_json()["error"] == "Service Unavailable"


def test_keys_cli_create_list_revoke(app):
    runner = app.test_cli_runner()
    created = runner.invoke(args=["keys", "create", "--name", "ops", "--plan", "pro"])
    assert created.exit_code == 0, created.output
    raw = next(line.split()[-1] for line in created.output.splitlines() if line.startswith("api key:"))
    assert raw.startswith("rd_")
    assert "whsec_" in created.output
    listing = runner.invoke(args=["keys", "list"]).output
    assert "ops" in listing and "pro" in listing and raw not in listing
    client = app.test_client()
    ok = client.post("/fast/v2/remote-dispatch", json={"prompt": "answer x", "executionMode": "cloud"},
                     headers={"x-api-key": raw})
    assert ok.status_code == 202
    assert runner.invoke(args=["keys", "revoke", "ops"]).exit_code == 0
    denied = client.post("/fast/v2/remote-dispatch", json={"prompt": "answer x", "executionMode": "cloud"},
                         headers={"x-api-key": raw})
    assert denied.status_code == 401
