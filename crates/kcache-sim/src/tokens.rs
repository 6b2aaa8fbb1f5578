//! The sim's ServiceAccount tokens, as kube-apiserver issues and checks them: signed JWTs
//! (here ES256, a key kube-apiserver accepts for `--service-account-signing-key-file`) whose
//! claims are those of tests/fixtures/service-account-tokens (recorded from v1.34.9), the
//! issuer's public keys at `/openid/v1/jwks`, and the TokenReview of such a token: the
//! signature, issuer and lifetime checked, then the ServiceAccount (and the Pod a token is
//! bound to) looked up, so that deleting either ends the token's life at once.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair};
use serde_json::{json, Value};

use crate::status::{Cause, SimError, Target};
use crate::Profile;

/// The issuer (`--service-account-issuer`) of the recorded cluster, and the audience its
/// tokens carry.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// The apiserver's answer to a request for its keys that accepts only JSON.
pub const JWKS_NOT_ACCEPTABLE: &str =
    include_str!("../../../tests/fixtures/service-account-tokens/jwks-accept-json-406.json");

/// The extra a TokenReview names a token's own ID under (v1.30+).
pub const CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";

/// The signing key of one sim.
pub struct Issuer {
    key: EcdsaKeyPair,
    kid: String,
    rng: SystemRandom,
}

impl std::fmt::Debug for Issuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issuer").field("kid", &self.kid).finish()
    }
}

impl Default for Issuer {
    fn default() -> Self {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(alg, &rng).expect("an ECDSA P-256 key");
        let key = EcdsaKeyPair::from_pkcs8(alg, pkcs8.as_ref(), &rng).expect("the key just made");
        // The apiserver's key ID is a hash of the public key; any stable name will do.
        let digest = ring::digest::digest(&ring::digest::SHA256, key.public_key().as_ref());
        let kid = URL_SAFE_NO_PAD.encode(digest.as_ref());
        Issuer { key, kid, rng }
    }
}

impl Issuer {
    /// `/openid/v1/jwks`: the public key, as the apiserver publishes its keys.
    pub fn jwks(&self) -> Vec<u8> {
        // An uncompressed P-256 point: 0x04, then x and y of 32 bytes each.
        let point = self.key.public_key().as_ref();
        json!({"keys": [{
            "use": "sig",
            "kty": "EC",
            "kid": self.kid,
            "crv": "P-256",
            "alg": "ES256",
            "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
            "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
        }]})
        .to_string()
        .into_bytes()
    }

    /// `/.well-known/openid-configuration`, as the recorded apiserver answers it.
    pub fn openid_configuration(&self, base: &str) -> Vec<u8> {
        json!({
            "issuer": ISSUER,
            "jwks_uri": format!("{base}/openid/v1/jwks"),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        })
        .to_string()
        .into_bytes()
    }

    /// A token for ServiceAccount `sa` (an object with `metadata.uid`), bound to `pod` if
    /// given, valid for `seconds` from `now` (Unix seconds), with the claims a v1.34.9
    /// apiserver writes (a token ID only where the profile's apiserver has them: v1.29+).
    pub fn mint(
        &self,
        profile: Profile,
        sa: &Value,
        pod: Option<&Value>,
        now: i64,
        seconds: i64,
    ) -> String {
        self.mint_for(profile, sa, pod, &[ISSUER.to_string()], now, seconds)
    }

    /// [`Issuer::mint`] for `audiences` (a TokenRequest's `spec.audiences`): the token's `aud`.
    pub fn mint_for(
        &self,
        profile: Profile,
        sa: &Value,
        pod: Option<&Value>,
        audiences: &[String],
        now: i64,
        seconds: i64,
    ) -> String {
        let meta = &sa["metadata"];
        let (ns, name) = (
            meta["namespace"].as_str().unwrap_or_default(),
            meta["name"].as_str().unwrap_or_default(),
        );
        let mut k8s = json!({
            "namespace": ns,
            "serviceaccount": {"name": name, "uid": meta["uid"]},
        });
        if let Some(pod) = pod {
            k8s["pod"] = json!({"name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]});
        }
        let mut claims = json!({
            "aud": audiences,
            "exp": now + seconds,
            "iat": now,
            "iss": ISSUER,
            "kubernetes.io": k8s,
            "nbf": now,
            "sub": format!("system:serviceaccount:{ns}:{name}"),
        });
        if profile.names_service_account_credentials() {
            claims["jti"] = json!(uuid::Uuid::new_v4().to_string());
        }
        // The apiserver's JWT library writes the claims in key order.
        let claims: std::collections::BTreeMap<String, Value> = match claims {
            Value::Object(map) => map.into_iter().collect(),
            _ => Default::default(),
        };
        let claims = serde_json::to_string(&claims).unwrap_or_default();
        let header = json!({"alg": "ES256", "kid": self.kid});
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims)
        );
        let sig = self
            .key
            .sign(&self.rng, signed.as_bytes())
            .expect("signing with a valid key");
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref()))
    }

    /// The claims of a token this issuer signed, still valid at `now`; None otherwise.
    pub fn check(&self, token: &str, now: i64) -> Option<Value> {
        let (signed, sig) = token.rsplit_once('.')?;
        let (header, payload) = signed.split_once('.')?;
        let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(header).ok()?).ok()?;
        if header["alg"] != "ES256" || header["kid"] != self.kid.as_str() {
            return None;
        }
        let public = signature::UnparsedPublicKey::new(
            &signature::ECDSA_P256_SHA256_FIXED,
            self.key.public_key().as_ref(),
        );
        public
            .verify(signed.as_bytes(), &URL_SAFE_NO_PAD.decode(sig).ok()?)
            .ok()?;
        let claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).ok()?).ok()?;
        let valid = claims["iss"] == ISSUER
            && claims["exp"].as_i64().is_some_and(|exp| now < exp)
            && claims["nbf"].as_i64().is_none_or(|nbf| nbf <= now);
        valid.then_some(claims)
    }
}

/// A TokenRequest's lifetime when it asks for none, and the least it may ask for.
const DEFAULT_SECONDS: i64 = 3600;
const MIN_SECONDS: i64 = 600;
/// The most it may ask for (2^32 seconds).
const MAX_SECONDS: i64 = 1 << 32;

/// The answer to `POST …/serviceaccounts/NAME/token` in namespace `ns`: the TokenRequest
/// `body` with its spec defaulted (the apiserver's audiences, an hour) and its status (a token
/// minted as [`Issuer::mint`] does, for the spec's audiences, bound to the Pod of
/// `spec.boundObjectRef` if any, and when it expires), in the form of
/// tests/fixtures/service-account-tokens/tokenrequest-*.json: the object's metadata is the
/// ServiceAccount's name, namespace and UID, the time, and the request's managed fields
/// (`manager`). `lookup(resource, name)` gives an object of the namespace; `now` is in Unix
/// seconds. Only Pods are modelled as bound objects (the apiserver also binds to Secrets and
/// Nodes).
#[allow(clippy::too_many_arguments)]
pub(crate) fn token_request(
    issuer: &Issuer,
    profile: Profile,
    ns: &str,
    name: &str,
    body: &[u8],
    manager: &str,
    now: i64,
    lookup: impl Fn(&str, &str) -> Option<Value>,
) -> Result<Vec<u8>, SimError> {
    let request: Value = serde_json::from_slice(body)
        .map_err(|e| SimError::BadRequest(format!("the TokenRequest is not JSON: {e}")))?;
    let spec = &request["spec"];
    let not_found = |resource: &str, name: &str| {
        SimError::NotFound(Target {
            group: String::new(),
            resource: resource.into(),
            name: name.into(),
        })
    };
    let sa = lookup("serviceaccounts", name).ok_or_else(|| not_found("serviceaccounts", name))?;
    let seconds = spec["expirationSeconds"]
        .as_i64()
        .unwrap_or(DEFAULT_SECONDS);
    let too = match seconds {
        s if s < MIN_SECONDS => Some("less than 10 minutes"),
        s if s > MAX_SECONDS => Some("larger than 2^32 seconds"),
        _ => None,
    };
    if let Some(too) = too {
        return Err(SimError::Invalid {
            kind: "TokenRequest".into(),
            group: "authentication.k8s.io".into(),
            name: String::new(),
            causes: vec![Cause {
                reason: "FieldValueInvalid",
                message: format!("Invalid value: {seconds}: may not specify a duration {too}"),
                field: "spec.expirationSeconds".into(),
            }],
        });
    }
    let mut audiences: Vec<String> = spec["audiences"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if audiences.is_empty() {
        audiences.push(ISSUER.to_string());
    }
    let bound = spec["boundObjectRef"].as_object();
    let pod = match bound {
        None => None,
        Some(r) => {
            let kind = r.get("kind").and_then(Value::as_str).unwrap_or_default();
            let pod_name = r.get("name").and_then(Value::as_str).unwrap_or_default();
            if kind != "Pod" {
                return Err(SimError::BadRequest(format!(
                    "the sim binds tokens to Pods only, not to {kind:?}"
                )));
            }
            Some(lookup("pods", pod_name).ok_or_else(|| not_found("pods", pod_name))?)
        }
    };
    let token = issuer.mint_for(profile, &sa, pod.as_ref(), &audiences, now, seconds);
    let time = |secs: i64| {
        jiff::Timestamp::from_second(secs).map_or_else(|_| String::new(), |t| format!("{t:.0}"))
    };
    // What the request set, as its managed fields name them (the lifetime always: defaulted
    // before they are computed).
    let mut fields = serde_json::Map::new();
    if spec.get("audiences").is_some() {
        fields.insert("f:audiences".into(), json!({}));
    }
    if let Some(r) = bound {
        let mut keys: Vec<&String> = r.keys().collect();
        keys.sort();
        let set: serde_json::Map<String, Value> = keys
            .into_iter()
            .map(|k| (format!("f:{k}"), json!({})))
            .collect();
        fields.insert("f:boundObjectRef".into(), Value::Object(set));
    }
    fields.insert("f:expirationSeconds".into(), json!({}));
    // The reference echoed in the apiserver's field order, without what was not given.
    let bound_ref = bound.map_or(Value::Null, |r| {
        let ordered: serde_json::Map<String, Value> = ["kind", "apiVersion", "name", "uid"]
            .into_iter()
            .filter_map(|k| Some((k.to_string(), r.get(k)?.clone())))
            .collect();
        Value::Object(ordered)
    });
    let meta = &sa["metadata"];
    let answer = json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {
            "name": meta["name"],
            "namespace": ns,
            "uid": meta["uid"],
            "creationTimestamp": time(now),
            "managedFields": [{
                "manager": manager,
                "operation": "Update",
                "apiVersion": "authentication.k8s.io/v1",
                "time": time(now),
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:spec": fields},
                "subresource": "token",
            }],
        },
        "spec": {
            "audiences": audiences,
            "expirationSeconds": seconds,
            "boundObjectRef": bound_ref,
        },
        "status": {
            "token": token,
            "expirationTimestamp": time(now + seconds),
        },
    });
    Ok(serde_json::to_vec(&answer).unwrap_or_default())
}

/// The TokenReview `status.user` of a token's claims, if the objects it names still exist
/// with the UIDs it names (`lookup(resource, namespace, name)` gives an object): the
/// apiserver's user for a ServiceAccount token.
pub fn user(
    claims: &Value,
    profile: Profile,
    lookup: impl Fn(&str, &str, &str) -> Option<Value>,
) -> Option<Value> {
    let k8s = &claims["kubernetes.io"];
    let ns = k8s["namespace"].as_str()?;
    let alive = |resource: &str, named: &Value| -> Option<()> {
        let name = named["name"].as_str()?;
        let object = lookup(resource, ns, name)?;
        let meta = &object["metadata"];
        (meta["uid"] == named["uid"] && meta["deletionTimestamp"].is_null()).then_some(())
    };
    let sa = &k8s["serviceaccount"];
    alive("serviceaccounts", sa)?;
    let name = sa["name"].as_str()?;
    let mut extra = serde_json::Map::new();
    if k8s["pod"].is_object() {
        alive("pods", &k8s["pod"])?;
        extra.insert(
            "authentication.kubernetes.io/pod-name".into(),
            json!([k8s["pod"]["name"]]),
        );
        extra.insert(
            "authentication.kubernetes.io/pod-uid".into(),
            json!([k8s["pod"]["uid"]]),
        );
    }
    if let (Some(jti), true) = (
        claims["jti"].as_str(),
        profile.names_service_account_credentials(),
    ) {
        extra.insert(CREDENTIAL_ID.into(), json!([format!("JTI={jti}")]));
    }
    let mut user = json!({
        "username": format!("system:serviceaccount:{ns}:{name}"),
        "uid": sa["uid"],
        "groups": [
            "system:serviceaccounts",
            format!("system:serviceaccounts:{ns}"),
            "system:authenticated",
        ],
    });
    if !extra.is_empty() {
        user["extra"] = Value::Object(extra);
    }
    Some(user)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa() -> Value {
        json!({"metadata": {"namespace": "team-a", "name": "app", "uid": "sa-uid"}})
    }

    #[test]
    fn a_minted_token_has_the_recorded_claims_and_checks() {
        let issuer = Issuer::default();
        let token = issuer.mint(Profile::V1_34, &sa(), None, 1_000, 3_600);
        let claims = issuer.check(&token, 1_001).expect("valid");
        let recorded =
            include_str!("../../../tests/fixtures/service-account-tokens/token-serviceaccount.jwt");
        let payload = recorded.trim().split('.').nth(1).unwrap();
        let recorded: Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
        let keys = |v: &Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
        assert_eq!(keys(&claims), keys(&recorded));
        assert_eq!(
            keys(&claims["kubernetes.io"]),
            keys(&recorded["kubernetes.io"])
        );
        // Expired, tampered with, or another issuer's: not this issuer's valid token.
        assert!(issuer.check(&token, 4_600).is_none());
        let mut tampered = token.clone().into_bytes();
        let at = tampered.len() - 5;
        tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
        assert!(issuer
            .check(std::str::from_utf8(&tampered).unwrap(), 1_001)
            .is_none());
        assert!(Issuer::default().check(&token, 1_001).is_none());
    }

    #[test]
    fn the_user_is_the_recorded_reviews_and_needs_its_objects() {
        let issuer = Issuer::default();
        let pod = json!({"metadata": {"namespace": "team-a", "name": "p", "uid": "pod-uid"}});
        let token = issuer.mint(Profile::V1_34, &sa(), Some(&pod), 1_000, 3_600);
        let claims = issuer.check(&token, 1_001).unwrap();
        let objects = |resource: &str, _: &str, _: &str| match resource {
            "serviceaccounts" => Some(sa()),
            _ => Some(pod.clone()),
        };
        let user = user(&claims, Profile::V1_34, objects).unwrap();
        let recorded: Value = serde_json::from_str(include_str!(
            "../../../tests/fixtures/service-account-tokens/tokenreview-pod-bound.json"
        ))
        .unwrap();
        let recorded = &recorded["status"]["user"];
        // The recording was printed by kubectl, which sorts keys.
        let keys = |v: &Value| -> Vec<String> {
            let mut keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
            keys.sort();
            keys
        };
        assert_eq!(keys(&user), keys(recorded));
        assert_eq!(keys(&user["extra"]), keys(&recorded["extra"]));
        assert_eq!(user["groups"][1], "system:serviceaccounts:team-a");
        // The ServiceAccount gone, or another with its name: the token is no longer valid.
        assert!(super::user(&claims, Profile::V1_34, |_, _, _| None).is_none());
        let other = |_: &str, _: &str, _: &str| {
            Some(json!({"metadata": {"name": "app", "uid": "another"}}))
        };
        assert!(super::user(&claims, Profile::V1_34, other).is_none());
        // v1.28 names no credential.
        let old = super::user(&claims, Profile::V1_28, objects).unwrap();
        assert!(old["extra"].get(CREDENTIAL_ID).is_none());
    }
}
