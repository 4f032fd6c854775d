#!/usr/bin/env bash
# Make sure Postgres, RabbitMQ and Redis answer, starting them if not, and create the test database and vhost.
set -euo pipefail
PGHOST=${PGHOST:-127.0.0.1}
TEST_DB=${TEST_DB:-remote_dispatch_test}
TEST_VHOST=${TEST_VHOST:-rd_test}

if ! pg_isready -q -h "$PGHOST"; then
  echo "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start
  for _ in $(seq 30); do pg_isready -q -h "$PGHOST" && break; sleep 1; done
fi
psql -h "$PGHOST" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='$TEST_DB'" | grep -q 1 \
  || psql -h "$PGHOST" -U postgres -qc "CREATE DATABASE $TEST_DB"

if ! rabbitmqctl -q status >/dev/null 2>&1; then
  echo "starting RabbitMQ"
  rabbitmq-server -detached
  for _ in $(seq 60); do rabbitmqctl -q status >/dev/null 2>&1 && break; sleep 1; done
fi
rabbitmqctl -q await_startup >/dev/null
rabbitmqctl -q list_vhosts | grep -qx "$TEST_VHOST" || rabbitmqctl -q add_vhost "$TEST_VHOST"
rabbitmqctl -q set_permissions -p "$TEST_VHOST" guest '.*' '.*' '.*'
# Redis: shared rate-limit counting between web processes (RATELIMIT_STORAGE_URI).
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  command -v redis-server >/dev/null || apt-get install -y -q redis-server \
    || { apt-get update -q && apt-get install -y -q redis-server; }
  echo "starting Redis"
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no >/dev/null
  for _ in $(seq 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.5; done
fi
echo "Postgres, RabbitMQ and Redis are up (database $TEST_DB, vhost $TEST_VHOST)"
