//! `policy explain`: for each event of an NDJSON file, what the policy keeps and what it drops.
//!
//! Dropped fields are shown by name only, never by value. Malformed lines are reported with their line
//! number and do not stop the rest. Output is a readable listing, or one JSON object per line with
//! `json = true`; either ends with a summary.

use std::collections::BTreeMap;
use std::io::{self, BufRead, Write};

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::pipeline::{process_value, Outcome, ProcessOptions};

/// Totals over a file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ExplainSummary {
    /// Non-blank lines read.
    pub lines: u64,
    /// Events kept, by canonical type.
    pub kept: BTreeMap<String, u64>,
    /// Events filtered, by reason.
    pub filtered: BTreeMap<String, u64>,
    /// Lines that could not be read.
    pub malformed: u64,
    /// Fields dropped over all kept events.
    pub fields_dropped: u64,
    /// Strings scrubbed or ids hashed over all kept events.
    pub fields_scrubbed: u64,
}

/// Explains every line of `input` to `out`.
pub fn explain<R: BufRead, W: Write>(
    mut input: R,
    opts: &ProcessOptions<'_>,
    json: bool,
    out: &mut W,
) -> io::Result<ExplainSummary> {
    let mut summary = ExplainSummary::default();
    let mut buf = Vec::new();
    let mut line_no = 0u64;
    loop {
        buf.clear();
        if input.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        line_no += 1;
        let text = match std::str::from_utf8(&buf) {
            Ok(t) => t.trim(),
            Err(e) => {
                report_error(
                    out,
                    json,
                    line_no,
                    &format!("invalid UTF-8 at byte {}", e.valid_up_to()),
                    &mut summary,
                )?;
                continue;
            }
        };
        if text.is_empty() {
            continue;
        }
        summary.lines += 1;
        let value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                report_error(
                    out,
                    json,
                    line_no,
                    &format!("invalid JSON: {e}"),
                    &mut summary,
                )?;
                continue;
            }
        };
        match process_value(&value, opts) {
            Err(e) => report_error(out, json, line_no, &e.to_string(), &mut summary)?,
            Ok(Outcome::Filtered {
                native_type,
                reason,
            }) => {
                *summary
                    .filtered
                    .entry(reason.as_str().to_string())
                    .or_default() += 1;
                if json {
                    let row = json!({"line": line_no, "native_type": native_type, "outcome": "filtered", "reason": reason.as_str()});
                    writeln!(out, "{row}")?;
                } else {
                    writeln!(
                        out,
                        "L{line_no:<5} {native_type:<34} filtered: {}",
                        reason.as_str()
                    )?;
                }
            }
            Ok(Outcome::Kept { event, report }) => {
                *summary.kept.entry(event.kind.to_string()).or_default() += 1;
                summary.fields_dropped += report.dropped.len() as u64;
                summary.fields_scrubbed += report.scrubbed.len() as u64;
                let mut kept = Map::new();
                flatten(&Value::Object(event.data.clone()), String::new(), &mut kept);
                let dropped: Vec<&str> = report.dropped.iter().map(|d| d.path.as_str()).collect();
                if json {
                    let row = json!({"line": line_no, "native_type": event.native_type, "outcome": "kept",
                        "canonical_type": event.kind, "event_id": event.event_id, "session_id": event.session_id,
                        "agent_role": event.agent_role, "occurred_at": event.occurred_at, "kept": kept,
                        "dropped": dropped, "scrubbed": report.scrubbed});
                    writeln!(out, "{row}")?;
                } else {
                    let role = event
                        .agent_role
                        .map(|r| format!("{r:?}").to_lowercase())
                        .unwrap_or_default();
                    writeln!(
                        out,
                        "L{line_no:<5} {:<34} kept as {} ({role} {})",
                        event.native_type,
                        event.kind,
                        event.session_id.as_deref().unwrap_or("-")
                    )?;
                    let kept_text: Vec<String> =
                        kept.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    writeln!(
                        out,
                        "       kept:    {}",
                        if kept_text.is_empty() {
                            "-".into()
                        } else {
                            kept_text.join(" ")
                        }
                    )?;
                    writeln!(
                        out,
                        "       dropped: {}",
                        if dropped.is_empty() {
                            "-".into()
                        } else {
                            dropped.join(", ")
                        }
                    )?;
                    if !report.scrubbed.is_empty() {
                        writeln!(out, "       scrubbed: {}", report.scrubbed.join(", "))?;
                    }
                }
            }
        }
    }
    if json {
        writeln!(out, "{}", json!({ "summary": summary }))?;
    } else {
        writeln!(out, "{}", summary_line(&summary))?;
    }
    Ok(summary)
}

fn report_error<W: Write>(
    out: &mut W,
    json: bool,
    line_no: u64,
    error: &str,
    summary: &mut ExplainSummary,
) -> io::Result<()> {
    summary.malformed += 1;
    if json {
        writeln!(
            out,
            "{}",
            json!({"line": line_no, "outcome": "error", "error": error})
        )
    } else {
        writeln!(out, "L{line_no:<5} error: {error}")
    }
}

/// `summary: 12 kept (llm.turn 3, ...), 30 filtered (delta 20, ...), 1 malformed, 44 fields dropped, 2 scrubbed`
pub fn summary_line(s: &ExplainSummary) -> String {
    let list = |m: &BTreeMap<String, u64>| {
        m.iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let total = |m: &BTreeMap<String, u64>| m.values().sum::<u64>();
    format!(
        "summary: {} lines, {} kept ({}), {} filtered ({}), {} malformed, {} fields dropped, {} fields scrubbed",
        s.lines,
        total(&s.kept),
        list(&s.kept),
        total(&s.filtered),
        list(&s.filtered),
        s.malformed,
        s.fields_dropped,
        s.fields_scrubbed
    )
}

fn flatten(v: &Value, path: String, out: &mut Map<String, Value>) {
    match v {
        Value::Object(m) => {
            for (k, inner) in m {
                flatten(
                    inner,
                    if path.is_empty() {
                        k.clone()
                    } else {
                        format!("{path}.{k}")
                    },
                    out,
                );
            }
        }
        other => {
            out.insert(path, other.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hive::Zone;
    use crate::policy::Policy;

    fn run(input: &[u8], json: bool) -> (String, ExplainSummary) {
        let policy = Policy::default_policy();
        let opts = ProcessOptions {
            policy: &policy,
            zone: Zone::Utc,
            source_identity: None,
            session_hint: None,
            colony: None,
        };
        let mut out = Vec::new();
        let summary = explain(input, &opts, json, &mut out).unwrap();
        (String::from_utf8(out).unwrap(), summary)
    }

    const LINES: &[u8] = b"{\"type\": \"tool_call_completed\", \"stream_id\": \"queen\", \"execution_id\": \"s1\", \"data\": {\"tool_name\": \"read_file\", \"result\": \"zzcanary1 /home/a\", \"is_error\": true}, \"timestamp\": \"2026-11-03T10:00:00\", \"seq\": 1}\nnot json\n{\"type\": \"llm_text_delta\", \"stream_id\": \"queen\", \"execution_id\": \"s1\", \"data\": {\"content\": \"zzcanary2\"}, \"timestamp\": \"2026-11-03T10:00:00\", \"seq\": 2}\n\xff\xfe\n";

    #[test]
    fn explain_lists_kept_and_dropped_fields_without_dropped_values() {
        let (text, summary) = run(LINES, false);
        assert!(text.contains("kept as tool.call"), "{text}");
        assert!(text.contains("tool_name=\"read_file\""), "{text}");
        assert!(text.contains("dropped: result"), "{text}");
        assert!(text.contains("L2     error: invalid JSON"), "{text}");
        assert!(text.contains("L4     error: invalid UTF-8"), "{text}");
        assert!(text.contains("filtered: delta"), "{text}");
        assert!(!text.contains("zzcanary"), "{text}");
        assert_eq!((summary.malformed, summary.fields_dropped), (2, 1));
        assert!(
            text.trim_end()
                .ends_with("1 fields dropped, 0 fields scrubbed"),
            "{text}"
        );
    }

    #[test]
    fn explain_json_is_one_object_per_line_with_a_summary_last() {
        let (text, _) = run(LINES, true);
        let rows: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(rows.len(), 5);
        assert_eq!(rows[0]["kept"]["tool_name"], "read_file");
        assert_eq!(rows[0]["dropped"], json!(["result"]));
        assert_eq!(rows[2]["reason"], "delta");
        assert_eq!(rows[4]["summary"]["kept"]["tool.call"], 1);
        assert!(!text.contains("zzcanary"));
    }
}
