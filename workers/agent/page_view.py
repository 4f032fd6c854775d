"""What the model sees of a page: the URL, the title and page.js's numbered view, within a budget."""
import re
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}

HEADER = "URL: "  # the line every page view starts with (the context rule recognises old views by it)
STALE = "(page view left out: a newer one follows)"
START_PAGE = "The browser is on this page:\n"  # before the view of the page a task starts on (after its prompt)


def render(reading, prefix=""):
    """`prefix` (what the action did) then the page view; page.js already cut it to the budget and said so."""
    head = f"{prefix.rstrip()}\n" if prefix.strip() else ""
    return f"{head}{HEADER}{reading.url}\nTitle: {reading.title}\n{reading.text}".rstrip()


def element_line(info):
    """An acted-on element (page.js's descriptor) as the model saw it in the view: [N] <tag> label."""
    return f"[{info.get('index')}] <{info.get('tag', '')}> {info.get('label', '')}".rstrip()


def drag_line(result, offset=None):
    """What a drag did: `[3] <li> Item 3 onto [7] <li> Done (HTML5 drag-and-drop)`, or `… by 40,0 (pointer)`."""
    where = f"by {offset[0]:g},{offset[1]:g}" if offset else f"onto {element_line(result.get('target') or {})}"
    how = "HTML5 drag-and-drop" if result.get("html5") else "pointer"
    if result.get("html5") and not result.get("accepted"):
        how += ", not accepted by the target"
    return f"{element_line(result.get('source') or {})} {where} ({how})"


ELEMENT = re.compile(r"^\*?\[\d+\]<(\w+)[^>]*>(.*)</\1>$")


def element_labels(view):
    """The labels of a page view's numbered elements (`[3]<button>No</button>` → No; a new element's `*[3]` too),
    ends trimmed of punctuation."""
    return [match[2].strip(" .,;:!?") for line in view.splitlines() if (match := ELEMENT.match(line))]


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


def names_host(text, host, port):
    """True if `text` holds a URL of `host` (at `port`, or at its scheme's default port)."""
    authority = re.escape(f"[{host}]" if ":" in host else host)
    default = {number: scheme for scheme, number in DEFAULT_PORTS.items()}.get(port)
    pattern = (rf"{default}://{authority}(?![\w.:-])" if default else "(?!)") + rf"|//{authority}:{port}(?!\d)"
    return re.search(pattern, text, re.I) is not None


def url_of_host(url, host, port):
    """True if `url` is a page of `host` at `port` (its authority, not a mention in its path or fragment)."""
    try:
        parts = urlsplit(url)
        return (parts.hostname or "") == host.lower() and (parts.port or DEFAULT_PORTS.get(parts.scheme)) == port
    except ValueError:
        return False


def host_port(host, port):
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
