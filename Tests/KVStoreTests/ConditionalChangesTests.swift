import Foundation
import KVStore
import KVTestSupport
import Testing

/// A conditional change as the store makes it for the mount (`kvsfs set --if-version`): checked
/// against the store's rules and stamped by its clock, but never committed: the remote's verdict
/// decides, and only an accepted change is taken in.
@Suite("Conditional changes in the store")
struct ConditionalChangesTests {
    @Test("a key with a change not yet pushed is refused, saying sync first; once pushed, the change is made and nothing is committed")
    func unpushedKeyRefused() throws {
        let dir = TemporaryDirectory("kvsfs-conditional-store")
        defer { dir.remove() }
        let store = try makeStore(in: dir)
        try store.put(.string("local"), forKey: "k")
        #expect(throws: StoreError.unpushedChange("k")) {
            try store.conditionalChanges(["k": .string("new")], condition: .version(1))
        }
        #expect(StoreError.unpushedChange("k").description == "\"k\" has a change on this mount not yet pushed: sync first (kvsfs sync)")
        try store.markPushed(store.pendingChanges())
        let local = try #require(store.allChanges(forKey: "k"))
        let remote = ChangeStamp(time: local.stamp.time + 10_000, counter: 3, device: "elsewhere")
        let made = try store.conditionalChanges(["k": .string("new")], condition: .version(1), after: ["k": remote])
        let change = try #require(made.first)
        #expect(made.count == 1 && change.condition == .version(1) && change.key == "k")
        #expect(change.stamp > remote && change.stamp > local.stamp, "it replaces what the remote and the mount hold, by the merge rule")
        #expect(change.replaces == .change(local.stamp))
        let localXML = try PropertyListCodec.encodeXML(.string("local"))
        #expect(store.entry(forKey: "k")?.xml == localXML, "nothing committed")
        #expect(store.pendingCount == 0)
        let removal = try #require(try store.conditionalChanges(["k": nil], condition: .absent).first)
        let again = try #require(try store.conditionalChanges(["k": nil], condition: .absent).first)
        #expect(removal.isTombstone && again.stamp > removal.stamp, "the clock moves on: no two changes made share a stamp")
    }

    @Test("a value over the per-value quota, or a key name too long, is refused before anything is pushed")
    func rulesChecked() throws {
        let dir = TemporaryDirectory("kvsfs-conditional-store")
        defer { dir.remove() }
        let store = try makeStore(in: dir)
        let big = PropertyListValue.data(Data(count: QuotaLimits.modelled.valueBytes + 1))
        #expect(throws: StoreError.self) { try store.conditionalChanges(["big": big], condition: .absent) }
        #expect(throws: StoreError.self) {
            try store.conditionalChanges([String(repeating: "k", count: QuotaLimits.modelled.keyNameBytes + 1): .string("v")], condition: .absent)
        }
        #expect(store.keys().isEmpty)
    }
}
