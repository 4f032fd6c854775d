"""How long page.js takes to read a 7,000-element page into a budgeted view (in the page, so no WebDriver
round trip): `.venv/bin/python -m bench.page_view [--chars 6000] [--runs 20]`. Prints the median and max ms,
the view's length and its last line (the marker)."""
import argparse
import os
import statistics
import tempfile

from tests.page_server import PageServer
from workers.browser.page_script import PAGE_JS
from workers.browser.launch import browsers_dir
from workers.browser.selenium_driver import SeleniumBrowser

BIG = ("<html><head><title>Catalogue</title></head><body><h1>Catalogue</h1>"
       + "".join(f"<div><a href='/item/{i}'>Item {i}</a> <span>costs {i} euros</span></div>" for i in range(7000))
       + "</body></html>")
TIMED = PAGE_JS + """
document.documentElement.removeAttribute("data-rd-read");
var t0 = performance.now(), view = window.__remoteDispatch.read({maxChars: arguments[0]});
return [performance.now() - t0, view.text.length, view.text.split("\\n").pop(), view.elements.length];"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--chars", type=int, default=6000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    pages = PageServer({"/big": BIG})
    browser = SeleniumBrowser(label="bench-page-view", page_load_timeout=180,
                              profile_root=browsers_dir(os.environ.get("VAR_DIR") or tempfile.mkdtemp()))
    try:
        browser.open(pages.url("/big"))
        browser.driver.execute_script(TIMED, args.chars)  # warm: the script compiled, styles computed once
        runs = [browser.driver.execute_script(TIMED, args.chars) for _ in range(args.runs)]
    finally:
        browser.close()
        pages.close()
    times = [r[0] for r in runs]
    print(f"7,000-element page, budget {args.chars} chars: median {statistics.median(times):.1f} ms, "
          f"max {max(times):.1f} ms over {args.runs} reads; view {runs[-1][1]} chars, {runs[-1][3]} elements "
          f"numbered; last line: {runs[-1][2]}")


if __name__ == "__main__":
    main()
