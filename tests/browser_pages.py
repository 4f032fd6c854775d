"""Loopback servers for the browser-egress tests: a page server that records requests and a canary that counts."""
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.processes import free_port


class RecordingServer:
    """Serves `pages` ({path: html or (status, headers, body)}) on 127.0.0.1 and records each request."""

    def __init__(self, pages):
        self.pages = pages
        self.requests = []  # (path, headers dict)
        self.peer_pids = []  # per request, the processes holding the connection's other end (the proxy's, behind one)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def url(self, path="/"):
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self):
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real servers do

            def log_message(self, *args):
                pass

            def do_GET(self):
                server.requests.append((self.path, dict(self.headers)))
                server.peer_pids.append(pids_of_connection(self.client_address[1], server.port))
                page = server.pages.get(self.path.split("?")[0])
                if page is None:
                    status, headers, body = 404, {}, "not here"
                elif isinstance(page, tuple):
                    status, headers, body = page
                else:
                    status, headers, body = 200, {}, page
                data = body.encode()
                self.send_response(status)
                for name, value in {"Content-Type": "text/html; charset=utf-8", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_POST = do_GET

        return Handler


class Canary:
    """TCP listeners on one port at several loopback addresses that count every connection they accept."""

    def __init__(self, hosts=("127.0.0.1", "127.0.0.3", "::1")):
        self.port = free_port()
        self.connections = []  # (listening host, first bytes received)
        self._sockets = []
        for host in hosts:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, self.port))
            sock.listen(16)
            self._sockets.append(sock)
            threading.Thread(target=self._accept, args=(sock, host), daemon=True).start()

    def _accept(self, sock, host):
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            conn.settimeout(2)
            try:
                first = conn.recv(200)
            except OSError:
                first = b""
            self.connections.append((host, first))
            try:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 6\r\nContent-Type: text/html\r\n"
                             b"Connection: close\r\n\r\ncanary")
            except OSError:
                pass
            conn.close()

    def close(self):
        for sock in self._sockets:
            sock.close()


class UdpCanary:
    """A UDP socket on loopback that counts datagrams (a STUN/TURN server a page's WebRTC might try)."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.datagrams = 0
        threading.Thread(target=self._receive, daemon=True).start()

    def _receive(self):
        while True:
            try:
                self.sock.recv(4096)
            except OSError:
                return
            self.datagrams += 1

    def close(self):
        self.sock.close()


def pids_of_connection(local_port, remote_port):
    """The processes holding the loopback TCP socket from `local_port` to `remote_port` (/proc/net/tcp's inode of
    that socket, found among each process's open files), while it is open."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if (int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16)) == (local_port,
                                                                                                  remote_port):
                    inodes.add(f"socket:[{fields[9]}]")
    pids = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in os.listdir(f"/proc/{pid}/fd")):
                pids.add(int(pid))
        except OSError:
            continue
    return pids


def group_pids(pgid):
    """The processes of process group `pgid`."""
    pids = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if int(stat.read().rsplit(")", 1)[1].split()[2]) == pgid:
                    pids.add(int(pid))
        except (OSError, IndexError, ValueError):
            continue
    return pids

