import CFuse
import Glibc

/// The C callbacks handed to libfuse. Each copies its C arguments, calls the Swift file
/// system, and replies exactly once: before it returns, or later through a `Reply`. They are
/// non-isolated free functions: libfuse calls them from its own worker threads.
func makeLowLevelOperations() -> fuse_lowlevel_ops {
    var ops = fuse_lowlevel_ops()
    ops.lookup = { req, parent, name in
        serve(req) { fs, context in
            switch try fs.lookup(parent: InodeNumber(parent), name: try string(name), context: context) {
            case .found(let entry):
                replyEntry(req, entry)
            case .notFound(let timeout):
                var param = fuse_entry_param()
                param.ino = 0
                param.entry_timeout = timeout
                fuse_reply_entry(req, &param)
            }
        }
    }
    ops.forget = { req, ino, lookups in
        fileSystem(req).forget(inode: InodeNumber(ino), lookups: lookups)
        fuse_reply_none(req)
    }
    ops.forget_multi = { req, count, forgets in
        let fs = fileSystem(req)
        for index in 0..<count {
            let item = forgets![index]
            fs.forget(inode: InodeNumber(item.ino), lookups: item.nlookup)
        }
        fuse_reply_none(req)
    }
    ops.getattr = { req, ino, _ in
        serve(req) { fs, _ in
            let reply = try fs.getattr(inode: InodeNumber(ino))
            var st = stat(reply.attributes)
            fuse_reply_attr(req, &st, reply.timeout)
        }
    }
    ops.setattr = { req, ino, attr, toSet, fi in
        serve(req) { fs, context in
            let changes = attributeChanges(attr!.pointee, toSet)
            let handle = fi.map { FileHandle($0.pointee.fh) }
            let reply = try fs.setattr(inode: InodeNumber(ino), changes: changes, handle: handle, context: context)
            var st = stat(reply.attributes)
            fuse_reply_attr(req, &st, reply.timeout)
        }
    }
    ops.open = { req, ino, fi in
        serve(req) { fs, context in
            let reply = try fs.open(inode: InodeNumber(ino), flags: OpenFlags(rawValue: fi!.pointee.flags), context: context)
            fi!.pointee.fh = reply.handle.rawValue
            cfuse_file_info_set_open_flags(fi, reply.keepCache ? 1 : 0, reply.directIO ? 1 : 0, reply.noFlush ? 1 : 0)
            if fuse_reply_open(req, fi) == -ENOENT {
                fs.release(inode: InodeNumber(ino), handle: reply.handle)
            }
        }
    }
    ops.create = { req, parent, name, mode, fi in
        serve(req) { fs, context in
            let (entry, reply) = try fs.create(parent: InodeNumber(parent), name: try string(name), mode: UInt32(mode),
                                               flags: OpenFlags(rawValue: fi!.pointee.flags), context: context)
            fi!.pointee.fh = reply.handle.rawValue
            cfuse_file_info_set_open_flags(fi, reply.keepCache ? 1 : 0, reply.directIO ? 1 : 0, reply.noFlush ? 1 : 0)
            var param = entryParam(entry)
            if fuse_reply_create(req, &param, fi) == -ENOENT {
                fs.release(inode: entry.attributes.inode, handle: reply.handle)
            }
        }
    }
    ops.read = { req, ino, size, offset, fi in
        serve(req) { fs, _ in
            let bytes = try fs.read(inode: InodeNumber(ino), handle: FileHandle(fi!.pointee.fh), offset: Int(offset), size: size)
            bytes.withUnsafeBytes { buffer in _ = fuse_reply_buf(req, buffer.baseAddress, buffer.count) }
        }
    }
    ops.write = { req, ino, buf, size, offset, fi in
        serve(req) { fs, context in
            let bytes = UnsafeRawBufferPointer(start: buf, count: size)
            let written = try fs.write(inode: InodeNumber(ino), handle: FileHandle(fi!.pointee.fh), offset: Int(offset),
                                       bytes: bytes, context: context)
            fuse_reply_write(req, written)
        }
    }
    ops.flush = { req, ino, fi in
        serve(req) { fs, context in
            try fs.flush(inode: InodeNumber(ino), handle: FileHandle(fi!.pointee.fh), context: context)
            fuse_reply_err(req, 0)
        }
    }
    ops.release = { req, ino, fi in
        fileSystem(req).release(inode: InodeNumber(ino), handle: FileHandle(fi!.pointee.fh))
        fuse_reply_err(req, 0)
    }
    ops.fsync = { req, ino, dataOnly, fi in
        serve(req) { fs, _ in
            try fs.fsync(inode: InodeNumber(ino), handle: FileHandle(fi!.pointee.fh), dataOnly: dataOnly != 0)
            fuse_reply_err(req, 0)
        }
    }
    ops.unlink = { req, parent, name in
        serve(req) { fs, context in
            try fs.unlink(parent: InodeNumber(parent), name: try string(name), context: context)
            fuse_reply_err(req, 0)
        }
    }
    ops.rename = { req, parent, name, newParent, newName, flags in
        serve(req) { fs, context in
            try fs.rename(parent: InodeNumber(parent), name: try string(name), newParent: InodeNumber(newParent),
                          newName: try string(newName), flags: RenameFlags(rawValue: flags), context: context)
            fuse_reply_err(req, 0)
        }
    }
    ops.mkdir = { req, parent, name, mode in
        serve(req) { fs, _ in replyEntry(req, try fs.mkdir(parent: InodeNumber(parent), name: try string(name), mode: UInt32(mode))) }
    }
    ops.rmdir = { req, parent, name in
        serve(req) { fs, _ in
            try fs.rmdir(parent: InodeNumber(parent), name: try string(name))
            fuse_reply_err(req, 0)
        }
    }
    ops.mknod = { req, parent, name, mode, _ in
        serve(req) { fs, _ in replyEntry(req, try fs.mknod(parent: InodeNumber(parent), name: try string(name), mode: UInt32(mode))) }
    }
    ops.symlink = { req, target, parent, name in
        serve(req) { fs, _ in replyEntry(req, try fs.symlink(target: try string(target), parent: InodeNumber(parent), name: try string(name))) }
    }
    ops.link = { req, ino, newParent, newName in
        serve(req) { fs, _ in replyEntry(req, try fs.link(inode: InodeNumber(ino), newParent: InodeNumber(newParent), newName: try string(newName))) }
    }
    ops.opendir = { req, ino, fi in
        serve(req) { fs, _ in
            fi!.pointee.fh = try fs.opendir(inode: InodeNumber(ino)).rawValue
            fuse_reply_open(req, fi)
        }
    }
    ops.readdir = { req, ino, size, offset, fi in
        serve(req) { fs, _ in
            let entries = try fs.readdir(inode: InodeNumber(ino), handle: FileHandle(fi!.pointee.fh), offset: Int(offset))
            replyDirectory(req, entries, size: size)
        }
    }
    ops.releasedir = { req, ino, fi in
        fileSystem(req).releasedir(inode: InodeNumber(ino), handle: FileHandle(fi!.pointee.fh))
        fuse_reply_err(req, 0)
    }
    ops.fsyncdir = { req, ino, dataOnly, fi in
        serve(req) { fs, _ in
            switch try fs.fsyncdir(inode: InodeNumber(ino), handle: FileHandle(fi!.pointee.fh), dataOnly: dataOnly != 0) {
            case .now:
                fuse_reply_err(req, 0)
            case .later(let start):
                start(box(req).outstanding.reply(to: req!, errnoFrom: fs))
            }
        }
    }
    ops.statfs = { req, ino in
        serve(req) { fs, _ in
            let stats = try fs.statfs(inode: InodeNumber(ino))
            var vfs = statvfs()
            vfs.f_bsize = UInt(stats.blockSize)
            vfs.f_frsize = UInt(stats.blockSize)
            vfs.f_blocks = fsblkcnt_t(stats.blocks)
            vfs.f_bfree = fsblkcnt_t(stats.blocksFree)
            vfs.f_bavail = fsblkcnt_t(stats.blocksFree)
            vfs.f_files = fsfilcnt_t(stats.files)
            vfs.f_ffree = fsfilcnt_t(stats.filesFree)
            vfs.f_favail = fsfilcnt_t(stats.filesFree)
            vfs.f_namemax = UInt(stats.nameMax)
            fuse_reply_statfs(req, &vfs)
        }
    }
    ops.getxattr = { req, ino, name, size in
        serve(req) { fs, _ in
            let value = try fs.getxattr(inode: InodeNumber(ino), name: try string(name))
            replySized(req, value, size: size)
        }
    }
    ops.listxattr = { req, ino, size in
        serve(req) { fs, _ in
            let names = try fs.listxattr(inode: InodeNumber(ino))
            replySized(req, names.flatMap { Array($0.utf8) + [0] }, size: size)
        }
    }
    ops.setxattr = { req, ino, name, value, size, flags in
        serve(req) { fs, _ in
            let bytes = value.map { [UInt8](UnsafeRawBufferPointer(start: $0, count: size)) } ?? []
            try fs.setxattr(inode: InodeNumber(ino), name: try string(name), value: bytes, flags: flags)
            fuse_reply_err(req, 0)
        }
    }
    ops.removexattr = { req, ino, name in
        serve(req) { fs, _ in
            try fs.removexattr(inode: InodeNumber(ino), name: try string(name))
            fuse_reply_err(req, 0)
        }
    }
    return ops
}

/// Runs one request: the body replies on success; a thrown error is replied with its errno.
@inline(__always)
private func serve(_ req: fuse_req_t!, _ body: (any FuseFileSystem, RequestContext) throws -> Void) {
    let fs = fileSystem(req)
    let ctx = fuse_req_ctx(req)!.pointee
    do {
        try body(fs, RequestContext(threadID: ctx.pid, uid: ctx.uid, gid: ctx.gid))
    } catch {
        fuse_reply_err(req, fs.errno(for: error))
    }
}

private func fileSystem(_ req: fuse_req_t!) -> any FuseFileSystem {
    box(req).fileSystem
}

private func box(_ req: fuse_req_t!) -> FileSystemBox {
    Unmanaged<FileSystemBox>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
}

/// A name from the kernel as a Swift string. Names are bytes to the kernel; one that is not
/// valid UTF-8 is refused with EINVAL rather than repaired, so that no two names ever map to
/// the same string.
private func string(_ pointer: UnsafePointer<CChar>?) throws -> String {
    guard let pointer else { return "" }
    let bytes = UnsafeBufferPointer(start: UnsafeRawPointer(pointer).assumingMemoryBound(to: UInt8.self), count: strlen(pointer))
    guard let name = String(validating: bytes, as: UTF8.self) else { throw Errno.invalid }
    return name
}

private func stat(_ attributes: FileAttributes) -> stat {
    var st = Glibc.stat()
    st.st_ino = UInt(attributes.inode.rawValue)
    st.st_mode = (attributes.kind == .directory ? S_IFDIR : S_IFREG) | attributes.permissions
    st.st_nlink = UInt(attributes.linkCount)
    st.st_uid = attributes.uid
    st.st_gid = attributes.gid
    st.st_size = Int(attributes.size)
    st.st_blksize = 4096
    st.st_blocks = Int((attributes.size + 511) / 512)
    st.st_atim = timespec(tv_sec: attributes.accessTime.seconds, tv_nsec: attributes.accessTime.nanoseconds)
    st.st_mtim = timespec(tv_sec: attributes.modificationTime.seconds, tv_nsec: attributes.modificationTime.nanoseconds)
    st.st_ctim = timespec(tv_sec: attributes.changeTime.seconds, tv_nsec: attributes.changeTime.nanoseconds)
    return st
}

private func entryParam(_ entry: Entry) -> fuse_entry_param {
    var param = fuse_entry_param()
    param.ino = entry.attributes.inode.rawValue
    param.generation = 0
    param.attr = stat(entry.attributes)
    param.attr_timeout = entry.attributeTimeout
    param.entry_timeout = entry.entryTimeout
    return param
}

private func replyEntry(_ req: fuse_req_t!, _ entry: Entry) {
    var param = entryParam(entry)
    fuse_reply_entry(req, &param)
}

private func replyDirectory(_ req: fuse_req_t!, _ entries: [DirectoryEntry], size: Int) {
    var buffer = [CChar](repeating: 0, count: size)
    var used = 0
    buffer.withUnsafeMutableBufferPointer { out in
        for entry in entries {
            var st = Glibc.stat()
            st.st_ino = UInt(entry.inode.rawValue)
            st.st_mode = entry.kind == .directory ? S_IFDIR : S_IFREG
            let needed = fuse_add_direntry(req, out.baseAddress! + used, size - used, entry.name, &st, off_t(entry.nextOffset))
            if needed > size - used { break }
            used += needed
        }
        _ = fuse_reply_buf(req, out.baseAddress, used)
    }
}

/// getxattr/listxattr: a size of 0 asks only for the length.
private func replySized(_ req: fuse_req_t!, _ bytes: [UInt8], size: Int) {
    if size == 0 {
        fuse_reply_xattr(req, bytes.count)
    } else if bytes.count > size {
        fuse_reply_err(req, ERANGE)
    } else {
        bytes.withUnsafeBytes { _ = fuse_reply_buf(req, $0.baseAddress, $0.count) }
    }
}

private func attributeChanges(_ attr: stat, _ toSet: Int32) -> AttributeChanges {
    var changes = AttributeChanges()
    if toSet & FUSE_SET_ATTR_MODE != 0 { changes.permissions = attr.st_mode & 0o7777 }
    if toSet & FUSE_SET_ATTR_UID != 0 { changes.uid = attr.st_uid }
    if toSet & FUSE_SET_ATTR_GID != 0 { changes.gid = attr.st_gid }
    if toSet & FUSE_SET_ATTR_SIZE != 0 { changes.size = UInt64(attr.st_size) }
    if toSet & FUSE_SET_ATTR_ATIME_NOW != 0 {
        changes.accessTime = .now
    } else if toSet & FUSE_SET_ATTR_ATIME != 0 {
        changes.accessTime = .to(TimeStamp(seconds: attr.st_atim.tv_sec, nanoseconds: attr.st_atim.tv_nsec))
    }
    if toSet & FUSE_SET_ATTR_MTIME_NOW != 0 {
        changes.modificationTime = .now
    } else if toSet & FUSE_SET_ATTR_MTIME != 0 {
        changes.modificationTime = .to(TimeStamp(seconds: attr.st_mtim.tv_sec, nanoseconds: attr.st_mtim.tv_nsec))
    }
    return changes
}

/// Holds the file system for libfuse's userdata pointer, and the replies its session owes.
final class FileSystemBox {
    let fileSystem: any FuseFileSystem
    let outstanding = OutstandingReplies()
    init(_ fileSystem: any FuseFileSystem) { self.fileSystem = fileSystem }
}
