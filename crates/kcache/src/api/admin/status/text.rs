//! The plain-text form of a [`StatusReport`]: what `kcache status` prints and what `curl`
//! gets from `/status`. A summary line per process and upstream, then one row per cached
//! type in aligned columns.

use super::{CacheStatus, Condition, StatusReport};

/// The column heads, in order.
pub(crate) const COLUMNS: [&str; 12] = [
    "TYPE",
    "STATE",
    "OBJECTS",
    "MEMORY",
    "RV",
    "RV AGE",
    "LAST LIST",
    "WHY",
    "RELISTS",
    "WATCHERS",
    "DROPPED",
    "CONSISTENT READS",
];

/// Which columns are numbers (right-aligned).
const NUMERIC: [bool; 12] = [
    false, false, true, true, true, true, true, false, true, true, true, false,
];

/// The whole report as text, ending with a newline.
pub fn render(report: &StatusReport) -> String {
    let mut out = String::new();
    out.push_str(&summary(report));
    out.push('\n');
    out.push_str(&requests_line(report));
    if let Some(line) = auto_line(report) {
        out.push('\n');
        out.push_str(&line);
    }
    out.push_str("\n\n");
    let rows: Vec<[String; 12]> = report.caches.iter().map(row).collect();
    let mut widths = COLUMNS.map(str::len);
    for r in &rows {
        for (w, cell) in widths.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String; 12]| {
        let mut l = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let pad = widths[i].saturating_sub(cell.chars().count());
            if i > 0 {
                l.push_str("  ");
            }
            if NUMERIC[i] {
                l.push_str(&" ".repeat(pad));
                l.push_str(cell);
            } else {
                l.push_str(cell);
                if i + 1 < cells.len() {
                    l.push_str(&" ".repeat(pad));
                }
            }
        }
        l.truncate(l.trim_end().len());
        l.push('\n');
        l
    };
    out.push_str(&line(&COLUMNS.map(str::to_string)));
    for r in &rows {
        out.push_str(&line(r));
    }
    if report.caches.is_empty() {
        out.push_str("(no cached types)\n");
    }
    out
}

/// `kcache 0.1.0, up 2h05m; upstream https://… (v1.34.1), reachable`.
pub(crate) fn summary(report: &StatusReport) -> String {
    let up = &report.upstream;
    let version = up.version.as_deref().unwrap_or("version unknown");
    let reachable = if up.reachable {
        "reachable"
    } else {
        "NOT reachable"
    };
    let stopping = if report.shutting_down {
        "; shutting down"
    } else {
        ""
    };
    format!(
        "kcache {}, up {}; upstream {} ({version}), {reachable}{stopping}",
        report.version,
        duration(report.uptime_seconds),
        up.url
    )
}

/// `upstream requests: reflector_list 12, reflector_watch 40, …` (zero counts left out).
pub(crate) fn requests_line(report: &StatusReport) -> String {
    let counts = nonzero(&report.upstream.requests);
    format!(
        "upstream requests: {}",
        if counts.is_empty() { "none" } else { &counts }
    )
}

/// `cached on demand: 2 types; not cached: v1/secrets (denied)`, when on-demand caching is on.
pub(crate) fn auto_line(report: &StatusReport) -> Option<String> {
    let auto = report.auto.as_ref()?;
    let refused: Vec<String> = auto
        .refused
        .iter()
        .map(|r| format!("{} ({})", r.name, r.reason))
        .collect();
    Some(format!(
        "cached on demand: {} type{}; not cached: {}",
        auto.types,
        if auto.types == 1 { "" } else { "s" },
        if refused.is_empty() {
            "none".to_string()
        } else {
            refused.join(", ")
        }
    ))
}

/// `a 1, b 2` for the non-zero entries of a count map.
pub(crate) fn nonzero(counts: &std::collections::BTreeMap<String, u64>) -> String {
    counts
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn row(c: &CacheStatus) -> [String; 12] {
    let state = match c.condition {
        Condition::Synced => c.condition.as_str().to_string(),
        // Upper case: the rows to look at stand out in a terminal too.
        other => other.as_str().to_uppercase(),
    };
    let (listed, why) = match &c.last_list {
        Some(l) => (
            format!("{} ago", duration(l.seconds_ago)),
            l.reason.describe().to_string(),
        ),
        None => ("-".into(), "-".into()),
    };
    let reads = nonzero(&c.consistent_reads);
    [
        name_of(c),
        state,
        c.objects.to_string(),
        bytes(c.bytes),
        c.resource_version.clone(),
        c.resource_version_age_seconds.map_or("-".into(), duration),
        listed,
        why,
        c.relists.to_string(),
        c.watchers.to_string(),
        c.dropped_watchers.to_string(),
        if reads.is_empty() { "-".into() } else { reads },
    ]
}

/// The type's name, marked when it is cached on demand.
pub(crate) fn name_of(c: &CacheStatus) -> String {
    if c.origin == crate::registry::Origin::Auto.as_str() {
        format!("{} (auto)", c.name)
    } else {
        c.name.clone()
    }
}

/// `512 B`, `1.5 KiB`, `12.0 MiB`, `2.3 GiB`.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// `0.4s`, `12s`, `3m05s`, `2h05m`, `3d04h`: two units at most.
pub(crate) fn duration(secs: f64) -> String {
    if !secs.is_finite() || secs < 0.0 {
        return "-".into();
    }
    if secs < 10.0 {
        return format!("{secs:.1}s");
    }
    let s = secs as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}
