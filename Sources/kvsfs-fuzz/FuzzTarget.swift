/// The parsers kvsfs-fuzz can drive; each checks its own invariants and traps when one fails.
enum FuzzTarget: String, CaseIterable {
    case plist, keyname, journal, request, events, json, prefix, schema

    /// Chosen once in main.swift, before libFuzzer calls `run` for the first time.
    nonisolated(unsafe) static var selected = FuzzTarget.plist

    func run(_ bytes: [UInt8]) {
        switch self {
        case .plist: PropertyListFuzzing.run(bytes)
        case .keyname: KeyNameFuzzing.run(bytes)
        case .journal: JournalFuzzing.run(bytes)
        case .request: RequestFuzzing.run(bytes)
        case .events: EventLogFuzzing.run(bytes)
        case .json: JSONFuzzing.run(bytes)
        case .prefix: ValuePrefixFuzzing.run(bytes)
        case .schema: SchemaFuzzing.run(bytes)
        }
    }
}
