//! # apiary-ingest — the cloud side of Apiary
//!
//! Authenticated batch intake of canonical events with exact dedup and rollups, and the usage / session /
//! device query API, on Postgres (schema in `migrations/`).
//!
//! ## Request path of `POST /v1/batches`
//! token → [`auth`] (hashed tokens, scopes, per-token rate limit) → [`intake`] (decompress with caps, JSON,
//! schema version N/N-1, JSON Schema, [`bindings`]' ids and times → 422, identity bindings vs the token
//! → 403, per event: schema, envelope, allowlist re-applied, ranges, time window, clock correction) →
//! [`store::batch`] (one transaction: session owners ([`store::owners`]: another user's session is
//! refused per event) → dedup keys → sessions → events → [`rollups`] → devices, each step in sorted key
//! order).
//!
//! ## Invariants
//! - Dedup key is `(tenant_id, event_id)` in the unpartitioned `event_keys` table; only ids its insert
//!   RETURNs as new reach `events`, rollups and session state, in the same transaction. So a duplicate —
//!   replayed batch, two replicas receiving the same batch, an import of events already pushed — never
//!   counts twice, whatever its timestamps say.
//! - Rollups equal a scan of the stored *runtime* events (tested), at a 15-minute grain that makes hour /
//!   day / month buckets exact in every IANA zone, plus the same sums per UTC hour (`usage_rollups_hourly`,
//!   and per user, device, model and runtime only in `usage_rollups_narrow`) and per user, device, model
//!   and runtime per UTC day and month (`usage_rollups_daily`, `usage_rollups_monthly`), written in the same transaction,
//!   that answer the whole hours, days and months of a query. Device-level events
//!   (`agent.heartbeat`, `outbox.dropped`) are stored and deduped but never counted as usage: they update
//!   `devices` (liveness, backlog, `dropped_events`).
//! - Every read is bound to the token's tenant; another tenant's ids answer 404 exactly like unknown ids.
//!   The query functions take a typed read scope ([`access::TenantRead`]), not a tenant id, so a read
//!   without the tenant filter cannot be written by accident. A tenant's `admin` token administers its
//!   tenant only (`group_by=tenant` answers its own row); only an operator token, a separate credential
//!   made by the command line, reads usage across tenants, and only per tenant (and model)
//!   ([`access::OperatorRead`]). A non-admin token bound to a user reads only that user's usage,
//!   sessions, colonies and devices (`auth::Principal::read_user`).
//! - A batch is stored whole or not at all; a bad event is rejected with a reason and never stored.
//! - The live stream (`GET /v1/stream`, [`stream`]) is rows written in the batch's transaction (so a
//!   rolled-back batch streams nothing), delivered only once no transaction that could still commit
//!   below them is open: a resume after any delivered position misses nothing, on any replica.
//!
//! ## Modules
//! [`auth`] tokens · [`access`] read scopes · [`config`] settings · [`cli`] commands · [`state`] the
//! application state and its parts · [`startup`] server, shutdown, maintenance · [`routes`] one file
//! per route group, and the OpenAPI document generated from them · [`service`] the prices, budgets and
//! alerts operations the routes and the command line share · [`query`] reads (typed parameters,
//! pure planners, thin fetches, typed answers) · [`status`] session status rules · [`intake`] batch
//! checks (pure, with their own error) · [`import`] export bundles · [`metrics`] Prometheus ·
//! [`error`] the API error · [`stream`] the live stream (`GET /v1/stream`).

// What the command lines print goes through `apiary_plumbing::output` (`outln!`, `errln!`): `println!`
// panics when a pipe closes (`| head -1`).
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod access;
pub mod alerts;
pub mod auth;
pub mod auth_guard;
pub mod bindings;
pub mod budget_watch;
pub mod budgets;
pub mod cadence;
pub mod cli;
pub mod config;
pub mod dashboard;
pub mod device_admin;
pub mod doctor;
pub mod error;
pub mod exports;
pub mod group_commit;
pub mod import;
pub mod intake;
pub mod json_budget;
pub mod local_time;
pub mod metrics;
pub mod query;
pub mod rollups;
pub mod routes;
pub mod service;
pub mod startup;
pub mod state;
pub mod status;
pub mod store;
pub mod stream;
pub mod telemetry;
pub mod tool_rollups;
