import Foundation
import GRDB
import KVStore

/// Cloud storage in one SQLite database (WAL), safe for several processes at once: every
/// push is one IMMEDIATE transaction (or shares one with the pushes of its group: `commit`),
/// and readers never block it.
///
/// A push is answered only once it is on disk: the connection that writes runs with
/// `synchronous = FULL`, under which SQLite in WAL mode flushes the log to disk at each commit
/// before the commit returns. (NORMAL, which GRDB's pool gives it, flushes only at
/// checkpoints: a power cut lost every push the remote had acknowledged since the last one.)
///
/// Tables: `cloudStore` (per store: the newest cursor, the usage, the limits, the history
/// policy), `cloudChange` (per store and key: the latest accepted change and the cursor it was
/// accepted at), `cloudVersion` (per store and key: the versions `HistoryPolicy` keeps, the
/// latest included), `cloudDevice` (per store, the names of its devices), `cloudSchema` (per
/// store, its schema and the schema's version: `RemoteSchema`), `cloudSetting` (the remote's
/// identity).
public final class SQLiteCloudStorage: CloudStorage {
    private let database: DatabasePool
    private let admission: AdmissionPolicy
    private let path: String
    /// The device and inode of the file opened: another file at `path` is another remote.
    private let file: (device: UInt64, inode: UInt64)
    /// The stores' schemas as last decoded, so that a push reads only the version.
    private let schemas = DecodedSchemas()

    /// Opens (creating if needed) the database at `path`, with at most `readers` connections
    /// reading at once (a mount needs few; a server's requests read in parallel). Pushes are
    /// admitted by `admission` (the stamp rule and its clock).
    public init(path: String, readers: Int = 2, admission: AdmissionPolicy = .standard) throws(CloudError) {
        self.admission = admission
        self.path = path
        var opened = (device: UInt64(0), inode: UInt64(0))
        do {
            var configuration = Configuration()
            configuration.busyMode = .timeout(10)
            configuration.maximumReaderCount = readers
            configuration.prepareDatabase { db in
                try db.execute(sql: "PRAGMA cache_size = -1024")  // KiB per connection
            }
            OwnerOnlyFile.create(path)
            database = try Self.openMigrated(path: path, configuration: configuration)
            // Read once the file is open: a file put at `path` later is not this one.
            guard let found = Self.fileID(path) else { throw CloudError.unavailable("\(path) went away as it was opened") }
            opened = found
        } catch let error as CloudError {
            throw error
        } catch {
            throw .unavailable("\(path): \(error)")
        }
        file = opened
    }

    /// The pool on `path`, durable and migrated. Several processes may open a fresh file at
    /// once (two mounts started together): one's switch to WAL finds the file locked, or one's
    /// migration fails on what another's made first (its transaction rolled back). Such an
    /// opener tries again, a few times within about two seconds, and finds the file ready.
    private static func openMigrated(path: String, configuration: Configuration) throws -> DatabasePool {
        var pause = 0.02
        var attempt = 1
        while true {
            do {
                let database = try DatabasePool(path: path, configuration: configuration)
                try commitDurably(database)
                try migrator.migrate(database)
                return database
            } catch let error as DatabaseError where attempt < 8 && (error.resultCode == .SQLITE_BUSY || error.resultCode == .SQLITE_ERROR) {
                Thread.sleep(forTimeInterval: pause)
                pause = min(pause * 2, 0.5)
                attempt += 1
            }
        }
    }

    /// Puts the pool's writer at `synchronous = FULL` (see above): after the pool is open, since
    /// its own set-up of WAL puts the writer at NORMAL, whatever `prepareDatabase` said. The
    /// one place for every SQLite file a remote commits to (the server's accounts too).
    package static func commitDurably(_ pool: DatabasePool) throws {
        try pool.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA synchronous = FULL") }
    }

    /// The file at `path` is not the one opened, or there is none: a remote replaced (restored
    /// by a move, a disk mounted again) is a new remote, whose identity the mount then checks.
    public var replaced: Bool {
        guard let now = Self.fileID(path) else { return true }
        return now != file
    }

    private static func fileID(_ path: String) -> (device: UInt64, inode: UInt64)? {
        var found = stat()
        guard stat(path, &found) == 0 else { return nil }
        return (UInt64(found.st_dev), UInt64(found.st_ino))
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1 stores, their latest changes, settings") { db in
            try db.create(table: "cloudStore", options: [.withoutRowID]) { t in
                t.primaryKey("id", .text)
                t.column("cursor", .integer).notNull()
                t.column("bytes", .integer).notNull()
                t.column("keys", .integer).notNull()
                t.column("totalBytes", .integer).notNull()
                t.column("valueBytes", .integer).notNull()
                t.column("maxKeys", .integer).notNull()
                t.column("keyNameBytes", .integer).notNull()
            }
            try db.create(table: "cloudChange", options: [.withoutRowID]) { t in
                t.column("store", .text).notNull()
                t.column("key", .text).notNull()
                t.column("value", .blob)
                t.column("type", .text)
                t.column("time", .integer).notNull()
                t.column("counter", .integer).notNull()
                t.column("device", .text).notNull()
                t.column("cursor", .integer).notNull()
                t.primaryKey(["store", "key"])
                t.check(sql: "(value IS NULL) = (type IS NULL)")
            }
            try db.create(index: "cloudChangeByCursor", on: "cloudChange", columns: ["store", "cursor"], unique: true)
            try db.create(table: "cloudSetting") { t in
                t.primaryKey("name", .text)
                t.column("value", .text).notNull()
            }
            try db.execute(sql: "INSERT INTO cloudSetting (name, value) VALUES ('identity', ?)", arguments: [UUID().uuidString.lowercased()])
        }
        migrator.registerMigration("v2 key history") { db in
            // Numbers, not HistoryPolicy's: a migration means the same for ever.
            try db.alter(table: "cloudStore") { t in
                t.add(column: "historyVersions", .integer).notNull().defaults(to: 16).check(sql: "historyVersions BETWEEN 1 AND 1000")
                t.add(column: "historyDays", .integer).notNull().defaults(to: 30).check(sql: "historyDays BETWEEN 0 AND 3650")
                // When removed keys' histories were last dropped (milliseconds since 1970).
                t.add(column: "historySweptAt", .integer).notNull().defaults(to: 0)
            }
            try db.create(table: "cloudVersion", options: [.withoutRowID]) { t in
                t.column("store", .text).notNull()
                t.column("key", .text).notNull()
                t.column("cursor", .integer).notNull()
                t.column("value", .blob)
                t.column("type", .text)
                t.column("time", .integer).notNull()
                t.column("counter", .integer).notNull()
                t.column("device", .text).notNull()
                // When this remote accepted it (milliseconds since 1970, its own clock).
                t.column("acceptedAt", .integer).notNull()
                t.primaryKey(["store", "key", "cursor"])
                t.check(sql: "(value IS NULL) = (type IS NULL)")
            }
            // Each key's latest change is the first version its history holds; when it was
            // accepted is not known, its stamp's time stands for it.
            try db.execute(sql: """
                INSERT INTO cloudVersion (store, key, cursor, value, type, time, counter, device, acceptedAt)
                SELECT store, key, cursor, value, type, time, counter, device, time FROM cloudChange
                """)
        }
        migrator.registerMigration("v3 kept conflicts") { db in
            // Each key's open conflict: the change that lost to its latest one (ConflictRule).
            try db.alter(table: "cloudChange") { t in
                t.add(column: "lostValue", .blob)
                t.add(column: "lostType", .text)
                t.add(column: "lostTime", .integer)
                t.add(column: "lostCounter", .integer)
                t.add(column: "lostDevice", .text)
            }
            // An older kvsfs sharing the file writes a new change without these columns: what
            // lost to the change it replaced does not go with the new one. (Replaced in v4.)
            try db.execute(sql: """
                CREATE TRIGGER cloudChangeLostGoesWithItsWinner AFTER UPDATE OF time, counter, device ON cloudChange
                WHEN NOT (NEW.time = OLD.time AND NEW.counter = OLD.counter AND NEW.device = OLD.device)
                    AND NEW.lostDevice IS NOT NULL AND NEW.lostTime IS OLD.lostTime AND NEW.lostCounter IS OLD.lostCounter
                    AND NEW.lostDevice IS OLD.lostDevice
                BEGIN
                    UPDATE cloudChange SET lostValue = NULL, lostType = NULL, lostTime = NULL, lostCounter = NULL, lostDevice = NULL
                    WHERE store = NEW.store AND key = NEW.key;
                END
                """)
        }
        migrator.registerMigration("v4 every change that lost") { db in
            // The changes that lost after the newest (KeptChangeList), and the change they lost
            // to (lostFor…): the newest keeps its columns, which an older kvsfs reads and writes.
            try db.alter(table: "cloudChange") { t in
                t.add(column: "alsoLost", .blob)
                t.add(column: "lostForTime", .integer)
                t.add(column: "lostForCounter", .integer)
                t.add(column: "lostForDevice", .text)
            }
            try db.execute(sql: """
                UPDATE cloudChange SET lostForTime = time, lostForCounter = counter, lostForDevice = device WHERE lostDevice IS NOT NULL;
                DROP TRIGGER cloudChangeLostGoesWithItsWinner;
                """)
            // A new change that says nothing of what lost (an older kvsfs's) does not take on
            // the conflict of the one it replaced: the earlier changes that lost go, and so
            // does the newest when the writer left its columns as they were. This kvsfs names
            // the change a conflict goes with, and is never taken for such a writer.
            let newestUntouched = "NEW.lostTime IS OLD.lostTime AND NEW.lostCounter IS OLD.lostCounter AND NEW.lostDevice IS OLD.lostDevice"
            try db.execute(sql: """
                CREATE TRIGGER cloudChangeLostGoesWithItsWinner AFTER UPDATE OF time, counter, device ON cloudChange
                WHEN NOT (NEW.time = OLD.time AND NEW.counter = OLD.counter AND NEW.device = OLD.device)
                    AND NOT (NEW.time IS NEW.lostForTime AND NEW.counter IS NEW.lostForCounter AND NEW.device IS NEW.lostForDevice)
                BEGIN
                    UPDATE cloudChange SET alsoLost = NULL, lostForTime = NULL, lostForCounter = NULL, lostForDevice = NULL,
                        lostValue = CASE WHEN \(newestUntouched) THEN NULL ELSE lostValue END,
                        lostType = CASE WHEN \(newestUntouched) THEN NULL ELSE lostType END,
                        lostTime = CASE WHEN \(newestUntouched) THEN NULL ELSE lostTime END,
                        lostCounter = CASE WHEN \(newestUntouched) THEN NULL ELSE lostCounter END,
                        lostDevice = CASE WHEN \(newestUntouched) THEN NULL ELSE lostDevice END
                    WHERE store = NEW.store AND key = NEW.key;
                END
                """)
        }
        migrator.registerMigration("v5 device names") { db in
            // Per store, the name each device last gave (DeviceName), and when it was told,
            // in the store's own sequence: those told longest ago go past DeviceName.keptPerStore.
            try db.create(table: "cloudDevice", options: [.withoutRowID]) { t in
                t.column("store", .text).notNull()
                t.column("device", .text).notNull()
                t.column("name", .text).notNull()
                t.column("told", .integer).notNull()
                t.primaryKey(["store", "device"])
            }
        }
        migrator.registerMigration("v6 kept conflicts' bytes") { db in
            // The bytes each store keeps for its keys' open conflicts (the newest change that
            // lost's value, and the list of the others as stored: KeptChangeList.storedBytes),
            // kept by triggers whatever writes a row (an older kvsfs sharing the file too): the
            // bound of CloudLedger.checkKeptBytes is checked against it at every push.
            let stored = "coalesce(length(%@.lostValue), 0) + coalesce(length(%@.alsoLost), 0)"
            func bytes(_ row: String) -> String { "(" + stored.replacingOccurrences(of: "%@", with: row) + ")" }
            try db.alter(table: "cloudStore") { t in t.add(column: "keptBytes", .integer).notNull().defaults(to: 0) }
            try db.execute(sql: """
                UPDATE cloudStore SET keptBytes = coalesce((SELECT sum(\(bytes("c"))) FROM cloudChange c WHERE c.store = cloudStore.id), 0);
                CREATE TRIGGER cloudChangeKeptIn AFTER INSERT ON cloudChange
                WHEN NEW.lostValue IS NOT NULL OR NEW.alsoLost IS NOT NULL BEGIN
                    UPDATE cloudStore SET keptBytes = keptBytes + \(bytes("NEW")) WHERE id = NEW.store;
                END;
                CREATE TRIGGER cloudChangeKeptOut AFTER DELETE ON cloudChange
                WHEN OLD.lostValue IS NOT NULL OR OLD.alsoLost IS NOT NULL BEGIN
                    UPDATE cloudStore SET keptBytes = keptBytes - \(bytes("OLD")) WHERE id = OLD.store;
                END;
                CREATE TRIGGER cloudChangeKeptMoved AFTER UPDATE OF lostValue, alsoLost ON cloudChange
                WHEN NEW.lostValue IS NOT OLD.lostValue OR NEW.alsoLost IS NOT OLD.alsoLost BEGIN
                    UPDATE cloudStore SET keptBytes = keptBytes + \(bytes("NEW")) - \(bytes("OLD")) WHERE id = NEW.store;
                END;
                """)
        }
        migrator.registerMigration("v7 history's bytes") { db in
            // The bytes of the values each store's versions hold, kept by triggers whatever
            // statement adds or drops a version (a trim, a sweep, an eviction): the bound of
            // HistoryPolicy.byteBound is checked against it at every push.
            try db.alter(table: "cloudStore") { t in t.add(column: "historyBytes", .integer).notNull().defaults(to: 0) }
            try db.execute(sql: """
                UPDATE cloudStore SET historyBytes = coalesce((SELECT sum(length(value)) FROM cloudVersion v WHERE v.store = cloudStore.id), 0);
                CREATE TRIGGER cloudVersionBytesIn AFTER INSERT ON cloudVersion WHEN NEW.value IS NOT NULL BEGIN
                    UPDATE cloudStore SET historyBytes = historyBytes + length(NEW.value) WHERE id = NEW.store;
                END;
                CREATE TRIGGER cloudVersionBytesOut AFTER DELETE ON cloudVersion WHEN OLD.value IS NOT NULL BEGIN
                    UPDATE cloudStore SET historyBytes = historyBytes - length(OLD.value) WHERE id = OLD.store;
                END;
                """)
        }
        migrator.registerMigration("v8 store schemas") { db in
            // Per store, its schema (RemoteSchema): the version, which each set or removal moves
            // on by one, and the text as it was set (NULL once removed). A store without a row
            // here never had one (version 0). The bound is SchemaLimits.bytes when written.
            try db.create(table: "cloudSchema", options: [.withoutRowID]) { t in
                t.primaryKey("store", .text)
                t.column("version", .integer).notNull().check(sql: "version > 0")
                t.column("text", .blob).check(sql: "text IS NULL OR length(text) <= 262144")
            }
        }
        return migrator
    }

    public func identity() throws(CloudError) -> String {
        try run { try self.database.read { db in try String.fetchOne(db, sql: "SELECT value FROM cloudSetting WHERE name = 'identity'") ?? "" } }
    }

    public func renewIdentity(replacing seen: String) throws(CloudError) -> Bool {
        try run {
            try self.database.write { db in
                try db.execute(sql: "UPDATE cloudSetting SET value = ? WHERE name = 'identity' AND value = ?",
                               arguments: [UUID().uuidString.lowercased(), seen])
                return db.changesCount > 0
            }
        }
    }

    /// A setting of the remote's own (`cloudSetting`), nil when unset: for what a program
    /// keeps beside the stores, such as a server's account generations.
    package func setting(_ name: String) throws(CloudError) -> String? {
        try run { try self.database.read { db in try String.fetchOne(db, sql: "SELECT value FROM cloudSetting WHERE name = ?", arguments: [name]) } }
    }

    package func setSetting(_ name: String, to value: String) throws(CloudError) {
        try run {
            try self.database.write { db in
                try db.execute(sql: "INSERT INTO cloudSetting (name, value) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                               arguments: [name, value])
            }
        }
    }

    /// Makes `store`'s row unless it has one, provided fewer than `limit` stores' names start
    /// with `prefix` (a server's account, `ACCOUNT.`); false, making nothing, otherwise. One
    /// IMMEDIATE transaction: no other writer of the file makes a store between the count and
    /// the row.
    package func makeStore(_ store: String, amongStoresStartingWith prefix: String, limit: Int) throws(CloudError) -> Bool {
        try StoreName.check(store)
        return try run {
            try self.database.write { db in
                if try Bool.fetchOne(db, sql: "SELECT 1 FROM cloudStore WHERE id = ?", arguments: [store]) ?? false { return true }
                // As a range of the primary key (ids compare as bytes): the ids that begin with
                // `prefix` are those from it up to it with its last byte one greater.
                var end = Array(prefix.utf8)
                if let last = end.popLast() { end.append(last &+ 1) }
                let held = try Int.fetchOne(db, sql: "SELECT count(*) FROM cloudStore WHERE id >= ? AND id < CAST(? AS TEXT)",
                                            arguments: [prefix, Data(end)]) ?? 0
                guard held < limit else { return false }
                _ = try Table(db: db, store: store)
                return true
            }
        }
    }

    public func push(_ changes: [StampedChange], to store: String, mark: HistoryMark?) throws(CloudError) -> PushOutcome {
        try StoreName.check(store)
        let admitted = ChangeAdmission.admit(changes, policy: admission)
        return try run { try self.database.write { db in try Self.push(admitted, to: store, mark: mark, schemas: self.schemas, db) } }
    }

    /// A push admitted (its changes checked against the change rule, its clock read), waiting
    /// to be committed with its group (`commit`).
    package struct AdmittedPush: Sendable {
        package let store: String
        package let admitted: Admission
        package let mark: HistoryMark?
    }

    /// Admits a push for `commit`.
    package func admit(_ changes: [StampedChange], to store: String, mark: HistoryMark?) throws(CloudError) -> AdmittedPush {
        try StoreName.check(store)
        return AdmittedPush(store: store, admitted: ChangeAdmission.admit(changes, policy: admission), mark: mark)
    }

    /// Commits `group` (`PushGroups`) as one transaction, one flush of the log to disk for all
    /// of its pushes, and answers each in order. Each push is decided in a savepoint of its own
    /// against the rows the pushes before it left: one that is refused (its mark does not fit)
    /// or fails in the database is rolled back alone and answered with its error, and the
    /// others commit. When the transaction fails (its commit, or an error on which SQLite rolls
    /// back the whole transaction, such as a full disk), every push gets that error: none was
    /// acknowledged. Suspends the caller while it waits for the writer, instead of blocking its
    /// thread: for a server, whose request tasks share as few threads as there are cores.
    package func commit(_ group: [AdmittedPush]) async -> [Result<PushOutcome, CloudError>] {
        do {
            return try await database.write { db in
                var results = [Result<PushOutcome, CloudError>]()
                for push in group {
                    var decided: PushOutcome?
                    do {
                        try db.inSavepoint {
                            decided = try Self.push(push.admitted, to: push.store, mark: push.mark, schemas: self.schemas, db)
                            return .commit
                        }
                    } catch {
                        // The pushes before this one went with the transaction: fail them all.
                        guard db.isInsideTransaction else { throw error }
                        results.append(.failure(Self.cloudError(error)))
                        continue
                    }
                    guard let decided else { throw CloudError.unavailable("a push of the group was not decided") }
                    results.append(.success(decided))
                }
                return results
            }
        } catch {
            let failure = Self.cloudError(error)
            return group.map { _ in .failure(failure) }
        }
    }

    /// The `synchronous` setting of the connection that commits pushes (2 is FULL): for tests,
    /// which cannot cut the power.
    package func commitSynchronous() throws(CloudError) -> Int {
        try run { try self.database.write { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 } }
    }

    /// Inside the push's transaction: the mark is checked against the rows the push decides by.
    private static func push(_ admission: Admission, to store: String, mark: HistoryMark?, schemas: DecodedSchemas,
                             _ db: Database) throws -> PushOutcome {
        let table = try Table(db: db, store: store)
        // A store made by this very transaction has cursor 0: a mark fails, and the push rolls back.
        if let mark { try mark.check(newest: table.state.cursor, held: try self.mark(in: store, key: mark.key, db)) }
        let (current, unreadable) = try table.current(admission.keys)
        var state = table.state
        state.schema = try schemas.schema(of: store, at: try schemaVersion(of: store, db)) { try schema(of: store, db).text }
        let versions = try table.versions(Set(admission.changes.filter { $0.condition != nil }.map(\.key)))
        let decision = CloudLedger.decide(admission, current: current, versions: versions, state: state, unreadable: unreadable)
        try table.apply(decision, current: current, now: admission.now)
        try keep(decision.outcome.deviceNames, in: store, db)
        return decision.outcome
    }

    /// Keeps the names a push's accepted changes give their devices. A name kept already as it
    /// is costs one lookup and writes nothing; a new or changed one is told after every other
    /// (`told`, the store's own sequence), and past `DeviceName.keptPerStore` names in the store,
    /// those told longest ago go.
    private static func keep(_ names: [String: String], in store: String, _ db: Database) throws {
        for (device, name) in names.sorted(by: { $0.key < $1.key }) {
            let kept = try String.fetchOne(db.cachedStatement(sql: "SELECT name FROM cloudDevice WHERE store = ? AND device = ?"),
                                           arguments: [store, device])
            guard kept != name else { continue }
            try db.cachedStatement(sql: """
                INSERT INTO cloudDevice (store, device, name, told)
                VALUES (?1, ?2, ?3, (SELECT coalesce(max(told), 0) + 1 FROM cloudDevice WHERE store = ?1))
                ON CONFLICT (store, device) DO UPDATE SET name = excluded.name, told = excluded.told
                """).execute(arguments: [store, device, name])
            try db.cachedStatement(sql: """
                DELETE FROM cloudDevice WHERE store = ?1 AND device IN (
                    SELECT device FROM cloudDevice WHERE store = ?1 ORDER BY told DESC LIMIT -1 OFFSET ?2)
                """).execute(arguments: [store, DeviceName.keptPerStore])
        }
    }

    /// The names kept of `devices` in `store`; one outside the rule (written by another
    /// program) is not shown.
    private static func names(of devices: some Sequence<String>, in store: String, _ db: Database) throws -> [String: String] {
        var names: [String: String] = [:]
        for device in Set(devices) {
            let name = try String.fetchOne(db.cachedStatement(sql: "SELECT name FROM cloudDevice WHERE store = ? AND device = ?"),
                                           arguments: [store, device])
            if let name, DeviceName.isValid(name) { names[device] = name }
        }
        return names
    }

    /// Throws a history mismatch unless `store`'s rows fit `mark`.
    private static func check(_ mark: HistoryMark?, in store: String, _ db: Database) throws {
        guard let mark else { return }
        try mark.check(newest: try cursor(of: store, db), held: try self.mark(in: store, key: mark.key, db))
    }

    public func changes(in store: String, after cursor: Int64, mark: HistoryMark?, limit: Int) throws(CloudError) -> ChangeBatch {
        try StoreName.check(store)
        return try run {
            // One statement reads a consistent snapshot by itself; with a mark to check first,
            // the check and the read share one.
            let read = { (db: Database) throws -> ChangeBatch in
                try Self.check(mark, in: store, db)
                let rows = try Row.fetchAll(db.cachedStatement(sql: """
                    SELECT CAST(key AS BLOB) AS key, value, type, time, counter, device, cursor,
                           lostValue, lostType, lostTime, lostCounter, CAST(lostDevice AS BLOB) AS lostDevice, alsoLost
                    FROM cloudChange WHERE store = ? AND cursor > ? ORDER BY cursor LIMIT ?
                    """), arguments: [store, cursor, limit + 1])
                if rows.isEmpty {
                    // Past the store's newest change: asked by a reader that saw another history.
                    let newest = try Self.cursor(of: store, db)
                    if cursor > newest { throw CloudError.cursorAhead(asked: cursor, store: newest) }
                }
                var batch = ChangeBatch(changes: [], cursor: cursor, complete: rows.count <= limit)
                for row in rows.prefix(limit) {
                    batch.cursor = try row.decode(forColumn: "cursor")
                    do {
                        var change = try Self.change(row)
                        do {
                            change.lost = try Self.lost(row)
                        } catch {
                            // The change goes on without it: a broken conflict never holds its winner back.
                            batch.unreadable.append("the conflict kept with the row at cursor \(batch.cursor) cannot be read: \(error)")
                        }
                        batch.changes.append(change)
                        batch.mark = HistoryMark(key: change.key, cursor: batch.cursor, stamp: change.stamp)
                    } catch {
                        batch.mark = nil
                        // Passed on, not dropped: the reader reports it and goes on past it.
                        batch.unreadable.append("the row at cursor \(batch.cursor) cannot be read: \(error)")
                    }
                }
                batch.devices = try Self.names(of: batch.deviceIDs, in: store, db)
                batch.schemaVersion = try Self.schemaVersion(of: store, db)
                return batch
            }
            return try mark == nil ? self.database.unsafeRead(read) : self.database.read(read)
        }
    }

    public func cursor(of store: String) throws(CloudError) -> Int64 {
        try StoreName.check(store)
        return try run { try self.database.unsafeRead { db in try Self.cursor(of: store, db) } }
    }

    private static func cursor(of store: String, _ db: Database) throws -> Int64 {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT cursor FROM cloudStore WHERE id = ?"), arguments: [store]) ?? 0
    }

    /// The store's row for `key` as a mark (its latest change and the cursor it was accepted
    /// at), nil when it has none: what a reader's `HistoryMark` is checked against.
    public func mark(in store: String, key: String) throws(CloudError) -> HistoryMark? {
        try StoreName.check(store)
        return try run { try self.database.unsafeRead { db in try Self.mark(in: store, key: key, db) } }
    }

    private static func mark(in store: String, key: String, _ db: Database) throws -> HistoryMark? {
        // The key as bytes: GRDB binds text only up to a NUL, which a key may hold.
        let row = try Row.fetchOne(db.cachedStatement(sql: """
            SELECT time, counter, CAST(device AS BLOB) AS device, cursor FROM cloudChange
            WHERE store = ? AND key = CAST(? AS TEXT)
            """), arguments: [store, Data(key.utf8)])
        guard let row else { return nil }
        let device: Data = try row.decode(forColumn: "device")
        // A device id that is not UTF-8 still names another change than any mark does.
        let stamp = ChangeStamp(time: try row.decode(forColumn: "time"), counter: try row.decode(forColumn: "counter"),
                                device: String(decoding: device, as: UTF8.self))
        return HistoryMark(key: key, cursor: try row.decode(forColumn: "cursor"), stamp: stamp)
    }

    public func history(of key: String, in store: String) throws(CloudError) -> [KeyVersion] {
        try shown(key, in: store, valueOf: nil)
    }

    public func version(_ version: Int64, of key: String, in store: String) throws(CloudError) -> KeyVersion? {
        try shown(key, in: store, valueOf: version).first { $0.version == version }
    }

    /// The versions of `key` the store's policy shows, newest first, with the value of the one
    /// at cursor `valued` only (values are read for no other).
    private func shown(_ key: String, in store: String, valueOf valued: Int64?) throws(CloudError) -> [KeyVersion] {
        try StoreName.check(store)
        let key = try HistoryPolicy.requestedKey(key)
        let now = admission.now()
        return try run {
            try self.database.read { db in
                guard let policy = try Table.historyPolicy(db: db, store: store) else { return [] }
                let versions = try Self.versions(of: key, in: store, limit: policy.versions, valueOf: valued, db)
                guard let latest = versions.first, policy.keeps(latest: latest, now: now) else { return [] }
                return versions.named(by: try Self.names(of: versions.map(\.stamp.device), in: store, db))
            }
        }
    }

    /// The newest `limit` versions of `key`, newest first; a row that cannot be read fails the
    /// whole answer with its reason. The key's latest change counts as its newest version when
    /// no version row holds it (by stamp: a row given again with a conflict moved to a new
    /// cursor): an older kvsfs sharing the file records none (its acceptance time unknown, its
    /// stamp's stands for it).
    private static func versions(of key: String, in store: String, limit: Int, valueOf valued: Int64?,
                                 _ db: Database) throws -> [KeyVersion] {
        let rows = try Row.fetchAll(db.cachedStatement(sql: """
            SELECT * FROM (
                SELECT cursor, CASE WHEN cursor = ?3 THEN value END AS value, length(value) AS size, type, time, counter,
                       CAST(device AS BLOB) AS device, acceptedAt
                FROM cloudVersion WHERE store = ?1 AND key = CAST(?2 AS TEXT)
                UNION ALL
                SELECT cursor, CASE WHEN cursor = ?3 THEN value END, length(value), type, time, counter, CAST(device AS BLOB), time
                FROM cloudChange c WHERE store = ?1 AND key = CAST(?2 AS TEXT) AND NOT EXISTS (
                    SELECT 1 FROM cloudVersion v WHERE v.store = ?1 AND v.key = CAST(?2 AS TEXT)
                        AND v.time = c.time AND v.counter = c.counter AND v.device = c.device))
            ORDER BY cursor DESC LIMIT ?4
            """), arguments: [store, Data(key.utf8), valued ?? 0, limit])
        return try rows.map { row in
            let cursor: Int64 = try row.decode(forColumn: "cursor")
            do {
                return try version(row, valued: cursor == valued)
            } catch {
                throw CloudError.unavailable("the version at cursor \(cursor) of \(key.debugDescription) cannot be read: \(error)")
            }
        }
    }

    public func historyPolicy(of store: String) throws(CloudError) -> HistoryPolicy {
        try StoreName.check(store)
        return try run { try self.database.read { db in try Table.historyPolicy(db: db, store: store) ?? .standard } }
    }

    public func changeHistoryPolicy(_ change: HistoryPolicyChange, of store: String) throws(CloudError) -> HistoryPolicy {
        try StoreName.check(store)
        try change.check()
        return try run {
            try self.database.write { db in
                // Over the stored policy unchecked: a broken one is mended by naming its broken parts.
                let policy = change.applied(to: try Table(db: db, store: store).storedHistory)
                try policy.check()
                try db.execute(sql: "UPDATE cloudStore SET historyVersions = ?, historyDays = ? WHERE id = ?",
                               arguments: [policy.versions, policy.retentionDays, store])
                return policy
            }
        }
    }

    public func schema(of store: String) throws(CloudError) -> RemoteSchema {
        try StoreName.check(store)
        return try run { try self.database.read { db in try Self.schema(of: store, db) } }
    }

    /// Makes the store as a first push does; in one IMMEDIATE transaction with the check of
    /// `ifVersion`, so that each push is judged by the schema before it or after it.
    public func setSchema(_ text: [UInt8]?, of store: String, ifVersion: Int64?) throws(CloudError) -> RemoteSchema {
        try StoreName.check(store)
        _ = try SchemaAdmission.admit(text)
        return try run {
            try self.database.write { db in
                _ = try Table(db: db, store: store)
                let current = try Self.schemaVersion(of: store, db)
                try SchemaAdmission.check(ifVersion, current: current)
                let set = RemoteSchema(version: current + 1, text: text)
                try db.execute(sql: """
                    INSERT INTO cloudSchema (store, version, text) VALUES (?, ?, ?)
                    ON CONFLICT (store) DO UPDATE SET version = excluded.version, text = excluded.text
                    """, arguments: [store, set.version, text.map { Data($0) }])
                return set
            }
        }
    }

    private static func schemaVersion(of store: String, _ db: Database) throws -> Int64 {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT version FROM cloudSchema WHERE store = ?"), arguments: [store]) ?? 0
    }

    private static func schema(of store: String, _ db: Database) throws -> RemoteSchema {
        guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT version, text FROM cloudSchema WHERE store = ?"),
                                         arguments: [store]) else { return .none }
        let text: Data? = try row.decode(forColumn: "text")
        return RemoteSchema(version: try row.decode(forColumn: "version"), text: text.map { [UInt8]($0) })
    }

    public func limits(of store: String) throws(CloudError) -> QuotaLimits {
        try StoreName.check(store)
        return try run { try self.database.read { db in try Table.limits(db: db, store: store) ?? .modelled } }
    }

    public func setLimits(_ limits: QuotaLimits, of store: String) throws(CloudError) {
        try StoreName.check(store)
        try run {
            try self.database.write { db in
                _ = try Table(db: db, store: store)
                try db.execute(sql: """
                    UPDATE cloudStore SET totalBytes = ?, valueBytes = ?, maxKeys = ?, keyNameBytes = ? WHERE id = ?
                    """, arguments: [limits.totalBytes, limits.valueBytes, limits.keys, limits.keyNameBytes, store])
            }
        }
    }

    private func run<T>(_ body: () throws -> T) throws(CloudError) -> T {
        do {
            return try body()
        } catch {
            throw Self.cloudError(error)
        }
    }

    /// `error` as the remote's: one of its own as it is, the database's as unavailable.
    private static func cloudError(_ error: any Error) -> CloudError {
        (error as? CloudError) ?? .unavailable(String(describing: error))
    }
}
