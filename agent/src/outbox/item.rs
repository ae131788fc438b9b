//! What producers hand to the outbox: already processed (redacted) events, filter verdicts and unreadable
//! inputs. Preparing an event (serialising it, extracting its usage) happens on the producer's thread, so
//! the writer thread only runs SQL.

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
    /// What the event adds to the local usage table.
    pub usage: Option<(String, UsageAgg)>,
    /// What the event means for the session's local status (None for device-level events). Boxed: most
    /// items are small and this would double every one of them.
    pub status: Option<Box<apiary_schema::status::Input>>,
}

impl PreparedEvent {
    /// Serialises `event` and extracts its usage contribution.
    pub fn new(event: &CanonicalEvent) -> PreparedEvent {
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
            body,
            usage: usage_of(event),
            status: apiary_schema::status::Input::of(event, event.occurred_at).map(Box::new),
        }
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

/// Usage totals of one (session, model), as kept in the local `usage` table.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UsageAgg {
    #[serde(skip)]
    pub parent_session_id: Option<String>,
    pub llm_calls: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
    pub cache_creation_tokens: i64,
    pub cost_usd: f64,
    pub unpriced_turns: i64,
    pub credits: f64,
    pub tool_calls_started: i64,
    pub tool_calls: i64,
    pub tool_errors: i64,
    pub events: i64,
    #[serde(skip)]
    pub first_at: i64,
    #[serde(skip)]
    pub last_at: i64,
}

impl UsageAgg {
    pub fn add(&mut self, o: &UsageAgg) {
        if self.parent_session_id.is_none() {
            self.parent_session_id.clone_from(&o.parent_session_id);
        }
        self.llm_calls += o.llm_calls;
        self.input_tokens += o.input_tokens;
        self.output_tokens += o.output_tokens;
        self.cached_tokens += o.cached_tokens;
        self.cache_creation_tokens += o.cache_creation_tokens;
        self.cost_usd += o.cost_usd;
        self.unpriced_turns += o.unpriced_turns;
        self.credits += o.credits;
        self.tool_calls_started += o.tool_calls_started;
        self.tool_calls += o.tool_calls;
        self.tool_errors += o.tool_errors;
        self.events += o.events;
        self.first_at = if self.first_at == 0 {
            o.first_at
        } else {
            self.first_at.min(o.first_at)
        };
        self.last_at = self.last_at.max(o.last_at);
    }
}

/// The usage an event contributes, keyed by model (`""` for non-LLM events). Device-level events have none.
fn usage_of(e: &CanonicalEvent) -> Option<(String, UsageAgg)> {
    e.session_id.as_ref()?;
    let at = e.occurred_at.timestamp_millis();
    let mut u = UsageAgg {
        parent_session_id: e.parent_session_id.clone(),
        events: 1,
        first_at: at,
        last_at: at,
        ..UsageAgg::default()
    };
    let mut model = String::new();
    let num = |k: &str| e.data.get(k).and_then(serde_json::Value::as_f64);
    match e.kind {
        EventKind::LlmTurn => {
            model = e.data_str("model").unwrap_or("").to_string();
            u.llm_calls = 1;
            u.input_tokens = e.data_u64("input_tokens") as i64;
            u.output_tokens = e.data_u64("output_tokens") as i64;
            u.cached_tokens = e.data_u64("cached_tokens") as i64;
            u.cache_creation_tokens = e.data_u64("cache_creation_tokens") as i64;
            u.cost_usd = num("cost_usd").unwrap_or(0.0);
            u.credits = num("credits").unwrap_or(0.0);
            let unpriced = e.data_str("cost_source") == Some("unreported")
                || (u.cost_usd == 0.0 && e.data_str("cost_source").is_none());
            u.unpriced_turns = i64::from(unpriced);
        }
        EventKind::ToolCall => match e.data_str("status") {
            Some("started") => u.tool_calls_started = 1,
            Some("completed") => {
                u.tool_calls = 1;
                let err = e.data.get("is_error").and_then(serde_json::Value::as_bool);
                u.tool_errors = i64::from(err == Some(true));
            }
            _ => {}
        },
        _ => {}
    }
    Some((model, u))
}
