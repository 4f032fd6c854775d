"""The authenticating door to one session's DevTools endpoint: `python -m app.sessions.cdp_proxy`.

CDP is full control of the browser, so the DevTools port itself stays on loopback and callers come
through here: a WebSocket upgrade is let through only with `Authorization: Bearer <token>` for this
session (its SHA-256 is in CDP_TOKEN_SHA256), only to paths under CDP_ALLOWED_PREFIX; after the
handshake the bytes are relayed as they are. It exits when the browser is gone, so it never
outlives its session (stopping the session also kills it).

Environment: CDP_TARGET (host:port of DevTools), CDP_TOKEN_SHA256, CDP_ALLOWED_PREFIX (default
/devtools/), CDP_BIND (default 127.0.0.1). Prints the port it listens on, then serves.
"""
import asyncio
import hashlib
import hmac
import os
import sys

HEAD_LIMIT = 16 * 1024
DROPPED = {"authorization", "host", "origin"}


class Proxy:
    def __init__(self, target, token_sha256, prefix):
        self.host, _, port = target.rpartition(":")
        self.port = int(port)
        self.token_sha256, self.prefix = token_sha256, prefix

    async def handle(self, reader, writer):
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError, ConnectionError):
            writer.close()
            return
        lines = head.decode("latin-1").split("\r\n")
        method, _, rest = lines[0].partition(" ")
        path = rest.rpartition(" ")[0]
        headers = []
        for line in lines[1:]:
            if ":" in line:
                name, _, value = line.partition(":")
                headers.append((name.strip(), value.strip()))
        named = {name.lower(): value for name, value in headers}
        if method != "GET" or named.get("upgrade", "").lower() != "websocket":
            return await self._refuse(writer, 400, "Bad Request", "only WebSocket upgrades are served here")
        if not self._authorized(named.get("authorization", "")):
            return await self._refuse(writer, 401, "Unauthorized", "a valid session credential is required")
        if not path.startswith(self.prefix) or ".." in path:
            return await self._refuse(writer, 404, "Not Found", "no such DevTools endpoint")
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            return await self._refuse(writer, 502, "Bad Gateway", "the browser is gone")
        forwarded = [f"GET {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        forwarded += [f"{name}: {value}" for name, value in headers if name.lower() not in DROPPED]
        up_writer.write(("\r\n".join(forwarded) + "\r\n\r\n").encode("latin-1"))
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    def _authorized(self, header):
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return False
        return hmac.compare_digest(hashlib.sha256(token.strip().encode()).hexdigest(), self.token_sha256)

    async def _refuse(self, writer, status, reason, message):
        body = message.encode()
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
                     f"Connection: close\r\n\r\n".encode() + body)
        try:
            await writer.drain()
        finally:
            writer.close()

    async def browser_gone(self):
        """Returns once the DevTools port has refused connections three times in a row."""
        misses = 0
        while misses < 3:
            await asyncio.sleep(1)
            try:
                _, probe = await asyncio.open_connection(self.host, self.port)
                probe.close()
                misses = 0
            except OSError:
                misses += 1


async def _pipe(reader, writer):
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def main():
    proxy = Proxy(os.environ["CDP_TARGET"], os.environ["CDP_TOKEN_SHA256"],
                  os.environ.get("CDP_ALLOWED_PREFIX", "/devtools/"))
    server = await asyncio.start_server(proxy.handle, os.environ.get("CDP_BIND", "127.0.0.1"), 0, limit=HEAD_LIMIT)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await proxy.browser_gone()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
