//! # Black-box test support
//!
//! The tests in `tests/tests/` start the **real** `apiary-agent` and `apiary-ingest` binaries against a
//! real PostgreSQL, on ports chosen at run time, and talk to them only through their command lines, HTTP
//! APIs and files — the way users and the desktop shell do.
//!
//! - [`bins`]: finds (and if needed builds) the binaries of this workspace.
//! - [`db`]: a fresh database per test on the server `DATABASE_URL` points at (`scripts/pg.sh`).
//! - [`procs`]: child processes that are killed when dropped, with their output kept for failure reports.
//! - [`proxy`]: a TCP proxy of our own between agent and ingest that delays, resets, blackholes and
//!   injects HTTP 503/429 bursts.

pub mod bins;
pub mod db;
pub mod procs;
pub mod proxy;

/// A free TCP port on 127.0.0.1 (bound and released; good enough for tests on one machine).
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local addr").port()
}
