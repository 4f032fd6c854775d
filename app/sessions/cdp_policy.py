"""What a caller may send over a session's CDP: every client→browser message is checked (and maybe rewritten) here."""
import json
import os

# Schemes a page may be opened at: the web (behind the egress proxy) and inert in-memory documents.
# Everything else (file:, filesystem:, chrome:, chrome-untrusted:, view-source:, devtools:, chrome-extension:,
# javascript:, ...) is refused; about: only as about:blank / about:srcdoc, since Chromium maps other about:
# pages (about:version, about:settings) onto chrome: pages.
WEB_SCHEMES = {"http", "https"}
PAGE_SCHEMES = WEB_SCHEMES | {"data", "blob", "about"}
ABOUT_PAGES = {"about:blank", "about:srcdoc"}
SCHEME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789+-.")

# Method (or "Domain.") -> why it is refused whatever its parameters.
REFUSED = {
    "Target.exposeDevToolsProtocol": "it hands the page's own scripts a CDP channel that bypasses this relay",
    "Target.setRemoteLocations": "it makes the browser connect to hosts of the caller's choosing, around the egress proxy",
    "Target.openDevTools": "devtools: pages are not served",
    "Extensions.loadUnpacked": "extensions are never loaded from the server's disk",
    "SystemInfo.": "it describes the server machine, not the session",
    "Tracing.": "a trace holds the browser's command line (the egress proxy, the server's paths) and the server's "
                "kernel, memory and CPU",
    "Browser.getBrowserCommandLine": "it reveals the server's paths and the session's egress proxy",
    "Browser.crash": "stop the session through the API instead (stop-cloud-browser-session)",
    "Browser.crashGpuProcess": "stop the session through the API instead (stop-cloud-browser-session)",
    "PWA.": "installing or launching web apps is not part of a session (a bundle can be a file of the server)",
    "Tethering.": "it opens listening ports on the server",
    "Cast.": "it looks for devices on the server's network, around the egress proxy",
    "DeviceAccess.": "it hands pages the server's devices",
    "Page.handleFileChooser": "it takes files from the server's disk (use DOM.setFileInputFiles with the session's downloads)",
}
ERROR_CODE = -32000
# Targets a caller may see and drive: the web's pages (and the tabs holding them: Puppeteer attaches to those),
# frames and workers. Chromium's own UI (browser_ui: the omnibox popup and other top-chrome WebUI), "other" and
# extension targets stay hidden.
PAGE_TYPES = {"page", "tab", "iframe", "worker", "shared_worker", "service_worker"}
INTERNAL_SCHEMES = ("chrome:", "chrome-untrusted:", "devtools:", "chrome-extension:", "chrome-search:",
                    "chrome-error:", "view-source:")
# Put before a caller's target filter (the first entry matching a target's type decides): Chromium's own
# targets are never discovered, listed or auto-attached. Chromium's default filter follows when none is given.
HIDDEN_TYPES = ("browser_ui", "other", "background_page", "webview", "auction_worklet", "shared_storage_worklet",
                "worklet", "assistive_technology")
CHROMIUM_DEFAULT_FILTER = [{"type": "browser", "exclude": True}, {"type": "tab", "exclude": True}, {}]
# Commands naming a target (targetId): allowed only for a page target (asked of the browser, app/sessions/cdp_targets.py).
TARGET_COMMANDS = {"Target.attachToTarget", "Target.activateTarget", "Target.closeTarget", "Target.getTargetInfo",
                   "Target.sendMessageToTarget"}


# Chromium's own keyboard shortcuts (accelerators), which act on the browser, not the page: a key event that would
# trigger one is refused (Input.dispatchKeyEvent here, a live viewer's key in app/live/viewer.py). Named as
# (modifiers, key): modifiers "C" Ctrl or Meta (Meta is Ctrl's twin on macOS), "S" Shift, "A" Alt; the key as
# a letter, a digit or a DOM key name. Editing shortcuts (Ctrl+A/C/V/X/Z/Y, Ctrl+arrows, Shift+...) stay.
SHORTCUTS = {
    **{("C", key): "it opens, closes or switches tabs and windows" for key in
       ("T", "N", "W", "Q", "O", "Tab", "PageUp", "PageDown", "F4", *"123456789")},
    **{("CS", key): "it opens, closes or switches tabs and windows" for key in ("T", "N", "W", "Q", "Tab", "PageUp",
                                                                                 "PageDown", "M")},
    **{("C", key): "it opens one of the browser's own pages or bars" for key in ("H", "J", "D", "L", "K", "E")},
    **{("CS", key): "it opens one of the browser's own pages or bars" for key in ("B", "O", "Delete", "A", "D")},
    **{("CS", key): "it opens the browser's developer tools" for key in ("I", "J", "C", "K")},
    ("", "F12"): "it opens the browser's developer tools",
    ("C", "U"): "it opens the page's source (view-source:)",
    ("C", "P"): "it prints", ("CS", "P"): "it prints",
    ("C", "S"): "it saves the page to the server's disk", ("CS", "S"): "it saves the page to the server's disk",
    **{("A", key): "it navigates the tab through its history or to the home page" for key in
       ("ArrowLeft", "ArrowRight", "Home")},
    **{("", key): "it navigates the tab through its history or to the home page" for key in
       ("BrowserBack", "BrowserForward", "BrowserHome", "BrowserSearch", "BrowserFavorites")},
    ("C", "["): "it navigates the tab through its history", ("C", "]"): "it navigates the tab through its history",
    **{("A", key): "it opens the browser's menus or windows" for key in ("F4", "D", "E", "F")},
    **{("", key): "it acts on the browser's window or settings, not the page" for key in ("F1", "F6", "F7", "F10",
                                                                                           "F11")},
    ("S", "F10"): "it opens the browser's context menu", ("", "ContextMenu"): "it opens the browser's context menu",
}
# windowsVirtualKeyCode -> key name (Chromium picks its accelerators by that code, whatever "key" says).
KEY_CODES = {9: "Tab", 33: "PageUp", 34: "PageDown", 36: "Home", 37: "ArrowLeft", 39: "ArrowRight", 46: "Delete",
             93: "ContextMenu", 166: "BrowserBack", 167: "BrowserForward", 170: "BrowserSearch",
             171: "BrowserFavorites", 172: "BrowserHome", 219: "[", 221: "]",
             **{code: chr(code) for code in range(48, 58)}, **{code: chr(code) for code in range(65, 91)},
             **{111 + n: f"F{n}" for n in range(1, 13)}}
PRESSES = ("keyDown", "rawKeyDown", "char")  # a shortcut acts on its key's press (keyUp is harmless)


def shortcut_refusal(params):
    """None, or why the Input.dispatchKeyEvent `params` would reach the browser rather than the page: the key
    as any of its names (key, code, windowsVirtualKeyCode, nativeVirtualKeyCode) with its modifiers."""
    if params.get("type") not in PRESSES:
        return None
    bits = params.get("modifiers") or 0
    if not isinstance(bits, int):
        return None
    modifiers = ("C" if bits & 6 else "") + ("S" if bits & 8 else "")
    modifiers = "A" + modifiers if bits & 1 and not bits & 6 else modifiers
    names = set()
    for field in ("key", "code"):
        value = params.get(field)
        if isinstance(value, str) and value:
            names.add(value.upper() if len(value) == 1 else value)
            for prefix in ("Key", "Digit"):  # code "KeyT", "Digit1"
                if value.startswith(prefix) and len(value) == len(prefix) + 1:
                    names.add(value[-1].upper())
    for field in ("windowsVirtualKeyCode", "nativeVirtualKeyCode"):
        if isinstance(params.get(field), int) and params[field] in KEY_CODES:
            names.add(KEY_CODES[params[field]])
    for name in names:
        reason = SHORTCUTS.get((modifiers, name))
        if reason:
            shown = "+".join([part for flag, part in (("C", "Ctrl"), ("A", "Alt"), ("S", "Shift"))
                              if flag in modifiers] + [name])
            return f"{shown} is one of the browser's own shortcuts: {reason} (only the page gets input)"
    return None


class Refused(Exception):
    """The message must not reach the browser; str() is the reason, for the caller's CDP error."""


class Policy:
    """The checks for one session: `downloads` is its own download folder (None: downloads are refused)."""

    def __init__(self, downloads=None):
        self.downloads = os.path.realpath(downloads) if downloads else None
        self.streams = set()  # stream handles seen in the browser's replies (Page.printToPDF, Fetch's bodies)
        self.rules = {
            "Target.createTarget": self._url_param("url", PAGE_SCHEMES, empty_ok=True),
            "Page.navigate": self._url_param("url", PAGE_SCHEMES),
            "Network.loadNetworkResource": self._url_param("url", WEB_SCHEMES),
            "Fetch.continueRequest": self._url_param("url", WEB_SCHEMES, empty_ok=True),
            "Network.continueInterceptedRequest": self._url_param("url", WEB_SCHEMES, empty_ok=True),
            "Target.createBrowserContext": self._no_proxy,
            "Browser.setDownloadBehavior": self._downloads_here,
            "Page.setDownloadBehavior": self._downloads_here,
            "DOM.setFileInputFiles": self._files_param(lambda params: params.get("files")),
            "Input.dispatchDragEvent": self._files_param(lambda params: (params.get("data") or {}).get("files")),
            "Target.sendMessageToTarget": self._inner_message,
            "Target.setAutoAttach": self._page_targets_only,
            "Target.autoAttachRelated": self._page_targets_only,
            "Target.setDiscoverTargets": self._page_targets_only,
            "Target.getTargets": self._page_targets_only,
            "Input.dispatchKeyEvent": self._page_keys_only,
            "IO.read": self._known_stream,
            "IO.close": self._known_stream,
        }

    def check(self, message):
        """The message to forward (maybe rewritten); raises Refused. `message` is a parsed JSON value."""
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            raise Refused("a CDP command is a JSON object with a string \"method\"")
        params = message.get("params", {})
        if not isinstance(params, dict) or not isinstance(message.get("sessionId", ""), str):
            raise Refused("\"params\" must be an object and \"sessionId\" a string")
        method = message["method"]
        reason = REFUSED.get(method) or REFUSED.get(method.split(".", 1)[0] + ".")
        if reason:
            raise Refused(reason)
        rule = self.rules.get(method)
        if rule is not None:
            message = {**message, "params": rule(dict(params))}
        return message

    # Rules: each takes a copy of the params and returns the params to forward, or raises Refused.

    def _url_param(self, name, schemes, empty_ok=False):
        def rule(params):
            value = params.get(name)
            if value is None or (empty_ok and value == ""):
                return params
            if not isinstance(value, str):
                raise Refused(f"\"{name}\" must be a string")
            refusal = url_refusal(value, schemes)
            if refusal:
                raise Refused(refusal)
            return params
        return rule

    @staticmethod
    def _no_proxy(params):
        for name in ("proxyServer", "proxyBypassList"):
            if name in params:
                raise Refused(f"\"{name}\" is not allowed: every connection of a session goes through its egress proxy")
        return params

    def _downloads_here(self, params):
        """Downloads land in the session's own folder whatever path the caller named (Playwright names a
        folder of its own for every context), under the name the site suggested (Browser.downloadWillBegin's
        suggestedFilename): "allowAndName" (Playwright's) would name each file by its GUID, and the session's
        downloads listing, the SDK's get_downloaded_files, would show that; the caller cannot read that folder in
        any case. Other behaviours (deny, default) need no path."""
        if params.get("behavior") in ("allow", "allowAndName"):
            if self.downloads is None:
                raise Refused("this session's browser has no download folder here (it runs on a Selenium Grid)")
            params["behavior"], params["downloadPath"] = "allow", self.downloads
        else:
            params.pop("downloadPath", None)
        return params

    def _files_param(self, files_of):
        def rule(params):
            files = files_of(params)
            if files is None:
                return params
            if not isinstance(files, list) or not all(isinstance(path, str) for path in files):
                raise Refused("\"files\" must be a list of paths")
            for path in files:
                if not self._in_downloads(path):
                    raise Refused(f"{path!r} is not a file of this session's downloads; only those can be given to "
                                  f"a page")
            return params
        return rule

    def _in_downloads(self, path):
        if self.downloads is None or not os.path.isabs(path):
            return False
        return os.path.realpath(path).startswith(self.downloads + os.sep)

    @staticmethod
    def _page_targets_only(params):
        """Chromium's own targets are excluded ahead of whatever filter the caller gave."""
        given = params.get("filter")
        if given is not None and not (isinstance(given, list) and all(isinstance(entry, dict) for entry in given)):
            raise Refused("\"filter\" must be a list of {type, exclude} objects")
        params["filter"] = [{"type": kind, "exclude": True} for kind in HIDDEN_TYPES] + (
            given if given is not None else CHROMIUM_DEFAULT_FILTER)
        return params

    @staticmethod
    def _page_keys_only(params):
        refusal = shortcut_refusal(params)
        if refusal:
            raise Refused(refusal)
        return params

    def _known_stream(self, params):
        handle = params.get("handle")
        if not isinstance(handle, str) or handle not in self.streams:
            raise Refused("only a stream this session was given (by Page.printToPDF, Fetch or IO.resolveBlob) can "
                          "be read")
        return params

    def stream_given(self, handle):
        """A reply of the browser named this stream handle (or blob uuid): its callers may read it."""
        self.streams.add(handle)
        if not handle.startswith("blob:"):
            self.streams.add(f"blob:{handle}")

    def _inner_message(self, params):
        """The old, non-flat way to talk to a target: the wrapped command gets the same checks."""
        inner = params.get("message")
        if not isinstance(inner, str):
            raise Refused("\"message\" must be a string holding a CDP command")
        try:
            parsed = loads(inner)
        except ValueError:
            raise Refused("\"message\" is not a JSON CDP command") from None
        params["message"] = dumps(self.check(parsed))
        return params


def target_refusal(info):
    """None if the target (the browser's targetInfo, None if it has none such) may be driven, else why not."""
    if not isinstance(info, dict):
        return "the browser has no such target"
    kind, url = info.get("type"), str(info.get("url") or "")
    if kind not in PAGE_TYPES:
        return f"{kind!r} targets are the browser's own, not pages (only pages, frames and workers are served)"
    if url.lower().startswith(INTERNAL_SCHEMES):
        return f"{url.partition(':')[0]}: pages are the browser's own (only web pages are served)"
    return None


def url_refusal(url, schemes):
    """None if `url` may be opened, else why not. Normalised as Chromium's URL parser does first (tabs and
    newlines dropped anywhere, control characters and spaces trimmed at both ends), so both see one scheme."""
    cleaned = "".join(ch for ch in url if ch not in "\t\n\r").strip("".join(map(chr, range(0x21))))
    scheme, colon, rest = cleaned.partition(":")
    scheme = scheme.lower()
    if not colon or not scheme or not scheme[0].isalpha() or not set(scheme) <= SCHEME_CHARS:
        return "only absolute http(s) URLs (and about:blank) can be opened"
    if scheme == "about" and "about" in schemes:
        page = "about:" + rest.split("?", 1)[0].split("#", 1)[0].lower()
        if page in ABOUT_PAGES:
            return None
        return f"{page} is not served (only about:blank and about:srcdoc)"
    if scheme == "blob" and "blob" in schemes:
        return url_refusal(rest, WEB_SCHEMES) and "blob: URLs are allowed only for http(s) origins"
    if scheme not in schemes:
        return (f"{scheme}: URLs are not served (only {', '.join(sorted(schemes))}): the server's files and the "
                f"browser's own pages stay out of reach")
    return None


def _no_constants(name):
    raise ValueError(f"{name} is not JSON")


def loads(text):
    """JSON as the browser reads it: NaN and Infinity refused (the message is re-serialised before forwarding)."""
    return json.loads(text, parse_constant=_no_constants)


def dumps(message):
    return json.dumps(message, allow_nan=False, separators=(",", ":"))


def error_reply(message, reason):
    """The CDP error answer to a refused command (`message`: the parsed command, maybe not even an object)."""
    method = message.get("method") if isinstance(message, dict) else None
    reply = {"id": message.get("id") if isinstance(message, dict) else None,
             "error": {"code": ERROR_CODE, "message": f"{method or 'this message'} is refused by Remote Dispatch: "
                                                      f"{reason}"}}
    if isinstance(message, dict) and isinstance(message.get("sessionId"), str):
        reply["sessionId"] = message["sessionId"]
    return reply
