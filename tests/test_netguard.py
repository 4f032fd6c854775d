"""The egress policy refuses private, loopback, link-local and metadata addresses; the app's modules import each other
only downwards."""
import ast
from pathlib import Path

import pytest

from app.egress.policy import Policy, UnsafeUrl

APP = Path(__file__).resolve().parent.parent / "app"


def check_url(url, allow_private=False, schemes=("http", "https")):
    return list(Policy(allow_private=allow_private).check_url(url, schemes).addresses)


@pytest.mark.parametrize("url, reason", [
    ("https://127.0.0.1/hook", "non-public address (127.0.0.1)"),
    ("https://localhost/hook", "non-public address"),
    ("https://10.1.2.3/", "non-public address (10.1.2.3)"),
    ("https://192.168.0.10/", "non-public address"),
    ("https://169.254.169.254/latest/meta-data", "non-public address (169.254.169.254)"),
    ("https://[::1]/", "non-public address (::1)"),
    ("https://[::ffff:127.0.0.1]/", "embeds an IPv4 address"),
    ("https://100.64.0.1/", "non-public address"),
    ("https://0.0.0.0/", "non-public address"),
    ("https://metadata.google.internal/", "cloud metadata endpoint"),
    ("ftp://example.com/", "scheme must be"),
    ("https:///nohost", "no host"),
    ("https://no-such-host.invalid/", "cannot resolve"),
])
def test_refuses(url, reason):
    with pytest.raises(UnsafeUrl, match=reason.replace("(", r"\(").replace(")", r"\)")):
        check_url(url)


def test_public_literal_address_passes():
    assert check_url("https://93.184.216.34/hook") == ["93.184.216.34"]


def test_private_addresses_pass_when_allowed():
    assert check_url("https://127.0.0.1:8443/hook", allow_private=True) == ["127.0.0.1"]


def test_https_only_when_asked():
    with pytest.raises(UnsafeUrl, match="scheme must be https"):
        check_url("http://93.184.216.34/", schemes=("https",))


def _app_imports():
    """The app's modules and what each imports at its top (relative imports: the app's own), and the imports that
    are inside a function instead (module:line)."""
    graph, nested = {}, []
    for path in APP.rglob("*.py"):
        name = ".".join(("app",) + path.relative_to(APP).with_suffix("").parts).removesuffix(".__init__")
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        graph[name] = set()
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or not node.level:
                continue
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            targets = [f"{base}.{node.module}" if node.module else base]
            if not node.module:
                targets = [f"{base}.{alias.name}" for alias in node.names]
            if node in tree.body:
                graph[name].update(targets)
            elif name not in ("app", "app.cli", "app.console"):  # the app factory and CLI wire things up late
                nested.append(f"{name}:{node.lineno}")
    # `from . import x` names module x; `from .x import y` names y of module x
    return {name: {t if t in graph else t.rpartition(".")[0] for t in targets} for name, targets in graph.items()}, nested


def test_no_module_of_the_app_imports_inside_a_function_or_in_a_circle():
    """The read side of tasks has its own module and the egress guard one module: every import is at the top,
    and the app's modules import each other without a circle."""
    graph, nested = _app_imports()
    assert nested == []
    assert not (APP / "netguard.py").exists()

    def circle(start, node, path):
        for target in graph.get(node, ()):
            if target == start:
                return path + [target]
            if target not in path and (found := circle(start, target, path + [target])):
                return found
        return None

    circles = [found for module in ("app.dispatch.service", "app.lifecycle", "app.webhooks.outbox",
                                    "app.windows.service", "app.egress.policy") if (found := circle(module, module, [module]))]
    assert circles == []


def test_what_every_blueprint_shares_is_below_every_blueprint():
    """Schema bases, the browser options, a task's result schema, its read helpers and its publisher are used by many
    blueprints' packages: none of them reaches, through any import, a module of a package that has routes."""
    graph, _ = _app_imports()
    blueprints = {f"app.{path.parent.name}" for path in APP.glob("*/routes.py")}
    assert {"app.dispatch", "app.sessions", "app.windows"} <= blueprints

    def reached(module, seen):
        for target in graph.get(module, ()):
            if target not in seen:
                seen.add(target)
                reached(target, seen)
        return seen

    shared = ("app.schema_base", "app.browser_options", "app.task_results", "app.task_queries", "app.task_publish")
    climbs = {module: sorted(m for m in reached(module, set()) if m.rpartition(".")[0] in blueprints
                             or m in blueprints) for module in shared}
    assert climbs == {module: [] for module in shared}
    users = {name for name, targets in graph.items() if targets & set(shared)}
    assert {"app.dispatch.schemas", "app.sessions.schemas", "app.files.schemas", "app.windows.schemas"} <= users
