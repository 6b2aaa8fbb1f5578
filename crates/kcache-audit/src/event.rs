//! The audit.k8s.io/v1 `Event`: what one request looks like at one stage.
//!
//! A request's data ([`Request`]: who, what, from where, when it arrived, at what level) is
//! built once and shared behind an `Arc` by the events of its stages; an [`Event`] adds only
//! what its stage knows (the time, the response's status, the bodies, the annotations).
//! Building and recording one copies no request data and serialises nothing: the backends
//! write the JSON ([`Event::write_json`], in `json`) on their own thread or task.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::policy::{Level, ResourceAttributes, RuleOutcome, Stage, Stages};

mod json;
#[cfg(test)]
mod tests;

pub(crate) use json::write_event_list;

/// A request's audit ID (the event's `auditID`): the same in every event of the request, so
/// that they can be put together.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct AuditId(AuditIdInner);

#[derive(Clone, PartialEq, Eq, Hash)]
enum AuditIdInner {
    /// Kept as its 16 bytes and written out only by the backend.
    Uuid(uuid::Uuid),
    /// As a client sent it.
    Given(String),
}

impl AuditId {
    /// A new random ID (a version 4 UUID, as the apiserver makes).
    pub fn random() -> AuditId {
        AuditId(AuditIdInner::Uuid(uuid::Uuid::new_v4()))
    }

    /// An ID the client chose: the apiserver takes a request's `Audit-ID` header as its
    /// audit ID when there is one. kcache sending the same `Audit-ID` upstream when it
    /// forwards a request puts its event and the apiserver's under one ID.
    pub fn given(id: impl Into<String>) -> AuditId {
        AuditId(AuditIdInner::Given(id.into()))
    }
}

impl fmt::Display for AuditId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            AuditIdInner::Uuid(u) => fmt::Display::fmt(&u.hyphenated(), f),
            AuditIdInner::Given(s) => f.write_str(s),
        }
    }
}

impl fmt::Debug for AuditId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AuditId({self})")
    }
}

/// Who made a request: authentication.k8s.io/v1 `UserInfo`, with its JSON (empty fields
/// left out).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default)]
pub struct UserInfo {
    /// The user's name (`system:serviceaccount:kube-system:default`, `alice`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    /// A unique ID of the user, when the authenticator gives one.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    /// The groups the user is in.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// Whatever else the authenticator said of the user; written sorted by key.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Vec<String>>,
}

/// What a request acts on (audit.k8s.io/v1 `ObjectReference`); empty fields are left out of
/// the JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectRef {
    /// The resource (`pods`).
    pub resource: String,
    /// The namespace; empty for a cluster-scoped resource or all namespaces.
    pub namespace: String,
    /// The object's name; empty for a collection.
    pub name: String,
    /// The object's UID, when known.
    pub uid: String,
    /// The API group; empty for the core group.
    pub api_group: String,
    /// The API version (`v1`).
    pub api_version: String,
    /// The object's resourceVersion, when known.
    pub resource_version: String,
    /// The subresource (`status`, `log`).
    pub subresource: String,
}

impl ObjectRef {
    /// The reference the apiserver records for a resource request: resource, namespace,
    /// name, group, version and subresource.
    pub fn from_attributes(r: &ResourceAttributes<'_>) -> ObjectRef {
        ObjectRef {
            resource: r.resource.to_owned(),
            namespace: r.namespace.unwrap_or("").to_owned(),
            name: r.name.unwrap_or("").to_owned(),
            api_group: r.group.to_owned(),
            api_version: r.version.to_owned(),
            subresource: r.subresource.unwrap_or("").to_owned(),
            ..ObjectRef::default()
        }
    }
}

/// The response's status as an event records it (meta/v1 `Status`, its bounded fields). For
/// a success the apiserver records only the code; for a failure, what the response's Status
/// body says. Empty fields are left out of the JSON.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseStatus {
    /// The HTTP status code.
    pub code: u16,
    /// `Success` or `Failure`.
    pub status: String,
    /// The Status's human-readable message.
    pub message: String,
    /// The Status's machine-readable reason (`NotFound`, `Forbidden`).
    pub reason: String,
    /// The Status's `details`, as JSON text.
    pub details: Option<String>,
}

impl ResponseStatus {
    /// A status of the code alone: what the apiserver records for a response that is not a
    /// Status (every successful read).
    pub fn from_code(code: u16) -> ResponseStatus {
        ResponseStatus {
            code,
            ..ResponseStatus::default()
        }
    }

    /// The status of a response whose body is a meta/v1 `Status` (an error, or a delete's
    /// answer): its `status`, `message`, `reason` and `details`, with `code` the HTTP code
    /// sent (which the apiserver records over the Status's own `code`). A body that is not a
    /// Status JSON gives [`ResponseStatus::from_code`].
    pub fn from_status_body(code: u16, body: &[u8]) -> ResponseStatus {
        #[derive(Deserialize)]
        struct StatusBody<'a> {
            #[serde(default)]
            kind: Cow<'a, str>,
            #[serde(default)]
            status: String,
            #[serde(default)]
            message: String,
            #[serde(default)]
            reason: String,
            #[serde(default, borrow)]
            details: Option<&'a serde_json::value::RawValue>,
        }
        match serde_json::from_slice::<StatusBody<'_>>(body) {
            Ok(s) if s.kind == "Status" => ResponseStatus {
                code,
                status: s.status,
                message: s.message,
                reason: s.reason,
                details: s.details.map(|d| d.get().to_owned()),
            },
            _ => ResponseStatus::from_code(code),
        }
    }
}

/// An event's annotations (written sorted by key, as the apiserver writes a map). Keys and
/// values are usually fixed strings (`authorization.k8s.io/decision`: `allow`), which cost
/// no allocation.
pub type Annotations = BTreeMap<Cow<'static, str>, Cow<'static, str>>;

/// What every event of one request shares. Build it once when the policy has given the
/// request a level other than `None`, put it in an `Arc`, and make each stage's [`Event`]
/// from it ([`Request::event`]).
#[derive(Debug, Clone)]
pub struct Request {
    /// The request's audit ID.
    pub audit_id: AuditId,
    /// The level the policy gave the request.
    pub level: Level,
    /// The stages not recorded (the policy's and its rule's `omitStages`).
    pub omit_stages: Stages,
    /// Whether `metadata.managedFields` is left out of the bodies recorded.
    pub omit_managed_fields: bool,
    /// The request URI as the client sent it: path and query.
    pub request_uri: String,
    /// The Kubernetes verb; for a non-resource request the lower-cased HTTP method.
    pub verb: String,
    /// The authenticated user.
    pub user: Arc<UserInfo>,
    /// The user the request impersonates, if it does.
    pub impersonated_user: Option<Arc<UserInfo>>,
    /// Where the request came from: the addresses of `X-Forwarded-For`, then `X-Real-Ip`,
    /// then the connection's peer, as the apiserver lists them.
    pub source_ips: Vec<IpAddr>,
    /// The client's `User-Agent`; empty when it sent none.
    pub user_agent: String,
    /// What the request acts on; `None` for a non-resource request.
    pub object_ref: Option<ObjectRef>,
    /// When the request arrived.
    pub received: SystemTime,
}

impl Request {
    /// A request with the policy's `outcome` for it, its audit ID, verb, URI and user, and
    /// the time it arrived; the other fields empty, to be set before it is shared.
    pub fn new(
        outcome: &RuleOutcome,
        audit_id: AuditId,
        verb: impl Into<String>,
        request_uri: impl Into<String>,
        user: Arc<UserInfo>,
        received: SystemTime,
    ) -> Request {
        Request {
            audit_id,
            level: outcome.level,
            omit_stages: outcome.omit_stages,
            omit_managed_fields: outcome.omit_managed_fields,
            request_uri: request_uri.into(),
            verb: verb.into(),
            user,
            impersonated_user: None,
            source_ips: Vec::new(),
            user_agent: String::new(),
            object_ref: None,
            received,
        }
    }

    /// Whether an event is recorded at `stage`: the level is not `None` and the policy does
    /// not omit the stage.
    pub fn records(&self, stage: Stage) -> bool {
        self.level != Level::None && !self.omit_stages.contains(stage)
    }

    /// An event of this request at `stage`, stamped `at`, with nothing else set.
    pub fn event(self: &Arc<Self>, stage: Stage, at: SystemTime) -> Event {
        Event {
            request: Arc::clone(self),
            stage,
            at,
            response_status: None,
            request_object: None,
            response_object: None,
            annotations: Annotations::new(),
        }
    }

    /// The `RequestReceived` event, stamped with the time the request arrived.
    pub fn received_event(self: &Arc<Self>) -> Event {
        self.event(Stage::RequestReceived, self.received)
    }
}

/// One audit event: a request at one stage.
///
/// The bodies are JSON as sent or received. A body is written only at a level that records
/// it (`requestObject` from `Request`, `responseObject` at `RequestResponse`), so setting one
/// at a lower level costs nothing but the reference.
#[derive(Debug, Clone)]
pub struct Event {
    /// The request, shared by its events.
    pub request: Arc<Request>,
    /// The stage this event records.
    pub stage: Stage,
    /// When the request reached the stage (the event's `stageTimestamp`).
    pub at: SystemTime,
    /// The response's status; `None` at `RequestReceived`.
    pub response_status: Option<ResponseStatus>,
    /// The request's body (JSON), for levels `Request` and `RequestResponse`.
    pub request_object: Option<Bytes>,
    /// The response's body (JSON), for level `RequestResponse`.
    pub response_object: Option<Bytes>,
    /// Annotations (`authorization.k8s.io/decision`, …).
    pub annotations: Annotations,
}

impl Event {
    /// This event with `status` as its response status.
    #[must_use]
    pub fn with_status(mut self, status: ResponseStatus) -> Event {
        self.response_status = Some(status);
        self
    }

    /// This event with one more annotation.
    #[must_use]
    pub fn annotate(
        mut self,
        key: impl Into<Cow<'static, str>>,
        value: impl Into<Cow<'static, str>>,
    ) -> Event {
        self.annotations.insert(key.into(), value.into());
        self
    }

    /// Append the event's JSON to `out`, as the apiserver's log backend writes it (field
    /// order, omitted empty fields, timestamps in microseconds, Go's escaping of `<`, `>`
    /// and `&`), without a newline. `metadata.managedFields` is left out of the bodies when
    /// the request's `omit_managed_fields` says so.
    pub fn write_json(&self, out: &mut Vec<u8>) {
        json::write_event(self, out);
    }
}
