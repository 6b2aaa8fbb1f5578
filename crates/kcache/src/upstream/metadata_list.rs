//! A consistent metadata-only list of a collection: the upstream's current revision and the
//! key and resourceVersion of every live object, for proving that a cache is current.
//!
//! A consistent LIST (resourceVersion unset, no `limit`) asked for as
//! `PartialObjectMetadataList` says what the upstream holds of a collection at its revision
//! `R` without the objects' bodies. If it holds as many objects as a cache at `c` and none of
//! them changed after `c`, the cache at `c` holds what the upstream holds at `R`: whoever
//! compares (the consistent read path) needs the count, each item's key and resourceVersion,
//! and their maximum.
//!
//! kcache asks for protobuf first: a real apiserver answers the metadata list in protobuf for
//! built-in types and custom resources alike (the `meta.k8s.io` kinds have a protobuf form),
//! about seven times smaller than the JSON one. Either answer is read: the protobuf through
//! kcache's own wire code ([`crate::protobuf`]), the JSON through a borrowed parse of the few
//! fields needed.

use std::borrow::Cow;

use http::header::CONTENT_TYPE;
use serde::Deserialize;

use super::{get_request, Purpose, Upstream, UpstreamError};
use crate::cache::ResourceCache;
use crate::protobuf;

/// The `Accept` of a metadata list: protobuf, else JSON, both as `PartialObjectMetadataList`.
pub const METADATA_LIST_ACCEPT: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";

/// The kind and apiVersion the answer must have: anything else is not what was asked for.
const LIST_KIND: &str = "PartialObjectMetadataList";
const LIST_API_VERSION: &str = "meta.k8s.io/v1";

/// One live object of a metadata list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemVersion {
    /// The object's cache key (`namespace/name`, or `name` for a cluster-scoped object), as
    /// `crate::object::Object::key` spells it, so that the two compare as they are.
    pub key: Box<str>,
    /// Its `metadata.resourceVersion`: the revision of its last change.
    pub rv: u64,
}

/// What a consistent metadata-only list of a collection says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataList {
    /// The list's resourceVersion: the upstream's revision when it answered.
    pub rv: u64,
    /// Every object of the collection (within the query's selectors), sorted by key in byte
    /// order: the order of the cache's map, so that the two can be walked side by side.
    pub items: Vec<ItemVersion>,
    /// Bytes of the answer's body (after any content encoding), what the proof cost to read.
    pub bytes: usize,
}

impl MetadataList {
    /// The highest resourceVersion of any item (0 for an empty list): a cache at `c` holds
    /// every change of these items when this is at most `c`.
    pub fn max_item_rv(&self) -> u64 {
        self.items.iter().map(|i| i.rv).max().unwrap_or(0)
    }

    /// Reads an answer of `content_type` (its media type decides protobuf or JSON; its
    /// parameters are ignored). `what` names the request in errors.
    pub(crate) fn parse(
        content_type: Option<&str>,
        body: &[u8],
        what: &str,
    ) -> Result<MetadataList, UpstreamError> {
        let media = content_type
            .and_then(|ct| ct.split(';').next())
            .map(|m| m.trim().to_ascii_lowercase());
        let (rv, mut items) = match media.as_deref() {
            Some(protobuf::MEDIA_TYPE) => parse_protobuf(body, what)?,
            Some("application/json") => parse_json(body, what)?,
            _ => {
                return Err(UpstreamError::Malformed(format!(
                    "{what}: a metadata list in {}",
                    content_type.unwrap_or("no Content-Type")
                )))
            }
        };
        // The apiserver sends items in its storage's key order, which is this one; sorting
        // makes sure of it (and costs one pass when they are in order already).
        items.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        Ok(MetadataList {
            rv,
            items,
            bytes: body.len(),
        })
    }
}

/// The URL of the metadata list of a cache's collection: the collection its reflector lists,
/// with the selectors of its scope and nothing else (no `limit`: one page, so that the list
/// is one revision's; no `resourceVersion`: consistent).
pub(crate) fn metadata_list_url(cache: &ResourceCache) -> String {
    let path = super::collection_path(cache);
    let scope = super::scope_query(cache);
    match scope.strip_prefix('&') {
        Some(query) => format!("{path}?{query}"),
        None => path,
    }
}

impl Upstream {
    /// A consistent metadata-only list of the collection at `path_and_query` (a collection
    /// URL, possibly with selectors; it must carry no `limit` and no `resourceVersion`, and
    /// none is added), counted as [`Purpose::Proof`] and bounded by the request timeout.
    pub async fn metadata_list(&self, path_and_query: &str) -> Result<MetadataList, UpstreamError> {
        let req = get_request(path_and_query, METADATA_LIST_ACCEPT)?;
        let (head, body) = self.fetch_with_head(req, Purpose::Proof).await?;
        let content_type = head.headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok());
        MetadataList::parse(
            content_type,
            &body,
            &format!("metadata list of {path_and_query}"),
        )
    }
}

/// A resourceVersion as a number.
fn parse_rv(rv: &str, what: &str, whose: &str) -> Result<u64, UpstreamError> {
    rv.parse()
        .map_err(|_| UpstreamError::Malformed(format!("{what}: {whose} resourceVersion {rv:?}")))
}

/// Refuses a page: a list with a `continue` token holds only some of the objects, so it
/// proves nothing (no `limit` is sent, so an apiserver never pages it).
fn whole(continue_token: &str, what: &str) -> Result<(), UpstreamError> {
    if continue_token.is_empty() {
        Ok(())
    } else {
        Err(UpstreamError::Malformed(format!(
            "{what}: one page of the list, not all of it"
        )))
    }
}

/// The cache key of an object.
fn key_of(namespace: &str, name: &str, what: &str) -> Result<Box<str>, UpstreamError> {
    if name.is_empty() {
        return Err(UpstreamError::Malformed(format!(
            "{what}: an item without a name"
        )));
    }
    Ok(if namespace.is_empty() {
        name.into()
    } else {
        format!("{namespace}/{name}").into()
    })
}

/// A protobuf answer: the envelope of a `PartialObjectMetadataList { metadata ListMeta = 1,
/// items = 2 }`, each item a `PartialObjectMetadata { metadata ObjectMeta = 1 }`, whose
/// ObjectMeta has the same field numbers as every object's.
fn parse_protobuf(body: &[u8], what: &str) -> Result<(u64, Vec<ItemVersion>), UpstreamError> {
    let proto = |source| UpstreamError::Protobuf {
        what: what.to_string(),
        source,
    };
    let env = protobuf::parse_envelope(body).map_err(proto)?;
    if env.kind != LIST_KIND || env.api_version != LIST_API_VERSION {
        return Err(UpstreamError::Malformed(format!(
            "{what}: a {} {} instead of a {LIST_API_VERSION} {LIST_KIND}",
            env.api_version, env.kind
        )));
    }
    let (meta, raw_items) = protobuf::parse_list(env.raw).map_err(proto)?;
    whole(&meta.continue_token, what)?;
    let rv = parse_rv(&meta.resource_version, what, "list")?;
    let items = raw_items
        .into_iter()
        .map(|item| {
            let m = protobuf::object_meta(item).map_err(proto)?;
            Ok(ItemVersion {
                key: key_of(m.namespace, m.name, what)?,
                rv: parse_rv(m.resource_version, what, "item")?,
            })
        })
        .collect::<Result<_, UpstreamError>>()?;
    Ok((rv, items))
}

/// The fields of a JSON metadata list that are read; the rest is skipped. Strings borrow
/// from the body unless they have escapes.
#[derive(Deserialize)]
struct JsonList<'a> {
    #[serde(borrow, default)]
    kind: Cow<'a, str>,
    #[serde(borrow, rename = "apiVersion", default)]
    api_version: Cow<'a, str>,
    #[serde(borrow)]
    metadata: JsonMeta<'a>,
    /// `null` when the list is empty.
    #[serde(borrow, default)]
    items: Option<Vec<JsonItem<'a>>>,
}

#[derive(Deserialize)]
struct JsonItem<'a> {
    #[serde(borrow)]
    metadata: JsonMeta<'a>,
}

/// An item's ObjectMeta, or the list's ListMeta (`continue`).
#[derive(Deserialize)]
struct JsonMeta<'a> {
    #[serde(borrow, default)]
    name: Cow<'a, str>,
    #[serde(borrow, rename = "continue", default)]
    continue_token: Cow<'a, str>,
    #[serde(borrow, default)]
    namespace: Cow<'a, str>,
    #[serde(borrow, rename = "resourceVersion", default)]
    resource_version: Cow<'a, str>,
}

fn parse_json(body: &[u8], what: &str) -> Result<(u64, Vec<ItemVersion>), UpstreamError> {
    let list: JsonList<'_> = serde_json::from_slice(body).map_err(UpstreamError::decode(what))?;
    if list.kind != LIST_KIND || list.api_version != LIST_API_VERSION {
        return Err(UpstreamError::Malformed(format!(
            "{what}: a {} {} instead of a {LIST_API_VERSION} {LIST_KIND}",
            list.api_version, list.kind
        )));
    }
    whole(&list.metadata.continue_token, what)?;
    let rv = parse_rv(&list.metadata.resource_version, what, "list")?;
    let items = list
        .items
        .unwrap_or_default()
        .into_iter()
        .map(|item| {
            let m = item.metadata;
            Ok(ItemVersion {
                key: key_of(&m.namespace, &m.name, what)?,
                rv: parse_rv(&m.resource_version, what, "item")?,
            })
        })
        .collect::<Result<_, UpstreamError>>()?;
    Ok((rv, items))
}

#[cfg(test)]
mod tests;
