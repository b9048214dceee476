/* A load generator for `kvsfs serve` (bench/load.sh runs it). WATCHERS clients hold the event
 * streams of STORES stores as mounts do (GET /v1/ACCOUNT/STORE/events?after=CURSOR with the
 * bearer token: server-sent events, one `id: CURSOR` and one `data: {changes,...}` line per
 * batch), while pushes of one change each (POST .../changes) go out at a steady RATE a second,
 * each to a random store. A change's value carries when it was pushed (µs on this process's
 * monotonic clock) and the instance it went to, so each watcher that receives it knows how long
 * it took. Given several --url (instances sharing one database), the watchers of each store are
 * spread over them, pushes take turns, and the changes that crossed instances are shown apart.
 *
 * One thread, one epoll set, non-blocking sockets, libc only: the generator must never be the
 * limit of what it measures. Pushes go over a small pool of keep-alive connections per instance.
 * What a server sends is read within fixed bounds (a response head, a push's answer, an event's
 * line), and every loop ends by count or by time.
 *
 * Prints propagation (p50, p99, max; histogram buckets of 1/128 of their value), push latency,
 * how late pushes began against their schedule, deliveries received against expected, failures,
 * each server's CPU and memory (with --server-pid), and this process's own CPU and the time it
 * waited for a CPU others held.
 *
 * Build: cc -O2 -o loadgen loadgen.c
 * Run:   loadgen --url http://127.0.0.1:18790 [--url URL ...] --token TOKEN [--account load]
 *                [--stores 250] [--watchers 1000] [--rate 500] [--seconds 30] [--server-pid PID ...] */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum {
    MAX_INSTANCES = 8, MAX_SERVERS = 8,
    POOL_MAX = 1024,          /* keep-alive push connections per instance, at most: as many as
                                 pushes in flight (2,500/s answered within 400 ms) */
    POOL_START = 8,           /* opened per instance before the pushes begin */
    OPENING_MAX = 256,        /* watchers connecting at once (the servers' accept backlogs) */
    HEAD_MAX = 8192,          /* a response head */
    ANSWER_MAX = 4096,        /* what is kept of a push's or a cursor's answer */
    LINE_MAX_BYTES = 4 << 20, /* an event's line (a lagging watcher's batch of up to 4096 changes) */
    READ_BYTES = 1 << 16,
    REQUEST_MAX = 4096,
    EVENTS_MAX = 1024,
    /* Pushes take keys k0 to k1023 in turn (a store's quota holds 1024 keys): a change whose key
     * is pushed again to its store before a watcher reads it reaches that watcher as the later
     * change alone, as the log keeps a key's latest change; the more keys, the rarer. */
    KEYS = 1024,
};
static const int64_t SECOND = 1000000;
static const int64_t RETRY_US = 100000, CONNECT_US = 10000000, ANSWER_US = 30000000, TICK_US = 100000;
static const int64_t STREAM_SILENCE_US = 35000000;

/* Microseconds on the monotonic clock since the generator started. */
static struct timespec origin;
static int64_t now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)(t.tv_sec - origin.tv_sec) * SECOND + (t.tv_nsec - origin.tv_nsec) / 1000;
}

/* ---- Figures: histograms with buckets of 1/128 of their value, so memory is fixed. ---- */

enum { EXACT = 256, PER_OCTAVE = 128, BUCKETS = EXACT + 56 * PER_OCTAVE };
struct histogram { uint64_t count, bucket[BUCKETS]; int64_t max; };

static int bucket_of(int64_t v) {
    if (v < EXACT) return (int)v;
    int octave = 63 - __builtin_clzll((uint64_t)v); /* >= 8 */
    int shift = octave - 7;
    return EXACT + (octave - 8) * PER_OCTAVE + (int)((v >> shift) - PER_OCTAVE);
}
static int64_t bucket_top(int b) {
    if (b < EXACT) return b;
    int octave = (b - EXACT) / PER_OCTAVE + 8, shift = octave - 7;
    int64_t mantissa = (b - EXACT) % PER_OCTAVE + PER_OCTAVE;
    return ((mantissa + 1) << shift) - 1;
}
static void record(struct histogram *h, int64_t v) {
    if (v < 0) v = 0;
    if (v > ((int64_t)1 << 61)) v = (int64_t)1 << 61;
    h->bucket[bucket_of(v)]++;
    h->count++;
    if (v > h->max) h->max = v;
}
/* The value (ms) below which a fraction p of the records fall: as a sorted array's element
 * [count * p], the top of its bucket; the exact maximum for p = 1. */
static double percentile_ms(const struct histogram *h, double p) {
    if (h->count == 0) return 0.0 / 0.0;
    if (p >= 1) return h->max / 1e3;
    uint64_t rank = (uint64_t)(h->count * p) + 1, seen = 0;
    for (int b = 0; b < BUCKETS; b++) {
        seen += h->bucket[b];
        if (seen >= rank) { int64_t top = bucket_top(b); return (top < h->max ? top : h->max) / 1e3; }
    }
    return h->max / 1e3;
}

/* ---- The command line ---- */

struct instance { char host[256], port[8], authority[300]; struct sockaddr_storage address; socklen_t length; };
static struct instance instances[MAX_INSTANCES];
static int instance_count, server_pids[MAX_SERVERS], server_count;
static const char *token, *account = "load";
static long stores = 250, watchers = 1000;
static double rate = 500, seconds = 30;

static void usage_exit(const char *why) {
    fprintf(stderr, "loadgen: %s\nusage: loadgen --url http://HOST:PORT [--url ...] --token TOKEN [--account NAME] [--stores N] "
                    "[--watchers N] [--rate PER_SECOND] [--seconds S] [--server-pid PID ...]\n", why);
    exit(2);
}

static long whole(const char *text, long low, long high, const char *name) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < low || v > high) {
        char why[128];
        snprintf(why, sizeof why, "%s must be a whole number from %ld to %ld", name, low, high);
        usage_exit(why);
    }
    return v;
}

static double number(const char *text, double low, double high, const char *name) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !(v > low) || v > high) {
        char why[128];
        snprintf(why, sizeof why, "%s must be above %g and at most %g", name, low, high);
        usage_exit(why);
    }
    return v;
}

/* Letters, digits, '.', '_' and '-': what goes into a path and a header as it is. */
static int plain(const char *text, size_t most) {
    size_t n = strlen(text);
    if (n == 0 || n > most) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = text[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* http://HOST[:PORT][/], resolved once. */
static void add_instance(const char *url) {
    if (instance_count == MAX_INSTANCES) usage_exit("too many --url");
    struct instance *in = &instances[instance_count];
    if (strncmp(url, "http://", 7) != 0) usage_exit("a --url is http://HOST[:PORT]");
    const char *host = url + 7, *end = host + strcspn(host, ":/");
    if (end == host || end - host >= (long)sizeof in->host) usage_exit("a --url has no host, or too long a one");
    memcpy(in->host, host, end - host);
    in->host[end - host] = 0;
    const char *port = "80", *port_end = port + 2, *after = end;
    if (*end == ':') {
        port = end + 1;
        after = port_end = port + strspn(port, "0123456789");
        if (port_end == port || port_end - port > 5) usage_exit("a --url's port is a number");
    }
    if (*after == '/') after++;
    if (*after) usage_exit("a --url is http://HOST[:PORT] with no path");
    snprintf(in->port, sizeof in->port, "%.*s", (int)(port_end - port), port);
    whole(in->port, 1, 65535, "a --url's port");
    char authority[sizeof in->authority];
    snprintf(authority, sizeof authority, "%s:%s", in->host, in->port);
    memcpy(in->authority, authority, sizeof authority);
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *found;
    int failed = getaddrinfo(in->host, in->port, &hints, &found);
    if (failed) { fprintf(stderr, "loadgen: %s: %s\n", url, gai_strerror(failed)); exit(2); }
    memcpy(&in->address, found->ai_addr, found->ai_addrlen);
    in->length = found->ai_addrlen;
    freeaddrinfo(found);
    instance_count++;
}

static void parse_options(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *name = argv[i];
        if (!strcmp(name, "--help") || !strcmp(name, "-h")) usage_exit("a load generator for kvsfs serve");
        if (i + 1 >= argc) usage_exit("an option without its value");
        const char *value = argv[++i];
        if (!strcmp(name, "--url")) add_instance(value);
        else if (!strcmp(name, "--token")) token = value;
        else if (!strcmp(name, "--account")) account = value;
        else if (!strcmp(name, "--stores")) stores = whole(value, 1, 1000000, "--stores");
        else if (!strcmp(name, "--watchers")) watchers = whole(value, 0, 1000000, "--watchers");
        else if (!strcmp(name, "--rate")) rate = number(value, 0, 1000000, "--rate");
        else if (!strcmp(name, "--seconds")) seconds = number(value, 0, 86400, "--seconds");
        else if (!strcmp(name, "--server-pid")) {
            if (server_count == MAX_SERVERS) usage_exit("too many --server-pid");
            server_pids[server_count++] = (int)whole(value, 1, INT_MAX, "--server-pid");
        } else usage_exit("an unknown option");
    }
    if (!token) usage_exit("--token is needed");
    /* A token is base64url and the like: anything else could break the request's header. */
    if (!plain(token, 512)) usage_exit("--token must be 1 to 512 letters, digits, '.', '_' or '-'");
    if (!plain(account, 64)) usage_exit("--account must be 1 to 64 letters, digits, '.', '_' or '-'");
    if (instance_count == 0) add_instance("http://127.0.0.1:18790");
}

/* ---- Connections ---- */

enum role { WATCHER, POOLED };
enum state { CLOSED, CONNECTING, SENDING, READING_HEAD, READING_BODY, IDLE };
enum body { BODY_NONE, BODY_LENGTH, BODY_CHUNKED, BODY_UNTIL_CLOSE };
enum chunk { CHUNK_SIZE, CHUNK_EXTENSION, CHUNK_DATA, CHUNK_DATA_END, CHUNK_TRAILER, CHUNK_DONE };
enum request { NO_REQUEST, CURSOR_REQUEST, PUSH_REQUEST };

struct connection {
    int fd;
    uint32_t generation;  /* epoll's events carry it: an event for a closed socket is dropped */
    uint8_t role, state, instance, wants_out, close_after, opening, streaming;
    uint8_t body, chunk, request, has_event_id, skipping_line, in_idle_ring;
    char *out;            /* the request being written */
    int out_length, out_sent;
    char *head;           /* the response head, while it is read */
    int head_length, status, chunk_digits, framing_bytes;
    int64_t body_left, chunk_left, deadline;
    /* A watcher: its store, the cursor it has read to, the event's id, its line so far. */
    int store;
    int64_t cursor, event_id;
    char *line;
    int line_length, line_capacity;
    /* A pooled connection: its request and what it has of the answer. */
    char *answer;
    int answer_length;
    int64_t push, sent, slot;
};

static int epoll_fd;
static struct connection *watcher_connections, *pooled; /* pooled[instance * POOL_MAX + slot] */
/* Each instance's pool: its idle connections in the order they fell idle (each once at most:
 * `in_idle_ring`; one closed since is passed over when its turn comes), and how many are open. */
static struct pool { int idle[POOL_MAX], idle_head, idle_count, live, peak, next_slot; } pools[MAX_INSTANCES];
static char *pooled_out;
static char read_buffer[READ_BYTES + 1];
static int64_t *store_cursors;

/* What the run saw; the figures over the measured window only. */
static struct {
    int measuring;
    int64_t start;                 /* µs: changes pushed before do not count */
    struct histogram propagation, crossing, latency, lag;
    long long pushed, superseded, refused, push_failures, pool_waits, never_sent, expected, watch_failures, oversized_lines;
    long long cursor_failures;
    long streaming, opening;
    char first_watch_failure[160], first_push_failure[160];
} tally;

static void note(char *where, size_t size, const char *what, int status) {
    if (*where) return;
    if (status) snprintf(where, size, "%s (HTTP %d)", what, status);
    else snprintf(where, size, "%s", what);
}

static uint64_t key_of(struct connection *c) {
    long index = c->role == WATCHER ? c - watcher_connections : watchers + (c - pooled);
    return (uint64_t)index << 32 | c->generation;
}

static void watch_for(struct connection *c, int out) {
    if (c->wants_out == out) return;
    struct epoll_event e = { .events = EPOLLIN | EPOLLRDHUP | (out ? EPOLLOUT : 0), .data.u64 = key_of(c) };
    if (epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c->fd, &e) == 0) c->wants_out = out;
}

static void release(struct connection *c) {
    if (c->fd >= 0) {
        close(c->fd); /* closing takes it out of the epoll set */
        if (c->role == POOLED) pools[c->instance].live--;
    }
    c->fd = -1;
    c->generation++;
    c->state = CLOSED;
    free(c->head);
    c->head = NULL;
    if (c->role == WATCHER) {
        free(c->out);
        c->out = NULL;
        free(c->line);
        c->line = NULL;
        c->line_length = c->line_capacity = 0;
        c->skipping_line = 0;
        c->has_event_id = 0;
        if (c->opening) tally.opening--;
        if (c->streaming) tally.streaming--;
        c->opening = c->streaming = 0;
    }
}

static int open_connection(struct connection *c, int instance) {
    const struct instance *in = &instances[instance];
    int fd = socket(in->address.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (const struct sockaddr *)&in->address, in->length) != 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    c->fd = fd;
    c->instance = (uint8_t)instance;
    c->status = 0;
    c->state = CONNECTING;
    c->wants_out = 1;
    c->deadline = now_us() + CONNECT_US;
    if (c->role == POOLED && ++pools[instance].live > pools[instance].peak) pools[instance].peak = pools[instance].live;
    struct epoll_event e = { .events = EPOLLIN | EPOLLOUT | EPOLLRDHUP, .data.u64 = key_of(c) };
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &e) != 0) {
        release(c);
        return -1;
    }
    return 0;
}

/* Begins reading a response: its head, then its body. */
static void await_answer(struct connection *c, int64_t deadline) {
    c->state = READING_HEAD;
    c->head_length = 0;
    c->status = 0;
    c->deadline = deadline;
    c->answer_length = 0;
}

/* Writes what is left of the request; -1 when the connection failed. */
static int flush(struct connection *c) {
    while (c->out_sent < c->out_length) {
        ssize_t n = write(c->fd, c->out + c->out_sent, c->out_length - c->out_sent);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EAGAIN) { watch_for(c, 1); return 0; }
        if (n <= 0) return -1;
        c->out_sent += (int)n;
    }
    watch_for(c, 0);
    if (c->role == WATCHER) {
        free(c->out);
        c->out = NULL;
    }
    await_answer(c, now_us() + ANSWER_US);
    return 0;
}

/* ---- Watchers ---- */

/* Watchers waiting to (re)open their stream, each not before its time: a FIFO, as every wait
 * is the same (RETRY_US after a failure, none at first), so it is also in order of time. */
static struct { int watcher; int64_t not_before; } *openings;
static long opening_head, opening_count;

static void queue_opening(long w, int64_t not_before) {
    if (opening_count == watchers) return; /* each watcher is queued once at most */
    openings[(opening_head + opening_count) % watchers].watcher = (int)w;
    openings[(opening_head + opening_count) % watchers].not_before = not_before;
    opening_count++;
}

static int watching_until_end = 1; /* cleared when the run ends: no more reopening */

static void watcher_failed(struct connection *c, const char *what) {
    tally.watch_failures++;
    note(tally.first_watch_failure, sizeof tally.first_watch_failure, what, c->status);
    release(c);
    if (watching_until_end) queue_opening(c - watcher_connections, now_us() + RETRY_US);
}

static void open_watcher(long w) {
    struct connection *c = &watcher_connections[w];
    if (open_connection(c, c->instance) != 0) {
        tally.watch_failures++;
        note(tally.first_watch_failure, sizeof tally.first_watch_failure, strerror(errno), 0);
        queue_opening(w, now_us() + RETRY_US);
        return;
    }
    c->opening = 1;
    tally.opening++;
    char request[REQUEST_MAX];
    int n = snprintf(request, sizeof request,
                     "GET /v1/%s/s%d/events?after=%lld HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
                     "Accept: text/event-stream\r\n\r\n",
                     account, c->store, (long long)c->cursor, instances[c->instance].authority, token);
    c->out = malloc(n);
    if (!c->out) { watcher_failed(c, "out of memory"); return; }
    memcpy(c->out, request, n);
    c->out_length = n;
    c->out_sent = 0;
}

static int base64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* A change's value as the JSON string holds it (base64, '/' maybe escaped as "\/"), decoded
 * into `out`, at most `size` - 1 bytes; the JSON string's end is the first '"'. */
static size_t decode_value(const char *p, const char *end, char *out, size_t size) {
    size_t n = 0;
    uint32_t bits = 0;
    int have = 0;
    for (; p < end && *p != '"' && n + 1 < size; p++) {
        int v = base64_value((unsigned char)*p);
        if (v < 0) continue; /* '\\' of an escape, '=' of the padding */
        bits = bits << 6 | (uint32_t)v;
        have += 6;
        if (have >= 8) { have -= 8; out[n++] = (char)(bits >> have); }
    }
    out[n] = 0;
    return n;
}

/* One batch (an event's data line): each change's value, "<string>SENT INSTANCE</string>",
 * is a delivery to this watcher now. Values not of that form (another writer's) are passed over. */
static void take_batch(struct connection *c, const char *p, const char *end) {
    static const char marker[] = "\"value\":\"";
    int64_t now = now_us();
    int changes = 0;
    /* A batch holds at most 4096 changes; the bound keeps a malformed line from costing more. */
    while (p < end && changes < 8192) {
        const char *at = memmem(p, end - p, marker, sizeof marker - 1);
        if (!at) break;
        at += sizeof marker - 1;
        changes++;
        char value[512];
        decode_value(at, end, value, sizeof value);
        const char *open = strstr(value, "<string>");
        char *after_sent = NULL, *after_instance = NULL;
        long long sent = open ? strtoll(open + 8, &after_sent, 10) : -1;
        long pushed_to = after_sent && *after_sent == ' ' ? strtol(after_sent + 1, &after_instance, 10) : -1;
        if (after_instance && after_instance > after_sent + 1 && !strncmp(after_instance, "</string>", 9)
            && sent >= 0 && sent <= now && pushed_to >= 0 && pushed_to < instance_count
            && tally.measuring && sent >= tally.start) {
            record(&tally.propagation, now - sent);
            if (pushed_to != c->instance) record(&tally.crossing, now - sent);
        }
        const char *close = memchr(at, '"', end - at);
        p = close ? close + 1 : end;
    }
}

/* One line of the event stream: `id: CURSOR`, `data: BATCH`, a comment, or the blank line
 * that ends an event. The cursor moves on once the event's batch is read. */
static void take_line(struct connection *c, const char *p, size_t n) {
    if (n && p[n - 1] == '\r') n--;
    if (n == 0) { c->has_event_id = 0; return; }
    if (n > 3 && !memcmp(p, "id:", 3)) {
        char digits[24];
        size_t length = n - 3 < sizeof digits - 1 ? n - 3 : sizeof digits - 1;
        memcpy(digits, p + 3, length);
        digits[length] = 0;
        char *end;
        errno = 0;
        long long id = strtoll(digits, &end, 10);
        c->has_event_id = !errno && end != digits && id >= 0;
        c->event_id = id;
    } else if (n >= 5 && !memcmp(p, "data:", 5)) {
        take_batch(c, p + 5, p + n);
        if (c->has_event_id && c->event_id >= c->cursor) c->cursor = c->event_id;
    }
}

/* The stream's bytes: whole lines are read where they lie; a line cut by the end of a read is
 * kept (up to LINE_MAX_BYTES; a longer one is skipped, and counted) until its end comes. */
static void take_stream(struct connection *c, char *p, size_t n) {
    while (n > 0) {
        char *newline = memchr(p, '\n', n);
        size_t length = newline ? (size_t)(newline - p) : n;
        if (c->skipping_line) {
            if (newline) c->skipping_line = 0;
        } else if (c->line_length == 0 && newline) {
            take_line(c, p, length);
        } else if (c->line_length + length > LINE_MAX_BYTES) {
            tally.oversized_lines++;
            c->line_length = 0;
            c->skipping_line = !newline;
        } else {
            if (c->line_length + (int)length > c->line_capacity) {
                int capacity = c->line_capacity ? c->line_capacity : 1024;
                while (capacity < c->line_length + (int)length) capacity *= 2;
                char *grown = realloc(c->line, capacity);
                if (!grown) { c->line_length = 0; c->skipping_line = !newline; goto next; }
                c->line = grown;
                c->line_capacity = capacity;
            }
            memcpy(c->line + c->line_length, p, length);
            c->line_length += (int)length;
            if (newline) {
                take_line(c, c->line, c->line_length);
                c->line_length = 0;
                if (c->line_capacity > 65536) { free(c->line); c->line = NULL; c->line_capacity = 0; }
            }
        }
    next:
        if (!newline) return;
        p = newline + 1;
        n -= length + 1;
    }
}

/* ---- Pushes and cursors, over the pool ---- */

static long long total_pushes;
static long long next_push[MAX_INSTANCES]; /* the next push each instance sends: n = instance (mod instances) */
static long long waited[MAX_INSTANCES];    /* the last push found waiting for a connection */
static long long in_flight, cursors_in_flight; /* requests sent and not yet answered */
static int64_t push_start;
static uint64_t random_state = 0x9E3779B97F4A7C15ull; /* fixed: runs push to the same stores */

static uint64_t next_random(void) {
    random_state ^= random_state >> 12;
    random_state ^= random_state << 25;
    random_state ^= random_state >> 27;
    return random_state * 2685821657736338717ull;
}

static int64_t slot_of(long long n) { return push_start + (int64_t)((double)n / rate * SECOND); }

static long watchers_of(int store) { return watchers / stores + (store < watchers % stores ? 1 : 0); }

static void base64_encode(const unsigned char *in, size_t n, char *out) {
    static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) | (i + 2 < n ? in[i + 2] : 0);
        out[o++] = alphabet[v >> 18 & 63];
        out[o++] = alphabet[v >> 12 & 63];
        out[o++] = i + 1 < n ? alphabet[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? alphabet[v & 63] : '=';
    }
    out[o] = 0;
}


/* Writes the connection's request: a push, stamped with when it was handed to the connection
 * (a new connection's connect counts in its latency and propagation, as a client's would), or
 * a cursor's GET. */
static int send_request(struct connection *c) {
    char *out = pooled_out + (size_t)(c - pooled) * REQUEST_MAX;
    int n;
    if (c->request == PUSH_REQUEST) {
        char value[256], encoded[360], body[768];
        int length = snprintf(value, sizeof value,
                              "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<plist version=\"1.0\">\n<string>%lld %d</string>\n</plist>\n",
                              (long long)c->sent, c->instance);
        base64_encode((const unsigned char *)value, length, encoded);
        struct timespec wall;
        clock_gettime(CLOCK_REALTIME, &wall);
        int body_length = snprintf(body, sizeof body,
                                   "{\"changes\":[{\"key\":\"k%lld\",\"value\":\"%s\",\"type\":\"string\",\"stamp\":{\"time\":%lld,"
                                   "\"counter\":%lld,\"device\":\"load-writer\"}}]}",
                                   (long long)(c->push % KEYS), encoded, (long long)wall.tv_sec * 1000 + wall.tv_nsec / 1000000,
                                   (long long)(c->push & 0x7fffffff));
        n = snprintf(out, REQUEST_MAX,
                     "POST /v1/%s/s%d/changes HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
                     "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
                     account, c->store, instances[c->instance].authority, token, body_length, body);
    } else {
        n = snprintf(out, REQUEST_MAX, "GET /v1/%s/s%d/cursor?after=0&wait=0 HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n",
                     account, c->store, instances[c->instance].authority, token);
    }
    c->out = out;
    c->out_length = n < REQUEST_MAX ? n : REQUEST_MAX - 1;
    c->out_sent = 0;
    c->state = SENDING;
    return flush(c);
}

/* The request of `c` ended: answered (`ok`) or failed. */
static void request_done(struct connection *c, int ok) {
    int64_t now = now_us();
    if (c->request == PUSH_REQUEST) {
        in_flight--;
        if (tally.measuring) {
            record(&tally.lag, c->sent - c->slot);
            c->answer[c->answer_length] = 0;
            if (!ok || c->status != 200) {
                tally.push_failures++;
                note(tally.first_push_failure, sizeof tally.first_push_failure, ok ? "answered" : "no whole answer", c->status);
            } else if (!strstr(c->answer, "\"refused\":[]")) {
                tally.refused++;
                note(tally.first_push_failure, sizeof tally.first_push_failure, "a change refused", 0);
            } else if (!strstr(c->answer, "\"mark\":{")) {
                /* Accepted, but a later change of the key landed first, so nothing was stored
                 * and no watcher will see it (the answer has no history mark). */
                tally.pushed++;
                tally.superseded++;
                record(&tally.latency, now - c->sent);
            } else {
                tally.pushed++;
                tally.expected += watchers_of(c->store);
                record(&tally.latency, now - c->sent);
            }
        }
    } else if (c->request == CURSOR_REQUEST) {
        cursors_in_flight--;
        c->answer[c->answer_length] = 0;
        const char *at = strstr(c->answer, "\"cursor\":");
        long long cursor;
        if (ok && c->status == 200 && at && sscanf(at + 9, "%lld", &cursor) == 1 && cursor >= 0) store_cursors[c->store] = cursor;
        else tally.cursor_failures++;
    }
    c->request = NO_REQUEST;
}

static void pooled_failed(struct connection *c) {
    if (c->request != NO_REQUEST) request_done(c, 0);
    release(c);
}

/* A pooled connection with nothing to do: it takes its turn at the back of its instance's ring. */
static void fell_idle(struct connection *c) {
    struct pool *pool = &pools[c->instance];
    c->state = IDLE;
    c->deadline = 0;
    if (c->in_idle_ring) return;
    c->in_idle_ring = 1;
    pool->idle[(pool->idle_head + pool->idle_count) % POOL_MAX] = (int)(c - pooled) % POOL_MAX;
    pool->idle_count++;
}

/* Hands a request to the instance's connection idle longest (in turn, so that every one stays
 * in use: the server closes one that sends no request for its idle timeout, and a push sent as
 * it does would fail), or to a new one, which sends it once connected; 0 when the pool is busy
 * and full. */
static int dispatch(int instance, int request, int store, long long push, int64_t slot) {
    struct pool *pool = &pools[instance];
    struct connection *c = NULL;
    while (pool->idle_count > 0 && !c) {
        struct connection *next = &pooled[instance * POOL_MAX + pool->idle[pool->idle_head]];
        pool->idle_head = (pool->idle_head + 1) % POOL_MAX;
        pool->idle_count--;
        next->in_idle_ring = 0;
        if (next->state == IDLE && next->request == NO_REQUEST) c = next;
    }
    if (!c) {
        if (pool->live >= POOL_MAX) return 0;
        for (int k = 0; k < POOL_MAX && !c; k++) {
            struct connection *next = &pooled[instance * POOL_MAX + (pool->next_slot + k) % POOL_MAX];
            if (next->state == CLOSED) c = next;
        }
        if (!c || open_connection(c, instance) != 0) return 0;
        pool->next_slot = (int)(c - pooled) % POOL_MAX + 1;
    }
    c->request = (uint8_t)request;
    c->store = store;
    c->push = push;
    c->slot = slot;
    c->sent = now_us();
    if (request == PUSH_REQUEST) in_flight++;
    else cursors_in_flight++;
    if (c->state == IDLE && send_request(c) != 0) pooled_failed(c);
    return 1;
}

/* ---- Reading responses ---- */

static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Undoes chunked transfer coding in place: the chunks' data moved to the front of `p`. Returns
 * its length, or -1 for framing that is not HTTP's; CHUNK_DONE after the last chunk. */
static long dechunk(struct connection *c, char *p, size_t n) {
    size_t in = 0, out = 0;
    while (in < n && c->chunk != CHUNK_DONE) {
        char ch = p[in];
        switch (c->chunk) {
        case CHUNK_SIZE:
        case CHUNK_EXTENSION:
            in++;
            if (ch == '\n') {
                if (c->chunk_digits == 0) return -1;
                c->chunk = c->chunk_left ? CHUNK_DATA : CHUNK_TRAILER;
                c->chunk_digits = c->framing_bytes = 0;
            } else if (++c->framing_bytes > HEAD_MAX) {
                return -1;
            } else if (c->chunk == CHUNK_SIZE && hex(ch) >= 0) {
                if (++c->chunk_digits > 15) return -1;
                c->chunk_left = c->chunk_left * 16 + hex(ch);
            } else if (ch != '\r') {
                if (c->chunk_digits == 0) return -1;
                c->chunk = CHUNK_EXTENSION;
            }
            break;
        case CHUNK_DATA: {
            size_t take = n - in < (uint64_t)c->chunk_left ? n - in : (size_t)c->chunk_left;
            memmove(p + out, p + in, take);
            out += take;
            in += take;
            c->chunk_left -= take;
            if (c->chunk_left == 0) c->chunk = CHUNK_DATA_END;
            break;
        }
        case CHUNK_DATA_END:
            in++;
            if (ch == '\n') c->chunk = CHUNK_SIZE;
            else if (ch != '\r') return -1;
            break;
        case CHUNK_TRAILER:
            in++;
            if (ch == '\n') {
                if (c->framing_bytes == 0) c->chunk = CHUNK_DONE;
                c->framing_bytes = 0;
            } else if (ch != '\r' && ++c->framing_bytes > HEAD_MAX) {
                return -1;
            }
            break;
        }
    }
    return (long)out;
}

/* The status and framing of a response head (NUL-terminated); -1 when it is not HTTP/1.x. */
static int read_head(struct connection *c) {
    char *line = c->head;
    if (strncmp(line, "HTTP/1.", 7) != 0 || line[8] != ' ') return -1;
    int status = 0;
    for (int i = 9; i < 12; i++) {
        if (line[i] < '0' || line[i] > '9') return -1;
        status = status * 10 + line[i] - '0';
    }
    c->status = status;
    c->close_after = line[7] == '0';
    int chunked = 0;
    long long length = -1;
    for (char *next = strstr(line, "\r\n"); next && next[2] != '\r'; next = strstr(next + 2, "\r\n")) {
        char *name = next + 2, *colon = strchr(name, ':'), *end = strstr(name, "\r\n");
        if (!colon || !end || colon > end) continue;
        char *value = colon + 1;
        char saved = *end;
        *end = 0;
        if (!strncasecmp(name, "content-length:", 15)) {
            char *after;
            errno = 0;
            length = strtoll(value, &after, 10);
            if (errno || after == value || length < 0 || length > ((long long)1 << 40)) { *end = saved; return -1; }
        } else if (!strncasecmp(name, "transfer-encoding:", 18)) {
            chunked = strcasestr(value, "chunked") != NULL;
        } else if (!strncasecmp(name, "connection:", 11)) {
            if (strcasestr(value, "close")) c->close_after = 1;
        }
        *end = saved;
    }
    c->chunk = CHUNK_SIZE;
    c->chunk_left = 0;
    c->chunk_digits = c->framing_bytes = 0;
    if (chunked) c->body = BODY_CHUNKED;
    else if (length > 0) { c->body = BODY_LENGTH; c->body_left = length; }
    else if (length == 0 || status == 204 || status == 304) c->body = BODY_NONE;
    else { c->body = BODY_UNTIL_CLOSE; c->close_after = 1; }
    return 0;
}

/* The whole response of a pooled connection arrived. */
static void answered(struct connection *c) {
    request_done(c, 1);
    if (c->close_after) release(c);
    else fell_idle(c);
}

/* Body bytes, their framing undone: a watcher's stream, or kept of a pooled answer. */
static void take_content(struct connection *c, char *p, size_t n) {
    if (c->role == WATCHER) {
        take_stream(c, p, n);
        return;
    }
    size_t room = ANSWER_MAX - c->answer_length;
    if (n > room) n = room;
    memcpy(c->answer + c->answer_length, p, n);
    c->answer_length += (int)n;
}

/* Body bytes as they came; returns 0 while the connection lives on. */
static int take_body(struct connection *c, char *p, size_t n) {
    /* The server writes a keep-alive every 10 s on a stream: one silent much longer is dead. */
    if (c->role == WATCHER) c->deadline = now_us() + STREAM_SILENCE_US;
    switch (c->body) {
    case BODY_CHUNKED: {
        long content = dechunk(c, p, n);
        if (content < 0) {
            if (c->role == WATCHER) watcher_failed(c, "malformed chunks");
            else pooled_failed(c);
            return -1;
        }
        take_content(c, p, content);
        if (c->chunk != CHUNK_DONE) return 0;
        break;
    }
    case BODY_LENGTH: {
        size_t take = (uint64_t)c->body_left < n ? (size_t)c->body_left : n;
        take_content(c, p, take);
        c->body_left -= take;
        if (c->body_left > 0) return 0;
        break;
    }
    case BODY_UNTIL_CLOSE:
        take_content(c, p, n);
        return 0;
    case BODY_NONE:
        break;
    }
    /* The body ended: a watcher's stream should not. */
    if (c->role == WATCHER) { watcher_failed(c, "the stream ended"); return -1; }
    answered(c);
    return c->state == CLOSED ? -1 : 0;
}

static int take_bytes(struct connection *c, char *p, size_t n) {
    if (c->state == READING_BODY) return take_body(c, p, n);
    if (c->state != READING_HEAD) {
        /* Bytes nobody asked for (an idle connection, or a request still being written). */
        if (c->role == WATCHER) watcher_failed(c, "bytes before the request was sent");
        else pooled_failed(c);
        return -1;
    }
    if (!c->head && !(c->head = malloc(HEAD_MAX + 1))) {
        if (c->role == WATCHER) watcher_failed(c, "out of memory");
        else pooled_failed(c);
        return -1;
    }
    int before = c->head_length;
    size_t copy = n < (size_t)(HEAD_MAX - before) ? n : (size_t)(HEAD_MAX - before);
    memcpy(c->head + before, p, copy);
    c->head_length += (int)copy;
    c->head[c->head_length] = 0;
    char *end = memmem(c->head + (before > 3 ? before - 3 : 0), c->head_length - (before > 3 ? before - 3 : 0), "\r\n\r\n", 4);
    if (!end) {
        if (c->head_length < HEAD_MAX) return 0;
        if (c->role == WATCHER) watcher_failed(c, "too long a response head");
        else pooled_failed(c);
        return -1;
    }
    size_t used = (size_t)(end + 4 - c->head) - before;
    end[2] = 0;
    if (read_head(c) != 0) {
        if (c->role == WATCHER) watcher_failed(c, "not an HTTP response");
        else pooled_failed(c);
        return -1;
    }
    free(c->head);
    c->head = NULL;
    c->state = READING_BODY;
    if (c->role == WATCHER) {
        if (c->status != 200) { watcher_failed(c, "the stream was refused"); return -1; }
        c->opening = 0;
        tally.opening--;
        c->streaming = 1;
        tally.streaming++;
    }
    return take_body(c, p + used, n - used);
}

static void readable(struct connection *c) {
    for (int round = 0; round < 4 && c->fd >= 0; round++) {
        ssize_t n = read(c->fd, read_buffer, READ_BYTES);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
        if (n <= 0) {
            if (n == 0 && c->state == READING_BODY && c->body == BODY_UNTIL_CLOSE && c->role == POOLED) {
                c->close_after = 1;
                answered(c);
            } else if (c->role == WATCHER) {
                watcher_failed(c, n == 0 ? "the server closed the stream" : strerror(errno));
            } else if (c->state == IDLE) {
                release(c); /* the server closed a keep-alive connection: no request lost */
            } else {
                pooled_failed(c);
            }
            return;
        }
        if (take_bytes(c, read_buffer, (size_t)n) != 0 || n < READ_BYTES) return;
    }
}

static void writable(struct connection *c) {
    if (c->state == CONNECTING) {
        int error = 0;
        socklen_t length = sizeof error;
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error) {
            if (c->role == WATCHER) watcher_failed(c, error ? strerror(error) : "connect failed");
            else pooled_failed(c);
            return;
        }
        if (c->role == POOLED) {
            c->deadline = 0;
            if (c->request == NO_REQUEST) { fell_idle(c); watch_for(c, 0); return; }
            if (send_request(c) != 0) pooled_failed(c);
            return;
        }
        c->state = SENDING;
    }
    if (c->state == SENDING && flush(c) != 0) {
        if (c->role == WATCHER) watcher_failed(c, "the request could not be written");
        else pooled_failed(c);
    }
}

/* Connections past their deadline (a connect, or an answer) fail. */
static void check_deadlines(int64_t now) {
    for (long w = 0; w < watchers; w++) {
        struct connection *c = &watcher_connections[w];
        if (c->state != CLOSED && c->deadline && now > c->deadline) watcher_failed(c, "timed out");
    }
    for (int i = 0; i < instance_count * POOL_MAX; i++) {
        struct connection *c = &pooled[i];
        if (c->state != CLOSED && c->deadline && now > c->deadline) pooled_failed(c);
    }
}

/* ---- Processes' CPU and memory ---- */

struct usage { int known; double cpu; long rss_kb, peak_kb; };

static size_t read_text(const char *path, char *text, size_t size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    size_t n = 0;
    for (int rounds = 0; rounds < 64 && n + 1 < size; rounds++) {
        ssize_t got = read(fd, text + n, size - 1 - n);
        if (got <= 0) break;
        n += (size_t)got;
    }
    close(fd);
    text[n] = 0;
    return n;
}

static long status_kb(const char *status, const char *name) {
    const char *at = strstr(status, name);
    return at ? strtol(at + strlen(name), NULL, 10) : 0;
}

/* CPU seconds (user + system) from /proc/PID/stat, resident memory from /proc/PID/status. */
static struct usage process_usage(int pid) {
    struct usage u = { 0 };
    char path[64], text[4096];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    if (!read_text(path, text, sizeof text)) return u;
    /* The command name, in parentheses, may hold spaces and ')': the fields follow the last. */
    char *fields = strrchr(text, ')');
    if (!fields) return u;
    char *save, *field = strtok_r(fields + 1, " ", &save);
    unsigned long long utime = 0, stime = 0;
    for (int i = 0; field && i <= 12; i++, field = strtok_r(NULL, " ", &save)) {
        if (i == 11) utime = strtoull(field, NULL, 10);
        if (i == 12) { stime = strtoull(field, NULL, 10); u.known = 1; }
    }
    if (!u.known) return u;
    long ticks = sysconf(_SC_CLK_TCK);
    u.cpu = (double)(utime + stime) / (ticks > 0 ? ticks : 100);
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    if (read_text(path, text, sizeof text)) {
        u.rss_kb = status_kb(text, "\nVmRSS:");
        u.peak_kb = status_kb(text, "\nVmHWM:");
    }
    return u;
}

/* Seconds this process has waited, runnable, for a CPU that others held (/proc/self/schedstat's
 * run delay): when pushes begin late, this tells a busy machine from a slow generator. */
static double own_run_delay(void) {
    char text[256];
    if (!read_text("/proc/self/schedstat", text, sizeof text)) return 0;
    unsigned long long running, waiting;
    return sscanf(text, "%llu %llu", &running, &waiting) == 2 ? waiting / 1e9 : 0;
}

static double own_cpu(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

/* ---- The run ---- */

enum phase { CURSORS, CONNECTING_WATCHERS, SETTLING, PUSHING, TAILING, DONE };

static void wait_for_events(int64_t until) {
    static struct epoll_event events[EVENTS_MAX];
    int64_t now = now_us(), wait = until - now;
    if (wait < 0) wait = 0;
    if (wait > TICK_US) wait = TICK_US;
    struct timespec timeout = { .tv_sec = wait / SECOND, .tv_nsec = (wait % SECOND) * 1000 };
    int n = epoll_pwait2(epoll_fd, events, EVENTS_MAX, &timeout, NULL);
    if (n < 0 && errno == ENOSYS) n = epoll_wait(epoll_fd, events, EVENTS_MAX, (int)((wait + 999) / 1000));
    for (int i = 0; i < n; i++) {
        long index = (long)(events[i].data.u64 >> 32);
        uint32_t generation = (uint32_t)events[i].data.u64;
        struct connection *c = index < watchers ? &watcher_connections[index] : &pooled[index - watchers];
        if (c->generation != generation || c->fd < 0) continue; /* for a socket closed since */
        if (events[i].events & (EPOLLOUT | EPOLLERR)) writable(c);
        if (c->generation == generation && c->fd >= 0 && events[i].events & (EPOLLIN | EPOLLHUP | EPOLLRDHUP | EPOLLERR)) readable(c);
    }
}

static void print_ms(const char *label, const struct histogram *h) {
    if (h->count == 0) { printf("%snone", label); return; }
    printf("%sp50 %.1f ms, p99 %.1f ms, max %.1f ms", label, percentile_ms(h, 0.5), percentile_ms(h, 0.99), percentile_ms(h, 1));
}

int main(int argc, char **argv) {
    clock_gettime(CLOCK_MONOTONIC, &origin);
    parse_options(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct rlimit files;
    if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
        rlim_t needed = (rlim_t)watchers + (rlim_t)instance_count * POOL_START + 64;
        if (files.rlim_cur != RLIM_INFINITY && files.rlim_cur < needed) {
            fprintf(stderr, "loadgen: %ld watchers need %llu open files; the limit is %llu\n", watchers,
                    (unsigned long long)needed, (unsigned long long)files.rlim_cur);
            return 2;
        }
    }
    epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    watcher_connections = calloc(watchers ? watchers : 1, sizeof *watcher_connections);
    pooled = calloc(instance_count * POOL_MAX, sizeof *pooled);
    openings = calloc(watchers ? watchers : 1, sizeof *openings);
    store_cursors = calloc(stores, sizeof *store_cursors);
    char *answers = malloc((size_t)instance_count * POOL_MAX * (ANSWER_MAX + 1));
    pooled_out = malloc((size_t)instance_count * POOL_MAX * REQUEST_MAX);
    if (epoll_fd < 0 || !watcher_connections || !pooled || !openings || !store_cursors || !answers || !pooled_out) {
        perror("loadgen");
        return 1;
    }
    for (int i = 0; i < instance_count * POOL_MAX; i++) {
        pooled[i] = (struct connection){ .fd = -1, .role = POOLED, .instance = (uint8_t)(i / POOL_MAX) };
        pooled[i].answer = answers + (size_t)i * (ANSWER_MAX + 1);
    }
    for (long w = 0; w < watchers; w++) {
        /* Watcher w watches store w % stores through instance (w / stores) % instances: every
         * store has watchers on every instance. */
        watcher_connections[w] = (struct connection){ .fd = -1, .role = WATCHER, .store = (int)(w % stores),
                                                       .instance = (uint8_t)((w / stores) % instance_count) };
    }
    total_pushes = (long long)(rate * seconds);
    for (int i = 0; i < instance_count; i++) {
        next_push[i] = i;
        waited[i] = -1;
    }

    /* Each instance's memory before any watcher connects: what watchers add is measured from here. */
    struct usage idle[MAX_SERVERS], connected[MAX_SERVERS], end[MAX_SERVERS];
    for (int s = 0; s < server_count; s++) idle[s] = process_usage(server_pids[s]);

    enum phase phase = CURSORS;
    int64_t started = now_us(), phase_end = started + 30 * SECOND, next_tick = started + TICK_US;
    int64_t connect_began = 0, connect_took = 0, push_end = 0, window_start = 0, window_end = 0;
    long long cursors_asked = 0;
    long streaming_at_start = 0;
    double cpu_at_start = 0, cpu_in_window = 0, delay_at_start = 0, delay_in_window = 0;
    /* The run's hard bound, whatever happens: every phase has its own deadline within it. */
    int64_t hard_end = started + (int64_t)((30 + 125 + 1 + seconds + 5 + 35 + 1 + 10) * SECOND);

    while (phase != DONE) {
        int64_t now = now_us(), wake = next_tick;
        if (now >= hard_end) { fprintf(stderr, "loadgen: the run went past its bound; stopping\n"); break; }
        if (now >= next_tick) { check_deadlines(now); next_tick = now + TICK_US; }
        switch (phase) {
        case CURSORS: {
            /* Each store's newest cursor, so that watchers start from it as a mount does; over
             * POOL_START connections, so that the pool does not start larger than pushes need. */
            while (cursors_asked < stores && cursors_in_flight < POOL_START && dispatch(0, CURSOR_REQUEST, (int)cursors_asked, 0, 0))
                cursors_asked++;
            if ((cursors_asked == stores && cursors_in_flight == 0) || now >= phase_end) {
                tally.cursor_failures += stores - cursors_asked;
                for (long w = 0; w < watchers; w++) {
                    watcher_connections[w].cursor = store_cursors[watcher_connections[w].store];
                    queue_opening(w, 0);
                }
                phase = CONNECTING_WATCHERS;
                connect_began = now;
                /* Ten thousand watchers take seconds to connect: the wait grows with them. */
                phase_end = now + 5 * SECOND + (int64_t)watchers * SECOND / 1000;
                if (phase_end > now + 120 * SECOND) phase_end = now + 120 * SECOND;
                for (int i = 0; i < instance_count; i++)
                    for (int k = 0; k < POOL_START; k++)
                        if (pooled[i * POOL_MAX + k].state == CLOSED) open_connection(&pooled[i * POOL_MAX + k], i);
            }
            break;
        }
        case CONNECTING_WATCHERS:
            if (tally.streaming == watchers || now >= phase_end) {
                connect_took = now - connect_began;
                phase = SETTLING;
                phase_end = now + SECOND;
            }
            break;
        case SETTLING:
            if (now >= phase_end) {
                for (int s = 0; s < server_count; s++) connected[s] = process_usage(server_pids[s]);
                streaming_at_start = tally.streaming;
                cpu_at_start = own_cpu();
                delay_at_start = own_run_delay();
                phase = PUSHING;
                push_start = window_start = now;
                push_end = now + (int64_t)(seconds * SECOND);
                tally.start = now;
                tally.measuring = 1;
            }
            break;
        case PUSHING: {
            int pending = 0;
            for (int i = 0; i < instance_count; i++) {
                int blocked = 0;
                /* Bounded per turn, so that reading never starves behind a backlog. */
                for (int k = 0; k < 256 && next_push[i] < total_pushes && slot_of(next_push[i]) <= now; k++) {
                    int store = (int)(next_random() % (uint64_t)stores);
                    if (!dispatch(i, PUSH_REQUEST, store, next_push[i], slot_of(next_push[i]))) {
                        /* Every connection the pool may hold is busy: the push waits, and its
                         * lateness is the server's slowness, not the generator's. */
                        if (waited[i] != next_push[i]) tally.pool_waits++;
                        waited[i] = next_push[i];
                        blocked = 1;
                        break;
                    }
                    next_push[i] += instance_count;
                }
                if (next_push[i] < total_pushes) {
                    pending = 1;
                    /* A blocked instance goes on when an answer frees a connection. */
                    int64_t slot = slot_of(next_push[i]);
                    if (!blocked && slot < wake) wake = slot;
                }
            }
            /* Pushes the pool could not begin within 5 s of the schedule's end are never sent. */
            if (pending && now >= push_end + 5 * SECOND) {
                for (int i = 0; i < instance_count; i++) {
                    if (next_push[i] < total_pushes) tally.never_sent += (total_pushes - next_push[i] + instance_count - 1) / instance_count;
                    next_push[i] = total_pushes;
                }
                pending = 0;
            }
            /* Every push answered (each within ANSWER_US): let the last changes arrive. */
            if (!pending && in_flight == 0) {
                phase = TAILING;
                phase_end = now + SECOND;
            }
            break;
        }
        case TAILING:
            if (now >= phase_end) {
                tally.measuring = 0;
                window_end = now;
                cpu_in_window = own_cpu() - cpu_at_start;
                delay_in_window = own_run_delay() - delay_at_start;
                for (int s = 0; s < server_count; s++) end[s] = process_usage(server_pids[s]);
                phase = DONE;
            }
            break;
        case DONE:
            break;
        }
        if (phase == DONE) break;
        /* Watchers waiting to open, a window of them at a time. */
        while (opening_count > 0 && tally.opening < OPENING_MAX && openings[opening_head].not_before <= now) {
            long w = openings[opening_head].watcher;
            opening_head = (opening_head + 1) % (watchers ? watchers : 1);
            opening_count--;
            open_watcher(w);
        }
        if (opening_count > 0 && tally.opening < OPENING_MAX && openings[opening_head].not_before < wake)
            wake = openings[opening_head].not_before;
        if (phase_end < wake && phase != PUSHING) wake = phase_end;
        wait_for_events(wake);
    }
    watching_until_end = 0;

    double window = (window_end - window_start) / 1e6;
    double all_cpu = own_cpu();
    struct usage mine = process_usage(getpid());
    printf("load: %ld watchers (%ld connected in %.1f s, %ld streaming at the end) on %ld stores, %g changes/s for %g s, %d instance%s\n",
           watchers, streaming_at_start, connect_took / 1e6, tally.streaming, stores, rate, seconds, instance_count,
           instance_count > 1 ? "s" : "");
    printf("  pushed %lld changes of %lld (%lld failed, %lld refused, %lld never sent; %lld superseded by a later push landing first); "
           "push latency ", tally.pushed, total_pushes, tally.push_failures, tally.refused, tally.never_sent, tally.superseded);
    print_ms("", &tally.latency);
    printf("\n");
    if (tally.first_push_failure[0]) printf("    first push failure: %s\n", tally.first_push_failure);
    printf("  deliveries %llu of %lld expected (%lld watch failures", (unsigned long long)tally.propagation.count, tally.expected,
           tally.watch_failures);
    if (tally.oversized_lines) printf(", %lld events over %d bytes skipped", tally.oversized_lines, LINE_MAX_BYTES);
    if (tally.cursor_failures) printf(", %lld stores' cursors not read: watched from 0", tally.cursor_failures);
    printf(")\n");
    if (tally.first_watch_failure[0]) printf("    first watch failure: %s\n", tally.first_watch_failure);
    print_ms("  propagation push -> watcher: ", &tally.propagation);
    if (tally.propagation.count) printf(" (target p99 <= 250 ms: %.2f of it)", percentile_ms(&tally.propagation, 0.99) / 250);
    printf("\n");
    if (instance_count > 1) {
        printf("  across instances (%llu deliveries): ", (unsigned long long)tally.crossing.count);
        print_ms("", &tally.crossing);
        printf("\n");
    }
    for (int s = 0; s < server_count; s++) {
        if (!idle[s].known || !connected[s].known || !end[s].known) { printf("  server %d (pid %d): not readable in /proc\n", s + 1, server_pids[s]); continue; }
        /* Memory per watcher: what the instance's resident memory grew by over its idle
         * baseline, over the watchers it holds (once they connected, and at the end). */
        double held = (double)watchers / server_count;
        if (held < 1) held = 1;
        printf("  server %d: CPU %.0f%% of one core over %.1f s; RSS %.1f MB idle, %.1f MB with watchers (%.1f KB per watcher), "
               "%.1f MB at the end (%.1f KB per watcher), peak %.1f MB\n",
               s + 1, window > 0 ? (end[s].cpu - connected[s].cpu) / window * 100 : 0, window, idle[s].rss_kb / 1024.0,
               connected[s].rss_kb / 1024.0, (connected[s].rss_kb - idle[s].rss_kb) / held, end[s].rss_kb / 1024.0,
               (end[s].rss_kb - idle[s].rss_kb) / held, end[s].peak_kb / 1024.0);
    }
    /* How late pushes began is the generator's own delay: when it grows, the generator is the limit. */
    printf("  this generator: CPU %.2f s in all, %.2f s over the measured window (%.1f%% of one core; it waited %.2f s for a "
           "CPU others held), RSS %.1f MB; pushes began late by ",
           all_cpu, cpu_in_window, window > 0 ? cpu_in_window / window * 100 : 0, delay_in_window, mine.rss_kb / 1024.0);
    print_ms("", &tally.lag);
    int peak = 0;
    for (int i = 0; i < instance_count; i++) peak = pools[i].peak > peak ? pools[i].peak : peak;
    printf(" (%lld waited for a connection; at most %d open to an instance, of %d allowed)\n", tally.pool_waits, peak, POOL_MAX);

    for (long w = 0; w < watchers; w++) if (watcher_connections[w].fd >= 0) release(&watcher_connections[w]);
    for (int i = 0; i < instance_count * POOL_MAX; i++) if (pooled[i].fd >= 0) release(&pooled[i]);
    close(epoll_fd);
    return tally.propagation.count == 0 && tally.expected > 0 ? 1 : 0;
}
