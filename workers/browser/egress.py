"""The browser's egress for the Selenium drivers: the proxy (app/egress/proxy.py), typed URLs, download prefs."""
from urllib.parse import urlsplit

from app.egress.proxy import HARDENING_ARGUMENTS, EgressProxy, ProxyFailed, our_proxies, reap_orphans

from .base import BrowserUnavailable, NavigationRefused

__all__ = ["HARDENING_ARGUMENTS", "EgressProxy", "check_typed_url", "harden_chrome_options", "our_proxies",
           "reap_orphans"]

# What the agent may type (data: pages reach the network only through the proxy, like any page). Chromium
# itself blocks web pages from navigating to file:, chrome:, view-source:, devtools:, ...
BROWSER_SCHEMES = ("http", "https", "data")


def check_typed_url(url):
    """Refuse any URL the agent types that is not http(s) or data: file:, chrome:, view-source:, devtools:, ...

    The addresses are checked where the connection is made (the proxy), not here.
    """
    if (url or "").strip().lower() == "about:blank":
        return url
    scheme = urlsplit((url or "").strip()).scheme.lower()
    if scheme not in BROWSER_SCHEMES:
        raise NavigationRefused(f"navigation refused: {scheme or 'a URL without a'} scheme is not allowed "
                                f"(only http, https and data): {url[:200]!r}")
    return url



def harden_chrome_options(options, proxy, download_dir):
    """Route a Selenium ChromeOptions' traffic through `proxy` and keep downloads in `download_dir`."""
    for argument in proxy.chromium_arguments():
        options.add_argument(argument)
    prefs = dict(options.experimental_options.get("prefs") or {})
    prefs.update({
        "download.default_directory": str(download_dir),
        "download.prompt_for_download": False,
        "download.directory_upgrade": True,
        "savefile.default_directory": str(download_dir),
        "safebrowsing.enabled": False,
    })
    options.add_experimental_option("prefs", prefs)
    return options



class BrowserEgressProxy(EgressProxy):
    """The shared proxy; a start failure is the browser's (the task ends as error saying why)."""

    def wait_ready(self, timeout=20):
        try:
            return super().wait_ready(timeout)
        except ProxyFailed as exc:
            raise BrowserUnavailable(str(exc)) from None
