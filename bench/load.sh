#!/usr/bin/env bash
# Server load benchmark (release build): one `kvsfs serve` on loopback (SQLite, or PostgreSQL
# with `postgres`), WATCHERS clients watching STORES stores the way mounts do (each holds its
# store's event stream), while writers push RATE changes per second, each to a random store.
#
#   bench/load.sh [WATCHERS] [RATE] [SECONDS] [STORES] [sqlite|postgres]   (defaults 1000 500 30 250 sqlite)
#
# Prints propagation from the start of a push to each watcher holding the change (p50, p99, max;
# target p99 <= 250 ms), push latency, and the server's CPU and memory over the measured window.
# The generator runs on the same machine, so the two share its cores.
set -euo pipefail
watchers=${1:-1000}; rate=${2:-500}; seconds=${3:-30}; stores=${4:-250}; backend=${5:-sqlite}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

source "$here/common.sh"
bench_work loadbench

for product in kvsfs kvsfs-load; do
    (cd "$repo" && swift build -c release --product "$product" >"$work/build.log" 2>&1) || { cat "$work/build.log" >&2; exit 1; }
done
kvsfs="$repo/.build/release/kvsfs"
sync   # a fresh build leaves ~200 MB to write back, which would stall the measured fsyncs
database="sqlite://$work/server.sqlite"
if [ "$backend" = postgres ]; then bench_postgres_database; fi
ulimit -n "$(ulimit -Hn)"   # a socket per watcher, in the generator and in the server
token=$("$kvsfs" account create load --database "$database")
"$kvsfs" serve --listen 127.0.0.1:18790 --database "$database" --rate-limit 0 2>/dev/null & pids+=($!)
server_pid=$!
for _ in $(seq 200); do curl -sf http://127.0.0.1:18790/health >/dev/null && break; sleep 0.05; done

"$repo/.build/release/kvsfs-load" --url http://127.0.0.1:18790 --token "$token" --account load \
    --stores "$stores" --watchers "$watchers" --rate "$rate" --seconds "$seconds" --server-pid "$server_pid"
