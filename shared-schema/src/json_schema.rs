//! JSON Schema for the wire contract, generated from the Rust types.
//!
//! The files under `shared-schema/schema/v1/` are the published contract. They are written by
//! `cargo run -p apiary-schema --features json-schema --bin gen-schema` and a test fails when they differ from what the types
//! generate (drift). [`Validator`] compiles them once; keep one and reuse it.

use std::sync::OnceLock;

use serde_json::Value;

use crate::batch::{Batch, BatchResponse};
use crate::event::CanonicalEvent;

/// The published files: (file name under `schema/v1/`, generated content).
pub fn generated_files() -> Vec<(&'static str, String)> {
    let pretty =
        |s: schemars::Schema| serde_json::to_string_pretty(&s).expect("schema serialises") + "\n";
    vec![
        (
            "canonical-event.schema.json",
            pretty(schemars::schema_for!(CanonicalEvent)),
        ),
        ("batch.schema.json", pretty(schemars::schema_for!(Batch))),
        (
            "batch-response.schema.json",
            pretty(schemars::schema_for!(BatchResponse)),
        ),
        (
            "alert-notification.schema.json",
            pretty(schemars::schema_for!(crate::alert::AlertNotification)),
        ),
    ]
}

/// The schema of `GET /v1/whoami`'s answer ([`crate::identity::TokenIdentity`]), generated from the type
/// (the ingest's OpenAPI document carries it; it is not a published file).
pub fn token_identity_schema() -> String {
    serde_json::to_string(&schemars::schema_for!(crate::identity::TokenIdentity))
        .expect("schema serialises")
}

/// The schema of `POST /v1/devices/key`'s body ([`crate::device_key::KeyRegistration`]), generated from
/// the type (carried by the ingest's OpenAPI document; not a published file).
pub fn key_registration_schema() -> String {
    serde_json::to_string(&schemars::schema_for!(crate::device_key::KeyRegistration))
        .expect("schema serialises")
}

/// The checked-in schema files, embedded at build time.
pub const CANONICAL_EVENT_SCHEMA: &str = include_str!("../schema/v1/canonical-event.schema.json");
pub const BATCH_SCHEMA: &str = include_str!("../schema/v1/batch.schema.json");
pub const BATCH_RESPONSE_SCHEMA: &str = include_str!("../schema/v1/batch-response.schema.json");
/// The alert notification a webhook destination receives ([`crate::alert::AlertNotification`]).
pub const ALERT_NOTIFICATION_SCHEMA: &str =
    include_str!("../schema/v1/alert-notification.schema.json");

/// Compiled validators for the canonical event and the batch envelope.
pub struct Validator {
    event: jsonschema::Validator,
    envelope: jsonschema::Validator,
}

impl std::fmt::Debug for Validator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Validator")
    }
}

impl Validator {
    /// The process-wide validator, compiled on first use.
    pub fn shared() -> &'static Validator {
        static V: OnceLock<Validator> = OnceLock::new();
        V.get_or_init(Validator::compile)
    }

    fn compile() -> Validator {
        let event: Value =
            serde_json::from_str(CANONICAL_EVENT_SCHEMA).expect("event schema is JSON");
        let mut envelope: Value = serde_json::from_str(BATCH_SCHEMA).expect("batch schema is JSON");
        // The envelope is validated without its events; each event is validated on its own so one bad event
        // gets its own verdict instead of failing the batch.
        if let Some(props) = envelope
            .get_mut("properties")
            .and_then(Value::as_object_mut)
        {
            props.insert("events".into(), serde_json::json!({ "type": "array" }));
        }
        Validator {
            event: compile_one(&event),
            envelope: compile_one(&envelope),
        }
    }

    /// Validates one canonical event; Err lists the problems (`path: message`), at most 10.
    pub fn validate_event(&self, value: &Value) -> Result<(), Vec<String>> {
        collect(&self.event, value)
    }

    /// The instance paths (e.g. `/type`, `/data`) where a canonical event breaks the schema, without the
    /// messages (which quote values); `(root)` for the object itself (e.g. a missing required field).
    pub fn invalid_paths(&self, value: &Value) -> Vec<String> {
        let mut paths: Vec<String> = self
            .event
            .iter_errors(value)
            .take(10)
            .map(|e| match &e.kind {
                jsonschema::error::ValidationErrorKind::Required { property } => {
                    format!(
                        "{}/{} (missing)",
                        e.instance_path,
                        property.as_str().unwrap_or("?")
                    )
                }
                _ if e.instance_path.to_string().is_empty() => "(root)".to_string(),
                _ => e.instance_path.to_string(),
            })
            .collect();
        paths.dedup();
        paths
    }

    /// Validates a batch envelope, not looking inside `events` beyond it being an array.
    pub fn validate_envelope(&self, value: &Value) -> Result<(), Vec<String>> {
        collect(&self.envelope, value)
    }
}

/// Formats (`uuid`, `date-time`) are asserted too: serde would refuse them later anyway, and the
/// validator can say where without quoting the value.
fn compile_one(schema: &Value) -> jsonschema::Validator {
    jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
        .expect("schema compiles")
}

fn collect(v: &jsonschema::Validator, value: &Value) -> Result<(), Vec<String>> {
    if v.is_valid(value) {
        return Ok(());
    }
    let errors: Vec<String> = v
        .iter_errors(value)
        .take(10)
        .map(|e| {
            let path = e.instance_path.to_string();
            let msg = e.to_string();
            let msg: String = msg.chars().take(300).collect();
            if path.is_empty() {
                msg
            } else {
                format!("{path}: {msg}")
            }
        })
        .collect();
    Err(errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_in_schema_files_match_the_rust_types() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/v1");
        for (name, content) in generated_files() {
            let on_disk = std::fs::read_to_string(dir.join(name)).unwrap_or_default();
            assert!(
                on_disk == content,
                "schema/v1/{name} drifted from the Rust types: run `cargo run -p apiary-schema --features json-schema --bin gen-schema`"
            );
        }
    }

    #[test]
    fn validator_accepts_a_serialised_event_and_names_the_bad_field() {
        let event = serde_json::json!({
            "schema_version": 1, "event_id": "6a1f5c2e-9b3d-4e7a-8c10-2f4bd5e6a701", "type": "llm.turn",
            "occurred_at": "2026-11-03T09:15:09.412338Z", "runtime": "hive", "session_id": "s1",
            "agent_role": "queen", "native_type": "llm_turn_complete", "data": {"input_tokens": 5}
        });
        Validator::shared().validate_event(&event).unwrap();
        let mut bad = event.clone();
        bad["type"] = "llm.stream".into();
        let errs = Validator::shared().validate_event(&bad).unwrap_err();
        assert!(errs[0].contains("/type"), "{errs:?}");
        let mut extra = event;
        extra["prompt"] = "hello".into();
        assert!(Validator::shared().validate_event(&extra).is_err());
    }
}
