//! Logging: `tracing` to stderr as human-readable text or JSON lines; `RUST_LOG` wins over the default
//! filter. Both binaries use the same words for `log_format`: `text` (also accepted: `pretty`, the
//! ingest's old word) and `json`.

use serde::{Deserialize, Serialize};
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event (for a terminal).
    #[serde(alias = "pretty")]
    Text,
    /// One JSON object per line (for log collectors).
    Json,
}

/// Installs the global subscriber (once; later calls do nothing, which tests rely on).
pub fn init(format: LogFormat, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}
