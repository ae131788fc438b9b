//! Plumbing both binaries share, so the agent and the ingest speak one vocabulary.
//!
//! - [`config`]: layered settings (built-in defaults → TOML file → `APIARY_*` environment → flags) on
//!   `figment`, with one rule for naming variables and typed values per key.
//! - [`env`]: the registry of every `APIARY_*` variable any Apiary program or script reads, and the
//!   check that names a misspelled one with the closest valid name.
//! - [`doctor`]: the one-line-per-check report of both `doctor` commands.
//! - [`error`]: error texts that say each cause once, for both command lines.
//! - [`logging`]: the `log_format` words (`text`, `json`) and the subscriber both binaries install.
//! - [`reference`]: the configuration reference page (`docs/configuration.md`), generated from the
//!   registry and the sample config files.
//!
//! Nothing here knows about events, outboxes or databases.

pub mod backoff;
pub mod config;
pub mod doctor;
pub mod env;
pub mod error;
pub mod logging;
pub mod reference;

pub use config::{ConfigError, Key, Kind};
pub use logging::LogFormat;
