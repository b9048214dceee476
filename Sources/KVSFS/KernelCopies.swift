import FuseKit
import KVStore

/// Committed values handed to the kernel's page cache, so that reading a key after it was
/// written, and every read after that, is answered by the kernel alone while no one changes it.
///
/// Invariants: only whole committed values of one page or less go to the kernel (a reader
/// gets the old page or the new one, never a mix: `KernelCache.replaceContent`); the kernel is
/// called only after the namespace lock is let go (it may wait for a READ that needs the lock);
/// the page cache is trusted again only if nothing changed the content, or the kernel's idea
/// of it, between the commit and the kernel taking the copy, and once no writer is open.
struct KernelCopy: Sendable {
    let inode: InodeNumber
    let epoch: UInt64
    let bytes: [UInt8]
}

extension KeyValueFileSystem {
    public func mounted(kernelCache: KernelCache) {
        self.kernelCache.withLock { $0 = kernelCache }
    }

    /// Commits what a handle wrote (`commit(_:decoded:in:)`) and, when that changed a key's
    /// value, the copy of it to hand to the kernel once the lock is let go.
    func commitForKernel(_ file: OpenFile, decoded: DecodedContent?, in ns: inout Namespace) throws -> KernelCopy? {
        let changes = file.dirty
        try commit(file, decoded: decoded, in: &ns)
        guard changes, case .key = file.node.kind else { return nil }
        let bytes = content(of: file.node)
        guard bytes.count <= KernelCache.pageSize else { return nil }
        return KernelCopy(inode: file.node.inode, epoch: file.node.contentEpoch, bytes: bytes)
    }

    /// Hands `copy` to the kernel, outside the namespace lock, if it is still current, and
    /// then trusts the page cache again if it still is.
    ///
    /// Copies are handed one at a time, each checked just before: of two commits racing to the
    /// kernel, the older copy, checked after the newer commit, is dropped; checked before it,
    /// it reaches the kernel before the newer copy does. The kernel never ends up holding an
    /// older value than the last one handed.
    func hand(_ copy: KernelCopy?) {
        guard let copy, let cache = kernelCache.withLock({ $0 }) else { return }
        handing.withLock { _ in
            guard isCurrent(copy), cache.replaceContent(of: copy.inode, with: copy.bytes) else { return }
            state.withLock { ns in
                guard let node = ns.nodes[copy.inode], node.contentEpoch == copy.epoch else { return }
                node.kernelHoldsContent = true
                if node.openWriters == 0 { node.pageCacheTrusted = true }
            }
        }
    }

    private func isCurrent(_ copy: KernelCopy) -> Bool {
        state.withLock { ns in ns.nodes[copy.inode]?.contentEpoch == copy.epoch }
    }
}
