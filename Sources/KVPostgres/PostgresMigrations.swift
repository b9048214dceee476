import Foundation
import Logging
import PostgresNIO

/// One step of the PostgreSQL schema, applied once, in a transaction of its own that also
/// records its name in `kvsfs_migration`.
///
/// Migrations are only ever appended: a released one is never edited, renamed or removed, as
/// databases record it as applied by its name.
struct PostgresMigration: Sendable {
    let name: String
    let apply: @Sendable (PostgresConnection, Logger) async throws -> Void
}

/// The schema as its migrations, and how a database is brought up to date.
enum PostgresSchema {
    static let migrations: [PostgresMigration] = [
        PostgresMigration(name: "v1 stores, their latest changes, settings, accounts and tokens") { db, logger in
            for statement in [
                "CREATE TABLE kvsfs_setting (name text PRIMARY KEY, value text NOT NULL)",
                """
                CREATE TABLE kvsfs_store (
                    id text PRIMARY KEY, cursor bigint NOT NULL, bytes bigint NOT NULL, keys bigint NOT NULL,
                    total_bytes bigint NOT NULL, value_bytes bigint NOT NULL, max_keys bigint NOT NULL, key_name_bytes bigint NOT NULL)
                """,
                """
                CREATE TABLE kvsfs_change (
                    store text NOT NULL REFERENCES kvsfs_store ON DELETE CASCADE, key text NOT NULL, value bytea, type text,
                    time bigint NOT NULL, counter integer NOT NULL, device text NOT NULL, cursor bigint NOT NULL,
                    PRIMARY KEY (store, key), CHECK ((value IS NULL) = (type IS NULL)))
                """,
                "CREATE UNIQUE INDEX kvsfs_change_by_cursor ON kvsfs_change (store, cursor)",
                "CREATE TABLE kvsfs_account (name text PRIMARY KEY, created_at timestamptz NOT NULL)",
                """
                CREATE TABLE kvsfs_token (
                    id text PRIMARY KEY, account text NOT NULL REFERENCES kvsfs_account ON DELETE CASCADE,
                    secret_hash text NOT NULL UNIQUE, store text, read_only boolean NOT NULL,
                    created_at timestamptz NOT NULL, revoked_at timestamptz)
                """,
            ] {
                try await db.query(PostgresQuery(unsafeSQL: statement), logger: logger)
            }
            try await db.query("INSERT INTO kvsfs_setting (name, value) VALUES ('identity', \(UUID().uuidString.lowercased()))",
                               logger: logger)
        },
        PostgresMigration(name: "v2 key history") { db, logger in
            for statement in [
                // The policy's defaults as `HistoryPolicy.standard` had them when this was written;
                // history_swept_at: when removed keys' histories were last dropped (ms since 1970).
                """
                ALTER TABLE kvsfs_store
                    ADD COLUMN history_versions integer NOT NULL DEFAULT 16 CHECK (history_versions BETWEEN 1 AND 1000),
                    ADD COLUMN history_days integer NOT NULL DEFAULT 30 CHECK (history_days BETWEEN 0 AND 3650),
                    ADD COLUMN history_swept_at bigint NOT NULL DEFAULT 0
                """,
                // accepted_at: when this database accepted the change (ms since 1970, the
                // accepting instance's clock), what a removal's retention counts from.
                """
                CREATE TABLE kvsfs_version (
                    store text NOT NULL REFERENCES kvsfs_store ON DELETE CASCADE, key text NOT NULL, cursor bigint NOT NULL,
                    value bytea, type text, time bigint NOT NULL, counter integer NOT NULL, device text NOT NULL,
                    accepted_at bigint NOT NULL,
                    PRIMARY KEY (store, key, cursor), CHECK ((value IS NULL) = (type IS NULL)))
                """,
                // Each key's latest change is the first version its history holds; when it was
                // accepted is not known, its stamp's time stands for it.
                """
                INSERT INTO kvsfs_version (store, key, cursor, value, type, time, counter, device, accepted_at)
                SELECT store, key, cursor, value, type, time, counter, device, time FROM kvsfs_change
                """,
            ] {
                try await db.query(PostgresQuery(unsafeSQL: statement), logger: logger)
            }
        },
        PostgresMigration(name: "v3 kept conflicts") { db, logger in
            // Each key's open conflict: the change that lost to its latest one (ConflictRule).
            for statement in [
                """
                ALTER TABLE kvsfs_change ADD COLUMN lost_value bytea, ADD COLUMN lost_type text, ADD COLUMN lost_time bigint,
                    ADD COLUMN lost_counter integer, ADD COLUMN lost_device text
                """,
                // An older instance writes a new change without these columns: what lost to the
                // change it replaced does not go with the new one.
                """
                CREATE FUNCTION kvsfs_lost_goes_with_its_winner() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF (NEW.time, NEW.counter, NEW.device) IS DISTINCT FROM (OLD.time, OLD.counter, OLD.device)
                       AND (NEW.lost_time, NEW.lost_counter, NEW.lost_device) IS NOT DISTINCT FROM
                           (OLD.lost_time, OLD.lost_counter, OLD.lost_device) THEN
                        NEW.lost_value := NULL; NEW.lost_type := NULL; NEW.lost_time := NULL;
                        NEW.lost_counter := NULL; NEW.lost_device := NULL;
                    END IF;
                    RETURN NEW;
                END $$
                """,
                """
                CREATE TRIGGER kvsfs_change_lost BEFORE UPDATE ON kvsfs_change
                    FOR EACH ROW EXECUTE FUNCTION kvsfs_lost_goes_with_its_winner()
                """,
            ] {
                try await db.query(PostgresQuery(unsafeSQL: statement), logger: logger)
            }
        },
        PostgresMigration(name: "v4 every change that lost") { db, logger in
            // The changes that lost after the newest (KeptChangeList), and the change they lost
            // to (lost_for_…): the newest keeps its columns, which an older instance reads and
            // writes.
            for statement in [
                """
                ALTER TABLE kvsfs_change ADD COLUMN also_lost bytea, ADD COLUMN lost_for_time bigint,
                    ADD COLUMN lost_for_counter integer, ADD COLUMN lost_for_device text
                """,
                """
                UPDATE kvsfs_change SET lost_for_time = time, lost_for_counter = counter, lost_for_device = device
                WHERE lost_device IS NOT NULL
                """,
                // A new change that says nothing of what lost (an older instance's) does not take
                // on the conflict of the one it replaced: the earlier changes that lost go, and so
                // does the newest when the writer left its columns as they were. This kvsfs names
                // the change a conflict goes with, and is never taken for such a writer.
                """
                CREATE OR REPLACE FUNCTION kvsfs_lost_goes_with_its_winner() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF (NEW.time, NEW.counter, NEW.device) IS DISTINCT FROM (OLD.time, OLD.counter, OLD.device)
                       AND (NEW.time, NEW.counter, NEW.device) IS DISTINCT FROM
                           (NEW.lost_for_time, NEW.lost_for_counter, NEW.lost_for_device) THEN
                        IF (NEW.lost_time, NEW.lost_counter, NEW.lost_device) IS NOT DISTINCT FROM
                           (OLD.lost_time, OLD.lost_counter, OLD.lost_device) THEN
                            NEW.lost_value := NULL; NEW.lost_type := NULL; NEW.lost_time := NULL;
                            NEW.lost_counter := NULL; NEW.lost_device := NULL;
                        END IF;
                        NEW.also_lost := NULL; NEW.lost_for_time := NULL; NEW.lost_for_counter := NULL; NEW.lost_for_device := NULL;
                    END IF;
                    RETURN NEW;
                END $$
                """,
            ] {
                try await db.query(PostgresQuery(unsafeSQL: statement), logger: logger)
            }
        },
        PostgresMigration(name: "v5 device names") { db, logger in
            // Per store, the name each device last gave (DeviceName), and when (milliseconds
            // since 1970): the least recently told go past DeviceName.keptPerStore.
            try await db.query("""
                CREATE TABLE kvsfs_device (store text NOT NULL REFERENCES kvsfs_store ON DELETE CASCADE, device text NOT NULL, name text NOT NULL, told bigint NOT NULL,
                                           PRIMARY KEY (store, device))
                """, logger: logger)
        },
        PostgresMigration(name: "v6 kept conflicts' bytes") { db, logger in
            // The bytes each store keeps for its keys' open conflicts (the newest change that
            // lost's value, and the list of the others as stored: KeptChangeList.storedBytes),
            // kept by statement triggers whatever writes a row (an older instance too): the
            // bound of CloudLedger.checkKeptBytes is checked against it at every push.
            let bytes = "coalesce(octet_length(lost_value), 0) + coalesce(octet_length(also_lost), 0)"
            for statement in [
                "ALTER TABLE kvsfs_store ADD COLUMN kept_bytes bigint NOT NULL DEFAULT 0",
                """
                UPDATE kvsfs_store s SET kept_bytes = k.bytes FROM (
                    SELECT store, sum(\(bytes)) AS bytes FROM kvsfs_change GROUP BY store) k
                WHERE s.id = k.store
                """,
                """
                CREATE FUNCTION kvsfs_change_kept_bytes() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF TG_OP = 'INSERT' THEN
                        UPDATE kvsfs_store s SET kept_bytes = s.kept_bytes + k.bytes
                        FROM (SELECT store, sum(\(bytes)) AS bytes FROM kvsfs_kept_new GROUP BY store) k WHERE s.id = k.store AND k.bytes <> 0;
                    ELSIF TG_OP = 'DELETE' THEN
                        UPDATE kvsfs_store s SET kept_bytes = s.kept_bytes - k.bytes
                        FROM (SELECT store, sum(\(bytes)) AS bytes FROM kvsfs_kept_old GROUP BY store) k WHERE s.id = k.store AND k.bytes <> 0;
                    ELSE
                        UPDATE kvsfs_store s SET kept_bytes = s.kept_bytes + k.bytes
                        FROM (SELECT store, sum(bytes) AS bytes FROM (
                                  SELECT store, \(bytes) AS bytes FROM kvsfs_kept_new
                                  UNION ALL SELECT store, -(\(bytes)) FROM kvsfs_kept_old) d GROUP BY store) k
                        WHERE s.id = k.store AND k.bytes <> 0;
                    END IF;
                    RETURN NULL;
                END $$
                """,
                """
                CREATE TRIGGER kvsfs_change_kept_in AFTER INSERT ON kvsfs_change REFERENCING NEW TABLE AS kvsfs_kept_new
                FOR EACH STATEMENT EXECUTE FUNCTION kvsfs_change_kept_bytes()
                """,
                """
                CREATE TRIGGER kvsfs_change_kept_moved AFTER UPDATE ON kvsfs_change
                REFERENCING OLD TABLE AS kvsfs_kept_old NEW TABLE AS kvsfs_kept_new
                FOR EACH STATEMENT EXECUTE FUNCTION kvsfs_change_kept_bytes()
                """,
                """
                CREATE TRIGGER kvsfs_change_kept_out AFTER DELETE ON kvsfs_change REFERENCING OLD TABLE AS kvsfs_kept_old
                FOR EACH STATEMENT EXECUTE FUNCTION kvsfs_change_kept_bytes()
                """,
            ] {
                try await db.query(PostgresQuery(unsafeSQL: statement), logger: logger)
            }
        },
        PostgresMigration(name: "v7 history's bytes") { db, logger in
            // The bytes of the values each store's versions hold, kept by statement triggers
            // whatever statement adds or drops versions (a trim, a sweep, an eviction, a store's
            // removal): the bound of HistoryPolicy.byteBound is checked against it at every push.
            for statement in [
                "ALTER TABLE kvsfs_store ADD COLUMN history_bytes bigint NOT NULL DEFAULT 0",
                """
                UPDATE kvsfs_store s SET history_bytes = v.bytes FROM (
                    SELECT store, sum(octet_length(value)) AS bytes FROM kvsfs_version WHERE value IS NOT NULL GROUP BY store) v
                WHERE s.id = v.store
                """,
                """
                CREATE FUNCTION kvsfs_version_bytes_in() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    UPDATE kvsfs_store s SET history_bytes = s.history_bytes + a.bytes FROM (
                        SELECT store, sum(octet_length(value)) AS bytes FROM kvsfs_added WHERE value IS NOT NULL GROUP BY store) a
                    WHERE s.id = a.store;
                    RETURN NULL;
                END $$
                """,
                """
                CREATE FUNCTION kvsfs_version_bytes_out() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    UPDATE kvsfs_store s SET history_bytes = s.history_bytes - d.bytes FROM (
                        SELECT store, sum(octet_length(value)) AS bytes FROM kvsfs_dropped WHERE value IS NOT NULL GROUP BY store) d
                    WHERE s.id = d.store;
                    RETURN NULL;
                END $$
                """,
                """
                CREATE TRIGGER kvsfs_version_bytes_in AFTER INSERT ON kvsfs_version REFERENCING NEW TABLE AS kvsfs_added
                FOR EACH STATEMENT EXECUTE FUNCTION kvsfs_version_bytes_in()
                """,
                """
                CREATE TRIGGER kvsfs_version_bytes_out AFTER DELETE ON kvsfs_version REFERENCING OLD TABLE AS kvsfs_dropped
                FOR EACH STATEMENT EXECUTE FUNCTION kvsfs_version_bytes_out()
                """,
            ] {
                try await db.query(PostgresQuery(unsafeSQL: statement), logger: logger)
            }
        },
        PostgresMigration(name: "v8 each change that lost in a row of its own") { db, logger in
            // Until now a key's changes that lost lived in its kvsfs_change row (lost_…, and the
            // others as one JSON list in also_lost): every push that lost rewrote the row with
            // the winner's value and every value kept, a flood of dead tuples. Now each is a row
            // of kvsfs_lost, named by its stamp, with the change it lost to (lost_for_…) and the
            // cursor it was kept at: a push that loses inserts its own row and touches neither
            // the key's row nor another loser's. A key's row is at the greatest of its cursor
            // and its losers' (the winner given again, ConflictRule), as every read takes it.
            //
            // The invariants, held here in the schema whoever writes (an older instance too):
            // a change that lost exists only beside its key's row (the foreign key, deferred
            // because an older writer's row brings its losers before it exists); those that lost
            // to another change than the key's go when the key's change is replaced
            // (kvsfs_lost_follows_its_winner), which the reads check again by lost_for_…; the
            // lost_… and also_lost columns stay empty (an older instance that fills them has
            // them moved here); kept_bytes is the sum of the rows' values (KeptLayout.rows, its
            // twin in Swift), counted by statement triggers.
            for statement in [
                """
                CREATE TABLE kvsfs_lost (
                    store text NOT NULL, key text NOT NULL, time bigint NOT NULL, counter integer NOT NULL, device text NOT NULL,
                    value bytea, type text, lost_for_time bigint NOT NULL, lost_for_counter integer NOT NULL,
                    lost_for_device text NOT NULL, cursor bigint NOT NULL,
                    PRIMARY KEY (store, key, time, counter, device), CHECK ((value IS NULL) = (type IS NULL)),
                    FOREIGN KEY (store, key) REFERENCES kvsfs_change ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED)
                """,
                "CREATE INDEX kvsfs_lost_by_cursor ON kvsfs_lost (store, cursor)",
                // The changes that lost a row's columns hold, moved into rows of their own (lost
                // to the row's change, kept at its cursor), each device's newest kept
                // (ConflictRule.losers). A list another program wrote that cannot be read is
                // left out with a warning in the server's log, as a read left it out before.
                """
                CREATE FUNCTION kvsfs_lost_take(c kvsfs_change) RETURNS void LANGUAGE plpgsql AS $$
                BEGIN
                    IF c.lost_time IS NOT NULL AND c.lost_counter IS NOT NULL AND c.lost_device IS NOT NULL
                       AND (c.lost_value IS NULL) = (c.lost_type IS NULL) THEN
                        INSERT INTO kvsfs_lost (store, key, time, counter, device, value, type,
                                                lost_for_time, lost_for_counter, lost_for_device, cursor)
                        VALUES (c.store, c.key, c.lost_time, c.lost_counter, c.lost_device, c.lost_value, c.lost_type,
                                c.time, c.counter, c.device, c.cursor)
                        ON CONFLICT (store, key, time, counter, device) DO UPDATE SET lost_for_time = excluded.lost_for_time,
                            lost_for_counter = excluded.lost_for_counter, lost_for_device = excluded.lost_for_device,
                            cursor = excluded.cursor;
                    ELSIF c.lost_time IS NOT NULL OR c.lost_device IS NOT NULL OR c.lost_value IS NOT NULL THEN
                        RAISE WARNING 'kvsfs: the change that lost to % of store % cannot be read: its stamp is not whole',
                            quote_literal(c.key), c.store;
                    END IF;
                    IF c.also_lost IS NOT NULL THEN
                        BEGIN
                            INSERT INTO kvsfs_lost (store, key, time, counter, device, value, type,
                                                    lost_for_time, lost_for_counter, lost_for_device, cursor)
                            SELECT c.store, c.key, (e->'stamp'->>'time')::bigint, (e->'stamp'->>'counter')::integer,
                                   e->'stamp'->>'device', decode(e->>'value', 'base64'), e->>'type',
                                   c.time, c.counter, c.device, c.cursor
                            FROM jsonb_array_elements(convert_from(c.also_lost, 'UTF8')::jsonb) e
                            ON CONFLICT DO NOTHING;
                        EXCEPTION WHEN others THEN
                            RAISE WARNING 'kvsfs: the earlier changes that lost to % of store % cannot be read: %',
                                quote_literal(c.key), c.store, SQLERRM;
                        END;
                    END IF;
                    DELETE FROM kvsfs_lost o USING kvsfs_lost n
                    WHERE o.store = c.store AND o.key = c.key AND n.store = o.store AND n.key = o.key AND n.device = o.device
                        AND (n.time, n.counter) > (o.time, o.counter);
                END $$
                """,
                """
                SELECT kvsfs_lost_take(c) FROM kvsfs_change c
                WHERE c.lost_time IS NOT NULL OR c.lost_device IS NOT NULL OR c.lost_value IS NOT NULL OR c.also_lost IS NOT NULL
                """,
                // The columns are empty from now on: v6's triggers that counted them go.
                "DROP TRIGGER kvsfs_change_kept_in ON kvsfs_change",
                "DROP TRIGGER kvsfs_change_kept_moved ON kvsfs_change",
                "DROP TRIGGER kvsfs_change_kept_out ON kvsfs_change",
                "DROP FUNCTION kvsfs_change_kept_bytes()",
                """
                UPDATE kvsfs_change SET lost_value = NULL, lost_type = NULL, lost_time = NULL, lost_counter = NULL, lost_device = NULL,
                    also_lost = NULL, lost_for_time = NULL, lost_for_counter = NULL, lost_for_device = NULL
                WHERE lost_time IS NOT NULL OR lost_counter IS NOT NULL OR lost_device IS NOT NULL OR lost_value IS NOT NULL
                    OR lost_type IS NOT NULL OR also_lost IS NOT NULL OR lost_for_time IS NOT NULL OR lost_for_counter IS NOT NULL
                    OR lost_for_device IS NOT NULL
                """,
                """
                UPDATE kvsfs_store s SET kept_bytes = coalesce(
                    (SELECT sum(octet_length(l.value)) FROM kvsfs_lost l WHERE l.store = s.id), 0)
                """,
                """
                CREATE FUNCTION kvsfs_lost_kept_bytes() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF TG_OP = 'INSERT' THEN
                        UPDATE kvsfs_store s SET kept_bytes = s.kept_bytes + k.bytes
                        FROM (SELECT store, sum(octet_length(value)) AS bytes FROM kvsfs_lost_new GROUP BY store) k
                        WHERE s.id = k.store AND k.bytes <> 0;
                    ELSIF TG_OP = 'DELETE' THEN
                        UPDATE kvsfs_store s SET kept_bytes = s.kept_bytes - k.bytes
                        FROM (SELECT store, sum(octet_length(value)) AS bytes FROM kvsfs_lost_old GROUP BY store) k
                        WHERE s.id = k.store AND k.bytes <> 0;
                    ELSE
                        UPDATE kvsfs_store s SET kept_bytes = s.kept_bytes + k.bytes
                        FROM (SELECT store, sum(bytes) AS bytes FROM (
                                  SELECT store, coalesce(octet_length(value), 0) AS bytes FROM kvsfs_lost_new
                                  UNION ALL SELECT store, -coalesce(octet_length(value), 0) FROM kvsfs_lost_old) d GROUP BY store) k
                        WHERE s.id = k.store AND k.bytes <> 0;
                    END IF;
                    RETURN NULL;
                END $$
                """,
                """
                CREATE TRIGGER kvsfs_lost_kept_in AFTER INSERT ON kvsfs_lost REFERENCING NEW TABLE AS kvsfs_lost_new
                FOR EACH STATEMENT EXECUTE FUNCTION kvsfs_lost_kept_bytes()
                """,
                """
                CREATE TRIGGER kvsfs_lost_kept_moved AFTER UPDATE ON kvsfs_lost
                REFERENCING OLD TABLE AS kvsfs_lost_old NEW TABLE AS kvsfs_lost_new
                FOR EACH STATEMENT EXECUTE FUNCTION kvsfs_lost_kept_bytes()
                """,
                """
                CREATE TRIGGER kvsfs_lost_kept_out AFTER DELETE ON kvsfs_lost REFERENCING OLD TABLE AS kvsfs_lost_old
                FOR EACH STATEMENT EXECUTE FUNCTION kvsfs_lost_kept_bytes()
                """,
                // Whoever writes a key's row: when its change is replaced, what lost to the one
                // before goes, but for what the writer names as lost to the new one (this kvsfs
                // writes the new change's losers after its row; an older instance knows nothing
                // of this table, and what it did not carry must not stay visible). What an older
                // instance writes into the row's columns is moved here. Named to fire after
                // v3's kvsfs_change_lost (triggers fire in the order of their names), which
                // empties the columns an older writer left as they were.
                """
                CREATE FUNCTION kvsfs_lost_follows_its_winner() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF TG_OP = 'UPDATE' AND (NEW.time, NEW.counter, NEW.device) IS DISTINCT FROM (OLD.time, OLD.counter, OLD.device) THEN
                        DELETE FROM kvsfs_lost WHERE store = NEW.store AND key = NEW.key
                            AND (lost_for_time, lost_for_counter, lost_for_device) IS DISTINCT FROM (NEW.time, NEW.counter, NEW.device);
                    END IF;
                    IF NEW.lost_time IS NOT NULL OR NEW.lost_counter IS NOT NULL OR NEW.lost_device IS NOT NULL
                       OR NEW.lost_value IS NOT NULL OR NEW.lost_type IS NOT NULL OR NEW.also_lost IS NOT NULL THEN
                        PERFORM kvsfs_lost_take(NEW);
                    END IF;
                    NEW.lost_value := NULL; NEW.lost_type := NULL; NEW.lost_time := NULL; NEW.lost_counter := NULL;
                    NEW.lost_device := NULL; NEW.also_lost := NULL;
                    NEW.lost_for_time := NULL; NEW.lost_for_counter := NULL; NEW.lost_for_device := NULL;
                    RETURN NEW;
                END $$
                """,
                """
                CREATE TRIGGER kvsfs_change_lost_moves BEFORE INSERT OR UPDATE ON kvsfs_change
                    FOR EACH ROW EXECUTE FUNCTION kvsfs_lost_follows_its_winner()
                """,
            ] {
                try await db.query(PostgresQuery(unsafeSQL: statement), logger: logger)
            }
        },
        PostgresMigration(name: "v9 store schemas") { db, logger in
            // Per store, its schema (RemoteSchema): the version, which each set or removal
            // moves on by one, and the text as it was set (NULL once removed); a store without
            // a row here never had one (version 0). The version is also the store row's
            // schema_version, written in the same transaction: a push reads it from the row it
            // locks, so that it sees the version committed before the lock was granted (its
            // other reads in that statement see the statement's snapshot). The bound is
            // SchemaLimits.bytes when written.
            for statement in [
                "ALTER TABLE kvsfs_store ADD COLUMN schema_version bigint NOT NULL DEFAULT 0 CHECK (schema_version >= 0)",
                """
                CREATE TABLE kvsfs_schema (
                    store text PRIMARY KEY REFERENCES kvsfs_store ON DELETE CASCADE, version bigint NOT NULL CHECK (version > 0),
                    text bytea CHECK (octet_length(text) <= 262144))
                """,
            ] {
                try await db.query(PostgresQuery(unsafeSQL: statement), logger: logger)
            }
        },
    ]

    /// The advisory lock under which instances starting together take turns (the key kvsfs
    /// took its schema's lock under before migrations were recorded, so that an instance of
    /// that release waits too).
    static let lockKey: Int64 = 72_017_001

    /// Applies the migrations `db`'s database has not recorded, in order, under the advisory
    /// lock; returns the names of those it applied.
    ///
    /// A database whose tables were made before migrations were recorded (`kvsfs_store`
    /// exists and `kvsfs_migration` did not) has exactly the first migration's schema: that
    /// one is recorded as applied, and its rows are left as they are. Names recorded that
    /// this release does not know (a newer one's) are left alone, so that an older instance
    /// goes on serving during an upgrade. `count`: how many of the migrations to bring it to
    /// (all but in tests, which make a database as an older release left it).
    @discardableResult
    static func migrate(_ db: PostgresConnection, logger: Logger, through count: Int = migrations.count) async throws -> [String] {
        // Held by the connection across the migrations' transactions (not by one of them);
        // closing the connection releases it too.
        try await db.query("SELECT pg_advisory_lock(\(lockKey))", logger: logger)
        let applied = try await db.withTransaction(logger: logger) { db in
            try await db.query("""
                CREATE TABLE IF NOT EXISTS kvsfs_migration (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())
                """, logger: logger)
            var recorded = Set<String>()
            for try await name in try await db.query("SELECT name FROM kvsfs_migration", logger: logger).decode(String.self) {
                recorded.insert(name)
            }
            if recorded.isEmpty, try await tableExists("kvsfs_store", db, logger) {
                try await record(migrations[0].name, db, logger)
                recorded.insert(migrations[0].name)
            }
            return recorded
        }
        var done = [String]()
        for migration in migrations.prefix(count) where !applied.contains(migration.name) {
            try await db.withTransaction(logger: logger) { db in
                try await migration.apply(db, logger)
                try await record(migration.name, db, logger)
            }
            done.append(migration.name)
        }
        try await db.query("SELECT pg_advisory_unlock(\(lockKey))", logger: logger)
        return done
    }

    private static func record(_ name: String, _ db: PostgresConnection, _ logger: Logger) async throws {
        try await db.query("INSERT INTO kvsfs_migration (name) VALUES (\(name))", logger: logger)
    }

    private static func tableExists(_ name: String, _ db: PostgresConnection, _ logger: Logger) async throws -> Bool {
        let rows = try await db.query("SELECT to_regclass(\(name)) IS NOT NULL", logger: logger)
        for try await exists in rows.decode(Bool.self) { return exists }
        return false
    }
}
