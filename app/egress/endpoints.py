"""The service's own TCP endpoints (its dependencies and its processes' listening ports): never an egress destination."""
import functools
import ipaddress
import os
import socket
import struct
from urllib.parse import urlsplit

from ..sandbox.processes import command_line

# Settings whose URL names a dependency of the service: its host and port are the service's, whatever
# ALLOW_PRIVATE_URLS or EGRESS_ALLOW_HOSTS say.
DEPENDENCY_SETTINGS = ("SQLALCHEMY_DATABASE_URI", "DATABASE_URL", "BROKER_URL", "CELERY_BROKER_URL",
                       "CELERY_RESULT_BACKEND", "RATELIMIT_STORAGE_URI", "REDIS_URL", "LLM_BASE_URL",
                       "SELENIUM_REMOTE_URL")
# A model server is whatever speaks the OpenAI API at LLM_BASE_URL: in development often a process that serves other
# things too (a test's scripted server beside its pages). Its one port is the service's, not every port it holds;
# the bundled local model server is recognised by its command line. A database, broker, cache or Grid holds only
# its own ports (RabbitMQ's distribution port, a Grid node's): those all count.
OWN_PORT_ONLY = ("LLM_BASE_URL",)
DEFAULT_PORTS = {"postgresql": 5432, "postgres": 5432, "amqp": 5672, "amqps": 5671, "redis": 6379, "rediss": 6379,
                 "http": 80, "https": 443, "mysql": 3306}
PUBLIC = "web process"
# A model server is recognised by what it is, whatever process serves it and on whatever port: the bundled one
# (config.local_model execs config.local_chat, llama-cpp-python's server), another OpenAI-compatible server
# module or program, or any process given a model file to serve. Its port is then the service's, never a browser's.
MODEL_SERVER_MODULES = ("config.local_model", "config.local_chat", "llama_cpp.server", "vllm.entrypoints",
                        "sglang.launch_server")
MODEL_SERVER_PROGRAMS = ("llama-server", "llama-cpp-server", "llamafile", "ollama", "vllm", "text-generation-launcher")
MODEL_FILES = (".gguf", ".ggml", ".llamafile")
_verdicts = {}  # listening socket inode -> what part of the service owns it, or None (not the service's)
LISTEN = "0A"  # st of a listening socket in /proc/net/tcp
# Netlink's sock_diag (linux/sock_diag.h, inet_diag.h, netlink.h).
NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY, TCP_LISTEN = 4, 20, 10
NLM_F_REQUEST, NLM_F_DUMP, NLMSG_ERROR, NLMSG_DONE = 0x1, 0x300, 0x2, 0x3


def dependencies(config):
    """(host, port, whole) of every dependency the configuration names (no credentials: only where it is); `whole`:
    the other ports its process listens on are the service's too."""
    found = []
    for name in DEPENDENCY_SETTINGS:
        value = config.get(name)
        for url in ([value] if isinstance(value, str) else value or ()):
            try:
                parts = urlsplit(str(url))
                scheme = parts.scheme.split("+")[0].lower()
                port = parts.port or DEFAULT_PORTS.get(scheme)
            except ValueError:
                continue
            if parts.hostname and port:
                found.append((parts.hostname.lower(), port, name not in OWN_PORT_ONLY))
    return tuple(dict.fromkeys(found))


def service_command(argv):
    """What part of the service a command line is, or None: the web process, a worker, beat, flower, an
    egress proxy, the local model (Procfile's processes and what they start)."""
    if any("app:create_app" in arg for arg in argv) or any(
            flag == "-c" and value.endswith("config/gunicorn.py") for flag, value in zip(argv, argv[1:])):
        return "web process"
    for flag, value in zip(argv, argv[1:]):
        if flag in ("-A", "--app") and value == "workers" or flag == "--app=workers":
            return "Celery process"
    if _model_server(argv):
        return "local model server"
    if "app.egress.plugin.EgressPlugin" in argv:
        return "browser egress proxy"
    if any(os.path.basename(arg) == "remote-dispatch" for arg in argv[:2]):
        return "remote-dispatch command"
    return None


def _model_server(argv):
    """True if the command line serves a language model (see MODEL_SERVER_MODULES)."""
    for flag, value in zip(argv, argv[1:]):
        if flag == "-m" and value.startswith(MODEL_SERVER_MODULES):
            return True
    return any(os.path.basename(arg) in MODEL_SERVER_PROGRAMS for arg in argv[:2]) or any(
        arg.lower().endswith(MODEL_FILES) for arg in argv)


def is_local(address):
    """True if `address` is one of this machine's own (loopback, unspecified, or bound to an interface)."""
    ip = ipaddress.ip_address(address)
    if ip.is_loopback or ip.is_unspecified:
        return True
    if ip.version == 6 and ip.ipv4_mapped:
        return is_local(str(ip.ipv4_mapped))
    try:
        with socket.socket(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))  # only an address of this host can be bound
        return True
    except OSError:
        return False


def refusal(address, port, configured=()):
    """None, or why (`address`, `port`) is the service's own: a dependency `configured` names (see
    dependencies), or, on this machine, a port a process of the service (or of a local dependency) listens on."""
    local = is_local(address)
    for host, dependency_port, _ in configured:
        for resolved in _resolve(host, dependency_port):
            if dependency_port == port and (resolved == address or (local and is_local(resolved))):
                return f"a dependency named by the service's configuration listens at {host}:{port}"
    if not local:
        return None
    listeners = _listeners()
    inodes = listeners.get(port)
    if not inodes:
        return None
    _judge(inodes - _verdicts.keys(), listeners, configured)
    for inode in inodes:
        if _verdicts.get(inode):
            return f"{_verdicts[inode]} listens there"
    return None


def learn(configured=()):
    """Judge every socket listening now, ahead of need: an egress proxy does it as it starts, so the first request to
    a local address (an intranet page where private addresses are allowed) does not wait for the walk of /proc."""
    listeners = _listeners()
    _judge(set().union(*listeners.values()) - _verdicts.keys(), listeners, configured)


def _judge(unknown, listeners, configured):
    """Record in _verdicts what part of the service owns each of the `unknown` listening socket inodes, if any.
    A listening socket's owner does not change while it lives (its inode is not reused meanwhile): each is looked
    up once, in every process's fds, which takes milliseconds."""
    if not unknown:
        return
    local_dependencies = {dependency_port for host, dependency_port, whole in configured
                          if whole and any(is_local(resolved) for resolved in _resolve(host, dependency_port))}
    dependency_inodes = {inode for p in local_dependencies for inode in listeners.get(p, ())}
    owners = _owners(unknown | dependency_inodes)
    dependency_pids = {owners.get(inode) for inode in dependency_inodes} - {None}
    if len(_verdicts) > 4096:
        _verdicts.clear()
    for inode in unknown:
        pid = owners.get(inode)
        what = None if pid is None else (
            "a dependency of the service (at another of its ports)" if pid in dependency_pids
            else service_command(command_line(pid) or []))
        if what == PUBLIC:
            what = None  # the public API and the login pages kept browsers open (login_url): open to all anyway
        what = what and (what if what.startswith("a ") else f"the service's {what}")
        if pid is not None:  # an owner not seen (yet): looked up again next time
            _verdicts[inode] = what


@functools.lru_cache(maxsize=64)  # configured hosts only: a few, and looked up on every check
def _resolve(host, port):
    try:
        return (str(ipaddress.ip_address(host)),)
    except ValueError:
        pass
    try:
        return tuple(dict.fromkeys(info[4][0].split("%")[0] for info in socket.getaddrinfo(host, port,
                                                                                          type=socket.SOCK_STREAM)))
    except (OSError, UnicodeError):
        return ()


def _listeners():
    """{port: {socket inode}} of this network namespace's listening TCP sockets (IPv4 and IPv6), from the kernel's
    sock_diag (it walks only the listening table: /proc/net/tcp walks every connection and takes milliseconds)."""
    found = {}
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as diag:
            for family in (socket.AF_INET, socket.AF_INET6):
                request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 1 << TCP_LISTEN) + bytes(48)
                diag.send(struct.pack("=IHHII", 16 + len(request), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST | NLM_F_DUMP,
                                      1, 0) + request)
                for port, inode in _diag_replies(diag):
                    found.setdefault(port, set()).add(inode)
    except OSError:
        return _listeners_from_proc()
    return found


def _diag_replies(diag):
    while True:
        data = diag.recv(1 << 16)
        offset = 0
        while offset + 16 <= len(data):
            length, kind = struct.unpack_from("=IH", data, offset)
            if kind == NLMSG_DONE:
                return
            if kind == NLMSG_ERROR or length < 16:
                raise OSError("sock_diag refused the request")
            body = offset + 16  # inet_diag_msg: family, state, timer, retrans, then the socket id (sport first)
            yield struct.unpack_from("!H", data, body + 4)[0], str(struct.unpack_from("=I", data, body + 68)[0])
            offset += (length + 3) & ~3


def _listeners_from_proc():
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as source:
                next(source, None)
                for line in source:
                    fields = line.split()
                    if len(fields) > 9 and fields[3] == LISTEN:
                        found.setdefault(int(fields[1].rsplit(":", 1)[1], 16), set()).add(fields[9])
        except OSError:
            continue
    return found


def _owners(wanted):
    """{socket inode: pid} for the `wanted` inodes, of the processes this one can see in /proc (the service's
    own, as it runs them)."""
    owners = {}
    for entry in os.listdir("/proc"):
        if len(owners) == len(wanted):
            break
        if not entry.isdigit():
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{entry}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in wanted:
                owners.setdefault(link[8:-1], int(entry))
    return owners
