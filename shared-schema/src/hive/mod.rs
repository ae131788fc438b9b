//! The Hive adapter: a native Hive event (`AgentEvent.to_dict()`) in, a canonical event (not yet redacted)
//! or a filter verdict out. Pure.
//!
//! ## Identity
//! - session: `execution_id`, else `data.session_id` (task events); a durable event with neither is
//!   filtered as `no_session`.
//! - worker events have `stream_id = "worker:<worker session id>"` and `colony_id` = the queen's session id:
//!   role `worker`, `worker_id` from the stream, `parent_session_id` = `colony_id`. Everything else is the
//!   queen's (role `queen`).
//! - `event_id` = UUID v5 over `hive`, session, `stream_id`, `seq`, `type` and the raw `timestamp` — never
//!   the payload, which differs between Hive's two logs. An event without a `seq` falls back to the
//!   caller's source identity (file identity + offset), else to a hash of the whole line.
//!
//! ## Time
//! Hive writes naive local time. It is resolved with the producer's zone ([`Zone`]); a wall time that
//! does not exist (spring-forward gap) moves forward by the gap, an ambiguous one (fall-back) takes the
//! earlier instant. Timestamps that carry an offset are taken as they are.
//!
//! ## Data
//! The native `data` object is carried over whole, plus derived canonical fields (`status`, `signal`,
//! `cost_source`, `provider`, ...). Deciding what may leave the device is the policy's job, not the
//! adapter's: the adapter never drops a field silently, so the policy can count what it drops.

mod types;

use chrono::{DateTime, LocalResult, NaiveDateTime, TimeZone, Utc};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::event::{AgentRole, CanonicalEvent, EventKind};

pub use types::HIVE_EVENT_TYPES;

/// Namespace of Hive event ids (UUID v5). Never change it: ids would stop deduplicating.
pub const HIVE_NAMESPACE: Uuid = Uuid::from_u128(0x6a1f_5c2e_9b3d_4e7a_8c10_2f4b_d5e6_a701);

/// What a native type becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Classification {
    Durable(EventKind, Derive),
    Filtered(FilterReason),
}

/// The canonical fields a native type implies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Derive {
    None,
    /// `data.status`
    Status(&'static str),
    /// `data.scope` and `data.status`
    Lifecycle(&'static str, &'static str),
    /// `data.signal`
    Signal(&'static str),
    /// `data.state`
    State(&'static str),
    /// `data.source`
    Source(&'static str),
    /// `data.action`
    Action(&'static str),
}

/// Why an event does not become a canonical event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FilterReason {
    /// High-frequency streaming delta; the durable event that follows carries the totals.
    StreamingDelta,
    /// Chatty, no durable meaning.
    Chatty,
    /// Content-only or otherwise not durable under the default mapping.
    NotDurable,
    /// A type this build does not know.
    UnknownType,
    /// A durable type that names no session.
    NoSession,
    /// The redaction policy does not allow the event's kind.
    KindNotAllowed,
}

impl FilterReason {
    /// The reason as a short word (`delta`, `chatty`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            FilterReason::StreamingDelta => "delta",
            FilterReason::Chatty => "chatty",
            FilterReason::NotDurable => "not_durable",
            FilterReason::UnknownType => "unknown_type",
            FilterReason::NoSession => "no_session",
            FilterReason::KindNotAllowed => "kind_not_allowed",
        }
    }
}

/// Classifies a Hive type name; `None` for a type this build does not know.
pub fn classify(native_type: &str) -> Option<Classification> {
    HIVE_EVENT_TYPES
        .iter()
        .find(|(name, _)| *name == native_type)
        .map(|(_, c)| *c)
}

/// The producer's time zone, for naive timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Zone {
    /// The local zone (`TZ`, else `/etc/localtime`).
    #[default]
    Local,
    Utc,
    Named(chrono_tz::Tz),
}

impl std::str::FromStr for Zone {
    type Err = String;
    fn from_str(s: &str) -> Result<Zone, String> {
        match s {
            "local" | "" => Ok(Zone::Local),
            "UTC" | "utc" | "Z" => Ok(Zone::Utc),
            other => other
                .parse::<chrono_tz::Tz>()
                .map(Zone::Named)
                .map_err(|_| format!("unknown time zone {other:?}")),
        }
    }
}

/// The result of adapting one native event.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)] // the event is the common case; boxing it would cost an allocation
pub enum Adapted {
    Event(CanonicalEvent),
    Filtered {
        native_type: String,
        reason: FilterReason,
    },
}

/// A native event that cannot be read at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdaptError {
    #[error("a Hive event is a JSON object, got {0}")]
    NotAnObject(&'static str),
    #[error("field `type` is missing or not a string")]
    MissingType,
    #[error("field `{field}` should be {expected}")]
    BadField {
        field: &'static str,
        expected: &'static str,
    },
    /// Holds nothing of the input: error texts end up in logs and dead letters.
    #[error("timestamp is not an ISO 8601 date-time (YYYY-MM-DDTHH:MM:SS[.ffffff][offset])")]
    BadTimestamp,
}

/// Where a native event was read, beyond the event itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct Context<'a> {
    /// The producer's zone, for naive timestamps.
    pub zone: Zone,
    /// Identity of the position the event was read from (e.g. `file:<dev>:<inode>:<offset>`), used for the
    /// event id only when the event has no `seq` of its own.
    pub source_identity: Option<&'a str>,
    /// The session the source belongs to (the `<session_id>` directory of a per-session log), used when
    /// the event names no session itself — Hive omits `execution_id` on many queen-level events.
    pub session_hint: Option<&'a str>,
}

/// Adapts one native Hive event.
pub fn adapt(native: &Value, ctx: &Context<'_>) -> Result<Adapted, AdaptError> {
    adapt_with(native, ctx, |obj| obj.get("data").cloned())
}

/// [`adapt`] of an event the caller no longer needs: its `data` is moved into the canonical event
/// instead of copied (a prompt or a tool result is not copied before the policy drops it). The same
/// answer as [`adapt`] for every input; an event whose id is derived from its whole content (no `seq`,
/// no source identity) takes [`adapt`]'s path, since the id needs `data` in place.
pub fn adapt_owned(mut native: Value, ctx: &Context<'_>) -> Result<Adapted, AdaptError> {
    let no_seq = matches!(native.get("seq"), None | Some(Value::Null));
    if no_seq && ctx.source_identity.is_none() {
        return adapt(&native, ctx);
    }
    let data = native.as_object_mut().and_then(|o| o.remove("data"));
    let mut data = Some(data);
    adapt_with(&native, ctx, |_| data.take().flatten())
}

/// [`adapt`], with the event's `data` value from `data` (called once, with the event's object, and only
/// for a durable type).
fn adapt_with(
    native: &Value,
    ctx: &Context<'_>,
    data: impl FnOnce(&Map<String, Value>) -> Option<Value>,
) -> Result<Adapted, AdaptError> {
    let obj = native
        .as_object()
        .ok_or(AdaptError::NotAnObject(json_type(native)))?;
    let native_type = obj
        .get("type")
        .and_then(Value::as_str)
        .ok_or(AdaptError::MissingType)?;
    let filtered = |reason| {
        Ok(Adapted::Filtered {
            native_type: native_type.to_string(),
            reason,
        })
    };
    let (kind, derive) = match classify(native_type) {
        None => return filtered(FilterReason::UnknownType),
        Some(Classification::Filtered(reason)) => return filtered(reason),
        Some(Classification::Durable(kind, derive)) => (kind, derive),
    };
    let data = match data(obj) {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(AdaptError::BadField {
                field: "data",
                expected: "an object",
            })
        }
    };
    let envelope = Envelope {
        native_type,
        stream_id: opt_str(obj, "stream_id")?,
        execution_id: opt_str(obj, "execution_id")?,
        colony_id: opt_str(obj, "colony_id")?,
        timestamp: obj.get("timestamp").and_then(Value::as_str),
        seq: obj.get("seq"),
        node_id: opt_str(obj, "node_id"),
        correlation_id: opt_str(obj, "correlation_id"),
    };
    assemble(envelope, kind, derive, data, ctx, native)
}

/// The envelope fields of a native event, as [`assemble`] reads them. `timestamp` is `None` when it is
/// missing or not a string; `seq` is the raw value (missing, null, or what must be an integer). An
/// ill-typed `node_id` or `correlation_id` is an error only where [`adapt`] always made it one (after the
/// session, time and sequence checks), so they are held as read and checked last.
pub(crate) struct Envelope<'a> {
    pub native_type: &'a str,
    pub stream_id: Option<&'a str>,
    pub execution_id: Option<&'a str>,
    pub colony_id: Option<&'a str>,
    pub timestamp: Option<&'a str>,
    pub seq: Option<&'a Value>,
    pub node_id: Result<Option<&'a str>, AdaptError>,
    pub correlation_id: Result<Option<&'a str>, AdaptError>,
}

/// A durable native event of `kind` as a canonical one (session, time, id, role, derived fields), its
/// `data` already an object. `whole` is the native event, read only for an id derived from its content
/// (no `seq`, no source identity).
pub(crate) fn assemble(
    envelope: Envelope<'_>,
    kind: EventKind,
    derive: Derive,
    data: Map<String, Value>,
    ctx: &Context<'_>,
    whole: &Value,
) -> Result<Adapted, AdaptError> {
    let Envelope {
        native_type,
        stream_id,
        execution_id,
        colony_id,
        timestamp,
        seq,
        node_id,
        correlation_id,
    } = envelope;
    let session_id = execution_id
        .or_else(|| {
            data.get("session_id")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        })
        .or(ctx.session_hint.filter(|s| !s.is_empty()));
    let session_id = match session_id {
        Some(s) => s.to_string(),
        None => {
            return Ok(Adapted::Filtered {
                native_type: native_type.to_string(),
                reason: FilterReason::NoSession,
            })
        }
    };
    let raw_ts = timestamp.ok_or(AdaptError::BadField {
        field: "timestamp",
        expected: "a string",
    })?;
    let occurred_at = parse_timestamp(raw_ts, ctx.zone)?;
    let seq = match seq {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_i64().ok_or(AdaptError::BadField {
            field: "seq",
            expected: "an integer",
        })?),
    };
    let event_id = event_id(
        &session_id,
        stream_id.unwrap_or(""),
        seq,
        native_type,
        raw_ts,
        ctx.source_identity,
        whole,
    );

    let worker_id = stream_id
        .and_then(|s| s.strip_prefix("worker:"))
        .filter(|s| !s.is_empty());
    let is_worker = worker_id.is_some() || colony_id.is_some();
    let role = if is_worker {
        AgentRole::Worker
    } else {
        AgentRole::Queen
    };
    let worker_id = worker_id
        .map(str::to_string)
        .or_else(|| is_worker.then(|| session_id.clone()));
    let parent_session_id = colony_id.filter(|c| *c != session_id).map(str::to_string);

    let mut event = CanonicalEvent {
        schema_version: crate::SCHEMA_VERSION,
        event_id,
        kind,
        occurred_at,
        runtime: "hive".into(),
        session_id: Some(session_id),
        parent_session_id,
        colony_id: colony_id.map(str::to_string),
        worker_id,
        agent_role: Some(role),
        node_id: node_id?.map(str::to_string),
        execution_id: execution_id.map(str::to_string),
        trace_id: correlation_id?.map(str::to_string),
        native_type: native_type.to_string(),
        data,
    };
    derive_fields(&mut event, derive);
    Ok(Adapted::Event(event))
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn opt_str<'a>(
    obj: &'a Map<String, Value>,
    field: &'static str,
) -> Result<Option<&'a str>, AdaptError> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(AdaptError::BadField {
            field,
            expected: "a string or null",
        }),
    }
}

/// The deterministic id of a Hive event.
pub fn event_id(
    session: &str,
    stream_id: &str,
    seq: Option<i64>,
    native_type: &str,
    raw_timestamp: &str,
    source_identity: Option<&str>,
    whole: &Value,
) -> Uuid {
    let name = match (seq, source_identity) {
        // The same bytes as `format!` of the five parts would make, without the formatter (which was most
        // of an event's id on the intake's path).
        (Some(seq), _) => {
            let mut itoa = [0u8; 20];
            let seq = decimal(seq, &mut itoa);
            let parts = [session, stream_id, seq, native_type, raw_timestamp];
            let mut name =
                String::with_capacity(5 + parts.iter().map(|p| p.len() + 1).sum::<usize>());
            name.push_str("hive");
            for part in parts {
                name.push('\u{1f}');
                name.push_str(part);
            }
            name
        }
        (None, Some(source)) => format!("hive-source\u{1f}{source}"),
        // serde_json's Map is ordered by key, so this is the same for the same event whatever its key order.
        (None, None) => format!("hive-content\u{1f}{whole}"),
    };
    Uuid::new_v5(&HIVE_NAMESPACE, name.as_bytes())
}

/// `n` in decimal, as `Display` writes it, in `buf`.
fn decimal(n: i64, buf: &mut [u8; 20]) -> &str {
    let mut at = buf.len();
    let mut v = n.unsigned_abs();
    loop {
        at -= 1;
        buf[at] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    if n < 0 {
        at -= 1;
        buf[at] = b'-';
    }
    std::str::from_utf8(&buf[at..]).expect("ASCII digits")
}

/// Parses Hive's timestamp: naive local time (resolved in `zone`), or RFC 3339 with an offset.
pub fn parse_timestamp(raw: &str, zone: Zone) -> Result<DateTime<Utc>, AdaptError> {
    let naive = match naive_plain(raw) {
        Some(naive) => naive,
        None => {
            if let Ok(t) = DateTime::parse_from_rfc3339(raw) {
                return Ok(t.with_timezone(&Utc));
            }
            NaiveDateTime::parse_from_str(raw, "%Y-%m-%dT%H:%M:%S%.f")
                .or_else(|_| NaiveDateTime::parse_from_str(raw, "%Y-%m-%d %H:%M:%S%.f"))
                .map_err(|_| AdaptError::BadTimestamp)?
        }
    };
    Ok(match zone {
        Zone::Utc => naive.and_utc(),
        Zone::Local => resolve(&chrono::Local, naive),
        Zone::Named(tz) => resolve(&tz, naive),
    })
}

/// Hive's usual timestamp, `YYYY-MM-DDTHH:MM:SS` (or a space for `T`) with 1 to 9 digits of a second
/// after a dot or none, read by hand: chrono's `parse_from_str` interprets its format string on every
/// call (3,000 of the ~60,000 instructions a kept Hive event's parse and preparation took). `None` for
/// anything else — another shape, a leap second, a date or time that does not exist — which the
/// format-string parse reads (or refuses) as before; where this gives a time, it is the one that parse
/// gives (a test compares them).
fn naive_plain(raw: &str) -> Option<NaiveDateTime> {
    let b = raw.as_bytes();
    if !(19..=29).contains(&b.len()) || b.len() == 20 {
        return None;
    }
    let digits = |from: usize, to: usize| -> Option<u32> {
        b[from..to].iter().try_fold(0u32, |n, c| {
            c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
        })
    };
    let sep = |at: usize, c: u8| b[at] == c;
    if !(sep(4, b'-')
        && sep(7, b'-')
        && (sep(10, b'T') || sep(10, b' '))
        && sep(13, b':')
        && sep(16, b':'))
    {
        return None;
    }
    let nanos = match b.len() {
        19 => 0,
        n => {
            if b[19] != b'.' {
                return None;
            }
            digits(20, n)? * 10u32.pow((29 - n) as u32)
        }
    };
    let (second, minute, hour) = (digits(17, 19)?, digits(14, 16)?, digits(11, 13)?);
    if second > 59 {
        return None;
    }
    chrono::NaiveDate::from_ymd_opt(digits(0, 4)? as i32, digits(5, 7)?, digits(8, 10)?)?
        .and_hms_nano_opt(hour, minute, second, nanos)
}

fn resolve<Z: TimeZone>(zone: &Z, naive: NaiveDateTime) -> DateTime<Utc> {
    match zone.from_local_datetime(&naive) {
        LocalResult::Single(t) => t.with_timezone(&Utc),
        LocalResult::Ambiguous(earlier, _) => earlier.with_timezone(&Utc),
        // In a gap: the wall time does not exist; read it with the offset from before the gap.
        LocalResult::None => {
            let before = naive - chrono::Duration::hours(3);
            match zone.from_local_datetime(&before).earliest() {
                Some(t) => t.with_timezone(&Utc) + chrono::Duration::hours(3),
                None => naive.and_utc(),
            }
        }
    }
}

/// The `data` keys [`derive_fields`] reads or tests for an event of `kind`, besides what it sets;
/// `None` when it reads nested content (task and trigger ids, questions, colonies), so every key counts.
/// A reader that builds only some keys of `data` ([`crate::line`]) must build these; keep the two
/// together.
pub(crate) fn derived_from(kind: EventKind) -> Option<&'static [&'static str]> {
    match kind {
        EventKind::LlmTurn => Some(&[
            "input_tokens",
            "output_tokens",
            "cost_usd",
            "provider",
            "model",
        ]),
        EventKind::WorkerFinished => Some(&["status", "success", "worker_id"]),
        EventKind::SessionInput
        | EventKind::TaskChanged
        | EventKind::TriggerChanged
        | EventKind::ColonyCreated => None,
        _ => Some(&[]),
    }
}

fn derive_fields(event: &mut CanonicalEvent, derive: Derive) {
    let data = &mut event.data;
    let mut set = |k: &str, v: Value| {
        data.insert(k.to_string(), v);
    };
    match derive {
        Derive::None => {}
        Derive::Status(s) => set("status", s.into()),
        Derive::Lifecycle(scope, status) => {
            set("scope", scope.into());
            set("status", status.into());
        }
        Derive::Signal(s) => set("signal", s.into()),
        Derive::State(s) => set("state", s.into()),
        Derive::Source(s) => set("source", s.into()),
        Derive::Action(s) => set("action", s.into()),
    }
    match event.kind {
        EventKind::LlmTurn => derive_usage(&mut event.data),
        EventKind::SessionInput => {
            if let Some(Value::Array(q)) = event.data.get("questions") {
                let n = q.len();
                event.data.insert("question_count".into(), n.into());
            }
        }
        EventKind::WorkerFinished => {
            if let (false, Some(ok)) = (
                event.data.contains_key("status"),
                event.data.get("success").and_then(Value::as_bool),
            ) {
                event.data.insert(
                    "status".into(),
                    if ok { "completed" } else { "failed" }.into(),
                );
            }
            if !event.data.contains_key("worker_id") {
                if let Some(w) = &event.worker_id {
                    event.data.insert("worker_id".into(), w.clone().into());
                }
            }
        }
        EventKind::TaskChanged => {
            lift_id(&mut event.data, "task_id", &["task_id", "id"], "task");
            // `task_updated` carries the task as `after`.
            lift_id(&mut event.data, "task_id", &["task_id", "id"], "after");
        }
        EventKind::TriggerChanged => {
            lift_id(
                &mut event.data,
                "trigger_id",
                &["trigger_id", "id"],
                "trigger",
            );
            // The SSE route's `trigger_activated` puts the schedule inside `trigger_config`.
            lift_fields(
                &mut event.data,
                "trigger_config",
                &["next_fire_at", "last_fired_at", "fire_count"],
            );
        }
        EventKind::ColonyCreated => {
            // Hive's own `data.colony_id` (`worker_colony_loaded`, a colony created from a suggestion) is
            // the colony's *name* (its directory under `colonies/`): it becomes `colony_name`, which the
            // pipeline turns into the colony key and the policy never lets out.
            if let Some(Value::String(name)) = event.data.remove("colony_id") {
                event
                    .data
                    .entry("colony_name")
                    .or_insert(Value::String(name));
            }
            // `data.colony_id` is the session the colony's workers report under (`queen_session_id`).
            let colony = event
                .data
                .get("queen_session_id")
                .and_then(Value::as_str)
                .map(str::to_string);
            let colony = colony
                .or_else(|| event.colony_id.clone())
                .or_else(|| event.session_id.clone());
            if let (false, Some(c)) = (event.data.contains_key("colony_id"), colony) {
                event.data.insert("colony_id".into(), c.into());
            }
            if let Some(new) = event.data.get("new_session_id").cloned() {
                event.data.entry("forked_session_id").or_insert(new);
            }
        }
        _ => {}
    }
}

/// Lifts an id (and status) out of a nested object, e.g. `data.task.id` → `data.task_id`.
fn lift_id(data: &mut Map<String, Value>, target: &str, keys: &[&str], nested: &str) {
    let nested_obj = data.get(nested).and_then(Value::as_object).cloned();
    let nested_obj = nested_obj.as_ref();
    if !data.contains_key(target) {
        let found = keys
            .iter()
            .find_map(|k| data.get(*k).or_else(|| nested_obj.and_then(|n| n.get(*k))));
        if let Some(v @ (Value::String(_) | Value::Number(_))) = found.cloned() {
            let id = match v {
                Value::Number(n) => n.to_string().into(),
                other => other,
            };
            data.insert(target.into(), id);
        }
    }
    if !data.contains_key("status") {
        if let Some(s) = nested_obj.and_then(|n| n.get("status")).cloned() {
            data.insert("status".into(), s);
        }
    }
}

/// Copies `keys` out of the nested object `nested` when they are not at the top already.
fn lift_fields(data: &mut Map<String, Value>, nested: &str, keys: &[&str]) {
    let Some(inner) = data.get(nested).and_then(Value::as_object).cloned() else {
        return;
    };
    for k in keys {
        if let (false, Some(v)) = (data.contains_key(*k), inner.get(*k)) {
            data.insert((*k).to_string(), v.clone());
        }
    }
}

/// `cost_source` and `provider` for an LLM turn.
fn derive_usage(data: &mut Map<String, Value>) {
    let tokens: u64 = ["input_tokens", "output_tokens"]
        .iter()
        .filter_map(|k| data.get(*k).and_then(Value::as_u64))
        .sum();
    let cost = data.get("cost_usd").and_then(Value::as_f64);
    data.insert("cost_source".into(), cost_source(cost, tokens).into());
    if !data.contains_key("provider") {
        if let Some(p) = data
            .get("model")
            .and_then(Value::as_str)
            .and_then(provider_of)
        {
            data.insert("provider".into(), p.into());
        }
    }
}

/// `cost_source` of an LLM turn: a cost of 0 with tokens means the producer reported none ("unreported",
/// never free); no cost at all is unreported too.
pub fn cost_source(cost: Option<f64>, tokens: u64) -> &'static str {
    match cost {
        Some(c) if c > 0.0 => "reported",
        Some(_) if tokens == 0 => "reported",
        _ => "unreported",
    }
}

/// The provider a model name implies, when it is recognisable.
pub fn provider_of(model: &str) -> Option<&'static str> {
    let m = model.to_ascii_lowercase();
    let m = m.rsplit('/').next().unwrap_or(&m);
    let table: [(&[&str], &str); 8] = [
        (&["claude"], "anthropic"),
        (
            &["gpt-", "o1", "o3", "o4", "chatgpt", "text-embedding"],
            "openai",
        ),
        (&["gemini", "gemma"], "google"),
        (&["mistral", "mixtral", "codestral"], "mistral"),
        (&["llama"], "meta"),
        (&["deepseek"], "deepseek"),
        (&["grok"], "xai"),
        (&["command"], "cohere"),
    ];
    table
        .iter()
        .find(|(prefixes, _)| prefixes.iter().any(|p| m.starts_with(p)))
        .map(|(_, p)| *p)
}

#[cfg(test)]
mod tests;
