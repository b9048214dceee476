#!/usr/bin/env bash
# Small-file benchmark: the shared anchors (tmpfs, memfs_ll) and kvsfs (release build) in one
# run, with kvsfs/memfs_ll ratios per phase, then the daemon's resident memory with a full store.
# The phases are smallfile_bench's five, then reread (bench/reread.c): every key read 10 times,
# as configuration is read far more often than written.
#
#   bench/smallfile.sh [ROUNDS] [KEYS] [VALUE_BYTES]      (as root; defaults 5 1000 64)
#
# kvsfs is mounted as `kvsfs mount` would be by default (syncing with cloud.sqlite in its data
# directory); KVSFS_MOUNT_OPTIONS adds options, e.g. "--remote none" for the mount alone.
# KVSFS_BINARY runs that kvsfs instead of building this tree's (for paired runs of two builds).
# KVSFS_SCHEMA_RULES=N sets a schema of N rules on the store first (kvsfs schema set): N-1 keys'
# rules and a pattern every key the bench writes matches, so that each write is checked.
#
# Each phase's ops/s is the median over ROUNDS runs, its ratio the median of the rounds' ratios
# (with their range); the three file systems take turns in every
# round so that a noisy machine slows them alike.
set -euo pipefail
rounds=${1:-5}; keys=${2:-1000}; value_bytes=${3:-64}
here=$(cd "$(dirname "$0")" && pwd)

source "$here/common.sh"
bench_work bench

bench_memfs_anchor
cc -O2 -o "$work/smallfile_bench" "$anchors/smallfile_bench.c"
cc -O2 -D_GNU_SOURCE -o "$work/reread" "$here/reread.c"   # every key read 10 times (bench/reread.c)
bench_kvsfs


mkdir -p "$work"/{tmpfs,memfs,kvsfs,data}
chmod 0700 "$work/data"   # a data directory that group or others may write is refused
mount -t tmpfs tmpfs "$work/tmpfs"
"$work/memfs_ll" "$work/memfs" & pids+=($!)
"$kvsfs" mount "$work/kvsfs" --data-dir "$work/data" ${KVSFS_MOUNT_OPTIONS:-} & kvsfs_pid=$!; pids+=($kvsfs_pid)
wait_mounted "$work/memfs"; wait_mounted "$work/kvsfs"
if [ -n "${KVSFS_SCHEMA_RULES:-}" ]; then
    {
        printf '{"keys": {'
        for i in $(seq 2 "$((KVSFS_SCHEMA_RULES - 1))"); do
            printf '"setting%d": {"type": "integer", "minimum": 0, "maximum": %d, "description": "A setting."}, ' "$i" "$((i * 100))"
        done
        printf '"mode": {"type": "string", "choices": ["fast", "safe"]}},\n'
        printf ' "patterns": {"key*": {"type": "string", "maxLength": 100000, "pattern": "[a-z]*"}}}\n'
    } > "$work/schema.json"
    "$kvsfs" schema set "$work/kvsfs" "$work/schema.json"
fi

echo "smallfile_bench: $keys keys, $value_bytes-byte values, median of $rounds rounds (ops/s)"
for round in $(seq "$rounds"); do
    for fs in tmpfs memfs kvsfs; do
        "$work/smallfile_bench" "$work/$fs" "$keys" "$value_bytes" | awk -v fs="$fs" '{print fs, $1, $2}' >> "$work/results"
        "$work/reread" "$work/$fs" "$keys" "$value_bytes" 10 | awk -v fs="$fs" '{print fs, $1, $2}' >> "$work/results"
    done
done

# Ratios are taken round by round (memfs_ll and kvsfs ran seconds apart), then the median:
# this machine's speed drifts over minutes, which the medians of ops/s alone would mix in.
awk -v rounds="$rounds" '
function sort(v, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t } }
function middle(v, n) { return (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
function median(fs, phase,   n, i, v) {
    n = count[fs, phase]; for (i = 1; i <= n; i++) v[i] = val[fs, phase, i]
    sort(v, n); return middle(v, n)
}
{ count[$1, $2]++; val[$1, $2, count[$1, $2]] = $3 }
END {
    split("write stat read overwrite unlink reread", order, " ")
    split("0.6 1.0 1.0 0.6 0.6 3.0", target, " ")
    printf "%-10s %10s %10s %10s %15s %13s %8s\n", "phase", "tmpfs", "memfs_ll", "kvsfs", "kvsfs/memfs_ll", "round range", "target"
    for (i = 1; i <= 6; i++) {
        p = order[i]; n = count["kvsfs", p]
        for (r = 1; r <= n; r++) ratio[r] = val["kvsfs", p, r] / val["memfs", p, r]
        sort(ratio, n)
        printf "%-10s %10.0f %10.0f %10.0f %15.2f %6.2f-%-6.2f %8s\n", p, median("tmpfs", p), median("memfs", p), median("kvsfs", p),
            middle(ratio, n), ratio[1], ratio[n], ">= " target[i]
    }
}' "$work/results"

# Resident memory with a full store: 1024 keys holding 1 MB together.
per_value=$(( (1048576 / 1024) - 200 ))
filler=$(head -c "$per_value" /dev/zero | tr '\0' v)
for i in $(seq 0 1023); do printf '%s' "$filler" > "$work/kvsfs/full$i"; done
cat "$work"/kvsfs/full* > /dev/null
used=$(df -B1 "$work/kvsfs" | awk 'NR==2 {print $3}')
keys_used=$(df -i "$work/kvsfs" | awk 'NR==2 {print $3}')
rss_kb=$(awk '/^VmRSS/ {print $2}' "/proc/$kvsfs_pid/status")
awk -v k="$keys_used" -v u="$used" -v r="$rss_kb" 'BEGIN { printf "full store: %s keys, %s bytes; daemon resident memory %.1f MB (target <= 40 MB)\n", k, u, r / 1024 }'
