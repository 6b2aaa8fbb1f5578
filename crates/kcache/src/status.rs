//! Kubernetes `Status` errors: the one place where every failure kcache answers with is turned
//! into the exact body kube-apiserver would send.
//!
//! Key order, omitted fields and messages follow the v1.28 recordings (rule E10 of docs/semantics.md):
//! `kind, apiVersion, metadata, status, message, reason, details, code`; `reason` is left out for
//! the 500s the apiserver sends without one; `details` is left out when empty except for the
//! generic 404.

use bytes::Bytes;
use serde_json::{json, Map, Value};

use crate::auth::AuthError;
use crate::continue_token::InvalidToken;
use crate::table::InvalidIncludeObject;
use crate::upstream::UpstreamError;

/// A failure answered to a client, before it is rendered as a Status body.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// 400, e.g. unparsable selector, limit or continue token.
    #[error("{0}")]
    BadRequest(String),
    /// 401: credentials were presented and the upstream did not accept them.
    #[error("Unauthorized")]
    Unauthorized,
    /// 403: the upstream's authorizer does not allow the caller this request. `message` is the
    /// authorizer's sentence (`User "…" cannot list resource …`); the Status message prefixes
    /// the resource (and name) as the apiserver does.
    #[error("{message}")]
    Forbidden {
        group: String,
        /// With the subresource, if any (`pods/log`).
        resource: String,
        name: Option<String>,
        message: String,
    },
    /// 429 from one of kcache's own limits (rate, concurrent watches).
    #[error("{message}")]
    TooManyRequests { message: String, retry_after: u32 },
    /// 404 for a named object: details carry the resource plural as `kind`.
    #[error("{resource} \"{name}\" not found")]
    NotFound {
        group: String,
        resource: String,
        name: String,
    },
    /// 404 for a path the API does not serve ("the server could not find the requested resource").
    #[error("the server could not find the requested resource")]
    NotFoundGeneric,
    /// 406 for an Accept header kcache can satisfy neither from cache nor upstream.
    #[error("{0}")]
    NotAcceptable(String),
    /// 410 Expired; `continue_token` is set for an expired continue (an inconsistent continuation).
    #[error("{message}")]
    Expired {
        message: String,
        continue_token: Option<String>,
    },
    /// 413 for a request body over the limit.
    #[error("{0}")]
    TooLarge(String),
    /// 422 Invalid ListOptions, one cause per violated rule.
    #[error("ListOptions is invalid")]
    InvalidListOptions(Vec<Cause>),
    /// 429 while a resource's cache is (re)initialising.
    #[error("storage is (re)initializing")]
    NotReady,
    /// 500 without a reason, as the apiserver sends for storage-level errors.
    #[error("{0}")]
    Internal(String),
    /// 503 when the upstream cannot be reached for a request kcache must forward.
    #[error("{0}")]
    Unavailable(String),
    /// 503 for what only kcache's cache of a type can answer (its index endpoints, selectors
    /// on its index fields) once that type went over its memory budget (`budget` bytes) and
    /// is no longer cached. 503 ServiceUnavailable is the apiserver's answer for a part of the
    /// API that is there but cannot serve now (an aggregated API whose backend is down);
    /// unlike the 429 of a cache still initialising it carries no Retry-After, because
    /// retrying does not help before kcache restarts.
    #[error(
        "kcache no longer caches {resource}: its cached objects went over the memoryBudget of \
         {budget} bytes, so kcache's indexes of it are unavailable until kcache restarts \
         (reads of {resource} are passed through to the upstream)"
    )]
    OverBudget {
        group: String,
        resource: String,
        budget: usize,
    },
    /// 504 after waiting for the cache to reach a requested resourceVersion.
    #[error("Too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion { requested: u64, current: u64 },
    /// 504 Timeout for a read that could not be answered in time (the apiserver's answer when
    /// its storage does not respond); the message follows "Timeout: ".
    #[error("Timeout: {0}")]
    Timeout(String),
}

/// One cause of a 422: a validation rule on a ListOptions field.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    /// `FieldValueForbidden`, `FieldValueNotSupported`, …
    pub reason: &'static str,
    /// The message without the field name (e.g. `Forbidden: …`).
    pub message: String,
    pub field: &'static str,
}

impl Cause {
    pub(crate) fn forbidden(field: &'static str, detail: &str) -> Self {
        Cause {
            reason: "FieldValueForbidden",
            message: format!("Forbidden: {detail}"),
            field,
        }
    }

    pub(crate) fn not_supported(field: &'static str, value: &str, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        Cause {
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: {value:?}: supported values: {}",
                list.join(", ")
            ),
            field,
        }
    }
}

impl ApiError {
    /// HTTP status code of this error.
    pub fn code(&self) -> u16 {
        match self {
            ApiError::BadRequest(_) => 400,
            ApiError::Unauthorized => 401,
            ApiError::Forbidden { .. } => 403,
            ApiError::TooManyRequests { .. } => 429,
            ApiError::NotFound { .. } | ApiError::NotFoundGeneric => 404,
            ApiError::NotAcceptable(_) => 406,
            ApiError::Expired { .. } => 410,
            ApiError::TooLarge(_) => 413,
            ApiError::InvalidListOptions(_) => 422,
            ApiError::NotReady => 429,
            ApiError::Internal(_) => 500,
            ApiError::Unavailable(_) | ApiError::OverBudget { .. } => 503,
            ApiError::TooLargeResourceVersion { .. } | ApiError::Timeout(_) => 504,
        }
    }

    /// Seconds for a `Retry-After` header, for the errors the apiserver sends one with.
    pub(crate) fn retry_after(&self) -> Option<u32> {
        match self {
            ApiError::NotReady
            | ApiError::TooLargeResourceVersion { .. }
            | ApiError::Timeout(_) => Some(1),
            ApiError::TooManyRequests { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }

    /// The Status object as a JSON value, keys in the apiserver's order.
    pub(crate) fn to_status(&self) -> Value {
        let mut metadata = Map::new();
        let (message, reason, details): (String, Option<&str>, Option<Value>) = match self {
            ApiError::BadRequest(m) => (m.clone(), Some("BadRequest"), None),
            ApiError::Unauthorized => (self.to_string(), Some("Unauthorized"), None),
            ApiError::Forbidden {
                group,
                resource,
                name,
                message,
            } => {
                let (subject, details) = about(group, resource, name.as_deref());
                (
                    format!("{subject} is forbidden: {message}"),
                    Some("Forbidden"),
                    Some(details),
                )
            }
            ApiError::TooManyRequests {
                message,
                retry_after,
            } => (
                message.clone(),
                Some("TooManyRequests"),
                Some(json!({ "retryAfterSeconds": retry_after })),
            ),
            ApiError::NotFound {
                group,
                resource,
                name,
            } => {
                let (subject, details) = about(group, resource, Some(name));
                (
                    format!("{subject} not found"),
                    Some("NotFound"),
                    Some(details),
                )
            }
            ApiError::NotFoundGeneric => (self.to_string(), Some("NotFound"), Some(json!({}))),
            ApiError::NotAcceptable(m) => (m.clone(), Some("NotAcceptable"), None),
            ApiError::Expired {
                message,
                continue_token,
            } => {
                if let Some(t) = continue_token {
                    metadata.insert("continue".into(), json!(t));
                }
                (message.clone(), Some("Expired"), None)
            }
            ApiError::TooLarge(m) => (m.clone(), Some("RequestEntityTooLarge"), None),
            ApiError::InvalidListOptions(causes) => {
                let parts: Vec<String> = causes
                    .iter()
                    .map(|c| format!("{}: {}", c.field, c.message))
                    .collect();
                let joined = if parts.len() == 1 {
                    parts[0].clone()
                } else {
                    format!("[{}]", parts.join(", "))
                };
                let causes: Vec<Value> = causes
                    .iter()
                    .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                    .collect();
                (
                    format!("ListOptions.meta.k8s.io \"\" is invalid: {joined}"),
                    Some("Invalid"),
                    Some(json!({"group": "meta.k8s.io", "kind": "ListOptions", "causes": causes})),
                )
            }
            ApiError::NotReady => (
                self.to_string(),
                Some("TooManyRequests"),
                Some(json!({"retryAfterSeconds": 1})),
            ),
            ApiError::Internal(m) => (m.clone(), None, None),
            ApiError::Unavailable(m) => (m.clone(), Some("ServiceUnavailable"), None),
            ApiError::OverBudget {
                group, resource, ..
            } => (
                self.to_string(),
                Some("ServiceUnavailable"),
                Some(about(group, resource, None).1),
            ),
            ApiError::TooLargeResourceVersion { .. } => (
                format!("Timeout: {self}"),
                Some("Timeout"),
                Some(json!({
                    "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                    "retryAfterSeconds": 1
                })),
            ),
            ApiError::Timeout(_) => (
                self.to_string(),
                Some("Timeout"),
                Some(json!({"retryAfterSeconds": 1})),
            ),
        };
        let mut status = Map::new();
        status.insert("kind".into(), json!("Status"));
        status.insert("apiVersion".into(), json!("v1"));
        status.insert("metadata".into(), Value::Object(metadata));
        status.insert("status".into(), json!("Failure"));
        status.insert("message".into(), json!(message));
        if let Some(r) = reason {
            status.insert("reason".into(), json!(r));
        }
        if let Some(d) = details {
            status.insert("details".into(), d);
        }
        status.insert("code".into(), json!(self.code()));
        Value::Object(status)
    }

    /// The Status body as sent: compact JSON with one trailing newline.
    pub fn body(&self) -> Bytes {
        let mut v = go_json(&self.to_status());
        v.push(b'\n');
        Bytes::from(v)
    }

    /// A watch `ERROR` event line carrying this Status (errors after the 200 of a watch).
    pub(crate) fn watch_event(&self) -> Bytes {
        let ev = json!({"type": "ERROR", "object": self.to_status()});
        let mut v = go_json(&ev);
        v.push(b'\n');
        Bytes::from(v)
    }
}

// ----- the other boundaries' errors, as a client is told them --------------------------------
//
// Every error of another module that reaches a client becomes an ApiError here, and only here;
// the message a client reads is decided here too (the cause stays in kcache's logs, except
// for a pass-through, whose caller is told the immediate cause as before).

/// A request kcache had to forward and could not: 503, with the error and its immediate
/// cause (`the upstream API server is unavailable: upstream request failed: …`).
impl From<UpstreamError> for ApiError {
    fn from(e: UpstreamError) -> ApiError {
        ApiError::Unavailable(format!(
            "the upstream API server is unavailable: {}",
            crate::error::with_cause(&e)
        ))
    }
}

/// A caller that could not be authenticated or authorized because the upstream did not
/// answer: 503 (a rejected token or a denial are not errors but answers: 401 and 403).
impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> ApiError {
        match e {
            AuthError::TokenReview(_) => ApiError::Unavailable(
                "the caller's token cannot be checked: the upstream API server is unavailable"
                    .into(),
            ),
            AuthError::AccessReview(_) => ApiError::Unavailable(
                "the request cannot be authorized: the upstream API server is unavailable".into(),
            ),
            AuthError::Unauthenticated => ApiError::Unauthorized,
            AuthError::Forbidden {
                group,
                resource,
                name,
                message,
            } => ApiError::Forbidden {
                group,
                resource,
                name,
                message,
            },
            // A start-up check; a request never meets it.
            AuthError::InsecureListen { .. } => ApiError::Internal(e.to_string()),
        }
    }
}

/// A continue token that cannot be read: the apiserver's 400.
impl From<InvalidToken> for ApiError {
    fn from(e: InvalidToken) -> ApiError {
        ApiError::BadRequest(e.to_string())
    }
}

/// An `includeObject` the Table conversion does not know: the apiserver's 400.
impl From<InvalidIncludeObject> for ApiError {
    fn from(e: InvalidIncludeObject) -> ApiError {
        ApiError::BadRequest(e.to_string())
    }
}

/// What an object-level error is about, as the apiserver names it: the subject of its message
/// (`configmaps "x"`, `deployments.apps`) and its details (`name`, `group`, `kind` = the
/// resource plural; empty parts left out).
fn about(group: &str, resource: &str, name: Option<&str>) -> (String, Value) {
    let qualified = if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    };
    let mut d = Map::new();
    if let Some(n) = name {
        d.insert("name".into(), json!(n));
    }
    if !group.is_empty() {
        d.insert("group".into(), json!(group));
    }
    d.insert("kind".into(), json!(resource));
    let subject = match name {
        Some(n) => format!("{qualified} {n:?}"),
        None => qualified,
    };
    (subject, Value::Object(d))
}

/// Compact JSON as Go's encoding/json (the apiserver's serializer) writes it: messages echo
/// client input (selectors, values), and Go escapes `<`, `>`, `&`, U+2028 and U+2029 in
/// strings where serde_json does not.
fn go_json(v: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    crate::gojson::write_value(&mut out, v, false);
    out
}

#[cfg(test)]
mod protobuf_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn text(e: &ApiError) -> String {
        String::from_utf8(e.body().to_vec()).unwrap()
    }

    #[test]
    fn not_found_core_and_custom() {
        let e = ApiError::NotFound {
            group: "".into(),
            resource: "configmaps".into(),
            name: "does-not-exist".into(),
        };
        assert_eq!(
            text(&e),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"configmaps \\\"does-not-exist\\\" not found\",\"reason\":\"NotFound\",\"details\":{\"name\":\"does-not-exist\",\"kind\":\"configmaps\"},\"code\":404}\n"
        );
        let e = ApiError::NotFound {
            group: "fixtures.example.com".into(),
            resource: "widgets".into(),
            name: "nope".into(),
        };
        assert!(text(&e).contains("\"message\":\"widgets.fixtures.example.com \\\"nope\\\" not found\",\"reason\":\"NotFound\",\"details\":{\"name\":\"nope\",\"group\":\"fixtures.example.com\",\"kind\":\"widgets\"}"));
    }

    #[test]
    fn invalid_joins_several_causes() {
        let e = ApiError::InvalidListOptions(vec![
            Cause::forbidden("resourceVersionMatch", "a"),
            Cause::forbidden("sendInitialEvents", "b"),
        ]);
        assert!(text(&e).contains(
            "is invalid: [resourceVersionMatch: Forbidden: a, sendInitialEvents: Forbidden: b]"
        ));
    }

    #[test]
    fn html_characters_are_escaped_as_go_does() {
        let e = ApiError::BadRequest("invalid selector: 'a>b'; <nil> & \u{2028}".into());
        assert!(text(&e).contains(
            r#""message":"invalid selector: 'a\u003eb'; \u003cnil\u003e \u0026 \u2028","#
        ));
        assert!(String::from_utf8(e.watch_event().to_vec())
            .unwrap()
            .contains(r"'a\u003eb'"));
    }

    #[test]
    fn auth_errors_match_the_recordings() {
        let read = kcache_sim::recordings::read_string;
        let forbidden = ApiError::Forbidden {
            group: "".into(),
            resource: "configmaps".into(),
            name: None,
            message: "User \"system:anonymous\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"fixtures-a\"".into(),
        };
        assert_eq!(text(&forbidden), read("err-anonymous-forbidden-403.json"));
        assert_eq!(
            text(&ApiError::Unauthorized),
            read("err-unauthenticated-401.json")
        );
        let named = ApiError::Forbidden {
            group: "apps".into(),
            resource: "deployments".into(),
            name: Some("web".into()),
            message: "denied".into(),
        };
        assert!(text(&named).contains(r#""message":"deployments.apps \"web\" is forbidden: denied","reason":"Forbidden","details":{"name":"web","group":"apps","kind":"deployments"},"code":403"#));
    }

    /// The other modules' errors reach clients with the messages they had when they were
    /// flattened to text.
    #[test]
    fn boundary_errors_keep_their_client_messages() {
        let e = UpstreamError::Transport(kube_client::Error::Service("boom".into()));
        assert_eq!(
            ApiError::from(e),
            ApiError::Unavailable(
                "the upstream API server is unavailable: upstream request failed: ServiceError: boom"
                    .into()
            )
        );
        let cause = || UpstreamError::Timeout(std::time::Duration::from_secs(1));
        assert_eq!(
            text(&AuthError::TokenReview(cause()).into()),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"the caller's token cannot be checked: the upstream API server is unavailable\",\"reason\":\"ServiceUnavailable\",\"code\":503}\n"
        );
        assert_eq!(
            ApiError::from(AuthError::AccessReview(cause())),
            ApiError::Unavailable(
                "the request cannot be authorized: the upstream API server is unavailable".into()
            )
        );
    }

    #[test]
    fn internal_has_no_reason() {
        let e = ApiError::Internal("boom".into());
        assert_eq!(
            text(&e),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"boom\",\"code\":500}\n"
        );
    }
}
