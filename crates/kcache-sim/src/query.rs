//! Query parameters of list/watch requests: decoding (400s), the WatchList defaulting,
//! ListOptions validation (422s) and field-label checks (400s), in the apiserver's order.

use super::selector::{FieldSelector, LabelSelector};
use super::status::{Cause, SimError};
use super::types::ResourceType;
use percent_encoding::percent_decode_str;

/// Decoded query string; `get` returns the first value like Go's `url.Values.Get`.
#[derive(Clone, Debug, Default)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    /// Parses `a=b&c=d` (`+` is a space, percent-escapes decoded).
    pub fn parse(raw: Option<&str>) -> Query {
        let decode = |s: &str| {
            let s = s.replace('+', " ");
            percent_decode_str(&s).decode_utf8_lossy().into_owned()
        };
        let pairs = raw
            .unwrap_or("")
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|p| match p.split_once('=') {
                Some((k, v)) => (decode(k), decode(v)),
                None => (decode(p), String::new()),
            })
            .collect();
        Query { pairs }
    }

    /// The first value of `key`, if present (possibly empty).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Go's query bool: present and not `0`/`false` (any case). `?watch=` is true.
    pub fn flag(&self, key: &str) -> bool {
        self.get(key).is_some_and(go_bool)
    }
}

fn go_bool(v: &str) -> bool {
    !matches!(v.to_ascii_lowercase().as_str(), "0" | "false")
}

fn parse_int(v: &str) -> Result<i64, SimError> {
    v.parse::<i64>().map_err(|e| {
        let why = match e.kind() {
            std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                "value out of range"
            }
            _ => "invalid syntax",
        };
        SimError::BadRequest(format!("strconv.ParseInt: parsing \"{v}\": {why}"))
    })
}

/// `resourceVersionMatch`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rvm {
    /// `Exact`
    Exact,
    /// `NotOlderThan`
    NotOlderThan,
}

/// Validated list/watch options.
#[derive(Clone, Debug, Default)]
pub struct ListOptions {
    /// A watch was requested (`watch` param or `/watch/` path).
    pub watch: bool,
    /// `labelSelector`.
    pub labels: LabelSelector,
    /// `fieldSelector`, checked against the type.
    pub fields: FieldSelector,
    /// `resourceVersion`; `None` when absent or empty.
    pub rv: Option<String>,
    /// `resourceVersionMatch`.
    pub rvm: Option<Rvm>,
    /// `timeoutSeconds`.
    pub timeout_seconds: Option<i64>,
    /// `limit` (0 when absent).
    pub limit: i64,
    /// `continue`; `None` when absent or empty.
    pub continue_token: Option<String>,
    /// `sendInitialEvents` (after the WatchList defaulting).
    pub send_initial_events: Option<bool>,
    /// `allowWatchBookmarks`.
    pub allow_bookmarks: bool,
}

impl ListOptions {
    /// True when no label or field selector is set.
    pub fn unfiltered(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }
}

/// Decodes and validates list/watch options for `rt`, as the apiserver's list handler does.
pub fn list_options(
    q: &Query,
    rt: &ResourceType,
    watch_path: bool,
    watchlist: bool,
) -> Result<ListOptions, SimError> {
    let mut o = ListOptions {
        watch: watch_path || q.flag("watch"),
        allow_bookmarks: q.flag("allowWatchBookmarks"),
        rv: q
            .get("resourceVersion")
            .filter(|s| !s.is_empty())
            .map(str::to_string),
        continue_token: q
            .get("continue")
            .filter(|s| !s.is_empty())
            .map(str::to_string),
        send_initial_events: q.get("sendInitialEvents").map(go_bool),
        ..Default::default()
    };
    let rvm_raw = q.get("resourceVersionMatch").unwrap_or("");
    if let Some(t) = q.get("timeoutSeconds").filter(|s| !s.is_empty()) {
        o.timeout_seconds = Some(parse_int(t)?);
    }
    if let Some(l) = q.get("limit").filter(|s| !s.is_empty()) {
        o.limit = parse_int(l)?;
    }
    o.labels =
        LabelSelector::parse(q.get("labelSelector").unwrap_or("")).map_err(SimError::BadRequest)?;
    let field_terms = FieldSelector::parse_terms(q.get("fieldSelector").unwrap_or(""))
        .map_err(SimError::BadRequest)?;

    // WatchList defaulting: a plain watch from RV ""/"0" becomes a streaming list.
    let mut rvm_eff = rvm_raw.to_string();
    if watchlist && o.watch && o.send_initial_events.is_none() && rvm_eff.is_empty() {
        let legacy = matches!(o.rv.as_deref(), None | Some("0"));
        if legacy {
            o.send_initial_events = Some(true);
            rvm_eff = "NotOlderThan".into();
        }
    }
    let causes = if o.watch {
        validate_watch(&o, &rvm_eff, watchlist)
    } else {
        validate_list(&o, &rvm_eff)
    };
    if !causes.is_empty() {
        return Err(SimError::InvalidListOptions(causes));
    }
    o.rvm = match rvm_eff.as_str() {
        "Exact" => Some(Rvm::Exact),
        "NotOlderThan" => Some(Rvm::NotOlderThan),
        _ => None,
    };
    o.fields = FieldSelector::resolve(field_terms, rt).map_err(SimError::BadRequest)?;
    Ok(o)
}

fn validate_list(o: &ListOptions, rvm: &str) -> Vec<Cause> {
    let mut c = Vec::new();
    if !rvm.is_empty() {
        if o.rv.is_none() {
            c.push(Cause::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden unless resourceVersion is provided",
            ));
        }
        if o.continue_token.is_some() {
            c.push(Cause::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
        if rvm != "Exact" && rvm != "NotOlderThan" {
            c.push(Cause::not_supported(
                "resourceVersionMatch",
                rvm,
                &["Exact", "NotOlderThan", ""],
            ));
        }
        if rvm == "Exact" && o.rv.as_deref() == Some("0") {
            c.push(Cause::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ));
        }
    }
    if o.send_initial_events.is_some() {
        c.push(Cause::forbidden(
            "sendInitialEvents",
            "sendInitialEvents is forbidden for list",
        ));
    }
    c
}

fn validate_watch(o: &ListOptions, rvm: &str, watchlist: bool) -> Vec<Cause> {
    let mut c = Vec::new();
    if o.send_initial_events.is_some() {
        if rvm != "NotOlderThan" {
            c.push(Cause::forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        if !watchlist {
            c.push(Cause::forbidden(
                "sendInitialEvents",
                "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
            ));
        }
    }
    if !rvm.is_empty() {
        if o.send_initial_events.is_none() {
            c.push(Cause::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            ));
        }
        if rvm != "NotOlderThan" {
            c.push(Cause::not_supported(
                "resourceVersionMatch",
                rvm,
                &["NotOlderThan"],
            ));
        }
        if o.continue_token.is_some() {
            c.push(Cause::forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden when continue is provided",
            ));
        }
    }
    c
}

/// Parses a `resourceVersion` value the way storage does, with Go's `strconv.ParseUint`
/// (digits only); a bad one is a 500 without reason.
pub fn parse_rv(rv: &str) -> Result<u64, SimError> {
    let why = if rv.is_empty() || !rv.bytes().all(|b| b.is_ascii_digit()) {
        "invalid syntax"
    } else {
        match rv.parse::<u64>() {
            Ok(n) => return Ok(n),
            Err(_) => "value out of range",
        }
    };
    Err(SimError::Internal(format!(
        "resourceVersion: Invalid value: \"{rv}\": strconv.ParseUint: parsing \"{rv}\": {why}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm() -> ResourceType {
        super::super::types::builtins()
            .into_iter()
            .find(|t| t.resource == "configmaps")
            .unwrap()
    }

    fn opts(q: &str, watchlist: bool) -> Result<ListOptions, SimError> {
        list_options(&Query::parse(Some(q)), &cm(), false, watchlist)
    }

    #[test]
    fn bools_follow_go() {
        let q = Query::parse(Some("watch=&a=maybe&b=FALSE&c=0"));
        assert!(q.flag("watch") && q.flag("a") && !q.flag("b") && !q.flag("c") && !q.flag("d"));
    }

    #[test]
    fn watch_defaulting_and_gate() {
        let o = opts("watch=1&resourceVersion=0", true).unwrap();
        assert_eq!(o.send_initial_events, Some(true));
        assert_eq!(o.rvm, Some(Rvm::NotOlderThan));
        let o = opts("watch=1&resourceVersion=5", true).unwrap();
        assert_eq!(o.send_initial_events, None);
        let o = opts("watch=1", false).unwrap();
        assert_eq!(o.send_initial_events, None);
        let e = opts(
            "watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan",
            false,
        )
        .unwrap_err();
        assert!(e.to_string().contains(
            "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"
        ));
    }

    #[test]
    fn parse_errors_come_first() {
        let e = opts("limit=abc&resourceVersionMatch=Exact", true).unwrap_err();
        assert_eq!(
            e.to_string(),
            "strconv.ParseInt: parsing \"abc\": invalid syntax"
        );
        let e = opts("resourceVersionMatch=Exact&fieldSelector=data.x=1", true).unwrap_err();
        assert_eq!(e.code(), 422);
    }
}
