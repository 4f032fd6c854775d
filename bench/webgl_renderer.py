"""What WebGL through Mesa's llvmpipe costs beside SwiftShader (docs/browser-identity.md, app/sandbox/box.py
webgl_flags): our sandboxed browser started cold with each renderer's flags, interleaved runs. Per renderer: start
(SeleniumBrowser() and a plain page opened), the PSS of all the box's processes with that page open, then the time
until a page that draws in WebGL and WebGL2 has posted back and the PSS with it open; then the ratios.
`python -m bench.webgl_renderer [runs]`."""
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from app.sandbox import box
from bench.browser import pss_mib

# Draws a triangle in a WebGL and a WebGL2 canvas, reads a pixel back and posts what it got.
PAGE = b"""<html><body><h1>WebGL</h1><script>
function draw(kind) {
  const gl = document.createElement('canvas').getContext(kind);
  if (!gl) return null;
  const shader = (type, text) => { const s = gl.createShader(type); gl.shaderSource(s, text); gl.compileShader(s);
                                   return s; };
  const program = gl.createProgram();
  gl.attachShader(program, shader(gl.VERTEX_SHADER, 'attribute vec2 p;void main(){gl_Position=vec4(p,0,1);}'));
  gl.attachShader(program, shader(gl.FRAGMENT_SHADER,
                                  'precision mediump float;void main(){gl_FragColor=vec4(0,1,0,1);}'));
  gl.linkProgram(program); gl.useProgram(program);
  gl.bindBuffer(gl.ARRAY_BUFFER, gl.createBuffer());
  gl.bufferData(gl.ARRAY_BUFFER, new Float32Array([-1, -1, 3, -1, -1, 3]), gl.STATIC_DRAW);
  gl.enableVertexAttribArray(0); gl.vertexAttribPointer(0, 2, gl.FLOAT, false, 0, 0);
  gl.drawArrays(gl.TRIANGLES, 0, 3);
  const pixel = new Uint8Array(4); gl.readPixels(4, 4, 1, 1, gl.RGBA, gl.UNSIGNED_BYTE, pixel);
  const info = gl.getExtension('WEBGL_debug_renderer_info');
  return {renderer: gl.getParameter(info.UNMASKED_RENDERER_WEBGL), pixel: Array.from(pixel)};
}
fetch('/drawn', {method: 'POST', body: JSON.stringify({webgl: draw('webgl'), webgl2: draw('webgl2')})});
</script></body></html>"""
RENDERERS = {"SwiftShader": box.SWIFTSHADER_FLAGS, "llvmpipe": box.LLVMPIPE_FLAGS}


class DrawingPage:
    """The page on loopback, and what it posted back."""

    def __init__(self):
        self.drawn = None
        self.arrived = threading.Event()
        page = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self._send(PAGE if self.path == "/webgl" else b"<html><body><h1>Plain</h1></body></html>")

            def do_POST(self):
                page.drawn = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                page.arrived.set()
                self._send(b"ok")

            def _send(self, body):
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def box_pids(profile):
    """Every Chromium process of the browser whose profile is `profile` (its command line names it)."""
    pids = []
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if profile.encode() in f.read():
                    pids.append(int(pid))
        except (OSError, ValueError):
            continue
    return pids


def box_pss(browser):
    """PSS (MiB) of all the processes of `browser`'s box, a second after its page has loaded."""
    time.sleep(1)
    return sum(pss_mib(pid) for pid in box_pids(str(browser.profile)))


def one_run(page, flags):
    """(start s, PSS MiB at a plain page, WebGL page drawn s, PSS MiB at it, what it drew) of one cold browser
    started with the renderer's `flags`."""
    from workers.browser.egress import BrowserEgressProxy
    from workers.browser.selenium_driver import SeleniumBrowser

    chosen = box.webgl_flags
    box.webgl_flags = lambda: flags
    var = tempfile.mkdtemp(prefix="rd-bench-webgl-")
    try:
        with BrowserEgressProxy({"VAR_DIR": var, "ALLOW_PRIVATE_URLS": True}, "bench-webgl") as proxy:
            page.arrived.clear()
            began = time.monotonic()
            browser = SeleniumBrowser(label="bench-webgl", profile_root=os.path.join(var, "browsers"),
                                      proxy=proxy.address, devtools=True, time_zone="Europe/Paris")
            try:
                browser.open(page.url + "plain")
                start = time.monotonic() - began
                plain = box_pss(browser)
                began = time.monotonic()
                browser.open(page.url + "webgl")
                if not page.arrived.wait(60):
                    raise RuntimeError("the WebGL page posted nothing back")
                return start, plain, time.monotonic() - began, box_pss(browser), page.drawn
            finally:
                browser.close()
    finally:
        box.webgl_flags = chosen
        shutil.rmtree(var, ignore_errors=True)


def main(runs):
    page = DrawingPage()
    try:
        results = {name: [] for name in RENDERERS}
        for _ in range(runs):  # interleaved, so both see the same machine load
            for name, flags in RENDERERS.items():
                results[name].append(one_run(page, flags))
    finally:
        page.close()
    figures = ("start (s)", "PSS, plain page (MiB)", "WebGL page drawn (s)", "PSS, WebGL page (MiB)")
    medians = {}
    for name, rows in results.items():
        medians[name] = [statistics.median(row[i] for row in rows) for i in range(len(figures))]
        print(f"{name}: drew {rows[-1][-1]}")
        print("  " + ", ".join(f"{figure} {value:.2f}" for figure, value in zip(figures, medians[name]))
              + f" (medians of {runs})")
    print("llvmpipe / SwiftShader: " + ", ".join(
        f"{figure} {llvm / swift:.2f}x" for figure, llvm, swift in zip(figures, medians["llvmpipe"],
                                                                      medians["SwiftShader"])))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
