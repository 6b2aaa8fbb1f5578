//! Showing an error with its causes.
//!
//! kcache's error enums ([`UpstreamError`](crate::upstream::UpstreamError),
//! [`ConfigError`](crate::config::ConfigError), [`AuthError`](crate::auth::AuthError),
//! [`TlsError`](crate::tls::TlsError), …) keep the error they wrap as their
//! [`source`](std::error::Error::source) and leave it out of their own message, as the Rust
//! API guidelines ask; [`Report`] puts the chain back together for a log line. Where a client
//! sees an error, [`crate::status`] decides the words.

use std::error::Error;
use std::fmt;

/// An error and its causes on one line, `error: cause: root cause`, for logs.
///
/// Some libraries (kube-client among them) repeat their source in their own message as well;
/// a cause whose text the level above already shows is left out, so nothing is said twice.
pub struct Report<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        for cause in causes(self.0) {
            write!(f, ": {cause}")?;
        }
        Ok(())
    }
}

/// The messages of an error's causes, outermost first, without the error's own and without
/// those the level above already shows (see [`Report`]).
pub fn causes(e: &(dyn Error + 'static)) -> Vec<String> {
    let mut out = Vec::new();
    let mut above = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        let text = cause.to_string();
        if !text.is_empty() && !above.contains(&text) {
            out.push(text.clone());
        }
        above = text;
        next = cause.source();
    }
    out
}

/// An error and its immediate cause, `error: cause`: what kcache put in messages when its
/// errors still carried their cause as text (client-visible messages keep that form).
pub(crate) fn with_cause(e: &(dyn Error + 'static)) -> String {
    match e.source() {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] Middle);

    /// Repeats its source in its message, as kube-client's errors do.
    #[derive(Debug, thiserror::Error)]
    #[error("middle: {0}")]
    struct Middle(#[source] std::io::Error);

    #[test]
    fn chain_without_repetition() {
        let e = Outer(Middle(std::io::Error::other("root")));
        assert_eq!(Report(&e).to_string(), "outer: middle: root");
        assert_eq!(causes(&e), vec!["middle: root"]);
        assert_eq!(with_cause(&e), "outer: middle: root");
        assert_eq!(with_cause(&e.0 .0), "root");
    }
}
