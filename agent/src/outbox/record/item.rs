//! What producers hand to the outbox: already processed (redacted) events, filter verdicts and unreadable
//! inputs. Preparing an event (serialising it, extracting its usage) happens on the producer's thread, so
//! the writer thread only runs SQL.

use std::sync::Arc;

use apiary_schema::usage::{self, contribution_of, Contribution};
use apiary_schema::work::call_key;
use apiary_schema::{CanonicalEvent, EventKind, Outcome};
use serde::Serialize;
use uuid::Uuid;

/// A kept, redacted event ready to be written.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedEvent {
    pub event_id: Uuid,
    pub kind: EventKind,
    pub session_id: Option<String>,
    pub parent_session_id: Option<String>,
    /// Unix milliseconds.
    pub occurred_at_ms: i64,
    /// The redacted canonical event as JSON: exactly what is uploaded or exported.
    pub body: String,
    /// What the event adds to the local usage table (model, totals). Boxed like `status`: an item is
    /// held from the producer to its commit.
    pub usage: Option<Box<(String, UsageAgg)>>,
    /// What the event means for the session's local status (None for device-level events). Behind a
    /// pointer: most items are small and this would double every one of them; shared, so the writer's
    /// group holds it without a copy.
    pub status: Option<Arc<apiary_schema::status::Input>>,
    /// What the event means for the session's work (tasks, triggers, tool call in flight); None for the
    /// kinds [`apiary_schema::work::reads`] does not read.
    pub work: Option<Arc<apiary_schema::work::OwnedFact>>,
    /// A tool call's start or completion, for the duration pairing (the `durations` module); None for
    /// other events. Boxed like `status`.
    pub tool: Option<Box<ToolEdge>>,
}

impl PreparedEvent {
    /// Serialises `event` and extracts its usage contribution.
    pub fn new(event: &CanonicalEvent) -> PreparedEvent {
        PreparedEvent::with_contribution(event, contribution_of(event))
    }

    /// [`PreparedEvent::new`] with the event's usage contribution already found
    /// ([`contribution_of`] of it: the intake's range check computes it).
    pub fn with_contribution(
        event: &CanonicalEvent,
        contribution: Result<Option<Contribution>, usage::UsageError>,
    ) -> PreparedEvent {
        let mut body = serde_json::to_string(event).expect("a canonical event serialises");
        // The serializer's buffer grows by doubling; an event is held until its commit (a request's
        // worth of them at once), so it keeps only its own length.
        body.shrink_to_fit();
        PreparedEvent {
            event_id: event.event_id,
            kind: event.kind,
            session_id: event.session_id.clone(),
            parent_session_id: event.parent_session_id.clone(),
            occurred_at_ms: event.occurred_at.timestamp_millis(),
            usage: usage_of(event, contribution).map(Box::new),
            status: apiary_schema::status::Input::of(event, event.occurred_at).map(Arc::new),
            work: apiary_schema::work::OwnedFact::of(event, event.occurred_at).map(Arc::new),
            tool: ToolEdge::of(event).map(|mut t| {
                if t.completed && !t.timed {
                    t.duration_slot = Some(DurationSlot::of(event, &body));
                }
                Box::new(t)
            }),
            body,
        }
    }
}

/// Where `data.duration_ms` goes in a prepared body, so the writer can time a completion by inserting
/// the field's text instead of parsing the body and serialising it again (that was 8% of the writer's
/// time on Hive's mixed stream). `data` is the body's last field and a map in key order, so the field's
/// place is fixed by the keys before it; the spliced body is byte for byte the one a serialisation of
/// the event with the field would give (see the tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurationSlot {
    /// Byte offset in the body.
    at: usize,
    /// A key of `data` comes before the field (insert `,"duration_ms":N`); else the field is the first
    /// key, followed by a comma unless `data` ends right there.
    after_key: bool,
}

impl DurationSlot {
    const FIELD: &'static str = "duration_ms";

    /// The slot in `body`, the serialisation of `event`.
    fn of(event: &CanonicalEvent, body: &str) -> DurationSlot {
        let data_len = serde_json::to_string(&event.data)
            .expect("data serialises")
            .len();
        // `..."data":{...}}`: the map ends one byte before the body does.
        let data_at = body.len() - 1 - data_len;
        // The keys before the field, borrowed: a map serialises the same whatever owns its entries.
        let before: std::collections::BTreeMap<&String, &serde_json::Value> = event
            .data
            .iter()
            .take_while(|(k, _)| k.as_str() < Self::FIELD)
            .collect();
        let before_len = serde_json::to_string(&before)
            .expect("data serialises")
            .len();
        DurationSlot {
            // `{` alone when no key comes before; else up to (not including) the closing `}`.
            at: data_at + before_len - 1,
            after_key: !before.is_empty(),
        }
    }

    /// `body` with `"duration_ms":ms` in this slot.
    pub fn insert(self, body: &str, ms: i64) -> String {
        let field = format!("\"{}\":{ms}", Self::FIELD);
        let mut out = String::with_capacity(body.len() + field.len() + 1);
        out.push_str(&body[..self.at]);
        if self.after_key {
            out.push(',');
            out.push_str(&field);
        } else {
            out.push_str(&field);
            if !body[self.at..].starts_with('}') {
                out.push(',');
            }
        }
        out.push_str(&body[self.at..]);
        out
    }
}

/// One side of a tool call, as the pairing reads it (taken on the producer's thread).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolEdge {
    pub session: String,
    /// [`apiary_schema::work::CallKey::text`].
    pub key: String,
    /// A completion (else a start).
    pub completed: bool,
    /// The event's time, Unix microseconds.
    pub at_us: i64,
    /// A completion that carries `duration_ms` already (the runtime's, or attached here): kept as is.
    pub timed: bool,
    /// Where an untimed completion's `duration_ms` goes in its body (set by [`PreparedEvent::new`]).
    pub duration_slot: Option<DurationSlot>,
}

impl ToolEdge {
    /// The edge of a session's `tool.call` start or completion with a pairing key; None otherwise.
    pub fn of(e: &CanonicalEvent) -> Option<ToolEdge> {
        if e.kind != EventKind::ToolCall {
            return None;
        }
        let completed = match e.data_str("status")? {
            "started" => false,
            "completed" => true,
            _ => return None,
        };
        let key = call_key(&e.data, e.execution_id.as_deref());
        if !key.pairs() {
            return None;
        }
        Some(ToolEdge {
            session: e.session_id.clone()?,
            key: key.text(),
            completed,
            at_us: e.occurred_at.timestamp_micros(),
            timed: e.data.contains_key("duration_ms"),
            duration_slot: None,
        })
    }
}

/// One input to the outbox.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// A durable event: becomes pending (or a duplicate).
    Kept(PreparedEvent),
    /// `count` events that are not durable, for one reason: counted as received and filtered, nothing
    /// stored. (The HTTP intake folds a request's filtered events into one item per reason.)
    Filtered { reason: String, count: u64 },
    /// Unreadable: counted as received and rejected, with a dead-letter row holding `source`, position and
    /// reason (never content).
    Malformed {
        source: String,
        line_no: Option<u64>,
        offset: Option<u64>,
        reason: String,
    },
    /// `count` unreadable inputs past a request's dead-letter cap: counted as received and rejected,
    /// with one dead-letter row for all of them (its reason says how many), so a hostile request cannot
    /// write a row per garbage element.
    MalformedMany {
        source: String,
        count: u64,
        reason: String,
    },
}

impl Item {
    /// How many received events this item stands for.
    pub fn received(&self) -> u64 {
        match self {
            Item::Filtered { count, .. } | Item::MalformedMany { count, .. } => *count,
            Item::Kept(_) | Item::Malformed { .. } => 1,
        }
    }

    /// Converts a pipeline outcome.
    pub fn from_outcome(outcome: &Outcome) -> Item {
        match outcome {
            Outcome::Kept { event, .. } => Item::Kept(PreparedEvent::new(event)),
            Outcome::Filtered { reason, .. } => Item::Filtered {
                reason: reason.as_str().to_string(),
                count: 1,
            },
        }
    }
}

/// Usage totals of one (session, model), as kept in the local `usage` table: sums of the shared
/// [`Contribution`]s, integers throughout (cost in nano-USD, credits in micro-credits), so they are exact
/// and agree with the ingest's rollups.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageAgg {
    pub parent_session_id: Option<String>,
    pub llm_calls: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
    pub cache_creation_tokens: i64,
    /// Cost in nano-USD.
    pub cost_nanos: i64,
    pub unpriced_turns: i64,
    /// Credits in micro-credits.
    pub credits_micros: i64,
    pub tool_calls_started: i64,
    pub tool_calls: i64,
    pub tool_errors: i64,
    /// Summed durations of the completed tool calls that have one, in milliseconds.
    pub tool_duration_ms: i64,
    pub events: i64,
    /// Unix milliseconds of the first and last event (not shown).
    pub first_at: i64,
    pub last_at: i64,
}

/// How a [`UsageAgg`] is shown by the local API: the names and units it always had (`cost_usd` and
/// `credits` as numbers, now computed from the exact integers), plus the exact `cost_nanos`.
#[derive(Serialize)]
struct UsageView {
    llm_calls: i64,
    input_tokens: i64,
    output_tokens: i64,
    cached_tokens: i64,
    cache_creation_tokens: i64,
    cost_usd: f64,
    cost_nanos: i64,
    unpriced_turns: i64,
    credits: f64,
    tool_calls_started: i64,
    tool_calls: i64,
    tool_errors: i64,
    tool_duration_ms: i64,
    events: i64,
}

impl Serialize for UsageAgg {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        UsageView {
            llm_calls: self.llm_calls,
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cached_tokens: self.cached_tokens,
            cache_creation_tokens: self.cache_creation_tokens,
            cost_usd: usage::nanos_to_usd(self.cost_nanos),
            cost_nanos: self.cost_nanos,
            unpriced_turns: self.unpriced_turns,
            credits: self.credits_micros as f64 / 1e6,
            tool_calls_started: self.tool_calls_started,
            tool_calls: self.tool_calls,
            tool_errors: self.tool_errors,
            tool_duration_ms: self.tool_duration_ms,
            events: self.events,
        }
        .serialize(s)
    }
}

impl UsageAgg {
    /// Adds `o` (saturating: a local sum never wraps).
    pub fn add(&mut self, o: &UsageAgg) {
        if self.parent_session_id.is_none() {
            self.parent_session_id.clone_from(&o.parent_session_id);
        }
        let sums = [
            (&mut self.llm_calls, o.llm_calls),
            (&mut self.input_tokens, o.input_tokens),
            (&mut self.output_tokens, o.output_tokens),
            (&mut self.cached_tokens, o.cached_tokens),
            (&mut self.cache_creation_tokens, o.cache_creation_tokens),
            (&mut self.cost_nanos, o.cost_nanos),
            (&mut self.unpriced_turns, o.unpriced_turns),
            (&mut self.credits_micros, o.credits_micros),
            (&mut self.tool_calls_started, o.tool_calls_started),
            (&mut self.tool_calls, o.tool_calls),
            (&mut self.tool_errors, o.tool_errors),
            (&mut self.tool_duration_ms, o.tool_duration_ms),
            (&mut self.events, o.events),
        ];
        for (sum, v) in sums {
            *sum = sum.saturating_add(v);
        }
        self.first_at = if self.first_at == 0 {
            o.first_at
        } else {
            self.first_at.min(o.first_at)
        };
        self.last_at = self.last_at.max(o.last_at);
    }

    /// One event's totals from its shared contribution.
    fn of(c: Contribution, parent_session_id: Option<String>, at_ms: i64) -> UsageAgg {
        UsageAgg {
            parent_session_id,
            llm_calls: c.llm_calls,
            input_tokens: c.input_tokens,
            output_tokens: c.output_tokens,
            cached_tokens: c.cached_tokens,
            cache_creation_tokens: c.cache_creation_tokens,
            cost_nanos: c.cost_nanos,
            unpriced_turns: c.unpriced_turns,
            credits_micros: c.credits_micros,
            tool_calls_started: c.tool_calls_started,
            tool_calls: c.tool_calls,
            tool_errors: c.tool_errors,
            tool_duration_ms: c.tool_duration_ms,
            events: c.events,
            first_at: at_ms,
            last_at: at_ms,
        }
    }
}

/// The usage an event contributes, keyed by model (`""` for non-LLM events), by the shared rule
/// ([`contribution_of`]). Device-level events have none; neither has an event whose values are out of
/// range: the ingest refuses it (and the push dead-letters it with that reason), so counting it here
/// would make the device's totals disagree with the cloud's.
fn usage_of(
    e: &CanonicalEvent,
    contribution: Result<Option<Contribution>, usage::UsageError>,
) -> Option<(String, UsageAgg)> {
    e.session_id.as_ref()?;
    match contribution {
        Ok(c) => {
            let mut c = c?;
            let model = std::mem::take(&mut c.model);
            let at = e.occurred_at.timestamp_millis();
            Some((model, UsageAgg::of(c, e.parent_session_id.clone(), at)))
        }
        Err(why) => {
            tracing::warn!(event_id = %e.event_id, %why, "event not counted in local usage: the ingest will refuse it");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A `tool.call` completion of `data`, prepared.
    fn completion(data: serde_json::Value) -> (CanonicalEvent, PreparedEvent) {
        let event: CanonicalEvent = serde_json::from_value(json!({
            "schema_version": 1,
            "event_id": "8b0f8f5e-35a4-4c1b-9d54-0c55f3b1d7a1",
            "type": "tool.call",
            "occurred_at": "2026-11-03T09:00:01.5Z",
            "runtime": "hive",
            "session_id": "s1",
            "agent_role": "queen",
            "native_type": "tool_call_completed",
            "data": data,
        }))
        .unwrap();
        let prepared = PreparedEvent::new(&event);
        (event, prepared)
    }

    #[test]
    fn a_duration_inserted_in_its_slot_is_the_serialisation_of_the_event_with_it() {
        let cases = [
            json!({"status": "completed", "tool_use_id": "t1"}),
            json!({"status": "completed", "tool_use_id": "t1", "a_first": 1, "dz": true}),
            json!({"status": "completed", "tool_use_id": "t1", "cost_usd": 0.5, "e": "x"}),
            json!({"status": "completed", "tool_use_id": "t1", "duration": 3}),
            json!({"status": "completed", "tool_use_id": "t1", "durationa": 3, "duration_l": 1}),
        ];
        for data in cases {
            let (mut event, prepared) = completion(data.clone());
            let slot = prepared.tool.as_ref().and_then(|t| t.duration_slot);
            let slot = slot.unwrap_or_else(|| panic!("an untimed completion has a slot: {data}"));
            for ms in [0, 7, 123_456_789] {
                event.data.insert("duration_ms".into(), ms.into());
                let expected = serde_json::to_string(&event).unwrap();
                assert_eq!(slot.insert(&prepared.body, ms), expected, "{data} {ms}");
            }
        }
    }

    #[test]
    fn a_slot_places_the_field_in_a_data_map_of_any_shape() {
        // Shapes a paired completion never has (it holds `status` and a key after the field), for the
        // slot on its own: nothing in `data`, keys only before it, keys only after it.
        for data in [
            json!({}),
            json!({"a": 1}),
            json!({"z": 1}),
            json!({"a": 1, "z": [2]}),
        ] {
            let (mut event, _) = completion(data.clone());
            let body = serde_json::to_string(&event).unwrap();
            let slot = DurationSlot::of(&event, &body);
            event.data.insert("duration_ms".into(), 42.into());
            let expected = serde_json::to_string(&event).unwrap();
            assert_eq!(slot.insert(&body, 42), expected, "{data}");
        }
    }

    #[test]
    fn only_untimed_completions_with_a_pairing_key_get_a_slot() {
        let (_, timed) =
            completion(json!({"status": "completed", "tool_use_id": "t", "duration_ms": 4}));
        assert_eq!(timed.tool.as_ref().map(|t| t.duration_slot), Some(None));
        let (_, start) = completion(json!({"status": "started", "tool_use_id": "t"}));
        assert_eq!(start.tool.as_ref().map(|t| t.duration_slot), Some(None));
        let (_, unpaired) = completion(json!({"status": "completed", "tool_name": "grep"}));
        assert!(unpaired.tool.is_none());
    }
}
