/* Propagation latency: writes N changes on mount A (open, write, close) and times each from
 * just before close() to the inotify IN_CLOSE_WRITE/IN_MOVED_TO/IN_DELETE event for that key on
 * mount B. Prints p50, p90, p99 and max in milliseconds.
 * Build: cc -O2 -o propagation propagation.c    Run: propagation A B N KEYS */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
static int compare(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

/* Waits for an event naming `key` on `fd`; returns 0, or -1 after `timeout_ms`. */
static int wait_for(int fd, const char *key, double timeout_ms) {
    char buffer[65536] __attribute__((aligned(8)));
    double deadline = now_ms() + timeout_ms;
    for (;;) {
        int left = (int)(deadline - now_ms());
        if (left <= 0) return -1;
        struct pollfd p = { .fd = fd, .events = POLLIN };
        if (poll(&p, 1, left) <= 0) continue;
        ssize_t n = read(fd, buffer, sizeof buffer);
        for (char *at = buffer; n > 0 && at < buffer + n;) {
            struct inotify_event *e = (struct inotify_event *)at;
            if (e->len && strcmp(e->name, key) == 0) return 0;
            at += sizeof *e + e->len;
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 5) { fprintf(stderr, "usage: %s MOUNT_A MOUNT_B CHANGES KEYS\n", argv[0]); return 2; }
    const char *a = argv[1], *b = argv[2];
    int changes = atoi(argv[3]), keys = atoi(argv[4]);
    int fd = inotify_init1(IN_NONBLOCK);
    if (fd < 0 || inotify_add_watch(fd, b, IN_CLOSE_WRITE | IN_MOVED_TO | IN_DELETE) < 0) { perror("inotify"); return 1; }
    double *latency = calloc(changes, sizeof *latency);
    char path[4096], key[64], value[128];
    int lost = 0;
    for (int i = 0; i < changes; i++) {
        snprintf(key, sizeof key, "key%d", i % keys);
        snprintf(path, sizeof path, "%s/%s", a, key);
        int length = snprintf(value, sizeof value, "\"change %d\"\n", i);
        int out = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (out < 0 || write(out, value, length) != length) { perror(path); return 1; }
        double start = now_ms();
        if (close(out) != 0) { perror("close"); return 1; }
        if (wait_for(fd, key, 5000) != 0) { lost++; latency[i] = 5000; continue; }
        latency[i] = now_ms() - start;
    }
    qsort(latency, changes, sizeof *latency, compare);
    printf("changes %d  p50 %.1f ms  p90 %.1f ms  p99 %.1f ms  max %.1f ms  lost %d\n", changes,
           latency[changes / 2], latency[changes * 90 / 100], latency[changes * 99 / 100], latency[changes - 1], lost);
    return lost ? 1 : 0;
}
