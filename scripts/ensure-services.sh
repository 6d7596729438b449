#!/usr/bin/env bash
# Makes sure the services the tests use answer on 127.0.0.1:
#   PostgreSQL :5432 (trust auth, database `test`), MariaDB :3306 (root without
#   password, database `test`), Redis :6379, RabbitMQ :5672 (guest/guest) and
#   NATS with JetStream :4222 (the dispatch executors' brokers).
# Where one does not answer, it is installed (as root, from Debian) and started.
set -euo pipefail

answers() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }

wait_for() {  # port name
  for _ in $(seq 1 60); do answers "$1" && return 0; sleep 1; done
  echo "$2 did not come up on 127.0.0.1:$1" >&2; exit 1
}

need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "$1 is not answering on 127.0.0.1:$2 and this is not root: start it, or run make test as root" >&2
    exit 1
  fi
}

export DEBIAN_FRONTEND=noninteractive
apt_updated=0
apt_install() {
  [ $apt_updated -eq 1 ] || { apt-get update -qq; apt_updated=1; }
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# --- PostgreSQL -------------------------------------------------------------
if ! answers 5432; then
  need_root PostgreSQL 5432
  command -v pg_ctlcluster >/dev/null 2>&1 || apt_install postgresql
  ver=$(ls /etc/postgresql | sort -V | tail -n1)
  conf=/etc/postgresql/$ver/main
  # Trust auth on loopback: the test machines' convention.
  if ! grep -q '^host all all 127.0.0.1/32 trust' "$conf/pg_hba.conf"; then
    sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\nlocal all all trust' "$conf/pg_hba.conf"
  fi
  pg_ctlcluster --skip-systemctl-redirect "$ver" main start || true
  wait_for 5432 PostgreSQL
fi
if command -v psql >/dev/null 2>&1; then
  psql -h 127.0.0.1 -U postgres -tAc "select 1 from pg_database where datname='test'" 2>/dev/null | grep -q 1 \
    || psql -h 127.0.0.1 -U postgres -c 'create database test' >/dev/null 2>&1 || true
fi

# --- MariaDB ----------------------------------------------------------------
if ! answers 3306; then
  need_root MariaDB 3306
  command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ] || apt_install mariadb-server
  mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd -- --user=mysql --bind-address=127.0.0.1
  wait_for 3306 MariaDB
  mariadb -uroot -e "ALTER USER 'root'@'localhost' IDENTIFIED VIA mysql_native_password USING PASSWORD(''); FLUSH PRIVILEGES;" 2>/dev/null || true
fi
if command -v mariadb >/dev/null 2>&1; then
  mariadb -h127.0.0.1 -uroot -e 'CREATE DATABASE IF NOT EXISTS test' 2>/dev/null || true
fi
# --- Redis ------------------------------------------------------------------
if ! answers 6379; then
  need_root Redis 6379
  command -v redis-server >/dev/null 2>&1 || apt_install redis-server
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  wait_for 6379 Redis
fi

# --- RabbitMQ ---------------------------------------------------------------
if ! answers 5672; then
  need_root RabbitMQ 5672
  command -v rabbitmq-server >/dev/null 2>&1 || [ -x /usr/sbin/rabbitmq-server ] || apt_install rabbitmq-server
  rabbitmq-server -detached
  wait_for 5672 RabbitMQ
fi

# --- NATS with JetStream ------------------------------------------------------
if ! answers 4222; then
  need_root NATS 4222
  command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || apt_install nats-server
  mkdir -p /var/lib/nats-server
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/nats-server -- \
    -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log
  wait_for 4222 NATS
fi
echo "services: PostgreSQL, MariaDB, Redis, RabbitMQ and NATS (JetStream) answer"
