"""Several machines on this one, for tests/test_multihost.py (and bench/multihost.py): each machine is a network,
mount, UTS and pid namespace of its own (its own address on a private bridge, its own hostname, its own /tmp,
/dev/shm and so its own VAR_DIR, its own process tree), running the Procfile's own commands.

    with Deployment({"web1": ["web"], "web2": ["web"], "worker1": ["worker"], "ops": ["webhooks", "control", "beat"]}) as d:
        d.url("web2")                  # http://10.a.b.12:8000, that machine's API
        d.machine("worker1").processes()   # host pids of everything running on it

The deployment has its own Postgres database and RabbitMQ vhost (never the suite's) and its own rate-limit prefix
in Redis; the host's Postgres, RabbitMQ and Redis listen on loopback only, so socat relays them from the bridge's
own address (the machines' gateway). Everything is named after the run's id under PREFIX, and the run holds a lock
file while it lives: `sweep()` (called by every new Deployment) removes what runs that died (interrupted, killed)
left behind: their namespaces and every process in them, their bridge, their relays, their database and vhost.
"""
import fcntl
import ipaddress
import os
import random
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import requests
from cryptography.fernet import Fernet

from tests.processes import ROOT

PREFIX = "rdmh"  # namespaces, bridge, veths: PREFIX + the run's 6 hex digits (+ a suffix); at most 15 characters
DB_PREFIX = "rd_mh_"  # the run's database and vhost
LOCK_DIR = Path(tempfile.gettempdir()) / "rd-multihost"
WEB_PORT = 8000
# The host's services, as the machines reach them through the relays on the gateway address.
SERVICES = {"postgres": 5432, "rabbitmq": 5672, "redis": 6379}
PROCFILE = ROOT / "Procfile"
VENV_BIN = ROOT / ".venv" / "bin"


def run(*argv, check=True, **kwargs):
    return subprocess.run(argv, check=check, capture_output=True, text=True, **kwargs)


def procfile():
    """The Procfile's commands by process type (`web`, `worker`, ...)."""
    commands = {}
    for line in PROCFILE.read_text().splitlines():
        if re.match(r"^[a-z]+:", line):
            name, command = line.split(":", 1)
            commands[name] = command.strip()
    return commands


# --- the host's processes, seen from here --------------------------------------------------------------------

def _ppids():
    """{pid: parent pid} of every process of this machine (all namespaces: /proc shows host pids)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def descendants(root_pid):
    """Host pids of `root_pid`'s whole tree (itself excluded), nested namespaces included."""
    children = {}
    for pid, parent in _ppids().items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], [root_pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _pid_namespace(pid):
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


# --- leftovers of earlier runs -------------------------------------------------------------------------------

def _run_alive(run_id):
    """True while the run that owns `run_id` holds its lock file."""
    lock = LOCK_DIR / f"{run_id}.lock"
    if not lock.exists():
        return False
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def _run_id_of(name):
    match = re.match(rf"^(?:{PREFIX}|{DB_PREFIX})([0-9a-f]{{6}})", name)
    return match.group(1) if match else None


def sweep(keep=()):
    """Remove whatever runs that are no longer alive left: namespaces (and every process in them), bridges and
    veths, relays, databases, vhosts, lock files. Runs still alive (a parallel test run) are left alone."""
    dead = {}

    def is_dead(name):
        run_id = _run_id_of(name)
        if run_id is None or run_id in keep:
            return False
        if run_id not in dead:
            dead[run_id] = not _run_alive(run_id)
        return dead[run_id]

    for line in run("ip", "netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        if is_dead(name):
            _delete_netns(name)
    for line in run("ip", "-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if is_dead(name):
            run("ip", "link", "del", name, check=False)
    for pid in [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]:
        argv0 = cmdline(pid).split(" ", 1)[0]
        if argv0.startswith(PREFIX) and is_dead(argv0):  # the relays (socat), named after their run
            _kill(pid)
    databases = run("psql", "-h", "127.0.0.1", "-U", "postgres", "-tAc",
                    f"SELECT datname FROM pg_database WHERE datname LIKE '{DB_PREFIX}%'", check=False).stdout.split()
    for name in databases:
        if is_dead(name):
            _drop_database(name)
    for name in run("rabbitmqctl", "-q", "list_vhosts", check=False).stdout.split():
        if is_dead(name):
            run("rabbitmqctl", "-q", "delete_vhost", name, check=False)
    for lock in LOCK_DIR.glob("*.lock") if LOCK_DIR.exists() else ():
        if is_dead(PREFIX + lock.stem):
            lock.unlink(missing_ok=True)
            shutil.rmtree(LOCK_DIR / lock.stem, ignore_errors=True)


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _delete_netns(name):
    """Every process in the namespace killed, then the namespace (and with it its end of each veth) deleted."""
    for _ in range(20):
        pids = [int(p) for p in run("ip", "netns", "pids", name, check=False).stdout.split()]
        if not pids:
            break
        for pid in pids:
            _kill(pid)
        time.sleep(0.1)
    run("ip", "netns", "del", name, check=False)


def _drop_database(name):
    run("psql", "-h", "127.0.0.1", "-U", "postgres", "-qc", f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)',
        check=False)


def _free_subnet():
    """A /24 in 10.0.0.0/8 that no address or route of this machine touches (nor another run's bridge)."""
    used = run("ip", "-4", "route", "show", "table", "all").stdout + run("ip", "-4", "addr").stdout
    networks = [ipaddress.ip_network(m, strict=False) for m in re.findall(r"\b(\d+\.\d+\.\d+\.\d+/\d+)", used)]
    for _ in range(200):
        candidate = ipaddress.ip_network(f"10.{random.randint(100, 254)}.{random.randint(0, 255)}.0/24")
        if not any(candidate.overlaps(net) for net in networks if net.prefixlen > 0):
            return candidate
    raise RuntimeError("no free 10.x.y.0/24 for the test machines")


# --- one machine ---------------------------------------------------------------------------------------------

class Machine:
    """A namespace machine: `init` is the pid (in this namespace) of its pid 1; everything it runs descends from
    it, so killing it kills the machine."""

    def __init__(self, deployment, name, index):
        self.deployment, self.name, self.index = deployment, name, index
        self.netns = f"{deployment.prefix}-{name}"
        self.hostname = f"{deployment.prefix}-{name}"  # socket.gethostname() there: unique, so runs never mix
        self.address = str(deployment.subnet.network_address + index)
        self.processes_started = []
        self._make_network()
        self._start_init()

    def _make_network(self):
        d = self.deployment
        outside, inside = f"{d.prefix}v{self.index}", f"{d.prefix}p{self.index}"
        run("ip", "netns", "add", self.netns)
        run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        run("ip", "link", "set", inside, "netns", self.netns)
        run("ip", "link", "set", outside, "master", d.bridge, "up")
        ns = ("ip", "-n", self.netns)
        run(*ns, "link", "set", inside, "name", "eth0")
        run(*ns, "addr", "add", f"{self.address}/{d.subnet.prefixlen}", "dev", "eth0")
        run(*ns, "link", "set", "eth0", "up")
        run(*ns, "link", "set", "lo", "up")
        run(*ns, "route", "add", "default", "via", d.gateway)

    def _start_init(self):
        """pid 1 of the machine: private /tmp and /dev/shm (so its own VAR_DIR), its hostname, an /etc/hosts naming
        every machine of the deployment and an /etc/resolv.conf with no reachable server (there is no DNS on the
        bridge: a lookup fails at once instead of timing out), and /tmp/app: the code (symlinks to the work tree)
        as the Procfile's working directory, where beat may write its schedule."""
        d = self.deployment
        hosts = "127.0.0.1 localhost\n::1 localhost\n" + "".join(
            f"{d.subnet.network_address + index} {d.prefix}-{name}\n" for index, name in enumerate(d.layout, start=11))
        links = " ".join(shlex.quote(str(p)) for p in ROOT.iterdir() if p.name not in (".git", "var"))
        # A checkout under /tmp (a clone made there) stays where it is: held at /mnt while /tmp is replaced.
        root = shlex.quote(str(ROOT))
        keep_root = (f"mount --bind {root} /mnt && ", f"mkdir -p {root} && mount --bind /mnt {root} && umount /mnt && ") \
            if ROOT.is_relative_to("/tmp") else ("", "")
        script = (f"{keep_root[0]}mount -t tmpfs -o mode=1777 tmpfs /tmp && {keep_root[1]}"
                  f"mount -t tmpfs -o mode=1777 tmpfs /dev/shm && "
                  f"mkdir -p /tmp/app /tmp/var /tmp/.etc && printf %s {shlex.quote(hosts)} > /tmp/.etc/hosts && "
                  f"echo 'nameserver 127.0.0.1' > /tmp/.etc/resolv.conf && "
                  f"mount --bind /tmp/.etc/hosts /etc/hosts && mount --bind /tmp/.etc/resolv.conf /etc/resolv.conf && "
                  f"hostname {self.hostname} && ln -s {links} /tmp/app/ && exec sleep infinity")
        self.launcher = subprocess.Popen(
            ["ip", "netns", "exec", self.netns, "unshare", "--mount", "--uts", "--pid", "--fork", "--mount-proc",
             "--propagation", "private", "sh", "-c", script],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            sleeping = [pid for pid in descendants(self.launcher.pid) if cmdline(pid) == "sleep infinity"]
            if sleeping:
                self.init = sleeping[0]
                return
            if self.launcher.poll() is not None:
                raise RuntimeError(f"machine {self.name} did not start: {self.launcher.stderr.read()}")
            time.sleep(0.05)
        raise RuntimeError(f"machine {self.name} did not start")

    def popen(self, command, env, log_name):
        """Run a shell command on this machine (in all its namespaces, from /tmp/app), in its own process group."""
        log = open(self.deployment.log_dir / f"{self.name}-{log_name}.log", "ab")
        proc = subprocess.Popen(
            ["nsenter", "-t", str(self.init), "-m", "-u", "-p", "-n", "env", "-i",
             *[f"{k}={v}" for k, v in env.items()], "sh", "-c", f"cd /tmp/app && exec {command}"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        proc.log_path = Path(log.name)
        log.close()
        self.processes_started.append(proc)
        return proc

    def run(self, command, env, timeout=120):
        """Run a command to its end on this machine; returns its output (fails with it on a non-zero exit)."""
        proc = subprocess.run(
            ["nsenter", "-t", str(self.init), "-m", "-u", "-p", "-n", "env", "-i",
             *[f"{k}={v}" for k, v in env.items()], "sh", "-c", f"cd /tmp/app && {command}"],
            capture_output=True, text=True, timeout=timeout)
        if proc.returncode:
            raise RuntimeError(f"{command!r} on {self.name} failed:\n{proc.stdout}\n{proc.stderr}")
        return proc.stdout

    def processes(self):
        """Host pids of everything running on the machine now (its pid 1 excluded): the processes of its pid
        namespace (those nsenter started are not children of its pid 1) and all they started, nested sandboxes'
        namespaces included."""
        own = _pid_namespace(self.init)
        found = set()
        for pid in _ppids():
            if pid != self.init and pid not in found and _pid_namespace(pid) == own:
                found.add(pid)
                found.update(descendants(pid))
        return sorted(found)

    def processes_matching(self, text):
        return [pid for pid in self.processes() if text in cmdline(pid)]

    def alive(self):
        return self.launcher.poll() is None

    def kill(self):
        """Switch the machine off: its pid 1 killed, the kernel kills every process of its pid namespace."""
        _kill(self.init)
        try:
            self.launcher.wait(10)
        except subprocess.TimeoutExpired:
            _kill(self.launcher.pid)
        for proc in self.processes_started:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait(10)


# --- the deployment ------------------------------------------------------------------------------------------

class Deployment:
    """Machines on a private bridge running the Procfile's commands against a database and vhost of their own.

    `layout` maps machine names to the Procfile process types each runs; `env` adds settings for every machine
    (a machine's own: `env_for`)."""

    def __init__(self, layout, env=None, log_dir=None):
        self.layout, self.extra_env = layout, dict(env or {})
        self.run_id = secrets.token_hex(3)
        self.prefix = PREFIX + self.run_id
        self.name = DB_PREFIX + self.run_id  # database and vhost
        self.machines, self.relays = {}, []
        self.encryption_key = Fernet.generate_key().decode()
        LOCK_DIR.mkdir(exist_ok=True)
        self._lock = open(LOCK_DIR / f"{self.run_id}.lock", "w")
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        self.log_dir = Path(log_dir) if log_dir else LOCK_DIR / self.run_id
        self.log_dir.mkdir(parents=True, exist_ok=True)

    # settings

    @property
    def database_url(self):
        """The deployment's database, as this (host) side reaches it."""
        return f"postgresql+psycopg2://postgres@127.0.0.1:{SERVICES['postgres']}/{self.name}"

    def env_for(self, machine):
        g = self.gateway
        address = self.machines[machine].address
        return {
            "PATH": f"{VENV_BIN}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "HOME": "/tmp", "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1",
            "DATABASE_URL": f"postgresql://postgres@{g}:{SERVICES['postgres']}/{self.name}",
            "CELERY_BROKER_URL": f"amqp://guest:guest@{g}:{SERVICES['rabbitmq']}/{self.name}",
            "RATELIMIT_STORAGE_URI": f"redis://{g}:{SERVICES['redis']}/0",
            "RATELIMIT_KEY_PREFIX": f"rd-mh-{self.run_id}",
            "ENCRYPTION_KEY": self.encryption_key,
            "VAR_DIR": "/tmp/var",
            "HOST": "0.0.0.0", "PORT": str(WEB_PORT),
            "PUBLIC_URL": f"http://{address}:{WEB_PORT}",
            "CDP_PUBLIC_HOST": address, "BROWSER_HOST_BIND": "0.0.0.0:0",
            "ALLOW_PRIVATE_URLS": "true",
            **self.extra_env,
        }

    def url(self, machine):
        return f"http://{self.machines[machine].address}:{WEB_PORT}"

    def api(self, machine):
        return self.url(machine) + "/fast/v2"

    def machine(self, name):
        return self.machines[name]

    # life

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self):
        sweep(keep=(self.run_id,))
        self.subnet = _free_subnet()
        self.gateway = str(self.subnet.network_address + 1)
        self.bridge = self.prefix
        run("ip", "link", "add", self.bridge, "type", "bridge")
        run("ip", "addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge)
        run("ip", "link", "set", self.bridge, "up")
        for service, port in SERVICES.items():
            # argv[0] names the run: sweep() finds a dead run's relays by it.
            self.relays.append(subprocess.Popen(
                ["bash", "-c", f'exec -a {self.prefix}-{service} socat '
                               f'TCP-LISTEN:{port},bind={self.gateway},fork,reuseaddr TCP:127.0.0.1:{port}'],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        for index, name in enumerate(self.layout, start=11):
            self.machines[name] = Machine(self, name, index)
        run("psql", "-h", "127.0.0.1", "-U", "postgres", "-qc", f'CREATE DATABASE "{self.name}"')
        run("rabbitmqctl", "-q", "add_vhost", self.name)
        run("rabbitmqctl", "-q", "set_permissions", "-p", self.name, "guest", ".*", ".*", ".*")
        commands = procfile()
        first = next(iter(self.layout))
        # The Procfile's release step, on the first machine, as a platform runs it before the processes start.
        self.machines[first].run(commands["release"], self.env_for(first))
        self.processes = {}
        for name, kinds in self.layout.items():
            for kind in kinds:
                self.processes[(name, kind)] = self.machines[name].popen(commands[kind], self.env_for(name), kind)
        for (name, kind), proc in self.processes.items():
            self._wait_ready(name, kind, proc)

    def _wait_ready(self, name, kind, proc, timeout=120):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            if kind == "web":
                try:
                    if requests.get(self.url(name) + "/readyz", timeout=2).status_code == 200:
                        return
                except requests.RequestException:
                    pass
            elif kind == "beat" and "beat: Starting" in self.log(name, kind):
                return
            elif kind not in ("web", "beat") and " ready." in self.log(name, kind):
                return
            time.sleep(0.2)
        raise RuntimeError(f"{kind} on {name} did not start:\n{self.log(name, kind)[-4000:]}")

    def log(self, machine, kind):
        return self.processes[(machine, kind)].log_path.read_text(errors="replace")

    def logs(self, tail=3000):
        return "\n".join(f"--- {machine} {kind}\n{self.log(machine, kind)[-tail:]}"
                         for machine, kind in getattr(self, "processes", {}))

    def create_key(self, name, plan="free"):
        """An API key, made by the operator's command on the first web machine; returns the raw key."""
        machine = next(m for m, kinds in self.layout.items() if "web" in kinds)
        out = self.machines[machine].run(f"remote-dispatch keys create --name {shlex.quote(name)} --plan {plan}",
                                         self.env_for(machine))
        return re.search(r"api key:\s+(\S+)", out).group(1)

    def stop(self):
        """Every machine switched off (its processes with it), namespaces, bridge and relays removed, database and
        vhost dropped, the run's rate-limit counters deleted, its lock released: nothing is left."""
        for machine in self.machines.values():
            machine.kill()
        for line in run("ip", "netns", "list", check=False).stdout.splitlines():
            if line.startswith(self.prefix + "-"):  # a machine that failed half-way is not in self.machines
                _delete_netns(line.split()[0])
        for relay in self.relays:
            if relay.poll() is None:
                relay.kill()
            relay.wait(10)
        for line in run("ip", "-o", "link", "show", check=False).stdout.splitlines():
            name = line.split(":")[1].strip().split("@")[0]
            if name.startswith(self.prefix):  # the bridge, and a veth whose machine failed half-way
                run("ip", "link", "del", name, check=False)
        _drop_database(self.name)
        run("rabbitmqctl", "-q", "delete_vhost", self.name, check=False)
        keys = run("redis-cli", "-h", "127.0.0.1", "--scan", "--pattern", f"rd-mh-{self.run_id}*",
                   check=False).stdout.split()
        if keys:
            run("redis-cli", "-h", "127.0.0.1", "del", *keys, check=False)
        if not os.environ.get("RD_MULTIHOST_KEEP_LOGS"):
            shutil.rmtree(self.log_dir, ignore_errors=True)
        (LOCK_DIR / f"{self.run_id}.lock").unlink(missing_ok=True)
        self._lock.close()
