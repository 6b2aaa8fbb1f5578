//! Query parameters of list, get and watch requests, parsed and validated with the
//! apiserver's rules and messages (rules L2, L4, L7, L8 of docs/semantics.md).

use std::time::Duration;

use percent_encoding::percent_decode_str;
use tokio::time::Instant;

use super::filter::IndexRequirement;
use crate::index::IndexSet;
use crate::resource::ResourceInfo;
use crate::selector::{self, FieldSelector, LabelSelector};
use crate::status::{ApiError, Cause};

/// Decoded `application/x-www-form-urlencoded` query pairs, in order.
pub fn parse_query(query: Option<&str>) -> Vec<(String, String)> {
    let Some(q) = query else { return Vec::new() };
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}

fn decode(s: &str) -> String {
    percent_decode_str(&s.replace('+', " "))
        .decode_utf8_lossy()
        .into_owned()
}

/// The first value of a parameter, as Go's `url.Values.Get`.
fn get<'a>(q: &'a [(String, String)], key: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// Query booleans: only `0` and `false` (any case) are false; anything else, even an empty
/// value, is true (L8).
fn boolean(v: Option<&str>) -> Option<bool> {
    v.map(|v| !(v == "0" || v.eq_ignore_ascii_case("false")))
}

/// A number parameter as Go's `strconv.ParseInt` reads it: an optional sign, then digits,
/// nothing else (no spaces: a `+` in a query is a space). Empty counts as unset.
fn int(v: Option<&str>) -> Result<Option<i64>, ApiError> {
    match v {
        None | Some("") => Ok(None),
        Some(s) => s.parse::<i64>().map(Some).map_err(|e| {
            let why = match e.kind() {
                std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                    "value out of range"
                }
                _ => "invalid syntax",
            };
            ApiError::BadRequest(format!("strconv.ParseInt: parsing {s:?}: {why}"))
        }),
    }
}

/// How long a watch served from the cache stays open, from its `timeoutSeconds`.
///
/// The apiserver multiplies the seconds into a Go `time.Duration` (nanoseconds in an i64):
/// zero or unset picks a random time between its minimum request timeout and twice that; a
/// negative value is a timer that has already fired, so the stream ends at once. Beyond about
/// 292 years Go's multiplication wraps around to an arbitrary duration; kcache takes such a
/// value for what the client meant, "never", instead of copying the accident (and instead of
/// overflowing an `Instant`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WatchTimeout {
    /// Unset or zero: the server chooses.
    #[default]
    ServerChosen,
    /// Negative: the stream ends as soon as it is opened.
    Elapsed,
    /// Positive: that many seconds, however large.
    Seconds(u64),
}

impl WatchTimeout {
    pub(crate) fn from_seconds(seconds: Option<i64>) -> WatchTimeout {
        match seconds {
            None | Some(0) => WatchTimeout::ServerChosen,
            Some(s) if s < 0 => WatchTimeout::Elapsed,
            Some(s) => WatchTimeout::Seconds(s.unsigned_abs()),
        }
    }

    /// The deadline of a watch opened at `now`, with `server_chosen` for the unset case.
    /// A deadline past what the clock can represent is a century away: no watch lives that long.
    pub fn deadline(self, now: Instant, server_chosen: Duration) -> Instant {
        const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
        let after = match self {
            WatchTimeout::ServerChosen => server_chosen,
            WatchTimeout::Elapsed => Duration::ZERO,
            WatchTimeout::Seconds(s) => Duration::from_secs(s).min(CENTURY),
        };
        now.checked_add(after)
            .or_else(|| now.checked_add(CENTURY))
            .unwrap_or(now)
    }
}

/// ListOptions of a list or watch request.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    pub watch: bool,
    pub label: LabelSelector,
    pub field: FieldSelector,
    /// `resourceVersion`; an empty value counts as unset, as in the apiserver.
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    /// `limit`; zero or negative means no limit (L2).
    pub limit: i64,
    pub continue_token: Option<String>,
    /// `timeoutSeconds` of a watch, bounded: see [`WatchTimeout`].
    pub timeout: WatchTimeout,
    pub allow_bookmarks: bool,
    /// `sendInitialEvents`; `Some(false)` is "provided" for validation.
    pub send_initial_events: Option<bool>,
    pub pretty: bool,
    /// Field-selector terms on configured field-path indexes, taken out of `field`.
    pub indexed: Vec<IndexRequirement>,
}

impl ListOptions {
    /// Decode and check the parameters the way the apiserver decodes ListOptions: number and
    /// selector syntax errors are 400, unsupported field selectors 400 with the per-kind
    /// message, then the 422 validation rules.
    pub fn parse(
        q: &[(String, String)],
        info: &ResourceInfo,
        indexes: &IndexSet,
        legacy_watch: bool,
    ) -> Result<ListOptions, ApiError> {
        let field = get(q, "fieldSelector")
            .map(FieldSelector::parse)
            .transpose()
            .map_err(|e| ApiError::BadRequest(e.message));
        Self::parse_with_field(q, field, info, indexes, legacy_watch)
    }

    /// [`ListOptions::parse`] with the request's `fieldSelector` already parsed (`field`:
    /// None when it has none), so that it is parsed once per request.
    pub(crate) fn parse_with_field(
        q: &[(String, String)],
        field: Result<Option<FieldSelector>, ApiError>,
        info: &ResourceInfo,
        indexes: &IndexSet,
        legacy_watch: bool,
    ) -> Result<ListOptions, ApiError> {
        let label = match get(q, "labelSelector") {
            Some(s) => LabelSelector::parse(s).map_err(|e| ApiError::BadRequest(e.message))?,
            None => LabelSelector::everything(),
        };
        // After the label selector's: the apiserver reports the label selector's error first.
        let field = field?.unwrap_or_else(FieldSelector::everything);
        // Terms naming a CRD selectable field, or a configured field-path index (by path
        // without `[*]`, or by name; kcache's own), are matched on the index values; every
        // other term is checked as the apiserver checks it.
        let (field, indexed) = field.partition(|r| {
            let (index, slot) = indexes
                .by_selectable_field(&r.field)
                .or_else(|| indexes.by_selector_field(&r.field))?;
            Some(IndexRequirement {
                index,
                slot,
                op: r.op,
                value: r.value.clone(),
            })
        });
        let opts = ListOptions {
            watch: legacy_watch || boolean(get(q, "watch")).unwrap_or(false),
            allow_bookmarks: boolean(get(q, "allowWatchBookmarks")).unwrap_or(false),
            resource_version: get(q, "resourceVersion")
                .filter(|s| !s.is_empty())
                .map(String::from),
            resource_version_match: get(q, "resourceVersionMatch")
                .filter(|s| !s.is_empty())
                .map(String::from),
            timeout: WatchTimeout::from_seconds(int(get(q, "timeoutSeconds"))?),
            limit: int(get(q, "limit"))?.unwrap_or(0),
            continue_token: get(q, "continue")
                .filter(|s| !s.is_empty())
                .map(String::from),
            send_initial_events: boolean(get(q, "sendInitialEvents")),
            pretty: boolean(get(q, "pretty")).unwrap_or(false),
            label,
            field,
            indexed,
        };
        selector::validate_fields(
            &opts.field,
            &info.group,
            &info.resource,
            info.namespaced,
            info.custom,
        )
        .map_err(|e| ApiError::BadRequest(e.message))?;
        opts.validate()?;
        Ok(opts)
    }

    /// The 422 rules of ListOptions validation (L7), in the apiserver's order.
    fn validate(&self) -> Result<(), ApiError> {
        const RVM: &str = "resourceVersionMatch";
        let mut causes = Vec::new();
        let rvm = self.resource_version_match.as_deref();
        if self.watch {
            if self.send_initial_events.is_some() && rvm != Some("NotOlderThan") {
                causes.push(Cause::forbidden(
                    RVM,
                    "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                ));
            }
            if let Some(m) = rvm {
                if self.send_initial_events.is_none() {
                    causes.push(Cause::forbidden(
                        RVM,
                        "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
                    ));
                }
                if m != "NotOlderThan" {
                    causes.push(Cause::not_supported(RVM, m, &["NotOlderThan"]));
                }
                if self.continue_token.is_some() {
                    causes.push(Cause::forbidden(
                        RVM,
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
            }
        } else {
            if let Some(m) = rvm {
                if self.resource_version.is_none() {
                    causes.push(Cause::forbidden(
                        RVM,
                        "resourceVersionMatch is forbidden unless resourceVersion is provided",
                    ));
                }
                if self.continue_token.is_some() {
                    causes.push(Cause::forbidden(
                        RVM,
                        "resourceVersionMatch is forbidden when continue is provided",
                    ));
                }
                match m {
                    "Exact" => {
                        if self.resource_version.as_deref() == Some("0") {
                            causes.push(Cause::forbidden(
                                RVM,
                                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
                            ));
                        }
                    }
                    "NotOlderThan" => {}
                    other => causes.push(Cause::not_supported(
                        RVM,
                        other,
                        &["Exact", "NotOlderThan", ""],
                    )),
                }
            }
            if self.send_initial_events.is_some() {
                causes.push(Cause::forbidden(
                    "sendInitialEvents",
                    "sendInitialEvents is forbidden for list",
                ));
            }
        }
        if causes.is_empty() {
            Ok(())
        } else {
            Err(ApiError::InvalidListOptions(causes))
        }
    }
}

/// Parse a resourceVersion the way the storage layer does, with Go's `strconv.ParseUint`
/// (digits only: no sign, no spaces); a non-number is a 500 (L7).
pub fn parse_rv(rv: &str) -> Result<u64, ApiError> {
    let why = if rv.is_empty() || !rv.bytes().all(|b| b.is_ascii_digit()) {
        "invalid syntax"
    } else {
        match rv.parse::<u64>() {
            Ok(n) => return Ok(n),
            Err(_) => "value out of range",
        }
    };
    Err(ApiError::Internal(format!(
        "resourceVersion: Invalid value: {rv:?}: strconv.ParseUint: parsing {rv:?}: {why}"
    )))
}

/// Options of a GET: only `resourceVersion` and `pretty` matter.
#[derive(Debug, Clone, Default)]
pub struct GetOptions {
    pub resource_version: Option<String>,
    pub pretty: bool,
}

impl GetOptions {
    pub fn parse(q: &[(String, String)]) -> GetOptions {
        GetOptions {
            resource_version: get(q, "resourceVersion")
                .filter(|s| !s.is_empty())
                .map(String::from),
            pretty: boolean(get(q, "pretty")).unwrap_or(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm() -> ResourceInfo {
        ResourceInfo::core_v1("configmaps", "ConfigMap")
    }

    fn opts(q: &str) -> Result<ListOptions, ApiError> {
        ListOptions::parse(&parse_query(Some(q)), &cm(), &IndexSet::default(), false)
    }

    #[test]
    fn watch_timeouts_are_bounded() {
        let now = Instant::now();
        let chosen = Duration::from_secs(1800);
        let deadline = |v: &str| {
            let o = opts(&format!("watch=1&timeoutSeconds={v}")).map_err(|e| e.code());
            o.map(|o| o.timeout.deadline(now, chosen) - now)
        };
        assert_eq!(deadline("5"), Ok(Duration::from_secs(5)));
        assert_eq!(deadline("0"), Ok(chosen));
        assert_eq!(deadline(""), Ok(chosen));
        assert_eq!(deadline("-1"), Ok(Duration::ZERO));
        assert_eq!(deadline("-9223372036854775808"), Ok(Duration::ZERO));
        assert!(deadline("9223372036854775807").unwrap() > Duration::from_secs(50 * 365 * 86400));
        assert_eq!(deadline("9223372036854775808"), Err(400));
        // A `+` in a query is a space, which Go's ParseInt refuses.
        assert_eq!(deadline("+5"), Err(400));
        assert_eq!(deadline("%2B5"), Ok(Duration::from_secs(5)));
    }

    #[test]
    fn booleans_follow_l8() {
        assert!(opts("watch=").unwrap().watch);
        assert!(opts("watch=maybe").unwrap().watch);
        assert!(!opts("watch=0").unwrap().watch);
        assert!(!opts("watch=FALSE").unwrap().watch);
        assert!(!opts("").unwrap().watch);
    }

    #[test]
    fn numbers() {
        assert_eq!(
            opts("limit=abc").unwrap_err(),
            ApiError::BadRequest("strconv.ParseInt: parsing \"abc\": invalid syntax".into())
        );
        assert_eq!(opts("limit=-1").unwrap().limit, -1);
        assert!(opts("timeoutSeconds=abc").is_err());
    }

    #[test]
    fn validation_messages() {
        let body = |q: &str| String::from_utf8(opts(q).unwrap_err().body().to_vec()).unwrap();
        assert!(body("resourceVersionMatch=NotOlderThan").contains(
            "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
        ));
        assert!(
            body("resourceVersionMatch=Exact&resourceVersion=0").contains(
                "resourceVersionMatch \\\"exact\\\" is forbidden for resourceVersion \\\"0\\\""
            )
        );
        assert!(body("resourceVersionMatch=Bogus&resourceVersion=10").contains(
            "Unsupported value: \\\"Bogus\\\": supported values: \\\"Exact\\\", \\\"NotOlderThan\\\", \\\"\\\""
        ));
        assert!(
            body("watch=1&resourceVersionMatch=NotOlderThan&resourceVersion=0").contains(
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided"
            )
        );
        assert!(body("sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=")
            .contains("is invalid: [resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided, sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list]"));
        assert!(opts("watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan").is_ok());
    }

    #[test]
    fn rv_not_a_number_is_500() {
        assert_eq!(parse_rv("abc").unwrap_err().code(), 500);
        assert_eq!(parse_rv("17").unwrap(), 17);
        // Go's ParseUint takes digits only, where Rust's parser also takes a sign.
        assert_eq!(parse_rv("+17").unwrap_err().code(), 500);
        assert!(parse_rv("18446744073709551616")
            .unwrap_err()
            .to_string()
            .contains("value out of range"));
    }
}
