//! The auditor whole: from the configuration and the policy to the lines of the log file.

use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::*;
use crate::testing::{numbered_events, record_all, sample_request, sample_user, TempDir};

/// Settings writing to `dir/audit.log`, rotated at `max_size_bytes`.
fn log_settings(dir: &TempDir, max_size_bytes: u64) -> Settings {
    Settings {
        buffer_size: 100,
        forwarded: false,
        log: Some(LogSettings {
            path: Some(dir.path().join("audit.log")),
            max_size_bytes,
            max_backups: 0,
            max_age: None,
        }),
        webhook: None,
    }
}

fn log_lines(dir: &TempDir) -> Vec<Value> {
    std::fs::read_to_string(dir.path().join("audit.log"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[tokio::test]
async fn events_reach_the_log_file() {
    let dir = TempDir::new("auditor-log");
    let auditor = Auditor::start_with(log_settings(&dir, 1 << 20), record_all())
        .await
        .unwrap();
    assert_eq!(auditor.backends().collect::<Vec<_>>(), [Backend::Log]);
    for e in numbered_events(Level::Metadata, 5) {
        auditor.record(e);
    }
    auditor.flush().await;
    let ids: Vec<String> = log_lines(&dir)
        .iter()
        .map(|v| v["auditID"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["id-0", "id-1", "id-2", "id-3", "id-4"]);
    let counts = auditor.stats().backend(Backend::Log).counts();
    assert_eq!(
        (
            counts.recorded,
            counts.written,
            counts.dropped,
            counts.errors
        ),
        (5, 5, 0, 0)
    );
    // Flushed lines are in the file, and later ones follow them.
    auditor.record(numbered_events(Level::Metadata, 1).remove(0));
    auditor.shutdown().await;
    assert_eq!(log_lines(&dir).len(), 6);
}

#[tokio::test]
async fn rotation_through_the_auditor() {
    let dir = TempDir::new("auditor-rotate");
    let mut line = Vec::new();
    numbered_events(Level::Metadata, 1)[0].write_json(&mut line);
    let auditor = Auditor::start_with(
        log_settings(&dir, 3 * (line.len() as u64 + 1)),
        record_all(),
    )
    .await
    .unwrap();
    for e in numbered_events(Level::Metadata, 10) {
        auditor.record(e);
    }
    auditor.flush().await;
    // Three lines a file: the current file has the tenth.
    assert_eq!(log_lines(&dir).len(), 1);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 4);
    assert_eq!(auditor.stats().backend(Backend::Log).counts().written, 10);
}

#[tokio::test]
async fn only_the_stages_a_request_records_are_recorded() {
    let dir = TempDir::new("auditor-stages");
    let policy = Policy::parse(
        "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- {level: None, users: [system:kube-proxy]}
- {level: Metadata, verbs: [watch], omitStages: [ResponseComplete]}
- {level: Request}
",
    )
    .unwrap();
    let auditor = Auditor::start_with(log_settings(&dir, 1 << 20), policy)
        .await
        .unwrap();
    let user = Arc::new(sample_user());
    let pods = ResourceAttributes {
        group: "",
        version: "v1",
        resource: "pods",
        subresource: None,
        namespace: Some("default"),
        name: None,
    };
    // Each request goes through every stage of a watch; the auditor keeps what the policy
    // says.
    for (user_name, verb) in [
        ("system:kube-proxy", "watch"),
        ("alice", "watch"),
        ("alice", "list"),
    ] {
        let groups = Vec::new();
        let attributes = Attributes {
            user: user_name,
            groups: &groups,
            verb,
            path: "/api/v1/namespaces/default/pods",
            resource: Some(pods),
        };
        let outcome = auditor.policy().evaluate(&attributes);
        let mut request = Request::new(
            &outcome,
            AuditId::given(format!("{user_name} {verb}")),
            verb,
            "/api/v1/namespaces/default/pods",
            Arc::clone(&user),
            SystemTime::now(),
        );
        request.object_ref = Some(ObjectRef::from_attributes(&pods));
        let request = Arc::new(request);
        auditor.record(request.received_event());
        for stage in [Stage::ResponseStarted, Stage::ResponseComplete] {
            auditor.record(
                request
                    .event(stage, SystemTime::now())
                    .with_status(ResponseStatus::from_code(200)),
            );
        }
    }
    auditor.flush().await;
    let got: Vec<(String, String, String)> = log_lines(&dir)
        .iter()
        .map(|v| {
            (
                v["auditID"].as_str().unwrap().to_string(),
                v["level"].as_str().unwrap().to_string(),
                v["stage"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = [
        ("alice watch", "Metadata", "ResponseStarted"),
        ("alice list", "Request", "ResponseStarted"),
        ("alice list", "Request", "ResponseComplete"),
    ]
    .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()));
    assert_eq!(got, want);
    // Ignored events are not counted anywhere.
    assert_eq!(auditor.stats().backend(Backend::Log).counts().recorded, 3);
}

#[tokio::test]
async fn start_from_the_configuration() {
    let dir = TempDir::new("auditor-config");
    let policy_file = dir.path().join("policy.yaml");
    std::fs::write(
        &policy_file,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n",
    )
    .unwrap();
    let config: AuditConfig = yaml_serde::from_str(&format!(
        "policyFile: {}\nlog: {{path: {}}}\nforwarded: true\n",
        policy_file.display(),
        dir.path().join("logs/audit.log").display()
    ))
    .unwrap();
    let auditor = Auditor::start(&config, Policy::load(&config.policy_file).unwrap())
        .await
        .unwrap();
    assert!(auditor.audits_forwarded());
    assert_eq!(auditor.policy().rule_count(), 1);
    auditor.record(Arc::new(sample_request(Level::Metadata)).received_event());
    auditor.shutdown().await;
    let text = std::fs::read_to_string(dir.path().join("logs/audit.log")).unwrap();
    assert_eq!(text.lines().count(), 1);
    assert!(text.ends_with("}\n"));
}

#[tokio::test]
async fn start_refuses_what_it_cannot_do() {
    let no_backend = AuditConfig {
        policy_file: "p.yaml".into(),
        ..AuditConfig::default()
    };
    let e = Auditor::start(&no_backend, record_all()).await.unwrap_err();
    assert!(
        matches!(e, AuditError::Config(AuditConfigError::NoBackend)),
        "{e:?}"
    );

    let dir = TempDir::new("auditor-unwritable");
    let blocker = dir.path().join("file");
    std::fs::write(&blocker, "").unwrap();
    let mut settings = log_settings(&dir, 1 << 20);
    if let Some(log) = &mut settings.log {
        log.path = Some(blocker.join("audit.log"));
    }
    let e = Auditor::start_with(settings, record_all())
        .await
        .unwrap_err();
    assert!(matches!(e, AuditError::OpenLog { .. }), "{e:?}");
}

#[tokio::test]
async fn events_after_shutdown_are_dropped_and_counted() {
    let dir = TempDir::new("auditor-shutdown");
    let auditor = Auditor::start_with(log_settings(&dir, 1 << 20), record_all())
        .await
        .unwrap();
    let clone = auditor.clone();
    auditor.shutdown().await;
    clone.record(numbered_events(Level::Metadata, 1).remove(0));
    let counts = clone.stats().backend(Backend::Log).counts();
    assert_eq!((counts.recorded, counts.dropped), (0, 1));
    // Flushing a stopped auditor returns at once.
    tokio::time::timeout(Duration::from_secs(60), clone.flush())
        .await
        .unwrap();
}
