//! The sim's one error type and its mapping to `metav1.Status` bodies, byte-compatible with
//! kube-apiserver v1.28 (key order `kind, apiVersion, metadata, status, message, reason,
//! details, code`; `reason`/`details` omitted when the apiserver omits them).

use super::encode::J;

/// A field-level cause inside a 422 Invalid Status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    /// `FieldValueForbidden`, `FieldValueNotSupported`, `FieldValueInvalid`, `FieldValueRequired`.
    pub reason: &'static str,
    /// The message without the field prefix, e.g. `Forbidden: ...`.
    pub message: String,
    /// The field path, e.g. `resourceVersionMatch`.
    pub field: String,
}

impl Cause {
    /// A `Forbidden` cause.
    pub fn forbidden(field: &str, detail: &str) -> Cause {
        Cause {
            reason: "FieldValueForbidden",
            message: format!("Forbidden: {detail}"),
            field: field.into(),
        }
    }

    /// An `Unsupported value` cause listing the supported values.
    pub fn not_supported(field: &str, value: &str, supported: &[&str]) -> Cause {
        let list: Vec<String> = supported.iter().map(|s| format!("\"{s}\"")).collect();
        Cause {
            reason: "FieldValueNotSupported",
            message: format!(
                "Unsupported value: \"{value}\": supported values: {}",
                list.join(", ")
            ),
            field: field.into(),
        }
    }

    /// An `Invalid value` cause.
    pub fn invalid(field: &str, value: &str, detail: &str) -> Cause {
        Cause {
            reason: "FieldValueInvalid",
            message: format!("Invalid value: \"{value}\": {detail}"),
            field: field.into(),
        }
    }

    /// A `Required value` cause.
    pub fn required(field: &str, detail: &str) -> Cause {
        Cause {
            reason: "FieldValueRequired",
            message: format!("Required value: {detail}"),
            field: field.into(),
        }
    }
}

/// Who an object-level error is about: the qualified resource and the name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// API group (`""` for core).
    pub group: String,
    /// Plural resource, e.g. `configmaps`.
    pub resource: String,
    /// Object name.
    pub name: String,
}

impl Target {
    fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    /// `configmaps`, `deployments.apps "web"`: what a 403 is about.
    fn subject(&self) -> String {
        if self.name.is_empty() {
            self.qualified()
        } else {
            format!("{} \"{}\"", self.qualified(), self.name)
        }
    }

    fn details(&self, uid: Option<&str>) -> J {
        let mut d = vec![("name", J::s(&self.name))];
        if !self.group.is_empty() {
            d.push(("group", J::s(&self.group)));
        }
        d.push(("kind", J::s(&self.resource)));
        if let Some(uid) = uid {
            d.push(("uid", J::s(uid)));
        }
        J::Obj(d)
    }
}

/// Every failure the sim reports, over HTTP (as a Status) or from its Rust API.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum SimError {
    /// 404 for a missing object.
    #[error("{} \"{}\" not found", .0.qualified(), .0.name)]
    NotFound(Target),
    /// 404 "the server could not find the requested resource" (unknown resource in a built-in group).
    #[error("the server could not find the requested resource")]
    NoSuchResource,
    /// 404 text/plain `404 page not found` (unknown group, unserved CRD path, non-API path).
    #[error("404 page not found")]
    PageNotFound,
    /// 409 on create of an existing name.
    #[error("{} \"{}\" already exists", .0.qualified(), .0.name)]
    AlreadyExists(Target),
    /// 409 on a stale `metadata.resourceVersion`.
    #[error("Operation cannot be fulfilled on {} \"{}\": the object has been modified; please apply your changes to the latest version and try again", .0.qualified(), .0.name)]
    Conflict(Target),
    /// 400 with the given message.
    #[error("{0}")]
    BadRequest(String),
    /// 422 for an object (`kind` is the Kind, e.g. `ConfigMap`).
    #[error("{} \"{name}\" is invalid: {}", qualified_kind(.kind, .group), join_causes(.causes))]
    Invalid {
        /// Kind of the object.
        kind: String,
        /// Group of the object (omitted in details when empty).
        group: String,
        /// Object name.
        name: String,
        /// Field errors.
        causes: Vec<Cause>,
    },
    /// 422 for bad ListOptions (group `meta.k8s.io`, kind `ListOptions`).
    #[error("ListOptions.meta.k8s.io \"\" is invalid: {}", join_causes(.0))]
    InvalidListOptions(Vec<Cause>),
    /// 410 Expired; `continue_token` is set for an expired continue token.
    #[error("{message}")]
    Expired {
        /// The message.
        message: String,
        /// A replacement token (rv -1) for an inconsistent continuation.
        continue_token: Option<String>,
    },
    /// 500 without a reason (raw storage errors, e.g. a future revision on the etcd path).
    #[error("{0}")]
    Internal(String),
    /// 500 InternalError (injected faults).
    #[error("Internal error occurred: {0}")]
    InternalError(String),
    /// 504 "Too large resource version" after waiting for the store to catch up.
    #[error("Timeout: Too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion {
        /// The requested RV.
        requested: u64,
        /// The store's RV.
        current: u64,
    },
    /// 405.
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    /// 406.
    #[error(
        "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"
    )]
    NotAcceptable,
    /// 415 for an unsupported PATCH content type.
    #[error("415: Unsupported Media Type")]
    UnsupportedMediaType,
    /// 429 with Retry-After.
    #[error("{message}")]
    TooManyRequests {
        /// The message.
        message: String,
        /// Seconds for `Retry-After` and `details.retryAfterSeconds`.
        retry_after: u32,
    },
    /// 503.
    #[error("{0}")]
    ServiceUnavailable(String),
    /// 401 for credentials the authenticator does not accept.
    #[error("Unauthorized")]
    Unauthorized,
    /// 403 from the RBAC table: `target.name` is empty for collection requests; the resource
    /// is without subresource.
    #[error("{} is forbidden: {message}", .target.subject())]
    Forbidden {
        /// Resource (with subresource, `pods/log`), group and name.
        target: Target,
        /// The authorizer's sentence.
        message: String,
    },
    /// Any other code (injected faults, the 406 of a wrong PartialObjectMetadata form).
    #[error("{message}")]
    Other {
        /// HTTP status code.
        code: u16,
        /// Status reason (may be empty).
        reason: &'static str,
        /// The message.
        message: String,
    },
}

/// A kind as the apiserver's Invalid message names it: `Kind.group`, or `Kind` in the core
/// group (Go's `GroupKind.String`).
fn qualified_kind(kind: &str, group: &str) -> String {
    if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    }
}

fn join_causes(causes: &[Cause]) -> String {
    let parts: Vec<String> = causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    if parts.len() == 1 {
        parts[0].clone()
    } else {
        format!("[{}]", parts.join(", "))
    }
}

fn causes_json(causes: &[Cause]) -> J {
    J::Arr(
        causes
            .iter()
            .map(|c| {
                J::Obj(vec![
                    ("reason", J::s(c.reason)),
                    ("message", J::s(&c.message)),
                    ("field", J::s(&c.field)),
                ])
            })
            .collect(),
    )
}

/// Builds a `status: Failure` body. `details: None` omits the key.
fn failure(code: u16, message: String, reason: Option<&str>, details: Option<J>, meta: J) -> J {
    let mut f = vec![
        ("kind", J::s("Status")),
        ("apiVersion", J::s("v1")),
        ("metadata", meta),
        ("status", J::s("Failure")),
        ("message", J::Str(message)),
    ];
    if let Some(r) = reason {
        f.push(("reason", J::s(r)));
    }
    if let Some(d) = details {
        f.push(("details", d));
    }
    f.push(("code", J::Int(i64::from(code))));
    J::Obj(f)
}

impl SimError {
    /// The HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            SimError::NotFound(_) | SimError::NoSuchResource | SimError::PageNotFound => 404,
            SimError::AlreadyExists(_) | SimError::Conflict(_) => 409,
            SimError::BadRequest(_) => 400,
            SimError::Invalid { .. } | SimError::InvalidListOptions(_) => 422,
            SimError::Expired { .. } => 410,
            SimError::Internal(_) | SimError::InternalError(_) => 500,
            SimError::TooLargeResourceVersion { .. } => 504,
            SimError::MethodNotAllowed => 405,
            SimError::NotAcceptable => 406,
            SimError::UnsupportedMediaType => 415,
            SimError::TooManyRequests { .. } => 429,
            SimError::ServiceUnavailable(_) => 503,
            SimError::Unauthorized => 401,
            SimError::Forbidden { .. } => 403,
            SimError::Other { code, .. } => *code,
        }
    }

    /// Seconds for a `Retry-After` header, when the apiserver sends one.
    pub fn retry_after(&self) -> Option<u32> {
        match self {
            SimError::TooLargeResourceVersion { .. } => Some(1),
            SimError::TooManyRequests { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }

    /// An error for an arbitrary status code, as injected by `Faults::fail_requests`.
    pub fn injected(code: u16) -> SimError {
        match code {
            500 => SimError::InternalError("injected fault".into()),
            503 => SimError::ServiceUnavailable(
                "the server is currently unable to handle the request".into(),
            ),
            429 => SimError::TooManyRequests {
                message: "Too many requests, please try again later.".into(),
                retry_after: 1,
            },
            400 => SimError::BadRequest("injected fault".into()),
            404 => SimError::NoSuchResource,
            409 => SimError::Other {
                code,
                reason: "Conflict",
                message: "injected fault".into(),
            },
            410 => SimError::Expired {
                message: "injected fault".into(),
                continue_token: None,
            },
            504 => SimError::Other {
                code,
                reason: "Timeout",
                message: "Timeout: request did not complete within the allotted timeout".into(),
            },
            _ => SimError::Other {
                code,
                reason: "",
                message: "injected fault".into(),
            },
        }
    }

    /// The `metav1.Status` object for this error.
    pub fn status_json(&self) -> J {
        let code = self.code();
        let msg = self.to_string();
        let empty = || J::Obj(vec![]);
        match self {
            SimError::NotFound(t) => {
                failure(code, msg, Some("NotFound"), Some(t.details(None)), empty())
            }
            SimError::NoSuchResource | SimError::PageNotFound => {
                failure(404, msg, Some("NotFound"), Some(empty()), empty())
            }
            SimError::AlreadyExists(t) => failure(
                code,
                msg,
                Some("AlreadyExists"),
                Some(t.details(None)),
                empty(),
            ),
            SimError::Conflict(t) => {
                failure(code, msg, Some("Conflict"), Some(t.details(None)), empty())
            }
            SimError::BadRequest(_) => failure(code, msg, Some("BadRequest"), None, empty()),
            SimError::Invalid {
                kind,
                group,
                name,
                causes,
            } => {
                // Go's `omitempty`: a nameless object's details have no name.
                let mut d = Vec::new();
                if !name.is_empty() {
                    d.push(("name", J::s(name)));
                }
                if !group.is_empty() {
                    d.push(("group", J::s(group)));
                }
                d.push(("kind", J::s(kind)));
                d.push(("causes", causes_json(causes)));
                failure(code, msg, Some("Invalid"), Some(J::Obj(d)), empty())
            }
            SimError::InvalidListOptions(causes) => {
                let d = J::Obj(vec![
                    ("group", J::s("meta.k8s.io")),
                    ("kind", J::s("ListOptions")),
                    ("causes", causes_json(causes)),
                ]);
                failure(code, msg, Some("Invalid"), Some(d), empty())
            }
            SimError::Expired { continue_token, .. } => {
                let meta = match continue_token {
                    Some(t) => J::Obj(vec![("continue", J::s(t))]),
                    None => empty(),
                };
                failure(code, msg, Some("Expired"), None, meta)
            }
            SimError::Internal(_) => failure(code, msg, None, None, empty()),
            SimError::InternalError(inner) => {
                let d = J::Obj(vec![(
                    "causes",
                    J::Arr(vec![J::Obj(vec![("message", J::s(inner))])]),
                )]);
                failure(code, msg, Some("InternalError"), Some(d), empty())
            }
            SimError::TooLargeResourceVersion { .. } => {
                let d = J::Obj(vec![
                    (
                        "causes",
                        J::Arr(vec![J::Obj(vec![
                            ("reason", J::s("ResourceVersionTooLarge")),
                            ("message", J::s("Too large resource version")),
                        ])]),
                    ),
                    ("retryAfterSeconds", J::Int(1)),
                ]);
                failure(code, msg, Some("Timeout"), Some(d), empty())
            }
            SimError::MethodNotAllowed => {
                failure(code, msg, Some("MethodNotAllowed"), Some(empty()), empty())
            }
            SimError::NotAcceptable => failure(code, msg, Some("NotAcceptable"), None, empty()),
            SimError::UnsupportedMediaType => failure(
                code,
                msg,
                Some("UnsupportedMediaType"),
                Some(empty()),
                empty(),
            ),
            SimError::TooManyRequests { retry_after, .. } => {
                let d = J::Obj(vec![("retryAfterSeconds", J::Int(i64::from(*retry_after)))]);
                failure(code, msg, Some("TooManyRequests"), Some(d), empty())
            }
            SimError::ServiceUnavailable(_) => {
                failure(code, msg, Some("ServiceUnavailable"), None, empty())
            }
            SimError::Unauthorized => failure(code, msg, Some("Unauthorized"), None, empty()),
            SimError::Forbidden { target, .. } => {
                let mut d = Vec::new();
                if !target.name.is_empty() {
                    d.push(("name", J::s(&target.name)));
                }
                if !target.group.is_empty() {
                    d.push(("group", J::s(&target.group)));
                }
                d.push(("kind", J::s(&target.resource)));
                failure(code, msg, Some("Forbidden"), Some(J::Obj(d)), empty())
            }
            SimError::Other { reason, .. } => {
                let reason = if reason.is_empty() {
                    None
                } else {
                    Some(*reason)
                };
                failure(code, msg, reason, None, empty())
            }
        }
    }
}

/// The 200 body of a DELETE of a built-in object.
pub fn delete_success(target: &Target, uid: &str) -> J {
    J::Obj(vec![
        ("kind", J::s("Status")),
        ("apiVersion", J::s("v1")),
        ("metadata", J::Obj(vec![])),
        ("status", J::s("Success")),
        ("details", target.details(Some(uid))),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(e: &SimError) -> String {
        String::from_utf8(e.status_json().to_body()).unwrap()
    }

    #[test]
    fn not_found_core_and_group() {
        let t = Target {
            group: String::new(),
            resource: "configmaps".into(),
            name: "x".into(),
        };
        assert_eq!(
            body(&SimError::NotFound(t)),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"configmaps \\\"x\\\" not found\",\"reason\":\"NotFound\",\"details\":{\"name\":\"x\",\"kind\":\"configmaps\"},\"code\":404}\n"
        );
        let t = Target {
            group: "fixtures.example.com".into(),
            resource: "widgets".into(),
            name: "nope".into(),
        };
        assert!(body(&SimError::NotFound(t)).contains(
            "widgets.fixtures.example.com \\\"nope\\\" not found\",\"reason\":\"NotFound\",\"details\":{\"name\":\"nope\",\"group\":\"fixtures.example.com\",\"kind\":\"widgets\"}"
        ));
    }

    #[test]
    fn list_options_two_causes_joined() {
        let e = SimError::InvalidListOptions(vec![
            Cause::forbidden("a", "x"),
            Cause::forbidden("b", "y"),
        ]);
        assert!(body(&e).contains("is invalid: [a: Forbidden: x, b: Forbidden: y]"));
    }
}
