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


DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _prose(text):
    """The text outside code blocks and code spans, where a link is a link."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"^```.*?^```", "", text, flags=re.M | re.S))


def anchors(doc):
    """The anchors GitHub gives a document's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated one numbered."""
    seen, found = {}, set()
    for heading in re.findall(r"^#{1,6} (.+)$", re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.M | re.S),
                              re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


def test_documents_link_only_to_files_and_headings_in_the_repository():
    assert len(DOCUMENTS) > 10
    for doc in DOCUMENTS:
        text = doc.read_text()
        assert "../shared" not in text and "shared/spec" not in text and "DESIGN.md" not in text
        for target in re.findall(r"\]\(([^)\s]+)\)", _prose(text)):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            path, _, anchor = target.partition("#")
            linked = (doc.parent / path).resolve() if path else doc
            assert linked.exists(), f"{doc.name} links to missing {path}"
            assert linked.is_relative_to(ROOT), f"{doc.name} links out of the repository: {path}"
            if anchor:
                assert linked.suffix == ".md", f"{doc.name}: an anchor into {path}, which has no headings"
                assert anchor in anchors(linked), f"{doc.name} links to {target}: no such heading"


def test_the_anchors_are_githubs():
    doc = ROOT / "var" / "anchors-test.md"
    doc.parent.mkdir(exist_ok=True)
    doc.write_text("# Waiting inline: `wait: true`\n## cloud_browser: the web agent\n## Tests\n## Tests\n")
    try:
        assert anchors(doc) == {"waiting-inline-wait-true", "cloud_browser-the-web-agent", "tests", "tests-1"}
    finally:
        doc.unlink()


def readme_commands():
    """The `remote-dispatch` commands of the operations guide (the README names two of them in prose)."""
    blocks = re.findall(r"```sh\n(.*?)```", (ROOT / "docs" / "operations.md").read_text(), re.S)
    return [line.split("  #")[0].strip() for block in blocks for line in block.splitlines()
            if line.startswith(".venv/bin/remote-dispatch")]


def test_every_remote_dispatch_command_in_the_docs_runs_verbatim(tmp_path):
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


def test_every_make_target_the_documents_name_exists():
    targets = {target for doc in DOCUMENTS for target in re.findall(r"\bmake ([a-z][a-z-]+)", doc.read_text())}
    assert {"run", "test", "bench", "docs", "eval"} <= targets
    for target in targets:
        assert subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, timeout=30).returncode == 0, target


def test_the_configuration_page_names_every_setting_in_the_group_that_reads_it():
    """docs/configuration.md's headings are config/settings.py's SETTINGS groups, and under each the variables of the
    group's table, no more, no fewer."""
    from config.settings import SETTINGS

    page, group, documented = (ROOT / "docs" / "configuration.md").read_text(), None, {}
    for line in page.splitlines():
        if line.startswith("## "):
            group = line[3:].strip()
            documented[group] = set()
        elif line.startswith("| `") and group is not None:
            documented[group] |= set(re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split("|")[1]))
    assert documented == {group: {name for setting in settings for name in (setting.name, *setting.also)}
                          for group, settings in SETTINGS.items()}


def test_settings_are_read_in_config_settings_only():
    """No other module reads a setting from the environment, or restates its default where it reads the config."""
    from config.settings import SETTINGS

    names = "|".join(setting.name for settings in SETTINGS.values() for setting in settings)
    read_again = re.compile(rf"""(?:environ\.get|environ\[|getenv)\(?\s*["']({names})["']""")
    default_again = re.compile(rf"""config\.get\(\s*["']({names})["']\s*,""")
    found = []
    for path in [*ROOT.glob("app/**/*.py"), *ROOT.glob("workers/**/*.py"), *ROOT.glob("config/*.py")]:
        if path.name == "settings.py" and path.parent.name == "config":
            continue
        text = path.read_text()
        found += [f"{path.relative_to(ROOT)}: {match.group(0)}"
                  for pattern in (read_again, default_again) for match in pattern.finditer(text)]
    assert found == []
