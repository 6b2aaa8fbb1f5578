//! What the tests share: temporary directories and sample requests and events.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::{
    AuditId, Event, Level, ObjectRef, Request, ResponseStatus, RuleOutcome, Stage, Stages, UserInfo,
};

/// A directory of its own under the system's temporary directory, removed when dropped.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(what: &str) -> TempDir {
        let path =
            std::env::temp_dir().join(format!("kcache-audit-{what}-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// 2024-05-01T12:30:45.123456789Z.
pub(crate) fn sample_time() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::new(1_714_566_645, 123_456_789)
}

/// A controller's service account.
pub(crate) fn sample_user() -> UserInfo {
    UserInfo {
        username: "system:serviceaccount:kube-system:replicaset-controller".into(),
        uid: "2b5a3b0e-8c9d-4f7e-9a41-5e0c6c1d2f3a".into(),
        groups: vec![
            "system:serviceaccounts".into(),
            "system:serviceaccounts:kube-system".into(),
            "system:authenticated".into(),
        ],
        extra: BTreeMap::new(),
    }
}

/// A LIST of pods in kube-system by [`sample_user`] at `level`, arrived at [`sample_time`].
pub(crate) fn sample_request(level: Level) -> Request {
    let outcome = RuleOutcome {
        level,
        omit_stages: Stages::EMPTY,
        omit_managed_fields: false,
    };
    let mut request = Request::new(
        &outcome,
        AuditId::given("0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"),
        "list",
        "/api/v1/namespaces/kube-system/pods?labelSelector=app%3Ddns&limit=500",
        Arc::new(sample_user()),
        sample_time(),
    );
    request.source_ips = vec!["10.0.0.12".parse::<IpAddr>().unwrap()];
    request.user_agent =
        "kube-controller-manager/v1.30.2 (linux/amd64) kubernetes/3968350/system:serviceaccount:kube-system:replicaset-controller".into();
    request.object_ref = Some(ObjectRef {
        resource: "pods".into(),
        namespace: "kube-system".into(),
        api_version: "v1".into(),
        ..ObjectRef::default()
    });
    request
}

/// The `ResponseComplete` event of [`sample_request`]: 200, 1.5 ms after arrival, allowed by
/// RBAC.
pub(crate) fn sample_event(level: Level) -> Event {
    let request = Arc::new(sample_request(level));
    request
        .event(Stage::ResponseComplete, sample_time() + Duration::from_micros(1_500))
        .with_status(ResponseStatus::from_code(200))
        .annotate("authorization.k8s.io/decision", "allow")
        .annotate(
            "authorization.k8s.io/reason",
            "RBAC: allowed by ClusterRoleBinding \"system:controller:replicaset-controller\" of ClusterRole \"system:controller:replicaset-controller\" to ServiceAccount \"replicaset-controller/kube-system\"",
        )
}

/// `n` events of distinct requests (audit IDs `id-0`, `id-1`, …), at `level`.
pub(crate) fn numbered_events(level: Level, n: usize) -> Vec<Event> {
    (0..n)
        .map(|i| {
            let mut request = sample_request(level);
            request.audit_id = AuditId::given(format!("id-{i}"));
            Arc::new(request)
                .event(Stage::ResponseComplete, sample_time())
                .with_status(ResponseStatus::from_code(200))
        })
        .collect()
}

/// A policy that records every request at Metadata (the backends' tests build their events
/// at the level they need; the policy only rides along).
pub(crate) fn record_all() -> crate::Policy {
    crate::Policy::parse("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n")
        .unwrap()
}
