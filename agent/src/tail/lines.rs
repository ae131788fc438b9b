//! One raw line in, one [`TailItem`] out: parse, classify, adapt and redact with
//! [`apiary_schema::process_value`]. Pure (no I/O).
//!
//! A line that cannot be read becomes [`TailItem::Malformed`] with its line number, offset and a reason
//! that never quotes the line: the outbox keeps the reason in its dead-letter table, and the line may hold
//! anything a user typed.

use apiary_schema::hive::Zone;
use apiary_schema::line::LineVerdict;
use apiary_schema::pipeline::{sniff_filtered, ProcessError};
use apiary_schema::{process_owned, Outcome, Policy, ProcessOptions};

use super::file::RawLine;
use super::sink::TailItem;

/// Everything about the file a line came from that processing needs.
#[derive(Debug, Clone, Copy)]
pub struct LineContext<'a> {
    pub source_key: &'a str,
    /// `<dev>:<inode>` of the file, for `source_identity`.
    pub file_id: &'a str,
    pub session_hint: Option<&'a str>,
    pub policy: &'a Policy,
    pub zone: Zone,
    pub max_line_bytes: usize,
    /// Derives colony keys from colony names before the policy runs.
    pub colony: Option<&'a apiary_schema::colony::ColonyKeyer>,
}

/// Processes one line (`line_no` counts from 1). Blank lines are not events: `None`.
pub fn process_line(line: &RawLine, line_no: u64, ctx: &LineContext<'_>) -> Option<TailItem> {
    let malformed = |offset: u64, reason: String| {
        Some(TailItem::Malformed {
            source_key: ctx.source_key.to_string(),
            line_no,
            offset,
            reason,
        })
    };
    let (offset, bytes) = match line {
        RawLine::TooLong { offset, len } => {
            let limit = ctx.max_line_bytes;
            return malformed(
                *offset,
                format!("line too long: {len} bytes (limit {limit})"),
            );
        }
        RawLine::Bytes { offset, bytes } => (*offset, bytes.as_slice()),
    };
    let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let at = e.valid_up_to();
            return malformed(offset, format!("invalid UTF-8 at byte {at}"));
        }
    };
    // Deltas and chatty types are filtered without building their value.
    if let Some((reason, native_type)) = sniff_filtered(text) {
        return Some(TailItem::Processed(Outcome::Filtered {
            native_type: native_type.into_owned(),
            reason,
        }));
    }
    let source_identity = format!("file:{}:{offset}", ctx.file_id);
    let opts = ProcessOptions {
        policy: ctx.policy,
        zone: ctx.zone,
        source_identity: Some(&source_identity),
        session_hint: ctx.session_hint,
        colony: ctx.colony,
    };
    // A durable Hive line is read in one pass, building only what the policy can keep.
    match apiary_schema::line::process_line(text, &opts) {
        Some(LineVerdict::Kept(event, contribution)) => {
            return Some(TailItem::Kept(event, contribution))
        }
        Some(LineVerdict::Filtered {
            native_type,
            reason,
        }) => {
            return Some(TailItem::Processed(Outcome::Filtered {
                native_type,
                reason,
            }))
        }
        None => {}
    }
    let value: serde_json::Value = match serde_json::from_str(text) {
        Ok(value) => value,
        // serde_json's syntax errors name a position, never the input.
        Err(e) => return malformed(offset, format!("invalid JSON: {e}")),
    };
    match process_owned(value, &opts) {
        Ok(outcome) => Some(TailItem::Processed(outcome)),
        Err(e) => malformed(offset, reason_of(&e)),
    }
}

/// A reason that does not quote the input (apiary-schema's error texts never do).
fn reason_of(e: &ProcessError) -> String {
    e.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(line: &[u8], hint: Option<&str>) -> Option<TailItem> {
        let policy = Policy::default_policy();
        let ctx = LineContext {
            source_key: "sessions/s/events.jsonl",
            file_id: "1:2",
            session_hint: hint,
            policy: &policy,
            zone: Zone::Utc,
            max_line_bytes: 100,
            colony: None,
        };
        let raw = RawLine::Bytes {
            offset: 40,
            bytes: line.to_vec(),
        };
        process_line(&raw, 3, &ctx)
    }

    fn reason(item: Option<TailItem>) -> String {
        match item {
            Some(TailItem::Malformed {
                line_no: 3,
                offset: 40,
                reason,
                ..
            }) => reason,
            other => panic!("expected a malformed line, got {other:?}"),
        }
    }

    #[test]
    fn malformed_lines_are_reported_without_their_content() {
        let bad: [&[u8]; 4] = [
            b"{\"type\": \"llm_turn_complete\", zzcanary",
            b"\"zzcanary\"",
            b"{\"type\": \"tool_call_started\", \"timestamp\": \"zzcanary\", \"execution_id\": \"s\"}",
            b"{\"type\": \"x\", \"data\": \"zz\xffcanary\"}",
        ];
        let reasons: Vec<String> = bad.iter().map(|l| reason(run(l, None))).collect();
        assert!(reasons[0].starts_with("invalid JSON"), "{reasons:?}");
        assert!(
            reasons[3].starts_with("invalid UTF-8 at byte"),
            "{reasons:?}"
        );
        assert!(reasons.iter().all(|r| !r.contains("zz")), "{reasons:?}");
    }

    #[test]
    fn a_too_long_line_is_malformed_and_a_blank_line_is_nothing() {
        let policy = Policy::default_policy();
        let ctx = LineContext {
            source_key: "k",
            file_id: "1:2",
            session_hint: None,
            policy: &policy,
            zone: Zone::Utc,
            max_line_bytes: 100,
            colony: None,
        };
        let long = RawLine::TooLong {
            offset: 40,
            len: 5000,
        };
        let why = reason(process_line(&long, 3, &ctx));
        assert_eq!(why, "line too long: 5000 bytes (limit 100)");
        assert_eq!(run(b"  \r", None), None);
    }

    #[test]
    fn the_directory_session_is_used_for_events_that_name_none() {
        let line = br#"{"type": "queen_phase_changed", "stream_id": "queen", "node_id": null, "execution_id": null, "data": {"phase": "working"}, "timestamp": "2026-11-03T12:00:00", "correlation_id": null, "colony_id": null, "seq": 9}"#;
        let item = run(line, Some("session_x"));
        let Some(event) = item.as_ref().and_then(TailItem::kept_event) else {
            panic!("expected a kept event");
        };
        assert_eq!(event.session_id.as_deref(), Some("session_x"));
        let Some(TailItem::Processed(Outcome::Filtered { reason, .. })) = run(line, None) else {
            panic!("expected a filtered event");
        };
        assert_eq!(reason.as_str(), "no_session");
    }
}
