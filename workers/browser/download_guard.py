"""A task's downloads bounded while they are written: Chromium reports each download's progress over DevTools, and
one that passes a cap is cancelled there (Chromium then deletes its partial file).

The caps of app/files/service.keep_downloads apply to a finished file; a page's endless download is never finished,
and at loopback speed it wrote a gigabyte in a few seconds. Here the browser's own DevTools connection (a box's
socket on this machine) asks for download events (`Browser.setDownloadBehavior` "allow" into the folder the browser
already saves into, `eventsEnabled`), and each `Browser.downloadProgress` is checked as it comes: a download whose
declared or received size passes the per-file cap, or that takes the task's downloads past their total, gets
`Browser.cancelDownload`. A declared Content-Length over the cap is cancelled before its body is written; otherwise
what lands on disk is at most a cap plus what arrives between two progress reports (about half a second apart)."""
import logging
import threading

from app.live.cdp import Cdp, CdpUnavailable

log = logging.getLogger(__name__)


class DownloadGuard:
    """Watches one browser's downloads for as long as it is open; `cut` lists the cancelled ones as keep_downloads
    lists a file left out ({"name", "leftOut"})."""

    def __init__(self, endpoint, folder, file_cap, file_setting, total_cap, total_setting):
        self.file_cap, self.file_setting = file_cap, file_setting
        self.total_cap, self.total_setting = total_cap, total_setting
        self.cut = []
        self._names, self._received, self._finished = {}, {}, 0
        self._cancelled = set()
        self._lock = threading.Lock()
        self._cdp = Cdp(endpoint, self._event)
        self._cdp.call("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(folder),
                                                       "eventsEnabled": True})

    def _event(self, method, params, session):
        if method == "Browser.downloadWillBegin":
            self._names[params.get("guid")] = params.get("suggestedFilename") or "download"
        elif method == "Browser.downloadProgress":
            with self._lock:
                self._progress(params)

    def _progress(self, params):
        guid, state = params.get("guid"), params.get("state")
        received = int(params.get("receivedBytes") or 0)
        if state == "completed":
            self._received.pop(guid, None)
            self._finished += received
            return
        if state != "inProgress":
            self._received.pop(guid, None)
            return
        if guid in self._cancelled:
            return
        self._received[guid] = received
        declared = int(params.get("totalBytes") or 0)
        size = max(received, declared)
        others = self._finished + sum(got for known, got in self._received.items() if known != guid)
        # A declared length is the file's size, said as keep_downloads says it of a finished file.
        said = f"{size} bytes, " if declared >= received else f"cancelled while it was written, at {received} bytes: "
        if size > self.file_cap:
            why = f"over the limit of {self.file_cap} bytes for one downloaded file ({self.file_setting})"
        elif others + size > self.total_cap:
            why = (f"{'which would take' if declared >= received else 'it took'} this task's downloads past "
                   f"{self.total_cap} bytes ({self.total_setting})")
        else:
            return
        self._cancel(guid, said + why)

    def _cancel(self, guid, why):
        self._cancelled.add(guid)
        self._received.pop(guid, None)
        self.cut.append({"name": self._names.get(guid, "download"), "leftOut": why})
        try:  # from the reader's thread: sent, not waited for
            self._cdp.send("Browser.cancelDownload", {"guid": guid})
        except CdpUnavailable:
            pass
        log.info("download %s %s", self._names.get(guid, guid), why)

    def cancel_running(self, why):
        """Cancel every download still being written (a pause parks the browser, with no task to watch it)."""
        with self._lock:
            for guid in list(self._received):
                self._cancel(guid, why)

    def close(self):
        self._cdp.close()


def guard(browser, folder, config):
    """A DownloadGuard over `browser`'s downloads into `folder` when its DevTools socket is on this machine (a box of
    ours); None otherwise (a Grid's browser keeps its downloads on its node)."""
    endpoint = getattr(browser, "live_endpoint", None) or ""
    if not folder or not endpoint.startswith("unix:"):
        return None
    file_cap = min((config["DOWNLOAD_MAX_FILE_BYTES"], "DOWNLOAD_MAX_FILE_BYTES"),
                   (config["MAX_UPLOAD_BYTES"], "MAX_UPLOAD_BYTES"))
    try:
        return DownloadGuard(endpoint, folder, *file_cap, config["DOWNLOAD_MAX_TASK_BYTES"], "DOWNLOAD_MAX_TASK_BYTES")
    except CdpUnavailable as exc:
        log.warning("downloads are capped only once finished: %s", exc)
        return None
