//! # apiary-schema — the wire contract of Apiary, version 1
//!
//! Pure code (no I/O, no async): everything both the on-device agent and the cloud ingest must agree on.
//!
//! - [`event`]: the canonical event envelope ([`CanonicalEvent`]) and its closed set of durable kinds
//!   ([`EventKind`]). Every runtime's native events are mapped onto it.
//! - [`alert`]: the alert notification an ingest POSTs to a webhook ([`alert::AlertNotification`]), with
//!   its published JSON Schema.
//! - [`batch`]: what the agent sends to `POST /v1/batches` ([`Batch`]) and the per-event verdicts it gets
//!   back ([`BatchResponse`]), plus the session identity bindings that travel with a batch.
//! - [`identity`]: the answer of `GET /v1/whoami` ([`identity::TokenIdentity`]): the tenant, scopes, user
//!   and device a token is bound to.
//! - [`colony`]: the colony key: HMAC-SHA256 of a colony's name under a per-tenant (or, before that is
//!   known, a per-device) secret, so a named colony can be followed across sessions and days while its
//!   name never leaves the device.
//! - [`device`]: the payloads of the agent's own device-level events, the heartbeat and the drop report.
//! - [`bundle`]: the air-gapped export bundle (manifest, checksum, the device key's seal, writer and
//!   reader over `Read`/`Write`).
//! - [`device_key`]: device signing keys (Ed25519): text forms, fingerprints, and what they sign.
//! - `json_schema` (feature `json-schema`, which the ingest turns on; the agent never links it): the JSON
//!   Schema files under `shared-schema/schema/` are generated from these Rust types (`cargo run -p
//!   apiary-schema --features json-schema --bin gen-schema`); a test fails when the checked-in files
//!   drift. Its `Validator` compiles them once and is reused for every batch.
//! - [`hive`]: the adapter for the Hive runtime: classifies all 74 native event types, resolves session,
//!   parent, colony, worker and role, computes the deterministic `event_id`, and converts Hive's naive local
//!   timestamps to UTC.
//! - [`otel`]: the OpenTelemetry adapter: OTLP exports (decoded with `opentelemetry-proto`) of spans that
//!   follow the GenAI semantic conventions and of Claude Code's log events, mapped to canonical events
//!   with deterministic ids and input tokens normalised (cache inside input); metrics are never usage.
//! - [`policy`]: the allowlist redaction engine. A versioned, hashed TOML policy; the default ships in the
//!   binary. Applied by the agent **before** anything is written to disk, and re-checked by the ingest.
//! - [`scrub`]: secret scrubbing for strings the policy lets through (API keys, bearer tokens, e-mail
//!   addresses, absolute paths).
//! - [`status`]: the health model: a session's status as a pure state machine over its events, with
//!   transitions and time in state; the agent and the ingest both derive status with it.
//! - [`usage`]: what one event adds to usage (tokens, cost in integer nano-USD, unpriced turns, tool
//!   calls and errors): the one rule the agent's local usage and the ingest's rollups both apply.
//! - [`prices`]: the effective-dated price catalog (shipped in `prices/catalog.toml`, plus tenants' own
//!   entries) and the pure lookup that estimates a turn's cost in integer nano-USD.
//! - [`pipeline`]: the one entry point both binaries use: native or canonical JSON in, a redacted
//!   canonical event (or a filter verdict) and a redaction report out.
//!
//! ## Invariants
//! - The same native event always maps to the same `event_id` (UUID v5 over its identity, never its payload).
//! - A canonical event that left [`policy::Policy::apply`] holds no field the policy does not list, and
//!   every string it holds has been scrubbed.
//! - `cached_tokens` and `cache_creation_tokens` are *included in* `input_tokens`; `cost_usd = 0` with tokens
//!   is `cost_source = "unreported"`, never free.

pub mod alert;
pub mod batch;
pub mod bundle;
pub mod colony;
pub mod device;
pub mod device_key;
pub mod event;
pub mod explain;
pub mod hive;
pub mod identity;
#[cfg(feature = "json-schema")]
pub mod json_schema;
pub mod line;
pub mod otel;
pub mod pipeline;
pub mod policy;
pub mod prices;
pub mod quota;
pub mod scrub;
pub mod session;
pub mod status;
pub mod timefmt;
pub mod usage;
pub mod work;

pub use batch::{Batch, BatchResponse, Rejection, SessionBinding};
pub use event::{AgentRole, CanonicalEvent, EventKind};
pub use pipeline::{process_otlp, process_owned, process_value, Outcome, ProcessOptions};
pub use policy::{Policy, RedactionReport};

/// The schema version this build writes.
pub const SCHEMA_VERSION: u32 = 1;

/// Schema versions this build accepts (N and N-1; version 1 is the first, so only 1).
pub const ACCEPTED_SCHEMA_VERSIONS: &[u32] = &[1];
