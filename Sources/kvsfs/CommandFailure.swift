import ArgumentParser
import Foundation
import KVStore

/// A failure reported as one line on stderr and exit status 1.
struct CommandFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// "1 key", "2 keys": a count and its noun, singular when one.
func counted(_ count: Int, _ noun: String) -> String {
    count == 1 ? "1 \(noun)" : "\(count) \(noun)s"
}

func isValidStoreID(_ id: String) -> Bool { StoreLocation.isValidStoreID(id) }

/// What an errno from a mount means for the value being written, in the store's terms.
func explain(_ code: Int32) -> String {
    let system = String(cString: strerror(code))
    switch code {
    case EFBIG: return "\(system): the value is over the per-value quota"
    case EDQUOT: return "\(system): the store's byte quota would be exceeded, or your disk quota on the mount's data directory is spent"
    case ENOSPC: return "\(system): the store already holds its maximum number of keys, or the disk holding the mount's data directory is full"
    case ENAMETOOLONG: return "\(system): the key name is over the key-length quota"
    case EINVAL: return "\(system): the value is not a property list the store accepts"
    case EROFS: return "\(system): this mount may only read the store (its token is read-only)"
    default: return system
    }
}
