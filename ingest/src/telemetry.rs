//! Logging: `tracing` to stderr, `text` or `json` by `log_format`; `RUST_LOG` wins over the default filter
//! (the subscriber both binaries share, from `apiary-plumbing`).

use apiary_plumbing::LogFormat;

/// Installs the global subscriber (once; later calls are ignored, which tests rely on).
pub fn init(format: LogFormat) {
    apiary_plumbing::logging::init(format, "info,sqlx=warn,tower_http=warn");
}
