//! The `audit:` section: its keys, defaults and checks.

use super::*;

fn parse(yaml: &str) -> Result<AuditConfig, yaml_serde::Error> {
    yaml_serde::from_str(yaml)
}

#[test]
fn every_key() {
    let config = parse(
        "
policyFile: /etc/kcache/audit-policy.yaml
log: { path: /var/log/kcache/audit.log, maxSizeMB: 100, maxBackups: 10, maxAgeDays: 30 }
webhook:
  kubeconfig: /etc/kcache/audit-webhook.kubeconfig
  batchMaxSize: 200
  batchMaxWaitSeconds: 5
  initialBackoffSeconds: 2
bufferSize: 500
forwarded: true
",
    )
    .unwrap();
    assert_eq!(
        config,
        AuditConfig {
            policy_file: "/etc/kcache/audit-policy.yaml".into(),
            log: Some(LogConfig {
                path: "/var/log/kcache/audit.log".into(),
                max_size_mb: 100,
                max_backups: 10,
                max_age_days: 30,
            }),
            webhook: Some(WebhookConfig {
                kubeconfig: "/etc/kcache/audit-webhook.kubeconfig".into(),
                batch_max_size: 200,
                batch_max_wait_seconds: 5,
                initial_backoff_seconds: 2,
            }),
            buffer_size: 500,
            forwarded: true,
        }
    );
    assert_eq!(config.validate(), Ok(()));
    // Written back, it reads the same.
    let text = yaml_serde::to_string(&config).unwrap();
    assert!(text.contains("maxSizeMB: 100"), "{text}");
    assert_eq!(parse(&text).unwrap(), config);
}

#[test]
fn defaults_are_the_apiservers() {
    let config = parse("policyFile: p.yaml\nlog: {path: '-'}\nwebhook: {kubeconfig: k}\n").unwrap();
    assert_eq!(config.buffer_size, 10_000);
    assert!(!config.forwarded);
    let log = config.log.as_ref().unwrap();
    assert!(log.is_stdout());
    assert_eq!(
        (log.max_size_mb, log.max_backups, log.max_age_days),
        (100, 0, 0)
    );
    let webhook = config.webhook.as_ref().unwrap();
    assert_eq!(webhook.batch_max_size, 400);
    assert_eq!(webhook.batch_max_wait(), Duration::from_secs(30));
    assert_eq!(webhook.initial_backoff(), Duration::from_secs(10));
    assert_eq!(config.validate(), Ok(()));
}

#[test]
fn max_size() {
    let rows = [
        (0, 100 << 20),
        (1, 1 << 20),
        (100, 100 << 20),
        (u64::MAX, u64::MAX),
    ];
    for (mb, bytes) in rows {
        let log = LogConfig {
            max_size_mb: mb,
            ..LogConfig::default()
        };
        assert_eq!(log.max_size_bytes(), bytes, "{mb} MB");
    }
}

#[test]
fn unknown_keys_are_refused() {
    for yaml in [
        "policyFile: p\nlog: {path: a}\nbuffer: 3\n",
        "policyFile: p\nlog: {path: a, maxSizeMb: 3}\n",
        "policyFile: p\nwebhook: {kubeconfig: k, batchMaxWait: 3}\n",
    ] {
        assert!(parse(yaml).is_err(), "{yaml}");
    }
}

#[test]
fn validation() {
    let invalid = |field| Err(AuditConfigError::Invalid { field, message: "" });
    let rows: [(&str, &str, Result<(), AuditConfigError>); 7] = [
        (
            "no backend",
            "policyFile: p\n",
            Err(AuditConfigError::NoBackend),
        ),
        ("no policy file", "log: {path: a}\n", invalid("policyFile")),
        (
            "no log path",
            "policyFile: p\nlog: {maxBackups: 1}\n",
            invalid("log.path"),
        ),
        (
            "no kubeconfig",
            "policyFile: p\nwebhook: {}\n",
            invalid("webhook.kubeconfig"),
        ),
        (
            "empty batches",
            "policyFile: p\nwebhook: {kubeconfig: k, batchMaxSize: 0}\n",
            invalid("webhook.batchMaxSize"),
        ),
        (
            "no buffer",
            "policyFile: p\nlog: {path: a}\nbufferSize: 0\n",
            invalid("bufferSize"),
        ),
        ("log only", "policyFile: p\nlog: {path: a}\n", Ok(())),
    ];
    for (what, yaml, want) in rows {
        let got = parse(yaml).unwrap().validate();
        // Compare the variant and field; the message is for people.
        let strip = |r: Result<(), AuditConfigError>| match r {
            Err(AuditConfigError::Invalid { field, .. }) => {
                Err(AuditConfigError::Invalid { field, message: "" })
            }
            other => other,
        };
        assert_eq!(strip(got), want, "{what}");
    }
}
