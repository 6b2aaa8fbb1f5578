//! Authorization: whether the caller may read what it asks the cache for, as the upstream's
//! authorizer (RBAC and the rest) decides it.

use std::fmt::Write as _;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::json;

use super::{Auth, AuthError, Caller};
use crate::error::Report;
use crate::metrics;
use crate::upstream::Purpose;
use crate::upstream::UpstreamError;

const ACCESS_REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";

/// How long an access review waits at start for the verdicts kept in the persist directory to
/// be taken back (after the RBAC lists: usually well under a second) before asking the
/// upstream anyway.
const RESTORE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// The one `extra` of a user that names the credential rather than the user: since v1.30 a
/// ServiceAccount token's own ID (`JTI=…`), different for every token of an account. It is
/// for tracing a request to its token (the audit trail keeps it); an authorizer's verdict is
/// the identity's. Kept out of the access review and its memo, so that an account's tokens
/// (the kube-proxies of a cluster, one token per node) share one review per question instead
/// of costing the upstream one per token.
const CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";

/// The user's `extra` that an access review carries: all but [`CREDENTIAL_ID`].
fn identity_extra(user: &super::UserInfo) -> impl Iterator<Item = (&String, &Vec<String>)> + '_ {
    user.extra
        .iter()
        .filter(|(k, _)| k.as_str() != CREDENTIAL_ID)
}

/// What a request does, in the authorizer's terms.
#[derive(Debug, Clone)]
pub(crate) struct Attributes<'a> {
    /// `get`, `list` or `watch`.
    pub verb: &'a str,
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    /// None: cluster-wide (a list or watch across all namespaces, or a cluster-scoped object).
    pub namespace: Option<&'a str>,
    /// Set for a get or a watch of one object (the apiserver authorizes those by name).
    pub name: Option<&'a str>,
}

#[derive(Debug, Clone)]
pub(super) struct Decision {
    pub(super) allowed: bool,
    /// Shared: every remembered answer hands it to the audit trail of the request it allows.
    pub(super) reason: Arc<str>,
}

impl Decision {
    /// An allowance, with the authorizer's reason.
    pub(super) fn allowed(reason: Arc<str>) -> Decision {
        Decision {
            allowed: true,
            reason,
        }
    }
}

/// The authorizer's answer to one request, for its audit events
/// (`authorization.k8s.io/decision` and `/reason`, as the apiserver writes them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The caller acts as kcache itself: nothing was asked.
    Own,
    /// Allowed, with the authorizer's reason (RBAC names the binding that allows it).
    Allow(Arc<str>),
    /// Denied, with the authorizer's reason (RBAC gives none).
    Forbid(Arc<str>),
}

#[derive(Deserialize)]
struct Review {
    #[serde(default)]
    status: ReviewStatus,
}

#[derive(Deserialize, Default)]
struct ReviewStatus {
    #[serde(default)]
    allowed: bool,
    #[serde(default)]
    reason: String,
}

impl Auth {
    /// Ok when the upstream's authorizer allows `caller` the request; else the 403 the
    /// apiserver would send (or a 503 when it cannot be asked and nothing is remembered).
    /// `verdict` is set to what the authorizer answered, when it answered.
    pub(crate) async fn authorize(
        &self,
        caller: &Caller,
        attrs: &Attributes<'_>,
        verdict: &mut Option<Verdict>,
    ) -> Result<(), AuthError> {
        let Some(user) = &caller.user else {
            // kcache itself: the cache holds what its own identity may read.
            *verdict = Some(Verdict::Own);
            return Ok(());
        };
        if !*self.restored.borrow() {
            // Just started over a persist directory: the verdicts kept there may be about to
            // be taken back.
            let mut restored = self.restored.clone();
            let wait = restored.wait_for(|done| *done);
            let _ = tokio::time::timeout(RESTORE_WAIT, wait).await;
        }
        let key = review_key(user, attrs);
        // Read before asking: a change of RBAC while the upstream answers leaves the answer
        // stale (see `rbac`).
        let epoch = self.rbac.epoch();
        let rbac_ttl = if self.rbac.settled(std::time::Instant::now()) {
            self.config.rbac_allowed_ttl
        } else {
            std::time::Duration::ZERO
        };
        let (allowed_ttl, denied_ttl) = (self.config.allowed_ttl, self.config.denied_ttl);
        let ttl = move |d: &Decision| match d.allowed {
            true if d.reason.starts_with(super::rbac::RBAC_ALLOWED) => allowed_ttl.max(rbac_ttl),
            true => allowed_ttl,
            false => denied_ttl,
        };
        let got = self
            .reviews
            .get_in(epoch, &key, ttl, || self.review(user, attrs))
            .await;
        let count = |decision: &'static str, source: &'static str| {
            self.metrics
                .authorizations
                .get_or_create(&metrics::AuthzLabels { decision, source })
                .inc();
        };
        match got {
            Ok((d, source)) if d.allowed => {
                count("allowed", source.as_str());
                *verdict = Some(Verdict::Allow(d.reason));
                Ok(())
            }
            Ok((d, source)) => {
                count("denied", source.as_str());
                let refused = forbidden(&user.username, attrs, &d.reason);
                *verdict = Some(Verdict::Forbid(d.reason));
                Err(refused)
            }
            Err(e) => {
                count("error", "upstream");
                let e = AuthError::AccessReview(e);
                tracing::warn!(error = %Report(&e), "SubjectAccessReview failed");
                Err(e)
            }
        }
    }

    async fn review(
        &self,
        user: &super::UserInfo,
        attrs: &Attributes<'_>,
    ) -> Result<Decision, UpstreamError> {
        let mut resource = json!({
            "verb": attrs.verb,
            "group": attrs.group,
            "version": attrs.version,
            "resource": attrs.resource,
        });
        if let Some(ns) = attrs.namespace {
            resource["namespace"] = json!(ns);
        }
        if let Some(name) = attrs.name {
            resource["name"] = json!(name);
        }
        let mut spec = json!({
            "resourceAttributes": resource,
            "user": user.username,
            "groups": user.groups,
        });
        if !user.uid.is_empty() {
            spec["uid"] = json!(user.uid);
        }
        let extra: serde_json::Map<String, serde_json::Value> = identity_extra(user)
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect();
        if !extra.is_empty() {
            spec["extra"] = serde_json::Value::Object(extra);
        }
        let body = json!({
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": spec,
        });
        let answer = self
            .upstream
            .post_json(
                ACCESS_REVIEWS,
                body.to_string().into_bytes(),
                Purpose::AccessReview,
            )
            .await?;
        let review: Review = serde_json::from_slice(&answer)
            .map_err(UpstreamError::decode("SubjectAccessReview"))?;
        Ok(Decision {
            allowed: review.status.allowed,
            reason: review.status.reason.into(),
        })
    }
}

/// One string per distinct question: every field, separated by a byte no field can hold
/// unescaped in an HTTP request (NUL).
fn review_key(user: &super::UserInfo, a: &Attributes<'_>) -> String {
    let mut k = String::with_capacity(128);
    for part in [
        user.username.as_str(),
        user.uid.as_str(),
        a.verb,
        a.group,
        a.version,
        a.resource,
        a.namespace.unwrap_or("\u{1}"),
        a.name.unwrap_or("\u{1}"),
    ] {
        k.push_str(part);
        k.push('\0');
    }
    for g in &user.groups {
        k.push_str(g);
        k.push('\u{2}');
    }
    for (key, values) in identity_extra(user) {
        let _ = write!(k, "\0{key}={values:?}");
    }
    k
}

/// The apiserver's 403 for a denied resource request.
fn forbidden(user: &str, a: &Attributes<'_>, reason: &str) -> AuthError {
    let scope = match a.namespace {
        Some(ns) => format!("in the namespace {ns:?}"),
        None => "at the cluster scope".to_string(),
    };
    let mut message = format!(
        "User {user:?} cannot {} resource {:?} in API group {:?} {scope}",
        a.verb, a.resource, a.group
    );
    if !reason.is_empty() {
        message.push_str(": ");
        message.push_str(reason);
    }
    AuthError::Forbidden {
        group: a.group.to_string(),
        resource: a.resource.to_string(),
        name: a.name.map(str::to_string),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::UserInfo;

    #[test]
    fn forbidden_reads_as_the_recorded_one() {
        let a = Attributes {
            verb: "list",
            group: "",
            version: "v1",
            resource: "configmaps",
            namespace: Some("fixtures-a"),
            name: None,
        };
        let e = crate::status::ApiError::from(forbidden("system:anonymous", &a, ""));
        let want = kcache_sim::recordings::read_string("err-anonymous-forbidden-403.json");
        assert_eq!(String::from_utf8(e.body().to_vec()).unwrap(), want);
    }

    #[test]
    fn keys_differ_by_every_attribute() {
        let u = UserInfo {
            username: "u".into(),
            groups: vec!["g".into()],
            ..Default::default()
        };
        let base = Attributes {
            verb: "get",
            group: "",
            version: "v1",
            resource: "secrets",
            namespace: Some("a"),
            name: Some("x"),
        };
        let k = review_key(&u, &base);
        let variants = [
            Attributes {
                verb: "list",
                ..base.clone()
            },
            Attributes {
                namespace: None,
                ..base.clone()
            },
            Attributes {
                name: None,
                ..base.clone()
            },
            Attributes {
                resource: "configmaps",
                ..base.clone()
            },
        ];
        for v in variants {
            assert_ne!(review_key(&u, &v), k);
        }
        let mut other = u.clone();
        other.groups.push("system:masters".into());
        assert_ne!(review_key(&other, &base), k);
        // Extra tells users apart, except the token's own ID: two tokens of one account ask
        // the same question.
        let mut pod = u.clone();
        pod.extra.insert(
            "authentication.kubernetes.io/pod-name".into(),
            vec!["p".into()],
        );
        assert_ne!(review_key(&pod, &base), k);
        let mut token = u.clone();
        token
            .extra
            .insert(CREDENTIAL_ID.into(), vec!["JTI=1".into()]);
        assert_eq!(review_key(&token, &base), k);
    }
}
