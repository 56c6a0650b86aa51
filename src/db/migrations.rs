//! Ordered schema steps, tracked in SQLite's `user_version`. Never edit a step that has
//! shipped; add a new one.

use rusqlite_migration::{M, Migrations};

/// The schema, step by step.
pub(crate) fn migrations() -> Migrations<'static> {
    Migrations::new(vec![
        M::up(
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
        ),
        // The spec's data-model change, as its own step: the column starts empty for every
        // existing node, with no implied default; the configured default applies at read time.
        M::up("ALTER TABLE nodes ADD COLUMN storage_interface TEXT;"),
        // Cinder attachments, one record per volume target, so that a crash between two steps
        // of an attach or detach is finished or undone at the next start; and events.
        M::up(
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
        ),
        // Webhook delivery state of events (an outbox: delivery never blocks an action).
        M::up(
            r#"
ALTER TABLE events ADD COLUMN delivery TEXT NOT NULL DEFAULT 'pending';
ALTER TABLE events ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN next_attempt_at INTEGER NOT NULL DEFAULT 0;
CREATE INDEX events_delivery ON events(delivery, next_attempt_at);
"#,
        ),
        // The outcome of the last Cinder sync pass, whichever process ran it: one row, replaced
        // by every pass. Times are Unix seconds; `last_ok_at` survives passes that had errors.
        M::up(
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
        ),
        // Locks held by actions, not processes: the instance (host) and a random nonce name the
        // action; a live action renews its lease. Rows of older versions keep '' and 0 and are
        // judged by their process alone.
        M::up(
            r#"
ALTER TABLE node_locks ADD COLUMN instance_id TEXT NOT NULL DEFAULT '';
ALTER TABLE node_locks ADD COLUMN nonce TEXT NOT NULL DEFAULT '';
ALTER TABLE node_locks ADD COLUMN lease_expires_at INTEGER NOT NULL DEFAULT 0;
"#,
        ),
        // The admin page's session signing key, kept so sessions survive a restart, and the
        // sessions logged out before their end (a restart must not revive them).
        M::up(
            r#"
CREATE TABLE admin_keys (
    name TEXT PRIMARY KEY,
    key BLOB NOT NULL
) STRICT;
CREATE TABLE admin_logouts (
    session TEXT PRIMARY KEY,
    expires_at INTEGER NOT NULL
) STRICT;
"#,
        ),
        // An event repeated as it was (the same drift every sync pass) is counted on the
        // first one, with the time it was last seen.
        M::up(
            r#"
ALTER TABLE events ADD COLUMN repeats INTEGER NOT NULL DEFAULT 1;
ALTER TABLE events ADD COLUMN last_seen_at TEXT;
"#,
        ),
        // Issue 15, Ironic's node fields up to API 1.38: the instance a node is associated
        // with (unique when set), its resource class, the hardware interfaces beyond boot,
        // deploy and storage (NULL: the hardware type's default), and when the provision state
        // last changed.
        M::up(
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
        ),
        // Issue 15, Ironic's port fields up to 1.38: PXE flag, switch connection, physical
        // network, and internal_info (where a VIF is recorded: tenant_vif_port_id).
        M::up(
            r#"
ALTER TABLE ports ADD COLUMN pxe_enabled INTEGER NOT NULL DEFAULT 1;
ALTER TABLE ports ADD COLUMN local_link_connection TEXT NOT NULL DEFAULT '{}';
ALTER TABLE ports ADD COLUMN physical_network TEXT;
ALTER TABLE ports ADD COLUMN internal_info TEXT NOT NULL DEFAULT '{}';
"#,
        ),
        // Issue 15, node traits (API 1.37): one row per node and trait.
        M::up(
            r#"
CREATE TABLE node_traits (
    node_id INTEGER NOT NULL REFERENCES nodes(id) ON DELETE CASCADE,
    trait TEXT NOT NULL,
    created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%f+00:00', 'now')),
    PRIMARY KEY (node_id, trait)
) STRICT;
"#,
        ),
    ])
}

#[cfg(test)]
mod tests {
    #[test]
    fn migrations_are_valid() {
        super::migrations().validate().unwrap();
    }
}
