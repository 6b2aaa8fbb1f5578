//! ServiceAccount tokens verified by kcache itself, as kube-apiserver verifies them, so that a
//! fleet of clients reconnecting at once (a herd, a restarted kcache) costs the upstream no
//! TokenReview.
//!
//! Why: every distinct bearer token costs the upstream a TokenReview, about a millisecond of
//! its CPU (docs/scaling.md): the 1,000 tokens of a 500-node cluster's node clients are most
//! of what their start costs it through kcache. A ServiceAccount token is a JWT the apiserver
//! signed; the apiserver itself accepts one by checking its signature against its own keys
//! (published at `/openid/v1/jwks`), its issuer, audience and lifetime, and that the
//! ServiceAccount (and the Pod or Node it is bound to) still exists with the UID it names
//! (tests/fixtures/service-account-tokens has two such tokens and their reviews, recorded
//! from v1.34.9; the checks are those of Kubernetes' `pkg/serviceaccount/claims.go`). kcache
//! can make the same checks, with the objects from its own caches.
//!
//! **kcache only ever accepts a token here, never refuses one.** Whatever it cannot check
//! exactly goes to a TokenReview as before: a token that is not a ServiceAccount JWT (an OIDC
//! token, a legacy Secret-based token), an unknown key or algorithm, a token bound to a
//! Secret, an object kcache does not cache (or whose cache is not current), an object being
//! deleted, a token near or past its expiry. And every fact it relies on was first confirmed
//! by the upstream ([`ServiceAccountTokens::confirm`], after a TokenReview accepted a token):
//! - the keys are the upstream's own, fetched from it with kcache's identity;
//! - an issuer and an audience are trusted once a token carrying them was accepted;
//! - the user a token of a given shape (bound to a Pod or not, to a Node or not, with a token
//!   ID or not) maps to is built the way the upstream's review built it for an accepted token
//!   of that shape, compared field by field: a version that names credentials (v1.30+) or
//!   node info differently is followed, and a shape whose user kcache cannot reproduce is
//!   always reviewed.
//!
//! An accepted token is remembered as a reviewed one is (`auth.tokenCacheSeconds`), so a
//! deleted ServiceAccount's tokens stop working within that time, as they do through a review.

use std::collections::{HashMap, HashSet};
use std::sync::RwLock;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::signature;
use serde::Deserialize;

use super::UserInfo;
use crate::upstream::{Purpose, Upstream};

/// Where the upstream publishes its service-account signing keys (as JWKS).
const JWKS: &str = "/openid/v1/jwks";

/// The media type the keys are served as
/// (tests/fixtures/service-account-tokens/jwks-accept-json-406.json).
const JWKS_TYPE: &str = "application/jwk-set+json";

/// The least time between two fetches of the keys (an unknown key ID makes kcache fetch them).
const REFETCH: Duration = Duration::from_secs(60);

/// A token this close to its expiry is reviewed: clocks differ, and the upstream may allow
/// less.
const EXPIRY_MARGIN: i64 = 10;

/// The kinds of objects a token names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Bound {
    ServiceAccount,
    Pod,
    Node,
}

/// kcache's view of the objects a token names: what the token verification asks the caches.
pub(crate) trait BoundObjects: Send + Sync {
    /// Whether an object of this kind (`namespace` is ignored for Nodes) is held, current,
    /// with this UID and not being deleted. False also when kcache cannot tell (the type is
    /// not cached, its cache is restricted or not current): the token is then reviewed.
    fn holds(&self, kind: Bound, namespace: &str, name: &str, uid: &str) -> bool;
}

/// The user claims a ServiceAccount token maps to, for tests and the upstream's answer.
pub(crate) const CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";
const POD_NAME: &str = "authentication.kubernetes.io/pod-name";
const POD_UID: &str = "authentication.kubernetes.io/pod-uid";
const NODE_NAME: &str = "authentication.kubernetes.io/node-name";
const NODE_UID: &str = "authentication.kubernetes.io/node-uid";

/// A verification key of the upstream's.
#[derive(Debug, Clone)]
enum Key {
    /// RS256: the modulus and exponent, big-endian.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// ES256: the uncompressed P-256 point.
    Ec { point: Vec<u8> },
}

impl Key {
    fn verifies(&self, alg: &str, signed: &[u8], sig: &[u8]) -> bool {
        match (self, alg) {
            (Key::Rsa { n, e }, "RS256") => signature::RsaPublicKeyComponents { n, e }
                .verify(&signature::RSA_PKCS1_2048_8192_SHA256, signed, sig)
                .is_ok(),
            (Key::Ec { point }, "ES256") => {
                signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(signed, sig)
                    .is_ok()
            }
            _ => false,
        }
    }
}

/// A JWKS document's keys by ID (keys of other kinds are left out).
fn parse_jwks(body: &[u8]) -> HashMap<String, Key> {
    #[derive(Deserialize)]
    struct Set {
        #[serde(default)]
        keys: Vec<Jwk>,
    }
    #[derive(Deserialize)]
    struct Jwk {
        #[serde(default)]
        kid: String,
        #[serde(default)]
        kty: String,
        #[serde(default)]
        crv: String,
        #[serde(default)]
        n: String,
        #[serde(default)]
        e: String,
        #[serde(default)]
        x: String,
        #[serde(default)]
        y: String,
    }
    let Ok(set) = serde_json::from_slice::<Set>(body) else {
        return HashMap::new();
    };
    let b64 = |s: &str| URL_SAFE_NO_PAD.decode(s).ok().filter(|v| !v.is_empty());
    set.keys
        .into_iter()
        .filter_map(|k| {
            let key = match (k.kty.as_str(), k.crv.as_str()) {
                ("RSA", _) => Key::Rsa {
                    n: b64(&k.n)?,
                    e: b64(&k.e)?,
                },
                ("EC", "P-256") => {
                    let (x, y) = (b64(&k.x)?, b64(&k.y)?);
                    if x.len() != 32 || y.len() != 32 {
                        return None;
                    }
                    let mut point = vec![4u8];
                    point.extend_from_slice(&x);
                    point.extend_from_slice(&y);
                    Key::Ec { point }
                }
                _ => return None,
            };
            Some((k.kid, key))
        })
        .collect()
}

/// A ServiceAccount token, split and decoded (its signature not checked yet).
#[derive(Debug)]
struct Token<'a> {
    /// `header.payload`, what the signature covers.
    signed: &'a str,
    signature: Vec<u8>,
    alg: String,
    kid: String,
    claims: Claims,
}

#[derive(Debug, Deserialize)]
struct Claims {
    iss: String,
    aud: Audiences,
    exp: i64,
    #[serde(default)]
    nbf: Option<i64>,
    #[serde(default)]
    iat: Option<i64>,
    #[serde(default)]
    jti: Option<String>,
    #[serde(rename = "kubernetes.io")]
    kubernetes: Kubernetes,
}

/// `aud`: one string or a list (RFC 7519).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Audiences {
    One(String),
    Many(Vec<String>),
}

impl Audiences {
    fn iter(&self) -> impl Iterator<Item = &str> {
        let all: &[String] = match self {
            Audiences::One(a) => std::slice::from_ref(a),
            Audiences::Many(v) => v,
        };
        all.iter().map(String::as_str)
    }
}

#[derive(Debug, Deserialize)]
struct Kubernetes {
    namespace: String,
    serviceaccount: Named,
    #[serde(default)]
    pod: Option<Named>,
    #[serde(default)]
    node: Option<Named>,
    #[serde(default)]
    secret: Option<Named>,
}

#[derive(Debug, Deserialize)]
struct Named {
    name: String,
    uid: String,
}

impl<'a> Token<'a> {
    /// None for anything but a JWT with the apiserver's ServiceAccount claims.
    fn parse(token: &'a str) -> Option<Token<'a>> {
        #[derive(Deserialize)]
        struct Header {
            alg: String,
            #[serde(default)]
            kid: String,
        }
        let (signed, sig) = token.rsplit_once('.')?;
        let (header, payload) = signed.split_once('.')?;
        let header: Header = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).ok()?).ok()?;
        let claims: Claims = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
        Some(Token {
            signed,
            signature: URL_SAFE_NO_PAD.decode(sig).ok()?,
            alg: header.alg,
            kid: header.kid,
            claims,
        })
    }

    fn shape(&self) -> Shape {
        let k = &self.claims.kubernetes;
        Shape {
            pod: k.pod.is_some(),
            node: k.node.is_some(),
            id: self.claims.jti.is_some(),
        }
    }

    /// The user, as the upstream names it in the form `form`.
    fn user(&self, form: Form) -> UserInfo {
        let k = &self.claims.kubernetes;
        let ns = &k.namespace;
        let mut user = UserInfo {
            username: format!("system:serviceaccount:{ns}:{}", k.serviceaccount.name),
            uid: k.serviceaccount.uid.clone(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
                "system:authenticated".into(),
            ],
            ..UserInfo::default()
        };
        let mut put = |key: &str, value: &str| {
            user.extra.insert(key.into(), vec![value.to_string()]);
        };
        if let (true, Some(pod)) = (form.pod, &k.pod) {
            put(POD_NAME, &pod.name);
            put(POD_UID, &pod.uid);
        }
        if let (true, Some(node)) = (form.node, &k.node) {
            put(NODE_NAME, &node.name);
            put(NODE_UID, &node.uid);
        }
        if let (true, Some(jti)) = (form.id, &self.claims.jti) {
            put(CREDENTIAL_ID, &format!("JTI={jti}"));
        }
        user
    }
}

/// Which optional claims a token carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Shape {
    pod: bool,
    node: bool,
    id: bool,
}

/// Which of a token's optional claims the upstream names in its user's `extra`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Form {
    pod: bool,
    node: bool,
    id: bool,
}

impl Shape {
    /// Every form a token of this shape could be named in.
    fn forms(self) -> impl Iterator<Item = Form> {
        (0..8u8)
            .map(|b| Form {
                pod: b & 1 != 0,
                node: b & 2 != 0,
                id: b & 4 != 0,
            })
            .filter(move |f| (!f.pod || self.pod) && (!f.node || self.node) && (!f.id || self.id))
    }
}

/// What the upstream has confirmed (see the module docs).
#[derive(Debug, Default)]
struct Confirmed {
    issuers: HashSet<String>,
    audiences: HashSet<String>,
    /// The form of each shape whose user kcache builds as the upstream does; a shape mapped
    /// to None was reviewed and cannot be reproduced.
    forms: HashMap<Shape, Option<Form>>,
}

/// Why a token was not verified here (for tests; the caller reviews it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotVerified {
    /// Not a JWT with the apiserver's ServiceAccount claims (another kind of token).
    NotServiceAccountToken,
    /// Signed with a key the upstream does not publish (or not yet fetched).
    UnknownKey,
    /// The signature does not verify with the key it names.
    BadSignature,
    /// No review has confirmed the token's issuer yet.
    UnconfirmedIssuer,
    /// No review has confirmed any of the token's audiences as the upstream's own.
    UnconfirmedAudience,
    /// Expired or about to be, or not valid yet.
    Expired,
    /// Bound to a Secret, which kcache does not cache.
    BoundToSecret,
    /// An object the token names is not held, current, with the token's UID.
    ObjectNotHeld(Bound),
    /// No token of this shape has been reviewed yet.
    UnconfirmedShape,
    /// The upstream names the user of tokens of this shape in a way kcache does not build.
    UnreproducibleShape,
}

impl NotVerified {
    /// Whether the review of this token may let kcache verify tokens like it from then on:
    /// what the upstream has not confirmed yet. Tokens like it wait for that review
    /// ([`ServiceAccountTokens::learning`]) rather than each being reviewed too.
    pub(crate) fn worth_learning(self) -> bool {
        matches!(
            self,
            NotVerified::UnconfirmedIssuer
                | NotVerified::UnconfirmedAudience
                | NotVerified::UnconfirmedShape
        )
    }
}

/// The verifier: the upstream's keys and what it confirmed.
#[derive(Debug, Default)]
pub(crate) struct ServiceAccountTokens {
    keys: RwLock<HashMap<String, Key>>,
    /// When the keys were last fetched: an unknown key ID fetches them again, at most once a
    /// [`REFETCH`].
    fetched: tokio::sync::Mutex<Option<Instant>>,
    confirmed: RwLock<Confirmed>,
    /// Held while a token [`NotVerified::worth_learning`] is reviewed: the first review of a
    /// fleet's tokens (a thousand clients starting at once) confirms what the others need.
    learning: tokio::sync::Mutex<()>,
}

/// How long a token waits for another's review to confirm what it needs, before it is
/// reviewed itself.
const LEARNING_WAIT: Duration = Duration::from_secs(1);

impl ServiceAccountTokens {
    /// Wait (at most a second) for any review of a token worth learning from to end;
    /// hold the guard while reviewing one.
    pub(crate) async fn learning(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        tokio::time::timeout(LEARNING_WAIT, self.learning.lock())
            .await
            .ok()
    }

    /// The user of `token` if kcache can accept it itself at `now` (Unix seconds); else why
    /// not, and the token is to be reviewed by the upstream.
    pub(crate) fn verify(
        &self,
        token: &str,
        objects: &dyn BoundObjects,
        now: i64,
    ) -> Result<UserInfo, NotVerified> {
        let t = Token::parse(token).ok_or(NotVerified::NotServiceAccountToken)?;
        {
            let keys = self.keys.read().unwrap_or_else(|e| e.into_inner());
            let key = keys.get(&t.kid).ok_or(NotVerified::UnknownKey)?;
            if !key.verifies(&t.alg, t.signed.as_bytes(), &t.signature) {
                return Err(NotVerified::BadSignature);
            }
        }
        let form = {
            let confirmed = self.confirmed.read().unwrap_or_else(|e| e.into_inner());
            if !confirmed.issuers.contains(&t.claims.iss) {
                return Err(NotVerified::UnconfirmedIssuer);
            }
            if !t.claims.aud.iter().any(|a| confirmed.audiences.contains(a)) {
                return Err(NotVerified::UnconfirmedAudience);
            }
            confirmed.forms.get(&t.shape()).copied()
        };
        let c = &t.claims;
        let early = |at: Option<i64>| at.is_some_and(|at| at > now);
        if now + EXPIRY_MARGIN >= c.exp || early(c.nbf) || early(c.iat) {
            return Err(NotVerified::Expired);
        }
        let k = &c.kubernetes;
        if k.secret.is_some() {
            return Err(NotVerified::BoundToSecret);
        }
        let ns = k.namespace.as_str();
        // A Pod's token names the Pod's Node too (v1.30+), which the apiserver does not look
        // up then: only a token bound to the Node itself needs it.
        let bound = [
            (Bound::ServiceAccount, Some(&k.serviceaccount)),
            (Bound::Pod, k.pod.as_ref()),
            (Bound::Node, k.node.as_ref().filter(|_| k.pod.is_none())),
        ];
        for (kind, named) in bound {
            if let Some(named) = named {
                if !objects.holds(kind, ns, &named.name, &named.uid) {
                    return Err(NotVerified::ObjectNotHeld(kind));
                }
            }
        }
        match form {
            None => Err(NotVerified::UnconfirmedShape),
            Some(None) => Err(NotVerified::UnreproducibleShape),
            Some(Some(form)) => Ok(t.user(form)),
        }
    }

    /// The upstream accepted `token` (a TokenReview) as `user`, valid for `audiences`: learn
    /// from it what lets kcache accept tokens like it (see the module docs). Fetches the
    /// upstream's keys when the token's key is not known yet.
    pub(crate) async fn confirm(
        &self,
        token: &str,
        user: &UserInfo,
        audiences: &[String],
        upstream: &Upstream,
    ) {
        let Some(t) = Token::parse(token) else {
            return;
        };
        let known = |this: &Self| {
            let keys = this.keys.read().unwrap_or_else(|e| e.into_inner());
            keys.get(&t.kid)
                .map(|key| key.verifies(&t.alg, t.signed.as_bytes(), &t.signature))
        };
        let signed_by_upstream = match known(self) {
            Some(ok) => ok,
            None => {
                self.fetch_keys(upstream).await;
                known(self).unwrap_or(false)
            }
        };
        if !signed_by_upstream {
            return;
        }
        let shape = t.shape();
        let form = shape.forms().find(|&f| t.user(f) == *user);
        let mut confirmed = self.confirmed.write().unwrap_or_else(|e| e.into_inner());
        if !confirmed.issuers.contains(&t.claims.iss) {
            tracing::info!(issuer = %t.claims.iss, "ServiceAccount tokens of this issuer are verified by kcache");
            confirmed.issuers.insert(t.claims.iss.clone());
        }
        for aud in t.claims.aud.iter() {
            if audiences.iter().any(|a| a == aud) {
                confirmed.audiences.insert(aud.to_string());
            }
        }
        if form.is_none() && !confirmed.forms.contains_key(&shape) {
            tracing::warn!(
                ?shape,
                "the upstream names the user of a ServiceAccount token differently than kcache \
                 would: tokens like it are reviewed"
            );
        }
        // A form found later wins: the user kcache builds has then matched a review.
        if form.is_some() || !confirmed.forms.contains_key(&shape) {
            confirmed.forms.insert(shape, form);
        }
    }

    /// Fetch the upstream's keys, unless they were fetched less than a minute ago (a token
    /// signed with a key kcache does not know, or the first token).
    pub(crate) async fn fetch_keys(&self, upstream: &Upstream) {
        let mut fetched = self.fetched.lock().await;
        if fetched.is_some_and(|at| at.elapsed() < REFETCH) {
            return;
        }
        *fetched = Some(Instant::now());
        // Served as this type only: an Accept of JSON alone is answered 406.
        match upstream
            .get_accepting(JWKS, JWKS_TYPE, Purpose::Setup)
            .await
        {
            Ok(body) => {
                let keys = parse_jwks(&body);
                tracing::debug!(
                    keys = keys.len(),
                    "the upstream's ServiceAccount token keys"
                );
                *self.keys.write().unwrap_or_else(|e| e.into_inner()) = keys;
            }
            Err(e) => tracing::warn!(
                error = %crate::error::Report(&e),
                "the upstream's ServiceAccount token keys cannot be read ({JWKS}): tokens are \
                 reviewed"
            ),
        }
    }

    #[cfg(test)]
    fn with_keys(jwks: &[u8]) -> ServiceAccountTokens {
        let s = ServiceAccountTokens::default();
        *s.keys.write().unwrap() = parse_jwks(jwks);
        s
    }
}

#[cfg(test)]
mod tests;
