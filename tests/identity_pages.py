"""Loopback pages that look at the browser as a site would: BotD and fpscanner (vendor/detectors, `make detectors`)
run in the page, and a report of what the page, an iframe and a worker see; each posts its findings back here,
with the request headers this server received for the page."""
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DETECTORS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "vendor", "detectors")

DETECT_PAGE = """<!doctype html><html><head><title>Detectors</title></head><body><h1>Detectors</h1>
<script type="module">
import { load } from '/botd.esm.js';
import FingerprintScanner from '/fpscanner.es.js';
const found = {};
try {
  const botd = await load({ monitoring: false });
  found.botd = botd.detect();
  found.botdDetections = botd.getDetections();
} catch (e) { found.botdError = String(e); }
try {
  const fp = await new FingerprintScanner().collectFingerprint({ encrypt: false });
  found.fpscanner = { fastBotDetection: fp.fastBotDetection, details: fp.fastBotDetectionDetails, signals: fp.signals };
} catch (e) { found.fpscannerError = String(e); }
// ?as=NAME files the findings under NAME: one test compares several loads of the page.
const as = new URLSearchParams(location.search).get('as') || 'detect';
await fetch('/found?page=' + encodeURIComponent(as), { method: 'POST', body: JSON.stringify(found) });
document.querySelector('h1').textContent = 'Detectors done';
</script></body></html>"""

# What a page can see of its browser, as one object; the same function runs in an iframe and in a worker.
SEEN = """async function seen() {
  const n = self.navigator, out = { userAgent: n.userAgent, appVersion: n.appVersion, platform: n.platform,
    languages: n.languages, language: n.language, hardwareConcurrency: n.hardwareConcurrency,
    deviceMemory: n.deviceMemory, webdriver: n.webdriver,
    timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone, locale: Intl.DateTimeFormat().resolvedOptions().locale };
  if (n.userAgentData) {
    out.brands = n.userAgentData.brands; out.mobile = n.userAgentData.mobile; out.uaPlatform = n.userAgentData.platform;
    out.high = await n.userAgentData.getHighEntropyValues(['architecture', 'bitness', 'model', 'platformVersion',
      'fullVersionList', 'uaFullVersion', 'wow64']);
  }
  try { out.geolocationPermission = (await n.permissions.query({ name: 'geolocation' })).state; }
  catch (e) { out.geolocationPermission = String(e); }
  try {
    const canvas = typeof document === 'undefined' ? new OffscreenCanvas(1, 1) : document.createElement('canvas');
    const gl = canvas.getContext('webgl'), info = gl.getExtension('WEBGL_debug_renderer_info');
    out.webglVendor = gl.getParameter(info.UNMASKED_VENDOR_WEBGL);
    out.webglRenderer = gl.getParameter(info.UNMASKED_RENDERER_WEBGL);
  } catch (e) { out.webglError = String(e); }
  if (typeof window !== 'undefined') {
    out.screen = { width: screen.width, height: screen.height, availWidth: screen.availWidth,
      availHeight: screen.availHeight, colorDepth: screen.colorDepth };
    out.window = { innerWidth: innerWidth, innerHeight: innerHeight, outerWidth: outerWidth, outerHeight: outerHeight,
      devicePixelRatio: devicePixelRatio };
    out.chrome = typeof window.chrome === 'object' && window.chrome !== null;
    out.chromeKeys = out.chrome ? Object.keys(window.chrome).sort() : [];
    out.plugins = n.plugins.length; out.mimeTypes = n.mimeTypes.length;
    out.maxTouchPoints = n.maxTouchPoints;
    out.touch = 'ontouchstart' in window;
    out.dark = matchMedia('(prefers-color-scheme: dark)').matches;
    out.windowKeys = Object.getOwnPropertyNames(window);
    out.documentKeys = Object.getOwnPropertyNames(document);
  }
  return out;
}"""

# The viewport meta tag of a site made for phones too: a phone's page is then as wide as its screen.
VIEWPORT_META = '<meta name="viewport" content="width=device-width, initial-scale=1">'
REPORT_PAGE = """<!doctype html><html><head><title>Report</title>%(meta)s</head><body><h1>Report</h1>
<script>
%(seen)s
(async () => {
  const found = { page: await seen() };
  const frame = document.createElement('iframe');
  frame.src = '/frame';
  await new Promise(ok => { frame.onload = ok; document.body.appendChild(frame); });
  found.iframe = await frame.contentWindow.seen();
  const worker = new Worker('/worker.js');
  found.worker = await new Promise(ok => { worker.onmessage = e => ok(e.data); });
  if (navigator.geolocation) {
    found.geolocation = await new Promise(ok => navigator.geolocation.getCurrentPosition(
      p => ok({ latitude: p.coords.latitude, longitude: p.coords.longitude }), e => ok({ error: e.code }),
      { timeout: 3000 }));
  }
  await fetch('/found?page=report', { method: 'POST', body: JSON.stringify(found) });
  document.querySelector('h1').textContent = 'Report done';
})();
</script></body></html>""" % {"seen": SEEN, "meta": VIEWPORT_META}

OPENER_PAGE = """<!doctype html><html><head><title>Opener</title></head><body><a href="/detect" target="_blank">Open
the detectors</a><script>fetch('/found?page=opener', { method: 'POST', body: '{}' });</script></body></html>"""
FRAME_PAGE = "<!doctype html><html><body><script>%s</script></body></html>" % SEEN
WORKER = SEEN + "\nseen().then(v => postMessage(v));\n"


class IdentityServer:
    """Serves /detect, /report (its /frame and /worker.js) and the detectors; `found[page]` is what the page posted,
    `headers[path]` the request headers each path was fetched with (the last time)."""

    def __init__(self):
        self.found, self.headers = {}, {}
        self._arrived = threading.Condition()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def url(self, path="/"):
        return f"http://127.0.0.1:{self._server.server_address[1]}{path}"

    def forget(self):
        with self._arrived:
            self.found.clear()
            self.headers.clear()

    def wait(self, page, timeout=60):
        with self._arrived:
            self._arrived.wait_for(lambda: page in self.found, timeout)
            return self.found.get(page)

    def close(self):
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        server = self
        files = {"/detect": (DETECT_PAGE, "text/html"), "/report": (REPORT_PAGE, "text/html"),
                 "/frame": (FRAME_PAGE, "text/html"), "/opener": (OPENER_PAGE, "text/html"), "/worker.js": (WORKER, "text/javascript")}

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _send(self, status, body, kind, extra=()):
                data = body.encode() if isinstance(body, str) else body
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                # Ask for every client hint, as a site that wants them does: the next requests carry them.
                self.send_header("Accept-CH", "Sec-CH-UA-Platform-Version, Sec-CH-UA-Full-Version-List, "
                                 "Sec-CH-UA-Arch, Sec-CH-UA-Bitness, Sec-CH-UA-Model, Sec-CH-UA-Mobile")
                for name, value in extra:
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                path = self.path.split("?")[0]
                with server._arrived:
                    server.headers[path] = {k.lower(): v for k, v in self.headers.items()}
                if path in files:
                    self._send(200, *files[path])
                elif path in ("/botd.esm.js", "/fpscanner.es.js"):
                    name = "botd.esm.js" if path == "/botd.esm.js" else "fpscanner.es.js"
                    with open(os.path.join(DETECTORS, name), "rb") as f:
                        self._send(200, f.read(), "text/javascript")
                else:
                    self._send(404, "not found", "text/plain")

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null")
                page = self.path.split("page=")[-1]
                with server._arrived:
                    server.headers["POST " + page] = {k.lower(): v for k, v in self.headers.items()}
                    server.found[page] = body
                    server._arrived.notify_all()
                self._send(200, "ok", "text/plain")

        return Handler


# What the detectors still find in our browsers (docs/browser-identity.md, "What a site can still see"): nothing.
# WebGL renders with Mesa's llvmpipe (app/sandbox/box.py webgl_flags), not SwiftShader, which fpscanner looks for.
STILL_SEEN = set()


def detect_steps(site, name="detect"):
    """A cloud_browser task's steps (the built-in planner) that open the detectors and wait until they have run; the
    findings are filed under `name` (`site.wait(name)`)."""
    path = "/detect" if name == "detect" else f"/detect?as={name}"
    return f'/Operator\ngo to {site.url(path)}\nwait for "Detectors done"\nextract h1'


def detections(found):
    """Every check of BotD and fpscanner that fired, by name ([] for a browser they take for a person's)."""
    hits = [f"botd.{name}:{d.get('botKind')}" for name, d in (found.get("botdDetections") or {}).items() if d.get("bot")]
    hits += [f"fpscanner.{name}" for name, d in (found.get("fpscanner") or {}).get("details", {}).items()
             if d.get("detected")]
    for error in ("botdError", "fpscannerError"):
        if found.get(error):
            hits.append(f"{error}: {found[error]}")
    return hits
