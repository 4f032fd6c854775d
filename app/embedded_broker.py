"""The embedded broker: kombu's filesystem transport, with each message written whole before a consumer can see it.

kombu's own `_put` creates the message's file under its final name and then writes it, and its `_get` moves and reads
any file with that name at once (its lock is advisory, and the reader never takes it): a consumer polling while a
publisher writes reads an empty or cut message, and the Celery worker dies on it (JSONDecodeError, `make run`'s worker
exits). Here a message is written under a name no consumer looks for and renamed to its final name once complete,
which the filesystem does in one step."""
import os
import uuid
from time import monotonic

from kombu.exceptions import ChannelError
from kombu.transport import filesystem
from kombu.utils.encoding import str_to_bytes
from kombu.utils.json import dumps

# The name Celery and our publisher give kombu for a filesystem:// broker URL (app/broker.py, app/extensions.py).
TRANSPORT = "app.embedded_broker:Transport"


class Channel(filesystem.Channel):
    def _put(self, queue, payload, **kwargs):
        # kombu's name (its time orders the queue), then ".partial" while written: a consumer reads only
        # "<name>.<queue>.msg".
        final = os.path.join(self.data_folder_out, f"{int(round(monotonic() * 1000))}_{uuid.uuid4()}.{queue}.msg")
        partial = final + ".partial"
        try:
            with open(partial, "wb") as message:
                message.write(str_to_bytes(dumps(payload)))
            os.replace(partial, final)
        except OSError as exc:
            raise ChannelError(f"Cannot add file {final!r} to directory") from exc


class Transport(filesystem.Transport):
    Channel = Channel


def transport(broker_url):
    """The kombu transport for `broker_url`: ours for filesystem://, else the one its scheme names (None)."""
    return TRANSPORT if broker_url.startswith("filesystem://") else None
