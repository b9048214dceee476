#ifndef KVSFS_CFUSE_SHIM_H
#define KVSFS_CFUSE_SHIM_H

#define FUSE_USE_VERSION 34
#include <fuse_lowlevel.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
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

static inline int cfuse_session_loop_mt(struct fuse_session *se, unsigned int max_idle_threads) {
    struct fuse_loop_config *config = fuse_loop_cfg_create();
    if (config == NULL) return -1;
    fuse_loop_cfg_set_clone_fd(config, 0);
    fuse_loop_cfg_set_max_threads(config, 16);
    fuse_loop_cfg_set_idle_threads(config, max_idle_threads);
    int result = fuse_session_loop_mt(se, config);
    fuse_loop_cfg_destroy(config);
    return result;
}

/* The open flags and the keep_cache/direct_io bits live in a bitfield Swift cannot reach. */
static inline void cfuse_file_info_set_cache(struct fuse_file_info *fi, int keep_cache, int direct_io) {
    fi->keep_cache = keep_cache ? 1 : 0;
    fi->direct_io = direct_io ? 1 : 0;
}

static inline int cfuse_args_add(struct fuse_args *args, const char *arg) {
    return fuse_opt_add_arg(args, arg);
}

#endif
