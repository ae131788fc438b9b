//! Logging: `tracing` to stderr as human-readable text or JSON lines; `RUST_LOG` wins over the default
//! filter. Both binaries use the same words for `log_format`: `text` (also accepted: `pretty`, the
//! ingest's old word) and `json`.
//!
//! The `text` format colours its level words only when stderr is a terminal and `NO_COLOR` is unset or
//! empty (<https://no-color.org>): a log file, a pipe to `tee` or a service manager's journal gets plain
//! text, never escape codes.

use std::io::IsTerminal;

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

/// Whether text logs may be coloured: on a terminal, unless `NO_COLOR` holds a non-empty value.
pub fn colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// Installs the global subscriber (once; later calls do nothing, which tests rely on).
pub fn init(format: LogFormat, default_filter: &str) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let ansi = colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

/// [`init`], writing to `file` (appended, never coloured) instead of stderr: for a process that has no
/// terminal or service journal to write to (the Windows agent started at login).
pub fn init_file(format: LogFormat, default_filter: &str, file: std::fs::File) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::sync::Mutex::new(file))
        .with_ansi(false);
    let _ = match format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::colour;
    use std::ffi::OsStr;

    #[test]
    fn colour_only_on_a_terminal_without_no_color() {
        assert!(colour(true, None));
        // An empty NO_COLOR is as good as unset (no-color.org).
        assert!(colour(true, Some(OsStr::new(""))));
        assert!(!colour(true, Some(OsStr::new("1"))));
        assert!(!colour(false, None));
        assert!(!colour(false, Some(OsStr::new("1"))));
    }
}
