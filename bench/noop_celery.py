"""A bare Celery app with one no-op task: the pipeline baseline (same RabbitMQ, the product's settings)."""
import json
import os
import socket
import time

from celery import Celery

app = Celery("bench_noop", broker=os.environ["CELERY_BROKER_URL"])
app.conf.update(
    broker_read_url=os.environ["CELERY_BROKER_URL"],
    broker_write_url=os.environ["CELERY_BROKER_URL"],
    task_ignore_result=True,
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_default_queue="bench_noop",
    task_serializer="json",
    accept_content=["json"],
    broker_transport_options={"confirm_publish": True},
    worker_hijack_root_logger=False,
)
_udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)


@app.task(name="bench.noop")
def noop(sent, report_port):
    """Does nothing but tell the benchmark when it ran (one loopback UDP datagram)."""
    _udp.sendto(json.dumps([sent, time.time()]).encode(), ("127.0.0.1", report_port))


@app.task(name="bench.floor_run")
def floor_run(task_id):
    """The floor of a task run: the claim and finish statements, psycopg2 directly (bench/floor.py)."""
    from bench.floor import claim_and_finish

    claim_and_finish(task_id)
