"""One browser's sandbox: Chromium's flags and policies, its unprivileged user, bubblewrap, the forwarders across it, its files."""
import functools
import json
import logging
import os
import pwd
import re
import secrets
import shlex
import shutil
import stat
import subprocess
import tempfile
import time
from pathlib import Path

from .unix_http import driver_status, unix_url

log = logging.getLogger(__name__)

# Only subprocess and os here: the web side (kept sessions) and the workers (cloud_browser tasks) both use it.
USER = "rd-browser"
MARKER = "rd-browser.json"  # in each browser directory: proves the processes naming it are ours, and whose
INNER_DRIVER_PORT = 9515  # chromedriver and DevTools inside the browser's own network namespace
INNER_DEVTOOLS_PORT = 9222
BWRAP, SOCAT, SETPRIV = "/usr/bin/bwrap", "/usr/bin/socat", "/usr/bin/setpriv"
# run/ as the sandbox sees it besides its own path: its forwarders listen there, so a socket's address never
# outgrows sun_path (108 bytes) however deep VAR_DIR lies; the service connects by the long path (unix_http.connect).
INNER_RUN = "/run/rd"
FLAGS = ["--headless=new", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--no-default-browser-check",
         "--disable-features=Translate,MediaRouter", "--password-store=basic", "--use-mock-keychain"]
# The first page and every new tab: about:blank. Chromium's new-tab page (chrome://new-tab-page-third-party, whose
# links lead to the Web Store) is never shown to an agent or listed as a tab.
START_PAGE = "about:blank"
# Chromium enterprise policies, applied only to our browsers (bind-mounted over /etc/chromium/policies/managed in
# their mount namespace, never written machine-wide). chromedriver needs none of the blocked schemes.
BLOCKED_URLS = ["file://*", "filesystem:*", "chrome://*", "chrome-untrusted://*", "view-source:*", "devtools://*"]
# Chromium's own hidden UI pages: blocked, each would turn into an error tab that WebDriver lists as a window.
ALLOWED_URLS = ["chrome://omnibox-popup.top-chrome", "chrome://new-tab-page-third-party", "chrome://newtab"]


class HostUnavailable(Exception):
    """The sandbox cannot be set up on this machine (the message says what to install)."""


# What a person's desktop shows a site (docs/browser-identity.md): headless Chromium's screen is 800x600 and its
# window as large; ours is a 1920x1080 screen with a taskbar's 40 pixels taken from the available height.
SCREEN = (1920, 1080)
TASKBAR = 40
# navigator.webdriver false, as in a browser no one drives (Blink's AutomationControlled feature sets it true).
IDENTITY_FLAGS = ["--disable-blink-features=AutomationControlled"]
# WebGL through Mesa's llvmpipe (software, on the CPU) by ANGLE's OpenGL ES backend on EGL, as a Linux desktop with
# no usable GPU driver shows it, instead of SwiftShader, whose name in the renderer string detectors look for
# (docs/browser-identity.md). Chromium's GPU blocklist lists llvmpipe, hence --ignore-gpu-blocklist. It needs
# Mesa's EGL and its software driver (Debian's libegl-mesa0, libgl1-mesa-dri: `make browser`), under /usr, which
# the sandbox binds read-only whole; no /dev/dri. Without them: SwiftShader, as before. The compositor stays in
# software, as with --disable-gpu: composited by llvmpipe, a browser took three times as long to start.
LLVMPIPE_FLAGS = ["--use-angle=gl-egl", "--ignore-gpu-blocklist", "--disable-gpu-compositing"]
SWIFTSHADER_FLAGS = ["--disable-gpu"]
MESA_EGL_VENDOR = "/usr/share/glvnd/egl_vendor.d/50_mesa.json"
MESA_SOFTWARE_DRIVER = "dri/swrast_dri.so"  # llvmpipe, in the machine's multiarch library folder


@functools.lru_cache(maxsize=1)
def webgl_flags():
    """The flags choosing WebGL's renderer of a browser on this machine: llvmpipe when Mesa's EGL and its software
    driver are installed, else SwiftShader (said once in the log)."""
    libraries = [folder for folder in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64")
                 if os.path.exists(os.path.join(folder, MESA_SOFTWARE_DRIVER))]
    if os.path.exists(MESA_EGL_VENDOR) and libraries:
        return LLVMPIPE_FLAGS
    log.warning("Mesa's EGL or llvmpipe is not installed (%s, %s): WebGL renders with SwiftShader, which pages can "
                "see; `make browser` installs them", MESA_EGL_VENDOR, MESA_SOFTWARE_DRIVER)
    return SWIFTSHADER_FLAGS


def chromium_flags(window_size=(1280, 900), locale="en-US", chromium_path=None, screen=SCREEN, identity=None):
    """The command-line flags every local or Grid browser of ours gets: Chromium's own sandbox always stays on.
    With `chromium_path` (a browser on this machine), the User-Agent of every page, frame and worker is a desktop
    Chromium's of its version (headless Chromium's says HeadlessChrome), and WebGL renders with this machine's
    llvmpipe when it has one (webgl_flags); a Grid's User-Agent is set per tab instead, its WebGL is SwiftShader.
    `identity` (app/sandbox/settings.py, the caller's browserSettings) replaces the window, screen, locale and
    User-Agent with its own."""
    major = chromium_major(chromium_path) if chromium_path else None
    user_agent = desktop_user_agent(major) if major else None
    screen_info = f"{int(screen[0])}x{int(screen[1])} workAreaBottom={TASKBAR}"
    if identity is not None:
        window_size, locale, user_agent = identity.window_size, identity.locale, identity.user_agent
        screen_info = f"{int(identity.screen[0])}x{int(identity.screen[1])}"
        if identity.taskbar:
            screen_info += f" workAreaBottom={identity.taskbar}"
        if identity.device.pixel_ratio != 1:
            screen_info += f" devicePixelRatio={identity.device.pixel_ratio:g}"
    flags = FLAGS + (webgl_flags() if chromium_path else SWIFTSHADER_FLAGS) + IDENTITY_FLAGS + [
        f"--window-size={int(window_size[0])},{int(window_size[1])}", f"--lang={locale}",
        f"--screen-info={{{screen_info}}}"]
    if user_agent:
        flags.append(f"--user-agent={user_agent}")
    return flags


@functools.lru_cache(maxsize=8)
def chromium_version(chromium_path):
    """The full version of the Chromium at `chromium_path` ("156.0.8078.129", its `--version`), or None."""
    try:
        out = subprocess.run([chromium_path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"\b\d+\.\d+\.\d+\.\d+\b", out)
    return match.group(0) if match else None


def chromium_major(chromium_path):
    version = chromium_version(chromium_path)
    return version.split(".")[0] if version else None


def user_agent_metadata(brands, full_version):
    """The client hints of a desktop Chromium on Linux x86-64, for Emulation.setUserAgentOverride: with a
    --user-agent flag Chromium leaves the high-entropy ones empty (architecture, bitness, the full versions), which no
    desktop Chromium does. `brands`: the browser's own (chromium_brands)."""
    major = full_version.split(".")[0]
    return {"brands": brands,
            "fullVersionList": [{"brand": b["brand"], "version": full_version if b["version"] == major
                                 else f'{b["version"]}.0.0.0'} for b in brands],
            "fullVersion": full_version, "platform": "Linux", "platformVersion": "", "architecture": "x86",
            "bitness": "64", "model": "", "mobile": False, "wow64": False}


def chromium_brands(major):
    """navigator.userAgentData.brands of Chromium `major`, as Chromium makes them (embedder_support's
    GenerateBrandVersionList without a vendor brand): its GREASE brand and version, then or before "Chromium", in the
    order the major version picks. 156: [Not:A-Brand 8, Chromium 156]."""
    seed, chars = int(major), [" ", "(", ":", "-", ".", "/", ")", ";", "=", "?", "_"]
    grease = {"brand": f"Not{chars[seed % len(chars)]}A{chars[(seed + 1) % len(chars)]}Brand",
              "version": ["8", "99", "24"][seed % 3]}
    brands = [None, None]
    brands[seed % 2], brands[(seed + 1) % 2] = grease, {"brand": "Chromium", "version": str(seed)}
    return brands


def identity_override(chromium_path):
    """Emulation.setUserAgentOverride's parameters for a tab of the local Chromium at `chromium_path`: the User-Agent
    of its flag with the client hints of a desktop Chromium; None when its version is not known. The tab's dedicated
    workers and same-site frames take its override."""
    version = chromium_version(chromium_path)
    return identity_override_of(version) if version else None


def identity_override_of(version):
    """identity_override for a Chromium of `version` ("156.0.8078.129")."""
    major = version.split(".")[0]
    return {"userAgent": desktop_user_agent(major),
            "userAgentMetadata": user_agent_metadata(chromium_brands(major), version)}


def desktop_user_agent(major):
    """The User-Agent of Chromium `major` on a Linux desktop, as a headful one sends it (the reduced form: the minor
    version numbers are zeros in every Chromium since 101)."""
    return (f"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{major}.0.0.0 "
            "Safari/537.36")


def policies(downloads):
    policy = {"URLBlocklist": BLOCKED_URLS, "URLAllowlist": ALLOWED_URLS, "ExtensionInstallBlocklist": ["*"], "BrowserSignin": 0,
              "SyncDisabled": True, "PasswordManagerEnabled": False, "PromptForDownloadLocation": False,
              "AllowFileSelectionDialogs": False, "NewTabPageLocation": START_PAGE, "HomepageLocation": START_PAGE,
              "HomepageIsNewTabPage": False, "RestoreOnStartup": 4, "RestoreOnStartupURLs": [START_PAGE],
              # No page learns where the browser is unless the caller chose a place (browserSettings.geolocation,
              # granted over CDP): headless Chromium would grant every page's request.
              "DefaultGeolocationSetting": 2}
    if downloads:
        policy["DownloadDirectory"] = str(downloads)
    return policy


# chromedriver adds this script to every document it drives, before the page's own: it keeps Array, Object,
# Promise, Proxy, Symbol, JSON and Window as window.cdc_..._Array and so on, properties every page can list (BotD and
# fpscanner look for them). Its own scripts take `window.cdc_..._X || window.X`, so without the script they take
# the page's globals, as a chromedriver of before the script did.
CDC_SCRIPT = re.compile(rb"\(function \(\) \{(window\.cdc_[A-Za-z0-9]+_[A-Za-z]+ = window\.[A-Za-z]+;)+\}\) \(\);")


def quiet_chromedriver(chromedriver, folder):
    """A copy of `chromedriver` (in `folder`, made once per build of it) whose script of marks is blanked out,
    byte for byte the same length: the sandbox runs it in place of the original (BrowserBox._bwrap)."""
    info = os.stat(chromedriver)
    quiet = Path(folder) / f".chromedriver-{info.st_size}-{int(info.st_mtime)}"
    if quiet.exists():
        return str(quiet)
    data = Path(chromedriver).read_bytes()
    blanked = CDC_SCRIPT.sub(lambda m: b"(function () {" + b" " * (len(m.group(0)) - 20) + b"}) ();", data)
    Path(folder).mkdir(parents=True, exist_ok=True)
    part = Path(folder) / f"{quiet.name}.{os.getpid()}.part"
    part.write_bytes(blanked)
    os.chmod(part, 0o755)
    os.replace(part, quiet)  # whole or not at all: a parallel start finds one or makes its own
    return str(quiet)


def missing_tools():
    """None when the sandbox can run here, else a sentence saying what to install."""
    missing = [path for path in (BWRAP, SOCAT, SETPRIV) if not os.access(path, os.X_OK)]
    if not missing:
        return None
    return (f"The browser sandbox needs {', '.join(missing)}: `apt-get install bubblewrap socat util-linux` "
            "(or `make browser`).")


def ensure_user():
    """(uid, gid) of the browsers' own user, created if missing, when we run as root; None otherwise (the
    browsers then run as the current user, in an unprivileged user namespace). Idempotent."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
                        "--shell", "/usr/sbin/nologin", USER], check=False, capture_output=True)
        try:
            entry = pwd.getpwnam(USER)
        except KeyError:
            raise HostUnavailable(f"could not create the browser user {USER!r} (useradd failed)") from None
    if entry.pw_uid == 0:
        raise HostUnavailable(f"the browser user {USER!r} must not be root")
    return entry.pw_uid, entry.pw_gid


def devtools_socket_of(directory):
    """The DevTools Unix socket of the box at `directory` (one started with `devtools`): how the CDP relay and the
    live view (app/live) reach its browser, on the host where it runs."""
    return Path(directory) / "run" / "devtools.sock"


class BrowserBox:
    """One browser's directory and sandbox. `directory` (created here) holds:

    rd-browser.json (marker: owner pid), etc/ (policies, hosts, passwd of the sandbox), run/ (the sockets the
    forwarders meet at), home/, profile/, uploads/, and downloads/ unless `downloads` names another folder.

    Inside: bubblewrap with its own mount, pid, IPC and network namespaces, as USER. It sees /usr, a few
    files of /etc, its own folders and nothing else of the machine; its network has only loopback. Forwarders
    over Unix sockets give it the egress proxy (`proxy`, "host:port", offered inside on 127.0.0.1 at the same
    port) and give us its chromedriver (`driver_socket`, as a URL: `driver_url`) and DevTools (`devtools_socket`,
    as `debugger_address`, with `devtools`). Those two are Unix sockets in run/ (0700, the browsers' user's and
    root's) and nothing else: no TCP port of the host leads into a browser, so no page, task or CDP caller of
    another browser has anything to connect to (docs/browser-tenancy.md).
    `owner_pid`: the process whose death orphans the browser (tasks; the reaper then ends it); None for a kept
    session, which ends with the session. With `die_with_parent`, the kernel ends it with the starting thread."""

    def __init__(self, directory, *, owner_pid=None, proxy=None, downloads=None, devtools=False,
                 die_with_parent=True, time_zone=None, binaries=(), drivers_dir=None):
        self.directory = Path(directory)
        # Where the quiet copy of chromedriver is kept (quiet_chromedriver): beside the box unless told.
        self.drivers_dir = Path(drivers_dir) if drivers_dir else self.directory.parent
        # Binaries outside /usr (a CHROMIUM_PATH of one's own) are shown to the sandbox read-only.
        self.binaries = sorted({os.path.dirname(os.path.realpath(path)) for path in binaries if path
                                and not os.path.realpath(path).startswith("/usr/")})
        self.drivers = [os.path.realpath(path) for path in binaries
                        if path and os.path.basename(os.path.realpath(path)) == "chromedriver"]
        self.quiet_drivers = []  # (our copy, the chromedriver it stands for inside), made by prepare()
        self.owner_pid, self.proxy, self.devtools = owner_pid, proxy, devtools
        self.die_with_parent, self.time_zone = die_with_parent, time_zone
        self.run, self.home, self.profile = self.directory / "run", self.directory / "home", self.directory / "profile"
        self.uploads = self.directory / "uploads"
        self.downloads = Path(downloads) if downloads else self.directory / "downloads"

    # How the service reaches the browser: these paths (or the same as URLs) are the only way in.
    @property
    def driver_socket(self):
        return self.run / "driver.sock"

    @property
    def devtools_socket(self):
        return devtools_socket_of(self.directory) if self.devtools else None

    @property
    def driver_url(self):
        """chromedriver's base URL, `http+unix://<socket>` (app/sandbox/unix_http.py speaks it)."""
        return unix_url(self.driver_socket)

    @property
    def debugger_address(self):
        """DevTools' address as kept sessions store it: `unix:<socket>` (a Grid's is a ws:// URL)."""
        return f"unix:{self.devtools_socket}" if self.devtools else None

    def prepare(self):
        problem = missing_tools()
        if problem:
            raise HostUnavailable(problem)
        if any(char in str(path) for path in (self.directory, self.downloads) for char in ",:!\"'\\"):
            raise HostUnavailable(f"browser directories must not contain , : ! quotes or backslashes: {self.directory}")
        ids = ensure_user()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.quiet_drivers = [(quiet_chromedriver(driver, self.drivers_dir), driver) for driver in self.drivers]
        os.chmod(self.directory, 0o755)  # the service's; inside, only what is bound below is visible
        write_marker(self.directory, self.owner_pid)
        etc = self.directory / "etc"
        (etc / "policies").mkdir(parents=True, exist_ok=True)
        (etc / "policies" / "remote-dispatch.json").write_text(json.dumps(policies(self.downloads)))
        (etc / "hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")
        (etc / "nsswitch.conf").write_text("passwd: files\ngroup: files\nhosts: files\n")
        uid, gid = ids or (os.getuid(), os.getgid())
        (etc / "passwd").write_text(f"root:x:0:0::/:/usr/sbin/nologin\n{USER}:x:{uid}:{gid}::{self.home}:/usr/sbin/nologin\n")
        (etc / "group").write_text(f"root:x:0:\n{USER}:x:{gid}:\n")
        for path in (self.run, self.home, self.profile, self.uploads, self.downloads):
            path.mkdir(parents=True, exist_ok=True)
            os.chmod(path, 0o700)
            if ids:
                os.chown(path, *ids)
        return self

    def command(self, argv):
        """The argv that runs `argv` (chromedriver and its flags) inside the sandbox, with the forwarders around it.
        It leads nothing itself: start it with start_new_session so one killpg ends it all."""
        run = INNER_RUN
        keep = f"{SETPRIV} --pdeathsig KILL"  # an outer forwarder ends with the sandbox that it serves
        # chromedriver and DevTools listen inside on loopback of the box's own network namespace; their forwarders
        # end in run/ as Unix sockets, which the service connects to directly (no host TCP listener at all).
        # Every TCP end is `nodelay`: a forwarder relays what it reads as it comes, and with Nagle's algorithm a
        # request of several segments (page.js is 35 KB) waited for the peer's delayed ACK: 45 ms per page call.
        outer = []
        inner = [f"{SOCAT} UNIX-LISTEN:{run}/driver.sock,unlink-early,fork,mode=600 "
                 f"TCP:127.0.0.1:{INNER_DRIVER_PORT},nodelay"]
        if self.devtools:
            inner.append(f"{SOCAT} UNIX-LISTEN:{run}/devtools.sock,unlink-early,fork,mode=600 "
                         f"TCP:127.0.0.1:{INNER_DEVTOOLS_PORT},nodelay")
        if self.proxy:
            host, _, port = self.proxy.rpartition(":")
            owner = f",user={USER}" if os.geteuid() == 0 else ""
            # Outside, it listens by a name relative to run/ (its working folder): the same path-length rule.
            outer.append(f"(cd {shlex.quote(str(self.run))} && exec {keep} {SOCAT} UNIX-LISTEN:proxy.sock,unlink-early,"
                         f"fork,mode=600{owner} TCP:{host.strip('[]')}:{port},nodelay)")
            inner.append(f"{SOCAT} TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork,nodelay UNIX-CONNECT:{run}/proxy.sock")
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.home), "LANG": "C.UTF-8",
               "CHROME_LOG_FILE": f"{INNER_RUN}/chrome_debug.log"}
        if self.time_zone:
            env["TZ"] = self.time_zone  # the whole browser, every tab, workers included
        inner_script = " & ".join(inner) + " & exec " + " ".join(shlex.quote(arg) for arg in argv)
        sandbox = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *self._bwrap(), "--"]
        if os.geteuid() == 0:
            sandbox += [SETPRIV, f"--reuid={USER}", f"--regid={USER}", "--clear-groups", "--"]
        sandbox += ["/bin/sh", "-c", inner_script]
        script = "".join(f"{forwarder} & " for forwarder in outer) + "exec " + " ".join(shlex.quote(arg) for arg in sandbox)
        return ["/bin/sh", "-c", script, "rd-browser-sandbox"]

    def _bwrap(self):
        args = [BWRAP, "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
                "--hostname", "rd-browser"]
        if os.geteuid() != 0:
            args.append("--unshare-user")
        if self.die_with_parent:
            args.append("--die-with-parent")
        args += ["--ro-bind", "/usr", "/usr"]
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            if os.path.islink(f"/{top}"):
                args += ["--symlink", os.readlink(f"/{top}"), f"/{top}"]
            elif os.path.isdir(f"/{top}"):
                args += ["--ro-bind", f"/{top}", f"/{top}"]
        etc = self.directory / "etc"
        made = {"/", "/usr"}
        args += self._dirs("/etc/chromium/policies", made)
        for name in ("hosts", "nsswitch.conf", "passwd", "group"):
            args += ["--ro-bind", str(etc / name), f"/etc/{name}"]
        args += ["--ro-bind", str(etc / "policies"), "/etc/chromium/policies/managed"]
        for public in ("/etc/fonts", "/etc/ld.so.cache", "/etc/chromium.d", "/etc/ssl/certs", "/etc/localtime"):
            args += ["--ro-bind-try", public, public]
        args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp"]
        made.add("/tmp")
        for folder in self.binaries:
            args += self._dirs(os.path.dirname(folder), made) + ["--ro-bind", folder, folder]
            made.add(folder)
        for quiet, driver in self.quiet_drivers:  # chromedriver as the sandbox runs it: without its marks
            args += ["--ro-bind", quiet, driver]
        args += self._dirs(str(self.directory.parent), made) + ["--ro-bind", str(self.directory), str(self.directory)]
        made.add(str(self.directory))
        for path in (self.run, self.home, self.profile):
            args += ["--bind", str(path), str(path)]
        args += self._dirs(os.path.dirname(INNER_RUN), made) + ["--bind", str(self.run), INNER_RUN]
        args += ["--ro-bind", str(self.uploads), str(self.uploads)]
        args += self._dirs(str(self.downloads.parent), made) + ["--bind", str(self.downloads), str(self.downloads)]
        return args + ["--chdir", str(self.home)]

    @staticmethod
    def _dirs(path, made):
        """bwrap arguments creating `path` and its parents (0755: bwrap's own default would hide them)."""
        args = []
        parts = Path(path).parts
        for depth in range(2, len(parts) + 1):
            part = str(Path(*parts[:depth]))
            if part not in made:
                made.add(part)
                args += ["--perms", "0755", "--dir", part]
        return args


def write_marker(directory, owner_pid):
    """(Re)write a browser directory's marker: `owner_pid` is the process whose death orphans its browser (None:
    no process; it ends with its kept session). Atomic: the reaper never reads half of it."""
    part = Path(directory) / f"{MARKER}.{secrets.token_hex(4)}"
    part.write_text(json.dumps({"owner_pid": owner_pid, "started": time.time()}))
    part.replace(Path(directory) / MARKER)


def stage_upload(uploads, path):
    """A copy of `path` a sandboxed browser can read (in its own `uploads` folder), for a file input."""
    folder = Path(uploads) / secrets.token_hex(8)
    folder.mkdir(mode=0o700)
    target = folder / os.path.basename(path)
    shutil.copyfile(path, target)
    ids = ensure_user()
    if ids:
        os.chown(folder, *ids)
        os.chown(target, *ids)
    return str(target)


def driver_ready(url):
    """True once chromedriver answers /status through the forwarders (the socket accepts before it does).
    Only network errors mean "not yet": anything else (a task's time limit) goes up to the caller."""
    return driver_status(url)


def unprivileged_chromedriver(chromedriver="/usr/bin/chromedriver"):
    """A chromedriver that root can start and that runs (with the Chromium it starts) as the browsers' own user,
    Chromium's sandbox on: a wrapper script in a fresh folder. For a Grid node run as root, and for browsers
    outside the sandbox (baselines, test browsers): no browser of ours runs as root or with its sandbox off."""
    folder = tempfile.mkdtemp(prefix="rd-chromedriver-")
    os.chmod(folder, 0o755)
    home = os.path.join(folder, "home")
    os.mkdir(home, 0o700)
    ids = ensure_user()
    prefix = ""
    if ids:
        os.chown(home, *ids)
        prefix = f"{SETPRIV} --reuid={USER} --regid={USER} --clear-groups -- "
    wrapper = os.path.join(folder, "chromedriver")
    with open(wrapper, "w") as out:
        out.write(f'#!/bin/sh\nexport HOME={home} TMPDIR={home}\nexec {prefix}{chromedriver} "$@"\n')
    os.chmod(wrapper, 0o755)
    return wrapper


def browser_owned(*paths):
    """Hand folders an unprivileged browser writes (its profile, downloads) to the browsers' user; the paths."""
    ids = ensure_user()
    for path in paths:
        if ids:
            os.chown(path, *ids)
    return paths[0] if len(paths) == 1 else paths


def wait_for_driver(url, proc, timeout=30):
    """None once chromedriver is ready, else why not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return f"the browser sandbox exited at start (status {proc.returncode})."
        if driver_ready(url):
            return None
        time.sleep(0.05)
    return "chromedriver did not become ready."


def private_file(path):
    """Make a file a dead browser downloaded the service's alone (0600, owned by us); False if it is no regular
    file (a symlink or anything else a browser could plant)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        if os.geteuid() == 0:
            os.fchown(fd, 0, 0)
        os.fchmod(fd, 0o600)
        return True
    finally:
        os.close(fd)


def being_written(name):
    """A download Chromium is still writing: `<name>.crdownload`, or a hidden temporary file it renames when done."""
    return name.endswith(".crdownload") or name.startswith(".")


def collect_downloads(downloads, into):
    """Move the finished downloads of a running browser out of its reach, into `into` (the service's, 0700), and
    keep only regular files there: once moved, the browser can no longer swap them for links. Returns the names
    this call moved (and kept)."""
    into = Path(into)
    into.mkdir(mode=0o700, exist_ok=True)
    os.chmod(into, 0o700)
    try:
        names = os.listdir(downloads)
    except OSError:
        names = []
    moved = []
    for name in names:
        if being_written(name):
            continue
        try:
            os.replace(os.path.join(downloads, name), into / name)
        except OSError:
            continue
        moved.append(name)
    for entry in into.iterdir():
        info = entry.lstat()
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1 or not private_file(entry):
            entry.unlink(missing_ok=True)
    return [name for name in moved if (into / name).is_file()]
