"""A profile's state, read from a running browser and put into another over the Chrome DevTools Protocol.

What a sign-in needs and CDP can carry into any browser, a fresh one or one of the warm pool already running: every
cookie (HttpOnly ones too), and the localStorage and IndexedDB databases of the origins of the open tabs (read by
scripts in those tabs, written back by a script each document runs before the page's own: restore.js). Not saved:
caches (they only cost time), sessionStorage (a tab's, gone with it in any browser), service workers and Cache Storage
(CDP has no way to write them into a browser that is already running, and a sign-in does not rest on them).
`cdp(command, params)` sends one command: Selenium's (workers/browser) or plain WebDriver HTTP (app/sessions)."""
import json
from pathlib import Path

READ_INDEXED_DB = Path(__file__).with_name("read_indexeddb.js").read_text()
RESTORE = Path(__file__).with_name("restore.js").read_text()

# Read in a tab (WebDriver's execute): an opaque origin (about:blank, data:) has no storage.
READ_STORAGE = """
function read(name) {
  try { var s = window[name], out = []; for (var i = 0; i < s.length; i++) out.push([s.key(i), s.getItem(s.key(i))]);
        return out; } catch (e) { return []; }
}
return {url: location.href, origin: location.origin, local: read('localStorage'), session: read('sessionStorage')};"""


def read_indexed_db(cdp, limit=None):
    """The IndexedDB databases of the current tab's origin (READ_INDEXED_DB), or None if they could not be read (the
    profile then keeps what it had for that origin). Past `limit` bytes, {"tooLarge": bytes} instead: the page stops
    reading there (or does not start, by the origin's usage), and none of it crosses to this process."""
    expression = f"{READ_INDEXED_DB}({json.dumps(limit)})"
    reply = cdp("Runtime.evaluate", {"expression": expression, "awaitPromise": True, "returnByValue": True})
    if "exceptionDetails" in reply:
        return None
    return (reply.get("result") or {}).get("value") or []


def too_large(found):
    return isinstance(found, dict) and "tooLarge" in found


def capture(cookies, tabs, earlier=None):
    """The state to save: the browser's cookies, and the localStorage (READ_STORAGE) and IndexedDB databases
    (read_indexed_db: a tab's "indexedDB") each open tab read for its origin; an origin no tab shows, and the IndexedDB
    of an origin whose databases could not be read, keep what the profile had (`earlier`). An origin whose IndexedDB
    passed the read's limit makes the state "tooLarge": {origin, bytes} (not saved)."""
    for tab in tabs:
        if too_large(tab.get("indexedDB")):
            return {"tooLarge": {"origin": tab.get("origin") or "", "bytes": tab["indexedDB"]["tooLarge"]}}
    return _captured(cookies, tabs, earlier)


def _captured(cookies, tabs, earlier):
    earlier = earlier or {}
    storage, databases = dict(earlier.get("localStorage") or {}), dict(earlier.get("indexedDB") or {})
    for tab in tabs:
        origin = tab.get("origin") or ""
        if origin.startswith(("http://", "https://")):
            storage[origin] = tab.get("local") or []
            if tab.get("indexedDB") is not None:
                databases[origin] = tab["indexedDB"]
    return {"cookies": cookies, "localStorage": {origin: items for origin, items in storage.items() if items},
            "indexedDB": {origin: found for origin, found in databases.items() if found}}


def apply(cdp, state):
    """Put a saved state into this browser before its first page: the cookies, and per saved origin a script that
    each document runs before the page's own (restore.js): on that origin's documents it writes the localStorage while
    it is empty and creates each saved IndexedDB database the origin does not have (as in a fresh browser: a later
    document of the origin finds them written, and keeps what the page changed)."""
    cookies = [cookie_param(cookie) for cookie in state.get("cookies") or []]
    if cookies:
        cdp("Network.setCookies", {"cookies": cookies})
    storage, databases = state.get("localStorage") or {}, state.get("indexedDB") or {}
    for origin in sorted(set(storage) | set(databases)):
        # The origin's data as a string literal: a document of another origin skips it without parsing it.
        data = json.dumps({"local": storage.get(origin) or [], "indexedDB": databases.get(origin) or []},
                          separators=(",", ":"))
        cdp("Page.addScriptToEvaluateOnNewDocument",
            {"source": f"{RESTORE}({json.dumps(origin)}, {json.dumps(data)});"})


def size(state):
    """The state's size as saved (its JSON, before sealing): what PROFILE_MAX_BYTES caps."""
    return len(encode(state))


def encode(state):
    return json.dumps(state, separators=(",", ":")).encode()


def summary(state):
    cookies, storage = len(state.get("cookies") or []), len(state.get("localStorage") or {})
    databases = state.get("indexedDB") or {}
    said = f"{_count(cookies, 'cookie')}, localStorage of {_count(storage, 'origin')}"
    if databases:
        said += (f", IndexedDB: {_count(sum(len(found) for found in databases.values()), 'database')} of "
                 f"{_count(len(databases), 'origin')}")
    return said


def _count(number, noun):
    return f"{number} {noun}{'s' if number != 1 else ''}"


def cookie_param(cookie):
    """Network.getAllCookies' Cookie as Network.setCookies' CookieParam: a host-only cookie by its URL (a domain would
    widen it to subdomains), a session cookie without an expiry."""
    param = {key: cookie[key] for key in ("name", "value", "path", "secure", "httpOnly", "sameSite", "priority",
                                          "sourceScheme", "sourcePort", "partitionKey") if key in cookie}
    domain = cookie.get("domain") or ""
    if domain.startswith("."):
        param["domain"] = domain
    else:
        param["url"] = f"{'https' if cookie.get('secure') else 'http'}://{domain}{cookie.get('path') or '/'}"
    if not cookie.get("session") and (cookie.get("expires") or -1) > 0:
        param["expires"] = cookie["expires"]
    return param
