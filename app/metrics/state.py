"""The deployment's state, read from the database and the broker when a web process is scraped.

State lives in Postgres and RabbitMQ, not in any one process, so a gauge of it counted in processes would be
wrong as soon as there are two (and lost with a restart): every web process reads the same truth instead, and any
one of them answers a scrape. The queries are aggregates over indexed columns of the rows still in flight.
"""
import logging

from kombu import Connection
from prometheus_client.core import GaugeMetricFamily
from sqlalchemy import func, select

from ..broker import DIRECT_QUEUE_FORMAT, QUEUES
from ..models import CloudSession, Task, WebhookDelivery, now_plus

log = logging.getLogger(__name__)
clock = now_plus(0)  # the database clock, typed (timezone-aware) on every dialect
BROKER_TIMEOUT_SECONDS = 2


class ClusterState:
    """A prometheus_client collector over the database (`engine`) and the broker (`broker`: app.broker.Broker)."""

    def __init__(self, engine, broker):
        self.engine, self.broker = engine, broker

    def collect(self):
        up = GaugeMetricFamily("remote_dispatch_state_up", "1 if this scrape could read the source (database, "
                               "broker); 0: the gauges from it are missing.", labels=["source"])
        nodes = set()
        try:
            families = list(self._database(nodes))
            up.add_metric(["database"], 1)
        except Exception:
            log.warning("metrics: the database could not be read", exc_info=True)
            families = []
            up.add_metric(["database"], 0)
        try:
            families += self._broker(nodes)
            up.add_metric(["broker"], 1)
        except Exception:
            log.warning("metrics: the broker could not be read", exc_info=True)
            up.add_metric(["broker"], 0)
        yield from families
        yield up

    def _database(self, nodes):
        tasks = GaugeMetricFamily("remote_dispatch_tasks", "Tasks not ended, by state: queued (pending, no worker "
                                  "holds it), running (a worker holds its lease), paused (input-required).",
                                  labels=["state", "mode", "agent"])
        paused = GaugeMetricFamily("remote_dispatch_paused_browsers", "Browsers kept for paused tasks, by the worker "
                                   "node that keeps them.", labels=["node"])
        sessions = GaugeMetricFamily("remote_dispatch_kept_sessions", "Kept cloud browser sessions not ended, by "
                                     "status and the machine holding their browser.", labels=["host", "status"])
        backlog = GaugeMetricFamily("remote_dispatch_webhook_outbox", "Webhook deliveries not yet delivered nor "
                                    "given up, by whether an attempt is due now.", labels=["due"])
        oldest = GaugeMetricFamily("remote_dispatch_webhook_outbox_oldest_seconds",
                                   "Age of the oldest webhook delivery still pending (0 when none).")
        with self.engine.connect() as conn:  # short reads, one connection, given back before the exposition
            rows = conn.execute(
                select(Task.status, Task.lease_owner.is_not(None), Task.execution_mode, Task.agent, func.count())
                .where(Task.status.in_(("pending", "input-required")))
                .group_by(Task.status, Task.lease_owner.is_not(None), Task.execution_mode, Task.agent)).all()
            counts = {}
            for status, held, mode, agent, count in rows:
                name = "paused" if status == "input-required" else "running" if held else "queued"
                counts[(name, mode, agent)] = counts.get((name, mode, agent), 0) + count
            for labels, count in sorted(counts.items()):
                tasks.add_metric(list(labels), count)
            for node, count in conn.execute(
                    select(Task.browser_node, func.count())
                    .where(Task.status == "input-required", Task.browser_node.is_not(None))
                    .group_by(Task.browser_node)).all():
                nodes.add(node)
                paused.add_metric([node], count)
            for host, status, count in conn.execute(
                    select(CloudSession.host, CloudSession.status, func.count())
                    .where(CloudSession.status != "ended").group_by(CloudSession.host, CloudSession.status)).all():
                sessions.add_metric([host or "", status], count)
            due = clock >= WebhookDelivery.next_attempt_at
            for is_due, count in conn.execute(
                    select(due, func.count()).where(WebhookDelivery.state == "pending").group_by(due)).all():
                backlog.add_metric(["true" if is_due else "false"], count)
            age = conn.execute(select(func.min(WebhookDelivery.created_at), clock)
                               .where(WebhookDelivery.state == "pending")).first()
            oldest.add_metric([], (age[1] - age[0]).total_seconds() if age and age[0] else 0)
        return tasks, paused, sessions, backlog, oldest

    def _broker(self, nodes):
        """Messages ready in each work queue, and the workers consuming it (RabbitMQ's passive declare). The embedded
        broker (kombu's filesystem transport) cannot say: no samples then."""
        depth = GaugeMetricFamily("remote_dispatch_queue_messages", "Messages waiting in a broker queue (not yet "
                                  "taken by a worker).", labels=["queue"])
        consumers = GaugeMetricFamily("remote_dispatch_queue_consumers", "Workers consuming a broker queue.",
                                      labels=["queue"])
        if self.broker.url.startswith("filesystem://"):
            return [depth, consumers]
        queues = list(QUEUES) + sorted(DIRECT_QUEUE_FORMAT.format(hostname=n) for n in nodes)
        with Connection(self.broker.url, transport_options=self.broker.transport_options,
                        connect_timeout=BROKER_TIMEOUT_SECONDS) as conn:
            conn.ensure_connection(max_retries=1, timeout=BROKER_TIMEOUT_SECONDS)
            for queue in queues:
                channel = conn.channel()
                try:
                    _, messages, consuming = channel.queue_declare(queue=queue, passive=True)
                except conn.channel_errors:  # no such queue: no worker of it ever ran
                    continue
                finally:
                    try:
                        channel.close()
                    except Exception:
                        pass
                depth.add_metric([queue], messages)
                consumers.add_metric([queue], consuming)
        return [depth, consumers]
