import Foundation

/// What the command line asks for.
struct Options {
    /// The `kvsfs` binary to mount with.
    var kvsfs = ""
    /// A fresh directory for the mountpoint, the store's data and the daemon's log.
    var work = ""
    var cycles = 50
    /// The longest a workload runs before its daemon is killed (at a random moment from 0.2 s).
    var seconds = 1.5
    var threads = 3
    var seed = UInt64.random(in: 1...UInt64.max)

    init(_ arguments: [String]) {
        var iterator = arguments.makeIterator()
        while let name = iterator.next() {
            guard let value = iterator.next() else { Self.usage() }
            func number<T: LosslessStringConvertible>(_: T.Type) -> T {
                guard let number = T(value) else { Self.usage() }
                return number
            }
            switch name {
            case "--kvsfs": kvsfs = value
            case "--work": work = value
            case "--cycles": cycles = number(Int.self)
            case "--seconds": seconds = number(Double.self)
            case "--threads": threads = number(Int.self)
            case "--seed": seed = number(UInt64.self)
            default: Self.usage()
            }
        }
        guard !kvsfs.isEmpty, !work.isEmpty, (1...100_000).contains(cycles), (0.2...60).contains(seconds),
              (1...8).contains(threads) else { Self.usage() }
    }

    static func usage() -> Never {
        FileHandle.standardError.write(Data("""
            usage: kvsfs-torture --kvsfs BINARY --work DIR [--cycles N] [--seconds MAX_SECONDS_PER_CYCLE]
                                 [--threads 1...8] [--seed N]

            """.utf8))
        exit(64)
    }
}
