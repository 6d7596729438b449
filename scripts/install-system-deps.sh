#!/usr/bin/env bash
# Installs the system packages shardcron's dev cluster and test suite need:
# the etcd server, iptables and iproute2 (fault tests), docker-compose (to
# validate compose/docker-compose.yml; no engine is needed), python3-venv, and Debian's chromium and
# chromium-driver, which the dashboard's browser tests drive (nothing downloads a browser build).
# As root it uses apt-get; otherwise it says what to install and stops.
set -euo pipefail

missing=()
command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)

[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "shardcron needs these system packages: ${missing[*]}" >&2
  echo "On Debian/Ubuntu run:  sudo apt-get install -y ${missing[*]}" >&2
  echo "(etcd can also be installed from https://etcd.io/docs/latest/install/ — any etcd >= 3.4 on PATH works)" >&2
  exit 1
fi

echo "installing system packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# Debian's etcd-server package may start a system etcd on 2379; shardcron's dev
# cluster and tests start their own on free ports, so a stray one is harmless.
