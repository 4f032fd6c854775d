"""The browser behind a cloud session: a W3C WebDriver session on a Selenium Grid, or on a chromedriver started here."""
import http.client
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ..sandbox import box as sandbox, processes as sandbox_processes, settings as browser_settings, unix_http
from ..sandbox.box import BrowserBox, HostUnavailable
from ..egress.proxy import EgressProxy, ProxyFailed, stop_proxies_under

log = logging.getLogger(__name__)

# Spoken over plain HTTP (the W3C protocol) with http.client: Selenium and requests are imported only by the
# workers, which re-attach to the session this creates (the web process starts sessions too, and stays small).
START_TIMEOUT = 30
MARKER = "rd-cloud-session-"  # in every profile directory we create: how the reaper proves a process is ours


class LaunchFailed(Exception):
    """No browser could be started for the session (the message says why)."""


@dataclass
class Launched:
    webdriver_url: str
    webdriver_session: str
    debugger_address: str | None  # unix:<socket> of our box's DevTools, or a Grid's se:cdp URL, when known
    host: str
    pid: int | None = None  # chromedriver, leader of its process group (local only)
    profile_dir: str | None = None


def sessions_root(config):
    return Path(config["VAR_DIR"]) / "cloud-sessions"


def session_dir(config, session_id):
    return sessions_root(config) / f"{MARKER}{session_id}"


def downloads_dir(config, session_id):
    return session_dir(config, session_id) / "downloads"


def files_dir(config, session_id):
    """The session's downloads once handed to the service (app/sandbox/box.collect_downloads): out of the
    browser's reach."""
    return session_dir(config, session_id) / "files"


def egress_dir(config, session_id):
    """Where the session's egress proxy keeps its port file and refusal log (the tasks' workers read it)."""
    return session_dir(config, session_id) / "egress"


def chain(config, session_id, proxy):
    """The session's browser leaves through the caller's proxy (app/egress/upstream.py) for the session's life:
    its egress proxy, started or yet to start, reads the settings from its directory at each connection."""
    EgressProxy(config, session_id, directory=egress_dir(config, session_id)).chain(proxy)


# A kept browser's time zone, for all its tasks: the spec's default timeZone, as a task's browser has when its task
# names none (a browser in UTC is a sign of a server: docs/browser-identity.md).
SESSION_ZONE = "America/Los_Angeles"


def window_size(config):
    width, _, height = str(config["BROWSER_WINDOW_SIZE"]).partition("x")
    return int(width), int(height or 900)


def identity(config, settings, local):
    """The session's browserSettings resolved (app/sandbox/settings.py) for its Chromium; None without settings."""
    if not settings:
        return None
    version = sandbox.chromium_version(config["CHROMIUM_PATH"]) if local else None
    return browser_settings.identity(settings, version, window_size(config), config["BROWSER_LOCALE"],
                                     SESSION_ZONE)


def chrome_options(config, proxy, profile_dir=None, downloads=None, local=False, chosen=None):
    """The flags of the cloud_browser driver (workers/browser/launch.py), for a kept browser behind
    its egress proxy; `local`: on this machine's Chromium (its version in the User-Agent), not a Grid's. `chosen`:
    the session's browserSettings (an Identity), whose window, screen and languages it takes."""
    args = sandbox.chromium_flags(window_size(config), config["BROWSER_LOCALE"],
                                  config["CHROMIUM_PATH"] if local else None, identity=chosen)
    args += [arg for arg in proxy.chromium_arguments() if arg not in args]  # as cloud_browser's
    if profile_dir:
        args.append(f"--user-data-dir={profile_dir}")
    prefs = {"credentials_enable_service": False, "profile.password_manager_enabled": False,
             "download.prompt_for_download": False,
             "intl.accept_languages": chosen.accept_languages if chosen is not None
             else browser_settings.accept_languages(config["BROWSER_LOCALE"])}
    if downloads:
        prefs.update({"download.default_directory": str(downloads), "download.directory_upgrade": True})
    return {"args": args, "prefs": prefs}


def launch(config, session_id, owner_pid=None, settings=None):
    """Start the session's browser behind an egress proxy of its own (the cloud_browser policy): on
    SELENIUM_REMOTE_URL when set, else on a chromedriver of our own. `owner_pid`: the process whose death
    orphans it (the session pool's, until a session adopts it); None: it ends with the session only. `settings`:
    the session's browserSettings."""
    # Started first and waited for last, as for cloud_browser; its own process group outlives this request.
    proxy = EgressProxy(config, session_id, directory=egress_dir(config, session_id)).start()
    try:
        if config.get("SELENIUM_REMOTE_URL"):
            launched = _launch_on_grid(config, session_id, proxy, identity(config, settings, local=False))
        else:
            launched = _launch_local(config, session_id, proxy, owner_pid, identity(config, settings, local=True))
        try:
            proxy.wait_ready()
        except ProxyFailed as exc:
            terminate(launched.webdriver_url, launched.webdriver_session, launched.host, launched.pid,
                      launched.profile_dir)
            raise LaunchFailed(str(exc)) from None
    except BaseException:
        proxy.stop()
        raise
    threading.Thread(target=proxy.proc.wait, name=f"reap-egress-proxy-{proxy.proc.pid}", daemon=True).start()
    return launched


def _launch_on_grid(config, session_id, proxy, chosen=None):
    url = config["SELENIUM_REMOTE_URL"].rstrip("/")
    caps = _new_session(url, {"browserName": "chrome", "goog:chromeOptions": chrome_options(config, proxy,
                                                                                          chosen=chosen)})
    version = caps["capabilities"].get("browserVersion")
    if chosen is not None and version:
        chosen = browser_settings.identity_of_version(chosen, version)
    _first_tab(url, caps["sessionId"], chosen, session_id, sandbox.identity_override_of(version) if version else None)
    return Launched(url, caps["sessionId"], caps["capabilities"].get("se:cdp"), host="grid")


def _launch_local(config, session_id, proxy, owner_pid=None, chosen=None):
    for path in (config["CHROMEDRIVER_PATH"], config["CHROMIUM_PATH"]):
        if not os.access(path, os.X_OK):
            raise LaunchFailed(f"{path} is not installed (make browser installs Chromium and chromedriver).")
    root = session_dir(config, session_id)
    # In its sandbox (app/sandbox/box.py), as the browsers' user; not tied to this request's thread: it ends
    # with the session. DevTools is reached through its Unix socket at debugger_address (the CDP proxy's target).
    box = BrowserBox(root, owner_pid=owner_pid, proxy=proxy.address, devtools=True, die_with_parent=False,
                     binaries=(config["CHROMIUM_PATH"], config["CHROMEDRIVER_PATH"]),
                     time_zone=chosen.time_zone if chosen else SESSION_ZONE)
    try:
        box.prepare()
    except HostUnavailable as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise LaunchFailed(str(exc)) from None
    logfile = open(root / "chromedriver.log", "ab")
    # Its own process group (start_new_session): it outlives this web request, and stopping the
    # session signals the group (the sandbox, its forwarders, chromedriver and Chromium) at once.
    proc = subprocess.Popen(box.command([config["CHROMEDRIVER_PATH"], f"--port={sandbox.INNER_DRIVER_PORT}"]),
                            stdout=logfile, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    logfile.close()
    threading.Thread(target=proc.wait, name=f"reap-chromedriver-{proc.pid}", daemon=True).start()
    url = box.driver_url
    try:
        problem = sandbox.wait_for_driver(url, proc, START_TIMEOUT)
        if problem:
            raise LaunchFailed(problem)
        options = {**chrome_options(config, proxy, box.profile, box.downloads, local=True, chosen=chosen),
                   "binary": config["CHROMIUM_PATH"]}
        options["args"].append(f"--remote-debugging-port={sandbox.INNER_DEVTOOLS_PORT}")
        caps = _new_session(url, {"browserName": "chrome", "goog:chromeOptions": options})
        _first_tab(url, caps["sessionId"], chosen, session_id, sandbox.identity_override(config["CHROMIUM_PATH"]))
    except BaseException:
        _kill_group(proc.pid, str(box.profile))
        shutil.rmtree(root, ignore_errors=True)
        raise
    return Launched(url, caps["sessionId"], box.debugger_address, host=socket.gethostname(), pid=proc.pid,
                    profile_dir=str(box.profile))


def _first_tab(url, webdriver_session, chosen, session_id, default=None):
    """The identity of its first tab, as a task's driver sets it in each tab it meets (SeleniumBrowser._emulate):
    the chosen one's User-Agent, client hints and emulation, or `default`'s client hints of a desktop Chromium."""
    cdp = cdp_sender(url, webdriver_session)
    override = chosen.user_agent_override if chosen is not None else default
    commands = [("Emulation.setUserAgentOverride", override)] if override else []
    if chosen is not None:
        commands += chosen.tab_commands + chosen.browser_commands
    for command, params in commands:
        try:
            cdp(command, params)
        except Unanswered:
            log.warning("%s failed in the first tab of session %s", command, session_id)


class Unanswered(Exception):
    """A WebDriver or DevTools endpoint could not be reached, or did not answer in time."""


def _call(method, url, body=None, timeout=15):
    """One HTTP request to a WebDriver or DevTools endpoint (a box's Unix socket, or the configured Grid):
    (status, JSON body or None). Raises Unanswered."""
    try:
        status, raw = unix_http.request(method, url, body, timeout)
    except (OSError, http.client.HTTPException) as exc:
        raise Unanswered(str(exc) or type(exc).__name__) from None
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, None


def _new_session(url, always_match):
    try:
        # chromedriver's load wait needs its Runtime domain, off here: the driver waits for loads itself (as
        # workers/browser/launch.py LOAD_STRATEGY says).
        always_match = {**always_match, "pageLoadStrategy": "none"}
        _status, reply = _call("POST", url + "/session", {"capabilities": {"alwaysMatch": always_match}},
                               timeout=START_TIMEOUT + 30)
        value = reply["value"]
    except (Unanswered, TypeError, KeyError) as exc:
        raise LaunchFailed(f"the WebDriver endpoint did not answer: {exc}") from None
    if "sessionId" not in value:
        raise LaunchFailed(f"the browser did not start: {value.get('message', value)}"[:500])
    # chromedriver's Runtime domain off in the first tab, as workers/browser/launch.py quiet_runtime does
    # for each tab a task's driver meets (a page could tell it on: docs/browser-identity.md).
    try:
        cdp_sender(url, value["sessionId"])("Runtime.disable")
    except Exception:
        log.warning("chromedriver's Runtime domain could not be turned off in session %s", value["sessionId"])
    return value


def _loud(webdriver_url, webdriver_session, method, path, body=None, timeout=15):
    """One WebDriver command that runs chromedriver's own scripts in the page, with its Runtime domain on for it and
    off again after (workers/browser/launch.py TrackedDriver does the same for a task's driver)."""
    base = f"{webdriver_url}/session/{webdriver_session}"

    def runtime(command):
        try:
            _call("POST", base + "/goog/cdp/execute", {"cmd": command, "params": {}}, timeout=timeout)
        except Unanswered:
            pass  # the command itself says whether the browser answers
    runtime("Runtime.enable")
    try:
        return _call(method, base + path, body, timeout=timeout)
    finally:
        runtime("Runtime.disable")


def is_alive(webdriver_url, webdriver_session):
    """True if the WebDriver session still answers (the browser is up)."""
    try:
        return _loud(webdriver_url, webdriver_session, "GET", "/url", timeout=5)[0] < 400
    except Unanswered:
        return False


def cdp_sender(webdriver_url, webdriver_session):
    """`cdp(command, params)` for the session's browser: chromedriver's CDP endpoint, over plain WebDriver HTTP."""
    def cdp(command, params=None):
        status, reply = _call("POST", f"{webdriver_url}/session/{webdriver_session}/goog/cdp/execute",
                              {"cmd": command, "params": params or {}})
        if status >= 400:
            raise Unanswered(f"{command}: {((reply or {}).get('value') or {}).get('message', status)}"[:300])
        return (reply or {}).get("value") or {}
    return cdp


def execute(webdriver_url, webdriver_session, script):
    """The value of `script` (a function body) run in the session's current tab."""
    status, reply = _loud(webdriver_url, webdriver_session, "POST", "/execute/sync", {"script": script, "args": []})
    if status >= 400:
        raise Unanswered(f"the script failed: {((reply or {}).get('value') or {}).get('message', status)}"[:300])
    return (reply or {}).get("value")


def terminate(webdriver_url, webdriver_session, host=None, pid=None, profile_dir=None, extra_pids=(),
              egress=None):
    """End the WebDriver session and every process of it we started on this host (`egress`: the session's
    egress_dir, whose proxy goes last, once no browser can use it). Idempotent."""
    if webdriver_url and webdriver_session:
        try:
            _call("DELETE", f"{webdriver_url}/session/{webdriver_session}", timeout=15)
        except Unanswered:
            pass  # already gone, or the Grid is down: the processes below still go
    if host not in (None, "grid") and host != socket.gethostname():
        log.warning("session processes live on %s; only the WebDriver session could be ended from here", host)
        return
    for extra in extra_pids:
        if extra:
            _kill_group(extra, None)
    if pid:
        _kill_group(pid, profile_dir)
    if profile_dir:
        _reap_profile_processes(profile_dir)
        shutil.rmtree(Path(profile_dir).parent / "profile", ignore_errors=True)
    if egress and MARKER in str(egress):
        stop_proxies_under(egress)


def held_here(host):
    """True if a session's processes (started on `host`) are this machine's to end."""
    return host == socket.gethostname()


def end_here(config, session_id):
    """End every process a session left on this machine and its profile, each found by the session's folder (the
    pids in its row may belong to others by now: this runs when the machine learns of a stop made elsewhere)."""
    directory = os.path.realpath(session_dir(config, session_id))
    pids = [pid for pid, found in sandbox_processes.processes_under(str(sessions_root(config))).items()
            if found == directory]
    sandbox_processes.end_processes(pids)
    _reap_profile_processes(os.path.join(directory, "profile"))
    shutil.rmtree(os.path.join(directory, "profile"), ignore_errors=True)
    stop_proxies_under(egress_dir(config, session_id))
    return len(pids)


def _kill_group(pid, profile_dir):
    """SIGTERM, then SIGKILL, the process group `pid` leads."""
    sandbox_processes.kill_group(pid)


def profile_processes(profile_dir):
    """PIDs whose command line names this session's profile directory (Chromium and its helpers)."""
    return [pid for pid, argv in sandbox_processes.processes() if any(profile_dir in arg for arg in argv)]


def _reap_profile_processes(profile_dir):
    """A Chromium that left the group (a crashed chromedriver re-parents it) is still found by its profile,
    whose path carries MARKER and the session id: only our own processes can match."""
    if MARKER not in profile_dir:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = profile_processes(profile_dir)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and profile_processes(profile_dir):
            time.sleep(0.05)
