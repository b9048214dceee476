/* Reread workload on a directory: configuration is read far more often than written.
 * Usage: reread DIR [N] [VALUE_BYTES] [READS]
 * Writes N keys (not timed; open O_CREAT|O_TRUNC, write, close of a small XML property list),
 * then reads every key READS times (open, read to EOF, close; default 10), checking each read
 * against what was written, and prints one line: "reread OPS ops/s ..." as smallfile_bench
 * does. Finally removes the keys (not timed). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s DIR [N] [VALUE_BYTES] [READS]\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    int n = argc > 2 ? atoi(argv[2]) : 500, value_bytes = argc > 3 ? atoi(argv[3]) : 64, reads = argc > 4 ? atoi(argv[4]) : 10;
    if (n <= 0 || value_bytes <= 0 || value_bytes > 60000 || reads <= 0) {
        fprintf(stderr, "reread: N, VALUE_BYTES (at most 60000) and READS must be positive\n");
        return 2;
    }
    char *filler = malloc(value_bytes + 1), *value = malloc(value_bytes + 200), path[4096], buffer[1 << 16];
    memset(filler, 'x', value_bytes);
    filler[value_bytes] = 0;
    int length = snprintf(value, value_bytes + 200,
                          "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<plist version=\"1.0\">\n<string>%s</string>\n</plist>\n", filler);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/reread%05d", dir, i);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || write(fd, value, length) != length || close(fd) != 0) { perror(path); return 1; }
    }
    double start = now();
    for (int round = 0; round < reads; round++) {
        for (int i = 0; i < n; i++) {
            snprintf(path, sizeof path, "%s/reread%05d", dir, i);
            int fd = open(path, O_RDONLY);
            if (fd < 0) { perror(path); return 1; }
            ssize_t total = 0, count;
            while ((count = read(fd, buffer + total, sizeof buffer - total)) > 0) total += count;
            close(fd);
            // The file holds the canonical form of the value, which may differ in bytes from
            // what was written (a validating file system rewrites it); the string must be there.
            if (count < 0 || total < value_bytes || memmem(buffer, total, filler, value_bytes) == NULL) {
                fprintf(stderr, "reread: %s read back %zd bytes without its value\n", path, total);
                return 1;
            }
        }
    }
    double elapsed = now() - start;
    int ops = n * reads;
    printf("%-9s %8.0f ops/s  (%d ops, %.1f us/op)\n", "reread", ops / elapsed, ops, elapsed / ops * 1e6);
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/reread%05d", dir, i);
        if (unlink(path) != 0) { perror(path); return 1; }
    }
    return 0;
}
