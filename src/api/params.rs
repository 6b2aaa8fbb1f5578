//! Query parameters of list, get and watch requests, parsed and validated with the
//! apiserver's rules and messages (INDEX.md L2, L4, L7, L8).

use percent_encoding::percent_decode_str;

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

fn int(v: Option<&str>) -> Result<Option<i64>, ApiError> {
    match v.map(str::trim) {
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
    pub timeout_seconds: Option<i64>,
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
        let label = match get(q, "labelSelector") {
            Some(s) => LabelSelector::parse(s).map_err(|e| ApiError::BadRequest(e.message))?,
            None => LabelSelector::everything(),
        };
        let field = match get(q, "fieldSelector") {
            Some(s) => FieldSelector::parse(s).map_err(|e| ApiError::BadRequest(e.message))?,
            None => FieldSelector::everything(),
        };
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
            timeout_seconds: int(get(q, "timeoutSeconds"))?,
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

/// Parse a resourceVersion the way the storage layer does; a non-number is a 500 (L7).
pub fn parse_rv(rv: &str) -> Result<u64, ApiError> {
    rv.parse::<u64>().map_err(|_| {
        ApiError::Internal(format!(
            "resourceVersion: Invalid value: {rv:?}: strconv.ParseUint: parsing {rv:?}: invalid syntax"
        ))
    })
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
        ResourceInfo {
            group: "".into(),
            version: "v1".into(),
            resource: "configmaps".into(),
            kind: "ConfigMap".into(),
            namespaced: true,
            custom: false,
        }
    }

    fn opts(q: &str) -> Result<ListOptions, ApiError> {
        ListOptions::parse(&parse_query(Some(q)), &cm(), &IndexSet::default(), false)
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
    }
}
