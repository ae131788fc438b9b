//! The one entry point both binaries use: a JSON value (a Hive-native event or a canonical one) in, a
//! redacted canonical event or a filter verdict out.
//!
//! OTLP exports come in already decoded ([`process_otlp`]): each record is mapped by [`crate::otel`] and
//! redacted by the same [`redact`] step.
//!
//! Order: parse → classify (drop deltas, chatty and non-durable types) → adapt → key colony names
//! ([`crate::colony`]) → redact by the policy.
//! Nothing here touches disk; the agent writes only what [`Outcome::Kept`] holds.

use std::borrow::Cow;

use serde_json::Value;

use crate::event::CanonicalEvent;
use crate::hive::{self, AdaptError, Adapted, FilterReason, Zone};
use crate::otel;
use crate::policy::{Policy, RedactionReport};

/// How to process events.
#[derive(Debug, Clone, Copy)]
pub struct ProcessOptions<'a> {
    /// The redaction policy to apply.
    pub policy: &'a Policy,
    /// The producer's time zone, for naive timestamps.
    pub zone: Zone,
    /// Identity of where the event was read (file identity + offset), used for the event id only when the
    /// native event has no identity of its own.
    pub source_identity: Option<&'a str>,
    /// The session the source belongs to (a per-session log's directory), for events that name none.
    pub session_hint: Option<&'a str>,
    /// Derives colony keys from colony names before the policy runs ([`crate::colony`]); without it a
    /// name is simply dropped by the policy.
    pub colony: Option<&'a crate::colony::ColonyKeyer>,
}

impl<'a> ProcessOptions<'a> {
    /// Options with the given policy, the local zone, and no source.
    pub fn new(policy: &'a Policy) -> ProcessOptions<'a> {
        ProcessOptions {
            policy,
            zone: Zone::Local,
            source_identity: None,
            session_hint: None,
            colony: None,
        }
    }
}

/// What became of one input event.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Durable: the redacted canonical event, and what redaction did.
    Kept {
        event: Box<CanonicalEvent>,
        report: RedactionReport,
    },
    /// Not durable (or not allowed); nothing of it is kept.
    Filtered {
        native_type: String,
        reason: FilterReason,
    },
}

/// An input event that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProcessError {
    #[error(transparent)]
    Hive(#[from] AdaptError),
    #[error("canonical event does not match schema version 1: {0}")]
    Canonical(String),
    /// An unreadable OTLP record (span, log record); the reason names an attribute, never its value.
    #[error("{0}")]
    Otlp(String),
    /// A kept event with a value the ingest would refuse (a token count above 10^12, a negative or too
    /// large cost, ...); names the field, never its value.
    #[error("{0}")]
    OutOfRange(String),
}

/// True when the value looks like a canonical event rather than a native one.
pub fn is_canonical(value: &Value) -> bool {
    value.get("schema_version").is_some() && value.get("event_id").is_some()
}

/// Processes one event (native Hive or canonical).
pub fn process_value(value: &Value, opts: &ProcessOptions<'_>) -> Result<Outcome, ProcessError> {
    let event = if is_canonical(value) {
        let event: CanonicalEvent =
            serde_json::from_value(value.clone()).map_err(|_| canonical_error(value))?;
        event
            .check_envelope()
            .map_err(|e| ProcessError::Canonical(e.to_string()))?;
        event
    } else {
        match hive::adapt(value, &hive_context(opts))? {
            Adapted::Event(e) => e,
            Adapted::Filtered {
                native_type,
                reason,
            } => {
                return Ok(Outcome::Filtered {
                    native_type,
                    reason,
                })
            }
        }
    };
    finish(event, opts)
}

/// [`process_value`] of a value the caller no longer needs: a native event's `data` is moved, not copied
/// ([`hive::adapt_owned`]). The same answer as [`process_value`] for every input.
pub fn process_owned(value: Value, opts: &ProcessOptions<'_>) -> Result<Outcome, ProcessError> {
    if is_canonical(&value) {
        return process_value(&value, opts);
    }
    match hive::adapt_owned(value, &hive_context(opts))? {
        Adapted::Event(e) => finish(e, opts),
        Adapted::Filtered {
            native_type,
            reason,
        } => Ok(Outcome::Filtered {
            native_type,
            reason,
        }),
    }
}

fn hive_context<'a>(opts: &ProcessOptions<'a>) -> hive::Context<'a> {
    hive::Context {
        zone: opts.zone,
        source_identity: opts.source_identity,
        session_hint: opts.session_hint,
    }
}

/// Colony keys, then the policy, then the range check, of an adapted or canonical event.
fn finish(mut event: CanonicalEvent, opts: &ProcessOptions<'_>) -> Result<Outcome, ProcessError> {
    crate::colony::key_colony_name(&mut event, opts.colony);
    let policy = policy_for(&event, opts);
    within_range(redact(event, &policy)?)
}

/// [`finish`] without the redaction report: the kept event with its usage contribution (the range
/// check's), `Ok(None)` for a kind the policy does not allow (filtered as `kind_not_allowed`), the same
/// errors.
pub(crate) fn finish_quietly(
    mut event: CanonicalEvent,
    opts: &ProcessOptions<'_>,
) -> Result<Option<(CanonicalEvent, Option<crate::usage::Contribution>)>, ProcessError> {
    crate::colony::key_colony_name(&mut event, opts.colony);
    if policy_for(&event, opts).apply_quietly(&mut event).is_err() {
        return Ok(None);
    }
    let contribution = contribution_in_range(&event)?;
    Ok(Some((event, contribution)))
}

/// The policy for `event`: a keyer that shares names (the tenant chose `names`, the user consented)
/// widens it by `colony_name` for the one kind that carries it — a rare event, so the widened copy is
/// made here.
fn policy_for<'a>(event: &CanonicalEvent, opts: &ProcessOptions<'a>) -> Cow<'a, Policy> {
    match event.kind == crate::EventKind::ColonyCreated
        && opts.colony.is_some_and(|k| k.shares_names())
    {
        true => Cow::Owned(opts.policy.with_colony_names()),
        false => Cow::Borrowed(opts.policy),
    }
}

/// Refuses a kept event whose values the ingest would refuse (tokens above 10^12, a negative or too large
/// cost, credits or duration: [`crate::usage::contribution_of`], on the event as it would be sent), so the
/// producer hears of it in that event's verdict instead of the event being committed, pushed and
/// dead-lettered by the ingest.
fn within_range(outcome: Outcome) -> Result<Outcome, ProcessError> {
    if let Outcome::Kept { event, .. } = &outcome {
        contribution_in_range(event)?;
    }
    Ok(outcome)
}

/// The event's usage contribution, or the range error [`within_range`] refuses it with.
fn contribution_in_range(
    event: &CanonicalEvent,
) -> Result<Option<crate::usage::Contribution>, ProcessError> {
    crate::usage::contribution_of(event).map_err(|why| ProcessError::OutOfRange(why.to_string()))
}

/// The filter verdict (and the native type) of a line that the pipeline filters by its native type
/// alone, found without building a value; `None` when it must take the whole path ([`process_value`] on the parsed line).
///
/// Most of a Hive debug log is streaming deltas and chatty types (about three lines in four), and
/// [`process_value`] drops them after reading only `type`: building their value trees first was most of
/// the intake's work. This reads the line once with borrowed fields and skips every other value.
///
/// The verdict is exactly [`process_value`]'s whenever this returns one: the line is one JSON object
/// (same grammar, nesting limit and trailing-character rule as serde_json's value parser), it names
/// neither `schema_version` nor `event_id` (so it is not canonical, whatever their values), it has
/// exactly one `type` and it is a string, and the type is not durable. Anything else — a duplicate key,
/// a non-string type, a canonical event, a durable type, bad JSON — is `None`, and the caller's full
/// path decides (and words any error) as before. One difference is deliberate: a number too large for
/// an f64 (`1e400`) inside a filtered line is skipped here where the value parser would refuse the line;
/// the line is filtered either way, not kept.
///
/// The shortcuts before the `from_slice` (the look at the first `"type"` that sends a durable line
/// straight to the full path, and the bracket count before the nesting walk) are measured together by
/// `cargo bench --workspace --bench scanners` (agent): over the 1,000 lines of
/// `agent/benches/fixtures/hive-mixed-1000.jsonl`, medians of 9 rounds of 50 passes, two runs, this
/// takes 0.64–0.65 ms a pass and the plain `from_slice` of the same fields then the same classification
/// 0.72–0.78 ms, 1.13–1.21× more (the same verdicts on every line).
pub fn sniff_filtered(line: &str) -> Option<(FilterReason, Cow<'_, str>)> {
    use serde::de::IgnoredAny;

    /// Present (whatever its value, null included) or not.
    #[derive(Default)]
    struct Present(bool);
    impl<'de> serde::Deserialize<'de> for Present {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Present, D::Error> {
            IgnoredAny::deserialize(d).map(|_| Present(true))
        }
    }
    #[derive(serde::Deserialize)]
    struct Sniff<'a> {
        #[serde(rename = "type", borrow)]
        native_type: Option<Cow<'a, str>>,
        #[serde(default)]
        schema_version: Present,
        #[serde(default)]
        event_id: Present,
    }

    // A struct also deserializes from an array: only an object is a native event.
    let bytes = line.as_bytes();
    if line.trim_ascii_start().as_bytes().first() != Some(&b'{') {
        return None;
    }
    // A quarter of a Hive debug log is durable events, which the skim would read only to return None.
    if first_type_is_durable(bytes) {
        return None;
    }
    // serde_json skims ignored values without its recursion limit: a line nested deeper than the value
    // parser allows is left to the full path (which refuses it).
    // Nesting is bounded by the count of opening brackets (strings included), which a vectorised count
    // finds far faster than the byte-by-byte walk: most lines hold a few dozen.
    if openers(bytes) > MAX_SNIFF_DEPTH && nesting(bytes) > MAX_SNIFF_DEPTH {
        return None;
    }
    // The line is text (its callers check UTF-8 once for the whole line): read as such, serde_json does
    // not check each string of it again.
    let sniff: Sniff<'_> = serde_json::from_str(line).ok()?;
    if sniff.schema_version.0 && sniff.event_id.0 {
        return None;
    }
    let native_type = sniff.native_type?;
    let reason = match hive::classify(&native_type) {
        None => FilterReason::UnknownType,
        Some(hive::Classification::Filtered(reason)) => reason,
        Some(hive::Classification::Durable(..)) => return None,
    };
    Some((reason, native_type))
}

/// Deeper lines than this go the full path (serde_json's value parser refuses past 128).
pub(crate) const MAX_SNIFF_DEPTH: usize = 100;

/// True when the first `"type"` of `line` is followed by `: "T"` where `T` (without escapes) is a durable
/// Hive type. Only a shortcut to the full path, so it may be wrong either way without changing an outcome:
/// a nested `type` sends a filtered line the slow way, a false here leaves the line to the skim. Inside a
/// JSON string a quote is escaped, so `"type"` there never matches a string's content.
fn first_type_is_durable(line: &[u8]) -> bool {
    let Some(at) = memchr::memmem::find(line, b"\"type\"") else {
        return false;
    };
    let rest = line[at + 6..].trim_ascii_start();
    let Some(rest) = rest.strip_prefix(b":").map(<[u8]>::trim_ascii_start) else {
        return false;
    };
    let Some(rest) = rest.strip_prefix(b"\"") else {
        return false;
    };
    let Some(end) = memchr::memchr2(b'"', b'\\', rest) else {
        return false;
    };
    rest[end] == b'"'
        && std::str::from_utf8(&rest[..end])
            .ok()
            .and_then(hive::classify)
            .is_some_and(|c| matches!(c, hive::Classification::Durable(..)))
}

/// Opening brackets in `line`, inside strings too: an upper bound of [`nesting`]. Counted in chunks of
/// 255 bytes with a byte-wide counter (the `usize` sum it replaced was 5% of the intake's parse in a
/// profile; the `scanners` bench measures it only together with the durable-type look, see
/// [`sniff_filtered`]).
pub(crate) fn openers(line: &[u8]) -> usize {
    line.chunks(255)
        .map(|c| {
            usize::from(
                c.iter()
                    .fold(0u8, |n, &b| n + u8::from(b == b'{' || b == b'[')),
            )
        })
        .sum::<usize>()
}

/// The deepest nesting of arrays and objects in `line`, brackets inside strings not counted.
pub(crate) fn nesting(line: &[u8]) -> usize {
    let (mut depth, mut max, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in line {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// Processes a decoded OTLP export: each span, log record or data point is mapped ([`crate::otel`]) and
/// each event redacted by the same policy step as Hive's. One result per record, in order.
pub fn process_otlp(
    request: &otel::Request,
    policy: &Policy,
) -> Vec<Result<Outcome, ProcessError>> {
    otel::map_request(request)
        .into_iter()
        .map(|record| match record {
            // A value the ingest would refuse (a token count above 10^12, a negative or too large cost) is
            // refused here, so the exporter hears of it in `partial_success` instead of the event being
            // dead-lettered after a push.
            otel::Record::Event(event) => match crate::usage::contribution_of(&event) {
                Err(why) => Err(ProcessError::Otlp(why.to_string())),
                Ok(_) => redact(event, policy),
            },
            otel::Record::Filtered {
                native_type,
                reason,
            } => Ok(Outcome::Filtered {
                native_type,
                reason,
            }),
            otel::Record::Rejected { reason, .. } => Err(ProcessError::Otlp(reason)),
        })
        .collect()
}

/// Describes why a canonical event does not parse by the path of the offending field only (as a JSON
/// pointer, e.g. `/usage/input_tokens`; `/x (missing)` for a missing field; `(root)` for the object
/// itself): serde's own messages quote values, and error texts end up in logs and dead letters. Only the
/// failure path pays for it (the event is deserialised a second time, noting the path).
fn canonical_error(value: &Value) -> ProcessError {
    match serde_path_to_error::deserialize::<_, CanonicalEvent>(value) {
        Ok(_) => {
            ProcessError::Canonical("a field has the wrong type or an out-of-range value".into())
        }
        Err(e) => ProcessError::Canonical(format!(
            "invalid or missing fields at {}",
            error_pointer(e.path(), &e.inner().to_string())
        )),
    }
}

/// The JSON pointer of a deserialisation error's path, with a missing field's name appended (the only
/// part of serde's message that names no value: a field of the schema).
fn error_pointer(path: &serde_path_to_error::Path, message: &str) -> String {
    use serde_path_to_error::Segment;
    let mut pointer = String::new();
    let segments: Vec<&Segment> = path.iter().collect();
    // An unknown field's name is the input's, not the schema's (it may carry anything): its parent is
    // named instead.
    let unknown = message.starts_with("unknown field");
    let named = if unknown {
        &segments[..segments.len().saturating_sub(1)]
    } else {
        &segments[..]
    };
    for segment in named {
        match segment {
            Segment::Seq { index } => pointer.push_str(&format!("/{index}")),
            Segment::Map { key } => {
                pointer.push_str(&format!("/{}", key.replace('~', "~0").replace('/', "~1")))
            }
            Segment::Enum { variant } => pointer.push_str(&format!("/{variant}")),
            Segment::Unknown => pointer.push_str("/?"),
        }
    }
    let missing = message
        .strip_prefix("missing field `")
        .and_then(|rest| rest.split('`').next())
        .filter(|field| field.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'));
    match missing {
        Some(field) => format!("{pointer}/{field} (missing)"),
        None if pointer.is_empty() => "(root)".to_string(),
        None => pointer,
    }
}

/// Applies the policy to a canonical event.
pub fn redact(mut event: CanonicalEvent, policy: &Policy) -> Result<Outcome, ProcessError> {
    match policy.apply(&mut event) {
        Ok(report) => Ok(Outcome::Kept {
            event: Box::new(event),
            report,
        }),
        Err(_) => Ok(Outcome::Filtered {
            native_type: event.native_type,
            reason: FilterReason::KindNotAllowed,
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The sniff's verdict is the full path's whenever it gives one, on lines of every shape.
    #[test]
    fn sniff_agrees_with_the_full_path() {
        let policy = Policy::default_policy();
        let opts = ProcessOptions::new(&policy);
        let lines = [
            r#"{"type": "llm_text_delta", "stream_id": "queen", "data": {"content": "hi"}, "seq": 1}"#,
            r#"{"type": "node_loop_iteration", "data": {"n": [1, {"a": null}]}}"#,
            r#"{"type": "context_usage_updated"}"#,
            r#"{"type": "no_such_type_at_all", "x": 1}"#,
            r#"{"type": "llm_turn_complete", "execution_id": "s", "timestamp": "2026-11-03T10:00:00", "data": {}}"#,
            r#"{"type": "llm_text_delta", "type": "llm_turn_complete"}"#,
            r#"{"type": 7}"#,
            r#"{"data": {}}"#,
            r#"{"type": "llm_text_delta", "schema_version": null, "event_id": null}"#,
            r#"{"type": "llm_text_delta", "schema_version": 1}"#,
            r#"["type", "llm_text_delta"]"#,
            r#"{"type": "llm_text_delta"} x"#,
            r#"{"type": "llm_text_delta""#,
            r#"{"type": "llm_text_delta"}"#,
            r#"  {"type": "llm_text_delta"}  "#,
        ];
        let mut sniffed = 0;
        for line in lines {
            let Some((reason, name)) = sniff_filtered(line) else {
                continue;
            };
            sniffed += 1;
            let v: Value = serde_json::from_str(line).unwrap();
            match process_value(&v, &opts) {
                Ok(Outcome::Filtered {
                    reason: r,
                    native_type,
                }) => assert_eq!((r, native_type.as_str()), (reason, &*name), "{line}"),
                other => panic!("{line}: sniffed {reason:?}, full path {other:?}"),
            }
        }
        assert_eq!(sniffed, 7);
        let deep = format!(
            "{{\"type\": \"llm_text_delta\", \"d\": {}{}}}",
            "[".repeat(200),
            "]".repeat(200)
        );
        assert_eq!(sniff_filtered(&deep), None, "nesting past the limit");
    }

    /// The shortcut for durable lines reads the first `"type": "…"` only; anything it is unsure of goes
    /// on to the skim, and a line it sends the full way is decided there (a nested durable `type`
    /// in a delta still comes out filtered).
    #[test]
    fn only_a_plain_durable_first_type_skips_the_skim() {
        let durable = [
            r#"{"type": "llm_turn_complete", "data": {}}"#,
            r#"{"type"  :	"tool_call_completed"}"#,
            r#"{"data": {"type": "llm_turn_complete"}, "type": "llm_text_delta"}"#,
        ];
        for line in durable {
            assert!(first_type_is_durable(line.as_bytes()), "{line}");
            assert_eq!(sniff_filtered(line), None, "{line}");
        }
        let not = [
            r#"{"type": "llm_text_delta"}"#,
            r#"{"type": "llm_turn_\u0063omplete"}"#,
            r#"{"k": "type", "type": "llm_turn_complete"}"#,
            r#"{"type": 7}"#,
            r#"{"data": "\"type\": \"llm_turn_complete\"", "type": "llm_text_delta"}"#,
            r#"{"type": "llm_turn_complete"#,
        ];
        for line in not {
            assert!(!first_type_is_durable(line.as_bytes()), "{line}");
        }
        let policy = Policy::default_policy();
        let v: Value = serde_json::from_str(durable[2]).unwrap();
        assert!(matches!(
            process_value(&v, &ProcessOptions::new(&policy)),
            Ok(Outcome::Filtered { .. })
        ));
        // An escaped quote ends no string: the delta whose content quotes a durable type is sniffed.
        assert!(sniff_filtered(not[4]).is_some());
    }

    /// Every line of the fixture day's Hive home, and the intake benchmark's mixed stream, comes out of
    /// [`process_owned`] exactly as out of [`process_value`], read from a file (a source identity) or
    /// posted (none).
    #[test]
    fn the_owned_path_answers_as_process_value_on_the_fixture_day() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files = vec![root.join("agent/benches/fixtures/hive-mixed-1000.jsonl")];
        let mut dirs = vec![root.join("tests/fixtures/hive/day")];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                match path.is_dir() {
                    true => dirs.push(path),
                    false if path.extension().is_some_and(|e| e == "jsonl") => files.push(path),
                    false => {}
                }
            }
        }
        let policy = Policy::default_policy();
        let (mut lines, mut kept) = (0, 0);
        for file in &files {
            for line in std::fs::read_to_string(file).unwrap().lines() {
                let Ok(v) = serde_json::from_str::<Value>(line) else {
                    continue;
                };
                for source in [None, Some("file:1:2:40")] {
                    let opts = ProcessOptions {
                        zone: crate::hive::Zone::Utc,
                        source_identity: source,
                        session_hint: Some("session_hint"),
                        ..ProcessOptions::new(&policy)
                    };
                    let old = process_value(&v, &opts);
                    kept += usize::from(matches!(old, Ok(Outcome::Kept { .. })));
                    assert_eq!(
                        process_owned(v.clone(), &opts),
                        old,
                        "{}: {line}",
                        file.display()
                    );
                }
                lines += 1;
            }
        }
        assert!(
            files.len() >= 6 && lines > 1500 && kept > 600,
            "{} files, {lines} lines, {kept} kept",
            files.len()
        );
    }

    #[test]
    fn errors_never_quote_the_input() {
        let policy = Policy::default_policy();
        let opts = ProcessOptions::new(&policy);
        let bad_native = json!({"type": "llm_turn_complete", "execution_id": "s", "timestamp": "zzcanary1 /home/a"});
        let bad_canonical =
            json!({"schema_version": 1, "event_id": "zzcanary2", "type": "llm.turn", "data": {}});
        let wrong_type = json!({"schema_version": "zzcanary3", "event_id": "6a1f5c2e-9b3d-4e7a-8c10-2f4bd5e6a701"});
        for v in [bad_native, bad_canonical, wrong_type] {
            let err = process_value(&v, &opts).unwrap_err().to_string();
            assert!(!err.contains("zzcanary") && !err.contains("/home"), "{err}");
        }
        let err = process_value(
            &json!({"schema_version": 1, "event_id": "x", "type": "llm.turn"}),
            &opts,
        )
        .unwrap_err();
        assert!(err.to_string().contains("/event_id"), "{err}");
    }

    /// A canonical event that does not parse is described by the pointer of its first bad field: a
    /// nested value, a missing field by name, an unknown field (whose name may be anything) as the root.
    #[test]
    fn a_bad_canonical_event_is_named_by_its_field() {
        let policy = Policy::default_policy();
        let opts = ProcessOptions::new(&policy);
        let good = json!({
            "schema_version": 1, "event_id": "6a1f5c2e-9b3d-4e7a-8c10-2f4bd5e6a701", "type": "llm.turn",
            "occurred_at": "2026-11-03T09:15:09.412338Z", "runtime": "hive", "session_id": "s1",
            "agent_role": "queen", "native_type": "llm_turn_complete", "data": {"input_tokens": 5}
        });
        assert!(process_value(&good, &opts).is_ok());
        let said = |change: &dyn Fn(&mut Value)| {
            let mut bad = good.clone();
            change(&mut bad);
            process_value(&bad, &opts).unwrap_err().to_string()
        };
        let err = said(&|v| v["occurred_at"] = "zzcanary yesterday".into());
        assert!(
            err.ends_with("at /occurred_at") && !err.contains("zzcanary"),
            "{err}"
        );
        let err = said(&|v| v["agent_role"] = 7.into());
        assert!(err.ends_with("at /agent_role"), "{err}");
        let err = said(&|v| {
            v.as_object_mut().unwrap().remove("runtime");
        });
        assert!(err.ends_with("at /runtime (missing)"), "{err}");
        let err = said(&|v| v["zzcanary_prompt"] = "hello".into());
        assert!(
            err.ends_with("at (root)") && !err.contains("zzcanary"),
            "{err}"
        );
    }
}
