# Shared by the benchmarks (sourced): a work directory under /tmp, and on exit every mount in it
# unmounted, every process in `pids` stopped and the directory removed.
#
#   source "$here/common.sh"; bench_work LABEL      sets $work and installs the cleanup
#   wait_mounted DIR                                 waits (10 s at most) for DIR to be a mount
#   bench_postgres_database                          sets $database to a fresh database on the local
#                                                    PostgreSQL (started by scripts/postgres), dropped on exit

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
        psql "$postgres_server/postgres" -q -c "DROP DATABASE IF EXISTS $postgres_name WITH (FORCE)"
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
