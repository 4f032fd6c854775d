"""Attachments: uploads (multipart and the SDK's presigned flow), limits, isolation between keys,
expiry, and the general agent reading text, CSV, JSON and PDF files."""
import io
import json

import pytest
from sqlalchemy import select, update

from app.extensions import db
from app.models import StoredFile, now_plus
from tests.agent_support import run
from tests.conftest import submit
from workers import sweeps

FILES = "/fast/v2/files"
PRESIGN = "/fast/v2/remote-dispatch/generate-file-upload-presigned-post"


def upload(client, key, data, filename, content_type=None):
    return client.post(FILES, headers={"x-api-key": key}, content_type="multipart/form-data",
                       data={"file": (io.BytesIO(data), filename, content_type)})


def presign(client, key, filename="notes.txt"):
    response = client.post(PRESIGN, json={"filename": filename}, headers={"x-api-key": key})
    assert response.status_code == 200, response.get_json()
    return response.get_json()


def post_presigned(client, presigned, data, filename="notes.txt"):
    """What the SDK does: the fields plus `file`, no API key."""
    path = presigned["url"].split("://", 1)[1].split("/", 1)[1]
    return client.post("/" + path, content_type="multipart/form-data",
                       data={**presigned["fields"], "file": (io.BytesIO(data), filename)})


def tiny_pdf(lines):
    """A one-page PDF with text (hand-written objects, correct xref offsets)."""
    content = "BT /F1 12 Tf 72 720 Td " + " ".join(f"({line}) Tj 0 -16 Td" for line in lines) + " ET"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        "/Resources << /Font << /F1 5 0 R >> >> >>",
        f"<< /Length {len(content)} >>\nstream\n{content}\nendstream",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = b"%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return out


def test_upload_returns_the_key_and_what_was_stored(client, api_key):
    response = upload(client, api_key, b"name,plan\nAda,gold\n", "customers.csv")
    assert response.status_code == 201
    body = response.get_json()
    assert body["key"].startswith("file_")
    assert body == {"key": body["key"], "filename": "customers.csv", "size": 19, "contentType": "text/csv"}
    stored = db.session.get(StoredFile, body["key"])
    assert stored.data == b"name,plan\nAda,gold\n"


def test_upload_needs_a_key_and_a_file(client, api_key):
    assert client.post(FILES, data={"file": (io.BytesIO(b"x"), "a.txt")},
                       content_type="multipart/form-data").status_code == 401
    response = client.post(FILES, headers={"x-api-key": api_key}, data={"other": "x"},
                           content_type="multipart/form-data")
    assert response.status_code == 400
    assert "file" in response.get_json()["message"]


def test_oversized_upload_is_refused(app, client, api_key, monkeypatch):
    monkeypatch.setitem(app.config, "MAX_UPLOAD_BYTES", 1000)
    response = upload(client, api_key, b"x" * 1001, "big.txt")
    assert response.status_code == 413
    assert response.get_json()["error"] == "Payload Too Large"
    assert "1000 bytes" in response.get_json()["message"]
    assert db.session.execute(select(StoredFile)).first() is None
    assert upload(client, api_key, b"x" * 1000, "fits.txt").status_code == 201


class Unreadable(io.RawIOBase):
    """A request body that must not be read."""

    def readable(self):
        return True

    def seekable(self):
        return True

    def seek(self, offset, whence=0):
        return 0

    def readinto(self, buffer):
        raise AssertionError("the body of an oversized upload was read")


def test_a_declared_oversized_upload_is_refused_before_its_body_is_read(app, api_key):
    from werkzeug.test import EnvironBuilder

    environ = EnvironBuilder(path=FILES, method="POST", headers={"x-api-key": api_key},
                             content_type="multipart/form-data; boundary=xyz").get_environ()
    environ.update({"CONTENT_LENGTH": str(10 ** 10), "wsgi.input": Unreadable()})
    started = []
    db.session.remove()
    body = b"".join(app.wsgi_app(environ, lambda status, headers: started.append(status)))
    assert started == ["413 REQUEST ENTITY TOO LARGE"]
    assert json.loads(body)["error"] == "Payload Too Large"


def test_presigned_upload_like_the_sdk(client, api_key):
    presigned = presign(client, api_key, "notes.txt")
    assert presigned["url"].endswith("/fast/v2/files/presigned-upload")
    assert set(presigned["fields"]) == {"key", "policy"}
    response = post_presigned(client, presigned, b"hello")
    assert response.status_code == 201, response.get_json()
    assert response.get_json()["key"] == presigned["fields"]["key"]
    assert response.get_json()["filename"] == "notes.txt"
    # The file belongs to the key that asked for the policy.
    body = {"prompt": "hi", "executionMode": "cloud", "attachment": {"key": presigned["fields"]["key"]}}
    assert submit(client, api_key, body).status_code == 202
    # A policy is good for one upload.
    assert post_presigned(client, presigned, b"again").status_code == 409


def test_the_presigned_url_is_built_on_public_url_never_the_host_header(app, client, api_key, monkeypatch):
    monkeypatch.setitem(app.config, "PUBLIC_URL", "https://dispatch.example.com")
    response = client.post(PRESIGN, json={"filename": "a.txt"}, headers={"x-api-key": api_key, "Host": "evil.example"})
    assert response.get_json()["url"] == "https://dispatch.example.com/fast/v2/files/presigned-upload"


def test_public_url_defaults_to_the_bind_address_and_must_be_a_base_url(monkeypatch):
    from config import settings

    monkeypatch.delenv("PUBLIC_URL", raising=False)
    monkeypatch.delenv("HOST", raising=False)
    monkeypatch.setenv("PORT", "8123")
    assert settings.load()["PUBLIC_URL"] == "http://127.0.0.1:8123"
    monkeypatch.setenv("HOST", "0.0.0.0")  # listens everywhere: its own loopback address still reaches it
    assert settings.load()["PUBLIC_URL"] == "http://127.0.0.1:8123"
    monkeypatch.setenv("PUBLIC_URL", "https://dispatch.example.com/rd/")
    assert settings.load()["PUBLIC_URL"] == "https://dispatch.example.com/rd"
    for bad in ("dispatch.example.com", "ftp://dispatch.example.com", "https://u:p@dispatch.example.com",
                "https://dispatch.example.com/?next=x"):
        monkeypatch.setenv("PUBLIC_URL", bad)
        with pytest.raises(ValueError, match="PUBLIC_URL must be"):
            settings.load()


def test_presigned_upload_refuses_tampered_and_expired_policies(app, client, api_key, monkeypatch):
    presigned = presign(client, api_key)
    policy = presigned["fields"]["policy"]
    forged = policy[:-3] + ("AAA" if policy[-3:] != "AAA" else "BBB")
    tampered = {**presigned, "fields": {**presigned["fields"], "policy": forged}}
    response = post_presigned(client, tampered, b"x")
    assert response.status_code == 403
    assert response.get_json()["error"] == "Forbidden" and "signature" in response.get_json()["message"]

    other_key = {**presigned, "fields": {**presigned["fields"], "key": "file_chosen-by-the-caller"}}
    response = post_presigned(client, other_key, b"x")
    assert response.status_code == 403 and "does not match" in response.get_json()["message"]

    monkeypatch.setitem(app.config, "PRESIGNED_POST_TTL_SECONDS", -1)
    response = post_presigned(client, presign(client, api_key), b"x")
    assert response.status_code == 403 and "expired" in response.get_json()["message"]
    assert db.session.execute(select(StoredFile)).first() is None


def test_presigned_upload_keeps_the_size_limit_it_was_signed_with(app, client, api_key, monkeypatch):
    monkeypatch.setitem(app.config, "MAX_UPLOAD_BYTES", 100)
    presigned = presign(client, api_key)
    monkeypatch.setitem(app.config, "MAX_UPLOAD_BYTES", 10_000)
    response = post_presigned(client, presigned, b"x" * 101)
    assert response.status_code == 413
    assert post_presigned(client, presigned, b"x" * 100).status_code == 201


@pytest.mark.parametrize("form", ["attachments", "attachment", "inputVariables"])
def test_a_task_cannot_attach_another_keys_file(client, api_key, other_key, form):
    key = upload(client, api_key, b"secret plans", "plans.txt").get_json()["key"]
    reference = {"attachments": {"attachments": [{"key": key}]},
                 "attachment": {"attachment": {"key": key}},
                 "inputVariables": {"inputVariables": {"doc": {"source": "remoteDispatchUpload", "id": key,
                                                               "filename": "plans.txt", "mimeType": "text/plain"}}},
                 }[form]
    response = submit(client, other_key, {"prompt": "read it", "executionMode": "cloud", **reference})
    assert response.status_code == 400
    assert response.get_json()["error"] == "Invalid Request"
    assert f"'{key}'" in response.get_json()["message"]
    assert submit(client, api_key, {"prompt": "read it", "executionMode": "cloud", **reference}).status_code == 202


def test_unknown_attachment_key_is_refused(client, api_key):
    response = submit(client, api_key, {"prompt": "x", "executionMode": "cloud", "attachments": [{"key": "nope"}]})
    assert response.status_code == 400 and "'nope'" in response.get_json()["message"]


def test_files_expire_after_their_ttl(app, client, api_key):
    old = upload(client, api_key, b"old", "old.txt").get_json()["key"]
    new = upload(client, api_key, b"new", "new.txt").get_json()["key"]
    db.session.execute(update(StoredFile).where(StoredFile.key == old)
                       .values(created_at=now_plus(-app.config["FILE_TTL_SECONDS"] - 60)))
    db.session.commit()
    assert sweeps.purge_expired_files() == 1
    assert db.session.get(StoredFile, old) is None and db.session.get(StoredFile, new) is not None
    response = submit(client, api_key, {"prompt": "x", "executionMode": "cloud", "attachments": [{"key": old}]})
    assert response.status_code == 400


def test_the_expiry_sweep_is_in_the_beat_schedule():
    from workers.celery import app as celery

    assert any(entry["task"] == "workers.purge_expired_files" for entry in celery.conf.beat_schedule.values())


@pytest.mark.slow
def test_the_general_agent_reads_csv_json_pdf_and_says_what_it_cannot(client, api_key, worker):
    csv_key = upload(client, api_key, b"name,plan\nAda,gold\nGrace,silver\n", "customers.csv").get_json()["key"]
    json_key = upload(client, api_key, json.dumps({"order": 42}).encode(), "order.json").get_json()["key"]
    pdf = tiny_pdf(["Invoice 2026-117", "Total due: 99 EUR"])
    pdf_key = upload(client, api_key, pdf, "invoice.pdf").get_json()["key"]
    png_key = upload(client, api_key, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "logo.png").get_json()["key"]
    attachments = [{"key": k} for k in (csv_key, json_key, pdf_key, png_key)]

    _, body = run(client, api_key, {"prompt": f"read attachment {csv_key}", "attachments": attachments})
    assert body["status"] == "success", body
    assert body["response"]["output"]["content"].startswith("customers.csv: CSV, 2 rows; columns: name, plan")
    assert "Grace,silver" in body["response"]["output"]["content"]

    _, body = run(client, api_key, {"prompt": f"read attachment {json_key}", "attachments": attachments})
    assert '"order": 42' in body["response"]["output"]["content"]

    _, body = run(client, api_key, {"prompt": f"read attachment {pdf_key}", "attachments": attachments})
    assert body["status"] == "success", body
    content = body["response"]["output"]["content"]
    assert content.startswith("invoice.pdf: PDF, 1 pages")
    assert "Invoice 2026-117" in content and "Total due: 99 EUR" in content

    _, body = run(client, api_key, {"prompt": f"read attachment {png_key}", "attachments": attachments})
    assert body["status"] == "error"
    assert "logo.png" in body["response"]["output"]["content"]
    assert "only plain text, CSV, JSON and PDF" in body["response"]["output"]["content"]


@pytest.mark.slow
def test_the_sdks_input_variable_files_are_readable_and_listed(client, api_key, worker):
    key = upload(client, api_key, b"remember the milk", "todo.txt").get_json()["key"]
    _, body = run(client, api_key, {"prompt": "read attachment", "inputVariables": {"todo": {
        "source": "remoteDispatchUpload", "id": key, "filename": "todo.txt", "mimeType": "text/plain"}}})
    assert body["status"] == "success", body
    assert body["response"]["output"]["content"] == "todo.txt:\nremember the milk"


@pytest.mark.slow
def test_the_upload_step_needs_a_browser_and_an_attached_file(client, api_key, worker):
    key = upload(client, api_key, b"%PDF-1.4 cv", "cv.pdf").get_json()["key"]
    _, body = run(client, api_key, {"prompt": f'/Operator\nupload "{key}" into "Resume"',
                                    "attachments": [{"key": key}]})
    assert body["status"] == "error"
    assert "needs a browser" in body["response"]["output"]["content"]
    assert body["response"]["actionTrace"][0]["action"] == f'upload {key} into "Resume"'


def test_a_chunked_upload_is_cut_off_at_the_limit(app, api_key, monkeypatch):
    """No Content-Length (chunked): the body is read only up to the limit, then 413."""
    from werkzeug.test import EnvironBuilder

    monkeypatch.setitem(app.config, "MAX_UPLOAD_BYTES", 1000)
    head = (b"--xyz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.bin\"\r\n"
            b"Content-Type: application/octet-stream\r\n\r\n")

    class Endless(io.RawIOBase):
        """A body that never ends: counts what the server read."""
        served = 0

        def readable(self):
            return True

        def readinto(self, buffer):
            chunk = (head if self.served == 0 else b"x" * len(buffer))[:len(buffer)]
            buffer[:len(chunk)] = chunk
            Endless.served += len(chunk)
            return len(chunk)

    environ = EnvironBuilder(path=FILES, method="POST", headers={"x-api-key": api_key},
                             content_type="multipart/form-data; boundary=xyz").get_environ()
    environ.pop("CONTENT_LENGTH", None)
    environ.update({"wsgi.input": io.BufferedReader(Endless()), "wsgi.input_terminated": True})
    started = []
    db.session.remove()
    body = b"".join(app.wsgi_app(environ, lambda status, headers: started.append(status)))
    assert started == ["413 REQUEST ENTITY TOO LARGE"], body
    assert Endless.served < 1000 + 64 * 1024 + 64 * 1024  # the cap plus one read buffer, not the whole stream


# One serving rule for every route that hands out a stored file's bytes: a download, never a page on our origin.

PAGE = b"<html><body><script>document.title = 'ran on the API origin'</script>hello</body></html>"
SERVED = {"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox",
          "Cache-Control": "private, no-store", "Content-Disposition": "attachment; filename=page.html"}


def test_every_file_route_serves_a_downloaded_page_as_a_download_only(app, client, tmp_path):
    from app.cli import create_key
    from app.files import service as files
    from app.sessions import service as sessions

    (tmp_path / "page.html").write_bytes(PAGE)
    row, api_key = create_key("pages", "free")
    key_id = row.id
    (task_file,) = files.keep_downloads(key_id, str(tmp_path), ["page.html"], task_id="t-1")
    (session_file,) = files.keep_downloads(key_id, str(tmp_path), ["page.html"], session_id="s-1")
    token = sessions._download_signer().dumps({"s": "s-1", "k": session_file["file"]["key"]})
    served = [client.get(f"{FILES}/{task_file['file']['key']}", headers={"x-api-key": api_key}),
              client.get(f"/fast/v2/cloud-browser/replay/file/{token}")]  # the link needs no key
    for response in served:
        assert response.status_code == 200 and response.data == PAGE
        assert response.mimetype == "text/html"
        assert {name: response.headers.get(name) for name in SERVED} == SERVED, response.request.path
