//! Settings, layered: built-in defaults → TOML file (`--config FILE` or `APIARY_CONFIG`) → `APIARY_*`
//! environment variables → command-line flags (applied by [`crate::cli`]). `DATABASE_URL` is also read,
//! as the contract says, when `APIARY_DATABASE_URL` is not set.
//!
//! Every key of the file can be overridden by the variable `APIARY_<KEY IN UPPER CASE>`, e.g.
//! `stall_after_secs` ← `APIARY_STALL_AFTER_SECS`. [`IngestSettings::validate`] refuses combinations that
//! cannot work, with a message that says how to fix them.

use std::path::Path;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

/// Everything the ingest can be configured with.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngestSettings {
    /// Postgres URL (secret: it may hold a password).
    pub database_url: Option<SecretString>,
    /// Address `serve` listens on.
    pub listen: String,
    /// Connections in the pool.
    pub pool_size: u32,
    /// A request that takes longer is answered 408 and its work is abandoned (its transaction rolls back).
    pub request_timeout_secs: u64,
    /// Time given to requests in flight after SIGTERM/Ctrl-C.
    pub shutdown_timeout_secs: u64,
    /// Largest request body as sent (compressed) — 413 above.
    pub max_body_bytes: usize,
    /// Largest body after decompression — 413 above (guards against compression bombs). 16 MiB by
    /// default: four times the agent's largest batch (`push.batch_max_bytes`, 4 MiB).
    pub max_decompressed_bytes: usize,
    /// Most events in one batch — 413 above.
    pub max_batch_events: usize,
    /// Sustained requests per second per token.
    pub rate_limit_per_sec: f64,
    /// Burst allowance per token.
    pub rate_limit_burst: f64,
    /// An active session without progress for this long is `stalled`.
    pub stall_after_secs: i64,
    /// A device not heard from (heartbeat or batch) for this long makes its sessions `offline`.
    pub offline_after_secs: i64,
    /// Raw events older than this are dropped (whole partitions) and refused at intake.
    pub retention_days: i64,
    /// Events further than this in the future (after clock correction) are refused.
    pub max_future_secs: i64,
    /// The device clock is corrected when |sent_at − received_at| exceeds this.
    pub clock_skew_tolerance_secs: i64,
    /// How long a verified token is cached in memory (revocation takes effect within this); an unknown
    /// token is remembered as unknown for as long.
    pub token_cache_secs: u64,
    /// A connection that has not sent a complete request head this long after connecting (or after its
    /// previous response) is closed (slowloris; idle keep-alive connections too).
    pub header_read_timeout_secs: u64,
    /// Failed authentications a client address may make in a burst before it is answered 429 without a
    /// token lookup (see `auth_guard`)…
    pub auth_failure_burst: f64,
    /// …and the rate at which that allowance comes back.
    pub auth_failures_per_sec: f64,
    /// `json` in production, `pretty` for humans.
    pub log_format: String,
}

impl Default for IngestSettings {
    fn default() -> Self {
        IngestSettings {
            database_url: None,
            listen: "127.0.0.1:8080".into(),
            pool_size: 16,
            request_timeout_secs: 30,
            shutdown_timeout_secs: 20,
            max_body_bytes: 8 * 1024 * 1024,
            max_decompressed_bytes: 16 * 1024 * 1024,
            max_batch_events: 10_000,
            rate_limit_per_sec: 200.0,
            rate_limit_burst: 400.0,
            stall_after_secs: 600,
            offline_after_secs: 180,
            retention_days: 90,
            max_future_secs: 86_400,
            clock_skew_tolerance_secs: 60,
            token_cache_secs: 30,
            header_read_timeout_secs: 10,
            auth_failure_burst: 20.0,
            auth_failures_per_sec: 1.0,
            log_format: "pretty".into(),
        }
    }
}

/// Why settings could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("config file {path} is invalid: {source}")]
    Parse {
        path: String,
        source: toml::de::Error,
    },
    #[error("environment variable {var}: {why}")]
    Env { var: String, why: String },
    #[error("invalid settings: {0}")]
    Invalid(String),
}

impl IngestSettings {
    /// Defaults, then the file (if any), then the environment.
    pub fn load(file: Option<&Path>) -> Result<IngestSettings, ConfigError> {
        let file = file
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os("APIARY_CONFIG").map(Into::into));
        let mut settings = match file {
            Some(path) => {
                let shown = path.display().to_string();
                let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
                    path: shown.clone(),
                    source,
                })?;
                toml::from_str(&text).map_err(|source| ConfigError::Parse {
                    path: shown,
                    source,
                })?
            }
            None => IngestSettings::default(),
        };
        settings.apply_env(|k| std::env::var(k).ok())?;
        Ok(settings)
    }

    /// Applies `APIARY_*` overrides read through `get` (injectable for tests).
    pub fn apply_env(&mut self, get: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        fn num<T: std::str::FromStr>(var: &str, v: String) -> Result<T, ConfigError> {
            v.trim().parse().map_err(|_| ConfigError::Env {
                var: var.into(),
                why: format!("{v:?} is not a valid number"),
            })
        }
        macro_rules! env_num {
            ($($field:ident => $var:literal),* $(,)?) => {$(
                if let Some(v) = get($var) { self.$field = num($var, v)?; }
            )*};
        }
        if let Some(v) = get("APIARY_DATABASE_URL").or_else(|| get("DATABASE_URL")) {
            self.database_url = Some(SecretString::from(v));
        }
        if let Some(v) = get("APIARY_LISTEN") {
            self.listen = v;
        }
        if let Some(v) = get("APIARY_LOG_FORMAT") {
            self.log_format = v;
        }
        env_num!(
            pool_size => "APIARY_POOL_SIZE",
            request_timeout_secs => "APIARY_REQUEST_TIMEOUT_SECS",
            shutdown_timeout_secs => "APIARY_SHUTDOWN_TIMEOUT_SECS",
            max_body_bytes => "APIARY_MAX_BODY_BYTES",
            max_decompressed_bytes => "APIARY_MAX_DECOMPRESSED_BYTES",
            max_batch_events => "APIARY_MAX_BATCH_EVENTS",
            rate_limit_per_sec => "APIARY_RATE_LIMIT_PER_SEC",
            rate_limit_burst => "APIARY_RATE_LIMIT_BURST",
            stall_after_secs => "APIARY_STALL_AFTER_SECS",
            offline_after_secs => "APIARY_OFFLINE_AFTER_SECS",
            retention_days => "APIARY_RETENTION_DAYS",
            max_future_secs => "APIARY_MAX_FUTURE_SECS",
            clock_skew_tolerance_secs => "APIARY_CLOCK_SKEW_TOLERANCE_SECS",
            token_cache_secs => "APIARY_TOKEN_CACHE_SECS",
            header_read_timeout_secs => "APIARY_HEADER_READ_TIMEOUT_SECS",
            auth_failure_burst => "APIARY_AUTH_FAILURE_BURST",
            auth_failures_per_sec => "APIARY_AUTH_FAILURES_PER_SEC",
        );
        Ok(())
    }

    /// Refuses settings that cannot work.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: &str| Err(ConfigError::Invalid(m.to_string()));
        if self.pool_size == 0 {
            return bad("pool_size must be at least 1");
        }
        if self.max_decompressed_bytes < self.max_body_bytes {
            return bad("max_decompressed_bytes must be >= max_body_bytes");
        }
        if self.max_batch_events == 0 {
            return bad("max_batch_events must be at least 1");
        }
        if !(self.rate_limit_per_sec > 0.0 && self.rate_limit_burst >= 1.0) {
            return bad("rate_limit_per_sec must be > 0 and rate_limit_burst >= 1");
        }
        if !(self.auth_failures_per_sec > 0.0 && self.auth_failure_burst >= 1.0) {
            return bad("auth_failures_per_sec must be > 0 and auth_failure_burst >= 1");
        }
        if self.header_read_timeout_secs == 0 {
            return bad("header_read_timeout_secs must be at least 1");
        }
        if self.stall_after_secs <= 0 || self.offline_after_secs <= 0 {
            return bad("stall_after_secs and offline_after_secs must be positive");
        }
        if self.retention_days < 1 {
            return bad("retention_days must be at least 1");
        }
        if !matches!(self.log_format.as_str(), "json" | "pretty") {
            return bad("log_format must be `json` or `pretty`");
        }
        Ok(())
    }

    /// The database URL, or an error saying how to provide one.
    pub fn database_url(&self) -> Result<&str, ConfigError> {
        self.database_url
            .as_ref()
            .map(|s| s.expose_secret())
            .ok_or_else(|| {
                ConfigError::Invalid(
                    "no database: set DATABASE_URL (or APIARY_DATABASE_URL, or database_url in the config file)".into(),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_overrides_file_values_and_bad_numbers_name_the_variable() {
        let mut s: IngestSettings =
            toml::from_str("stall_after_secs = 5\nlisten = \"0.0.0.0:1\"").unwrap();
        s.apply_env(|k| (k == "APIARY_STALL_AFTER_SECS").then(|| "7".to_string()))
            .unwrap();
        assert_eq!(s.stall_after_secs, 7);
        assert_eq!(s.listen, "0.0.0.0:1");
        let err = s
            .apply_env(|k| (k == "APIARY_POOL_SIZE").then(|| "many".to_string()))
            .unwrap_err();
        assert!(err.to_string().contains("APIARY_POOL_SIZE"), "{err}");
    }

    #[test]
    fn unknown_file_keys_and_impossible_combinations_are_refused() {
        assert!(toml::from_str::<IngestSettings>("stall_after = 5").is_err());
        let s = IngestSettings {
            max_decompressed_bytes: 1,
            ..IngestSettings::default()
        };
        assert!(s.validate().is_err());
        IngestSettings::default().validate().unwrap();
    }
}
