"""What bot detectors find, per kind of browser (docs/browser-identity.md): BotD 2.0.0 and fpscanner 1.0.2
(`make detectors`) in the page of our cloud_browser browser, of plain `selenium.webdriver.Chrome()` (headless), and of
Chromium run headful under Xvfb with no automation at all (the floor a person's browser sets). One run each:
`python -m bench.identity` prints each one's hits, and a table."""
import os
import shutil
import subprocess
import sys
import tempfile

from app.sandbox.box import SETPRIV, USER, browser_owned, ensure_user
from tests.identity_pages import DETECTORS, IdentityServer, detections

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
XVFB = "/usr/bin/Xvfb"


def ours(site):
    """A cloud_browser task's browser as it starts cold: sandboxed, behind its egress proxy, DevTools on."""
    from workers.browser.egress import BrowserEgressProxy
    from workers.browser.selenium_driver import SeleniumBrowser

    var = tempfile.mkdtemp(prefix="rd-bench-identity-")
    try:
        with BrowserEgressProxy({"VAR_DIR": var, "ALLOW_PRIVATE_URLS": True}, "bench-identity") as proxy:
            browser = SeleniumBrowser(label="bench-identity", profile_root=os.path.join(var, "browsers"),
                                      proxy=proxy.address, devtools=True, time_zone="America/Los_Angeles")
            try:
                browser.open(site.url("/detect"))
                return site.wait("detect")
            finally:
                browser.close()
    finally:
        shutil.rmtree(var, ignore_errors=True)


def plain_selenium(site):
    """`webdriver.Chrome()` with headless Chromium, as a Selenium user starts it (bench/browser.py's raw driver)."""
    from bench.browser import raw_driver

    driver = raw_driver()
    try:
        driver.get(site.url("/detect"))
        return site.wait("detect")
    finally:
        driver.quit()
        shutil.rmtree(driver.rd_profile, ignore_errors=True)


def headful(site):
    """Chromium with a window on an Xvfb display, nothing driving it: the page opened from its command line."""
    if not os.access(XVFB, os.X_OK):
        return None
    xvfb = subprocess.Popen([XVFB, "-displayfd", "1", "-screen", "0", "1920x1080x24", "-nolisten", "tcp"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    profile = browser_owned(tempfile.mkdtemp(prefix="rd-bench-headful-"))
    chromium = None
    try:
        display = xvfb.stdout.readline().decode().strip()
        prefix = [SETPRIV, f"--reuid={USER}", f"--regid={USER}", "--clear-groups", "--"] if ensure_user() else []
        chromium = subprocess.Popen(prefix + ["env", f"HOME={profile}", f"DISPLAY=:{display}", CHROMIUM,
                                              f"--user-data-dir={profile}", "--no-first-run",
                                              "--no-default-browser-check", "--window-size=1280,900",
                                              site.url("/detect")],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        return site.wait("detect", timeout=90)
    finally:
        for proc in (chromium, xvfb):
            if proc is not None:
                os.killpg(proc.pid, 9)
                proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


MODES = [("cloud_browser (ours, cold)", ours), ("plain selenium.webdriver.Chrome(), headless", plain_selenium),
         ("Chromium headful under Xvfb, no automation", headful)]


def main():
    if not os.path.exists(os.path.join(DETECTORS, "botd.esm.js")):
        sys.exit("BotD and fpscanner are not installed: run `make detectors`")
    site = IdentityServer()
    rows = []
    try:
        for name, run in MODES:
            site.forget()
            try:
                found = run(site)
            except Exception as exc:  # one mode that cannot run here says why; the others still run
                found, why = None, f"{type(exc).__name__}: {exc}"
            else:
                why = "Xvfb not installed (apt-get install xvfb)" if found is None else ""
            hits = detections(found) if found else None
            rows.append((name, hits, why))
            print(f"{name}: {why or (', '.join(hits) or 'no detection')}", flush=True)
    finally:
        site.close()
    print("\n| browser | detections (BotD + fpscanner) | which |\n|---|---|---|")
    for name, hits, why in rows:
        print(f"| {name} | {'n/a' if hits is None else len(hits)} | {why or ', '.join(hits) or 'none'} |")


if __name__ == "__main__":
    main()
