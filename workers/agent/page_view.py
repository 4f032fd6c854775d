"""What the model sees of a page: the URL, the title and page.js's numbered view, within a budget."""

HEADER = "URL: "  # the line every page view starts with (the context rule recognises old views by it)
STALE = "(page view left out: a newer one follows)"


def render(reading, prefix=""):
    """`prefix` (what the action did) then the page view; page.js already cut it to the budget and said so."""
    head = f"{prefix.rstrip()}\n" if prefix.strip() else ""
    return f"{head}{HEADER}{reading.url}\nTitle: {reading.title}\n{reading.text}".rstrip()


def is_view(text):
    return text.startswith(HEADER) or f"\n{HEADER}" in text


def stale(text):
    """An older page view reduced to what the action did and where it was."""
    head, _, rest = text.partition(HEADER) if text.startswith(HEADER) else text.partition(f"\n{HEADER}")
    url = rest.split("\n", 1)[0]
    return f"{head}\n{HEADER}{url} {STALE}".lstrip()


def refusal_lines(refusals):
    """The egress proxy's refusals as trace lines: "GET host:port: why"."""
    return tuple(f"{r['method']} {host_port(r['host'], r['port'])}: {r['reason']}" for r in refusals[:20])


def host_port(host, port):
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
