//! kcache's own API under `/apis/kcache.dev/v1/`: which indexes exist, the objects with given
//! index values (a List like LIST's, with its continue tokens), and objects per index value.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::response::Response;
use bytes::Bytes;
use http::StatusCode;
use serde_json::{json, Value};

use kcache_audit::ResourceAttributes;

use super::{list, params, response, App};
use crate::auth::{Caller, Verdict};
use crate::cache::{AtError, ResourceCache};
use crate::continue_token::ContinueToken;
use crate::index::Source;
use crate::status::ApiError;

fn json_response(v: &Value) -> Response {
    let mut body = serde_json::to_vec(v).unwrap_or_default();
    body.push(b'\n');
    response::json(StatusCode::OK, vec![Bytes::from(body)])
}

/// Index answers reach across namespaces: the caller must be allowed to list the resource
/// cluster-wide (`group`: "" for the core group). `verdict`: the authorizer's answer.
async fn authorize(
    app: &App,
    caller: &Caller,
    (group, version, resource): (&str, &str, &str),
    verdict: &mut Option<Verdict>,
) -> Result<(), ApiError> {
    let attributes = crate::auth::Attributes {
        verb: "list",
        group,
        version,
        resource,
        namespace: None,
        name: None,
    };
    app.auth.authorize(caller, &attributes, verdict).await?;
    Ok(())
}

/// An index request's answer, with its audit events where a trail is kept: a query reads
/// the cached objects of `resource` as a cluster-wide LIST of it does, and is audited as that
/// LIST (`verb` and the resource), so that the policy's rules for the resource see it;
/// `resource` None: the index definitions, audited by path. `answer` gives the response for
/// an admitted caller, and the authorizer's verdict if it was asked.
async fn audited<F>(
    app: &App,
    parts: &http::request::Parts,
    verb: &'static str,
    resource: Option<(&str, &str, &str)>,
    answer: impl FnOnce(Caller) -> F,
) -> Response
where
    F: std::future::Future<Output = (Response, Option<Verdict>)>,
{
    let received = app.audit.as_ref().map(|_| std::time::SystemTime::now());
    let admitted = super::admission::admit(app, &parts.headers, &parts.extensions).await;
    let (caller, (resp, verdict)) = match admitted {
        Ok(caller) => (Some(caller.clone()), answer(caller).await),
        Err(refused) => (refused.caller, (refused.response, None)),
    };
    let (Some(audit), Some(received)) = (&app.audit, received) else {
        return resp;
    };
    let resource = resource.map(|(group, version, resource)| ResourceAttributes {
        group,
        version,
        resource,
        subresource: None,
        namespace: None,
        name: None,
    });
    match audit.begin_as(received, parts, verb, resource, caller.as_ref()) {
        Some(pending) => {
            let answered = super::answered_by(&resp, "cache");
            audit.finish(pending, resp, answered, verdict, false)
        }
        None => resp,
    }
}

/// `GET /apis/kcache.dev/v1/indexes`: every cached resource with its indexes.
pub(super) async fn list_indexes(State(app): State<Arc<App>>, req: Request) -> Response {
    let (parts, _) = req.into_parts();
    // Definitions only, no objects: any authenticated (or anonymous) caller may see them.
    audited(&app, &parts, "get", None, |_| async {
        (definitions(&app), None)
    })
    .await
}

/// Every cached resource with its indexes, as `IndexList`.
fn definitions(app: &App) -> Response {
    // A type over its memory budget has no cache to query: its indexes are not offered.
    let mut caches: Vec<_> = app
        .registry
        .all()
        .filter(|c| !c.budget().is_over())
        .collect();
    caches.sort_by_key(|c| c.info.to_string());
    let items: Vec<Value> = caches
        .iter()
        .map(|c| {
            let indexes: Vec<Value> = c
                .indexes
                .defs()
                .iter()
                .map(|d| match &d.source {
                    Source::Field(f) => json!({"name": d.name, "field": f, "builtin": true}),
                    Source::Path { path, .. } => json!({"name": d.name, "field": path.as_str()}),
                    Source::Label(l) => json!({"name": d.name, "label": l}),
                    // A CRD's selectableFields: the upstream's own, like the built-in ones.
                    Source::Selectable { .. } => {
                        json!({"name": d.name, "field": d.name, "builtin": true})
                    }
                })
                .collect();
            json!({
                "group": c.info.group,
                "version": c.info.version,
                "resource": c.info.resource,
                "indexes": indexes,
            })
        })
        .collect();
    json_response(&json!({"kind": "IndexList", "apiVersion": "kcache.dev/v1", "items": items}))
}

/// The cache and index a path names (`core` is the core group).
fn lookup(
    app: &App,
    group: &str,
    version: &str,
    resource: &str,
    index: &str,
) -> Result<(Arc<ResourceCache>, usize), ApiError> {
    let cache = app
        .registry
        .get(group, version, resource)
        .ok_or(ApiError::NotFoundGeneric)?
        .cache
        .clone();
    let i = cache
        .indexes
        .by_name(index)
        .ok_or_else(|| ApiError::NotFound {
            group: "kcache.dev".into(),
            resource: "indexes".into(),
            name: index.into(),
        })?;
    if cache.budget().is_over() {
        return Err(super::over_budget_error(&cache));
    }
    if !cache.is_synced() {
        return Err(ApiError::NotReady);
    }
    Ok((cache, i))
}

/// What an index request names: `{group}/{version}/{resource}/{index}`.
type IndexPath = (String, String, String, String);

/// The part every index answer shares: authorize the caller for the resource, find the index,
/// and answer with `f`'s response (or error) stamped with the cache's age.
async fn answer(
    app: &App,
    parts: &http::request::Parts,
    (group, version, resource, index): &IndexPath,
    f: impl FnOnce(&Arc<ResourceCache>, usize) -> Result<Response, ApiError>,
) -> Response {
    let group = if group == "core" { "" } else { group };
    let named = (group, version.as_str(), resource.as_str());
    audited(app, parts, "list", Some(named), |caller| async move {
        let mut verdict = None;
        let resp = match authorize(app, &caller, named, &mut verdict).await {
            Ok(()) => read(app, named, index, f),
            Err(e) => response::error(&e),
        };
        (resp, verdict)
    })
    .await
}

/// Find the index and answer with `f`'s response (or error) stamped with the cache's age.
fn read(
    app: &App,
    (group, version, resource): (&str, &str, &str),
    index: &str,
    f: impl FnOnce(&Arc<ResourceCache>, usize) -> Result<Response, ApiError>,
) -> Response {
    let (cache, i) = match lookup(app, group, version, resource, index) {
        Ok(found) => found,
        Err(e) => return response::error(&e),
    };
    let resp = f(&cache, i).unwrap_or_else(|e| response::error(&e));
    // After the read: the cache may have gone over its budget and been emptied meanwhile
    // (see `cache::Budget::is_over`).
    if cache.budget().is_over() {
        return response::error(&super::over_budget_error(&cache));
    }
    super::staleness::with_age(resp, &cache)
}

/// `GET …/indexes/{group}/{version}/{resource}/{index}?values=a,b&limit=&continue=`.
pub(super) async fn query(
    State(app): State<Arc<App>>,
    Path(path): Path<IndexPath>,
    req: Request,
) -> Response {
    let (parts, _) = req.into_parts();
    let q = params::parse_query(parts.uri.query());
    answer(&app, &parts, &path, |cache, i| {
        let get = |k: &str| q.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        let values: Vec<&str> = get("values")
            .ok_or_else(|| ApiError::BadRequest("values is required, e.g. values=a,b".into()))?
            .split(',')
            .collect();
        let limit = match get("limit").filter(|l| !l.is_empty()) {
            Some(l) => l
                .parse::<i64>()
                .map_err(|_| ApiError::BadRequest(format!("limit {l:?} is not a number")))?,
            None => 0,
        };
        let (snap, start) = match get("continue").filter(|c| !c.is_empty()) {
            Some(token) => {
                let t = ContinueToken::decode(token)?;
                let snap = if t.rv < 0 {
                    cache.snapshot()
                } else {
                    cache.snapshot_at(t.rv as u64).map_err(|e| match e {
                        AtError::TooOld { oldest } => ApiError::Expired {
                            message: format!("too old resource version: {} ({oldest})", t.rv),
                            continue_token: None,
                        },
                        AtError::Future { current } => ApiError::TooLargeResourceVersion {
                            requested: t.rv as u64,
                            current,
                        },
                    })?
                };
                (snap, Some(t.key().to_string()))
            }
            None => (cache.snapshot(), None),
        };
        Ok(list::index_page(
            cache,
            &snap,
            i,
            &values,
            start.as_deref(),
            limit,
            app.upstream.version().token_form(),
        ))
    })
    .await
}

/// `GET …/indexes/{group}/{version}/{resource}/{index}/counts`: objects per value.
pub(super) async fn counts(
    State(app): State<Arc<App>>,
    Path(path): Path<IndexPath>,
    req: Request,
) -> Response {
    let (parts, _) = req.into_parts();
    answer(&app, &parts, &path, |cache, i| {
        let snap = cache.snapshot();
        let counts: BTreeMap<String, usize> = snap
            .postings
            .as_ref()
            .map(|p| p.values(i).map(|(v, k)| (v.to_string(), k.len())).collect())
            .unwrap_or_default();
        Ok(json_response(&json!({
            "kind": "IndexCounts",
            "apiVersion": "kcache.dev/v1",
            "group": cache.info.group,
            "version": cache.info.version,
            "resource": cache.info.resource,
            "index": path.3,
            "resourceVersion": snap.rv.to_string(),
            "counts": counts,
        })))
    })
    .await
}
