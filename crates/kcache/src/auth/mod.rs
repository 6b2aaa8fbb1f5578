//! Who is calling and what they may read.
//!
//! kcache answers reads from one cache filled with its own privileges, so it must check
//! every caller itself: it authenticates them (`Auth::authenticate`: bearer tokens by
//! TokenReview against the upstream, x509 client certificates against the configured client
//! CA) and asks the upstream's authorizer (`Auth::authorize`: a SubjectAccessReview)
//! before each cached read. Requests it passes through carry the caller's identity, never
//! kcache's (`Forward`). ServiceAccount tokens it can check itself, as the apiserver does,
//! it does (`service_account`). Verdicts are remembered briefly (`memo`); those RBAC gave, for
//! as long as the upstream's RBAC objects do not change (`rbac`).

mod authn;
mod authz;
mod kept;
pub(crate) mod memo;
pub(crate) mod rbac;
pub(crate) mod service_account;

pub(crate) use authz::{Attributes, Verdict};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::metrics::Metrics;
use crate::upstream::{Upstream, UpstreamError};

/// Why a caller cannot be authenticated or authorized, or why an auth mode cannot be used.
/// [`crate::status`] turns them into what a client gets (401, 403, or 503 when the upstream
/// cannot be asked); auth itself does not know Status bodies.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// `none` on a network address: every caller would have kcache's privileges.
    #[error(
        "refusing to listen on {listen} with auth mode `none`: every caller would read \
         every cached object with kcache's own privileges. Listen on a loopback address \
         (127.0.0.1), or set auth.mode (--auth) to `delegated` or `trust-local`"
    )]
    InsecureListen { listen: SocketAddr },
    /// The upstream could not answer a TokenReview (and no answer was remembered).
    #[error("the caller's token cannot be checked (TokenReview)")]
    TokenReview(#[source] UpstreamError),
    /// The upstream could not answer a SubjectAccessReview (and no answer was remembered).
    #[error("the request cannot be authorized (SubjectAccessReview)")]
    AccessReview(#[source] UpstreamError),
    /// The caller's credentials are not accepted (a malformed Authorization header, or a token
    /// the upstream's TokenReview rejects): the apiserver's 401.
    #[error("Unauthorized")]
    Unauthenticated,
    /// The upstream's authorizer denies the request: the apiserver's 403, whose `message` is
    /// its text word for word.
    #[error("{message}")]
    Forbidden {
        group: String,
        /// With the subresource, if any (`pods/log`).
        resource: String,
        name: Option<String>,
        message: String,
    },
}

/// The user named by a verified x509 client certificate, as kube-apiserver reads one: the
/// subject's CommonName is the user, each Organization a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertIdentity {
    pub user: String,
    pub groups: Vec<String>,
}

/// Facts about the connection a request arrived on, put in every request's extensions by the
/// server's accept loop (cloned per request: Arcs and an address only).
#[derive(Debug, Clone)]
pub(crate) struct ConnInfo {
    /// The caller's address (loopback decides `trust-local`).
    pub peer: SocketAddr,
    /// The caller a verified client certificate names, built once per connection. Present
    /// only when the connection is TLS and the client CA verified the certificate.
    pub certified: Option<Caller>,
}

impl ConnInfo {
    pub(crate) fn new(peer: SocketAddr, cert: Option<CertIdentity>) -> ConnInfo {
        ConnInfo {
            peer,
            certified: cert.map(Caller::certified),
        }
    }
}

/// How callers are authenticated (`auth.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AuthMode {
    /// Nobody is authenticated; every caller acts as kcache itself. Only allowed on a loopback
    /// listen address (kcache refuses to start otherwise).
    #[default]
    None,
    /// Bearer tokens are checked with TokenReview, client certificates against the client CA;
    /// callers without credentials are `system:anonymous`. Every cached read is authorized
    /// with a SubjectAccessReview.
    Delegated,
    /// As `delegated`, except that callers on a loopback address that present no credentials
    /// act as kcache itself (the sidecar form: the pod's own containers share kcache's
    /// identity).
    TrustLocal,
}

impl AuthMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMode::None => "none",
            AuthMode::Delegated => "delegated",
            AuthMode::TrustLocal => "trust-local",
        }
    }
}

/// An authenticated user, as TokenReview reports one, SubjectAccessReview takes one and audit
/// events name one (the same JSON in all three): the audit trail's own type, so that each
/// event shares the caller's, not a copy.
pub(crate) use kcache_audit::UserInfo;

/// The apiserver's name and group for requests without credentials.
pub(crate) fn anonymous_user() -> UserInfo {
    UserInfo {
        username: "system:anonymous".into(),
        groups: vec!["system:unauthenticated".into()],
        ..Default::default()
    }
}

/// How a passed-through request reaches the upstream.
#[derive(Debug, Clone)]
pub(crate) enum Forward {
    /// With kcache's own credentials (auth `none`, or a trusted local caller).
    AsKcache,
    /// With the caller's own `Authorization` header and nothing of kcache's.
    OwnToken,
    /// With kcache's credentials and `Impersonate-*` headers naming the caller (client
    /// certificates cannot be forwarded); kcache's RBAC needs the `impersonate` verb.
    Impersonate(Arc<UserInfo>),
    /// With no credentials at all.
    Anonymous,
}

/// The caller of one request.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    /// None when the caller acts as kcache itself (no authorization check).
    pub user: Option<Arc<UserInfo>>,
    pub forward: Forward,
    /// Whom per-caller limits count against: the user name, the address of anonymous
    /// callers, or `local` for callers acting as kcache (they all share its identity).
    pub limit_key: Arc<str>,
}

impl Caller {
    /// A caller acting as kcache itself.
    pub(crate) fn kcache() -> Caller {
        // One shared key: this is every request's path with auth `none`, kept allocation-free.
        static LOCAL: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
        Caller {
            user: None,
            forward: Forward::AsKcache,
            limit_key: LOCAL.get_or_init(|| Arc::from("local")).clone(),
        }
    }

    /// The caller a verified client certificate names; the apiserver adds
    /// `system:authenticated` to the certificate's groups, and so does kcache.
    fn certified(cert: CertIdentity) -> Caller {
        let mut groups = cert.groups;
        groups.push("system:authenticated".into());
        let user = Arc::new(UserInfo {
            username: cert.user,
            groups,
            ..Default::default()
        });
        Caller {
            limit_key: user.username.as_str().into(),
            forward: Forward::Impersonate(user.clone()),
            user: Some(user),
        }
    }

    /// A caller authenticated by bearer token, forwarded with that token.
    fn token(user: UserInfo) -> Caller {
        let user = Arc::new(user);
        Caller {
            limit_key: user.username.as_str().into(),
            user: Some(user),
            forward: Forward::OwnToken,
        }
    }

    /// How the caller is known, for logs.
    pub(crate) fn name(&self) -> &str {
        self.user.as_ref().map_or("(kcache)", |u| &u.username)
    }
}

/// How long verdicts are remembered.
#[derive(Debug, Clone)]
pub(crate) struct AuthConfig {
    pub mode: AuthMode,
    /// An accepted token.
    pub token_ttl: Duration,
    /// A rejected token (short: a token that just became valid must work soon).
    pub token_failure_ttl: Duration,
    /// An allowed SubjectAccessReview.
    pub allowed_ttl: Duration,
    /// A denied one (short: a RoleBinding just created must take effect soon).
    pub denied_ttl: Duration,
    /// An allowed one whose reason says RBAC allowed it, while kcache follows the upstream's
    /// RBAC objects and none has changed ([`rbac`]); zero: RBAC is not followed, and such
    /// verdicts are remembered for `allowed_ttl` as the rest.
    pub rbac_allowed_ttl: Duration,
    /// How long past their TTL verdicts may still be used while the upstream cannot be asked.
    pub stale_if_error: Duration,
    /// Whether ServiceAccount tokens are verified by kcache itself where it can
    /// ([`service_account`]) rather than each reviewed by the upstream.
    pub verify_service_account_tokens: bool,
    /// Where the access verdicts RBAC gave are kept across restarts (`cache.persistDir`);
    /// None: they are not.
    pub keep_dir: Option<std::path::PathBuf>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            mode: AuthMode::None,
            token_ttl: Duration::from_secs(60),
            token_failure_ttl: Duration::from_secs(5),
            allowed_ttl: Duration::from_secs(20),
            denied_ttl: Duration::from_secs(5),
            // kube-apiserver's own default for a webhook authorizer's allowances
            // (`--authorization-webhook-cache-authorized-ttl`).
            rbac_allowed_ttl: Duration::from_secs(300),
            stale_if_error: Duration::from_secs(300),
            verify_service_account_tokens: true,
            keep_dir: None,
        }
    }
}

/// Remembered questions per kind (bounds memory whatever callers send).
const MEMO_CAPACITY: usize = 100_000;

/// Authentication and authorization of callers, against the upstream.
pub(crate) struct Auth {
    config: AuthConfig,
    upstream: Upstream,
    /// Callers by token (None: not a valid token), whole, so a remembered token costs a
    /// lookup and a few reference counts per request.
    tokens: memo::Memo<Option<Caller>>,
    /// The upstream's ServiceAccount token keys, and what its reviews confirmed.
    service_accounts: service_account::ServiceAccountTokens,
    reviews: Arc<memo::Memo<authz::Decision>>,
    /// What kcache knows of the upstream's RBAC objects: the epoch `reviews` are asked in.
    rbac: Arc<rbac::RbacChanges>,
    /// False until the verdicts kept in the persist directory are taken back (or cannot be):
    /// access reviews wait for it at start (`kept`). True from the start without one.
    restored: tokio::sync::watch::Receiver<bool>,
    /// What sets `restored`, until the task that keeps the verdicts takes it.
    restoring: std::sync::Mutex<Option<tokio::sync::watch::Sender<bool>>>,
    /// `system:anonymous`, shared by every anonymous request.
    anonymous: Arc<UserInfo>,
    metrics: Arc<Metrics>,
}

impl Auth {
    pub(crate) fn new(config: AuthConfig, upstream: Upstream, metrics: Arc<Metrics>) -> Auth {
        let stale = config.stale_if_error;
        let keeps = config.keep_dir.is_some()
            && config.mode != AuthMode::None
            && !config.rbac_allowed_ttl.is_zero();
        let (done, restored) = tokio::sync::watch::channel(!keeps);
        let restoring = keeps.then_some(done);
        Auth {
            config,
            upstream,
            metrics,
            tokens: memo::Memo::new(MEMO_CAPACITY, stale),
            service_accounts: Default::default(),
            reviews: Arc::new(memo::Memo::new(MEMO_CAPACITY, stale)),
            rbac: Arc::default(),
            restored,
            restoring: std::sync::Mutex::new(restoring),
            anonymous: Arc::new(anonymous_user()),
        }
    }

    /// The task that follows the upstream's RBAC objects (and, with a persist directory,
    /// keeps the verdicts RBAC gave across restarts), to run for as long as kcache does; None
    /// when callers are not authorized by kcache (auth `none`) or RBAC is not to be followed
    /// (`rbac_allowed_ttl` zero).
    pub(crate) fn follow_rbac(
        &self,
    ) -> Option<impl std::future::Future<Output = ()> + Send + 'static> {
        if self.config.mode == AuthMode::None || self.config.rbac_allowed_ttl.is_zero() {
            return None;
        }
        let followed = self.metrics.auth_rbac_followed.clone();
        let follow = self.rbac.clone().follow(self.upstream.clone(), followed);
        let done = self
            .restoring
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let keep = self.config.keep_dir.clone().zip(done).map(|(dir, done)| {
            let ttl = self.config.rbac_allowed_ttl;
            let restored = self.metrics.auth_verdicts_restored.clone();
            kept::keep(
                dir,
                self.rbac.clone(),
                self.reviews.clone(),
                ttl,
                restored,
                done,
            )
        });
        Some(async move {
            match keep {
                Some(keep) => {
                    futures::future::join(follow, keep).await;
                }
                None => follow.await,
            }
        })
    }
}

/// Why kcache will not start with this auth mode and listen address.
pub fn check_listen(mode: AuthMode, listen: &SocketAddr) -> Result<(), AuthError> {
    if mode == AuthMode::None && !listen.ip().is_loopback() {
        return Err(AuthError::InsecureListen { listen: *listen });
    }
    Ok(())
}
