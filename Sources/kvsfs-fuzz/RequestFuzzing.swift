import Foundation
import KVCloud
import KVStore
import KVWire

/// Any bytes, as what a client sends the sync server: the first byte picks a push body, a query
/// string or an `Authorization` header, the rest is it.
///
/// A push body is also read as a stored list of changes that lost (`KeptChangeList`), and as
/// a fetch's answer (`ChangesResponse`), whose device names a mount takes only for the devices
/// the answer names.
///
/// Invariants: nothing traps; a stored list read keeps the list's rule; a push that is read re-encodes (as a client sends it) to bodies
/// that read back as the same changes (what each replaces, and what lost to it, included),
/// and the change rule (`ChangeAdmission`) admits or refuses each of them, admitted ones with
/// NFC keys and canonical values, theirs and those of what lost to them, and device names
/// within their rule (`DeviceName`); a query's values (a
/// history mark, a history request's key and version, and a schema request's if-version included) are within their ranges and read back from the query a client writes
/// for them; a bearer token read is one a header carries back.
enum RequestFuzzing {
    static func run(_ bytes: [UInt8]) {
        guard let selector = bytes.first else { return }
        let rest = Array(bytes.dropFirst())
        switch selector % 3 {
        case 0: push(rest)
        case 1: query(String(decoding: rest, as: UTF8.self))
        default: authorization(String(decoding: rest, as: UTF8.self))
        }
    }

    private static func push(_ body: [UInt8]) {
        keptChanges(body)
        fetchAnswer(body)
        guard let push = try? decodePush(body) else { return }
        let bodies: [[UInt8]]
        do {
            bodies = try encodePushes(push.changes)
        } catch {
            fatalError("a push that was read does not encode: \(error)")
        }
        var again: [StampedChange] = []
        for body in bodies {
            do {
                again += try decodePush(body).changes
            } catch {
                fatalError("a push that was read, encoded again, is refused: \(error)")
            }
        }
        guard again == push.changes else { fatalError("a push encoded again reads as other changes: \(push.changes) → \(again)") }
        let admission = ChangeAdmission.admit(push.changes, policy: .standard)
        guard admission.entries.count == push.changes.count else { fatalError("admission lost or added changes") }
        for change in admission.changes {
            guard KeyName.isCanonical(change.key) else { fatalError("admitted a key not in NFC: \(change.key.debugDescription)") }
            if let name = change.deviceName, !DeviceName.isValid(name) { fatalError("admitted a device name outside its rule: \(name.debugDescription)") }
            let whole = PropertyListDecodingLimits(maxBytes: ChangeAdmission.largestValue)
            for value in ([change.value] + change.lost.map(\.value)).compactMap({ $0 })
            where (try? PropertyListCodec.decode(value, limits: whole)).flatMap({ try? PropertyListCodec.encodeXML($0) }) == nil {
                fatalError("admitted a value (or the value of a change that lost to it) that does not read back: \(change.key)")
            }
        }
    }

    /// The same bytes as a fetch's answer: the names a mount would take are of devices the
    /// answer names.
    private static func fetchAnswer(_ body: [UInt8]) {
        guard let batch = try? JSONDecoder().decode(ChangesResponse.self, from: Data(body)) else { return }
        guard Set(batch.namedDevices.keys).isSubset(of: batch.deviceIDs) else {
            fatalError("names taken for devices the answer does not name: \(batch.namedDevices)")
        }
    }

    /// The same bytes as a stored list of earlier changes that lost (`KeptChangeList`), as a
    /// row another program wrote holds it: read within the list's rule, or refused.
    private static func keptChanges(_ body: [UInt8]) {
        let newest = KeptChange(value: nil, type: nil, stamp: ChangeStamp(time: StampRule.latestTime, counter: .max, device: "newest"))
        guard let lost = try? KeptChangeList.decode(newest: newest, earlier: Data(body)) else { return }
        guard lost.count <= KeptChangeList.maximumCount, lost.first == newest,
              zip(lost, lost.dropFirst()).allSatisfy({ $0.stamp > $1.stamp && ($1.value == nil) == ($1.type == nil) }) else {
            fatalError("a stored list of changes that lost was read outside its rule: \(lost)")
        }
    }

    private static func query(_ text: String) {
        let query = WireQuery(text)
        let after = try? query.after(), limit = try? query.limit(), wait = try? query.wait()
        _ = query.value(text)
        if let mark = try? query.mark() {
            guard mark.cursor > 0, !mark.key.isEmpty, mark.key.utf8.count <= WireLimits.maximumKeyBytes,
                  (try? WireQuery(String(WireQuery.encode(mark: mark).dropFirst())).mark()) == mark else {
                fatalError("mark \(mark) from \(text.debugDescription) is out of the rule or does not read back once written")
            }
        }
        if let key = try? query.key(), let version = try? query.version() {
            guard !key.isEmpty, key.utf8.count <= WireLimits.maximumKeyBytes, (version ?? 1) > 0 else {
                fatalError("key of \(key.utf8.count) bytes, version \(String(describing: version)) from \(text.debugDescription)")
            }
            let written = WireQuery(String(WireQuery.encode(key: key, version: version).dropFirst()))
            guard (try? written.key()) == key, (try? written.version()) == .some(version) else {
                fatalError("key=\(key.debugDescription) version=\(String(describing: version)), read from \(text.debugDescription), do not read back once written")
            }
        }
        if let ifVersion = try? query.ifVersion() {
            let written = WireQuery(String(WireQuery.encode(ifVersion: ifVersion).dropFirst()))
            guard (ifVersion ?? 0) >= 0, (try? written.ifVersion()) == .some(ifVersion) else {
                fatalError("if-version=\(String(describing: ifVersion)), read from \(text.debugDescription), is out of range or does not read back once written")
            }
        }
        if let after, after < 0 { fatalError("after=\(after) from \(text.debugDescription)") }
        if let limit, !WireLimits.changesPerFetch.contains(limit) { fatalError("limit=\(limit) from \(text.debugDescription)") }
        if let wait, !WireLimits.waitSeconds.contains(wait) { fatalError("wait=\(wait) from \(text.debugDescription)") }
        guard let after, let limit, let wait else { return }
        let written = WireQuery(String(WireQuery.encode(after: after, limit: limit, wait: wait).dropFirst()))
        guard (try? written.after()) == after, (try? written.limit()) == limit, (try? written.wait()) == wait else {
            fatalError("after=\(after) limit=\(limit) wait=\(wait), read from \(text.debugDescription), do not read back once written")
        }
    }

    private static func authorization(_ header: String) {
        guard let token = bearerToken(fromAuthorization: header) else { return }
        guard !token.isEmpty, token.utf8.count <= WireLimits.maximumTokenBytes else {
            fatalError("token \(token.debugDescription) from \(header.debugDescription)")
        }
        guard bearerToken(fromAuthorization: "Bearer " + token) == token else {
            fatalError("token \(token.debugDescription) from \(header.debugDescription) does not read back from Bearer \(token)")
        }
    }
}
