import Foundation

/// The store's write-ahead change journal, a file beside its database (`STORE.sqlite.changes`).
///
/// A commit is appended here with one `pwrite` before the store acknowledges it, and reaches
/// SQLite later, many commits to a transaction (`KeyValueStore` decides when). Once a write has
/// returned, its bytes are the kernel's: a crash of the process loses nothing, and the next open
/// replays the journal into the database. A SQLite commit, even unsynced, writes a 4 KiB page
/// for every change; this is one write of the change itself.
///
/// Format: records one after another, each `length: UInt32 LE`, `checksum: UInt64 LE` (FNV-1a
/// of the payload), then the payload: a row count and the rows (see `encodeRecord`). Reading
/// stops at the first record that is short or fails its checksum: a torn tail from a crash of
/// the machine.
package final class ChangeJournal {
    /// One key's change as it goes to the database: its value (nil: a tombstone), its stamp,
    /// where it stands with the remote, and its place in the store's commit order.
    package struct Row: Equatable {
        var key: String
        var entry: KeyValueStore.Entry?
        var stamp: ChangeStamp
        var syncState: SyncState
        var sequence: Int64
    }

    /// Past either, the store moves the journal into the database.
    static let flushRows = 256
    static let flushBytes = 1 << 20

    let path: String
    private let descriptor: Int32
    /// Where the next record goes: the end of the last good record.
    private var end: Int = 0
    /// Rows appended (or found at open) and not yet in the database, oldest first.
    private(set) var pending: [Row] = []

    /// Opens (creating if needed) the journal at `path`; rows it already holds, from a process
    /// that ended before moving them to the database, are in `pending`.
    init(path: String) throws(StoreError) {
        self.path = path
        let opened = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard opened >= 0 else { throw .database("cannot open the change journal \(path): \(String(cString: strerror(errno)))") }
        // A journal that cannot be read is not an empty one: it may hold acknowledged changes,
        // and the store empties the journal once it has replayed it. Refuse to open instead.
        let bytes: Data?
        do {
            bytes = try FileHandle(fileDescriptor: opened, closeOnDealloc: false).readToEnd()
        } catch {
            close(opened)
            throw .database("cannot read the change journal \(path): \(Self.reason(error))")
        }
        descriptor = opened
        (pending, end) = Self.decodeRecords([UInt8](bytes ?? Data()))
    }

    private static func reason(_ error: any Error) -> String {
        if let posix = (error as NSError).userInfo[NSUnderlyingErrorKey] as? NSError, posix.domain == NSPOSIXErrorDomain {
            return String(cString: strerror(Int32(posix.code)))
        }
        return error.localizedDescription
    }

    deinit { close(descriptor) }

    var needsFlush: Bool { pending.count >= Self.flushRows || end >= Self.flushBytes }

    /// Appends `rows` as one record. When this throws, the journal holds what it held before:
    /// a disk without room for the record is `diskFull`, and the next append tries again.
    func append(_ rows: [Row]) throws(StoreError) {
        let record = Self.encodeRecord(rows)
        // A file system short of room writes what fits, and says ENOSPC on the next call.
        var done = 0
        var failure: Int32 = 0
        record.withUnsafeBytes { bytes in
            while done < bytes.count {
                let written = pwrite(descriptor, bytes.baseAddress! + done, bytes.count - done, off_t(end + done))
                if written < 0, errno == EINTR { continue }
                guard written > 0 else {
                    failure = written < 0 ? errno : ENOSPC
                    return
                }
                done += written
            }
        }
        guard done == record.count else {
            _ = ftruncate(descriptor, off_t(end))  // no part of the record stays for a replay to read
            if let refusal = DiskRoom.refusal(errno: failure, path: path) { throw refusal }
            throw .database("cannot write the change journal \(path): \(String(cString: strerror(failure)))")
        }
        end += record.count
        pending += rows
    }

    /// The room `KeyValueStore.checkRoom` asks for besides a value's bytes: a record's fields
    /// (a few hundred bytes) and the blocks of the file system it may start, with some to
    /// spare for a value whose XML is longer than what was written.
    static let recordSlack = 16 * 1024

    /// Forgets the rows once the database has them. If the file cannot be emptied, later
    /// records follow the old ones, which a replay writes again to no effect (see `record`).
    func clear() {
        pending.removeAll(keepingCapacity: true)
        if ftruncate(descriptor, 0) == 0 { end = 0 }
    }

    // MARK: - Format

    package static func encodeRecord(_ rows: [Row]) -> [UInt8] {
        let header = 12  // length and checksum of the payload, filled in once it is written after them
        var record = [UInt8](repeating: 0, count: header)
        record.reserveCapacity(header + 4 + rows.reduce(0) { $0 + $1.key.utf8.count + ($1.entry?.xml.count ?? 0) + 64 })
        record.appendInteger(UInt32(rows.count))
        for row in rows {
            record.appendInteger(row.sequence)
            record.appendInteger(row.stamp.time)
            record.appendInteger(row.stamp.counter)
            record.appendBytes(Array(row.stamp.device.utf8))
            record.appendBytes(Array(row.syncState.rawValue.utf8))
            record.appendBytes(Array(row.key.utf8))
            if let entry = row.entry {
                record.append(1)
                record.appendBytes(Array(entry.type.rawValue.utf8))
                record.appendBytes(entry.xml)
            } else {
                record.append(0)
            }
        }
        var fields = [UInt8]()
        fields.appendInteger(UInt32(record.count - header))
        fields.appendInteger(checksum(record[header...]))
        record.replaceSubrange(0..<header, with: fields)
        return record
    }

    /// The rows of every good record from the start, and where the good records end.
    package static func decodeRecords(_ bytes: [UInt8]) -> (rows: [Row], end: Int) {
        var rows = [Row]()
        var reader = ByteReader(bytes: bytes)
        var end = 0
        while let length = reader.integer(UInt32.self), let sum = reader.integer(UInt64.self),
              let payload = reader.bytes(count: Int(length)), checksum(payload) == sum,
              let decoded = decodePayload(payload) {
            rows += decoded
            end = reader.position
        }
        return (rows, end)
    }

    private static func decodePayload(_ payload: ArraySlice<UInt8>) -> [Row]? {
        var reader = ByteReader(bytes: payload)
        guard let count = reader.integer(UInt32.self) else { return nil }
        var rows = [Row]()
        for _ in 0..<count {
            guard let sequence = reader.integer(Int64.self), let time = reader.integer(Int64.self),
                  let counter = reader.integer(Int32.self), let device = reader.string(),
                  let syncState = reader.string().flatMap(SyncState.init(rawValue:)),
                  let key = reader.string(), let hasValue = reader.integer(UInt8.self) else { return nil }
            let stamp = ChangeStamp(time: time, counter: counter, device: device)
            var entry: KeyValueStore.Entry?
            if hasValue == 1 {
                guard let type = reader.string().flatMap(ValueType.init(rawValue:)), let xml = reader.lengthPrefixed() else { return nil }
                entry = KeyValueStore.Entry(key: key, xml: Array(xml), type: type, modifiedAt: stamp.date)
            } else if hasValue != 0 {
                return nil
            }
            rows.append(Row(key: key, entry: entry, stamp: stamp, syncState: syncState, sequence: sequence))
        }
        return reader.atEnd ? rows : nil
    }

    /// FNV-1a, 64 bits.
    package static func checksum<Bytes: Collection<UInt8>>(_ bytes: Bytes) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3 }
        return hash
    }
}

/// Reads the journal's little-endian fields; nil past the end.
private struct ByteReader<Bytes: RandomAccessCollection<UInt8>> where Bytes.Index == Int {
    let bytes: Bytes
    private var offset: Int

    init(bytes: Bytes) {
        self.bytes = bytes
        offset = bytes.startIndex
    }

    /// How far reading has come, from the start of the bytes.
    var position: Int { offset - bytes.startIndex }
    var atEnd: Bool { offset == bytes.endIndex }

    mutating func integer<T: FixedWidthInteger>(_: T.Type) -> T? {
        guard let raw = bytes(count: MemoryLayout<T>.size) else { return nil }
        var value = T.zero
        for (shift, byte) in raw.enumerated() { value |= T(truncatingIfNeeded: byte) << (8 * shift) }
        return value
    }

    mutating func bytes(count: Int) -> Bytes.SubSequence? {
        guard count >= 0, bytes.endIndex - offset >= count else { return nil }
        defer { offset += count }
        let slice = bytes[offset..<offset + count]
        return slice
    }

    mutating func lengthPrefixed() -> Bytes.SubSequence? {
        integer(UInt32.self).flatMap { bytes(count: Int($0)) }
    }

    mutating func string() -> String? {
        lengthPrefixed().flatMap { String(validating: $0, as: UTF8.self) }
    }
}

private extension Array<UInt8> {
    mutating func appendInteger<T: FixedWidthInteger>(_ value: T) {
        for shift in 0..<MemoryLayout<T>.size { append(UInt8(truncatingIfNeeded: value >> (8 * shift))) }
    }

    mutating func appendBytes(_ bytes: [UInt8]) {
        appendInteger(UInt32(bytes.count))
        append(contentsOf: bytes)
    }
}
