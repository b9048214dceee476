/* lossyfs: a pass-through FUSE file system over a backing directory that keeps every write not
 * yet made durable in memory, and loses it at a power failure, as a disk under a page cache does.
 *
 *   Build: cc -O2 -Wall -o lossyfs lossyfs.c $(pkg-config --cflags --libs fuse3)
 *   Run:   lossyfs [--delay-ms N] [--seed N] BACKING MOUNTPOINT [FUSE-OPTION...]   (foreground)
 *          kill -USR1 PID        power failure: every write not made durable is lost, and the
 *                                process ends at once (the mount then answers ENOTCONN until
 *                                it is unmounted: `fusermount3 -u MOUNTPOINT` or `umount -l`)
 *          kill -USR2 PID        torn power failure: a random half of the pages not made durable
 *                                (and of the pending truncations) reach the disk, the rest is lost
 *          fusermount3 -u MOUNTPOINT    a clean shutdown: every write reaches the disk
 *
 * The model, which is that of a journaled file system in ordered mode with no luck at all:
 *   - A file's data and size are its page cache: write and truncate (also by O_TRUNC) change
 *     an overlay of 4 KiB pages and a size in memory, which every reader sees at once; only
 *     fsync or fdatasync of that file (or a write through a handle opened O_SYNC or O_DSYNC)
 *     writes its overlay to the backing file. A power failure loses every overlay.
 *   - Names and attributes (create, mknod, mkdir, unlink, rmdir, rename, link, symlink, chmod,
 *     chown, utimens) reach the backing directory at once and are never lost; fsync of a
 *     directory is a no-op. So a rename of a file whose data was never made durable leaves,
 *     after a power failure, the new name on the old (or empty) contents, as ext4 without
 *     auto_da_alloc and XFS do; a program relying on a directory's fsync for a name to last is
 *     not caught.
 *   - sync(2) and syncfs(2) reach no FUSE file system, so they make nothing durable here.
 *   - The backing directory is the disk: nothing here calls fsync on it, so a real crash of
 *     the machine is not modelled, only the one this process simulates.
 * --delay-ms N sleeps N ms before every operation: a slow disk, for crash tests that need time
 * to land a kill in the middle of something. Locks (flock, fcntl) are left to the kernel, which
 * keeps them for the processes of this machine.
 */
#define FUSE_USE_VERSION 31
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096

struct page {
    off_t index;
    char *bytes;   /* PAGE bytes: the page as readers see it, zeros past the file's size */
};

/* A regular file of the backing directory while it is open or holds writes not made durable.
 * Invariant: when `dirty` is false, `pages` is empty and the backing file is the truth. */
struct node {
    struct node *next;
    dev_t dev;
    ino_t ino;
    int fd;          /* the backing file, read-write */
    int opens;       /* handles open on it */
    bool unlinked;   /* its last name is gone: forgotten at its last release */
    bool dirty;
    off_t size;      /* when dirty: the size readers see */
    off_t floor;     /* when dirty: backing bytes at and past this offset were truncated away */
    struct page *pages;   /* sorted by index */
    size_t count, capacity;
};

/* An open file (`node`) or directory (`directory`): the kernel may pass either to chmod,
 * chown, utimens and truncate. */
struct handle {
    struct node *node;
    DIR *directory;
    bool synchronous;   /* opened O_SYNC or O_DSYNC: every write is made durable before it returns */
};

static int root = -1;               /* the backing directory */
static unsigned delay_ms;
static uint64_t random_state = 0x9e3779b97f4a7c15ULL;
static struct node *nodes;
/* One lock for every operation: the power failure takes it and never gives it back, so nothing
 * reaches the disk after it. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static const char *relative(const char *path) { return path[1] ? path + 1 : "."; }

static struct handle *handle_of(struct fuse_file_info *fi) { return (struct handle *)(uintptr_t)fi->fh; }

/* The backing descriptor of an open file or directory. */
static int descriptor(struct fuse_file_info *fi) {
    struct handle *h = handle_of(fi);
    return h->node ? h->node->fd : dirfd(h->directory);
}

static uint64_t next_random(void) {
    random_state ^= random_state << 13;
    random_state ^= random_state >> 7;
    random_state ^= random_state << 17;
    return random_state;
}

static void enter(void) {
    if (delay_ms) usleep(delay_ms * 1000);
    pthread_mutex_lock(&lock);
}

static void leave(void) { pthread_mutex_unlock(&lock); }

static struct node *find_node(dev_t dev, ino_t ino) {
    for (struct node *n = nodes; n; n = n->next)
        if (n->dev == dev && n->ino == ino) return n;
    return NULL;
}

static void drop_pages(struct node *n) {
    for (size_t i = 0; i < n->count; i++) free(n->pages[i].bytes);
    free(n->pages);
    n->pages = NULL;
    n->count = n->capacity = 0;
    n->dirty = false;
}

/* Forgets a node nobody needs: no handle open, and nothing to write or no name to write it to. */
static void settle(struct node *n) {
    if (n->opens > 0 || (n->dirty && !n->unlinked)) return;
    for (struct node **at = &nodes; *at; at = &(*at)->next) {
        if (*at == n) { *at = n->next; break; }
    }
    drop_pages(n);
    close(n->fd);
    free(n);
}

/* The node of the open backing file `fd`, made if new; takes `fd` either way. */
static struct node *adopt(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) { int e = errno; close(fd); errno = e; return NULL; }
    struct node *n = find_node(st.st_dev, st.st_ino);
    if (n) { close(fd); return n; }
    n = calloc(1, sizeof *n);
    if (!n) { close(fd); errno = ENOMEM; return NULL; }
    n->dev = st.st_dev;
    n->ino = st.st_ino;
    n->fd = fd;
    n->next = nodes;
    nodes = n;
    return n;
}

static struct node *node_at(const char *path) {
    int fd = openat(root, relative(path), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    return fd < 0 ? NULL : adopt(fd);
}

/* The node of the file `path` names if that is its last name (which is about to go), or NULL. */
static struct node *losing_name(const char *path) {
    struct stat st;
    if (fstatat(root, relative(path), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) return NULL;
    return st.st_nlink <= 1 ? find_node(st.st_dev, st.st_ino) : NULL;
}

/* After a name went: a node that lost its last name is forgotten once no handle needs it. */
static void lost_name(struct node *n) {
    if (!n) return;
    n->unlinked = true;
    settle(n);
}

static off_t backing_size(struct node *n) {
    struct stat st;
    return fstat(n->fd, &st) == 0 ? st.st_size : 0;
}

static struct page *find_page(struct node *n, off_t index, size_t *slot) {
    size_t low = 0, high = n->count;
    while (low < high) {
        size_t middle = (low + high) / 2;
        if (n->pages[middle].index < index) low = middle + 1; else high = middle;
    }
    if (slot) *slot = low;
    return low < n->count && n->pages[low].index == index ? &n->pages[low] : NULL;
}

/* Reads what readers see: overlay pages, else the backing file below the floor, else zeros. */
static ssize_t read_at(struct node *n, char *buffer, size_t length, off_t offset) {
    off_t size = n->dirty ? n->size : backing_size(n);
    off_t valid = n->dirty ? n->floor : size;   /* backing bytes past this are not the file's */
    if (offset >= size) return 0;
    if ((off_t)length > size - offset) length = size - offset;
    size_t done = 0;
    while (done < length) {
        off_t at = offset + done, index = at / PAGE, within = at % PAGE;
        size_t chunk = PAGE - within;
        if (chunk > length - done) chunk = length - done;
        struct page *page = find_page(n, index, NULL);
        if (page) {
            memcpy(buffer + done, page->bytes + within, chunk);
        } else {
            size_t got = 0;
            if (at < valid) {
                size_t wanted = chunk;
                if ((off_t)wanted > valid - at) wanted = valid - at;
                ssize_t r = pread(n->fd, buffer + done, wanted, at);
                if (r < 0) return -errno;
                got = r;
            }
            memset(buffer + done + got, 0, chunk - got);
        }
        done += chunk;
    }
    return done;
}

static void make_dirty(struct node *n) {
    if (n->dirty) return;
    n->size = n->floor = backing_size(n);
    n->dirty = true;
}

static struct page *page_for_write(struct node *n, off_t index) {
    size_t slot;
    struct page *page = find_page(n, index, &slot);
    if (page) return page;
    char *bytes = malloc(PAGE);
    if (!bytes) return NULL;
    ssize_t r = read_at(n, bytes, PAGE, index * PAGE);
    if (r < 0) { free(bytes); return NULL; }
    memset(bytes + r, 0, PAGE - r);
    if (n->count == n->capacity) {
        size_t capacity = n->capacity ? n->capacity * 2 : 16;
        struct page *grown = realloc(n->pages, capacity * sizeof *grown);
        if (!grown) { free(bytes); return NULL; }
        n->pages = grown;
        n->capacity = capacity;
    }
    memmove(&n->pages[slot + 1], &n->pages[slot], (n->count - slot) * sizeof *n->pages);
    n->pages[slot] = (struct page){ .index = index, .bytes = bytes };
    n->count++;
    return &n->pages[slot];
}

static int write_at(struct node *n, const char *buffer, size_t length, off_t offset) {
    make_dirty(n);
    size_t done = 0;
    while (done < length) {
        off_t at = offset + done, within = at % PAGE;
        size_t chunk = PAGE - within;
        if (chunk > length - done) chunk = length - done;
        struct page *page = page_for_write(n, at / PAGE);
        if (!page) return -ENOMEM;
        memcpy(page->bytes + within, buffer + done, chunk);
        done += chunk;
        if (at + (off_t)chunk > n->size) n->size = at + chunk;
    }
    return 0;
}

static void truncate_to(struct node *n, off_t size) {
    make_dirty(n);
    size_t kept = 0;
    for (size_t i = 0; i < n->count; i++) {
        struct page *page = &n->pages[i];
        if (page->index * PAGE >= size) { free(page->bytes); continue; }
        if ((page->index + 1) * PAGE > size) memset(page->bytes + size % PAGE, 0, PAGE - size % PAGE);
        n->pages[kept++] = *page;
    }
    n->count = kept;
    if (size < n->floor) n->floor = size;
    n->size = size;
}

static int write_page(struct node *n, struct page *page) {
    off_t at = page->index * PAGE;
    if (at >= n->size) return 0;
    size_t length = n->size - at < PAGE ? (size_t)(n->size - at) : PAGE;
    return pwrite(n->fd, page->bytes, length, at) == (ssize_t)length ? 0 : -errno;
}

/* Makes the node's overlay durable: the backing file becomes what readers see. */
static int sync_node(struct node *n) {
    if (!n->dirty) return 0;
    if (n->floor < backing_size(n) && ftruncate(n->fd, n->floor) != 0) return -errno;
    for (size_t i = 0; i < n->count; i++) {
        int r = write_page(n, &n->pages[i]);
        if (r) return r;
    }
    if (ftruncate(n->fd, n->size) != 0) return -errno;
    drop_pages(n);
    return 0;
}

/* A torn power failure: any part of what was not made durable may have reached the disk. */
static void tear_node(struct node *n) {
    if (!n->dirty) return;
    if (next_random() & 1 && n->floor < backing_size(n)) (void)!ftruncate(n->fd, n->floor);
    for (size_t i = 0; i < n->count; i++)
        if (next_random() & 1) (void)write_page(n, &n->pages[i]);
}

/* Waits for SIGUSR1 or SIGUSR2 (blocked in every thread) and fails the power. */
static void *power_switch(void *unused) {
    (void)unused;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    int signal;
    while (sigwait(&set, &signal) != 0) {}
    pthread_mutex_lock(&lock);   /* never released: nothing more reaches the disk */
    size_t files = 0, pages = 0;
    for (struct node *n = nodes; n; n = n->next) {
        if (!n->dirty) continue;
        files++;
        pages += n->count;
        if (signal == SIGUSR2) tear_node(n);
    }
    fprintf(stderr, "lossyfs: power failure (%s): %zu pages of %zu files not made durable\n",
            signal == SIGUSR2 ? "torn" : "all lost", pages, files);
    _exit(0);
}

static int lossy_getattr(const char *path, struct stat *st, struct fuse_file_info *fi) {
    enter();
    int r = fi ? fstat(descriptor(fi), st)
               : fstatat(root, relative(path), st, AT_SYMLINK_NOFOLLOW);
    r = r == 0 ? 0 : -errno;
    if (r == 0 && S_ISREG(st->st_mode)) {
        struct node *n = find_node(st->st_dev, st->st_ino);
        if (n && n->dirty) {
            st->st_size = n->size;
            st->st_blocks = (n->size + 511) / 512;
        }
    }
    leave();
    return r;
}

static int lossy_access(const char *path, int mask) {
    enter();
    int r = faccessat(root, relative(path), mask, 0) == 0 ? 0 : -errno;
    leave();
    return r;
}

static int lossy_readlink(const char *path, char *buffer, size_t size) {
    enter();
    ssize_t n = readlinkat(root, relative(path), buffer, size - 1);
    int r = n < 0 ? -errno : 0;
    if (n >= 0) buffer[n] = 0;
    leave();
    return r;
}

static int lossy_mknod(const char *path, mode_t mode, dev_t device) {
    enter();
    int r;
    if (S_ISREG(mode)) {
        int fd = openat(root, relative(path), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, mode);
        r = fd < 0 ? -errno : 0;
        if (fd >= 0) close(fd);
    } else {
        r = mknodat(root, relative(path), mode, device) == 0 ? 0 : -errno;
    }
    leave();
    return r;
}

static int lossy_mkdir(const char *path, mode_t mode) {
    enter();
    int r = mkdirat(root, relative(path), mode) == 0 ? 0 : -errno;
    leave();
    return r;
}

static int lossy_unlink(const char *path) {
    enter();
    struct node *losing = losing_name(path);
    int r = unlinkat(root, relative(path), 0) == 0 ? 0 : -errno;
    if (r == 0) lost_name(losing);
    leave();
    return r;
}

static int lossy_rmdir(const char *path) {
    enter();
    int r = unlinkat(root, relative(path), AT_REMOVEDIR) == 0 ? 0 : -errno;
    leave();
    return r;
}

static int lossy_symlink(const char *target, const char *path) {
    enter();
    int r = symlinkat(target, root, relative(path)) == 0 ? 0 : -errno;
    leave();
    return r;
}

static int lossy_rename(const char *from, const char *to, unsigned int flags) {
    enter();
    struct node *losing = flags & RENAME_EXCHANGE ? NULL : losing_name(to);
    int r = renameat2(root, relative(from), root, relative(to), flags) == 0 ? 0 : -errno;
    if (r == 0) lost_name(losing);
    leave();
    return r;
}

static int lossy_link(const char *from, const char *to) {
    enter();
    int r = linkat(root, relative(from), root, relative(to), 0) == 0 ? 0 : -errno;
    leave();
    return r;
}

static int lossy_chmod(const char *path, mode_t mode, struct fuse_file_info *fi) {
    enter();
    int r = (fi ? fchmod(descriptor(fi), mode)
                : fchmodat(root, relative(path), mode, 0)) == 0 ? 0 : -errno;
    leave();
    return r;
}

static int lossy_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi) {
    enter();
    int r = (fi ? fchown(descriptor(fi), uid, gid)
                : fchownat(root, relative(path), uid, gid, AT_SYMLINK_NOFOLLOW)) == 0 ? 0 : -errno;
    leave();
    return r;
}

static int lossy_truncate(const char *path, off_t size, struct fuse_file_info *fi) {
    enter();
    struct node *n = fi ? handle_of(fi)->node : node_at(path);
    int r = n ? 0 : fi ? -EISDIR : -errno;
    if (n) {
        truncate_to(n, size);
        settle(n);
    }
    leave();
    return r;
}

static int lossy_utimens(const char *path, const struct timespec times[2], struct fuse_file_info *fi) {
    enter();
    int r = (fi ? futimens(descriptor(fi), times)
                : utimensat(root, relative(path), times, AT_SYMLINK_NOFOLLOW)) == 0 ? 0 : -errno;
    leave();
    return r;
}

/* A handle on the node of backing file `fd` (taken), truncated if the open asked for it. */
static int open_handle(int fd, struct fuse_file_info *fi) {
    if (fd < 0) return -errno;
    struct node *n = adopt(fd);
    if (!n) return -errno;
    struct handle *h = calloc(1, sizeof *h);
    if (!h) { settle(n); return -ENOMEM; }
    h->node = n;
    h->synchronous = (fi->flags & (O_SYNC | O_DSYNC)) != 0;
    n->opens++;
    if (fi->flags & O_TRUNC) truncate_to(n, 0);
    fi->fh = (uint64_t)(uintptr_t)h;
    return 0;
}

static int lossy_open(const char *path, struct fuse_file_info *fi) {
    enter();
    int r = open_handle(openat(root, relative(path), O_RDWR | O_NOFOLLOW | O_CLOEXEC), fi);
    leave();
    return r;
}

static int lossy_create(const char *path, mode_t mode, struct fuse_file_info *fi) {
    enter();
    int flags = O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | (fi->flags & O_EXCL);
    int r = open_handle(openat(root, relative(path), flags, mode), fi);
    leave();
    return r;
}

static int lossy_read(const char *path, char *buffer, size_t size, off_t offset, struct fuse_file_info *fi) {
    (void)path;
    enter();
    ssize_t r = read_at(handle_of(fi)->node, buffer, size, offset);
    leave();
    return r;
}

static int lossy_write(const char *path, const char *buffer, size_t size, off_t offset, struct fuse_file_info *fi) {
    (void)path;
    enter();
    struct handle *h = handle_of(fi);
    int r = write_at(h->node, buffer, size, offset);
    if (r == 0 && h->synchronous) r = sync_node(h->node);
    leave();
    return r == 0 ? (int)size : r;
}

static int lossy_statfs(const char *path, struct statvfs *st) {
    (void)path;
    enter();
    int r = fstatvfs(root, st) == 0 ? 0 : -errno;
    leave();
    return r;
}

static int lossy_release(const char *path, struct fuse_file_info *fi) {
    (void)path;
    enter();
    struct handle *h = handle_of(fi);
    h->node->opens--;
    settle(h->node);
    free(h);
    leave();
    return 0;
}

static int lossy_fsync(const char *path, int data_only, struct fuse_file_info *fi) {
    (void)path;
    (void)data_only;
    enter();
    int r = sync_node(handle_of(fi)->node);
    leave();
    return r;
}

static int lossy_fsyncdir(const char *path, int data_only, struct fuse_file_info *fi) {
    (void)path;
    (void)data_only;
    (void)fi;
    return 0;   /* names are durable at once (see the model above) */
}

static int lossy_opendir(const char *path, struct fuse_file_info *fi) {
    enter();
    int fd = openat(root, relative(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    struct handle *h = fd < 0 ? NULL : calloc(1, sizeof *h);
    DIR *directory = h ? fdopendir(fd) : NULL;
    int r = directory ? 0 : fd < 0 ? -errno : -ENOMEM;
    if (!directory) {
        free(h);
        if (fd >= 0) close(fd);
    } else {
        h->directory = directory;
        fi->fh = (uint64_t)(uintptr_t)h;
    }
    leave();
    return r;
}

/* The whole directory in one call (offsets 0), read afresh each time it is listed from the start. */
static int lossy_readdir(const char *path, void *buffer, fuse_fill_dir_t fill, off_t offset,
                         struct fuse_file_info *fi, enum fuse_readdir_flags flags) {
    (void)path;
    (void)offset;
    (void)flags;
    enter();
    DIR *directory = handle_of(fi)->directory;
    rewinddir(directory);
    for (struct dirent *entry; (entry = readdir(directory));) {
        struct stat st = { .st_ino = entry->d_ino, .st_mode = (mode_t)DTTOIF(entry->d_type) };
        if (fill(buffer, entry->d_name, &st, 0, 0)) break;
    }
    leave();
    return 0;
}

static int lossy_releasedir(const char *path, struct fuse_file_info *fi) {
    (void)path;
    enter();
    closedir(handle_of(fi)->directory);
    free(handle_of(fi));
    leave();
    return 0;
}

static void *lossy_init(struct fuse_conn_info *connection, struct fuse_config *config) {
    (void)connection;
    config->hard_remove = 1;    /* an unlinked open file is gone from the backing directory, not hidden */
    config->nullpath_ok = 1;    /* every operation on a handle works through the handle */
    config->kernel_cache = 0;
    return NULL;
}

/* A clean unmount writes everything back, as a shutdown does. */
static void lossy_destroy(void *data) {
    (void)data;
    pthread_mutex_lock(&lock);
    for (struct node *n = nodes; n; n = n->next) {
        int r = sync_node(n);
        if (r) fprintf(stderr, "lossyfs: writing back at unmount failed: %s\n", strerror(-r));
    }
    pthread_mutex_unlock(&lock);
}

static const struct fuse_operations operations = {
    .getattr = lossy_getattr,
    .access = lossy_access,
    .readlink = lossy_readlink,
    .mknod = lossy_mknod,
    .mkdir = lossy_mkdir,
    .unlink = lossy_unlink,
    .rmdir = lossy_rmdir,
    .symlink = lossy_symlink,
    .rename = lossy_rename,
    .link = lossy_link,
    .chmod = lossy_chmod,
    .chown = lossy_chown,
    .truncate = lossy_truncate,
    .utimens = lossy_utimens,
    .open = lossy_open,
    .create = lossy_create,
    .read = lossy_read,
    .write = lossy_write,
    .statfs = lossy_statfs,
    .release = lossy_release,
    .fsync = lossy_fsync,
    .fsyncdir = lossy_fsyncdir,
    .opendir = lossy_opendir,
    .readdir = lossy_readdir,
    .releasedir = lossy_releasedir,
    .init = lossy_init,
    .destroy = lossy_destroy,
};

int main(int argc, char **argv) {
    int at = 1;
    uint64_t seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    while (at + 1 < argc && strncmp(argv[at], "--", 2) == 0) {
        if (strcmp(argv[at], "--delay-ms") == 0) delay_ms = (unsigned)strtoul(argv[at + 1], NULL, 10);
        else if (strcmp(argv[at], "--seed") == 0) seed = strtoull(argv[at + 1], NULL, 10);
        else break;
        at += 2;
    }
    if (argc - at < 2 || argv[at][0] == '-') {
        fprintf(stderr, "usage: %s [--delay-ms N] [--seed N] BACKING MOUNTPOINT [FUSE-OPTION...]\n", argv[0]);
        return 2;
    }
    if (seed) random_state = seed;
    root = open(argv[at], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) { perror(argv[at]); return 1; }

    /* Blocked before libfuse starts its threads, so that only the power switch takes them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t thread;
    if (pthread_create(&thread, NULL, power_switch, NULL) != 0) { perror("pthread_create"); return 1; }

    char *fuse_argv[64];
    int fuse_argc = 0;
    fuse_argv[fuse_argc++] = argv[0];
    fuse_argv[fuse_argc++] = "-f";
    fuse_argv[fuse_argc++] = "-o";
    fuse_argv[fuse_argc++] = "fsname=lossyfs,subtype=lossyfs,max_threads=16";
    fuse_argv[fuse_argc++] = argv[at + 1];
    for (int i = at + 2; i < argc && fuse_argc < 63; i++) fuse_argv[fuse_argc++] = argv[i];
    fuse_argv[fuse_argc] = NULL;
    return fuse_main(fuse_argc, fuse_argv, &operations, NULL);
}
