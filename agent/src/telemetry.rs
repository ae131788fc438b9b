//! Logging: `tracing` to stderr (or a log file, `run --log-file`), text or JSON; `RUST_LOG` wins over the default level (the subscriber
//! both binaries share).

pub use apiary_plumbing::logging::{init, init_file};
