//! The audit trail of the requests kcache answers itself.
//!
//! A read kcache answers from its cache, proves by the type's metadata, or answers with
//! another caller's forwarded answer never reaches the apiserver, so the cluster's audit log
//! cannot say who read what. kcache writes those events itself, with the apiserver's own
//! policy file and event format (the `kcache-audit` crate): for every request the policy
//! audits, events at the stages it keeps, with the caller kcache authenticated, the request's
//! object reference, the answer's status, kcache's authorization decision and how kcache
//! answered (`kcache.dev/answered-by`). A request forwarded under the caller's own identity is
//! audited by the apiserver; kcache audits it too only when `audit.forwarded` is set.
//!
//! On the request path this costs a policy evaluation, one shared record of the request, and
//! per stage its serialising and a non-blocking hand-over (`kcache_audit::Auditor::record`):
//! writing happens on the backends' side, and a backend that cannot keep up loses events
//! (counted), never a reader's time.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::SystemTime;

use axum::response::Response;
use http::request::Parts;
use http::{header, HeaderMap};
use kcache_audit::{
    Attributes, AuditId, Auditor, Event, Level, ObjectRef, Request as Audited, ResourceAttributes,
    ResponseStatus, RuleOutcome, Stage, UserInfo,
};

use super::request::{Parsed, Verb};
use super::AnsweredBy;
use crate::auth::{Caller, ConnInfo, Verdict};

/// Set on a response that is kcache's own refusal, with its Status as JSON (shared with the
/// body where the body is that JSON): what the audit event's `responseStatus` says.
#[derive(Debug, Clone)]
pub(crate) struct Refusal {
    pub code: u16,
    pub status: bytes::Bytes,
}

/// The audit trail of one kcache: the running auditor.
pub(crate) struct Audit {
    auditor: Auditor,
}

impl Audit {
    pub(crate) fn new(auditor: Auditor) -> Audit {
        Audit { auditor }
    }

    /// The auditor, for its counters and its flush at shutdown.
    pub(crate) fn auditor(&self) -> &Auditor {
        &self.auditor
    }

    /// A request the policy audits, made into the record its events share; None when the
    /// policy audits it at level None. `caller`: None when authentication refused it.
    pub(super) fn begin(
        &self,
        received: SystemTime,
        parts: &Parts,
        parsed: &Parsed,
        caller: Option<&Caller>,
    ) -> Option<Pending> {
        let resource = parsed.path.as_ref().map(|p| ResourceAttributes {
            group: &p.group,
            version: &p.version,
            resource: &p.resource,
            subresource: p.subresource.as_deref(),
            namespace: p.namespace.as_deref(),
            name: p.name.as_deref(),
        });
        self.begin_as(received, parts, audit_verb(parsed, parts), resource, caller)
    }

    /// As [`Audit::begin`], for a request of kcache's own API, audited as the read of the
    /// API's `resource` it is (`verb`), so that the policy's rules for that resource apply.
    pub(super) fn begin_as(
        &self,
        received: SystemTime,
        parts: &Parts,
        verb: &'static str,
        resource: Option<ResourceAttributes<'_>>,
        caller: Option<&Caller>,
    ) -> Option<Pending> {
        let user = caller.and_then(|c| c.user.as_deref());
        let path = parts.uri.path();
        let outcome = self.auditor.policy().evaluate(&Attributes {
            user: user.map_or("", |u| u.username.as_str()),
            groups: user.map_or(&[], |u| u.groups.as_slice()),
            verb,
            path,
            resource,
        });
        if outcome.level == Level::None {
            return None;
        }
        let object_ref = resource.as_ref().map(ObjectRef::from_attributes);
        Some(Pending {
            request_uri: parts
                .uri
                .path_and_query()
                .map_or_else(|| path.to_string(), |p| p.as_str().to_string()),
            verb,
            user: audit_user(caller),
            source_ips: source_ips(&parts.headers, parts.extensions.get::<ConnInfo>()),
            user_agent: parts
                .headers
                .get(header::USER_AGENT)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string(),
            object_ref,
            received,
            outcome,
            unauthenticated: caller.is_none(),
        })
    }

    /// The events of a request once its answer is known (`answered`: how; `verdict`: what
    /// kcache's authorizer answered, if kcache asked it), by the stages its rule keeps; a
    /// watch's last stage comes when its stream ends, so the response it returns carries it.
    /// Forwarded requests get none unless `audit.forwarded` is set.
    pub(super) fn finish(
        &self,
        pending: Pending,
        resp: Response,
        answered: AnsweredBy,
        verdict: Option<Verdict>,
        long_running: bool,
    ) -> Response {
        if answered == AnsweredBy::Upstream && !self.auditor.audits_forwarded() {
            return resp;
        }
        let status = match resp.extensions().get::<Refusal>() {
            Some(r) => ResponseStatus::from_status_body(r.code, &r.status),
            None => ResponseStatus::from_code(resp.status().as_u16()),
        };
        // kcache's decision where kcache decided: a forwarded answer's is the upstream's
        // (in its own audit log), and a request refused before authorization (a limit) has
        // none, as in the apiserver's log.
        let decision = match (answered, verdict) {
            (AnsweredBy::Upstream, _) | (_, None | Some(Verdict::Own)) => None,
            (_, Some(Verdict::Allow(reason))) => Some(("allow", reason)),
            (_, Some(Verdict::Forbid(reason))) => Some(("forbid", reason)),
        };
        let annotations = Annotations { answered, decision };
        let unauthenticated = pending.unauthenticated;
        let request = pending.into_request(resp.headers());
        let record = |stage: Stage, status: Option<ResponseStatus>| {
            if request.records(stage) {
                self.auditor
                    .record(annotations.add(request.event(stage, SystemTime::now()), status));
            }
        };
        if unauthenticated && status.code == 401 {
            record(Stage::ResponseStarted, Some(status));
            return resp;
        }
        if request.records(Stage::RequestReceived) {
            self.auditor.record(request.received_event());
        }
        if !long_running {
            record(Stage::ResponseComplete, Some(status));
            return resp;
        }
        // A watch is recorded when its answer starts, refused or not (as the apiserver records
        // one), and again when it ends: at once for a refusal, else when its stream ends.
        record(Stage::ResponseStarted, Some(status.clone()));
        if !resp.status().is_success() {
            record(Stage::ResponseComplete, Some(status));
            return resp;
        }
        // The stream's end: when its body is dropped, however it ends.
        let complete = Completion {
            auditor: self.auditor.clone(),
            request: Some(request),
            status,
            annotations,
        };
        resp.map(|b| {
            axum::body::Body::new(http_body_util::BodyExt::map_frame(b, move |f| {
                let _ = &complete;
                f
            }))
        })
    }
}

/// A request being audited: what its events will say of it, taken before the request is
/// handed on.
pub(super) struct Pending {
    request_uri: String,
    verb: &'static str,
    user: Arc<UserInfo>,
    source_ips: Vec<IpAddr>,
    user_agent: String,
    object_ref: Option<ObjectRef>,
    received: SystemTime,
    outcome: RuleOutcome,
    /// Refused before its caller was known (admission: credentials refused, a rate or size
    /// limit). A 401 is recorded at ResponseStarted only, with no user, as a v1.34.9
    /// apiserver records it (tests/fixtures/audit).
    unauthenticated: bool,
}

impl Pending {
    /// The record every event of the request shares; its `auditID` is the answer's
    /// `Audit-Id` (the upstream's for a forwarded answer, as the apiserver's own event says).
    fn into_request(self, headers: &HeaderMap) -> Arc<Audited> {
        let audit_id = headers
            .get("audit-id")
            .and_then(|v| v.to_str().ok())
            .map_or_else(AuditId::random, AuditId::given);
        let mut request = Audited::new(
            &self.outcome,
            audit_id,
            self.verb,
            self.request_uri,
            self.user,
            self.received,
        );
        request.source_ips = self.source_ips;
        request.user_agent = self.user_agent;
        request.object_ref = self.object_ref;
        Arc::new(request)
    }
}

/// The annotations kcache adds to each event.
#[derive(Clone)]
struct Annotations {
    answered: AnsweredBy,
    /// `authorization.k8s.io/decision` and `/reason`, where kcache decided.
    decision: Option<(&'static str, Arc<str>)>,
}

impl Annotations {
    /// `event` with these annotations and `status`.
    fn add(&self, mut event: Event, status: Option<ResponseStatus>) -> Event {
        event.response_status = status;
        event = event.annotate("kcache.dev/answered-by", self.answered.as_str());
        if let Some((decision, reason)) = &self.decision {
            // The apiserver writes the reason beside every decision, empty or not.
            event = event
                .annotate("authorization.k8s.io/decision", *decision)
                .annotate("authorization.k8s.io/reason", String::from(&**reason));
        }
        event
    }
}

/// Records a watch's `ResponseComplete` when its stream ends.
struct Completion {
    auditor: Auditor,
    request: Option<Arc<Audited>>,
    status: ResponseStatus,
    annotations: Annotations,
}

impl Drop for Completion {
    fn drop(&mut self) {
        if let Some(request) = self.request.take() {
            if request.records(Stage::ResponseComplete) {
                let event = request.event(Stage::ResponseComplete, SystemTime::now());
                self.auditor
                    .record(self.annotations.add(event, Some(self.status.clone())));
            }
        }
    }
}

/// The verb as the apiserver audits it: the resource verb (`deletecollection` for a DELETE of
/// a collection), or the lower-case HTTP method of a request that is not a resource's.
fn audit_verb(parsed: &Parsed, parts: &Parts) -> &'static str {
    let collection = parsed.path.as_ref().is_some_and(|p| p.name.is_none());
    match parsed.verb {
        Verb::Delete if collection => "deletecollection",
        Verb::Other => match parts.method.as_str() {
            "GET" => "get",
            "POST" => "post",
            "PUT" => "put",
            "PATCH" => "patch",
            "DELETE" => "delete",
            "HEAD" => "head",
            "OPTIONS" => "options",
            _ => "other",
        },
        v => v.as_str(),
    }
}

/// The user of an audit event: the caller kcache authenticated; an empty user when kcache
/// knows none (auth `none`, a local caller acting as kcache, or credentials refused), as the
/// apiserver's events of requests it could not authenticate carry none.
fn audit_user(caller: Option<&Caller>) -> Arc<UserInfo> {
    static UNKNOWN: std::sync::OnceLock<Arc<UserInfo>> = std::sync::OnceLock::new();
    match caller.and_then(|c| c.user.as_ref()) {
        Some(u) => u.clone(),
        None => UNKNOWN.get_or_init(Default::default).clone(),
    }
}

/// The caller's addresses as the apiserver lists them: those of `X-Forwarded-For`, then
/// `X-Real-Ip`, then the connection's peer, each once.
fn source_ips(headers: &HeaderMap, conn: Option<&ConnInfo>) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = Vec::new();
    let mut add = |ip: IpAddr| {
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    };
    for value in headers.get_all("x-forwarded-for") {
        if let Ok(v) = value.to_str() {
            v.split(',')
                .filter_map(|s| s.trim().parse().ok())
                .for_each(&mut add);
        }
    }
    if let Some(ip) = headers
        .get("x-real-ip")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
    {
        add(ip);
    }
    if let Some(c) = conn {
        add(c.peer.ip());
    }
    ips
}
