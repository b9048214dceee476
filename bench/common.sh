# Shared by the benchmarks (sourced): a work directory under /tmp, and on exit every mount in it
# unmounted, every process in `pids` stopped and the directory removed.
#
#   source "$here/common.sh"; bench_work LABEL      sets $work and installs the cleanup
#   wait_mounted DIR                                 waits (10 s at most) for DIR to be a mount
#   bench_postgres_database                          sets $database to a fresh database on the local
#                                                    PostgreSQL (started by scripts/postgres), dropped on exit
#   bench_memfs_anchor                               builds the memfs_ll anchor as $work/memfs_ll, from
#                                                    $KVSFS_ANCHORS (default ../shared/bench); sets $anchors
#   bench_kvsfs                                      sets $kvsfs: $KVSFS_BINARY, else this tree's release
#                                                    build, and lets a fresh build's writes reach the disk

bench_work() {
    work=$(mktemp -d "/tmp/kvsfs-$1-XXXXXX")
    pids=()
    trap bench_cleanup EXIT
}

bench_cleanup() {
    for dir in "$work"/*; do
        mountpoint -q "$dir" 2>/dev/null && { fusermount3 -u "$dir" 2>/dev/null || umount -l "$dir"; }
    done
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
    if [ -n "${postgres_server:-}" ]; then
        # As the superuser: only it may end an autovacuum worker still on the database after a
        # run of many writes, which kept the database from being dropped.
        runuser -u postgres -- psql -p "${postgres_server##*:}" -q \
            -c "DROP DATABASE IF EXISTS $postgres_name WITH (FORCE)"
    fi
}

bench_postgres_database() {
    postgres_server=$(bash "$(dirname "${BASH_SOURCE[0]}")/../scripts/postgres")
    postgres_name="kvsfs_bench_$$"
    psql "$postgres_server/postgres" -q -c "CREATE DATABASE $postgres_name"
    database="$postgres_server/$postgres_name"
}

wait_mounted() {
    for _ in $(seq 500); do mountpoint -q "$1" && return 0; sleep 0.02; done
    echo "bench: $1 did not mount" >&2
    exit 1
}

bench_memfs_anchor() {
    local repo
    repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    anchors=${KVSFS_ANCHORS:-$repo/../shared/bench}
    [ -f "$anchors/memfs_ll.c" ] || { echo "bench: the anchors are not at $anchors (set KVSFS_ANCHORS)" >&2; exit 2; }
    cc -O2 -o "$work/memfs_ll" "$anchors/memfs_ll.c" $(pkg-config --cflags --libs fuse3) -lpthread
}

bench_kvsfs() {
    if [ -n "${KVSFS_BINARY:-}" ]; then
        kvsfs=$KVSFS_BINARY
    else
        local repo
        repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
        (cd "$repo" && swift build -c release --product kvsfs >/dev/null)
        kvsfs="$repo/.build/release/kvsfs"
    fi
    sync   # a fresh build leaves ~200 MB to write back, which would stall the measured fsyncs
}
