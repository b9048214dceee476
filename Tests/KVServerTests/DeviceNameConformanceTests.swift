import Foundation
import KVCloud
import KVStore
import Testing

/// Device names on every change log: a push names its device, fetches and history give the
/// name beside the id, and what a log keeps of names is bounded however many ids are made up.
extension ChangeLogConformanceTests {
    @Test("a push names its device: fetches and history give the name; a later push renames it", arguments: Kind.allCases)
    func namesTravel(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            var first = change("k", "one", time: Self.now - 2000, device: "dev-a")
            first.deviceName = "laptop of ann"
            _ = try await log.push([first], to: store)
            #expect(try await log.changes(in: store, after: 0, limit: 100).devices == ["dev-a": "laptop of ann"])
            #expect(try await log.history(of: "k", in: store).map(\.deviceName) == ["laptop of ann"])

            var second = change("k", "two", time: Self.now - 1000, device: "dev-a")
            second.deviceName = "ann's phone"
            _ = try await log.push([second, change("other", "x", time: Self.now - 500, device: "dev-b")], to: store)
            let batch = try await log.changes(in: store, after: 0, limit: 100)
            #expect(batch.devices == ["dev-a": "ann's phone"], "dev-b gave no name: \(batch.devices)")
            let shown = try await log.history(of: "k", in: store)
            #expect(shown.map(\.deviceName) == ["ann's phone", "ann's phone"])
        }
    }

    @Test("a name outside the rule refuses its change with why, and nothing is kept", arguments: Kind.allCases)
    func badNameRefused(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            var named = change("k", "one", device: "dev-a")
            named.deviceName = "evil\u{1B}[31m"
            let outcome = try await log.push([named], to: store)
            #expect(outcome.accepted.isEmpty && outcome.refused.map(\.reason)
                    == ["invalid device name: it holds the control character U+001B"], "\(outcome)")
            #expect(try await log.changes(in: store, after: 0, limit: 100).changes.isEmpty)
            for (name, reason) in [("x) string 5; won (y", "it holds ')', which the views use around and between devices"),
                                   ("abc\u{202E}def", "it holds U+202E, an invisible, separating, private or unassigned character"),
                                   ("two\u{2028}lines", "it holds U+2028, an invisible, separating, private or unassigned character")] {
                var forged = change("k", "one", device: "dev-a")
                forged.deviceName = name
                #expect(try await log.push([forged], to: store).refused.map(\.reason) == ["invalid device name: " + reason], "\(name.debugDescription)")
            }
            // A change refused for another reason tells no name either.
            var future = change("k", "one", time: Self.now + 3_600_000, device: "dev-future")
            future.deviceName = "from the future"
            #expect(try await log.push([future], to: store).refused.count == 1)
            _ = try await log.push([change("other", "x", device: "dev-future")], to: store)
            #expect(try await log.changes(in: store, after: 0, limit: 100).devices.isEmpty, "dev-future was never named")
        }
    }

    @Test("names kept per store are bounded: 300 made-up ids keep the 256 named last", arguments: Kind.allCases)
    func namesBounded(_ kind: Kind) async throws {
        try await withLog(kind) { log, store in
            for index in 0..<300 {
                var made = change("k\(index)", "v", time: Self.now - 10_000 + Int64(index), device: "made-up-\(index)")
                made.deviceName = "name \(index)"
                _ = try await log.push([made], to: store)
            }
            var devices: [String: String] = [:]
            var cursor: Int64 = 0
            while true {
                let batch = try await log.changes(in: store, after: cursor, limit: 100)
                devices.merge(batch.devices) { $1 }
                cursor = batch.cursor
                if batch.complete { break }
            }
            #expect(devices.count == DeviceName.keptPerStore, "\(devices.count) names kept")
            #expect(devices["made-up-299"] == "name 299" && devices["made-up-0"] == nil)
        }
    }
}
