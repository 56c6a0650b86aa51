//! The API's chassis (`/v1/chassis`): listing, showing, creating, patching and deleting them in
//! Ironic's JSON shape, the nodes in one (`/v1/chassis/{uuid}/nodes`), and the `chassis_uuid`
//! a node names. A part of `resources` (its shared helpers); the node service keeps the rules
//! (a chassis with nodes is not deleted, a node's chassis must exist).

use super::*;
use bootvol_core::model::groups::{Chassis, ChassisSpec};

/// The fields a list shows without `detail` or `fields` (Ironic's).
const LIST_FIELDS: &[&str] = &["uuid", "description"];
const PATCHABLE: &[&str] = &["description", "extra"];
const READ_ONLY: &[&str] = &["uuid", "created_at", "updated_at", "links", "nodes"];

/// `/v1/chassis[/...]` (`rest`: the segments after `chassis`).
pub(super) async fn route(state: &ApiState, r: &Request, rest: &[&str]) -> ApiResult {
    match (rest, &r.method) {
        ([], &Method::GET) => list(state, r, false).await,
        (["detail"], &Method::GET) => list(state, r, true).await,
        ([], &Method::POST) => create(state, r).await,
        ([id], &Method::GET) => show(state, r, id).await,
        ([id], &Method::PATCH) => patch(state, r, id).await,
        ([id], &Method::DELETE) => {
            state.inner.nodes.delete_chassis(&uuid_of(id)?).await?;
            Ok(StatusCode::NO_CONTENT.into_response())
        }
        ([id, "nodes"], &Method::GET) => nodes(state, r, id, false).await,
        ([id, "nodes", "detail"], &Method::GET) => nodes(state, r, id, true).await,
        ([] | [_] | [_, "nodes"] | [_, "nodes", "detail"], _) => Err(method_not_allowed()),
        _ => Err(not_found_path(r)),
    }
}

/// A chassis identifier: a UUID (400 otherwise, as Ironic), canonical.
fn uuid_of(id: &str) -> Result<String, ApiError> {
    canonical_uuid(id).map_err(|_| {
        ApiError::bad_request(format!(
            "Invalid input for field/attribute chassis_uuid. Value: '{id}'. Expected a UUID but received {id}."
        ))
    })
}

/// The chassis a node names (`chassis_uuid` in a create or a patch): none for null.
pub(super) fn chassis_ref(value: Option<Value>) -> Result<Option<String>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(id)) => uuid_of(&id).map(Some),
        Some(other) => Err(ApiError::bad_request(format!(
            "chassis_uuid: must be a chassis' UUID (a string), not {}",
            kind_of(&other)
        ))),
    }
}

fn chassis_json(r: &Request, chassis: &Chassis) -> Value {
    let (base, uuid) = (&r.base, &chassis.uuid);
    let mut doc = json!({
        "uuid": uuid,
        "description": chassis.description,
        "extra": chassis.extra,
        "created_at": chassis.created_at,
        "updated_at": chassis.updated_at,
        "links": links(base, "chassis", uuid),
        "nodes": [{"href": format!("{base}/v1/chassis/{uuid}/nodes"), "rel": "self"},
                  {"href": format!("{base}/chassis/{uuid}/nodes"), "rel": "bookmark"}],
    });
    mask(&mut doc);
    doc
}

/// A chassis spec from a create body or a patched document (nulls dropped).
fn spec_of(doc: Map<String, Value>) -> Result<ChassisSpec, ApiError> {
    let mut description = None;
    let mut extra = Map::new();
    for (key, value) in doc {
        match (key.as_str(), value) {
            ("description", Value::String(text)) => description = Some(text),
            ("extra", Value::Object(map)) => extra = map,
            ("description" | "extra", other) => {
                return Err(ApiError::bad_request(format!(
                    "{key}: must be {}, not {}",
                    if key == "extra" { "an object" } else { "a string" },
                    kind_of(&other)
                )));
            }
            _ => {
                return Err(ApiError::bad_request(format!(
                    "{key}: not a field of a chassis (fields: uuid, description, extra)"
                )));
            }
        }
    }
    ChassisSpec::new(description, extra).map_err(|e| ApiError::bad_request(e.0))
}

async fn list(state: &ApiState, r: &Request, detail: bool) -> ApiResult {
    let items = state.inner.nodes.chassis_list().await?;
    let items = items.iter().map(|c| chassis_json(r, c)).collect();
    collection(r, "chassis", items, LIST_FIELDS, detail)
}

async fn show(state: &ApiState, r: &Request, id: &str) -> ApiResult {
    let chassis = state.inner.nodes.chassis(&uuid_of(id)?).await?;
    shown(r, chassis_json(r, &chassis))
}

async fn create(state: &ApiState, r: &Request) -> ApiResult {
    let mut doc = without_nulls(r.json()?)?;
    let uuid = body_uuid(&mut doc)?;
    let spec = spec_of(doc)?;
    let chassis = state.inner.nodes.create_chassis(uuid.clone(), spec).await?;
    Ok(created(format!("{}/v1/chassis/{uuid}", r.base), &chassis_json(r, &chassis)))
}

async fn patch(state: &ApiState, r: &Request, id: &str) -> ApiResult {
    let patch = r.json()?;
    let stored = state.inner.nodes.chassis(&uuid_of(id)?).await?;
    let mut doc = json!({"description": stored.description, "extra": stored.extra});
    apply_patch(&mut doc, &patch, PATCHABLE, READ_ONLY)?;
    let spec = spec_of(without_nulls(doc)?)?;
    let chassis = state.inner.nodes.update_chassis(&stored.uuid, spec).await?;
    Ok(json_response(StatusCode::OK, &chassis_json(r, &chassis)))
}

/// `GET /v1/chassis/{uuid}/nodes[/detail]`: the nodes in a chassis, as the node list shows them.
async fn nodes(state: &ApiState, r: &Request, id: &str, detail: bool) -> ApiResult {
    let chassis = state.inner.nodes.chassis(&uuid_of(id)?).await?;
    list_nodes(state, r, detail, Some(&chassis.uuid)).await
}
