#!/usr/bin/env bash
# Server load benchmark (release build): one `kvsfs serve` on loopback (SQLite, or PostgreSQL
# with `postgres`; two instances on one PostgreSQL database with `postgres2`), WATCHERS clients
# watching STORES stores the way mounts do (each holds its store's event stream), while writers
# push RATE changes per second, each to a random store.
#
#   bench/load.sh [WATCHERS] [RATE] [SECONDS] [STORES] [sqlite|postgres|postgres2]   (defaults 1000 500 30 250 sqlite)
#
# The generator is bench/loadgen.c (compiled here with cc): one thread on epoll, so that it is
# not the limit of what it measures even at 10,000 watchers.
#
# Prints propagation from the start of a push to each watcher holding the change (p50, p99, max;
# target p99 <= 250 ms), push latency, deliveries against those expected, failures, and each
# instance's CPU and memory (and memory per watcher, once the watchers connected and at the
# end) over the measured window. With two instances every store has watchers on both and
# pushes take turns, and propagation across instances is shown on its own. The generator runs
# on the same machine: with two cores or more the servers run on the first and the generator on
# the second (taskset), else they share them; its own CPU (time and share of one core) and how
# late its pushes began against their schedule are printed, and last each instance's pushes and
# the transactions that committed them (/metrics: group commit).
# KVSFS_BINARY runs that kvsfs as the server instead of building this tree's.
set -euo pipefail
watchers=${1:-1000}; rate=${2:-500}; seconds=${3:-30}; stores=${4:-250}; backend=${5:-sqlite}
here=$(cd "$(dirname "$0")" && pwd)

source "$here/common.sh"
bench_work loadbench

cc -O2 -o "$work/loadgen" "$here/loadgen.c"
bench_kvsfs   # the server: this tree's release build, or $KVSFS_BINARY for paired runs of two builds
database="sqlite://$work/server.sqlite"
instances=1
case "$backend" in
    sqlite) ;;
    postgres) bench_postgres_database ;;
    postgres2) bench_postgres_database; instances=2 ;;
    *) echo "bench: the backend is sqlite, postgres or postgres2, not $backend" >&2; exit 2 ;;
esac
ulimit -n "$(ulimit -Hn)"   # a socket per watcher, in the generator and in the server
# The generator holds a socket per watcher and some for pushes, and so does the server.
needed=$((watchers + 1024))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$needed" ]; then
    echo "bench: $watchers watchers need $needed open files in each process; the limit here is $(ulimit -n) (raise the hard limit)" >&2
    exit 2
fi
token=$("$kvsfs" account create load --database "$database")
serverCore=(); generatorCore=()
if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null; then serverCore=(taskset -c 0); generatorCore=(taskset -c 1); fi
servers=()
for port in $(seq 18790 $((18789 + instances))); do
    "${serverCore[@]}" "$kvsfs" serve --listen "127.0.0.1:$port" --database "$database" --rate-limit 0 \
        --max-stores-per-account "$((stores > 256 ? stores : 256))" 2>/dev/null & pids+=($!)
    servers+=(--url "http://127.0.0.1:$port" --server-pid $!)
    for _ in $(seq 200); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.05; done
done

"${generatorCore[@]}" "$work/loadgen" "${servers[@]}" --token "$token" --account load \
    --stores "$stores" --watchers "$watchers" --rate "$rate" --seconds "$seconds"
for port in $(seq 18790 $((18789 + instances))); do
    echo "  server on $port: $(curl -sf "http://127.0.0.1:$port/metrics" | grep -E '^kvsfs_push(es|_commits)_total' | tr '\n' ' ')"
done
