import Foundation
import KVCloud
import KVStore

// What `kvsfs serve` and its clients (HTTPChangeLog; bench/loadgen.c speaks it in C) say to each other: the paths
// and the JSON bodies. (The server's reading of requests is in PushDecoding.swift and
// RequestReading.swift.) No NIO in this module: the fuzzer and the client link it as they are.

/// The paths of the sync protocol (see `SyncServer` for what each answers).
public enum WirePath {
    public static let health = "/health"
    public static let metrics = "/metrics"
    public static let whoAmI = "/v1/whoami"

    /// What a store-addressed path names: `/v1/ACCOUNT/STORE/RESOURCE`.
    public enum StoreResource: String, Sendable, CaseIterable {
        case identity, changes, events, cursor, history, schema
    }

    /// `/v1/ACCOUNT/STORE/RESOURCE`, for a client.
    public static func store(account: String, store: String, _ resource: StoreResource) -> String {
        "/v1/\(account)/\(store)/\(resource.rawValue)"
    }

    /// `/v1/{account}/{store}/RESOURCE`, the server router's pattern for the same path.
    public static func pattern(_ resource: StoreResource) -> String {
        "/v1/{account}/{store}/\(resource.rawValue)"
    }
}

/// `POST .../changes`: the changes a device offers.
public struct PushRequest: Codable, Sendable, Equatable {
    public var changes: [StampedChange]

    public init(changes: [StampedChange]) {
        self.changes = changes
    }
}

/// The answer to a push: what was accepted and what was refused, with why.
public typealias PushResponse = PushOutcome

/// The answer to `GET .../changes` and each event of `GET .../events`.
public typealias ChangesResponse = ChangeBatch

/// `GET /v1/whoami`: what the token reaches, its scope as the server keeps it.
public typealias WhoAmI = TokenScope

/// `GET .../identity`: the account's remote id (see `ChangeLog.identity()`).
public struct IdentityResponse: Codable, Sendable, Equatable {
    public var identity: String

    public init(identity: String) {
        self.identity = identity
    }
}

/// `GET .../events`: server-sent events, one per batch of changes as it lands (`id:` its
/// cursor, one `data:` line its JSON, as `ChangesResponse`), and a comment (`keep-alive`) when
/// nothing landed for a while, so that a dead connection is found.
public enum ChangeEvent {
    public static func encode(_ batch: ChangesResponse) throws -> [UInt8] {
        Array("id: \(batch.cursor)\ndata: ".utf8) + Array(try JSONEncoder().encode(batch)) + Array("\n\n".utf8)
    }

    public static let keepAlive = ": keep-alive\n\n"

    /// The batch of changes an event's `data:` lines carry (its lines without the blank line
    /// that ends it); nil for a comment.
    public static func batch(in event: String) throws -> ChangesResponse? {
        let data = event.split(separator: "\n").filter { $0.hasPrefix("data:") }.map { $0.dropFirst(5).drop { $0 == " " } }
        guard !data.isEmpty else { return nil }
        return try JSONDecoder().decode(ChangesResponse.self, from: Data(data.joined(separator: "\n").utf8))
    }
}

/// `GET .../cursor`: the store's newest cursor.
public struct CursorResponse: Codable, Sendable, Equatable {
    public var cursor: Int64

    public init(cursor: Int64) {
        self.cursor = cursor
    }
}

/// `GET .../schema`, and the answer to `PUT` and `DELETE .../schema[?if-version=V]`: the
/// store's schema and its version (the text as base64), as set or removed.
public typealias SchemaResponse = RemoteSchema

/// `GET .../history?key=K`: the versions the store keeps of the key, newest first, without
/// their values.
public struct HistoryResponse: Codable, Sendable, Equatable {
    public var versions: [KeyVersion]

    public init(versions: [KeyVersion]) {
        self.versions = versions
    }
}

/// `GET .../history?key=K&version=V`: that version, with its value; null when the store keeps
/// no such version of the key.
public struct VersionResponse: Codable, Sendable, Equatable {
    public var version: KeyVersion?

    public init(version: KeyVersion?) {
        self.version = version
    }

    /// `{"version":null}` when there is none, as the protocol says, not `{}`.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(version, forKey: .version)
    }
}

/// Every 4xx and 5xx answer's body: `{"error":{"message":...}}` (Hummingbird's `HTTPError`).
/// The header a server's refusal carries when its status alone does not say which refusal it
/// is: a 403 that refuses to make a store past the account's limit (`StoreCap`) is not a
/// refused token, and the client says so.
public enum RefusalHeader {
    public static let name = "Kvsfs-Refusal"
    public static let storeLimit = "store-limit"
    /// On a 412 to `PUT` or `DELETE .../schema?if-version=V`: the version the store's schema
    /// is at instead (`CloudError.schemaMoved`).
    public static let schemaVersion = "Kvsfs-Schema-Version"
}

public struct ErrorResponse: Codable, Sendable, Equatable {
    public struct Detail: Codable, Sendable, Equatable {
        public var message: String?
    }

    public var error: Detail

    public init(message: String?) {
        error = Detail(message: message)
    }
}
