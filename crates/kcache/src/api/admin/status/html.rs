//! The page a browser gets from `/status`: one self-contained document (inline style, no
//! script, no other request), refreshed every few seconds, with a row per cached type and the
//! rows that need a look (not synced, stale, restored, over budget) marked in colour and in
//! words. Everything that comes from the configuration or the upstream is escaped.

use std::fmt::Write;

use super::text::{auto_line, bytes, duration, name_of, nonzero};
use super::{CacheStatus, Condition, StatusReport};

/// Seconds between the page's refreshes.
const REFRESH_SECONDS: u32 = 5;

const STYLE: &str = "\
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.2em;color:#1b1f24;background:#fff}\
h1{font-size:1.3em;margin:0 0 .3em}\
p.meta{margin:.2em 0;color:#444}\
.bad{color:#b00020;font-weight:600}\
.good{color:#1a7f37}\
table{border-collapse:collapse;margin-top:1em}\
th,td{padding:.3em .5em;border-bottom:1px solid #d8dde3;text-align:left;white-space:nowrap}\
td.wrap{white-space:normal}\
th{background:#f2f4f7;font-weight:600}\
td.n{text-align:right;font-variant-numeric:tabular-nums}\
tr.attention td{background:#fdecea}\
tr.syncing td{background:#fff6d6}\
td.state{font-weight:600}\
tr.synced td.state{color:#1a7f37}\
tr.attention td.state,tr.syncing td.state{color:#b00020}\
small{color:#555}";

/// The page, from `report`.
pub(crate) fn render(report: &StatusReport) -> String {
    let mut out = String::with_capacity(4096 + report.caches.len() * 600);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <meta name=\"viewport\" content=\"width=device-width\">\
         <title>kcache status</title><style>{STYLE}</style></head><body>\n\
         <h1>kcache status</h1>\n"
    );
    let up = &report.upstream;
    let reachable = if up.reachable {
        "<span class=\"good\">reachable</span>".to_string()
    } else {
        "<span class=\"bad\">NOT reachable</span>".to_string()
    };
    let _ = writeln!(
        out,
        "<p class=\"meta\" id=\"process\">kcache {}, up {}{}</p>",
        escape(&report.version),
        duration(report.uptime_seconds),
        if report.shutting_down {
            ", <span class=\"bad\">shutting down</span>"
        } else {
            ""
        }
    );
    let _ = writeln!(
        out,
        "<p class=\"meta\" id=\"upstream\">upstream <code>{}</code> ({}), {reachable}</p>",
        escape(&up.url),
        escape(up.version.as_deref().unwrap_or("version unknown")),
    );
    let requests = nonzero(&up.requests);
    let _ = writeln!(
        out,
        "<p class=\"meta\">upstream requests: {}</p>",
        escape(if requests.is_empty() {
            "none"
        } else {
            &requests
        })
    );
    if let Some(line) = auto_line(report) {
        let _ = writeln!(out, "<p class=\"meta\" id=\"auto\">{}</p>", escape(&line));
    }
    out.push_str(
        "<table id=\"caches\"><thead><tr><th>type</th><th>state</th><th>objects</th>\
         <th>memory</th><th>RV</th><th>RV age</th><th>last list</th>\
         <th>why</th><th>relists</th><th>watchers</th><th>dropped</th>\
         <th>consistent reads</th></tr></thead>\n<tbody>\n",
    );
    for c in &report.caches {
        row(&mut out, c);
    }
    if report.caches.is_empty() {
        out.push_str("<tr><td colspan=\"12\">no cached types</td></tr>\n");
    }
    let _ = writeln!(
        out,
        "</tbody></table>\n<p><small>Refreshed every {REFRESH_SECONDS} s. The same figures: \
         <a href=\"?format=json\">JSON</a>, <a href=\"?format=text\">text</a>, \
         <a href=\"metrics\">/metrics</a>.</small></p>\n</body></html>"
    );
    out
}

fn row(out: &mut String, c: &CacheStatus) {
    let class = match c.condition {
        Condition::Synced => "synced",
        Condition::Syncing => "syncing",
        Condition::Restored | Condition::Stale | Condition::OverBudget | Condition::NotServed => {
            "attention"
        }
    };
    let (listed, why) = match &c.last_list {
        Some(l) => (
            format!(
                "<span title=\"{}\">{} ago</span>",
                escape(&l.at),
                duration(l.seconds_ago)
            ),
            escape(l.reason.describe()),
        ),
        None => ("-".into(), "-".into()),
    };
    let reads = nonzero(&c.consistent_reads);
    let name = escape(&c.name);
    let shown = escape(&name_of(c));
    let _ = writeln!(
        out,
        "<tr class=\"{class}\" data-type=\"{name}\"><td>{shown}</td><td class=\"state\">{}</td>\
         <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
         <td class=\"n\">{}</td><td class=\"n\">{listed}</td><td>{why}</td>\
         <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"wrap\">{}</td></tr>",
        c.condition.as_str(),
        c.objects,
        bytes(c.bytes),
        escape(&c.resource_version),
        c.resource_version_age_seconds.map_or("-".into(), duration),
        c.relists,
        c.watchers,
        c.dropped_watchers,
        escape(if reads.is_empty() { "-" } else { &reads }),
    );
}

/// Text as HTML text or attribute value.
pub(crate) fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
