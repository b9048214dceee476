/* The power-loss suite's workload and its check (scripts/powerloss).
 *
 *   Build: cc -O2 -Wall -o workload workload.c
 *   workload write DIR PREFIX KEYS SEQ LOG EVERY [COMMAND...]
 *       Writes keys PREFIX000.. of the mount DIR, one value after another with sequence numbers
 *       from SEQ, until killed. Every EVERY-th value is made durable: by fsync of its file, or,
 *       with COMMAND (e.g. `kvsfs sync DIR`), by running it after the write. Appends to LOG:
 *         W SEQ KEY    before the value is written
 *         A SEQ KEY    once close (or fsync) returned success: acknowledged
 *         D            once fsync or COMMAND returned success: every value acknowledged
 *                      before it is durable (or on the remote)
 *   workload plist PREFIX KEYS SEQ FILE
 *       Writes a dictionary property list of KEYS keys, all with values of SEQ, for an import.
 *   workload check DIR PREFIX KEYS LOG STATE [--whole]
 *       Reads every key of DIR and checks it against LOG and STATE (each key's sequence number
 *       found at the last check, which no later value can have gone below): a key holds a whole
 *       value written to it (else torn), at least as recent as its last durable one (else
 *       lost). With --whole, the keys must also hold values of one sequence number, all or none
 *       of them (an import). Prints `acknowledged N durable N lost N torn N`, rewrites STATE
 *       with what it found, and exits 1 on anything lost or torn.
 *
 * A value is the OpenStep string "KEY SEQ PADDING SUM": PADDING is 1 to 2500 letters fixed by
 * SEQ, so values cross page boundaries at many offsets, and SUM is the FNV-1a hash of what
 * precedes it. A value read back is whole only if it is exactly the one its KEY and SEQ make.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_KEYS 1024
#define MAX_VALUE 4096

static uint32_t fnv1a(const char *text) {
    uint32_t hash = 2166136261u;
    for (; *text; text++) hash = (hash ^ (unsigned char)*text) * 16777619u;
    return hash;
}

static void key_name(char *out, size_t size, const char *prefix, int index) {
    snprintf(out, size, "%s%03d", prefix, index);
}

/* The value KEY SEQ stands for, without quotes. */
static void make_value(char *out, const char *key, long seq) {
    int length = snprintf(out, MAX_VALUE, "%s %ld ", key, seq);
    int padding = 1 + (int)(((uint64_t)seq * 2654435761u) % 2500);
    for (int i = 0; i < padding; i++) out[length++] = 'a' + (seq + i) % 26;
    out[length] = 0;
    snprintf(out + length, MAX_VALUE - length, " %08x", fnv1a(out));
}

static int log_fd = -1;

static void note(const char *format, ...) {
    char line[256];
    va_list arguments;
    va_start(arguments, format);
    int length = vsnprintf(line, sizeof line, format, arguments);
    va_end(arguments);
    if (write(log_fd, line, length) != length) { perror("log"); exit(1); }
}

static int write_key(const char *dir, const char *key, long seq, int durable) {
    char path[4096], value[MAX_VALUE + 4];
    snprintf(path, sizeof path, "%s/%s", dir, key);
    value[0] = '"';
    make_value(value + 1, key, seq);
    strcat(value, "\"\n");
    size_t length = strlen(value);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return -1;
    int ok = write(fd, value, length) == (ssize_t)length;
    if (ok && durable) {
        ok = fsync(fd) == 0;
        if (ok) { note("A %ld %s\n", seq, key); note("D\n"); }
    }
    if (close(fd) != 0) ok = 0;
    if (ok && !durable) note("A %ld %s\n", seq, key);
    return ok ? 0 : -1;
}

static int run_write(int argc, char **argv) {
    if (argc < 8) return 2;
    const char *dir = argv[2], *prefix = argv[3];
    int keys = atoi(argv[4]), every = atoi(argv[7]);
    long seq = atol(argv[5]);
    char **command = argc > 8 ? &argv[8] : NULL;
    log_fd = open(argv[6], O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (log_fd < 0 || keys < 1 || keys > MAX_KEYS || every < 1) { perror(argv[6]); return 2; }
    uint64_t mix = seq;
    for (long count = 1;; count++, seq++) {
        mix = mix * 6364136223846793005ULL + 1442695040888963407ULL;
        char key[64];
        key_name(key, sizeof key, prefix, (int)((mix >> 33) % keys));
        int durable = count % every == 0;
        note("W %ld %s\n", seq, key);
        if (write_key(dir, key, seq, durable && !command) != 0) {
            note("E %ld %s %d\n", seq, key, errno);
            usleep(10000);   /* the mount is gone: wait for the kill */
            continue;
        }
        if (durable && command) {
            pid_t child = fork();
            if (child == 0) {
                execvp(command[0], command);
                _exit(127);
            }
            int status;
            if (child > 0 && waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0)
                note("D\n");
            else
                usleep(10000);
        }
    }
}

static int run_plist(int argc, char **argv) {
    if (argc != 6) return 2;
    const char *prefix = argv[2];
    int keys = atoi(argv[3]);
    long seq = atol(argv[4]);
    FILE *out = fopen(argv[5], "w");
    if (!out) { perror(argv[5]); return 1; }
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<plist version=\"1.0\">\n<dict>\n", out);
    for (int i = 0; i < keys; i++) {
        char key[64], value[MAX_VALUE];
        key_name(key, sizeof key, prefix, i);
        make_value(value, key, seq);
        fprintf(out, "<key>%s</key><string>%s</string>\n", key, value);
    }
    fputs("</dict>\n</plist>\n", out);
    return fclose(out) == 0 ? 0 : 1;
}

/* What the check knows of one key. */
struct expectation {
    long floor;       /* the sequence number it must hold at least: durable, or found before */
    long acknowledged_pending;   /* the last acknowledged since the last D, made durable by the next D */
};

/* Reads the value a key's file holds: 1 and its text, 0 if there is no such key, -1 on error. */
static int read_key(const char *dir, const char *key, char *text, size_t size) {
    char path[4096], bytes[MAX_VALUE * 2];
    snprintf(path, sizeof path, "%s/%s", dir, key);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return errno == ENOENT ? 0 : -1;
    ssize_t total = 0, n;
    while ((n = read(fd, bytes + total, sizeof bytes - 1 - total)) > 0) total += n;
    close(fd);
    if (n < 0) return -1;
    bytes[total] = 0;
    char *start = strstr(bytes, "<string>"), *end = start ? strstr(start, "</string>") : NULL;
    if (!end || (size_t)(end - start - 8) >= size) { snprintf(text, size, "%.200s", bytes); return 1; }
    memcpy(text, start + 8, end - start - 8);
    text[end - start - 8] = 0;
    return 1;
}

static int run_check(int argc, char **argv) {
    if (argc < 7) return 2;
    const char *dir = argv[2], *prefix = argv[3], *state_path = argv[6];
    int keys = atoi(argv[4]), whole = argc > 7 && strcmp(argv[7], "--whole") == 0;
    if (keys < 1 || keys > MAX_KEYS) return 2;
    static struct expectation expected[MAX_KEYS];
    for (int i = 0; i < keys; i++) expected[i] = (struct expectation){ -1, -1 };

    FILE *state = fopen(state_path, "r");
    char line[512], key[64];
    long seq;
    while (state && fgets(line, sizeof line, state)) {
        int index;
        if (sscanf(line, "%d %ld", &index, &seq) == 2 && index >= 0 && index < keys) expected[index].floor = seq;
    }
    if (state) fclose(state);

    long acknowledged = 0, durable = 0, pending = 0;
    FILE *log = fopen(argv[5], "r");
    size_t prefix_length = strlen(prefix);
    while (log && fgets(line, sizeof line, log)) {
        if (line[0] == 'A' && sscanf(line, "A %ld %63s", &seq, key) == 2 && strncmp(key, prefix, prefix_length) == 0) {
            int index = atoi(key + prefix_length);
            if (index < 0 || index >= keys) continue;
            acknowledged++;
            pending++;
            if (seq > expected[index].acknowledged_pending) expected[index].acknowledged_pending = seq;
        } else if (strcmp(line, "D\n") == 0) {
            durable += pending;
            pending = 0;
            for (int i = 0; i < keys; i++) {
                if (expected[i].acknowledged_pending > expected[i].floor) expected[i].floor = expected[i].acknowledged_pending;
                expected[i].acknowledged_pending = -1;
            }
        }
    }
    if (log) fclose(log);

    long lost = 0, torn = 0, found_seq[MAX_KEYS];
    long first_seq = -2;
    int present = 0;
    for (int i = 0; i < keys; i++) {
        char text[MAX_VALUE * 2], whole_value[MAX_VALUE];
        key_name(key, sizeof key, prefix, i);
        found_seq[i] = -1;
        int r = read_key(dir, key, text, sizeof text);
        if (r < 0) {
            fprintf(stderr, "check: %s: cannot read it: %s\n", key, strerror(errno));
            torn++;
            continue;
        }
        if (r == 0) {
            if (expected[i].floor >= 0) {
                fprintf(stderr, "check: %s: missing; expected at least value %ld\n", key, expected[i].floor);
                lost++;
            }
        } else {
            present++;
            size_t key_length = strlen(key);
            seq = strncmp(text, key, key_length) == 0 && text[key_length] == ' ' ? atol(text + key_length + 1) : -1;
            if (seq >= 0) make_value(whole_value, key, seq);
            if (seq < 0 || strcmp(text, whole_value) != 0) {
                fprintf(stderr, "check: %s: torn: found \"%.120s\"\n", key, text);
                torn++;
                continue;
            }
            found_seq[i] = seq;
            if (seq < expected[i].floor) {
                fprintf(stderr, "check: %s: lost: found value %ld, expected at least %ld\n", key, seq, expected[i].floor);
                lost++;
            }
            if (first_seq == -2) first_seq = seq;
            else if (whole && seq != first_seq) {
                fprintf(stderr, "check: %s: not whole: value %ld, another key holds %ld\n", key, seq, first_seq);
                torn++;
            }
        }
    }
    if (whole && present > 0 && present < keys) {
        fprintf(stderr, "check: not whole: %d of %d keys present\n", present, keys);
        torn++;
    }

    state = fopen(state_path, "w");
    for (int i = 0; state && i < keys; i++)   /* a loss is told once: from now on, what is there counts */
        if (found_seq[i] >= 0) fprintf(state, "%d %ld\n", i, found_seq[i]);
    if (!state || fclose(state) != 0) { perror(state_path); return 1; }
    printf("acknowledged %ld durable %ld lost %ld torn %ld\n", acknowledged, durable, lost, torn);
    return lost || torn ? 1 : 0;
}

int main(int argc, char **argv) {
    int status = 2;
    if (argc > 1 && strcmp(argv[1], "write") == 0) status = run_write(argc, argv);
    else if (argc > 1 && strcmp(argv[1], "plist") == 0) status = run_plist(argc, argv);
    else if (argc > 1 && strcmp(argv[1], "check") == 0) status = run_check(argc, argv);
    if (status == 2)
        fprintf(stderr, "usage: workload write DIR PREFIX KEYS SEQ LOG EVERY [COMMAND...]\n"
                        "       workload plist PREFIX KEYS SEQ FILE\n"
                        "       workload check DIR PREFIX KEYS LOG STATE [--whole]\n");
    return status;
}
