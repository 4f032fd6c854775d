"""Reading web pages without a browser: fetch (through app.egress), HTML5 parsing, CSS selectors."""
import base64
import binascii
import re
from urllib.parse import unquote_to_bytes, urljoin

import requests
from cssselect import SelectorError
from lxml.html import html5parser
from lxml.cssselect import CSSSelector

from app.egress import client as egress_http
from app.egress.policy import EgressRefused, Policy

HIDDEN = {"script", "style", "noscript", "template", "head"}
BLOCK = {"address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "fieldset", "figcaption",
         "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav",
         "ol", "p", "pre", "section", "table", "tr", "ul", "title"}
MAX_BYTES = 5 * 1024 * 1024
_PARSER = html5parser.HTMLParser(namespaceHTMLElements=False)


class PageError(Exception):
    """The page could not be read; the message is fit for the trace."""


class ErrorPage(PageError):
    """The server answered with an HTTP error (4xx/5xx): what it sent is no reading of the page asked for."""


def parse_html(text):
    """The document's root element as lxml elements, built by the HTML5 parsing algorithm (html5lib), so
    optional end tags and stray markup give the tree a browser builds (libxml2's parser predates HTML5)."""
    return _PARSER.parse(text).getroot()


def text_of(element):
    """The element's visible text: block elements on their own lines, table cells apart, scripts left out."""
    parts = []
    _collect(element, parts)
    lines = (re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in "".join(parts).split("\n"))
    return "\n".join(line for line in lines if line)


def _collect(element, parts):
    if element.text:
        parts.append(element.text.replace("\n", " "))
    for child in element:
        if isinstance(child.tag, str) and child.tag.lower() not in HIDDEN:  # comments have no str tag
            tag = child.tag.lower()
            if tag in ("td", "th"):
                parts.append(" ")
            block = tag in BLOCK
            if block:
                parts.append("\n")
            _collect(child, parts)
            if block:
                parts.append("\n")
        if child.tail:
            parts.append(child.tail.replace("\n", " "))


def select(root, selector):
    """Elements matching a CSS selector (cssselect: the full CSS 3 selector language), in document order."""
    try:
        return CSSSelector(selector, translator="html")(root)
    except (SelectorError, SyntaxError) as exc:
        raise PageError(f"Invalid CSS selector {selector!r}: {exc}.") from None


class Page:
    """A fetched page: its final URL and parsed document."""

    def __init__(self, url, html):
        self.url, self.root = url, parse_html(html)

    def title(self):
        titles = select(self.root, "title")
        return text_of(titles[0]) if titles else ""

    def text(self):
        bodies = select(self.root, "body")
        return text_of(bodies[0] if bodies else self.root)

    def extract(self, selector):
        elements = select(self.root, selector)
        if not elements and selector.strip() == "body":  # `extract` alone on a page without <body>
            elements = [self.root]
        if not elements:
            raise PageError(f"Nothing on {self.url or 'the page'} matches {selector!r}.")
        return "\n".join(text for text in (text_of(e) for e in elements) if text)


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
        response = egress_http.fetch(policy, "GET", url, timeout=timeout, max_bytes=MAX_BYTES,
                                headers={"User-Agent": "RemoteDispatch/1.0", "Accept": "text/html,*/*"})
    except EgressRefused as exc:
        raise PageError(f"Refused to open the page: {exc}") from None
    except requests.TooManyRedirects:
        raise PageError("Too many redirects.") from None
    except requests.RequestException as exc:
        raise PageError(f"Could not open the page: {exc.__class__.__name__}") from None
    if response.status_code >= 400:
        raise ErrorPage(f"The page answered HTTP {response.status_code}.")
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
