/* A reader's latency while another process fsyncs: the reader opens, reads and closes one key
 * in a loop and times each round; with WRITER set, a child process meanwhile saves another key
 * in a loop (open O_TRUNC, write a new value, fsync, close), as an editor or `defaults write`
 * does. Every open and every close reaches the daemon (OPEN, FLUSH), and so does every read of
 * a file opened with direct_io (kvsfs); a daemon whose fsync blocks other requests shows here.
 * Stops after READS rounds or SECONDS, whichever comes first. Prints, in microseconds:
 *   reads N p50 X p99 Y max Z fsyncs K
 * Build: cc -O2 -o fsync-readers fsync-readers.c    Run: fsync-readers MOUNT READS SECONDS WRITER */
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static int compare(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

/* Shared with the writer: the parent sets `stop`, the writer counts its fsyncs. */
struct shared { atomic_int stop; atomic_long fsyncs; };

static void save(const char *path, const char *value, int durable) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    size_t length = strlen(value);
    if (fd < 0 || write(fd, value, length) != (ssize_t)length) { perror(path); exit(1); }
    if (durable && fsync(fd) != 0) { perror("fsync"); exit(1); }
    if (close(fd) != 0) { perror("close"); exit(1); }
}

static void write_loop(const char *mount, struct shared *shared) {
    char path[4096], value[64];
    snprintf(path, sizeof path, "%s/fsynced", mount);
    for (long i = 0; !atomic_load(&shared->stop); i++) {
        snprintf(value, sizeof value, "\"saved %ld\"\n", i);
        save(path, value, 1);
        atomic_fetch_add(&shared->fsyncs, 1);
    }
    exit(0);
}

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: %s MOUNT READS SECONDS WRITER(0|1)\n", argv[0]); return 2; }
    const char *mount = argv[1];
    int reads = atoi(argv[2]), writer = atoi(argv[4]);
    double limit = atof(argv[3]) * 1e6;
    char path[4096], buffer[4096];
    snprintf(path, sizeof path, "%s/read", mount);
    save(path, "\"read in a loop\"\n", 0);

    struct shared *shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) { perror("mmap"); return 1; }
    atomic_init(&shared->stop, 0);
    atomic_init(&shared->fsyncs, 0);
    pid_t child = 0;
    if (writer) {
        child = fork();
        if (child < 0) { perror("fork"); return 1; }
        if (child == 0) write_loop(mount, shared);
        /* The reader starts once the writer has saved once: its first open creates the key. */
        for (int i = 0; i < 5000 && atomic_load(&shared->fsyncs) == 0; i++) usleep(1000);
        if (atomic_load(&shared->fsyncs) == 0) { fprintf(stderr, "the writer did not fsync within 5 s\n"); kill(child, SIGKILL); return 1; }
    }

    double *latency = calloc(reads, sizeof *latency);
    long fsyncs_before = atomic_load(&shared->fsyncs);
    double start = now_us();
    int done = 0;
    while (done < reads && now_us() - start < limit) {
        double begin = now_us();
        int fd = open(path, O_RDONLY);
        if (fd < 0 || read(fd, buffer, sizeof buffer) <= 0) { perror(path); return 1; }
        close(fd);
        latency[done++] = now_us() - begin;
    }
    long fsyncs = atomic_load(&shared->fsyncs) - fsyncs_before;
    if (writer) {
        atomic_store(&shared->stop, 1);
        int status;
        if (waitpid(child, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) { fprintf(stderr, "the writer failed\n"); return 1; }
    }
    qsort(latency, done, sizeof *latency, compare);
    printf("reads %d p50 %.0f p99 %.0f max %.0f fsyncs %ld\n", done, latency[done / 2], latency[done * 99 / 100], latency[done - 1], fsyncs);
    return 0;
}
