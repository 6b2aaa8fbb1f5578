//! Against the tokens, keys and reviews of tests/fixtures/service-account-tokens, recorded from
//! a real v1.34.9 apiserver.

use super::*;

macro_rules! recorded {
    ($name:literal) => {
        include_str!(concat!(
            "../../../../../tests/fixtures/service-account-tokens/",
            $name
        ))
    };
}

const JWKS_RECORDED: &str = recorded!("jwks.json");
const TOKEN: &str = recorded!("token-serviceaccount.jwt");
const TOKEN_2: &str = recorded!("token-serviceaccount-2.jwt");
const POD_TOKEN: &str = recorded!("token-pod-bound.jwt");
const SHORT_TOKEN: &str = recorded!("token-serviceaccount-10m.jwt");

/// The review's user and audiences.
fn review(json: &str) -> (UserInfo, Vec<String>) {
    #[derive(Deserialize)]
    struct Review {
        status: Status,
    }
    #[derive(Deserialize)]
    struct Status {
        user: UserInfo,
        audiences: Vec<String>,
    }
    let r: Review = serde_json::from_str(json).unwrap();
    (r.status.user, r.status.audiences)
}

fn sa_review() -> (UserInfo, Vec<String>) {
    review(recorded!("tokenreview-serviceaccount.json"))
}

fn pod_review() -> (UserInfo, Vec<String>) {
    review(recorded!("tokenreview-pod-bound.json"))
}

/// The recorded objects: the ServiceAccount and the Pod, by their recorded UIDs.
struct Held {
    pod: bool,
}

impl BoundObjects for Held {
    fn holds(&self, kind: Bound, namespace: &str, name: &str, uid: &str) -> bool {
        let object = match kind {
            Bound::ServiceAccount => recorded!("serviceaccount.json"),
            Bound::Pod if self.pod => recorded!("pod.json"),
            _ => return false,
        };
        let v: serde_json::Value = serde_json::from_str(object).unwrap();
        let m = &v["metadata"];
        m["namespace"] == namespace && m["name"] == name && m["uid"] == uid
    }
}

const ALL: Held = Held { pod: true };

/// A moment the recorded tokens are valid at: just after they were issued.
fn issued(token: &str) -> i64 {
    Token::parse(token).unwrap().claims.nbf.unwrap() + 1
}

/// A moment every recorded token is valid at (the short-lived one was issued last).
fn valid_now() -> i64 {
    issued(SHORT_TOKEN)
}

fn upstream() -> Upstream {
    // Never asked: the keys are known.
    Upstream::from_url("http://127.0.0.1:9").unwrap()
}

async fn confirmed(
    token: &str,
    (user, audiences): (UserInfo, Vec<String>),
) -> ServiceAccountTokens {
    let s = ServiceAccountTokens::with_keys(JWKS_RECORDED.as_bytes());
    s.confirm(token, &user, &audiences, &upstream()).await;
    s
}

#[test]
fn the_recorded_keys_verify_the_recorded_tokens_and_nothing_else() {
    let keys = parse_jwks(JWKS_RECORDED.as_bytes());
    assert_eq!(keys.len(), 1);
    for token in [TOKEN, TOKEN_2, POD_TOKEN] {
        let t = Token::parse(token).unwrap();
        assert_eq!(t.alg, "RS256");
        assert!(keys[&t.kid].verifies(&t.alg, t.signed.as_bytes(), &t.signature));
        // Another token's signature, or the right one under another algorithm: refused.
        let other = Token::parse(TOKEN_2).unwrap();
        if token != TOKEN_2 {
            assert!(!keys[&t.kid].verifies(&t.alg, t.signed.as_bytes(), &other.signature));
        }
        assert!(!keys[&t.kid].verifies("ES256", t.signed.as_bytes(), &t.signature));
    }
}

#[tokio::test]
async fn a_token_is_verified_once_a_review_confirmed_its_issuer_audience_and_shape() {
    let s = ServiceAccountTokens::with_keys(JWKS_RECORDED.as_bytes());
    let now = valid_now();
    assert_eq!(
        s.verify(TOKEN, &ALL, now),
        Err(NotVerified::UnconfirmedIssuer)
    );
    let (user, audiences) = sa_review();
    s.confirm(TOKEN, &user, &audiences, &upstream()).await;
    // The reviewed token, and another of the same account: the user the upstream names.
    assert_eq!(s.verify(TOKEN, &ALL, now), Ok(user.clone()));
    let other = s.verify(TOKEN_2, &ALL, now).unwrap();
    assert_eq!(
        (&other.username, &other.uid, &other.groups),
        (&user.username, &user.uid, &user.groups)
    );
    let jti = Token::parse(TOKEN_2).unwrap().claims.jti.unwrap();
    assert_eq!(other.extra[CREDENTIAL_ID], vec![format!("JTI={jti}")]);
    // A token bound to a Pod is another shape: reviewed until one like it was.
    assert_eq!(
        s.verify(POD_TOKEN, &ALL, now),
        Err(NotVerified::UnconfirmedShape)
    );
    let (pod_user, _) = pod_review();
    s.confirm(POD_TOKEN, &pod_user, &audiences, &upstream())
        .await;
    assert_eq!(s.verify(POD_TOKEN, &ALL, now), Ok(pod_user));
}

#[tokio::test]
async fn what_kcache_cannot_check_is_reviewed() {
    let s = confirmed(TOKEN, sa_review()).await;
    s.confirm(POD_TOKEN, &pod_review().0, &pod_review().1, &upstream())
        .await;
    let now = valid_now();
    // The account (or the Pod) not held by kcache's caches, or not with the token's UID.
    let nothing = Held { pod: false };
    struct None_;
    impl BoundObjects for None_ {
        fn holds(&self, _: Bound, _: &str, _: &str, _: &str) -> bool {
            false
        }
    }
    assert_eq!(
        s.verify(TOKEN, &None_, now),
        Err(NotVerified::ObjectNotHeld(Bound::ServiceAccount))
    );
    assert_eq!(
        s.verify(POD_TOKEN, &nothing, now),
        Err(NotVerified::ObjectNotHeld(Bound::Pod))
    );
    // Expired (or about to be), or not valid yet.
    let short = issued(SHORT_TOKEN);
    let exp = Token::parse(SHORT_TOKEN).unwrap().claims.exp;
    assert!(s.verify(SHORT_TOKEN, &ALL, short).is_ok());
    assert_eq!(s.verify(SHORT_TOKEN, &ALL, exp), Err(NotVerified::Expired));
    assert_eq!(
        s.verify(SHORT_TOKEN, &ALL, exp - 5),
        Err(NotVerified::Expired)
    );
    assert_eq!(
        s.verify(SHORT_TOKEN, &ALL, short - 10),
        Err(NotVerified::Expired)
    );
    // A signature that does not match, a key kcache does not know, not a JWT at all.
    let mut tampered = TOKEN.to_string();
    tampered.replace_range(tampered.len() - 4.., "AAAA");
    assert_eq!(
        s.verify(&tampered, &ALL, now),
        Err(NotVerified::BadSignature)
    );
    let (claims_of_2, sig_of_1) = (
        TOKEN_2.rsplit_once('.').unwrap().0,
        TOKEN.rsplit_once('.').unwrap().1,
    );
    assert_eq!(
        s.verify(&format!("{claims_of_2}.{sig_of_1}"), &ALL, now),
        Err(NotVerified::BadSignature)
    );
    let unknown = ServiceAccountTokens::default();
    assert_eq!(
        unknown.verify(TOKEN, &ALL, now),
        Err(NotVerified::UnknownKey)
    );
    assert_eq!(
        s.verify("a-static-token", &ALL, now),
        Err(NotVerified::NotServiceAccountToken)
    );
}

#[tokio::test]
async fn the_user_follows_the_upstreams_version() {
    // An apiserver that names no credential (v1.28: no token IDs in its reviews).
    let (mut user, audiences) = sa_review();
    user.extra.clear();
    let s = confirmed(TOKEN, (user.clone(), audiences.clone())).await;
    let now = valid_now();
    assert_eq!(s.verify(TOKEN_2, &ALL, now), Ok(user));
    // An upstream whose user kcache cannot build: never verified here.
    let (mut odd, _) = sa_review();
    odd.extra.insert("example.com/x".into(), vec!["y".into()]);
    let s = confirmed(TOKEN, (odd, audiences.clone())).await;
    assert_eq!(
        s.verify(TOKEN_2, &ALL, now),
        Err(NotVerified::UnreproducibleShape)
    );
    // An audience the upstream did not report as its own is not trusted.
    let s = confirmed(TOKEN, (sa_review().0, vec!["another".into()])).await;
    assert_eq!(
        s.verify(TOKEN_2, &ALL, now),
        Err(NotVerified::UnconfirmedAudience)
    );
}
