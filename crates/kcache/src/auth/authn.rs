//! Authentication: who the caller is.

use std::time::Duration;

use http::{header, HeaderMap};
use serde::Deserialize;
use serde_json::json;

use super::service_account::{BoundObjects, NotVerified};
use super::{Auth, AuthError, AuthMode, Caller, ConnInfo, Forward, UserInfo};
use crate::error::Report;
use crate::metrics;
use crate::upstream::Purpose;

const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

#[derive(Deserialize)]
struct TokenReview {
    #[serde(default)]
    status: TokenReviewStatus,
}

#[derive(Deserialize, Default)]
struct TokenReviewStatus {
    #[serde(default)]
    authenticated: bool,
    #[serde(default)]
    user: UserInfo,
    /// The audiences the token is valid for, of the upstream's own (its `--api-audiences`).
    #[serde(default)]
    audiences: Vec<String>,
}

impl Auth {
    /// The caller of a request: from its bearer token, its verified client certificate, or
    /// neither (anonymous, or kcache itself for `none` and trusted local callers).
    /// A token the upstream does not accept is a 401, as the apiserver answers; a token that
    /// cannot be checked (upstream unreachable, nothing remembered) a 503.
    ///
    /// `objects` are kcache's caches of the objects a ServiceAccount token names, with which
    /// such tokens are verified without a review ([`super::service_account`]).
    pub(crate) async fn authenticate(
        &self,
        headers: &HeaderMap,
        conn: Option<&ConnInfo>,
        objects: &dyn BoundObjects,
    ) -> Result<Caller, AuthError> {
        let peer = conn.map(|c| c.peer);
        let counted = |how: &'static str| {
            self.metrics
                .authentications
                .get_or_create(&metrics::AuthnLabels { result: how })
                .inc();
        };
        if self.config.mode == AuthMode::None {
            return Ok(Caller::kcache());
        }
        if let Some(value) = headers.get(header::AUTHORIZATION) {
            let token = value
                .to_str()
                .ok()
                .and_then(|v| {
                    let (scheme, token) = v.split_once(' ')?;
                    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
                })
                .filter(|t| !t.is_empty());
            let Some(token) = token else {
                counted("rejected");
                return Err(AuthError::Unauthenticated);
            };
            return match self.review_token(token, objects).await {
                Ok((Some(caller), verified)) => {
                    counted(if verified { "verified" } else { "token" });
                    Ok(caller)
                }
                Ok((None, _)) => {
                    counted("rejected");
                    Err(AuthError::Unauthenticated)
                }
                Err(e) => {
                    counted("error");
                    tracing::warn!(error = %Report(&e), "TokenReview failed");
                    Err(e)
                }
            };
        }
        if let Some(caller) = conn.and_then(|c| c.certified.as_ref()) {
            counted("certificate");
            return Ok(caller.clone());
        }
        if self.config.mode == AuthMode::TrustLocal && peer.is_some_and(|p| p.ip().is_loopback()) {
            counted("local");
            return Ok(Caller::kcache());
        }
        counted("anonymous");
        Ok(Caller {
            user: Some(self.anonymous.clone()),
            forward: Forward::Anonymous,
            limit_key: match peer {
                Some(p) => format!("system:anonymous/{}", p.ip()).into(),
                None => "system:anonymous".into(),
            },
        })
    }

    /// The caller a token belongs to (None: not a valid token), remembered briefly, and
    /// whether kcache verified it itself just now (a ServiceAccount token, see
    /// [`super::service_account`]) rather than the upstream or the memo.
    async fn review_token(
        &self,
        token: &str,
        objects: &dyn BoundObjects,
    ) -> Result<(Option<Caller>, bool), AuthError> {
        let verified = std::sync::atomic::AtomicBool::new(false);
        let (ok_ttl, no_ttl) = (self.config.token_ttl, self.config.token_failure_ttl);
        let ttl = move |v: &Option<Caller>| -> Duration {
            if v.is_some() {
                ok_ttl
            } else {
                no_ttl
            }
        };
        let (user, _) = self
            .tokens
            .get(token, ttl, || async {
                let mut learning = None;
                if self.config.verify_service_account_tokens {
                    if let Some(user) = self.verify_locally(token, objects, &mut learning).await {
                        verified.store(true, std::sync::atomic::Ordering::Relaxed);
                        return Ok(Some(Caller::token(user)));
                    }
                }
                let body = json!({
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenReview",
                    "spec": {"token": token},
                });
                let answer = self
                    .upstream
                    .post_json(
                        TOKEN_REVIEWS,
                        body.to_string().into_bytes(),
                        Purpose::TokenReview,
                    )
                    .await?;
                let review: TokenReview = serde_json::from_slice(&answer)
                    .map_err(crate::upstream::UpstreamError::decode("TokenReview"))?;
                let status = review.status;
                if !status.authenticated {
                    return Ok(None);
                }
                if self.config.verify_service_account_tokens {
                    self.service_accounts
                        .confirm(token, &status.user, &status.audiences, &self.upstream)
                        .await;
                }
                // Tokens like this one waited for its review to confirm what they need.
                drop(learning);
                Ok::<_, crate::upstream::UpstreamError>(Some(Caller::token(status.user)))
            })
            .await
            .map_err(AuthError::TokenReview)?;
        Ok((user, verified.into_inner()))
    }

    /// The user of a ServiceAccount token kcache can verify itself (see
    /// [`super::service_account`]); None: it is to be reviewed. The first token kcache sees
    /// makes it fetch the upstream's keys. A token whose review would confirm what kcache
    /// lacks waits for any such review in flight (`learning` then holds the gate until its own
    /// review is confirmed), so a fleet starting at once costs one review, not one each.
    async fn verify_locally<'a>(
        &'a self,
        token: &str,
        objects: &dyn BoundObjects,
        learning: &mut Option<tokio::sync::MutexGuard<'a, ()>>,
    ) -> Option<UserInfo> {
        let accounts = &self.service_accounts;
        let verify = || accounts.verify(token, objects, jiff::Timestamp::now().as_second());
        let mut why = match verify() {
            Ok(user) => return Some(user),
            Err(why) => why,
        };
        if why == NotVerified::UnknownKey {
            accounts.fetch_keys(&self.upstream).await;
            why = match verify() {
                Ok(user) => return Some(user),
                Err(why) => why,
            };
        }
        if !why.worth_learning() {
            return None;
        }
        *learning = accounts.learning().await;
        verify().ok()
    }
}
