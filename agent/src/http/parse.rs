//! The intake parser: a request body turned into outbox items, within bounds.
//!
//! [`super::split`] finds the events of a body (one JSON event, an array, or NDJSON; Hive-native or
//! canonical) without building values, and refuses a body of more than `intake.max_events` outright.
//! Each event is then parsed on its own: a durable Hive line in one pass that builds only what the policy
//! can keep ([`apiary_schema::line`]), any other event into a JSON value, processed
//! ([`apiary_schema::process_owned`]: classify, adapt, redact) and dropped, so at most one event's value
//! is alive at a time. An event longer than `intake.max_line_bytes` is an error without being parsed;
//! invalid UTF-8, bad JSON and nesting deeper than 128 levels are errors too. A line the pipeline filters
//! by its type alone (deltas, chatty types) is only skimmed ([`sniff_filtered`]): no value is built for
//! it.
//!
//! Unreadable events are received and rejected: the first [`MAX_DEAD_LETTERS`] of a request each get a
//! dead-letter row (line or index and reason, never content) and an entry in [`Parsed::errors`]; the rest
//! are only counted ([`Parsed::unlisted`]) and share one more dead-letter row
//! ([`Item::MalformedMany`]). Filtered events (deltas, chatty types) are counted by reason, one
//! [`Item::Filtered`] per reason. So a request costs at most its body, one event's value, its kept
//! events and a bounded number of items besides, whatever it holds.

use apiary_schema::hive::FilterReason;
use apiary_schema::line::{process_line, LineVerdict};
use apiary_schema::pipeline::sniff_filtered;
use apiary_schema::{process_owned, Outcome, ProcessOptions};
use serde::Serialize;
use serde_json::Value;

use super::split::{lines, split, Piece, Split, TooManyEvents};
use crate::config::IntakeSettings;
use crate::outbox::sanitize_reason;
use crate::outbox::{Item, PreparedEvent};

/// Unreadable events of one request that get a dead-letter row and an entry in the response each.
pub const MAX_DEAD_LETTERS: usize = 100;

/// The bounds of one request's parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `intake.max_line_bytes`: the longest event parsed.
    pub max_line: usize,
    /// `intake.max_events`: the most events in one body.
    pub max_events: usize,
}

impl From<&IntakeSettings> for Limits {
    fn from(s: &IntakeSettings) -> Limits {
        Limits {
            max_line: s.max_line_bytes,
            max_events: s.max_events,
        }
    }
}

/// One unreadable event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventError {
    /// 1-based line (NDJSON or a single value).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// 0-based position in a JSON array.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<u64>,
    pub error: String,
}

/// A request body turned into outbox items.
#[derive(Debug, Default)]
pub struct Parsed {
    /// Kept and filtered events, the listed unreadable ones, and (last) one
    /// [`Item::MalformedMany`] for the unlisted ones.
    pub items: Vec<Item>,
    /// The first [`MAX_DEAD_LETTERS`] unreadable events.
    pub errors: Vec<EventError>,
    /// Unreadable events past the first [`MAX_DEAD_LETTERS`]: counted, not listed.
    pub unlisted: u64,
    /// Filtered events by reason, folded into one [`Item::Filtered`] each at the end (a body of
    /// deltas costs a counter, not an item per event).
    filtered: std::collections::BTreeMap<String, u64>,
}

impl Parsed {
    /// Events received (every outcome).
    pub fn events(&self) -> u64 {
        self.items.iter().map(Item::received).sum()
    }

    /// Unreadable events (listed or not).
    pub fn rejected(&self) -> u64 {
        self.errors.len() as u64 + self.unlisted
    }

    fn push_value(&mut self, v: Value, opts: &ProcessOptions<'_>, piece: &Piece) {
        match process_owned(v, opts) {
            Ok(outcome) => self.push_outcome(&outcome),
            Err(e) => self.reject(piece.line, piece.index, e.to_string()),
        }
    }

    /// A kept event becomes an item; a filtered one is counted under its reason.
    pub(crate) fn push_outcome(&mut self, outcome: &Outcome) {
        match outcome {
            Outcome::Filtered { reason, .. } => self.count_filtered(*reason),
            kept => self.items.push(Item::from_outcome(kept)),
        }
    }

    fn count_filtered(&mut self, reason: FilterReason) {
        match self.filtered.get_mut(reason.as_str()) {
            Some(n) => *n += 1,
            None => {
                self.filtered.insert(reason.as_str().to_string(), 1);
            }
        }
    }

    pub(crate) fn reject(&mut self, line: Option<u64>, index: Option<u64>, error: String) {
        if self.errors.len() == MAX_DEAD_LETTERS {
            self.unlisted += 1;
            return;
        }
        let error = sanitize_reason(&error);
        self.items.push(Item::Malformed {
            source: "http".into(),
            line_no: line.or(index),
            offset: None,
            reason: error.clone(),
        });
        self.errors.push(EventError { line, index, error });
    }

    pub(crate) fn finish(&mut self) {
        for (reason, count) in std::mem::take(&mut self.filtered) {
            self.items.push(Item::Filtered { reason, count });
        }
        if self.unlisted > 0 {
            self.items.push(Item::MalformedMany {
                source: "http".into(),
                count: self.unlisted,
                reason: format!(
                    "{} more unreadable events in the same request (only the first {MAX_DEAD_LETTERS} \
                     get a dead letter of their own)",
                    self.unlisted
                ),
            });
        }
    }
}

/// Splits and processes a body (see the module notes); refuses a body of too many events.
pub fn parse_body(
    body: &[u8],
    opts: &ProcessOptions<'_>,
    limits: Limits,
) -> Result<Parsed, TooManyEvents> {
    match parse_ndjson(body, opts, limits) {
        Some(out) => Ok(out),
        None => parse_split(body, opts, limits),
    }
}

/// [`parse_body`] of any body: split first ([`split`]), then each event parsed.
fn parse_split(
    body: &[u8],
    opts: &ProcessOptions<'_>,
    limits: Limits,
) -> Result<Parsed, TooManyEvents> {
    let mut out = Parsed::default();
    match split(body, limits.max_line, limits.max_events)? {
        Split::Values(pieces) => {
            for piece in &pieces {
                let bytes = &body[piece.range.clone()];
                parse_piece(&mut out, bytes, piece, opts, limits, "event");
            }
        }
        Split::Lines(pieces) => {
            for piece in &pieces {
                let bytes = &body[piece.range.clone()];
                parse_piece(&mut out, bytes, piece, opts, limits, "line");
            }
        }
    }
    out.finish();
    Ok(out)
}

/// The usual body, NDJSON of one event per line, without [`split`]'s skim of the whole body before the
/// events' own parses (7.5% of the agent's CPU on Hive's mixed stream): each line is parsed as it
/// comes. `None` when the body is not that — its first non-empty line is not an object on one line, it
/// has more lines than a body may have events, or a line is not one JSON value (a pretty-printed
/// object, two values on a line, a bad line) — and the caller splits it as before and starts over.
/// Whenever this gives an answer, it is the one the split would give: every line being one value, the
/// split finds the same events at the same lines, and an event over `max_line` makes it read the body
/// line by line, with the same error.
fn parse_ndjson(body: &[u8], opts: &ProcessOptions<'_>, limits: Limits) -> Option<Parsed> {
    let first = body
        .split(|b| *b == b'\n')
        .map(<[u8]>::trim_ascii)
        .find(|l| !l.is_empty())?;
    if !(first.starts_with(b"{") && first.ends_with(b"}")) {
        return None;
    }
    let pieces = lines(body, limits.max_events).ok()?;
    let mut out = Parsed::default();
    for piece in &pieces {
        let bytes = &body[piece.range.clone()];
        if !parse_piece(&mut out, bytes, piece, opts, limits, "line") {
            return None;
        }
    }
    out.finish();
    Some(out)
}

/// One event (`what`: an "event" of an array or stream, or a "line"): checked, parsed, processed.
/// False when it is not one JSON value (it is rejected as such).
fn parse_piece(
    out: &mut Parsed,
    bytes: &[u8],
    piece: &Piece,
    opts: &ProcessOptions<'_>,
    limits: Limits,
    what: &str,
) -> bool {
    if bytes.len() > limits.max_line {
        let msg = format!(
            "{what} is {} bytes, over the limit of {} (intake.max_line_bytes)",
            bytes.len(),
            limits.max_line
        );
        out.reject(piece.line, piece.index, msg);
        return true;
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            let msg = format!("invalid UTF-8 at byte {}", e.valid_up_to());
            out.reject(piece.line, piece.index, msg);
            return true;
        }
    };
    // Deltas and chatty types (most of a Hive debug stream) are counted without building their value.
    if let Some((reason, _)) = sniff_filtered(text) {
        out.count_filtered(reason);
        return true;
    }
    // A durable Hive line is read in one pass, building only what the policy can keep.
    match process_line(text, opts) {
        Some(LineVerdict::Kept(event, contribution)) => {
            let prepared = PreparedEvent::with_contribution(&event, Ok(contribution));
            out.items.push(Item::Kept(prepared));
            return true;
        }
        Some(LineVerdict::Filtered { reason, .. }) => {
            out.count_filtered(reason);
            return true;
        }
        None => {}
    }
    match serde_json::from_str::<Value>(text) {
        Ok(v) => out.push_value(v, opts, piece),
        Err(e) => {
            out.reject(piece.line, piece.index, format!("invalid JSON: {e}"));
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_schema::hive::Zone;
    use apiary_schema::Policy;

    const TURN: &str = r#"{"type": "llm_turn_complete", "stream_id": "queen", "node_id": "queen", "execution_id": "s1", "data": {"model": "m", "input_tokens": 5, "output_tokens": 1, "cached_tokens": 0, "cache_creation_tokens": 0, "cost_usd": 0.1}, "timestamp": "2026-11-03T10:15:09.412338", "seq": SEQ}"#;

    fn turn(seq: u32) -> String {
        TURN.replace("SEQ", &seq.to_string())
    }

    /// Runs `f` with the default policy in UTC and lines of at most 4096 bytes.
    fn with_opts<R>(max_events: usize, f: impl FnOnce(&ProcessOptions<'_>, Limits) -> R) -> R {
        let policy = Policy::default_policy();
        let opts = ProcessOptions {
            policy: &policy,
            zone: Zone::Utc,
            source_identity: None,
            session_hint: None,
            colony: None,
        };
        let limits = Limits {
            max_line: 4096,
            max_events,
        };
        f(&opts, limits)
    }

    fn parse_with(body: &[u8], max_events: usize) -> Result<Parsed, TooManyEvents> {
        with_opts(max_events, |opts, limits| parse_body(body, opts, limits))
    }

    fn parse(body: &[u8]) -> Parsed {
        parse_with(body, 1000).unwrap()
    }

    fn kept(p: &Parsed) -> usize {
        p.items
            .iter()
            .filter(|i| matches!(i, Item::Kept(_)))
            .count()
    }

    #[test]
    fn ndjson_pretty_objects_and_arrays_all_split_into_events() {
        let ndjson = format!("{}\n\n{}\n", turn(1), turn(2));
        assert_eq!(kept(&parse(ndjson.as_bytes())), 2);
        let v: Value = serde_json::from_str(&turn(3)).unwrap();
        let pretty = serde_json::to_string_pretty(&v).unwrap();
        let p = parse(pretty.as_bytes());
        assert_eq!((kept(&p), p.errors.len()), (1, 0));
        let arr = format!("  [{}, {}, 7]", turn(4), turn(5));
        let p = parse(arr.as_bytes());
        assert_eq!(kept(&p), 2);
        assert_eq!(p.errors[0].index, Some(2));
    }

    /// The NDJSON path answers exactly as the split would, and leaves to it every body it cannot read
    /// line by line.
    #[test]
    fn the_ndjson_path_answers_as_the_split_does() {
        with_opts(5, ndjson_path_answers_as_the_split_does);
    }

    fn ndjson_path_answers_as_the_split_does(opts: &ProcessOptions<'_>, limits: Limits) {
        let delta = r#"{"type": "llm_text_delta", "stream_id": "queen", "data": {"content": "x"}, "seq": 9}"#;
        let pretty =
            serde_json::to_string_pretty(&serde_json::from_str::<Value>(&turn(3)).unwrap())
                .unwrap();
        let bodies = [
            format!("{}\n{delta}\r\n\n  {}  \n", turn(1), turn(2)),
            format!("{}\n7\n\"s\"\n{}\n", turn(1), "x".repeat(5000)),
            format!("{}\n{{oops\n{}\n", turn(1), turn(2)),
            format!("{} {}\n{}\n", turn(1), turn(2), turn(3)),
            format!("{}\n{pretty}\n", turn(1)),
            format!(
                "{}\n{{\"type\": \"x\", \"a\": {}{}}}",
                turn(1),
                "[".repeat(200),
                "]".repeat(200)
            ),
            format!(
                "{}\n{}\n{}\n{}\n{}\n{}\n",
                turn(1),
                turn(2),
                turn(3),
                turn(4),
                turn(5),
                turn(6)
            ),
        ];
        let mut fast = 0;
        for body in &bodies {
            let via_split = format!("{:?}", parse_split(body.as_bytes(), opts, limits));
            let answered = format!("{:?}", parse_body(body.as_bytes(), opts, limits));
            assert_eq!(answered, via_split, "{body}");
            fast += usize::from(parse_ndjson(body.as_bytes(), opts, limits).is_some());
        }
        // The first two are read line by line; the others fall back to the split.
        assert_eq!(fast, 2, "bodies the NDJSON path answered");
        // A pretty-printed object of more lines than a body may have events is one event.
        let p = parse_body(pretty.as_bytes(), opts, limits).unwrap();
        assert_eq!((kept(&p), p.errors.len()), (1, 0));
        let mut with_bad_utf8 = format!("{}\n", turn(1)).into_bytes();
        with_bad_utf8.extend_from_slice(b"{\"type\": \"\xff\"}\n");
        assert_eq!(
            format!("{:?}", parse_body(&with_bad_utf8, opts, limits)),
            format!("{:?}", parse_split(&with_bad_utf8, opts, limits))
        );
        assert!(parse_ndjson(&with_bad_utf8, opts, limits).is_some());
    }

    #[test]
    fn a_bad_line_gets_its_own_error_and_the_rest_is_kept() {
        let body = format!("{}\n{{oops\n{}\n{}\n", turn(1), turn(2), "x".repeat(5000));
        let p = parse(body.as_bytes());
        assert_eq!(kept(&p), 2);
        let lines: Vec<_> = p.errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, vec![Some(2), Some(4)]);
        assert!(p.errors[1].error.contains("over the limit"));
        assert_eq!(
            p.items.len(),
            4,
            "malformed lines are items too (dead-lettered)"
        );
    }

    #[test]
    fn an_event_over_the_line_limit_is_refused_even_when_it_is_valid_json() {
        let big = turn(1).replace("\"m\"", &format!("\"{}\"", "m".repeat(5000)));
        let p = parse(format!("{}\n{big}\n", turn(2)).as_bytes());
        assert_eq!((kept(&p), p.errors.len()), (1, 1));
        assert_eq!(p.errors[0].line, Some(2));
        let p = parse(format!("[{}, {big}]", turn(2)).as_bytes());
        assert_eq!((kept(&p), p.errors.len()), (1, 1));
        assert_eq!(p.errors[0].index, Some(1));
    }

    #[test]
    fn unreadable_events_past_the_cap_are_counted_in_one_dead_letter() {
        let n = MAX_DEAD_LETTERS + 250;
        let body = format!("[{}, {}]", turn(1), vec!["0"; n].join(","));
        let p = parse(body.as_bytes());
        assert_eq!(kept(&p), 1);
        assert_eq!(p.errors.len(), MAX_DEAD_LETTERS);
        assert_eq!(p.unlisted, 250);
        assert_eq!((p.rejected(), p.events()), (n as u64, n as u64 + 1));
        assert_eq!(p.items.len(), 1 + MAX_DEAD_LETTERS + 1);
        assert!(matches!(
            p.items.last(),
            Some(Item::MalformedMany { count: 250, .. })
        ));
    }

    #[test]
    fn a_body_of_more_events_than_the_limit_is_refused_before_parsing() {
        let zeros = format!("[{}]", vec!["0"; 1001].join(","));
        assert_eq!(
            parse_with(zeros.as_bytes(), 1000).unwrap_err(),
            TooManyEvents { limit: 1000 }
        );
        let lines = "x\n".repeat(1001);
        assert!(parse_with(lines.as_bytes(), 1000).is_err());
        assert_eq!(parse_with(lines.as_bytes(), 1001).unwrap().rejected(), 1001);
    }
}
