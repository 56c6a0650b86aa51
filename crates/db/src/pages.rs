//! A page of the node list as Ironic's `GET /v1/nodes` asks for it: its filters, one sort key
//! and direction, the node after which the page starts (`marker`) and its size, answered by
//! one keyset query (`(key, uuid)` after the marker's, `ORDER BY key, uuid LIMIT n`) and the
//! children of the nodes on it alone: never a read of every row.

use super::engine::Value;
use super::nodes::Children;
use super::rows::NODE_COLUMNS;
use super::{Db, DbError};
use bootvol_core::model::NodeRecord;
use bootvol_core::model::records::NodeFilter;

/// One page asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodePage<'a> {
    pub filter: &'a NodeFilter,
    /// A node field (Ironic's name) that [`sortable`] accepts.
    pub sort_key: &'a str,
    pub descending: bool,
    /// The UUID of the node the page starts after.
    pub marker: Option<&'a str>,
    pub limit: usize,
}

/// Why a page could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error("Marker {0} could not be found.")]
    NoMarker(String),
    #[error("{0} is not a sort key of the node list")]
    NotSortable(String),
    #[error(transparent)]
    Db(#[from] DbError),
}

/// The SQL expression a node field sorts by, for the fields stored as one column (nulls as the
/// empty text, so that the keyset comparison is total on both engines); None for the others.
pub fn sortable(field: &str) -> Option<&'static str> {
    Some(match field {
        "uuid" => "uuid",
        "name" => "name",
        "driver" => "driver",
        "provision_state" => "provision_state",
        "maintenance" => "maintenance",
        "console_enabled" => "console_enabled",
        "created_at" => "created_at",
        "boot_interface" => "boot_interface",
        "deploy_interface" => "deploy_interface",
        "power_state" => "COALESCE(power_state, '')",
        "target_power_state" => "COALESCE(target_power_state, '')",
        "target_provision_state" => "COALESCE(target_provision_state, '')",
        "maintenance_reason" => "COALESCE(maintenance_reason, '')",
        "last_error" => "COALESCE(last_error, '')",
        "updated_at" => "COALESCE(updated_at, '')",
        "provision_updated_at" => "COALESCE(provision_updated_at, '')",
        "instance_uuid" => "COALESCE(instance_uuid, '')",
        "resource_class" => "COALESCE(resource_class, '')",
        _ => return None,
    })
}

impl Db {
    /// The nodes of one page, with their children, in the page's order.
    pub fn node_page(&self, page: &NodePage<'_>) -> Result<Vec<NodeRecord>, PageError> {
        let key =
            sortable(page.sort_key).ok_or_else(|| PageError::NotSortable(page.sort_key.into()))?;
        let (mut conditions, mut args) = filter_sql(page.filter);
        let (after, direction) = if page.descending { ("<", "DESC") } else { (">", "ASC") };
        if let Some(marker) = page.marker {
            let found = self
                .conn
                .query_opt("SELECT 1 FROM nodes WHERE uuid = ?1", &[Value::from(marker)])?;
            if found.is_none() {
                return Err(PageError::NoMarker(marker.to_owned()));
            }
            args.push(Value::from(marker));
            let at = args.len();
            conditions.push(format!(
                "({key}, uuid) {after} (SELECT {key}, uuid FROM nodes WHERE uuid = ?{at})"
            ));
        }
        args.push(Value::Int(i64::try_from(page.limit).unwrap_or(i64::MAX)));
        let limit_at = args.len();
        let condition =
            if conditions.is_empty() { "1 = 1".to_owned() } else { conditions.join(" AND ") };
        let sql = format!(
            "SELECT {NODE_COLUMNS} FROM nodes WHERE {condition} \
             ORDER BY {key} {direction}, uuid {direction} LIMIT ?{limit_at}"
        );
        Ok(self.records_from(&sql, &args, Children::Read)?)
    }
}

/// The filters as `WHERE` conditions (`?1`... in order) and their arguments.
fn filter_sql(filter: &NodeFilter) -> (Vec<String>, Vec<Value>) {
    let mut conditions = Vec::new();
    let mut args = Vec::new();
    let mut equal = |column: &str, value: Value| {
        args.push(value);
        conditions.push(format!("{column} = ?{}", args.len()));
    };
    let text = |v: &Option<String>| v.as_deref().map(Value::from);
    for (column, value) in [
        ("provision_state", text(&filter.provision_state)),
        ("driver", text(&filter.driver)),
        ("instance_uuid", text(&filter.instance_uuid)),
        ("resource_class", text(&filter.resource_class)),
        (
            "(SELECT ch.uuid FROM chassis ch WHERE ch.id = nodes.chassis_id)",
            text(&filter.chassis_uuid),
        ),
        ("maintenance", filter.maintenance.map(Value::from)),
    ] {
        if let Some(value) = value {
            equal(column, value);
        }
    }
    match filter.associated {
        Some(true) => conditions.push("instance_uuid IS NOT NULL".into()),
        Some(false) => conditions.push("instance_uuid IS NULL".into()),
        None => {}
    }
    (conditions, args)
}
