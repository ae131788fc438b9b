//! From request bytes to a checked batch, before any database work. Pure (no I/O).
//!
//! Order: decompress (gzip, zstd; capped, so a compression bomb is a 413) → count the JSON values before
//! building any (`json_budget`: more than the batch's value budget is a 413, so a small body of tiny
//! values cannot build a huge tree) → parse JSON (serde_json's recursion limit turns deep nesting into a
//! 400) → schema version → events and session bindings together at most `max_batch_events` (413) →
//! envelope JSON Schema → the bindings' ids and times ([`crate::bindings`], 422 for the whole batch) →
//! identity bindings against the token (403 for the whole batch) → the agent's free text (422) → per
//! event: JSON Schema, typed parse, envelope
//! rules, the allowlist policy (defence in depth), value ranges, and the time window. An event that fails
//! is rejected with a reason and never stored; the others go on.
//!
//! The policy checked against is the widest a device may consent to (the shipped default with colony
//! names, `Policy::with_colony_names`); a colony's name reaches it only for a tenant whose choice is
//! `names` ([`Principal::colony_names`]): any other tenant's events lose it first.
//!
//! ## Clock correction (`sent_at`)
//! `skew = received_at − sent_at`. When `|skew|` exceeds `clock_skew_tolerance_secs` (60 s), the device
//! clock is taken to be off by `skew` and every event of the batch gets
//! `effective_at = occurred_at + skew`; otherwise `effective_at = occurred_at`. Buckets, partitions and
//! session facts use `effective_at`; `occurred_at` is stored as sent. Dedup never looks at either: its key is
//! `(tenant_id, event_id)` and the first delivery's `effective_at` stands. Imports carry no `sent_at` (a
//! bundle is loaded long after it was written), so they are never corrected.
//!
//! ## Errors
//! A whole-batch refusal is an [`IntakeError`], one variant per kind of problem; this module knows
//! nothing of HTTP. The route maps each to its status (`From<IntakeError> for ApiError` in
//! `routes::batches`: 400, 403, 413, 415 or 422), and the import command to its own error.

use std::io::Read;

use apiary_schema::colony::ColonyNames;
use apiary_schema::{Batch, CanonicalEvent, Policy, Rejection, SessionBinding};
use chrono::{DateTime, Duration, Utc};
use serde_json::Value;

use crate::auth::Principal;
use crate::config::IngestSettings;
use crate::json_budget;
use crate::rollups::Usage;

/// Why a whole batch is refused (see the module notes for where each is checked).
#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    /// A `Content-Encoding` other than none, gzip or zstd.
    #[error("Content-Encoding {0:?} is not supported (use gzip or zstd)")]
    UnsupportedEncoding(String),
    /// The body does not decompress.
    #[error("the body could not be decompressed: {0}")]
    Encoding(#[source] std::io::Error),
    /// More than the limits allow: decompressed bytes, JSON values, or events and bindings.
    #[error("{0}")]
    TooLarge(String),
    /// The body is not JSON (or nests too deep).
    #[error("the body is not valid JSON: {0}")]
    MalformedJson(#[source] serde_json::Error),
    /// A schema version this server does not accept.
    #[error("{0}")]
    UnsupportedVersion(String),
    /// Well-formed JSON that does not match the contract; `details` lists the problems.
    #[error("{message}")]
    Invalid {
        message: String,
        details: Vec<String>,
    },
    /// The batch claims a tenant, user or device its token is not bound to.
    #[error("{0}")]
    Forbidden(String),
}

/// A batch that passed the whole-batch checks; `events` are the ones that passed their own.
#[derive(Debug)]
pub struct CheckedBatch {
    pub received_at: DateTime<Utc>,
    /// The device the batch came from (agent's, else the token's), if known.
    pub device_id: Option<String>,
    pub agent_version: Option<String>,
    pub bindings: Vec<SessionBinding>,
    pub events: Vec<ReadyEvent>,
    pub rejected: Vec<Rejection>,
}

/// An event ready to store.
#[derive(Debug)]
pub struct ReadyEvent {
    pub event: CanonicalEvent,
    /// occurred_at corrected for device clock skew (see the module notes).
    pub effective_at: DateTime<Utc>,
    pub usage: Usage,
    /// `data` serialised, for the jsonb column.
    pub data_json: String,
}

/// Limits and clock rules of intake.
#[derive(Debug, Clone)]
pub struct IntakeRules {
    pub max_decompressed_bytes: usize,
    pub max_batch_events: usize,
    pub retention_days: i64,
    pub max_future: Duration,
    pub skew_tolerance: Duration,
}

impl IntakeRules {
    pub fn from_settings(s: &IngestSettings) -> IntakeRules {
        IntakeRules {
            max_decompressed_bytes: s.max_decompressed_bytes,
            max_batch_events: s.max_batch_events,
            retention_days: s.retention_days,
            max_future: Duration::seconds(s.max_future_secs),
            skew_tolerance: Duration::seconds(s.clock_skew_tolerance_secs),
        }
    }

    /// The oldest effective time still accepted: midnight UTC, `retention_days` ago (the same cut the
    /// retention job uses, so an accepted event never lands in a partition about to be dropped).
    pub fn oldest_accepted(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        (now.date_naive() - chrono::Days::new(self.retention_days as u64))
            .and_hms_opt(0, 0, 0)
            .expect("midnight exists")
            .and_utc()
    }
}

/// Decompresses a body by its `Content-Encoding` (none, gzip, zstd), refusing more than `max` bytes out.
pub fn decode_body(
    encoding: Option<&str>,
    body: &[u8],
    max: usize,
) -> Result<Vec<u8>, IntakeError> {
    let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(max));
    let limit = max as u64 + 1;
    let res = match encoding.map(|e| e.trim().to_ascii_lowercase()).as_deref() {
        None | Some("") | Some("identity") => return Ok(body.to_vec()),
        Some("gzip") | Some("x-gzip") => flate2::read::MultiGzDecoder::new(body)
            .take(limit)
            .read_to_end(&mut out),
        Some("zstd") => {
            zstd::stream::read::Decoder::new(body).and_then(|d| d.take(limit).read_to_end(&mut out))
        }
        Some(other) => return Err(IntakeError::UnsupportedEncoding(other.to_string())),
    };
    res.map_err(IntakeError::Encoding)?;
    if out.len() > max {
        return Err(IntakeError::TooLarge(format!(
            "the decompressed body exceeds {max} bytes"
        )));
    }
    Ok(out)
}

/// Checks a decoded batch body. `sent_at` correction applies only when `correct_clock` (HTTP batches).
pub fn check_batch(
    body: &[u8],
    principal: &Principal,
    policy: &Policy,
    rules: &IntakeRules,
    now: DateTime<Utc>,
    correct_clock: bool,
) -> Result<CheckedBatch, IntakeError> {
    // Count before building: a tree of tiny values costs many times its text (see `json_budget`).
    let budget = json_budget::value_budget(rules.max_batch_events);
    json_budget::check(body, budget).map_err(|e| {
        IntakeError::TooLarge(format!(
            "{e} (at most {} per event of a {}-event batch are accepted)",
            json_budget::VALUES_PER_EVENT,
            rules.max_batch_events
        ))
    })?;
    let value: Value = serde_json::from_slice(body).map_err(IntakeError::MalformedJson)?;
    check_batch_value(value, principal, policy, rules, now, correct_clock)
}

/// [`check_batch`] on an already parsed body (the import path builds batches as values).
pub fn check_batch_value(
    mut value: Value,
    principal: &Principal,
    policy: &Policy,
    rules: &IntakeRules,
    now: DateTime<Utc>,
    correct_clock: bool,
) -> Result<CheckedBatch, IntakeError> {
    let obj = value
        .as_object_mut()
        .ok_or_else(|| invalid("the batch must be a JSON object", vec![]))?;
    check_version(obj.get("schema_version"), "schema_version")?;
    let events = match obj.get_mut("events").map(Value::take) {
        Some(Value::Array(a)) => a,
        _ => return Err(invalid("`events` must be an array", vec![])),
    };
    let bindings = obj
        .get("sessions")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    if events.len() + bindings > rules.max_batch_events {
        return Err(IntakeError::TooLarge(format!(
            "the batch holds {} events and {bindings} session bindings; at most {} are accepted together",
            events.len(),
            rules.max_batch_events
        )));
    }
    obj.insert("events".into(), Value::Array(vec![]));
    if let Err(details) = apiary_schema::json_schema::Validator::shared().validate_envelope(&value)
    {
        return Err(invalid(
            "the batch envelope does not match schema version 1",
            details,
        ));
    }
    let mut batch: Batch = serde_json::from_value(value)
        .map_err(|e| invalid(&format!("the batch envelope is invalid: {e}"), vec![]))?;
    let skew = now - batch.sent_at;
    let shift = if correct_clock && skew.abs() > rules.skew_tolerance {
        skew
    } else {
        Duration::zero()
    };
    let window = (rules.oldest_accepted(now), now + rules.max_future);
    crate::bindings::check(&mut batch, shift, window).map_err(|problems| IntakeError::Invalid {
        message: format!("session bindings refused: {}", problems.join("; ")),
        details: problems,
    })?;
    check_bindings(&batch, principal)?;
    check_agent_text(&batch.agent)?;
    let device_id = batch
        .agent
        .device_id
        .clone()
        .or_else(|| principal.device_id.clone());
    let mut checked = CheckedBatch {
        received_at: now,
        device_id,
        agent_version: Some(batch.agent.agent_version.clone()),
        bindings: batch.sessions,
        events: Vec::with_capacity(events.len()),
        rejected: vec![],
    };
    for (i, raw) in events.into_iter().enumerate() {
        let id = raw
            .get("event_id")
            .and_then(Value::as_str)
            .and_then(|s| uuid::Uuid::parse_str(s).ok())
            .ok_or_else(|| {
                invalid(
                    &format!("events[{i}]: event_id is missing or not a UUID"),
                    vec![],
                )
            })?;
        match check_event(raw, policy, principal.colony_names, shift, window) {
            Ok(ready) => checked.events.push(ready),
            Err(reason) => checked.rejected.push(Rejection {
                event_id: id,
                reason,
            }),
        }
    }
    Ok(checked)
}

fn invalid(message: &str, details: Vec<String>) -> IntakeError {
    IntakeError::Invalid {
        message: message.to_string(),
        details,
    }
}

fn accepted_version(n: u64) -> bool {
    u32::try_from(n).is_ok_and(|n| apiary_schema::ACCEPTED_SCHEMA_VERSIONS.contains(&n))
}

fn check_version(v: Option<&Value>, what: &str) -> Result<(), IntakeError> {
    match v.and_then(Value::as_u64) {
        Some(n) if accepted_version(n) => Ok(()),
        Some(n) => Err(IntakeError::UnsupportedVersion(format!(
            "{what} {n} is not supported; this server accepts {:?}",
            apiary_schema::ACCEPTED_SCHEMA_VERSIONS
        ))),
        None => Err(invalid(
            &format!("`{what}` is missing or not a number"),
            vec![],
        )),
    }
}

/// The agent's own fields are stored as text: Postgres text cannot hold NUL (nor would a log line want
/// other control characters), so such a value is a 422 here instead of a database error (a 500 the agent
/// would retry forever).
fn check_agent_text(agent: &apiary_schema::batch::AgentInfo) -> Result<(), IntakeError> {
    let fields = [
        ("device_id", agent.device_id.as_deref()),
        ("agent_version", Some(agent.agent_version.as_str())),
    ];
    for (name, v) in fields {
        if v.is_some_and(|v| v.chars().any(char::is_control)) {
            return Err(invalid(
                &format!("agent.{name} holds a control character (NUL, newline, ...)"),
                vec![],
            ));
        }
    }
    Ok(())
}

/// The token, not the payload, decides tenant, user and device.
fn check_bindings(batch: &Batch, p: &Principal) -> Result<(), IntakeError> {
    let tenant = p.tenant_id.to_string();
    let deny = |m: String| Err(IntakeError::Forbidden(m));
    if let (Some(bound), Some(claimed)) = (&p.device_id, &batch.agent.device_id) {
        if bound != claimed {
            return deny(format!(
                "the batch claims device {claimed:?}; this token is bound to another device"
            ));
        }
    }
    for b in &batch.sessions {
        if let Some(t) = &b.tenant_id {
            if !t.eq_ignore_ascii_case(&tenant) {
                return deny(format!(
                    "session {:?} claims another tenant than this token's",
                    b.session_id
                ));
            }
        }
        if let (Some(bound), Some(claimed)) = (&p.user_id, &b.user_id) {
            if bound != claimed {
                return deny(format!(
                    "session {:?} claims another user than this token's",
                    b.session_id
                ));
            }
        }
        if let (Some(bound), Some(claimed)) = (&p.device_id, &b.device_id) {
            if bound != claimed {
                return deny(format!(
                    "session {:?} claims another device than this token's",
                    b.session_id
                ));
            }
        }
    }
    Ok(())
}

fn check_event(
    raw: Value,
    policy: &Policy,
    colony_names: ColonyNames,
    shift: Duration,
    (oldest, newest): (DateTime<Utc>, DateTime<Utc>),
) -> Result<ReadyEvent, String> {
    if let Some(v) = raw.get("schema_version").and_then(Value::as_u64) {
        if !accepted_version(v) {
            return Err(format!("schema_version {v} is not supported"));
        }
    }
    if let Err(errs) = apiary_schema::json_schema::Validator::shared().validate_event(&raw) {
        return Err(format!("schema: {}", errs.join("; ")));
    }
    let mut event: CanonicalEvent =
        serde_json::from_value(raw).map_err(|e| format!("schema: {e}"))?;
    event
        .check_envelope()
        .map_err(|e| format!("envelope: {e}"))?;
    // A colony's name is the tenant's to want: a `keys` tenant never stores one (a device that consented
    // while the tenant said `names` may still send some after the tenant changed its mind).
    if colony_names == ColonyNames::Keys && event.kind == apiary_schema::EventKind::ColonyCreated {
        event.data.remove(apiary_schema::colony::NAME_FIELD);
    }
    if let Err(issues) = policy.check(&event) {
        let list: Vec<String> = issues
            .iter()
            .map(|i| format!("data.{} {}", i.path, i.why))
            .collect();
        return Err(format!("policy: {}", list.join("; ")));
    }
    let effective_at = event.occurred_at + shift;
    if effective_at < oldest {
        return Err(format!(
            "occurred_at is older than the retention window (before {oldest})"
        ));
    }
    if effective_at > newest {
        return Err("occurred_at is too far in the future".into());
    }
    let usage = Usage::of(&event)?;
    let data_json = serde_json::to_string(&event.data).map_err(|e| format!("data: {e}"))?;
    Ok(ReadyEvent {
        event,
        effective_at,
        usage,
        data_json,
    })
}
