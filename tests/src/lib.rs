//! # Black-box test support
//!
//! The tests in `tests/tests/` start the **real** `apiary-agent` and `apiary-ingest` binaries against a
//! real PostgreSQL, on ports chosen at run time, and talk to them only through their command lines, HTTP
//! APIs and files — the way users and the desktop shell do.
//!
//! - [`bins`]: builds (a no-op when fresh) and finds the binaries of this workspace, so a test never runs
//!   a stale one.
//! - [`db`]: a fresh database per test on the server `DATABASE_URL` points at (`scripts/pg.sh`).
//! - [`procs`]: child processes that are killed when dropped, with their output kept for failure reports.
//! - [`pipes`]: commands whose reader goes away (`| head -1`, or a stdout already closed).
//! - [`proxy`]: a proxy of our own between agent and ingest that counts HTTP requests (not connections),
//!   can capture their bodies, and delays, holds, resets, blackholes and injects HTTP 503/429 bursts
//!   ([`http_wire`] frames the messages).
//! - [`ingest`]: `apiary-ingest serve` processes (killable, restartable on the same port) and its CLI.
//! - [`stack`]: a whole cloud per test (database, tenant and tokens made through the CLI, one ingest) and
//!   the typed query API.
//! - [`agent`]: `apiary-agent run` processes, their local API (status counters, intake) and CLI.
//! - [`events`]: hand-built wire events — Hive-native lines and canonical events — for these tests and
//!   the agent's and the ingest's own.
//! - [`fixture`]: the Hive fixture day replayed into a HIVE_HOME, as NDJSON, or as canonical batches.
//! - [`expect`]: what `/v1/usage` must answer for the fixture day, and the comparison.
//! - [`otlp`]: OTLP exports to the agent's receiver: Claude Code's documented events (fixture) with their
//!   usage computed independently, and a real OpenTelemetry SDK exporter emitting GenAI spans.
//! - [`isolation`]: tokens of any binding, hand-built events, batches and bindings for the isolation tests.
//! - [`hostile`]: what hostile-input tests need: a process's memory peak, compression bombs, raw sockets, raw agent requests, umask-run processes,
//!   file modes.
//! - [`sse`]: a Server-Sent Events reader (the ingest's and the agent's `GET /v1/stream`).
//! - [`scan`]: a dump of the cloud database searched for values that must never leave the device.
//! - [`webdriver`]: a small W3C WebDriver client and `chromedriver` runner (the dashboard's browser test).
//! - [`wine`]: the Windows agent under Wine (`APIARY_WINDOWS_AGENT`), Windows paths, `sddl.exe`; the
//!   agent harness starts it through [`wine::Launcher`].
//! - [`docs`]: the command blocks of the README and `docs/` pages, read into scripts with their checks
//!   (`tests/docs.rs` runs them).
//!
//! Every process is owned by a value that kills it when dropped, so a failing (panicking) test leaves
//! nothing running; every test gets its own database and temp directories.
//!
//! Environment: `DATABASE_URL` (a server whose role may create databases; `scripts/test.sh` provides
//! one), `APIARY_FULL_FAULTS=1` (20 kill cycles instead of 10 in `tests/faults.rs` and `tests/ingest_faults.rs`), `APIARY_TEST_BIN_DIR`
//! (run against binaries from another directory, e.g. `target/release`).

pub mod agent;
pub mod bins;
pub mod db;
pub mod docs;
pub mod events;
pub mod expect;
pub mod fixture;
pub mod hostile;
pub mod http_wire;
pub mod ingest;
pub mod isolation;
pub mod otlp;
pub mod pipes;
pub mod procs;
pub mod proxy;
pub mod receiver;
pub mod scan;
pub mod sse;
pub mod stack;
pub mod webdriver;
pub mod wine;

/// A free TCP port on 127.0.0.1 (bound and released; good enough for tests on one machine).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}

/// Whether the full fault loops were asked for (`APIARY_FULL_FAULTS=1`).
pub fn full_faults() -> bool {
    std::env::var("APIARY_FULL_FAULTS").is_ok_and(|v| v == "1")
}
