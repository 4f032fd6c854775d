"""Publishing to the work queues: Celery messages (protocol 2) sent with kombu, confirmed by the broker.

The web process publishes and never consumes, so it does without Celery itself (about 4 MiB of its memory);
the workers run these messages as Celery tasks (workers/celery.py binds Celery to the same broker and queues,
declared the same way). One Broker per Flask app: app.extensions["broker"].

ROUTES is the one table of task -> queue: Celery's task_routes (app/extensions.py) are built from it and
`Broker.send` looks the queue up in it, so a task goes to the same queue whoever publishes it (the web, beat, a
worker). The queues are named for their work, so a slow kind never waits in front of a short one:
- `tasks`: agent runs and the start of kept sessions, work that needs a browser (the Procfile's `worker`);
- `webhooks`: webhook deliveries alone, each of which may wait on a slow receiver up to its timeout;
- `control`: beat's sweeps and the direct commands a caller waits for (a kept session's actions, the Excel
  actions): short work, behind neither a run nor a receiver (the Procfile's `control`).
"""
import json
import os
import socket
import threading
import uuid

from kombu import Connection, Exchange, Queue
from kombu.pools import ProducerPool

from . import embedded_broker

TASKS_QUEUE = "tasks"
WEBHOOKS_QUEUE = "webhooks"
CONTROL_QUEUE = "control"
QUEUES = (TASKS_QUEUE, WEBHOOKS_QUEUE, CONTROL_QUEUE)
ROUTES = {
    "workers.run_task": TASKS_QUEUE,
    "workers.start_session": TASKS_QUEUE,
    "workers.deliver_webhook": WEBHOOKS_QUEUE,
    "workers.serve_session_actions": CONTROL_QUEUE,
    "workers.answer_workbook_action": CONTROL_QUEUE,
    "workers.sweep_undispatched": CONTROL_QUEUE,
    "workers.sweep_expired_leases": CONTROL_QUEUE,
    "workers.sweep_input_timeouts": CONTROL_QUEUE,
    "workers.sweep_webhooks": CONTROL_QUEUE,
    "workers.sweep_idle_sessions": CONTROL_QUEUE,
    "workers.sweep_lost_hosts": CONTROL_QUEUE,
    "workers.reap_browsers": CONTROL_QUEUE,
    "workers.fire_schedules": CONTROL_QUEUE,
    "workers.purge_idempotency_keys": CONTROL_QUEUE,
    "workers.purge_expired_files": CONTROL_QUEUE,
    "workers.purge_window_commands": CONTROL_QUEUE,
}
POOL_LIMIT = 10  # broker connections (and producers) per process: Celery's default broker_pool_limit
# Celery's default task_publish_retry_policy: a dropped connection is reopened up to 3 times, 0.2 s apart.
DEFAULT_RETRY = {"max_retries": 3, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.2}
# Celery's worker_direct routing (celery.utils.nodenames), declared the same way: each worker's own queue.
DIRECT_EXCHANGE = Exchange("C.dq2", "direct")
DIRECT_QUEUE_FORMAT = "{hostname}.dq2"
_NO_CALLBACKS = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


class Broker:
    def __init__(self, app):
        self.url = app.config["BROKER_URL"]
        self.transport_options = transport_options(app.config["VAR_DIR"], self.url)
        self._lock = threading.Lock()
        self._producers, self._pid = None, None
        self._origin = f"{os.getpid()}@{socket.gethostname()}"

    def connection(self):
        """A new connection, opened on first use (`with broker.connection() as conn: ...`)."""
        return Connection(self.url, transport=embedded_broker.transport(self.url),
                          transport_options=self.transport_options)

    def send(self, task, args, retry_policy=DEFAULT_RETRY):
        """Publish task(*args) to its queue (ROUTES), declaring the queue as a Celery worker would if it is
        missing; returns the message id. Raises if the broker did not take it (publisher confirms on amqp)."""
        queue = ROUTES[task]
        target = Queue(queue, Exchange(queue), routing_key=queue)
        return self._publish(task, args, target.exchange, queue, target, retry_policy)

    def send_to_node(self, task, args, node, retry_policy=DEFAULT_RETRY):
        """Publish task(*args) to the Celery worker `node`'s own queue (worker_direct); None, and nothing sent, when
        no worker of that name consumes it now (or on the embedded broker, whose exchanges live in one process)."""
        if not self.consumers(DIRECT_QUEUE_FORMAT.format(hostname=node)):
            return None
        return self._publish(task, args, DIRECT_EXCHANGE, node, DIRECT_EXCHANGE, retry_policy)

    def consumers(self, queue):
        """How many workers consume `queue` now: 0 if none (or no such queue: no worker of it ever ran, or its
        queue was deleted); None on the embedded broker, which cannot say."""
        if self.url.startswith("filesystem://"):
            return None
        with self.connection() as conn:
            try:
                return conn.default_channel.queue_declare(queue=queue, passive=True)[2]
            except conn.channel_errors:
                return 0

    def _publish(self, task, args, exchange, routing_key, declare, retry_policy):
        message_id, headers, body = celery_message(task, args, self._origin)
        with self._pool().acquire(block=True) as producer:
            producer.publish(body, exchange=exchange, routing_key=routing_key, declare=[declare], headers=headers,
                             content_type="application/json", content_encoding="utf-8",
                             correlation_id=message_id, reply_to="", delivery_mode=2, retry=True, retry_policy=retry_policy)
        return message_id

    def _pool(self):
        """This process's producers: a forked child (a Celery pool process) must not share its parent's sockets."""
        with self._lock:
            if self._pid != os.getpid():
                self._producers = ProducerPool(self.connection().Pool(limit=POOL_LIMIT), limit=POOL_LIMIT)
                self._pid = os.getpid()
            return self._producers


def celery_message(task, args, origin):
    """A Celery protocol-2 message for task(*args), as `send_task` would write it: (id, headers, JSON body)."""
    message_id = str(uuid.uuid4())
    headers = {"lang": "py", "task": task, "id": message_id, "shadow": None, "eta": None, "expires": None,
               "group": None, "group_index": None, "retries": 0, "timelimit": [None, None],
               "root_id": message_id, "parent_id": None, "argsrepr": repr(list(args)), "kwargsrepr": "{}",
               "origin": origin, "ignore_result": True}
    return message_id, headers, json.dumps([list(args), {}, _NO_CALLBACKS])


def transport_options(var_dir, broker_url):
    if broker_url.startswith("filesystem://"):
        folder = os.path.join(var_dir, "broker")
        for sub in ("queue", "processed", "control"):
            os.makedirs(os.path.join(folder, sub), exist_ok=True)
        return {
            "data_folder_in": os.path.join(folder, "queue"),
            "data_folder_out": os.path.join(folder, "queue"),
            "processed_folder": os.path.join(folder, "processed"),
            "control_folder": os.path.join(folder, "control"),
            "store_processed": False,
        }
    # Publisher confirms: a publish returns only once the broker has the message.
    return {"confirm_publish": True, "max_retries": 2, "interval_start": 0, "interval_step": 0.5}
