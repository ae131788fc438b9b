//! Settings, layered: built-in defaults → TOML file (`--config FILE` or `APIARY_CONFIG`) → `APIARY_*`
//! environment variables → command-line flags (applied by [`crate::cli`]). `DATABASE_URL` is also read,
//! as the contract says, when `APIARY_DATABASE_URL` is not set.
//!
//! Every key of the file can be overridden by the variable `APIARY_<KEY IN UPPER CASE>`, e.g.
//! `stall_after_secs` ← `APIARY_STALL_AFTER_SECS` (the loader and the variable registry are shared with
//! the agent: `apiary-plumbing`; a misspelled `APIARY_*` variable fails start-up naming the real one). [`IngestSettings::validate`] refuses combinations that
//! cannot work, with a message that says how to fix them.

use std::path::Path;

use apiary_plumbing::config::Layers;
use apiary_plumbing::env::INGEST_KEYS;
use apiary_plumbing::LogFormat;
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
    /// Most live streams (`GET /v1/stream`) open on this replica at once; one more is answered 503
    /// with `Retry-After` (each costs a connection, a task and up to a page of rows).
    pub stream_max_subscribers: usize,
    /// Most live streams of one tenant open on this replica at once (so one tenant cannot take them all).
    pub stream_max_per_tenant: usize,
    /// Cross-request group commit ([`crate::group_commit`]): concurrent batches are written together in
    /// one transaction by a few writer tasks. Off: each request writes its own transaction.
    pub group_commit: bool,
    /// Batches waiting for a writer; one more is answered 503 with `Retry-After` (back-pressure).
    pub group_commit_queue: usize,
    /// Writer tasks (each holds at most one pooled connection at a time).
    pub group_commit_writers: usize,
    /// How long a writer waits for more batches after the first of a group (milliseconds).
    pub group_commit_wait_ms: u64,
    /// A group stops taking batches once it holds this many events and bindings. A 1000-event batch
    /// fills a group alone: groups of several large batches ran one after the other on one connection
    /// and made large batches slower than with group commit off (fleet bench: 0.67–0.87× at 5,000).
    pub group_commit_max_events: usize,
    /// The push interval the ingest asks of its agents at rest (milliseconds; `crate::cadence`): every
    /// batch answer carries `push_interval_ms`, which doubles per level of load up to `cadence_max_ms`
    /// and comes back down after calm seconds. Agents adopt it within their own floor and ceiling.
    pub cadence_base_ms: u64,
    /// The longest push interval the ingest asks for under load (milliseconds).
    pub cadence_max_ms: u64,
    /// Server time of a batch (per started hundred events) above which it counts as slow: more than 1%
    /// slow batches in a second, and at least three, is load (milliseconds).
    pub cadence_target_ms: u64,
    /// Most batches this replica handles at once: the ceiling of the bound in force, beyond which a
    /// batch is answered 429 with `Retry-After` before its body is read (past capacity, the fleet waits
    /// instead of the latency growing). Half of it in flight also counts as load for the cadence.
    pub max_batches_in_flight: usize,
    /// The floor of the bound in force: a second whose batches are slow (the cadence's loaded rule)
    /// brings it to 3/4 of what was in flight, by at most half and not below this; seconds on time raise
    /// it back towards `max_batches_in_flight` (`crate::cadence`). Equal to it (or above): a fixed bound.
    pub min_batches_in_flight: usize,
    /// Most batches in flight at once for one token (clamped to `max_batches_in_flight`): one more is
    /// answered 429 with `Retry-After` before its body is read. An agent sends at most
    /// `push.concurrency` (4) at once; the share keeps one token (a device's, or one shared by many
    /// agents) from holding the whole bound, e.g. with bodies uploaded slowly on purpose.
    pub max_batches_in_flight_per_token: usize,
    /// `json` in production, `text` for humans (`pretty` is accepted for `text`).
    pub log_format: LogFormat,
    /// Alert rules and notification delivery (`[alerts]`).
    pub alerts: AlertSettings,
}

/// Alert rules and notification delivery (see `crate::alerts`).
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AlertSettings {
    /// Allow `http://` destinations and ones at loopback, private or link-local addresses: for local use
    /// and tests only (server-side request forgery otherwise).
    pub allow_private_destinations: bool,
    /// The one proxy notifications may go through (`http://` or `https://`, credentials allowed, hence
    /// secret). Unset: deliveries go straight to the checked addresses, and the environment's
    /// `HTTPS_PROXY`/`HTTP_PROXY`/`ALL_PROXY` are ignored (such a proxy resolves names itself, which
    /// would undo the address check). Set: the proxy resolves names and must refuse non-public ones.
    pub egress_proxy: Option<SecretString>,
    /// How often each replica evaluates the alert rules (one replica per tenant at a time).
    pub evaluate_secs: u64,
    /// Delivery attempts before a notification is dead.
    pub max_attempts: u32,
    /// First retry delay (doubling, full jitter, up to the cap; `Retry-After` is a floor).
    pub retry_base_ms: u64,
    pub retry_cap_secs: u64,
    /// Longest one delivery may take (connect, send, answer).
    pub delivery_timeout_secs: u64,
}

impl Default for AlertSettings {
    fn default() -> Self {
        AlertSettings {
            allow_private_destinations: false,
            egress_proxy: None,
            evaluate_secs: 15,
            max_attempts: 10,
            retry_base_ms: 2_000,
            retry_cap_secs: 900,
            delivery_timeout_secs: 10,
        }
    }
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
            stall_after_secs: 300,
            offline_after_secs: 180,
            retention_days: 90,
            max_future_secs: 86_400,
            clock_skew_tolerance_secs: 60,
            token_cache_secs: 30,
            header_read_timeout_secs: 10,
            auth_failure_burst: 20.0,
            auth_failures_per_sec: 1.0,
            stream_max_subscribers: 10_000,
            stream_max_per_tenant: 2_000,
            group_commit: true,
            group_commit_queue: 1_024,
            group_commit_writers: 4,
            group_commit_wait_ms: 2,
            group_commit_max_events: 1_000,
            cadence_base_ms: 1_000,
            cadence_max_ms: 30_000,
            cadence_target_ms: 100,
            max_batches_in_flight: 256,
            min_batches_in_flight: 16,
            max_batches_in_flight_per_token: 32,
            log_format: LogFormat::Text,
            alerts: AlertSettings::default(),
        }
    }
}

/// Why settings could not be loaded (the shared type: messages name the file or variable at fault).
pub use apiary_plumbing::ConfigError;

impl IngestSettings {
    /// Defaults, then the file (if any), then the environment.
    pub fn load(file: Option<&Path>) -> Result<IngestSettings, ConfigError> {
        IngestSettings::load_from(file, &std::env::vars().collect::<Vec<_>>())
    }

    /// [`IngestSettings::load`] with an explicit environment (for tests).
    pub fn load_from(
        file: Option<&Path>,
        env: &[(String, String)],
    ) -> Result<IngestSettings, ConfigError> {
        let var = |name: &str| env.iter().rev().find(|(k, _)| k == name).map(|(_, v)| v);
        let file = file
            .map(Path::to_path_buf)
            .or_else(|| var("APIARY_CONFIG").map(Into::into));
        if let Some(typo) = apiary_plumbing::env::unknown_vars(env)
            .into_iter()
            .find(|u| u.is_typo())
        {
            return Err(ConfigError::Invalid(typo.message()));
        }
        let mut settings: IngestSettings = apiary_plumbing::config::load(Layers {
            file: file.as_deref(),
            env,
            keys: INGEST_KEYS,
        })?;
        if var("APIARY_DATABASE_URL").is_none() {
            if let Some(url) = var("DATABASE_URL") {
                settings.database_url = Some(SecretString::from(url.clone()));
            }
        }
        Ok(settings)
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
        if self.group_commit
            && (self.group_commit_queue == 0
                || self.group_commit_writers == 0
                || self.group_commit_max_events == 0)
        {
            return bad("group_commit_queue, group_commit_writers and group_commit_max_events must be at least 1 (or set group_commit = false)");
        }
        if self.group_commit_wait_ms > 1_000 {
            return bad(
                "group_commit_wait_ms must be at most 1000 (a few milliseconds is the point)",
            );
        }
        if self.cadence_base_ms == 0 || self.cadence_max_ms < self.cadence_base_ms {
            return bad(
                "cadence_base_ms must be at least 1 and cadence_max_ms at least cadence_base_ms",
            );
        }
        if self.cadence_max_ms > 3_600_000 {
            return bad("cadence_max_ms must be at most 3600000 (an hour)");
        }
        if self.cadence_target_ms == 0
            || self.max_batches_in_flight == 0
            || self.max_batches_in_flight_per_token == 0
            || self.min_batches_in_flight == 0
        {
            return bad("cadence_target_ms, max_batches_in_flight, min_batches_in_flight and max_batches_in_flight_per_token must be at least 1");
        }
        if self.stream_max_subscribers == 0 || self.stream_max_per_tenant == 0 {
            return bad("stream_max_subscribers and stream_max_per_tenant must be at least 1");
        }
        let a = &self.alerts;
        if a.evaluate_secs == 0
            || a.max_attempts == 0
            || a.retry_base_ms == 0
            || a.delivery_timeout_secs == 0
        {
            return bad("alerts.evaluate_secs, alerts.max_attempts, alerts.retry_base_ms and alerts.delivery_timeout_secs must be at least 1");
        }
        if a.retry_cap_secs * 1000 < a.retry_base_ms {
            return bad("alerts.retry_cap_secs must be at least alerts.retry_base_ms");
        }
        if let Some(proxy) = &a.egress_proxy {
            check_egress_proxy(proxy.expose_secret()).map_err(ConfigError::Invalid)?;
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

/// `alerts.egress_proxy` is an `http://` or `https://` URL of a proxy: a host, no path. The messages
/// never repeat the value (it may hold a password).
fn check_egress_proxy(raw: &str) -> Result<(), String> {
    let fix = "set it to the proxy's URL, e.g. http://egress.internal:3128 (or leave it unset to deliver directly)";
    let url = reqwest::Url::parse(raw)
        .map_err(|e| format!("alerts.egress_proxy is not a URL ({e}): {fix}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "alerts.egress_proxy: scheme {:?} is not http or https: {fix}",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) || !matches!(url.path(), "" | "/") {
        return Err(format!(
            "alerts.egress_proxy must name a proxy host and no path: {fix}"
        ));
    }
    reqwest::Proxy::all(raw)
        .map(|_| ())
        .map_err(|e| format!("alerts.egress_proxy: {}: {fix}", e.without_url()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn env_overrides_file_values_and_bad_numbers_name_the_variable() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ingest.toml");
        std::fs::write(
            &file,
            "stall_after_secs = 5\nlisten = \"0.0.0.0:1\"\nlog_format = \"pretty\"\n",
        )
        .unwrap();
        let s = IngestSettings::load_from(Some(&file), &env(&[("APIARY_STALL_AFTER_SECS", "7")]))
            .unwrap();
        assert_eq!(s.stall_after_secs, 7);
        assert_eq!(s.listen, "0.0.0.0:1");
        assert_eq!(s.log_format, LogFormat::Text);
        let err =
            IngestSettings::load_from(None, &env(&[("APIARY_POOL_SIZE", "many")])).unwrap_err();
        assert!(err.to_string().contains("APIARY_POOL_SIZE"), "{err}");
        let err = IngestSettings::load_from(None, &env(&[("APIARY_POOL_SIZ", "3")])).unwrap_err();
        assert!(
            err.to_string().contains("did you mean APIARY_POOL_SIZE?"),
            "{err}"
        );
        let s = IngestSettings::load_from(
            None,
            &env(&[
                ("DATABASE_URL", "postgres://a/b"),
                ("APIARY_OUTBOX_MAX_BYTES", "9"),
            ]),
        )
        .unwrap();
        assert_eq!(s.database_url().unwrap(), "postgres://a/b");
    }

    /// The sample says "every key, with its default": loading it must give the built-in defaults, and
    /// every key of the registry must be in it.
    #[test]
    fn the_sample_config_shows_every_key_with_its_real_default() {
        let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/config/ingest.toml");
        let loaded = IngestSettings::load_from(Some(&sample), &[]).unwrap();
        assert_eq!(
            format!("{loaded:?}"),
            format!("{:?}", IngestSettings::default())
        );
        let text = std::fs::read_to_string(&sample).unwrap();
        for key in INGEST_KEYS {
            assert!(
                text.lines().any(|l| l
                    .trim_start_matches("# ")
                    .starts_with(&format!("{} = ", key.path))),
                "{} is not in the sample",
                key.path
            );
        }
    }

    #[test]
    fn an_egress_proxy_is_a_proxy_url_and_never_echoed() {
        let with = |v: &str| {
            IngestSettings::load_from(None, &env(&[("APIARY_ALERTS_EGRESS_PROXY", v)])).unwrap()
        };
        let s = with("http://apiary:hunter2@egress.internal:3128");
        s.validate().unwrap();
        assert!(
            !format!("{s:?}").contains("hunter2"),
            "the proxy's password stays out of logs"
        );
        with("https://egress.internal").validate().unwrap();
        for bad in [
            "egress.internal:3128",
            "socks5://egress.internal:1080",
            "ftp://egress.internal",
            "http://egress.internal:3128/some/path",
            "http://:hunter2@/",
        ] {
            let err = with(bad).validate().unwrap_err().to_string();
            assert!(err.contains("alerts.egress_proxy"), "{bad}: {err}");
            assert!(!err.contains("hunter2"), "{bad}: {err}");
        }
    }

    #[test]
    fn a_burst_below_one_request_is_refused() {
        let err = IngestSettings::load_from(None, &env(&[("APIARY_RATE_LIMIT_BURST", "0.5")]))
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(err.to_string().contains("rate_limit_burst"), "{err}");
    }

    #[test]
    fn unknown_file_keys_and_impossible_combinations_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ingest.toml");
        std::fs::write(&file, "stall_after = 5\n").unwrap();
        let err = IngestSettings::load_from(Some(&file), &[]).unwrap_err();
        assert!(err.to_string().contains("stall_after"), "{err}");
        let s = IngestSettings {
            max_decompressed_bytes: 1,
            ..IngestSettings::default()
        };
        assert!(s.validate().is_err());
        let s = IngestSettings {
            max_batches_in_flight_per_token: 0,
            ..IngestSettings::default()
        };
        let err = s.validate().unwrap_err().to_string();
        assert!(err.contains("max_batches_in_flight_per_token"), "{err}");
        IngestSettings::default().validate().unwrap();
    }
}
