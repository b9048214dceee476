// swift-tools-version: 6.0
import PackageDescription

let package = Package(
    name: "kvsfs",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "kvsfs", targets: ["kvsfs"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
    ],
    targets: [
        .systemLibrary(
            name: "CFuse",
            pkgConfig: "fuse3",
            providers: [.apt(["libfuse3-dev"])]
        ),
        .target(name: "FuseKit", dependencies: ["CFuse"]),
        .target(name: "KVStore", dependencies: [
            .product(name: "GRDB", package: "GRDB.swift"), .product(name: "GRDBSQLite", package: "GRDB.swift"),
        ]),
        .target(name: "KVSFS", dependencies: ["FuseKit", "KVStore", .product(name: "Logging", package: "swift-log")]),
        .target(name: "KVCloud", dependencies: ["KVStore", .product(name: "GRDB", package: "GRDB.swift")]),
        // What server and clients say on the wire, and the server's reading of requests: no NIO.
        .target(name: "KVWire", dependencies: ["KVStore", "KVCloud"]),
        // The words for a failed connection, for every network client: no store, no FUSE.
        .target(name: "KVNetwork", dependencies: [
            "KVCloud",
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOPosix", package: "swift-nio"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
        ]),
        .target(name: "KVSync", dependencies: [
            "KVStore", "KVCloud", "KVWire", "KVNetwork",
            .product(name: "AsyncHTTPClient", package: "async-http-client"),
            .product(name: "NIOCore", package: "swift-nio"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
        ]),
        .target(name: "KVServer", dependencies: [
            "KVStore", "KVCloud", "KVWire",
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "HummingbirdCore", package: "hummingbird"),
            .product(name: "HummingbirdTLS", package: "hummingbird"),
            .product(name: "Crypto", package: "swift-crypto"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "GRDB", package: "GRDB.swift"),
            .product(name: "Prometheus", package: "swift-prometheus"),
            .product(name: "HeapModule", package: "swift-collections"),
        ]),
        .target(name: "KVPostgres", dependencies: [
            "KVStore", "KVCloud", "KVNetwork",
            .product(name: "PostgresNIO", package: "postgres-nio"),
            .product(name: "NIOSSL", package: "swift-nio-ssl"),
            .product(name: "Logging", package: "swift-log"),
        ]),
        .executableTarget(
            name: "kvsfs",
            dependencies: [
                "FuseKit", "KVStore", "KVSFS", "KVCloud", "KVSync", "KVServer", "KVPostgres",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The crash torture harness (scripts/torture): drives the kvsfs binary and its mount with POSIX calls.
        .executableTarget(name: "kvsfs-torture", dependencies: [.product(name: "ArgumentParser", package: "swift-argument-parser")]),
        .target(name: "KVTestSupport", dependencies: [
            "FuseKit", "KVStore", "KVSFS", "KVCloud", "KVSync", .product(name: "Logging", package: "swift-log"),
        ], path: "Tests/KVTestSupport"),
        .testTarget(name: "KVStoreTests", dependencies: ["KVStore", "KVTestSupport", .product(name: "GRDB", package: "GRDB.swift")]),
        .testTarget(name: "SyncTests", dependencies: [
            "KVStore", "KVCloud", "KVSync", "KVNetwork", "KVTestSupport", .product(name: "GRDB", package: "GRDB.swift"),
            .product(name: "PropertyBased", package: "swift-property-based"),
            .product(name: "NIOCore", package: "swift-nio"), .product(name: "NIOSSL", package: "swift-nio-ssl"),
        ]),
        .testTarget(name: "KVServerTests", dependencies: [
            "KVServer", "KVPostgres", "KVCloud", "KVStore", "KVSync", "KVTestSupport", .product(name: "Logging", package: "swift-log"),
        ]),
        .testTarget(name: "KVWireTests", dependencies: ["KVWire", "KVStore", "KVCloud", "KVTestSupport"]),
        .testTarget(name: "KVSFSTests", dependencies: [
            "KVSFS", "KVStore", "KVTestSupport", .product(name: "Logging", package: "swift-log"), .product(name: "GRDB", package: "GRDB.swift"),
        ]),
        .testTarget(name: "MountTests", dependencies: ["FuseKit", "KVSFS", "KVStore", "KVSync", "KVTestSupport"]),
        .testTarget(name: "EndToEndTests", dependencies: ["KVStore", "KVTestSupport"]),
        // The kvsfs command's own parts (the daemon's start and readiness), without running the binary.
        .testTarget(name: "KVSFSCommandTests", dependencies: ["kvsfs", "KVSync", "KVTestSupport"]),
    ]
)

// libFuzzer targets (scripts/fuzz). The executable links only with -sanitize=fuzzer, so it is
// part of the package only when KVSFS_FUZZ is set; no NIO, so that a sanitizer build stays quick.
if Context.environment["KVSFS_FUZZ"] != nil {
    package.targets.append(.executableTarget(name: "kvsfs-fuzz", dependencies: ["KVStore", "KVSFS", "KVSync", "KVWire"]))
}
