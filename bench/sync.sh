#!/usr/bin/env bash
# Sync benchmark: two mounts of one store on one file remote (release build).
#
#   bench/sync.sh [CHANGES] [KEYS] [file|server|postgres]      (as root; defaults 1000 50 file)
#
# With `server`, the mounts sync through a `kvsfs serve` on loopback instead of the file remote;
# with `postgres`, through two `kvsfs serve` instances sharing a local PostgreSQL database (A on
# one, B and C on the other), so that every change crosses from one instance to the other.
# 1. Propagation: CHANGES writes on mount A, each timed from close() to the inotify event on
#    mount B (p50, p99; targets p50 <= 2 ms and p99 <= 10 ms while idle, as each change waits for
#    the last to arrive).
# KVSFS_BINARY runs that kvsfs instead of building this tree's (for paired runs of two builds).
# 2. Initial sync: a full store (1024 keys, about 1 MB) on the remote, then a fresh mount C:
#    the time from starting `kvsfs mount` until every key shows in C (target <= 1 s).
set -euo pipefail
changes=${1:-1000}; keys=${2:-50}; via=${3:-file}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

source "$here/common.sh"
bench_work syncbench

cc -O2 -o "$work/propagation" "$here/propagation.c"
bench_kvsfs   # this tree's release build, or $KVSFS_BINARY for paired runs of two builds
remote="file://$work/cloud/cloud.sqlite"
access=()
mkdir -p "$work/cloud"
remote_b=$remote
if [ "$via" != file ]; then
    database="sqlite://$work/cloud/server.sqlite"
    if [ "$via" = postgres ]; then bench_postgres_database; fi
    (umask 077; "$kvsfs" account create bench --database "$database" > "$work/token")   # a token file others may read is refused
    "$kvsfs" serve --listen 127.0.0.1:18781 --database "$database" 2>/dev/null & pids+=($!)
    remote=http://127.0.0.1:18781
    remote_b=$remote
    if [ "$via" = postgres ]; then
        "$kvsfs" serve --listen 127.0.0.1:18782 --database "$database" 2>/dev/null & pids+=($!)
        remote_b=http://127.0.0.1:18782
    fi
    for url in "$remote" "$remote_b"; do
        for _ in $(seq 200); do curl -sf "$url/health" >/dev/null && break; sleep 0.05; done
    done
    access=(--token-file "$work/token")
fi

mkdir -p "$work"/{a,b,c,data-a,data-b,data-c,cloud}
"$kvsfs" mount "$work/a" --data-dir "$work/data-a" --remote "$remote" "${access[@]}" & pids+=($!)
"$kvsfs" mount "$work/b" --data-dir "$work/data-b" --remote "$remote_b" "${access[@]}" & pids+=($!)
wait_mounted "$work/a"; wait_mounted "$work/b"
"$kvsfs" sync "$work/a"; "$kvsfs" sync "$work/b"

echo "propagation through the $via remote, close() on A to the inotify event on B, $changes changes over $keys keys:"
"$work/propagation" "$work/a" "$work/b" "$changes" "$keys"

# A full store: 1024 keys whose canonical XML is 1000 bytes each (1,024,000 bytes).
rm -f "$work"/a/key*
filler=$(printf '%0819d' 0)
for i in $(seq 1024); do printf '%s' "${filler:0:$((819 - ${#i}))}$i" > "$work/a/full$i"; done
"$kvsfs" sync "$work/a"
echo "initial sync of a full store into a fresh mount: $(ls "$work/a" | wc -l) keys, $(df -B1 --output=used "$work/a" | tail -1 | tr -d ' ') bytes"
start=$(date +%s.%N)
"$kvsfs" mount "$work/c" --data-dir "$work/data-c" --remote "$remote_b" "${access[@]}" & pids+=($!)
wait_mounted "$work/c"
"$kvsfs" sync "$work/c"
end=$(date +%s.%N)
count=$(ls "$work/c" | wc -l)
awk -v s="$start" -v e="$end" -v n="$count" 'BEGIN { printf "  %d keys in the new mount %.0f ms after starting kvsfs mount (target <= 1000 ms)\n", n, (e - s) * 1000 }'
