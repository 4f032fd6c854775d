"""Selenium's WebDriver connection over a browser box's Unix socket (an http+unix:// URL: app/sandbox/unix_http.py)."""
import urllib3
from selenium.webdriver.chrome.remote_connection import ChromeRemoteConnection
from selenium.webdriver.chromium.remote_connection import ChromiumRemoteConnection

from app.sandbox.unix_http import open_socket, socket_path


class _UnixConnection(urllib3.connection.HTTPConnection):
    def __init__(self, *args, unix_socket, **kwargs):
        super().__init__(*args, **kwargs)
        self.unix_socket = unix_socket

    def _new_conn(self):
        try:
            return open_socket(self.unix_socket, self.timeout)
        except OSError as exc:
            raise urllib3.exceptions.NewConnectionError(self, f"cannot connect to {self.unix_socket}: {exc}") from exc


class _UnixPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _UnixConnection

    def urlopen(self, method, url, *args, **kwargs):
        # Selenium names whole URLs (as to a PoolManager); the request line carries only the path.
        return super().urlopen(method, urllib3.util.parse_url(url).request_uri, *args, **kwargs)

    def clear(self):  # RemoteConnection.close() clears its PoolManager
        self.close()


class UnixRemoteConnection(ChromiumRemoteConnection):
    """ChromiumRemoteConnection whose requests go to the chromedriver socket `url` names (Host: localhost)."""

    def __init__(self, url, keep_alive=True):
        self.unix_socket = socket_path(url)
        if self.unix_socket is None:
            raise ValueError(f"{url!r} is not an http+unix:// URL")
        super().__init__(remote_server_addr="http://localhost", vendor_prefix="goog", browser_name="chrome",
                         keep_alive=keep_alive, ignore_proxy=True)

    def _get_connection_manager(self):
        return _UnixPool("localhost", timeout=self._client_config.timeout, maxsize=4, unix_socket=self.unix_socket)


def remote_connection(url):
    """The Selenium command executor for a chromedriver URL: our box's Unix socket, or a Grid's http(s) URL."""
    if socket_path(url) is not None:
        return UnixRemoteConnection(url)
    return ChromeRemoteConnection(url)
