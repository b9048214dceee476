import FoundationEssentials
import FuseKit
@testable import KVSFS
import Testing

@Suite("The namespace's lock")
struct NamespaceTests {
    @Test("a FORGET that finds the namespace locked is applied by the lock's next holder, and counts add up as if in order")
    func forgetsWhileLocked() {
        let guarded = GuardedNamespace(Namespace(now: Date()))
        let (first, second) = guarded.withLock { ns -> (InodeNumber, InodeNumber) in
            let nodes = (ns.addNode(name: "a", kind: .removed([], because: .unlinked), modifiedAt: Date()),
                         ns.addNode(name: "b", kind: .removed([], because: .unlinked), modifiedAt: Date()))
            nodes.0.lookups = 2
            nodes.1.lookups = 1
            // The lock is held here, as by a request being served: the FORGET is queued.
            guarded.forget(nodes.0.inode, lookups: 2)
            #expect(ns.nodes[nodes.0.inode] != nil)
            return (nodes.0.inode, nodes.1.inode)
        }
        guarded.withLock { ns in
            #expect(ns.nodes[first] == nil, "applied by the next holder of the lock")
            #expect(ns.nodes[second]?.lookups == 1)
        }
        guarded.forget(second, lookups: 1)
        guarded.withLock { ns in #expect(ns.nodes[second] == nil) }
    }
}
