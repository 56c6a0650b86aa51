//! The API's listings: sorting, paging and field selection of a collection (`fields`,
//! `detail`, `limit`, `marker`, `sort_key`, `sort_dir`) with Ironic's `next` link and errors.
//! A part of `api` (its request and errors); what is listed is `resources`'.

use super::*;

/// Sorting, paging and field selection of a collection (`fields`, `detail`, `limit`,
/// `marker`, `sort_key`, `sort_dir`), with the `next` link.
pub(crate) fn collection(
    request: &Request,
    key: &str,
    mut items: Vec<Value>,
    default_fields: &[&str],
    detail_path: bool,
) -> ApiResult {
    let asked = Asked::parse(request, detail_path)?;
    asked.check_against(items.first())?;
    let next = page(request, &asked, &mut items)?;
    answer(key, items, next, &asked, default_fields)
}

/// [`collection`] for a page the database read already (sorted, after the marker, at most a
/// page): `more` says whether nodes follow it (the `next` link).
pub(crate) fn paged(
    request: &Request,
    key: &str,
    items: Vec<Value>,
    more: bool,
    default_fields: &[&str],
    detail_path: bool,
) -> ApiResult {
    let asked = Asked::parse(request, detail_path)?;
    asked.check_against(items.first())?;
    let next = match items.last() {
        Some(last) if more => Some(next_link(request, page_limit(request)?, last)),
        _ => None,
    };
    answer(key, items, next, &asked, default_fields)
}

/// The list's answer: each item with the fields asked, and the `next` link.
fn answer(
    key: &str,
    items: Vec<Value>,
    next: Option<String>,
    asked: &Asked<'_>,
    default_fields: &[&str],
) -> ApiResult {
    let shown: Vec<Value> = items
        .into_iter()
        .map(|item| match (&asked.fields, asked.detail) {
            (Some(fields), _) => select(item, fields),
            (None, true) => item,
            (None, false) => select(item, default_fields),
        })
        .collect();
    let mut doc = json!({ key: shown });
    if let (Some(next), Some(map)) = (next, doc.as_object_mut()) {
        map.insert("next".into(), Value::String(next));
    }
    Ok(json_response(StatusCode::OK, &doc))
}

/// What a listing asked for: all of the item (`detail`), some fields, and the order.
struct Asked<'a> {
    detail: bool,
    fields: Option<Vec<String>>,
    sort_key: &'a str,
    sort_dir: &'a str,
}

impl<'a> Asked<'a> {
    /// `detail`, `fields`, `sort_key` and `sort_dir`, checked against each other.
    fn parse(request: &'a Request, detail_path: bool) -> Result<Asked<'a>, ApiError> {
        let detail = match request.param("detail") {
            None => detail_path,
            Some(v) if v.eq_ignore_ascii_case("true") || v == "1" => true,
            Some(v) if v.eq_ignore_ascii_case("false") || v == "0" => detail_path,
            Some(v) => {
                return Err(ApiError::bad_request(format!("Invalid value for detail: {v:?}")));
            }
        };
        let fields = request.param("fields").map(parse_fields).transpose()?;
        if fields.is_some() && detail {
            return Err(ApiError::bad_request(
                "Can not specify ?detail=True and fields in the same request.",
            ));
        }
        let sort_key = request.param("sort_key").unwrap_or("created_at");
        let sort_dir = request.param("sort_dir").unwrap_or("asc");
        if sort_dir != "asc" && sort_dir != "desc" {
            return Err(ApiError::bad_request(format!(
                "Invalid sort direction: {sort_dir}. Acceptable values are 'asc' or 'desc'"
            )));
        }
        Ok(Asked { detail, fields, sort_key, sort_dir })
    }

    /// The sort key and the fields must be fields of the items (the first one tells).
    fn check_against(&self, first: Option<&Value>) -> Result<(), ApiError> {
        let Some(first) = first else { return Ok(()) };
        let sort_key = self.sort_key;
        match first.get(sort_key) {
            None => {
                return Err(ApiError::bad_request(format!(
                    "The sort_key value {sort_key} is an invalid field for sorting"
                )));
            }
            Some(Value::Object(_) | Value::Array(_)) => {
                return Err(ApiError::bad_request(format!(
                    "The sort_key value \"{sort_key}\" is an invalid field for sorting"
                )));
            }
            Some(_) => {}
        }
        if let Some(fields) = &self.fields {
            for f in fields {
                if first.get(f).is_none() {
                    return Err(ApiError::bad_request(format!("Field(s) \"{f}\" are not valid")));
                }
            }
        }
        Ok(())
    }
}

/// Sorts `items`, keeps those after `marker` and at most a page of them ([`page_limit`]);
/// answers the `next` link when some were left out.
fn page(
    request: &Request,
    asked: &Asked<'_>,
    items: &mut Vec<Value>,
) -> Result<Option<String>, ApiError> {
    let (sort_key, sort_dir) = (asked.sort_key, asked.sort_dir);
    items.sort_by(|a, b| {
        let order =
            compare(&a[sort_key], &b[sort_key]).then_with(|| compare(&a["uuid"], &b["uuid"]));
        if sort_dir == "desc" { order.reverse() } else { order }
    });
    if let Some(marker) = request.param("marker") {
        let at = items
            .iter()
            .position(|i| i["uuid"].as_str() == Some(marker))
            .ok_or_else(|| ApiError::bad_request(format!("Marker {marker} could not be found.")))?;
        items.drain(..=at);
    }
    let limit = page_limit(request)?;
    if items.len() > limit {
        items.truncate(limit);
        return Ok(items.last().map(|last| next_link(request, limit, last)));
    }
    Ok(None)
}

/// The link to the page after `last`: the request's query with `limit` and `marker` set.
fn next_link(request: &Request, limit: usize, last: &Value) -> String {
    let last = last["uuid"].as_str().unwrap_or_default().to_owned();
    let mut query: Vec<(String, String)> =
        request.query.iter().filter(|(k, _)| k != "marker" && k != "limit").cloned().collect();
    query.push(("limit".into(), limit.to_string()));
    query.push(("marker".into(), last));
    let text: Vec<String> =
        query.iter().map(|(k, v)| format!("{}={}", encode(k), encode(v))).collect();
    let path = request.segments.join("/");
    format!("{}/v1/{path}?{}", request.base, text.join("&"))
}

/// The page size asked (`limit`), at most `[api] max_limit`, which is also the page of a list
/// asked without one (or with `limit=0`), as Ironic pages.
pub(crate) fn page_limit(request: &Request) -> Result<usize, ApiError> {
    match request.param("limit") {
        None => Ok(request.max_limit),
        Some(text) => match text.parse::<u64>() {
            Ok(0) => Ok(request.max_limit),
            Ok(n) => Ok(usize::try_from(n).map_or(request.max_limit, |n| n.min(request.max_limit))),
            Err(_) => Err(ApiError::bad_request(format!(
                "Invalid value for limit: {text:?}; a positive integer is expected"
            ))),
        },
    }
}

fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b',') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn compare(a: &Value, b: &Value) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x.as_f64().partial_cmp(&y.as_f64()).unwrap_or(Ordering::Equal)
        }
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Null, Value::Null) => Ordering::Equal,
        (Value::Null, _) => Ordering::Less,
        (_, Value::Null) => Ordering::Greater,
        _ => a.to_string().cmp(&b.to_string()),
    }
}

pub(crate) fn parse_fields(text: &str) -> Result<Vec<String>, ApiError> {
    let fields: Vec<String> =
        text.split(',').map(str::trim).filter(|f| !f.is_empty()).map(str::to_owned).collect();
    if fields.is_empty() {
        return Err(ApiError::bad_request("fields: give at least one field name"));
    }
    Ok(fields)
}

/// Keeps `fields` (and `links`) of a resource.
pub(crate) fn select(item: Value, fields: &[impl AsRef<str>]) -> Value {
    let Value::Object(map) = item else { return item };
    let keep: HashSet<&str> = fields.iter().map(AsRef::as_ref).chain(["links"]).collect();
    Value::Object(map.into_iter().filter(|(k, _)| keep.contains(k.as_str())).collect())
}
