//! The policy checker row by row: each matcher on its own, the first-match rule, how
//! `omitStages` and `omitManagedFields` combine, the file's checks, and a policy of the shape
//! real clusters run.

use super::*;

/// A request as a test row describes it; [`Req::attributes`] lends it out as the checker
/// sees it.
#[derive(Clone)]
struct Req {
    user: &'static str,
    groups: Vec<String>,
    verb: &'static str,
    path: &'static str,
    resource: Option<ResourceAttributes<'static>>,
}

impl Req {
    fn attributes(&self) -> Attributes<'_> {
        Attributes {
            user: self.user,
            groups: &self.groups,
            verb: self.verb,
            path: self.path,
            resource: self.resource,
        }
    }

    fn user(mut self, user: &'static str) -> Req {
        self.user = user;
        self
    }

    fn groups(mut self, groups: &[&str]) -> Req {
        self.groups = groups.iter().map(|g| g.to_string()).collect();
        self
    }

    fn namespace(mut self, namespace: Option<&'static str>) -> Req {
        if let Some(r) = &mut self.resource {
            r.namespace = namespace;
        }
        self
    }

    fn name(mut self, name: &'static str) -> Req {
        if let Some(r) = &mut self.resource {
            r.name = Some(name);
        }
        self
    }
}

/// A resource request by `alice` (group `system:authenticated`) in `default`: `what` is
/// `[group|]resource[/subresource]` (`pods`, `pods/log`, `apps|deployments/scale`).
fn resource(verb: &'static str, what: &'static str) -> Req {
    let (group, rest) = what.split_once('|').unwrap_or(("", what));
    let (resource, subresource) = match rest.split_once('/') {
        Some((r, s)) => (r, Some(s)),
        None => (rest, None),
    };
    Req {
        user: "alice",
        groups: vec!["system:authenticated".to_string()],
        verb,
        path: "/apis/some/path",
        resource: Some(ResourceAttributes {
            group,
            version: "v1",
            resource,
            subresource,
            namespace: Some("default"),
            name: None,
        }),
    }
}

/// A non-resource request by `alice`.
fn non_resource(verb: &'static str, path: &'static str) -> Req {
    Req {
        user: "alice",
        groups: vec!["system:authenticated".to_string()],
        verb,
        path,
        resource: None,
    }
}

/// A policy of `rules` (YAML list items, one rule a line) and nothing else.
fn policy(rules: &[&str]) -> Policy {
    let mut yaml = String::from("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n");
    for rule in rules {
        yaml.push_str("- ");
        yaml.push_str(rule);
        yaml.push('\n');
    }
    Policy::parse(&yaml).unwrap_or_else(|e| panic!("{yaml}\n{e}"))
}

/// Each row: what it checks, the request, and the level the policy must give it.
fn check(policy: &Policy, rows: &[(&str, Req, Level)]) {
    for (what, req, want) in rows {
        let got = policy.evaluate(&req.attributes()).level;
        assert_eq!(got, *want, "{what}");
    }
}

#[test]
fn users_match_by_name() {
    let p = policy(&["{level: Metadata, users: [alice, carol]}"]);
    check(
        &p,
        &[
            ("listed user", resource("get", "pods"), Level::Metadata),
            (
                "other listed user",
                resource("get", "pods").user("carol"),
                Level::Metadata,
            ),
            (
                "unlisted user",
                resource("get", "pods").user("bob"),
                Level::None,
            ),
            (
                "non-resource request, listed user",
                non_resource("get", "/version"),
                Level::Metadata,
            ),
        ],
    );
}

#[test]
fn user_groups_match_any_group() {
    let p = policy(&["{level: Metadata, userGroups: [system:masters, ops]}"]);
    check(
        &p,
        &[
            (
                "one group listed",
                resource("get", "pods").groups(&["system:authenticated", "ops"]),
                Level::Metadata,
            ),
            ("no group listed", resource("get", "pods"), Level::None),
            (
                "no groups at all",
                resource("get", "pods").groups(&[]),
                Level::None,
            ),
        ],
    );
}

#[test]
fn verbs_match_exactly() {
    let p = policy(&["{level: Metadata, verbs: [get, list]}"]);
    check(
        &p,
        &[
            ("get", resource("get", "pods"), Level::Metadata),
            ("list", resource("list", "pods"), Level::Metadata),
            ("watch", resource("watch", "pods"), Level::None),
            (
                "non-resource get",
                non_resource("get", "/metrics"),
                Level::Metadata,
            ),
            (
                "non-resource post",
                non_resource("post", "/metrics"),
                Level::None,
            ),
        ],
    );
}

#[test]
fn resources_match_plain_names() {
    let p = policy(&["{level: Metadata, resources: [{group: '', resources: [pods]}]}"]);
    check(
        &p,
        &[
            ("pods", resource("list", "pods"), Level::Metadata),
            (
                "a subresource of pods",
                resource("get", "pods/log"),
                Level::None,
            ),
            (
                "another core resource",
                resource("list", "configmaps"),
                Level::None,
            ),
            (
                "same name in another group",
                resource("list", "metrics.k8s.io|pods"),
                Level::None,
            ),
            (
                "a non-resource request",
                non_resource("get", "/api"),
                Level::None,
            ),
        ],
    );
}

#[test]
fn resources_match_subresources() {
    let p = policy(&["{level: Metadata, resources: [{group: '', resources: [pods/log]}]}"]);
    check(
        &p,
        &[
            ("pods/log", resource("get", "pods/log"), Level::Metadata),
            ("pods", resource("get", "pods"), Level::None),
            ("pods/status", resource("get", "pods/status"), Level::None),
        ],
    );
}

#[test]
fn resources_match_wildcards() {
    let star = policy(&["{level: Metadata, resources: [{group: '', resources: ['*']}]}"]);
    check(
        &star,
        &[
            (
                "* matches a resource",
                resource("list", "pods"),
                Level::Metadata,
            ),
            (
                "* matches a subresource",
                resource("get", "pods/log"),
                Level::Metadata,
            ),
            (
                "* stays in its group",
                resource("list", "apps|deployments"),
                Level::None,
            ),
        ],
    );
    let any_scale =
        policy(&["{level: Metadata, resources: [{group: apps, resources: ['*/scale']}]}"]);
    check(
        &any_scale,
        &[
            (
                "*/scale: deployments",
                resource("get", "apps|deployments/scale"),
                Level::Metadata,
            ),
            (
                "*/scale: replicasets",
                resource("get", "apps|replicasets/scale"),
                Level::Metadata,
            ),
            (
                "*/scale: not the resource",
                resource("get", "apps|deployments"),
                Level::None,
            ),
            (
                "*/scale: another subresource",
                resource("get", "apps|deployments/status"),
                Level::None,
            ),
        ],
    );
    let pods_any = policy(&["{level: Metadata, resources: [{group: '', resources: ['pods/*']}]}"]);
    check(
        &pods_any,
        &[
            ("pods/*: log", resource("get", "pods/log"), Level::Metadata),
            (
                "pods/*: exec",
                resource("create", "pods/exec"),
                Level::Metadata,
            ),
            // The apiserver's checker compares the resource alone for `pods/*`.
            (
                "pods/*: pods itself",
                resource("get", "pods"),
                Level::Metadata,
            ),
            (
                "pods/*: another resource",
                resource("get", "services/proxy"),
                Level::None,
            ),
        ],
    );
}

#[test]
fn resources_match_whole_groups() {
    let p = policy(&[
        "{level: Metadata, resources: [{group: apps}, {group: batch, resources: [jobs]}]}",
    ]);
    check(
        &p,
        &[
            (
                "a resource of the group",
                resource("list", "apps|deployments"),
                Level::Metadata,
            ),
            (
                "a subresource of the group",
                resource("get", "apps|deployments/scale"),
                Level::Metadata,
            ),
            (
                "the second entry",
                resource("list", "batch|jobs"),
                Level::Metadata,
            ),
            (
                "not in the second entry",
                resource("list", "batch|cronjobs"),
                Level::None,
            ),
            ("the core group", resource("list", "pods"), Level::None),
        ],
    );
}

#[test]
fn resource_names_match_named_objects_only() {
    let p = policy(&[
        "{level: Metadata, resources: [{group: '', resources: [configmaps], resourceNames: [kube-root-ca.crt]}]}",
    ]);
    check(
        &p,
        &[
            (
                "the named object",
                resource("get", "configmaps").name("kube-root-ca.crt"),
                Level::Metadata,
            ),
            (
                "another object",
                resource("get", "configmaps").name("other"),
                Level::None,
            ),
            (
                "the collection",
                resource("list", "configmaps"),
                Level::None,
            ),
        ],
    );
}

#[test]
fn namespaces_match_and_empty_means_cluster_scoped() {
    let p = policy(&[
        "{level: Metadata, namespaces: [kube-system]}",
        "{level: Request, namespaces: ['']}",
    ]);
    check(
        &p,
        &[
            (
                "listed namespace",
                resource("list", "pods").namespace(Some("kube-system")),
                Level::Metadata,
            ),
            (
                "other namespace",
                resource("list", "pods").namespace(Some("default")),
                Level::None,
            ),
            (
                "cluster-scoped",
                resource("list", "nodes").namespace(None),
                Level::Request,
            ),
            (
                "non-resource request",
                non_resource("get", "/version"),
                Level::None,
            ),
        ],
    );
}

#[test]
fn non_resource_urls_match_exactly_or_by_prefix() {
    let p = policy(&["{level: Metadata, nonResourceURLs: [/healthz*, /version]}"]);
    check(
        &p,
        &[
            (
                "prefix itself",
                non_resource("get", "/healthz"),
                Level::Metadata,
            ),
            (
                "under the prefix",
                non_resource("get", "/healthz/etcd"),
                Level::Metadata,
            ),
            ("exact", non_resource("get", "/version"), Level::Metadata),
            (
                "exact is not a prefix",
                non_resource("get", "/version/"),
                Level::None,
            ),
            ("another path", non_resource("get", "/metrics"), Level::None),
            ("a resource request", resource("get", "pods"), Level::None),
        ],
    );
    let all = policy(&["{level: Metadata, nonResourceURLs: ['*']}"]);
    check(
        &all,
        &[
            (
                "* matches any path",
                non_resource("get", "/apis"),
                Level::Metadata,
            ),
            (
                "* is still non-resource only",
                resource("get", "pods"),
                Level::None,
            ),
        ],
    );
}

#[test]
fn a_rule_of_level_only_matches_everything() {
    let p = policy(&["{level: RequestResponse}"]);
    check(
        &p,
        &[
            (
                "resource",
                resource("delete", "pods"),
                Level::RequestResponse,
            ),
            (
                "non-resource",
                non_resource("get", "/version"),
                Level::RequestResponse,
            ),
        ],
    );
}

#[test]
fn every_field_of_a_rule_must_match() {
    let p = policy(&["{level: Metadata, users: [alice], verbs: [get], resources: [{group: '', resources: [pods]}], namespaces: [default]}"]);
    check(
        &p,
        &[
            ("all match", resource("get", "pods"), Level::Metadata),
            (
                "user differs",
                resource("get", "pods").user("bob"),
                Level::None,
            ),
            ("verb differs", resource("list", "pods"), Level::None),
            ("resource differs", resource("get", "services"), Level::None),
            (
                "namespace differs",
                resource("get", "pods").namespace(Some("other")),
                Level::None,
            ),
        ],
    );
}

#[test]
fn the_first_matching_rule_wins() {
    let p = policy(&[
        "{level: None, users: [system:kube-proxy]}",
        "{level: Metadata, resources: [{group: '', resources: [secrets]}]}",
        "{level: RequestResponse, verbs: [create, update]}",
        "{level: Request}",
    ]);
    check(
        &p,
        &[
            (
                "first rule",
                resource("get", "secrets").user("system:kube-proxy"),
                Level::None,
            ),
            (
                "second before third",
                resource("update", "secrets"),
                Level::Metadata,
            ),
            (
                "third",
                resource("update", "configmaps"),
                Level::RequestResponse,
            ),
            ("catch-all", resource("get", "configmaps"), Level::Request),
        ],
    );
}

#[test]
fn no_matching_rule_is_level_none() {
    let p = policy(&["{level: Metadata, users: [alice]}"]);
    let outcome = p.evaluate(&resource("get", "pods").user("bob").attributes());
    assert_eq!(outcome.level, Level::None);
    assert!(!outcome.records(Stage::RequestReceived));
    assert!(outcome.stages(true).is_empty());
}

#[test]
fn omit_stages_are_the_union_of_rule_and_policy() {
    let p = Policy::parse(
        "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- {level: Metadata, users: [alice], omitStages: [ResponseStarted]}
- {level: Metadata, users: [bob]}
",
    )
    .unwrap();
    let alice = p.evaluate(&resource("watch", "pods").attributes());
    assert_eq!(
        alice.omit_stages,
        Stages::EMPTY
            .with(Stage::RequestReceived)
            .with(Stage::ResponseStarted)
    );
    let bob = p.evaluate(&resource("watch", "pods").user("bob").attributes());
    assert_eq!(bob.omit_stages, Stages::EMPTY.with(Stage::RequestReceived));
    let carol = p.evaluate(&resource("watch", "pods").user("carol").attributes());
    assert_eq!(carol.level, Level::None);
    assert_eq!(
        carol.omit_stages,
        Stages::EMPTY.with(Stage::RequestReceived)
    );
}

#[test]
fn a_rules_omit_managed_fields_overrides_the_policys() {
    let p = Policy::parse(
        "apiVersion: audit.k8s.io/v1
kind: Policy
omitManagedFields: true
rules:
- {level: RequestResponse, users: [alice], omitManagedFields: false}
- {level: RequestResponse, users: [bob]}
- {level: RequestResponse, users: [carol], omitManagedFields: true}
",
    )
    .unwrap();
    let rows = [
        ("alice", false),
        ("bob", true),
        ("carol", true),
        ("dave", true),
    ];
    for (user, want) in rows {
        let got = p
            .evaluate(&resource("get", "pods").user(user).attributes())
            .omit_managed_fields;
        assert_eq!(got, want, "{user}");
    }
    let not_set = policy(&[
        "{level: Metadata, omitManagedFields: true}",
        "{level: Request}",
    ]);
    let first = not_set.evaluate(&resource("get", "pods").attributes());
    assert!(first.omit_managed_fields);
    let second = not_set.evaluate(&non_resource("get", "/version").attributes());
    // The first rule matches non-resource requests too (it has no resource fields).
    assert!(second.omit_managed_fields);
    let default = policy(&["{level: Request, users: [bob]}", "{level: Request}"]);
    assert!(
        !default
            .evaluate(&resource("get", "pods").attributes())
            .omit_managed_fields
    );
}

#[test]
fn stages_a_request_records() {
    let outcome = |level, omit: &[Stage]| RuleOutcome {
        level,
        omit_stages: omit.iter().copied().collect(),
        omit_managed_fields: false,
    };
    let all = [Stage::RequestReceived, Stage::ResponseComplete];
    let watch = [
        Stage::RequestReceived,
        Stage::ResponseStarted,
        Stage::ResponseComplete,
    ];
    let rows: [(&str, RuleOutcome, bool, &[Stage]); 5] = [
        ("a read", outcome(Level::Metadata, &[]), false, &all),
        ("a watch", outcome(Level::Metadata, &[]), true, &watch),
        (
            "RequestReceived omitted",
            outcome(Level::Request, &[Stage::RequestReceived]),
            true,
            &[Stage::ResponseStarted, Stage::ResponseComplete],
        ),
        ("level None", outcome(Level::None, &[]), true, &[]),
        (
            "everything omitted",
            outcome(Level::Metadata, &Stage::ALL),
            true,
            &[],
        ),
    ];
    for (what, o, long_running, want) in rows {
        let got: Vec<Stage> = o.stages(long_running).iter().collect();
        assert_eq!(got, want, "{what}");
        for stage in Stage::ALL {
            let omitted = o.omit_stages.contains(stage);
            assert_eq!(
                o.records(stage),
                o.level != Level::None && !omitted,
                "{what}: {stage}"
            );
        }
    }
}

#[test]
fn stages_set() {
    let s = Stages::EMPTY
        .with(Stage::Panic)
        .with(Stage::RequestReceived);
    assert!(s.contains(Stage::Panic) && s.contains(Stage::RequestReceived));
    assert!(!s.contains(Stage::ResponseComplete));
    assert_eq!(format!("{s:?}"), "{RequestReceived, Panic}");
    assert!(Stages::EMPTY.is_empty());
    assert_eq!(
        s.union(Stages::EMPTY.with(Stage::ResponseStarted))
            .iter()
            .count(),
        3
    );
}

#[test]
fn levels_are_ordered() {
    assert!(Level::None < Level::Metadata);
    assert!(Level::Metadata < Level::Request);
    assert!(Level::Request < Level::RequestResponse);
}

/// Parse `yaml` and expect an error; `check` looks at it.
fn refused(yaml: &str) -> PolicyError {
    match Policy::parse(yaml) {
        Ok(p) => panic!("accepted:\n{yaml}\n{p:?}"),
        Err(e) => e,
    }
}

/// What a row expects of the error.
type Check<'a> = &'a dyn Fn(&PolicyError) -> bool;

const HEAD: &str = "apiVersion: audit.k8s.io/v1\nkind: Policy\n";

#[test]
fn files_the_apiserver_refuses_are_refused() {
    let rows: &[(&str, String, Check<'_>)] = &[
        (
            "unknown field in a rule (verb for verbs)",
            format!("{HEAD}rules:\n- {{level: None, verb: [get]}}\n"),
            &|e| matches!(e, PolicyError::Parse(_)) && e.to_string().contains("verb"),
        ),
        (
            "unknown top-level field",
            format!("{HEAD}rule:\n- {{level: None}}\n"),
            &|e| matches!(e, PolicyError::Parse(_)) && e.to_string().contains("rule"),
        ),
        (
            "unknown level",
            format!("{HEAD}rules:\n- {{level: Everything}}\n"),
            &|e| matches!(e, PolicyError::Parse(_)) && e.to_string().contains("Everything"),
        ),
        (
            "unknown stage in a rule",
            format!("{HEAD}rules:\n- {{level: None, omitStages: [Done]}}\n"),
            &|e| matches!(e, PolicyError::Parse(_)) && e.to_string().contains("Done"),
        ),
        (
            "unknown stage in the policy",
            format!("{HEAD}omitStages: [Received]\nrules:\n- {{level: None}}\n"),
            &|e| matches!(e, PolicyError::Parse(_)) && e.to_string().contains("Received"),
        ),
        (
            "v1beta1",
            "apiVersion: audit.k8s.io/v1beta1\nkind: Policy\nrules:\n- {level: None}\n".into(),
            &|e| matches!(e, PolicyError::ApiVersion { found } if found == "audit.k8s.io/v1beta1"),
        ),
        (
            "no apiVersion",
            "kind: Policy\nrules:\n- {level: None}\n".into(),
            &|e| matches!(e, PolicyError::ApiVersion { found } if found.is_empty()),
        ),
        (
            "another kind",
            "apiVersion: audit.k8s.io/v1\nkind: PolicyList\nrules:\n- {level: None}\n".into(),
            &|e| matches!(e, PolicyError::Kind { found } if found == "PolicyList"),
        ),
        (
            "no rules",
            format!("{HEAD}rules: []\n"),
            &|e| matches!(e, PolicyError::NoRules),
        ),
        (
            "no rules key",
            HEAD.into(),
            &|e| matches!(e, PolicyError::NoRules),
        ),
        (
            "a rule without a level",
            format!("{HEAD}rules:\n- {{level: None}}\n- {{users: [alice]}}\n"),
            &|e| matches!(e, PolicyError::Invalid { field, .. } if field == "rules[1].level"),
        ),
        (
            "a non-resource URL without its /",
            format!("{HEAD}rules:\n- {{level: None, nonResourceURLs: [/version, healthz]}}\n"),
            &|e| {
                matches!(e, PolicyError::Invalid { field, .. } if field == "rules[0].nonResourceURLs[1]")
            },
        ),
        (
            "a wildcard before the end of a non-resource URL",
            format!("{HEAD}rules:\n- {{level: None, nonResourceURLs: ['/apis/*/v1']}}\n"),
            &|e| e.to_string().contains("final character"),
        ),
        (
            "resources and non-resource URLs together",
            format!(
                "{HEAD}rules:\n- {{level: None, nonResourceURLs: [/version], resources: [{{group: ''}}]}}\n"
            ),
            &|e| e.to_string().contains("both regular resources and non-resource URLs"),
        ),
        (
            "namespaces and non-resource URLs together",
            format!("{HEAD}rules:\n- {{level: None, nonResourceURLs: [/version], namespaces: [a]}}\n"),
            &|e| matches!(e, PolicyError::Invalid { field, .. } if field == "rules[0].nonResourceURLs"),
        ),
        (
            "a group with its version",
            format!("{HEAD}rules:\n- {{level: None, resources: [{{group: apps/v1}}]}}\n"),
            &|e| {
                matches!(e, PolicyError::Invalid { field, .. } if field == "rules[0].resources[0].group")
            },
        ),
        (
            "resourceNames without resources",
            format!("{HEAD}rules:\n- {{level: None, resources: [{{group: '', resourceNames: [a]}}]}}\n"),
            &|e| e.to_string().contains("requires at least one resource"),
        ),
        (
            "not YAML",
            "apiVersion: [audit.k8s.io/v1\n".into(),
            &|e| matches!(e, PolicyError::Parse(_)),
        ),
    ];
    for (what, yaml, ok) in rows {
        let e = refused(yaml);
        assert!(ok(&e), "{what}: {e:?} ({e})");
    }
}

#[test]
fn json_and_metadata_are_accepted() {
    let p = Policy::parse(
        r#"{"apiVersion":"audit.k8s.io/v1","kind":"Policy","metadata":{"name":"x","labels":{"a":"b"}},
            "rules":[{"level":"Metadata","resources":[{"group":"","resources":["pods"]}]}]}"#,
    )
    .unwrap();
    assert_eq!(p.rule_count(), 1);
    assert_eq!(
        p.evaluate(&resource("get", "pods").attributes()).level,
        Level::Metadata
    );
}

#[test]
fn load_reads_a_file_and_names_it_in_errors() {
    let dir = crate::testing::TempDir::new("policy");
    let path = dir.path().join("policy.yaml");
    std::fs::write(&path, format!("{HEAD}rules:\n- {{level: Metadata}}\n")).unwrap();
    assert_eq!(Policy::load(&path).unwrap().rule_count(), 1);
    let missing = dir.path().join("missing.yaml");
    let e = Policy::load(&missing).unwrap_err();
    assert!(matches!(e, PolicyError::Read { .. }), "{e:?}");
    assert!(e.to_string().contains("missing.yaml"), "{e}");
}

/// A policy of the shape kube-up and GKE clusters run (`testdata/cluster-policy.yaml`),
/// read whole and asked about typical requests.
#[test]
fn a_cluster_policy() {
    let p = Policy::parse(include_str!("testdata/cluster-policy.yaml")).unwrap();
    assert_eq!(p.rule_count(), 12);
    let node = |verb| {
        resource(verb, "nodes/status")
            .user("system:node:n1")
            .groups(&["system:nodes", "system:authenticated"])
            .namespace(None)
            .name("n1")
    };
    let rr = Stages::EMPTY.with(Stage::RequestReceived);
    let rows: Vec<(&str, Req, Level, Stages, bool)> = vec![
        (
            "kube-proxy watching endpointslices",
            resource("watch", "discovery.k8s.io|endpointslices").user("system:kube-proxy"),
            Level::None,
            Stages::EMPTY,
            true,
        ),
        (
            "a node reading itself",
            node("get"),
            Level::None,
            Stages::EMPTY,
            true,
        ),
        (
            "a node updating its status",
            node("patch"),
            Level::Request,
            rr,
            true,
        ),
        (
            "leader election",
            resource("update", "coordination.k8s.io|leases")
                .user("system:kube-scheduler")
                .namespace(Some("kube-system")),
            Level::None,
            Stages::EMPTY,
            true,
        ),
        (
            "a health check",
            non_resource("get", "/readyz/etcd"),
            Level::None,
            Stages::EMPTY,
            true,
        ),
        (
            "events",
            resource("create", "events"),
            Level::None,
            Stages::EMPTY,
            true,
        ),
        (
            "reading a secret",
            resource("get", "secrets").name("db"),
            Level::Metadata,
            rr,
            true,
        ),
        (
            "a token request",
            resource("create", "serviceaccounts/token"),
            Level::Metadata,
            rr,
            true,
        ),
        (
            "scaling a deployment",
            resource("patch", "apps|deployments/scale"),
            Level::RequestResponse,
            Stages::EMPTY,
            false,
        ),
        (
            "listing pods",
            resource("list", "pods"),
            Level::Request,
            rr,
            true,
        ),
        (
            "watching jobs",
            resource("watch", "batch|jobs"),
            Level::Request,
            rr,
            true,
        ),
        (
            "deleting a pod",
            resource("delete", "pods").name("p"),
            Level::RequestResponse,
            rr,
            true,
        ),
        (
            "a custom resource",
            resource("list", "example.com|widgets"),
            Level::Metadata,
            rr,
            true,
        ),
        (
            "discovery",
            non_resource("get", "/apis"),
            Level::Metadata,
            rr,
            true,
        ),
    ];
    for (what, req, level, omit, omit_managed_fields) in rows {
        let got = p.evaluate(&req.attributes());
        let want = RuleOutcome {
            level,
            omit_stages: if level == Level::None {
                got.omit_stages
            } else {
                omit
            },
            omit_managed_fields,
        };
        assert_eq!(got, want, "{what}");
    }
}

/// What one evaluation costs: `cargo test -p kcache-audit --release -- --ignored
/// --nocapture evaluation_speed`.
#[test]
#[ignore]
fn evaluation_speed() {
    let p = Policy::parse(include_str!("testdata/cluster-policy.yaml")).unwrap();
    let reqs = [
        resource("list", "pods"),
        resource("get", "secrets").name("db"),
        resource("list", "example.com|widgets"),
        non_resource("get", "/apis"),
    ];
    let rounds = 1_000_000;
    let start = std::time::Instant::now();
    let mut none = 0usize;
    for i in 0..rounds {
        let req = &reqs[i % reqs.len()];
        if std::hint::black_box(&p).evaluate(&req.attributes()).level == Level::None {
            none += 1;
        }
    }
    let per = start.elapsed().as_nanos() as f64 / rounds as f64;
    println!("policy evaluation: {per:.1} ns per request (12 rules, {none} unaudited)");
}
