"""Reading web pages without a browser: fetch (through app.egress), HTML to text, CSS selectors."""
import base64
import binascii
import re
from html.parser import HTMLParser
from urllib.parse import unquote_to_bytes, urljoin

import requests

from app import egress
from app.egress import EgressRefused, Policy

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
HIDDEN = {"script", "style", "noscript", "template", "head"}
BLOCK = {"address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "fieldset", "figcaption",
         "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav",
         "ol", "p", "pre", "section", "table", "tr", "ul", "title"}
_LISTS = ("ul", "ol", "dl", "table", "select", "body")
OPTIONAL_END = {  # start tag → (open elements it ends, containers the search stops at)
    "li": (("li",), _LISTS), "dt": (("dt", "dd"), _LISTS), "dd": (("dt", "dd"), _LISTS),
    "option": (("option",), _LISTS), "tr": (("tr",), _LISTS), "td": (("td", "th"), ("tr",) + _LISTS),
    "th": (("td", "th"), ("tr",) + _LISTS), "p": (("p",), ()),
}
MAX_BYTES = 5 * 1024 * 1024


class PageError(Exception):
    """The page could not be read; the message is fit for the trace."""


class Element:
    def __init__(self, tag, attrs=(), parent=None):
        self.tag, self.parent, self.children = tag, parent, []
        self.attrs = {name: value or "" for name, value in attrs}

    def iter(self):
        for child in self.children:
            if isinstance(child, Element):
                yield child
                yield from child.iter()

    def text(self):
        parts = []
        self._collect(parts)
        lines = (re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in "".join(parts).split("\n"))
        return "\n".join(line for line in lines if line)

    def _collect(self, parts):
        for child in self.children:
            if isinstance(child, str):
                parts.append(child.replace("\n", " "))
            elif child.tag not in HIDDEN:
                if child.tag in ("td", "th"):
                    parts.append(" ")
                block = child.tag in BLOCK
                if block:
                    parts.append("\n")
                child._collect(parts)
                if block:
                    parts.append("\n")


class _TreeBuilder(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = self.current = Element("#document")

    def handle_starttag(self, tag, attrs):
        # Optional end tags (`<li>a<li>b`, `<td>1<td>2`): an open element ends where its sibling starts.
        if self.current.tag == "p" and tag in BLOCK:
            self.current = self.current.parent
        closes, boundary = OPTIONAL_END.get(tag, ((), ()))
        node = self.current
        while node.parent is not None and node.tag not in boundary:
            if node.tag in closes:
                self.current = node.parent
                break
            node = node.parent
        element = Element(tag, attrs, self.current)
        self.current.children.append(element)
        if tag not in VOID:
            self.current = element

    def handle_startendtag(self, tag, attrs):
        self.current.children.append(Element(tag, attrs, self.current))

    def handle_endtag(self, tag):
        node = self.current
        while node is not None and node.tag != tag:
            node = node.parent
        if node is not None and node.parent is not None:  # unmatched end tags are ignored, as browsers do
            self.current = node.parent

    def handle_data(self, data):
        self.current.children.append(data)


def parse_html(html):
    builder = _TreeBuilder()
    builder.feed(html)
    builder.close()
    return builder.root


# A small CSS selector subset: tag, *, #id, .class, [attr], [attr=value], descendant and `>` combinators, `,`.
_COMPOUND = re.compile(r"""(?P<tag>[a-zA-Z][\w-]*|\*)?(?P<rest>(?:[#.][\w-]+|\[[\w-]+(?:[~^$*|]?=(?:"[^"]*"|'[^']*'|[^\]]*))?\])*)$""")
_PART = re.compile(r"""[#.][\w-]+|\[([\w-]+)(?:([~^$*|]?=)("[^"]*"|'[^']*'|[^\]]*))?\]""")


def _compound_matcher(text):
    match = _COMPOUND.match(text)
    if not match or not text:
        raise PageError(f"Unsupported CSS selector part {text!r} (supported: tag, #id, .class, [attr=value], "
                        "descendant and '>' combinators).")
    tag = (match["tag"] or "*").lower()
    tests = []
    for part in _PART.finditer(match["rest"]):
        token = part[0]
        if token[0] == "#":
            tests.append(lambda e, v=token[1:]: e.attrs.get("id") == v)
        elif token[0] == ".":
            tests.append(lambda e, v=token[1:]: v in e.attrs.get("class", "").split())
        else:
            name, op, value = part[1].lower(), part[2], (part[3] or "").strip("\"'")
            tests.append(lambda e, n=name, o=op, v=value: _attr_test(e.attrs.get(n), o, v))
    return lambda e: (tag == "*" or e.tag == tag) and all(test(e) for test in tests)


def _attr_test(actual, op, value):
    if actual is None:
        return False
    return {None: True, "=": actual == value, "~=": value in actual.split(), "^=": actual.startswith(value),
            "$=": actual.endswith(value), "*=": value in actual,
            "|=": actual == value or actual.startswith(value + "-")}[op or None]


def select(root, selector):
    """Elements matching `selector`, in document order."""
    found = []
    for group in selector.split(","):
        tokens = re.findall(r">|[^\s>]+", group.strip())
        if not tokens:
            continue
        steps, combinator = [], " "
        for token in tokens:
            if token == ">":
                combinator = ">"
                continue
            steps.append((combinator, _compound_matcher(token)))
            combinator = " "
        found.extend(e for e in root.iter() if _matches(e, steps) and e not in found)
    order = {id(e): i for i, e in enumerate(root.iter())}
    return sorted(found, key=lambda e: order[id(e)])


def _matches(element, steps):
    (combinator, matcher), earlier = steps[-1], steps[:-1]
    if not matcher(element):
        return False
    if not earlier:
        return True
    ancestor = element.parent
    if combinator == ">":
        return ancestor is not None and _matches(ancestor, earlier)
    while ancestor is not None:
        if _matches(ancestor, earlier):
            return True
        ancestor = ancestor.parent
    return False


class Page:
    """A fetched page: its final URL and parsed document."""

    def __init__(self, url, html):
        self.url, self.root = url, parse_html(html)

    def title(self):
        titles = select(self.root, "title")
        return titles[0].text() if titles else ""

    def text(self):
        bodies = select(self.root, "body")
        return (bodies[0] if bodies else self.root).text()

    def extract(self, selector):
        elements = select(self.root, selector)
        if not elements:
            raise PageError(f"Nothing on {self.url or 'the page'} matches {selector!r}.")
        return "\n".join(text for text in (e.text() for e in elements) if text)


def fetch(url, *, policy=None, allow_private=False, timeout, base=None):
    """GET a page through app.egress (the URL and every redirect checked, the connection pinned to the
    checked address); `data:` URLs need no network. Any failure is a PageError fit for the trace."""
    policy = policy or Policy(allow_private=allow_private)
    try:
        url = urljoin(base, url) if base else url
    except ValueError:  # e.g. "http://[::1": urlsplit refuses it
        raise PageError(f"Cannot open {url!r}: it is not a valid URL.") from None
    if url[:5].lower() == "data:":
        return Page(url, _data_url(url))
    try:
        response = egress.fetch(policy, "GET", url, timeout=timeout, max_bytes=MAX_BYTES,
                                headers={"User-Agent": "RemoteDispatch/1.0", "Accept": "text/html,*/*"})
    except EgressRefused as exc:
        raise PageError(f"Refused to open the page: {exc}") from None
    except requests.TooManyRedirects:
        raise PageError("Too many redirects.") from None
    except requests.RequestException as exc:
        raise PageError(f"Could not open the page: {exc.__class__.__name__}") from None
    if response.status_code >= 400:
        raise PageError(f"The page answered HTTP {response.status_code}.")
    # requests assumes ISO-8859-1 when no charset is declared; today's pages are UTF-8.
    charset = response.encoding if "charset" in response.headers.get("content-type", "") else "utf-8"
    try:
        text = response.content.decode(charset or "utf-8", errors="replace")
    except LookupError:  # an unknown charset name
        text = response.content.decode("utf-8", errors="replace")
    return Page(response.url, text)


def _data_url(url):
    header, comma, data = url[5:].partition(",")
    if not comma:
        raise PageError("Cannot open the data: URL: it has no ',' before its content.")
    raw = unquote_to_bytes(data)
    if header.lower().endswith(";base64"):
        try:
            raw = re.sub(rb"\s+", b"", raw)
            raw = base64.b64decode(raw + b"=" * (-len(raw) % 4), validate=True)  # padding is optional in URLs
        except (binascii.Error, ValueError):
            raise PageError("Cannot open the data: URL: its base64 content is invalid.") from None
    return raw.decode("utf-8", errors="replace")
