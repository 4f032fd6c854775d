"""The repository's own documentation holds: docs/api.md is current, the README links only to
files the repository has, and every `remote-dispatch` command the README shows runs verbatim."""
import json
import os
import re
import subprocess

from app.apidocs import markdown
from app.cli import openapi_document
from tests.conftest import ROOT

README = (ROOT / "README.md").read_text()


def test_api_reference_is_generated_from_the_current_openapi_document():
    assert (ROOT / "docs" / "api.md").read_text() == markdown(json.loads(openapi_document())), \
        "docs/api.md is stale: run `make docs`"


def test_documents_link_only_to_files_in_the_repository():
    for doc in (ROOT / "README.md", ROOT / "docs" / "design.md", ROOT / "docs" / "api.md"):
        text = doc.read_text()
        assert "../shared" not in text and "shared/spec" not in text and "DESIGN.md" not in text
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
            if not target.startswith(("http://", "https://")):
                assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"


def readme_commands():
    blocks = re.findall(r"```sh\n(.*?)```", README, re.S)
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()
            if line.startswith(".venv/bin/remote-dispatch")]


def test_every_remote_dispatch_command_in_the_readme_runs_verbatim(tmp_path):
    commands = readme_commands()
    assert any(" keys create " in c for c in commands) and any(c.endswith("keys list") for c in commands)
    env = {**os.environ, "VAR_DIR": str(tmp_path)}  # its own database and keys, as a fresh clone has
    for name in ("DATABASE_URL", "CELERY_BROKER_URL", "ENCRYPTION_KEY"):
        env.pop(name, None)
    outputs = {}
    for command in commands:
        done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=60)
        assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
        outputs[command] = done.stdout
    listed = next(out for command, out in outputs.items() if command.endswith("keys list"))
    header, *rows = listed.splitlines()
    assert header.split() == ["ID", "PREFIX", "NAME", "PLAN", "STATE"]
    assert any("Acme" in row and "pro" in row for row in rows)


def test_every_make_target_the_readme_names_exists():
    targets = set(re.findall(r"\bmake ([a-z][a-z-]+)", README))
    assert {"run", "test", "bench", "docs"} <= targets
    for target in targets:
        assert subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, timeout=30).returncode == 0, target
