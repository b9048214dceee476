/// One key whose state after a remount contradicts what was acknowledged.
struct Mismatch: CustomStringConvertible {
    let cycle: Int
    /// When it was seen: right after the remount, or after a sync.
    let stage: String
    let key: String
    let expected: String
    let found: String

    var description: String { "cycle \(cycle), \(stage): key \"\(key)\": expected \(expected); found \(found)" }
}

/// What a mount shows: each listed name with the bytes it reads back as.
struct Observation {
    var contents: [String: [UInt8]] = [:]
    /// Listed, but open() said there is no such file; or not listed, yet it reads back.
    var inconsistent: [(name: String, listed: Bool)] = []

    /// Lists the mount and reads every listed name, and every name of `model` not listed.
    init(of mountpoint: String, model: [String: [UInt8]]) throws(CallFailure) {
        let names = try MountCalls.list(mountpoint).get()
        for name in names.union(model.keys).sorted() {
            let bytes = try MountCalls.read(mountpoint + "/" + name).get()
            switch (names.contains(name), bytes) {
            case (true, let bytes?): contents[name] = bytes
            case (true, nil): inconsistent.append((name, true))
            case (false, _?): inconsistent.append((name, false))
            case (false, nil): break
            }
        }
    }
}

/// The checker's verdict on one observation.
struct Verdict {
    var mismatches: [Mismatch] = []
    /// In-flight steps (that changed the store) found done, and found not done.
    var happened = 0
    var notHappened = 0
}

/// Compares what the mount shows with the model of acknowledged changes. A key no in-flight
/// step touches must hold exactly its model value; the keys of an in-flight step must all hold
/// what they held before it or all what it would have made them (a step is one change: half
/// of a rename is a mismatch).
func check(_ observation: Observation, model: [String: [UInt8]], inFlight: [InFlight], cycle: Int, stage: String) -> Verdict {
    var verdict = Verdict()
    let observed = observation.contents
    for (name, listed) in observation.inconsistent {
        verdict.mismatches.append(Mismatch(cycle: cycle, stage: stage, key: name, expected: "ls and reads to agree",
                                           found: listed ? "listed, but open() gives ENOENT" : "not listed, but it reads back"))
    }
    var settled = Set<String>()
    for flight in inFlight where !flight.after.isEmpty {
        let keys = flight.after.keys.sorted()
        settled.formUnion(keys)
        let found = keys.map { observed[$0] }
        if found == keys.map({ flight.after[$0]! }) {
            verdict.happened += 1
        } else if found == keys.map({ model[$0] }) {
            verdict.notHappened += 1
        } else {
            let together = keys.count > 1 ? " (all its keys, \(keys.joined(separator: ", ")), one way)" : ""
            for key in keys {
                verdict.mismatches.append(Mismatch(
                    cycle: cycle, stage: stage, key: key,
                    expected: "\(Value.describe(model[key])), or \(Value.describe(flight.after[key]!)) had the step in flight at the kill "
                        + "happened (\(flight.operation))\(together)",
                    found: Value.describe(observed[key])))
            }
        }
    }
    for key in Set(model.keys).union(observed.keys).subtracting(settled).sorted() where model[key] != observed[key] {
        verdict.mismatches.append(Mismatch(cycle: cycle, stage: stage, key: key, expected: Value.describe(model[key]),
                                           found: Value.describe(observed[key])))
    }
    return verdict
}
