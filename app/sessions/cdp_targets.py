"""What the CDP relay knows of the browser's targets (type and URL, and which pages are open), asked on a DevTools
connection of its own."""
import asyncio
import itertools
import json

from wsproto.connection import Connection, ConnectionType
from wsproto.events import CloseConnection, Ping, TextMessage

ANSWER_TIMEOUT = 10


class Targets:
    """One private WebSocket to the browser endpoint (`open_browser()`: a coroutine giving an upgraded
    (reader, writer), or None), opened at the first question and kept; `info` answers Target.getTargetInfo."""

    def __init__(self, open_browser):
        self.open_browser = open_browser
        self.lock = asyncio.Lock()
        self.ids = itertools.count(1)
        self.stream = None  # (reader, writer, wsproto connection)

    async def info(self, target_id):
        """The browser's targetInfo of `target_id` ({"type", "url", ...}), or None if it has no such target."""
        result = await self._question("Target.getTargetInfo", {"targetId": target_id})
        return result.get("targetInfo") if result is not None else None

    async def pages(self):
        """The browser's page targets (their targetInfos), or None if it cannot be asked."""
        result = await self._question("Target.getTargets", {"filter": [{"type": "page"}]})
        return [t for t in result.get("targetInfos") or [] if t.get("type") == "page"] if result is not None else None

    async def _question(self, method, params):
        async with self.lock:  # one question at a time on the one connection
            for attempt in range(2):  # a connection the browser closed is opened again once
                try:
                    return await asyncio.wait_for(self._ask(method, params), ANSWER_TIMEOUT)
                except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError, ConnectionError):
                    self.close()
            return None

    async def _ask(self, method, params):
        if self.stream is None:
            upstream = await self.open_browser()
            if upstream is None:
                raise ConnectionError("the browser is gone")
            self.stream = (*upstream, Connection(ConnectionType.CLIENT))
        reader, writer, ws = self.stream
        number = next(self.ids)
        writer.write(ws.send(TextMessage(data=json.dumps({"id": number, "method": method, "params": params}))))
        await writer.drain()
        parts = []
        while True:
            data = await reader.read(1 << 16)
            if not data:
                raise ConnectionError("the browser closed the connection")
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, Ping):
                    writer.write(ws.send(event.response()))
                elif isinstance(event, CloseConnection):
                    raise ConnectionError("the browser closed the connection")
                elif isinstance(event, TextMessage):
                    parts.append(event.data)
                    if not event.message_finished:
                        continue
                    reply, parts = json.loads("".join(parts)), []
                    if reply.get("id") == number:
                        return reply.get("result") or {}

    def close(self):
        if self.stream is not None:
            self.stream[1].close()
            self.stream = None
