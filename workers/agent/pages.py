"""Reading web pages without a browser: fetch (behind the outbound-URL guard), HTML parsed by lxml, CSS selectors by cssselect."""
import re
from urllib.parse import unquote_to_bytes, urljoin

import requests
from cssselect import SelectorError
from lxml.html import html5parser
from lxml.cssselect import CSSSelector

from app.netguard import UnsafeUrl, check_url

HIDDEN = {"script", "style", "noscript", "template", "head"}
BLOCK = {"address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "fieldset", "figcaption",
         "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav",
         "ol", "p", "pre", "section", "table", "tr", "ul", "title"}
MAX_BYTES = 5 * 1024 * 1024
_PARSER = html5parser.HTMLParser(namespaceHTMLElements=False)


class PageError(Exception):
    """The page could not be read; the message is fit for the trace."""


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


def fetch(url, *, allow_private, timeout, base=None):
    """GET a page (following redirects, each one checked by the guard); `data:` URLs need no network."""
    if base:
        url = urljoin(base, url)
    if url.startswith("data:"):
        return Page(url, _data_url(url))
    session = requests.Session()
    for _ in range(10):
        try:
            check_url(url, allow_private=allow_private)
        except UnsafeUrl as exc:
            raise PageError(f"Refused to open the page: {exc}") from None
        try:
            response = session.get(url, timeout=timeout, allow_redirects=False, stream=True,
                                   headers={"User-Agent": "RemoteDispatch/1.0", "Accept": "text/html,*/*"})
        except requests.RequestException as exc:
            raise PageError(f"Could not open the page: {exc.__class__.__name__}") from None
        if response.is_redirect:
            url = urljoin(url, response.headers["location"])
            response.close()
            continue
        body = response.raw.read(MAX_BYTES + 1, decode_content=True)
        response.close()
        if response.status_code >= 400:
            raise PageError(f"The page answered HTTP {response.status_code}.")
        # requests assumes ISO-8859-1 when no charset is declared; today's pages are UTF-8.
        charset = response.encoding if "charset" in response.headers.get("content-type", "") else "utf-8"
        return Page(url, body[:MAX_BYTES].decode(charset or "utf-8", errors="replace"))
    raise PageError("Too many redirects.")


def _data_url(url):
    header, _, data = url[5:].partition(",")
    raw = unquote_to_bytes(data)
    if header.endswith(";base64"):
        import base64

        raw = base64.b64decode(raw)
    return raw.decode("utf-8", errors="replace")
