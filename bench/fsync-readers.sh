#!/usr/bin/env bash
# A reader's latency while another process fsyncs in a loop (bench/fsync-readers.c), on kvsfs
# (release build) and on the memfs_ll anchor in one run, with kvsfs/memfs_ll ratios.
#
#   bench/fsync-readers.sh [ROUNDS] [READS] [SECONDS]      (as root; defaults 3 20000 3)
#
# Each round reads on each file system twice: alone (idle), then while a second process saves
# another key with fsync in a loop (fsync). A run stops after READS reads or SECONDS, whichever
# comes first. Latencies are in microseconds, the median over ROUNDS of each run's p50, p99
# and max; a ratio is the median of the rounds' kvsfs/memfs_ll latency ratios (lower is
# better). memfs_ll has no fsync (the kernel then skips the call), so its fsync row shows what
# the writes alone cost a reader: the rest of kvsfs's is its fsync.
#
# kvsfs is mounted as `kvsfs mount` would be by default; KVSFS_MOUNT_OPTIONS adds options.
# KVSFS_BINARY runs that kvsfs instead of building this tree's (for paired runs of two builds).
set -euo pipefail
rounds=${1:-3}; reads=${2:-20000}; seconds=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)

source "$here/common.sh"
bench_work fsyncbench

bench_memfs_anchor
cc -O2 -o "$work/fsync-readers" "$here/fsync-readers.c"
bench_kvsfs

mkdir -p "$work"/{memfs,kvsfs,data}
chmod 0700 "$work/data"   # a data directory that group or others may write is refused
"$work/memfs_ll" "$work/memfs" & pids+=($!)
"$kvsfs" mount "$work/kvsfs" --data-dir "$work/data" ${KVSFS_MOUNT_OPTIONS:-} & pids+=($!)
wait_mounted "$work/memfs"; wait_mounted "$work/kvsfs"

echo "a reader's open+read+close while another process saves with fsync: median of $rounds rounds, $reads reads or ${seconds} s a run (us)"
for round in $(seq "$rounds"); do
    for load in idle fsync; do
        for fs in memfs kvsfs; do
            writer=0; [ "$load" = fsync ] && writer=1
            "$work/fsync-readers" "$work/$fs" "$reads" "$seconds" "$writer" | awk -v fs="$fs" -v load="$load" '{print fs, load, $2, $4, $6, $8, $10}' >> "$work/results"
        done
    done
done

awk '
function sort(v, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t } }
function middle(v, n) { return (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
function median(fs, load, field,   n, i, v) {
    n = count[fs, load]; for (i = 1; i <= n; i++) v[i] = val[fs, load, field, i]
    sort(v, n); return middle(v, n)
}
function ratio(load, field,   n, r, v) {
    n = count["kvsfs", load]; for (r = 1; r <= n; r++) v[r] = val["kvsfs", load, field, r] / val["memfs", load, field, r]
    sort(v, n); return middle(v, n)
}
{ n = ++count[$1, $2]; for (f = 3; f <= 7; f++) val[$1, $2, f, n] = $f }
END {
    printf "%-6s %-9s %7s %7s %8s %7s %8s %11s %11s\n", "load", "fs", "reads", "p50", "p99", "max", "fsyncs", "p50 ratio", "p99 ratio"
    split("idle fsync", loads, " ")
    for (l = 1; l <= 2; l++) {
        load = loads[l]
        printf "%-6s %-9s %7d %7.0f %8.0f %7.0f %8d\n", load, "memfs_ll", median("memfs", load, 3), median("memfs", load, 4),
            median("memfs", load, 5), median("memfs", load, 6), median("memfs", load, 7)
        printf "%-6s %-9s %7d %7.0f %8.0f %7.0f %8d %11.2f %11.2f\n", load, "kvsfs", median("kvsfs", load, 3), median("kvsfs", load, 4),
            median("kvsfs", load, 5), median("kvsfs", load, 6), median("kvsfs", load, 7), ratio(load, 4), ratio(load, 5)
    }
}' "$work/results"
