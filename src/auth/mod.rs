//! Who is calling: the connection a request came in on, and (later in this module) the
//! caller's authenticated identity and what it may read.

use std::net::SocketAddr;

/// The user named by a verified x509 client certificate, as kube-apiserver reads one: the
/// subject's CommonName is the user, each Organization a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertIdentity {
    pub user: String,
    pub groups: Vec<String>,
}

/// Facts about the connection a request arrived on, put in every request's extensions by the
/// server's accept loop.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The caller's address (loopback decides `trust-local`).
    pub peer: SocketAddr,
    /// Present only when the connection is TLS and the caller presented a client certificate
    /// that the configured client CA verified.
    pub client_cert: Option<CertIdentity>,
}
