//! The benchmark's results: rows of measurements grouped by scenario, the targets each is held to, with
//! PASS/MISS, rendered as Markdown tables and as JSON.

use serde::Serialize;
use serde_json::{Map, Value};

/// A measured ratio, e.g. kcache/nginx throughput.
#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub label: String,
    pub value: f64,
}

/// One line of a scenario's table.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub scenario: String,
    pub case: String,
    pub target: String,
    /// Column → value (numbers, strings or null), in column order.
    pub values: Map<String, Value>,
    pub ratios: Vec<Ratio>,
    pub note: String,
}

impl Row {
    pub fn new(scenario: &str, case: &str, target: &str) -> Row {
        Row {
            scenario: scenario.into(),
            case: case.into(),
            target: target.into(),
            values: Map::new(),
            ratios: Vec::new(),
            note: String::new(),
        }
    }

    pub fn set(&mut self, column: &str, v: impl Into<Value>) -> &mut Row {
        self.values.insert(column.into(), v.into());
        self
    }

    pub fn ratio(&mut self, label: &str, value: f64) -> &mut Row {
        if value.is_finite() {
            self.ratios.push(Ratio {
                label: label.into(),
                value,
            });
        }
        self
    }

    pub fn note(&mut self, note: impl AsRef<str>) -> &mut Row {
        if !self.note.is_empty() {
            self.note.push_str("; ");
        }
        self.note.push_str(note.as_ref());
        self
    }
}

/// One target a measurement is held to (PASS or MISS).
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub target: String,
    pub goal: String,
    pub measured: String,
    /// None: could not be measured (e.g. nginx missing).
    pub pass: Option<bool>,
}

/// Everything a run produced.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub machine: Map<String, Value>,
    pub command: String,
    pub notes: Vec<String>,
    pub rows: Vec<Row>,
    pub checks: Vec<Check>,
}

/// A number as a table shows it: about three significant digits.
pub fn fmt_num(x: f64) -> String {
    let a = x.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 100.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

fn cell(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "—".into(),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(i) => i.to_string(),
            None => fmt_num(n.as_f64().unwrap_or(f64::NAN)),
        },
        Some(Value::String(s)) => s.replace('|', "\\|"),
        Some(other) => other.to_string(),
    }
}

impl Report {
    pub fn push(&mut self, row: Row) {
        self.rows.push(row);
    }

    pub fn check(&mut self, target: &str, goal: &str, measured: String, pass: Option<bool>) {
        self.checks.push(Check {
            target: target.into(),
            goal: goal.into(),
            measured,
            pass,
        });
    }

    /// One Markdown table per scenario (columns: the union of its rows' values), then the
    /// targets.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let mut scenarios: Vec<&str> = Vec::new();
        for r in &self.rows {
            if !scenarios.contains(&r.scenario.as_str()) {
                scenarios.push(&r.scenario);
            }
        }
        for s in scenarios {
            let rows: Vec<&Row> = self.rows.iter().filter(|r| r.scenario == s).collect();
            let mut columns: Vec<&str> = Vec::new();
            for r in &rows {
                for k in r.values.keys() {
                    if !columns.contains(&k.as_str()) {
                        columns.push(k);
                    }
                }
            }
            out.push_str(&format!("### {s}\n\n| case | target |"));
            for c in &columns {
                out.push_str(&format!(" {c} |"));
            }
            out.push_str(" ratio | note |\n|---|---|");
            out.push_str(&"---:|".repeat(columns.len()));
            out.push_str("---|---|\n");
            for r in rows {
                out.push_str(&format!("| {} | {} |", r.case, r.target));
                for c in &columns {
                    out.push_str(&format!(" {} |", cell(r.values.get(*c))));
                }
                let ratios: Vec<String> = r
                    .ratios
                    .iter()
                    .map(|x| format!("{} {}×", x.label, fmt_num(x.value)))
                    .collect();
                out.push_str(&format!(
                    " {} | {} |\n",
                    ratios.join("; "),
                    r.note.replace('|', "\\|")
                ));
            }
            out.push('\n');
        }
        if !self.checks.is_empty() {
            out.push_str(
                "### Targets\n\n| target | goal | measured | result |\n|---|---|---|---|\n",
            );
            for c in &self.checks {
                let result = match c.pass {
                    Some(true) => "PASS",
                    Some(false) => "MISS",
                    None => "n/a",
                };
                out.push_str(&format!(
                    "| {} | {} | {} | {} |\n",
                    c.target, c.goal, c.measured, result
                ));
            }
            out.push('\n');
        }
        out
    }

    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}
