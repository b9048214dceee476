#ifndef KVSFS_CFUSE_SHIM_H
#define KVSFS_CFUSE_SHIM_H

#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <malloc.h>
#include <fcntl.h>
#include <errno.h>
#include <stdio.h>

/* fuse_session_new and fuse_session_loop_mt are macros over versioned symbols
   in libfuse 3.12 and later; Swift cannot import macros, so wrap them here. */
static inline struct fuse_session *cfuse_session_new(struct fuse_args *args,
                                                     const struct fuse_lowlevel_ops *ops,
                                                     void *userdata) {
    return fuse_session_new(args, ops, sizeof(*ops), userdata);
}

/* With FUSE_USE_VERSION 34 the macro resolves to the 3.2 entry point, which takes the
   original two-field config: one /dev/fuse descriptor shared by all workers, and idle
   workers kept (creating a thread per request costs more than the request). */
static inline int cfuse_session_loop_mt(struct fuse_session *se) {
    struct fuse_loop_config config = { .clone_fd = 0, .max_idle_threads = 10 };
    return fuse_session_loop_mt(se, &config);
}

/* The keep_cache, direct_io and noflush bits live in a bitfield; set them in C. */
static inline void cfuse_file_info_set_open_flags(struct fuse_file_info *fi, int keep_cache, int direct_io, int noflush) {
    fi->keep_cache = keep_cache ? 1 : 0;
    fi->direct_io = direct_io ? 1 : 0;
    fi->noflush = noflush ? 1 : 0;
}

static inline int cfuse_args_add(struct fuse_args *args, const char *arg) {
    return fuse_opt_add_arg(args, arg);
}

#endif
