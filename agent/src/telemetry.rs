//! Logging: `tracing` to stderr, text or JSON; `RUST_LOG` wins over the default level (the subscriber
//! both binaries share).

pub use apiary_plumbing::logging::init;
