#!/usr/bin/env bash
# Start a private PostgreSQL server on loopback for the multi-worker refinement test and
# print the URL to use. Installs Debian's postgresql package if the server is missing.
# Usage: url=$(bash .ci/postgres.sh start DIR) ; bash .ci/postgres.sh stop DIR
set -euo pipefail
cmd=$1 dir=$2 port=${AUTOTUNE_PG_PORT:-54329}
pgbin() { ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1; }
case "$cmd" in
start)
  if [ -z "$(pgbin)" ]; then
    if [ "$(id -u)" != 0 ]; then echo "postgresql missing and not root" >&2; exit 1; fi
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
  fi
  bin=$(pgbin)
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; chmod a+x "$(dirname "$dir")"
    run() { su postgres -s /bin/sh -c "$*"; }
  else run() { sh -c "$*"; }; fi
  run "$bin/initdb -D '$dir/data' -A trust -U postgres" >/dev/null
  run "$bin/pg_ctl -D '$dir/data' -l '$dir/log' -w -o \"-p $port -k '$dir' -c listen_addresses=127.0.0.1\" start" >&2
  run "$bin/createdb -h 127.0.0.1 -p $port -U postgres autotune"
  echo "postgresql+psycopg2://postgres@127.0.0.1:$port/autotune"
  ;;
stop)
  bin=$(pgbin)
  if [ "$(id -u)" = 0 ]; then su postgres -s /bin/sh -c "$bin/pg_ctl -D '$dir/data' -m fast stop" >&2 || true
  else "$bin/pg_ctl" -D "$dir/data" -m fast stop >&2 || true; fi
  ;;
esac
