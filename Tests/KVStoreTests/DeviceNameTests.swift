import Foundation
import KVStore
import KVTestSupport
import Testing

/// A store's device names: its own, kept once given, and those a remote tells, bounded.
@Suite("A store's device names")
struct StoreDeviceNameTests {
    @Test("a store takes the host name at first, keeps a name given, and refuses one outside the rule")
    func ownName() throws {
        let dir = TemporaryDirectory("kvsfs-device-name")
        defer { dir.remove() }
        do {
            let store = try KeyValueStore(path: dir.path + "/store.sqlite")
            #expect(try store.nameDevice(nil) == DeviceName.ofThisHost())
            #expect(try store.nameDevice("ann's laptop") == "ann's laptop")
            #expect(throws: StoreError.invalidDeviceName("it holds the control character U+0007")) { try store.nameDevice("bell\u{7}") }
        }
        let reopened = try KeyValueStore(path: dir.path + "/store.sqlite")
        #expect(try reopened.nameDevice(nil) == "ann's laptop", "kept for the store")
        #expect(try reopened.deviceNames(of: [reopened.deviceID]) == [reopened.deviceID: "ann's laptop"])
    }

    @Test("names a remote tells are kept, at most 256: those named longest ago go, and a bad name is not kept")
    func toldNamesBounded() throws {
        let dir = TemporaryDirectory("kvsfs-device-name")
        defer { dir.remove() }
        let store = try KeyValueStore(path: dir.path + "/store.sqlite")
        for index in 0..<300 {
            try store.keepDeviceNames(["dev-\(index)": "name \(index)"])
        }
        try store.keepDeviceNames(["dev-bad": "two\nlines", store.deviceID: "not mine"])
        let all = try store.deviceNames(of: (0..<300).map { "dev-\($0)" } + ["dev-bad"])
        #expect(all.count == DeviceName.keptPerStore)
        #expect(all["dev-299"] == "name 299" && all["dev-0"] == nil && all["dev-bad"] == nil)
        #expect(try store.deviceNames(of: [store.deviceID]) != [store.deviceID: "not mine"], "a remote does not rename this device")
    }

    @Test("the host name is made to fit the rule", arguments: ["a", String(repeating: "h", count: 64)])
    func rule(name: String) throws {
        try DeviceName.check(name)
        #expect(DeviceName.isValid(DeviceName.ofThisHost()))
        #expect(DeviceName.shown("2f6c", named: "laptop") == "2f6c (laptop)" && DeviceName.shown("2f6c", named: nil) == "2f6c")
    }
}
