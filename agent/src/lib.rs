//! # apiary-agent — the on-device sidecar
//!
//! ```text
//! OTLP exporters ─POST /v1/{traces,logs,metrics}─▶ otlp ─┐  decode → apiary_schema::process_otlp
//! producers ──POST /v1/events──▶ http::events ─┐  parse → apiary_schema::process_value (classify, adapt,
//! Hive logs ──tail (tail/)─────▶ TailSink ─────┤  redact) on the producer's side, then
//!                                              ▼
//!                         outbox (one writer thread, group commit, SQLite WAL, synchronous=FULL)
//!                           │ events (pending → tombstones), counters, usage, sessions, consent,
//!                           │ dead letters, checkpoints
//!                           ├──▶ claim / ack / reject / fail ──▶ push loop (online + sync on only)
//!                           ├──▶ export bundle (air-gapped)
//!                           └──▶ local API: status, usage, quota, metrics, sync toggle; CLI: status, follow
//! ```
//!
//! ## Modules
//! - [`config`]: layered settings (defaults → TOML → `APIARY_*` → flags) and their validation.
//! - [`outbox`]: the durable store and its invariants (ack after commit, one terminal outcome per event,
//!   counters that add up, bounded disk, full-disk recovery, consent, dedup). Sealed: callers get
//!   [`outbox::Outbox`] (the push loop's claim/settle API, export) and [`outbox::OutboxReader`], with
//!   named reads, never a connection.
//! - [`http`]: the loopback API (bearer tokens `DIR/agent.token` for producers, `DIR/settings.token` for
//!   settings; mode 0600).
//! - [`otlp`]: the OTLP/HTTP receiver on its own loopback listener (Claude Code, OpenTelemetry GenAI
//!   instrumentations), with the same token, bounds, redaction and commit-before-ack as `/v1/events`.
//! - [`platform`]: what differs between operating systems (default data directory, DACLs on Windows,
//!   console control and the stop event, file identity), each behind `cfg`.
//! - [`private`]: private data directory and files, atomic writes, checks of token files handed in.
//! - [`tail`]: following Hive's own JSONL logs; the outbox implements its [`tail::TailSink`].
//! - [`identity`]: identity defaults and explicit session registration.
//! - [`device_key`]: the device signing key (Ed25519) that seals export bundles, and its online
//!   registration with the ingest.
//! - [`app`]: `run` — wiring, start-up and ordered shutdown on a cancellation token.
//! - [`quota`]: the budget state the ingest reports in its batch answers, kept by the outbox and shown
//!   by `GET /v1/quota`, `status` and the settings page; advisory (the agent never stops on its own).
//! - [`cli`]: the subcommands; [`telemetry`]: logging.
//!
//! ## Data directory
//! `DIR` (0700): `DIR/outbox.db` (+ `-wal`, `-shm`), `DIR/agent.token` (producers' bearer token),
//! `DIR/settings.token` (the settings API's bearer token), `DIR/device.key` (the device signing key),
//! `DIR/agent.addr` and `DIR/otlp.addr` (while running), all 0600 whatever the umask ([`private`]);
//! `DIR/agent.toml` (optional config).
//!
//! ## Modes
//! `online`: pushes run only while sync is enabled (consent). `airgapped`: no socket to the ingest is ever
//! opened, sync cannot be enabled; the outbox buffers up to its cap and `export` writes a bundle.

// What the command lines print goes through `apiary_plumbing::output` (`outln!`, `errln!`): `println!`
// panics when a pipe closes (`| head -1`).
#![deny(clippy::print_stdout, clippy::print_stderr)]

pub mod app;
pub mod cli;
pub mod config;
pub mod device_key;
pub mod http;
pub mod identity;
pub mod otlp;
pub mod outbox;
pub mod platform;
pub mod private;
pub mod push;
pub mod quota;
pub mod tail;
pub mod telemetry;
