//! The one entry point both binaries use: a JSON value (a Hive-native event or a canonical one) in, a
//! redacted canonical event or a filter verdict out.
//!
//! Order: parse → classify (drop deltas, chatty and non-durable types) → adapt → redact by the policy.
//! Nothing here touches disk; the agent writes only what [`Outcome::Kept`] holds.

use serde_json::Value;

use crate::event::CanonicalEvent;
use crate::hive::{self, AdaptError, Adapted, FilterReason, Zone};
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
}

impl<'a> ProcessOptions<'a> {
    /// Options with the given policy, the local zone, and no source.
    pub fn new(policy: &'a Policy) -> ProcessOptions<'a> {
        ProcessOptions {
            policy,
            zone: Zone::Local,
            source_identity: None,
            session_hint: None,
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
}

/// True when the value looks like a canonical event rather than a native one.
pub fn is_canonical(value: &Value) -> bool {
    value.get("schema_version").is_some() && value.get("event_id").is_some()
}

/// Processes one event (native Hive or canonical).
pub fn process_value(value: &Value, opts: &ProcessOptions<'_>) -> Result<Outcome, ProcessError> {
    let event = if is_canonical(value) {
        let event: CanonicalEvent = serde_json::from_value(value.clone())
            .map_err(|e| ProcessError::Canonical(e.to_string()))?;
        event
            .check_envelope()
            .map_err(|e| ProcessError::Canonical(e.to_string()))?;
        event
    } else {
        let ctx = hive::Context {
            zone: opts.zone,
            source_identity: opts.source_identity,
            session_hint: opts.session_hint,
        };
        match hive::adapt(value, &ctx)? {
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
    redact(event, opts.policy)
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
