//! Ordered schema steps, one list per engine, side by side and numbered alike: step N of
//! [`migrations`] (SQLite, tracked in `user_version` by `rusqlite_migration`) and step N of
//! [`POSTGRES`] (tracked in the one-row `schema_version` table by [`migrate_postgres`]) make the
//! same schema. Never edit a step that has shipped; add a new one at the end of **both** lists
//! (`both_engines_have_every_step` checks the counts).

use rusqlite_migration::{M, Migrations};

use super::DbError;
use super::engine::{Conn, args};

/// The schema, step by step (SQLite).
pub(crate) fn migrations() -> Migrations<'static> {
    Migrations::new(SQLITE.iter().map(|step| M::up(step)).collect())
}

/// The SQLite steps.
const SQLITE: &[&str] = &[
    r#"
CREATE TABLE nodes (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL UNIQUE,
    driver TEXT NOT NULL,
    driver_info TEXT NOT NULL DEFAULT '{}',
    properties TEXT NOT NULL DEFAULT '{}',
    instance_info TEXT NOT NULL DEFAULT '{}',
    driver_internal_info TEXT NOT NULL DEFAULT '{}',
    extra TEXT NOT NULL DEFAULT '{}',
    boot_interface TEXT NOT NULL,
    deploy_interface TEXT NOT NULL,
    power_state TEXT,
    target_power_state TEXT,
    provision_state TEXT NOT NULL,
    target_provision_state TEXT,
    maintenance INTEGER NOT NULL DEFAULT 0,
    maintenance_reason TEXT,
    last_error TEXT,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
    updated_at TEXT
) STRICT;

CREATE TABLE ports (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    node_id INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    address TEXT NOT NULL UNIQUE,
    extra TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
    updated_at TEXT
) STRICT;
CREATE INDEX ports_node ON ports(node_id);

CREATE TABLE volume_connectors (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    node_id INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    type TEXT NOT NULL,
    connector_id TEXT NOT NULL,
    extra TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
    updated_at TEXT,
    UNIQUE (type, connector_id)
) STRICT;
CREATE INDEX volume_connectors_node ON volume_connectors(node_id);

CREATE TABLE volume_targets (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    node_id INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    volume_type TEXT NOT NULL,
    boot_index INTEGER NOT NULL CHECK (boot_index >= 0),
    volume_id TEXT NOT NULL,
    properties TEXT NOT NULL DEFAULT '{}',
    extra TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
    updated_at TEXT,
    UNIQUE (node_id, boot_index)
) STRICT;
CREATE INDEX volume_targets_node ON volume_targets(node_id);
"#,
    // The spec's data-model change, as its own step: the column starts empty for every
    // existing node, with no implied default; the configured default applies at read time.
    "ALTER TABLE nodes ADD COLUMN storage_interface TEXT;",
    // Cinder attachments, one record per volume target, so that a crash between two steps
    // of an attach or detach is finished or undone at the next start; and events.
    r#"
CREATE TABLE volume_attachments (
    id INTEGER PRIMARY KEY,
    node_uuid TEXT NOT NULL,
    target_uuid TEXT NOT NULL UNIQUE,
    volume_id TEXT NOT NULL,
    api TEXT NOT NULL,
    attachment_id TEXT,
    state TEXT NOT NULL,
    step TEXT NOT NULL,
    connector TEXT NOT NULL DEFAULT '{}',
    last_error TEXT,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
    updated_at TEXT
) STRICT;
CREATE INDEX volume_attachments_node ON volume_attachments(node_uuid);

CREATE TABLE events (
    id INTEGER PRIMARY KEY,
    node_uuid TEXT,
    event_type TEXT NOT NULL,
    level TEXT NOT NULL,
    payload TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'))
) STRICT;
CREATE INDEX events_node ON events(node_uuid, id);

CREATE TABLE node_locks (
    node_uuid TEXT PRIMARY KEY,
    action TEXT NOT NULL,
    pid INTEGER NOT NULL,
    process_start TEXT NOT NULL,
    acquired_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now'))
) STRICT;
"#,
    // Webhook delivery state of events (an outbox: delivery never blocks an action).
    r#"
ALTER TABLE events ADD COLUMN delivery TEXT NOT NULL DEFAULT 'pending';
ALTER TABLE events ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN next_attempt_at INTEGER NOT NULL DEFAULT 0;
CREATE INDEX events_delivery ON events(delivery, next_attempt_at);
"#,
    // The outcome of the last Cinder sync pass, whichever process ran it: one row, replaced
    // by every pass. Times are Unix seconds; `last_ok_at` survives passes that had errors.
    r#"
CREATE TABLE sync_status (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    ran_by TEXT NOT NULL CHECK (ran_by IN ('serve', 'cli')),
    started_at INTEGER NOT NULL,
    finished_at INTEGER NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'partial', 'failed')),
    checked INTEGER NOT NULL DEFAULT 0,
    updated INTEGER NOT NULL DEFAULT 0,
    drifted INTEGER NOT NULL DEFAULT 0,
    errors INTEGER NOT NULL DEFAULT 0,
    message TEXT NOT NULL DEFAULT '',
    last_ok_at INTEGER
) STRICT;
"#,
    // Locks held by actions, not processes: the instance (host) and a random nonce name the
    // action; a live action renews its lease. Rows of older versions keep '' and 0 and are
    // judged by their process alone.
    r#"
ALTER TABLE node_locks ADD COLUMN instance_id TEXT NOT NULL DEFAULT '';
ALTER TABLE node_locks ADD COLUMN nonce TEXT NOT NULL DEFAULT '';
ALTER TABLE node_locks ADD COLUMN lease_expires_at INTEGER NOT NULL DEFAULT 0;
"#,
    // The admin page's session signing key (hex), kept so sessions survive a restart, and
    // the sessions logged out before their end (a restart must not revive them).
    r#"
CREATE TABLE admin_keys (
    name TEXT PRIMARY KEY,
    key TEXT NOT NULL
) STRICT;
CREATE TABLE admin_logouts (
    session TEXT PRIMARY KEY,
    expires_at INTEGER NOT NULL
) STRICT;
"#,
    // An event repeated as it was (the same drift every sync pass) is counted on the first
    // one, with the time it was last seen.
    r#"
ALTER TABLE events ADD COLUMN repeats INTEGER NOT NULL DEFAULT 1;
ALTER TABLE events ADD COLUMN last_seen_at TEXT;
"#,
    // Ironic's node fields up to API 1.38: the instance a node is associated with (unique when
    // set), its resource class, the hardware interfaces beyond boot, deploy and storage (NULL:
    // the hardware type's default), and when the provision state last changed.
    r#"
ALTER TABLE nodes ADD COLUMN instance_uuid TEXT;
CREATE UNIQUE INDEX nodes_instance_uuid ON nodes(instance_uuid);
ALTER TABLE nodes ADD COLUMN resource_class TEXT;
ALTER TABLE nodes ADD COLUMN console_interface TEXT;
ALTER TABLE nodes ADD COLUMN inspect_interface TEXT;
ALTER TABLE nodes ADD COLUMN management_interface TEXT;
ALTER TABLE nodes ADD COLUMN network_interface TEXT;
ALTER TABLE nodes ADD COLUMN power_interface TEXT;
ALTER TABLE nodes ADD COLUMN raid_interface TEXT;
ALTER TABLE nodes ADD COLUMN rescue_interface TEXT;
ALTER TABLE nodes ADD COLUMN vendor_interface TEXT;
ALTER TABLE nodes ADD COLUMN provision_updated_at TEXT;
"#,
    // Ironic's port fields up to 1.38: PXE flag, switch connection, physical network, and
    // internal_info (where a VIF is recorded: tenant_vif_port_id).
    r#"
ALTER TABLE ports ADD COLUMN pxe_enabled INTEGER NOT NULL DEFAULT 1;
ALTER TABLE ports ADD COLUMN local_link_connection TEXT NOT NULL DEFAULT '{}';
ALTER TABLE ports ADD COLUMN physical_network TEXT;
ALTER TABLE ports ADD COLUMN internal_info TEXT NOT NULL DEFAULT '{}';
"#,
    // Node traits (API 1.37): one row per node and trait.
    r#"
CREATE TABLE node_traits (
    node_id INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    trait TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
    PRIMARY KEY (node_id, trait)
) STRICT;
"#,
    // Several instances on one database: the change log (`seq` from the one-row counter, in
    // commit order), the instances' registry (heartbeats) and leases of once-only work.
    r#"
CREATE TABLE change_counter (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    seq INTEGER NOT NULL
) STRICT;
INSERT INTO change_counter (id, seq) VALUES (1, 0);
CREATE TABLE change_log (
    seq INTEGER PRIMARY KEY,
    entity TEXT NOT NULL,
    key TEXT NOT NULL,
    op TEXT NOT NULL,
    at INTEGER NOT NULL
) STRICT;
CREATE TABLE instances (
    id TEXT PRIMARY KEY,
    boot_url TEXT NOT NULL,
    started_at INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL
) STRICT;
CREATE TABLE leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at INTEGER NOT NULL
) STRICT;
"#,
    // Each node's last probe of its boot target (`bootvol probe`, the admin page, the
    // background pass): when, how it ended, its summary and one line per target (JSON list).
    r#"
CREATE TABLE probe_results (
    node_id INTEGER PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
    probed_at INTEGER NOT NULL,
    status TEXT NOT NULL,
    summary TEXT NOT NULL,
    lines TEXT NOT NULL DEFAULT '[]'
) STRICT;
"#, // The rack-wide history of events (the admin page's `/admin/events`), newest first by type
    // or by level: each index ends in `id`, so a page is read in order, never sorted.
    r#"
CREATE INDEX events_type ON events(event_type, id);
CREATE INDEX events_level ON events(level, id);
"#,
    // Chassis (Ironic's grouping of nodes): a node refers to at most one; a chassis that nodes
    // refer to is not deleted.
    r#"
CREATE TABLE chassis (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    description TEXT,
    extra TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
    updated_at TEXT
) STRICT;
ALTER TABLE nodes ADD COLUMN chassis_id INTEGER REFERENCES chassis(id);
CREATE INDEX nodes_chassis ON nodes(chassis_id);
"#,
    // Port groups (a node's bonds, API 1.23): gone with their node; a port belongs to at most
    // one, of its own node. A MAC still finds its node by its port alone.
    r#"
CREATE TABLE portgroups (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    node_id INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    name TEXT UNIQUE,
    address TEXT UNIQUE,
    extra TEXT NOT NULL DEFAULT '{}',
    internal_info TEXT NOT NULL DEFAULT '{}',
    properties TEXT NOT NULL DEFAULT '{}',
    mode TEXT NOT NULL,
    standalone_ports_supported INTEGER NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
    updated_at TEXT
) STRICT;
CREATE INDEX portgroups_node ON portgroups(node_id);
ALTER TABLE ports ADD COLUMN portgroup_id INTEGER REFERENCES portgroups(id) ON DELETE SET NULL;
CREATE INDEX ports_portgroup ON ports(portgroup_id);
"#,
    // The fake console's state (Ironic's `console_enabled`) and the RAID configuration asked
    // for (`target_raid_config`, a JSON object), as Ironic keeps them on the node.
    r#"
ALTER TABLE nodes ADD COLUMN console_enabled INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN target_raid_config TEXT NOT NULL DEFAULT '{}';
"#,
    // The node list's default order (`created_at`, then `uuid`) from an index, a page at a
    // time (`pages`).
    r#"
CREATE INDEX nodes_created ON nodes(created_at, uuid);
"#,
];

/// PostgreSQL's timestamp text, as SQLite's `strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')`.
macro_rules! pg_now {
    () => {
        "(to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"+00:00\"'))"
    };
}

/// The PostgreSQL steps, numbered as [`SQLITE`]'s.
pub(crate) const POSTGRES: &[&str] = &[
    concat!(
        r#"
CREATE TABLE nodes (
    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL UNIQUE,
    driver TEXT NOT NULL,
    driver_info TEXT NOT NULL DEFAULT '{}',
    properties TEXT NOT NULL DEFAULT '{}',
    instance_info TEXT NOT NULL DEFAULT '{}',
    driver_internal_info TEXT NOT NULL DEFAULT '{}',
    extra TEXT NOT NULL DEFAULT '{}',
    boot_interface TEXT NOT NULL,
    deploy_interface TEXT NOT NULL,
    power_state TEXT,
    target_power_state TEXT,
    provision_state TEXT NOT NULL,
    target_provision_state TEXT,
    maintenance BIGINT NOT NULL DEFAULT 0,
    maintenance_reason TEXT,
    last_error TEXT,
    created_at TEXT NOT NULL DEFAULT "#,
        pg_now!(),
        r#",
    updated_at TEXT
);

CREATE TABLE ports (
    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    node_id BIGINT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    address TEXT NOT NULL UNIQUE,
    extra TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL DEFAULT "#,
        pg_now!(),
        r#",
    updated_at TEXT
);
CREATE INDEX ports_node ON ports(node_id);

CREATE TABLE volume_connectors (
    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    node_id BIGINT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    type TEXT NOT NULL,
    connector_id TEXT NOT NULL,
    extra TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL DEFAULT "#,
        pg_now!(),
        r#",
    updated_at TEXT,
    UNIQUE (type, connector_id)
);
CREATE INDEX volume_connectors_node ON volume_connectors(node_id);

CREATE TABLE volume_targets (
    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    node_id BIGINT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    volume_type TEXT NOT NULL,
    boot_index BIGINT NOT NULL CHECK (boot_index >= 0),
    volume_id TEXT NOT NULL,
    properties TEXT NOT NULL DEFAULT '{}',
    extra TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL DEFAULT "#,
        pg_now!(),
        r#",
    updated_at TEXT,
    UNIQUE (node_id, boot_index)
);
CREATE INDEX volume_targets_node ON volume_targets(node_id);
"#
    ),
    "ALTER TABLE nodes ADD COLUMN storage_interface TEXT;",
    concat!(
        r#"
CREATE TABLE volume_attachments (
    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    node_uuid TEXT NOT NULL,
    target_uuid TEXT NOT NULL UNIQUE,
    volume_id TEXT NOT NULL,
    api TEXT NOT NULL,
    attachment_id TEXT,
    state TEXT NOT NULL,
    step TEXT NOT NULL,
    connector TEXT NOT NULL DEFAULT '{}',
    last_error TEXT,
    created_at TEXT NOT NULL DEFAULT "#,
        pg_now!(),
        r#",
    updated_at TEXT
);
CREATE INDEX volume_attachments_node ON volume_attachments(node_uuid);

CREATE TABLE events (
    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    node_uuid TEXT,
    event_type TEXT NOT NULL,
    level TEXT NOT NULL,
    payload TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL DEFAULT "#,
        pg_now!(),
        r#"
);
CREATE INDEX events_node ON events(node_uuid, id);

CREATE TABLE node_locks (
    node_uuid TEXT PRIMARY KEY,
    action TEXT NOT NULL,
    pid BIGINT NOT NULL,
    process_start TEXT NOT NULL,
    acquired_at TEXT NOT NULL DEFAULT "#,
        pg_now!(),
        r#"
);
"#
    ),
    r#"
ALTER TABLE events ADD COLUMN delivery TEXT NOT NULL DEFAULT 'pending';
ALTER TABLE events ADD COLUMN attempts BIGINT NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN next_attempt_at BIGINT NOT NULL DEFAULT 0;
CREATE INDEX events_delivery ON events(delivery, next_attempt_at);
"#,
    r#"
CREATE TABLE sync_status (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    ran_by TEXT NOT NULL CHECK (ran_by IN ('serve', 'cli')),
    started_at BIGINT NOT NULL,
    finished_at BIGINT NOT NULL,
    outcome TEXT NOT NULL CHECK (outcome IN ('ok', 'partial', 'failed')),
    checked BIGINT NOT NULL DEFAULT 0,
    updated BIGINT NOT NULL DEFAULT 0,
    drifted BIGINT NOT NULL DEFAULT 0,
    errors BIGINT NOT NULL DEFAULT 0,
    message TEXT NOT NULL DEFAULT '',
    last_ok_at BIGINT
);
"#,
    r#"
ALTER TABLE node_locks ADD COLUMN instance_id TEXT NOT NULL DEFAULT '';
ALTER TABLE node_locks ADD COLUMN nonce TEXT NOT NULL DEFAULT '';
ALTER TABLE node_locks ADD COLUMN lease_expires_at BIGINT NOT NULL DEFAULT 0;
"#,
    r#"
CREATE TABLE admin_keys (
    name TEXT PRIMARY KEY,
    key TEXT NOT NULL
);
CREATE TABLE admin_logouts (
    session TEXT PRIMARY KEY,
    expires_at BIGINT NOT NULL
);
"#,
    r#"
ALTER TABLE events ADD COLUMN repeats BIGINT NOT NULL DEFAULT 1;
ALTER TABLE events ADD COLUMN last_seen_at TEXT;
"#,
    r#"
ALTER TABLE nodes ADD COLUMN instance_uuid TEXT;
CREATE UNIQUE INDEX nodes_instance_uuid ON nodes(instance_uuid);
ALTER TABLE nodes ADD COLUMN resource_class TEXT;
ALTER TABLE nodes ADD COLUMN console_interface TEXT;
ALTER TABLE nodes ADD COLUMN inspect_interface TEXT;
ALTER TABLE nodes ADD COLUMN management_interface TEXT;
ALTER TABLE nodes ADD COLUMN network_interface TEXT;
ALTER TABLE nodes ADD COLUMN power_interface TEXT;
ALTER TABLE nodes ADD COLUMN raid_interface TEXT;
ALTER TABLE nodes ADD COLUMN rescue_interface TEXT;
ALTER TABLE nodes ADD COLUMN vendor_interface TEXT;
ALTER TABLE nodes ADD COLUMN provision_updated_at TEXT;
"#,
    r#"
ALTER TABLE ports ADD COLUMN pxe_enabled BIGINT NOT NULL DEFAULT 1;
ALTER TABLE ports ADD COLUMN local_link_connection TEXT NOT NULL DEFAULT '{}';
ALTER TABLE ports ADD COLUMN physical_network TEXT;
ALTER TABLE ports ADD COLUMN internal_info TEXT NOT NULL DEFAULT '{}';
"#,
    concat!(
        r#"
CREATE TABLE node_traits (
    node_id BIGINT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    trait TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT "#,
        pg_now!(),
        r#",
    PRIMARY KEY (node_id, trait)
);
"#
    ),
    r#"
CREATE TABLE change_counter (
    id BIGINT PRIMARY KEY CHECK (id = 1),
    seq BIGINT NOT NULL
);
INSERT INTO change_counter (id, seq) VALUES (1, 0);
CREATE TABLE change_log (
    seq BIGINT PRIMARY KEY,
    entity TEXT NOT NULL,
    key TEXT NOT NULL,
    op TEXT NOT NULL,
    at BIGINT NOT NULL
);
CREATE TABLE instances (
    id TEXT PRIMARY KEY,
    boot_url TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL
);
CREATE TABLE leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
"#,
    r#"
CREATE TABLE probe_results (
    node_id BIGINT PRIMARY KEY REFERENCES nodes(id) ON DELETE CASCADE,
    probed_at BIGINT NOT NULL,
    status TEXT NOT NULL,
    summary TEXT NOT NULL,
    lines TEXT NOT NULL DEFAULT '[]'
);
"#,
    r#"
CREATE INDEX events_type ON events(event_type, id);
CREATE INDEX events_level ON events(level, id);
"#,
    concat!(
        r#"
CREATE TABLE chassis (
    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    description TEXT,
    extra TEXT NOT NULL DEFAULT '{}',
    created_at TEXT NOT NULL DEFAULT "#,
        pg_now!(),
        r#",
    updated_at TEXT
);
ALTER TABLE nodes ADD COLUMN chassis_id BIGINT REFERENCES chassis(id);
CREATE INDEX nodes_chassis ON nodes(chassis_id);
"#
    ),
    concat!(
        r#"
CREATE TABLE portgroups (
    id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    node_id BIGINT NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    name TEXT UNIQUE,
    address TEXT UNIQUE,
    extra TEXT NOT NULL DEFAULT '{}',
    internal_info TEXT NOT NULL DEFAULT '{}',
    properties TEXT NOT NULL DEFAULT '{}',
    mode TEXT NOT NULL,
    standalone_ports_supported BIGINT NOT NULL DEFAULT 1,
    created_at TEXT NOT NULL DEFAULT "#,
        pg_now!(),
        r#",
    updated_at TEXT
);
CREATE INDEX portgroups_node ON portgroups(node_id);
ALTER TABLE ports ADD COLUMN portgroup_id BIGINT REFERENCES portgroups(id) ON DELETE SET NULL;
CREATE INDEX ports_portgroup ON ports(portgroup_id);
"#
    ),
    r#"
ALTER TABLE nodes ADD COLUMN console_enabled BIGINT NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN target_raid_config TEXT NOT NULL DEFAULT '{}';
"#,
    r#"
CREATE INDEX nodes_created ON nodes(created_at, uuid);
"#,
];

/// The advisory lock key that serialises instances migrating the same database at once.
const MIGRATION_LOCK: i64 = 0x0062_6f6f_7476_6f6c;

/// Brings a PostgreSQL database to the latest step: each missing step of [`POSTGRES`] in one
/// transaction with the version, under a transaction-scoped advisory lock so that instances
/// starting together migrate once.
pub(crate) fn migrate_postgres(conn: &Conn) -> Result<i64, DbError> {
    let tx = conn.begin()?;
    // First the lock: `CREATE TABLE IF NOT EXISTS` is not safe against a concurrent one (two
    // instances starting together on an empty database), the lock makes them take turns.
    tx.query("SELECT pg_advisory_xact_lock(?1)", args![MIGRATION_LOCK])?;
    let exists: Option<String> =
        tx.query_one("SELECT CAST(to_regclass('schema_version') AS TEXT)", &[])?.get(0)?;
    if exists.is_none() {
        tx.batch(
            "CREATE TABLE schema_version (id BIGINT PRIMARY KEY CHECK (id = 1), version BIGINT NOT NULL)",
        )?;
    }
    tx.execute(
        "INSERT INTO schema_version (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING",
        &[],
    )?;
    let version: i64 =
        tx.query_one("SELECT version FROM schema_version WHERE id = 1", &[])?.get(0)?;
    let latest = i64::try_from(POSTGRES.len()).unwrap_or(i64::MAX);
    if version > latest {
        return Err(DbError::Corrupt {
            table: "schema_version",
            key: "1".into(),
            message: format!(
                "the database is at step {version}, newer than this bootvol ({latest})"
            ),
        });
    }
    for (step, sql) in POSTGRES.iter().enumerate().skip(usize::try_from(version).unwrap_or(0)) {
        tx.batch(sql)?;
        tracing::info!(step = step + 1, "database migrated");
    }
    tx.execute("UPDATE schema_version SET version = ?1 WHERE id = 1", args![latest])?;
    tx.commit()?;
    Ok(latest)
}

#[cfg(test)]
mod tests {
    #[test]
    fn migrations_are_valid() {
        super::migrations().validate().unwrap();
    }

    #[test]
    fn both_engines_have_every_step() {
        assert_eq!(super::SQLITE.len(), super::POSTGRES.len());
    }
}
