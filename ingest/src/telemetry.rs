//! Logging: `tracing` to stderr, JSON or pretty by `log_format`; `RUST_LOG` wins over the default level.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber (once; later calls are ignored, which tests rely on).
pub fn init(format: &str) {
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_http=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
}
