//! The `audit:` section of kcache's configuration. Its keys are named after the apiserver's
//! audit flags, one for one, and mean what those flags mean:
//!
//! | key | kube-apiserver flag |
//! |---|---|
//! | `policyFile` | `--audit-policy-file` |
//! | `log.path` | `--audit-log-path` (`-`: standard output) |
//! | `log.maxSizeMB` | `--audit-log-maxsize` |
//! | `log.maxBackups` | `--audit-log-maxbackup` |
//! | `log.maxAgeDays` | `--audit-log-maxage` |
//! | `webhook.kubeconfig` | `--audit-webhook-config-file` |
//! | `webhook.batchMaxSize` | `--audit-webhook-batch-max-size` |
//! | `webhook.batchMaxWaitSeconds` | `--audit-webhook-batch-max-wait` |
//! | `webhook.initialBackoffSeconds` | `--audit-webhook-initial-backoff` |
//! | `bufferSize` | `--audit-webhook-batch-buffer-size` (here for each backend) |
//!
//! ```yaml
//! audit:
//!   policyFile: /etc/kcache/audit-policy.yaml
//!   log: { path: /var/log/kcache/audit.log, maxSizeMB: 100, maxBackups: 10, maxAgeDays: 30 }
//!   webhook: { kubeconfig: /etc/kcache/audit-webhook.kubeconfig }
//! ```

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

#[cfg(test)]
mod tests;

/// `audit:`: where kcache's audit trail goes and which requests it records. At least one of
/// `log` and `webhook` is needed ([`AuditConfig::validate`]).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct AuditConfig {
    /// The apiserver's audit Policy file (audit.k8s.io/v1), which decides each request's
    /// level ([`crate::Policy::load`]).
    pub policy_file: PathBuf,
    /// Write events to a file, one JSON object a line, as the apiserver's log backend does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<LogConfig>,
    /// Send events to a webhook in batches, as the apiserver's webhook backend does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookConfig>,
    /// How many events may wait for each backend. When a backend's queue is full, a new event
    /// is dropped for that backend and counted: a request is never held up by its audit
    /// trail.
    pub buffer_size: usize,
    /// Also audit the requests kcache forwards to the upstream under the caller's own
    /// identity. Off by default: the apiserver audits those itself.
    pub forwarded: bool,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            policy_file: PathBuf::new(),
            log: None,
            webhook: None,
            buffer_size: 10_000,
            forwarded: false,
        }
    }
}

/// `audit.log`: the file backend, rotated as the apiserver rotates its audit log.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LogConfig {
    /// The file; `-` is standard output (never rotated).
    pub path: PathBuf,
    /// Megabytes (MiB) the file may reach before it is rotated. 0 means 100, as in the
    /// apiserver (whose rotation, lumberjack, takes 0 for its default of 100): there is no
    /// way to turn rotation by size off.
    #[serde(rename = "maxSizeMB")]
    pub max_size_mb: u64,
    /// How many rotated files to keep, newest first; 0 keeps all.
    pub max_backups: u64,
    /// Days a rotated file is kept, by the time in its name; 0 keeps them whatever their age.
    pub max_age_days: u64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            path: PathBuf::new(),
            max_size_mb: DEFAULT_MAX_SIZE_MB,
            max_backups: 0,
            max_age_days: 0,
        }
    }
}

/// lumberjack's default maximum size, which the apiserver's `--audit-log-maxsize=0` gets.
const DEFAULT_MAX_SIZE_MB: u64 = 100;

impl LogConfig {
    /// Whether the events go to standard output.
    pub fn is_stdout(&self) -> bool {
        self.path.as_os_str() == "-"
    }

    /// The size in bytes past which the file is rotated.
    pub fn max_size_bytes(&self) -> u64 {
        let mb = if self.max_size_mb == 0 {
            DEFAULT_MAX_SIZE_MB
        } else {
            self.max_size_mb
        };
        mb.saturating_mul(1024 * 1024)
    }
}

/// `audit.webhook`: the webhook backend.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookConfig {
    /// A kubeconfig whose current context's cluster `server` is the webhook's full URL, with
    /// its CA, and whose user is how kcache authenticates to it (client certificate, token),
    /// as the apiserver's `--audit-webhook-config-file`.
    pub kubeconfig: PathBuf,
    /// Most events in one request to the webhook.
    pub batch_max_size: usize,
    /// Seconds a batch waits for more events after its first before it is sent anyway.
    pub batch_max_wait_seconds: u64,
    /// Seconds before the first retry of a failed send; each next wait is 1.5 times longer,
    /// and a batch is given up after 5 attempts.
    pub initial_backoff_seconds: u64,
}

impl Default for WebhookConfig {
    fn default() -> Self {
        // The apiserver's defaults.
        WebhookConfig {
            kubeconfig: PathBuf::new(),
            batch_max_size: 400,
            batch_max_wait_seconds: 30,
            initial_backoff_seconds: 10,
        }
    }
}

impl WebhookConfig {
    /// [`WebhookConfig::batch_max_wait_seconds`] as a duration.
    pub fn batch_max_wait(&self) -> Duration {
        Duration::from_secs(self.batch_max_wait_seconds)
    }

    /// [`WebhookConfig::initial_backoff_seconds`] as a duration.
    pub fn initial_backoff(&self) -> Duration {
        Duration::from_secs(self.initial_backoff_seconds)
    }
}

/// Why an `audit:` section was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuditConfigError {
    /// Neither `log` nor `webhook` is set: the events would go nowhere.
    #[error("audit: no backend: set audit.log, audit.webhook or both")]
    NoBackend,
    /// A value the section may not have.
    #[error("audit.{field}: {message}")]
    Invalid {
        /// The key, below `audit.`.
        field: &'static str,
        /// What is wrong with it.
        message: &'static str,
    },
}

impl AuditConfig {
    /// Check what serde cannot: a backend is set, the paths are given, the sizes are not 0.
    pub fn validate(&self) -> Result<(), AuditConfigError> {
        let invalid = |field, message| Err(AuditConfigError::Invalid { field, message });
        if self.log.is_none() && self.webhook.is_none() {
            return Err(AuditConfigError::NoBackend);
        }
        if self.policy_file.as_os_str().is_empty() {
            return invalid(
                "policyFile",
                "required: the audit policy decides what is recorded",
            );
        }
        if self.buffer_size == 0 {
            return invalid("bufferSize", "must be at least 1");
        }
        if let Some(log) = &self.log {
            if log.path.as_os_str().is_empty() {
                return invalid("log.path", "required (\"-\" for standard output)");
            }
        }
        if let Some(webhook) = &self.webhook {
            if webhook.kubeconfig.as_os_str().is_empty() {
                return invalid("webhook.kubeconfig", "required");
            }
            if webhook.batch_max_size == 0 {
                return invalid("webhook.batchMaxSize", "must be at least 1");
            }
        }
        Ok(())
    }
}
