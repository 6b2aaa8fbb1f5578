//! The sim's authentication and authorization: a token table and a small RBAC rule table,
//! enough to be an upstream that answers TokenReview and SubjectAccessReview and refuses what
//! its rules do not allow (as kube-apiserver with token auth and RBAC does). Off unless a test
//! installs a table with [`super::Sim::set_rbac`]; then requests without a token are
//! `system:anonymous`, and unknown tokens get the recorded 401.
//!
//! Once on, the sim also authenticates the ServiceAccount tokens it issued (`Sim::token_request`
//! or a TokenRequest over HTTP) on every request, and its authorizer also follows the RBAC
//! objects stored in it, as kube-apiserver's RBAC authorizer does: a ClusterRole and a
//! ClusterRoleBinding (or a RoleBinding) a client writes grant what they say, and stop
//! granting it once deleted. The table's rules are checked first, then the objects.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::status::{SimError, Target};
use super::store::Store;

/// A user the sim knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimUser {
    pub name: String,
    pub uid: String,
    /// Without `system:authenticated`, which the sim adds.
    pub groups: Vec<String>,
}

/// Who a rule applies to.
#[derive(Clone, Debug)]
pub enum Subject {
    User(String),
    Group(String),
}

/// One allow rule (a Role or ClusterRole bound to a subject). `*` matches anything.
#[derive(Clone, Debug)]
pub struct Rule {
    pub subject: Subject,
    pub verbs: Vec<String>,
    pub groups: Vec<String>,
    pub resources: Vec<String>,
    /// None: every namespace and cluster-wide requests (a ClusterRoleBinding); Some: requests
    /// in that namespace only (a RoleBinding).
    pub namespace: Option<String>,
    /// The name of the binding (and of the role it binds), for the authorizer's reason.
    pub binding: String,
}

impl Rule {
    /// The RBAC authorizer's reason for a request this rule allows, word for word
    /// (`RBAC: allowed by ClusterRoleBinding "reader-basic" of ClusterRole "reader-basic" to
    /// User "reader"` in tests/fixtures/audit).
    fn reason(&self) -> String {
        let subject = match &self.subject {
            Subject::User(u) => format!("User {u:?}"),
            Subject::Group(g) => format!("Group {g:?}"),
        };
        let name = &self.binding;
        match &self.namespace {
            None => format!(
                "RBAC: allowed by ClusterRoleBinding {name:?} of ClusterRole {name:?} to {subject}"
            ),
            Some(ns) => format!(
                "RBAC: allowed by RoleBinding {:?} of Role {name:?} to {subject}",
                format!("{name}/{ns}")
            ),
        }
    }
}

/// The whole table.
#[derive(Clone, Debug, Default)]
pub struct Rbac {
    tokens: HashMap<String, SimUser>,
    rules: Vec<Rule>,
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

impl Rbac {
    pub fn new() -> Rbac {
        Rbac::default()
    }

    /// `token` authenticates as `user` in `groups`.
    pub fn token(mut self, token: &str, user: &str, groups: &[&str]) -> Rbac {
        self.tokens.insert(
            token.to_string(),
            SimUser {
                name: user.to_string(),
                uid: format!("uid-{user}"),
                groups: strs(groups),
            },
        );
        self
    }

    /// Let `system:masters` do everything, as the apiserver's bootstrap policy does for a
    /// cluster admin.
    pub fn allow_masters(self) -> Rbac {
        self.allow(
            Subject::Group("system:masters".into()),
            &["*"],
            &["*"],
            &["*"],
            None,
        )
    }

    /// Allow `subject` the verbs on the resources (`group/resource` style lists).
    pub fn allow(
        mut self,
        subject: Subject,
        verbs: &[&str],
        groups: &[&str],
        resources: &[&str],
        namespace: Option<&str>,
    ) -> Rbac {
        let binding = format!("sim-rule-{}", self.rules.len());
        self.rules.push(Rule {
            subject,
            verbs: strs(verbs),
            groups: strs(groups),
            resources: strs(resources),
            namespace: namespace.map(str::to_string),
            binding,
        });
        self
    }

    /// Name the binding of the rule added last (the authorizer's reason names it).
    pub fn named(mut self, binding: &str) -> Rbac {
        if let Some(rule) = self.rules.last_mut() {
            rule.binding = binding.to_string();
        }
        self
    }

    /// `token` authenticates as `user`, allowed what a caching proxy in front of the sim
    /// needs: get, list and watch everything, and create TokenReviews and
    /// SubjectAccessReviews.
    pub fn proxy(self, token: &str, user: &str) -> Rbac {
        let who = || Subject::User(user.to_string());
        self.token(token, user, &[])
            .allow(who(), &["get", "list", "watch"], &["*"], &["*"], None)
            .allow(
                who(),
                &["create"],
                &["authentication.k8s.io", "authorization.k8s.io"],
                &["tokenreviews", "subjectaccessreviews"],
                None,
            )
    }

    /// The user a token belongs to.
    pub fn user_of(&self, token: &str) -> Option<&SimUser> {
        self.tokens.get(token)
    }

    /// Whether some rule allows the request.
    pub fn allows(&self, user: &str, groups: &[String], r: &Request<'_>) -> bool {
        self.allowed_by(user, groups, r).is_some()
    }

    /// The first rule that allows the request, if any.
    fn allowed_by(&self, user: &str, groups: &[String], r: &Request<'_>) -> Option<&Rule> {
        let any = |list: &[String], v: &str| list.iter().any(|x| x == "*" || x == v);
        self.rules.iter().find(|rule| {
            let subject = match &rule.subject {
                Subject::User(u) => u == user,
                Subject::Group(g) => groups.iter().any(|x| x == g),
            };
            let scope = match (&rule.namespace, r.namespace) {
                (None, _) => true,
                (Some(ns), Some(want)) => ns == want,
                (Some(_), None) => false,
            };
            subject
                && scope
                && any(&rule.verbs, r.verb)
                && any(&rule.groups, r.group)
                && any(&rule.resources, r.resource)
        })
    }
}

/// The RBAC API group the table's objects are served under.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

impl Rbac {
    /// The table as the RBAC objects an apiserver's authorizer would read it from: per rule a
    /// ClusterRole and ClusterRoleBinding (a rule for every namespace) or a Role and
    /// RoleBinding (one namespace's), named after the rule's binding. A real cluster changes
    /// what its authorizer allows by changing these objects, and whoever watches them sees
    /// it; the sim keeps them in step with the table ([`super::Sim::set_rbac`]) so that a
    /// watcher of RBAC sees every change of what the sim allows.
    ///
    /// Returns `(resource, object)` pairs; two rules under one binding name get names of
    /// their own (`name`, `name-2`, …).
    pub fn objects(&self) -> Vec<(&'static str, Value)> {
        let mut seen: HashMap<(Option<&str>, &str), usize> = HashMap::new();
        let mut out = Vec::new();
        for rule in &self.rules {
            let n = seen
                .entry((rule.namespace.as_deref(), rule.binding.as_str()))
                .or_insert(0);
            *n += 1;
            let name = match *n {
                1 => rule.binding.clone(),
                n => format!("{}-{n}", rule.binding),
            };
            let (role_kind, binding_kind) = match rule.namespace {
                None => ("ClusterRole", "ClusterRoleBinding"),
                Some(_) => ("Role", "RoleBinding"),
            };
            let mut metadata = json!({ "name": name });
            if let Some(ns) = &rule.namespace {
                metadata["namespace"] = json!(ns);
            }
            let (subject_kind, subject_name) = match &rule.subject {
                Subject::User(u) => ("User", u),
                Subject::Group(g) => ("Group", g),
            };
            let role = json!({
                "apiVersion": format!("{RBAC_GROUP}/v1"),
                "kind": role_kind,
                "metadata": metadata,
                "rules": [{
                    "apiGroups": rule.groups,
                    "resources": rule.resources,
                    "verbs": rule.verbs,
                }],
            });
            let binding = json!({
                "apiVersion": format!("{RBAC_GROUP}/v1"),
                "kind": binding_kind,
                "metadata": metadata,
                "roleRef": { "apiGroup": RBAC_GROUP, "kind": role_kind, "name": name },
                "subjects": [{
                    "apiGroup": RBAC_GROUP,
                    "kind": subject_kind,
                    "name": subject_name,
                }],
            });
            let (roles, bindings) = match rule.namespace {
                None => ("clusterroles", "clusterrolebindings"),
                Some(_) => ("roles", "rolebindings"),
            };
            out.push((roles, role));
            out.push((bindings, binding));
        }
        out
    }
}

/// A resource request in the authorizer's terms.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    pub verb: &'a str,
    pub group: &'a str,
    /// With the subresource (`pods/log`).
    pub resource: &'a str,
    pub namespace: Option<&'a str>,
    pub name: Option<&'a str>,
}

impl Request<'_> {
    /// The RBAC authorizer's sentence for a denial.
    pub fn denial(&self, user: &str) -> String {
        let scope = match self.namespace {
            Some(ns) => format!("in the namespace \"{ns}\""),
            None => "at the cluster scope".into(),
        };
        format!(
            "User \"{user}\" cannot {} resource \"{}\" in API group \"{}\" {scope}",
            self.verb, self.resource, self.group
        )
    }
}

/// The RBAC authorizer's reason for allowing a request, if anything allows it: the table's
/// rules first, then the RBAC objects stored in the sim ([`allowed_by_objects`]).
pub(crate) fn reason(
    rbac: &Rbac,
    store: &Store,
    user: &str,
    groups: &[String],
    r: &Request<'_>,
) -> Option<String> {
    rbac.allowed_by(user, groups, r)
        .map(Rule::reason)
        .or_else(|| allowed_by_objects(store, user, groups, r))
}

/// What the RBAC objects stored in the sim allow, read as kube-apiserver's RBAC authorizer
/// reads them: every ClusterRoleBinding, then the RoleBindings of the request's namespace;
/// a binding whose subjects include the user (a `User` by name, a `Group` the user is in, a
/// `ServiceAccount` as its user `system:serviceaccount:NS:NAME`) grants the rules of the role
/// it refers to (a ClusterRole, or a Role of the binding's namespace). Returns the
/// authorizer's reason, word for word (tests/fixtures/service-account-tokens/
/// subjectaccessreview-*.json). A binding to a role that does not exist grants nothing.
pub(crate) fn allowed_by_objects(
    store: &Store,
    user: &str,
    groups: &[String],
    r: &Request<'_>,
) -> Option<String> {
    let scan = |bindings: &str, namespace: Option<&str>| -> Option<String> {
        let snapshot = store.snapshot(RBAC_GROUP, bindings).ok()?;
        snapshot.objects.values().find_map(|o| {
            let binding = &o.value;
            let meta = &binding["metadata"];
            let ns = meta["namespace"].as_str().unwrap_or_default();
            if namespace.is_some_and(|want| want != ns) {
                return None;
            }
            let subject = binding["subjects"]
                .as_array()?
                .iter()
                .find(|s| applies_to(s, ns, user, groups))?;
            let role_ref = &binding["roleRef"];
            let (role_kind, role_name) = (role_ref["kind"].as_str()?, role_ref["name"].as_str()?);
            let role = match role_kind {
                "ClusterRole" => store.get(RBAC_GROUP, "clusterroles", None, role_name),
                "Role" if namespace.is_some() => {
                    store.get(RBAC_GROUP, "roles", Some(ns), role_name)
                }
                _ => return None,
            }
            .ok()?;
            role.value["rules"]
                .as_array()?
                .iter()
                .any(|rule| rule_allows(rule, r))
                .then(|| {
                    let name = meta["name"].as_str().unwrap_or_default();
                    let described = describe(subject, ns);
                    match namespace {
                        None => format!(
                            "RBAC: allowed by ClusterRoleBinding {name:?} of {role_kind} \
                             {role_name:?} to {described}"
                        ),
                        Some(_) => format!(
                            "RBAC: allowed by RoleBinding {:?} of {role_kind} {role_name:?} to \
                             {described}",
                            format!("{name}/{ns}")
                        ),
                    }
                })
        })
    };
    scan("clusterrolebindings", None).or_else(|| scan("rolebindings", Some(r.namespace?)))
}

/// Whether a binding's subject is the user: RBAC's `appliesTo`. A ServiceAccount without a
/// namespace is in the binding's.
fn applies_to(subject: &Value, binding_ns: &str, user: &str, groups: &[String]) -> bool {
    let name = subject["name"].as_str().unwrap_or_default();
    match subject["kind"].as_str() {
        Some("User") => name == user,
        Some("Group") => groups.iter().any(|g| g == name),
        Some("ServiceAccount") => {
            let ns = subject["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                .unwrap_or(binding_ns);
            user == format!("system:serviceaccount:{ns}:{name}")
        }
        _ => false,
    }
}

/// A subject as the authorizer's reason names it (`ServiceAccount "NAME/NS"`).
fn describe(subject: &Value, binding_ns: &str) -> String {
    let kind = subject["kind"].as_str().unwrap_or_default();
    let name = subject["name"].as_str().unwrap_or_default();
    if kind == "ServiceAccount" {
        let ns = subject["namespace"]
            .as_str()
            .filter(|n| !n.is_empty())
            .unwrap_or(binding_ns);
        return format!("{kind} {:?}", format!("{name}/{ns}"));
    }
    format!("{kind} {name:?}")
}

/// Whether one PolicyRule allows a resource request: its verb, API group and resource (`*`
/// for any; `*/SUB` for a subresource of any resource), and its name when the rule lists
/// `resourceNames` (then a request without a name, a list or a create, is not allowed).
fn rule_allows(rule: &Value, r: &Request<'_>) -> bool {
    let list = |key: &str| -> Vec<&str> {
        rule[key]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    };
    let has = |key: &str, v: &str| list(key).iter().any(|x| *x == "*" || *x == v);
    let any_sub = r
        .resource
        .split_once('/')
        .map(|(_, sub)| format!("*/{sub}"));
    let resource = list("resources")
        .iter()
        .any(|x| *x == "*" || *x == r.resource || any_sub.as_deref() == Some(*x));
    let names = list("resourceNames");
    let named = names.is_empty() || r.name.is_some_and(|n| names.contains(&n));
    has("verbs", r.verb) && has("apiGroups", r.group) && resource && named
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_served_as_the_rbac_objects_it_stands_for() {
        let rbac = Rbac::new()
            .allow(Subject::User("u".into()), &["get"], &[""], &["pods"], None)
            .named("readers")
            .allow(
                Subject::Group("g".into()),
                &["list"],
                &[""],
                &["pods"],
                Some("a"),
            )
            .named("readers")
            .allow(Subject::User("v".into()), &["get"], &[""], &["nodes"], None)
            .named("readers");
        let objects = rbac.objects();
        let named = |resource: &str| -> Vec<(String, String)> {
            objects
                .iter()
                .filter(|(r, _)| *r == resource)
                .map(|(_, o)| {
                    let m = &o["metadata"];
                    (
                        m["namespace"].as_str().unwrap_or("").to_string(),
                        m["name"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        };
        // A rule per (Cluster)Role and binding; one name used twice in one scope made unique.
        let cluster = vec![
            (String::new(), "readers".to_string()),
            (String::new(), "readers-2".to_string()),
        ];
        assert_eq!(named("clusterroles"), cluster);
        assert_eq!(named("clusterrolebindings"), cluster);
        assert_eq!(
            named("roles"),
            vec![("a".to_string(), "readers".to_string())]
        );
        let binding = &objects
            .iter()
            .find(|(r, _)| *r == "rolebindings")
            .unwrap()
            .1;
        assert_eq!(binding["subjects"][0]["kind"], "Group");
        assert_eq!(binding["roleRef"]["kind"], "Role");
        let role = &objects.iter().find(|(r, _)| *r == "roles").unwrap().1;
        assert_eq!(role["rules"][0]["verbs"], json!(["list"]));
    }

    #[test]
    fn an_allowed_request_names_the_binding_as_rbac_does() {
        let rbac = Rbac::new()
            .allow(
                Subject::User("reader".into()),
                &["list"],
                &[""],
                &["configmaps"],
                None,
            )
            .named("reader-basic")
            .allow(
                Subject::Group("devs".into()),
                &["get"],
                &[""],
                &["pods"],
                Some("a"),
            )
            .named("devs-pods");
        let req = |verb, resource, namespace| Request {
            verb,
            group: "",
            resource,
            namespace,
            name: None,
        };
        let reason = |user: &str, groups: &[String], r: &Request<'_>| {
            rbac.allowed_by(user, groups, r).map(Rule::reason)
        };
        // As tests/fixtures/audit records it.
        assert_eq!(
            reason("reader", &[], &req("list", "configmaps", Some("x"))).as_deref(),
            Some(
                "RBAC: allowed by ClusterRoleBinding \"reader-basic\" of ClusterRole \
                 \"reader-basic\" to User \"reader\""
            )
        );
        assert_eq!(
            reason("u", &["devs".into()], &req("get", "pods", Some("a"))).as_deref(),
            Some("RBAC: allowed by RoleBinding \"devs-pods/a\" of Role \"devs-pods\" to Group \"devs\"")
        );
        assert_eq!(reason("u", &[], &req("get", "pods", Some("a"))), None);
    }

    #[test]
    fn namespaced_rules_do_not_reach_cluster_wide() {
        let rbac = Rbac::new().allow(
            Subject::User("sa".into()),
            &["get", "list"],
            &[""],
            &["configmaps"],
            Some("a"),
        );
        let req = |ns: Option<&'static str>, resource: &'static str| Request {
            verb: "list",
            group: "",
            resource,
            namespace: ns,
            name: None,
        };
        assert!(rbac.allows("sa", &[], &req(Some("a"), "configmaps")));
        assert!(!rbac.allows("sa", &[], &req(Some("b"), "configmaps")));
        assert!(!rbac.allows("sa", &[], &req(None, "configmaps")));
        assert!(!rbac.allows("sa", &[], &req(Some("a"), "secrets")));
        assert!(!rbac.allows("other", &[], &req(Some("a"), "configmaps")));
    }
}

/// Who is making a request to the sim (after impersonation).
#[derive(Clone, Debug)]
pub struct Identity {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

impl Identity {
    pub fn anonymous() -> Identity {
        Identity {
            name: "system:anonymous".into(),
            uid: String::new(),
            groups: vec!["system:unauthenticated".into()],
        }
    }
}

/// What the sim's HTTP layer keeps per request while RBAC is on.
#[derive(Clone)]
pub struct Allowed {
    pub rbac: std::sync::Arc<Rbac>,
    pub who: Identity,
    /// Where the RBAC objects written through the API are (see [`allowed_by_objects`]).
    pub(crate) store: std::sync::Arc<Store>,
}

impl std::fmt::Debug for Allowed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allowed")
            .field("rbac", &self.rbac)
            .field("who", &self.who)
            .finish_non_exhaustive()
    }
}

impl Allowed {
    /// Ok, or the apiserver's 403 for this request.
    pub fn check(&self, r: &Request<'_>) -> Result<(), SimError> {
        if reason(&self.rbac, &self.store, &self.who.name, &self.who.groups, r).is_some() {
            return Ok(());
        }
        // The Status names the resource without its subresource (`pods "x" is forbidden`);
        // only the sentence names `pods/exec`.
        let resource = r.resource.split('/').next().unwrap_or(r.resource);
        Err(SimError::Forbidden {
            target: Target {
                group: r.group.to_string(),
                resource: resource.to_string(),
                name: r.name.unwrap_or("").to_string(),
            },
            message: r.denial(&self.who.name),
        })
    }
}

/// The requester: a bearer token's user (401 for an unknown token), else anonymous; then
/// `Impersonate-User`/`-Group`, if its rules allow impersonating them.
///
/// A token is the table's, or a ServiceAccount token the sim issued: `service_account` gives
/// its TokenReview user (`tokens::user`) while it is valid, as the apiserver's
/// ServiceAccount token authenticator accepts it on any request, not only in a TokenReview.
pub(crate) fn identify(
    rbac: &std::sync::Arc<Rbac>,
    store: &std::sync::Arc<Store>,
    headers: &http::HeaderMap,
    service_account: impl Fn(&str) -> Option<Value>,
) -> Result<Identity, SimError> {
    let mut who = match headers.get(http::header::AUTHORIZATION) {
        None => Identity::anonymous(),
        Some(v) => {
            let token = v
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("Bearer "))
                .ok_or(SimError::Unauthorized)?
                .trim();
            match rbac.user_of(token) {
                Some(user) => {
                    let mut groups = user.groups.clone();
                    groups.push("system:authenticated".into());
                    Identity {
                        name: user.name.clone(),
                        uid: user.uid.clone(),
                        groups,
                    }
                }
                None => {
                    let user = service_account(token).ok_or(SimError::Unauthorized)?;
                    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
                    Identity {
                        name: s(&user["username"]),
                        uid: s(&user["uid"]),
                        // `system:authenticated` among them already.
                        groups: user["groups"]
                            .as_array()
                            .map(|g| g.iter().map(s).collect())
                            .unwrap_or_default(),
                    }
                }
            }
        }
    };
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_string))
            .collect()
    };
    let users = values("impersonate-user");
    let groups = values("impersonate-group");
    if users.is_empty() && groups.is_empty() {
        return Ok(who);
    }
    let Some(user) = users.first() else {
        return Err(SimError::Internal(
            "requested [{Groups}] without impersonating a user".into(),
        ));
    };
    let me = Allowed {
        rbac: rbac.clone(),
        who: who.clone(),
        store: store.clone(),
    };
    let imp = |resource: &'static str, name: &str| {
        me.check(&Request {
            verb: "impersonate",
            group: "",
            resource,
            namespace: None,
            name: Some(name),
        })
    };
    imp("users", user)?;
    for g in &groups {
        imp("groups", g)?;
    }
    let mut all = groups;
    all.push("system:authenticated".into());
    who = Identity {
        name: user.clone(),
        uid: String::new(),
        groups: all,
    };
    Ok(who)
}

/// The answer to a POSTed TokenReview (`token`) or SubjectAccessReview, as JSON. The
/// requester needs `create` on the review resource, as on the apiserver.
pub(crate) async fn answer(
    rbac: &std::sync::Arc<Rbac>,
    store: &std::sync::Arc<Store>,
    who: &Identity,
    token: bool,
    profile: crate::Profile,
    service_account: impl Fn(&str) -> Option<Value>,
    req: axum::extract::Request,
) -> Result<Vec<u8>, SimError> {
    let (group, resource) = if token {
        ("authentication.k8s.io", "tokenreviews")
    } else {
        ("authorization.k8s.io", "subjectaccessreviews")
    };
    Allowed {
        rbac: rbac.clone(),
        who: who.clone(),
        store: store.clone(),
    }
    .check(&Request {
        verb: "create",
        group,
        resource,
        namespace: None,
        name: None,
    })?;
    let body = http_body_util::BodyExt::collect(req.into_body())
        .await
        .map_err(|e| SimError::BadRequest(e.to_string()))?
        .to_bytes();
    let review: Value =
        serde_json::from_slice(&body).map_err(|e| SimError::BadRequest(e.to_string()))?;
    let spec = &review["spec"];
    let status = if token {
        let token = spec["token"].as_str().unwrap_or_default();
        // A ServiceAccount token the sim issued (`Sim::token_request`) first.
        let issued = service_account(token);
        match (issued, rbac.user_of(token)) {
            (Some(user), _) => {
                json!({"authenticated": true, "user": user, "audiences": [crate::tokens::ISSUER]})
            }
            (None, Some(u)) => {
                let mut groups = u.groups.clone();
                groups.push("system:authenticated".into());
                let mut user = json!({"username": u.name, "uid": u.uid, "groups": groups});
                if profile.names_service_account_credentials()
                    && u.name.starts_with("system:serviceaccount:")
                {
                    // Each token its own ID, the same at every review of it.
                    let jti = crate::seed::uid_for("ServiceAccountToken", None, token);
                    user["extra"] = json!({"authentication.kubernetes.io/credential-id": [format!("JTI={jti}")]});
                }
                json!({"authenticated": true, "user": user, "audiences": ["https://kubernetes.default.svc.cluster.local"]})
            }
            (None, None) => {
                json!({"user": {}, "error": "[invalid bearer token, token lookup failed]"})
            }
        }
    } else {
        let attrs = &spec["resourceAttributes"];
        let s = |v: &Value| v.as_str().unwrap_or("").to_string();
        let groups: Vec<String> = spec["groups"]
            .as_array()
            .map(|a| a.iter().map(s).collect())
            .unwrap_or_default();
        let (verb, group, res, sub, ns, name) = (
            s(&attrs["verb"]),
            s(&attrs["group"]),
            s(&attrs["resource"]),
            s(&attrs["subresource"]),
            s(&attrs["namespace"]),
            s(&attrs["name"]),
        );
        let resource = if sub.is_empty() {
            res
        } else {
            format!("{res}/{sub}")
        };
        let r = Request {
            verb: &verb,
            group: &group,
            resource: &resource,
            namespace: (!ns.is_empty()).then_some(ns.as_str()),
            name: (!name.is_empty()).then_some(name.as_str()),
        };
        // RBAC gives a reason only when it allows (a denial's reason is empty, and then
        // omitted, as in tests/fixtures/audit).
        match reason(rbac, store, &s(&spec["user"]), &groups, &r) {
            Some(reason) => json!({"allowed": true, "reason": reason}),
            None => json!({"allowed": false}),
        }
    };
    let mut out = review;
    out["metadata"] = json!({"creationTimestamp": null});
    out["status"] = status;
    Ok(serde_json::to_vec(&out).unwrap_or_default())
}
