//! Authentication: who the caller is.

use std::time::Duration;

use http::{header, HeaderMap};
use serde::Deserialize;
use serde_json::json;

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
}

impl Auth {
    /// The caller of a request: from its bearer token, its verified client certificate, or
    /// neither (anonymous, or kcache itself for `none` and trusted local callers).
    /// A token the upstream does not accept is a 401, as the apiserver answers; a token that
    /// cannot be checked (upstream unreachable, nothing remembered) a 503.
    pub async fn authenticate(
        &self,
        headers: &HeaderMap,
        conn: Option<&ConnInfo>,
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
            return match self.review_token(token).await {
                Ok(Some(caller)) => {
                    counted("token");
                    Ok(caller)
                }
                Ok(None) => {
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

    /// The caller a token belongs to (None: not a valid token), remembered briefly.
    async fn review_token(&self, token: &str) -> Result<Option<Caller>, AuthError> {
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
                Ok::<_, crate::upstream::UpstreamError>(
                    review
                        .status
                        .authenticated
                        .then(|| Caller::token(review.status.user)),
                )
            })
            .await
            .map_err(AuthError::TokenReview)?;
        Ok(user)
    }
}
