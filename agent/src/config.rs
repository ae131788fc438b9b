//! Layered configuration: defaults → TOML file → `APIARY_*` environment → command-line flags.
//!
//! The file is `--config FILE`, else `DIR/agent.toml` when it exists. Every key can be overridden by an
//! environment variable named `APIARY_` + the key path in upper case with `.` → `_`
//! (`outbox.max_bytes` → `APIARY_OUTBOX_MAX_BYTES`, `mode` → `APIARY_MODE`). Unknown keys in the file are
//! an error (a typo must not silently fall back to a default). Invalid combinations fail at start-up with
//! a message that says how to fix them ([`Settings::validate`]).
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `mode` | `online` | `online` or `airgapped` (never opens a socket to the ingest; use `export`) |
//! | `listen` | `127.0.0.1:4319` | local API address (loopback only) |
//! | `hive_home` | unset | follow Hive's logs under this directory |
//! | `zone` | `local` | zone of naive producer timestamps (`local`, `UTC`, an IANA name) |
//! | `policy_file` | unset | a user redaction policy (may only narrow the default) |
//! | `log_format` | `text` | `text` or `json` |
//! | `identity.user_id`, `identity.tenant_id`, `identity.device_id` | unset | identity defaults for new sessions |
//! | `outbox.max_bytes` | 536870912 | cap on the outbox's used bytes (the WAL beside it stays under about 80 MiB) |
//! | `outbox.overflow` | `reject` | `reject` (503 + Retry-After) or `drop_oldest` |
//! | `outbox.dedup_retention_hours` | 168 | how long settled ids are remembered for local dedup |
//! | `outbox.retry_after_secs` | 5 | Retry-After given to refused producers |
//! | `outbox.sqlite_max_page_count` | unset | testing: simulate a full disk |
//! | `intake.max_body_bytes` | 16777216 | larger request bodies get 413 |
//! | `intake.max_line_bytes` | 1048576 | larger events (NDJSON lines, array elements) get a per-event error |
//! | `intake.max_events` | 100000 | more events in one request get 413 (checked before any is parsed) |
//! | `intake.max_bytes_in_flight` | 33554432 | request bodies admitted at once, summed; past it a request waits, then gets 503 |
//! | `push.batch_max_events`, `push.batch_max_bytes` | 1000, 4194304 | push batch bounds (uncompressed JSON) |
//! | `push.concurrency` | 4 | batches in flight at once |
//! | `push.connect_timeout_ms`, `push.request_timeout_ms` | 5000, 30000 | HTTP timeouts |
//! | `push.backoff_base_ms`, `push.backoff_cap_ms` | 1000, 300000 | retry backoff (exponential, full jitter) |
//! | `push.poll_interval_ms` | 100 | how often an idle push loop looks for new events |
//! | `push.coalesce_interval_ms` | 1000 | how long claimed events may wait to go as one batch until the ingest asks for another interval (0: at once) |
//! | `push.coalesce_jitter_ms` | 500 | a random extra wait in [0, this) per batch, at most a quarter of the interval |
//! | `push.coalesce_events` | 100 | a batch of this many events goes without waiting (a large backlog always does) |
//! | `push.min_interval_ms`, `push.max_interval_ms` | 1000, 30000 | bounds of the push interval the ingest asks for, adopted in place of `coalesce_interval_ms` |
//! | `push.heartbeat_interval_secs` | 30 | heartbeat interval |
//! | `push.shutdown_grace_ms` | 10000 | time given to batches in flight at shutdown |
//! | `otlp.enabled` | `true` | the OTLP/HTTP receiver (`/v1/logs`, `/v1/traces`, `/v1/metrics`) |
//! | `otlp.listen` | `127.0.0.1:4318` | its address (loopback only; OTLP's usual HTTP port) |

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use apiary_plumbing::config::Layers;
use serde::{Deserialize, Serialize};

use crate::identity::IdentityDefaults;
use crate::outbox::OutboxSettings;

/// All settings of the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    pub mode: Mode,
    pub listen: SocketAddr,
    pub hive_home: Option<PathBuf>,
    pub zone: String,
    pub policy_file: Option<PathBuf>,
    pub log_format: LogFormat,
    pub identity: IdentityDefaults,
    pub outbox: OutboxSettings,
    pub intake: IntakeSettings,
    pub push: PushSettings,
    pub otlp: OtlpSettings,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            mode: Mode::Online,
            listen: SocketAddr::from(([127, 0, 0, 1], 4319)),
            hive_home: None,
            zone: "local".into(),
            policy_file: None,
            log_format: LogFormat::Text,
            identity: IdentityDefaults::default(),
            outbox: OutboxSettings::default(),
            intake: IntakeSettings::default(),
            push: PushSettings::default(),
            otlp: OtlpSettings::default(),
        }
    }
}

/// The OTLP/HTTP receiver (section `[otlp]`; see [`crate::otlp`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OtlpSettings {
    /// Off: no OTLP listener at all.
    pub enabled: bool,
    /// Loopback address of the receiver; OTLP exporters default to port 4318 for HTTP.
    pub listen: SocketAddr,
}

impl Default for OtlpSettings {
    fn default() -> Self {
        OtlpSettings {
            enabled: true,
            listen: SocketAddr::from(([127, 0, 0, 1], 4318)),
        }
    }
}

/// Online pushes to the ingest when sync is enabled; air-gapped never opens a socket to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Online,
    Airgapped,
}

impl Mode {
    /// The mode's word, as the configuration and the status JSON spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Online => "online",
            Mode::Airgapped => "airgapped",
        }
    }
}

/// `text` or `json` (the words both binaries use).
pub use apiary_plumbing::LogFormat;

/// HTTP intake limits (section `[intake]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct IntakeSettings {
    /// Larger request bodies get 413.
    pub max_body_bytes: usize,
    /// Larger events (NDJSON lines, array elements) get a per-event error without being parsed.
    pub max_line_bytes: usize,
    /// More events in one request get 413 before any is parsed: with the body limit, this bounds
    /// what a request can cost (a body of tiny values is millions of events).
    pub max_events: usize,
    /// Bytes of request bodies admitted at once, summed over requests (`POST /v1/events` and OTLP);
    /// a request that does not fit waits up to 5 s, then gets 503 ([`crate::http::budget`]).
    pub max_bytes_in_flight: usize,
}

impl Default for IntakeSettings {
    fn default() -> Self {
        IntakeSettings {
            max_body_bytes: 16 * 1024 * 1024,
            max_line_bytes: 1024 * 1024,
            max_events: 100_000,
            max_bytes_in_flight: 32 * 1024 * 1024,
        }
    }
}

pub use crate::push::PushSettings;

/// Every key an environment variable may set (the registry both binaries share).
pub use apiary_plumbing::env::AGENT_KEYS as KEYS;

/// The environment variable of a key.
pub use apiary_plumbing::config::env_name;

/// Configuration failures (the shared type: messages name the file or variable a bad value came from).
pub use apiary_plumbing::ConfigError;

/// Command-line overrides (flags win over everything).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub listen: Option<SocketAddr>,
    pub hive_home: Option<PathBuf>,
    pub mode: Option<Mode>,
    /// `--otlp-listen`: the OTLP receiver's address.
    pub otlp_listen: Option<SocketAddr>,
}

impl Settings {
    /// Loads defaults → file → environment (`env` is usually `std::env::vars()`) → flags, and validates.
    pub fn load(
        data_dir: &Path,
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        flags: &Overrides,
    ) -> Result<Settings, ConfigError> {
        let default_file = data_dir.join("agent.toml");
        let file = file
            .map(Path::to_path_buf)
            .or_else(|| default_file.exists().then_some(default_file));
        Settings::load_from(file.as_deref(), env, flags)
    }

    /// Like [`Settings::load`] with the file already chosen (`None`: defaults and environment only), for
    /// commands that need no data directory (`policy explain --config FILE`).
    pub fn load_from(
        file: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        flags: &Overrides,
    ) -> Result<Settings, ConfigError> {
        let env: Vec<(String, String)> = env.into_iter().collect();
        if let Some(typo) = apiary_plumbing::env::unknown_vars(&env)
            .into_iter()
            .find(|u| u.is_typo())
        {
            return Err(ConfigError::Invalid(typo.message()));
        }
        let mut settings: Settings = apiary_plumbing::config::load(Layers {
            file,
            env: &env,
            keys: KEYS,
        })?;
        if let Some(listen) = flags.listen {
            settings.listen = listen;
        }
        if let Some(home) = &flags.hive_home {
            settings.hive_home = Some(home.clone());
        }
        if let Some(mode) = flags.mode {
            settings.mode = mode;
        }
        if let Some(addr) = flags.otlp_listen {
            settings.otlp.listen = addr;
        }
        settings.validate()?;
        Ok(settings)
    }

    /// Rejects invalid combinations with a message that says how to fix them.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError::Invalid(m));
        if !self.listen.ip().is_loopback() {
            return bad(format!(
                "listen = {} is not a loopback address; the local API only listens on loopback \
                 (e.g. listen = \"127.0.0.1:4319\")",
                self.listen
            ));
        }
        if !self.otlp.listen.ip().is_loopback() {
            return bad(format!(
                "otlp.listen = {} is not a loopback address; the OTLP receiver only listens on loopback \
                 (e.g. otlp.listen = \"127.0.0.1:4318\"), or set otlp.enabled = false",
                self.otlp.listen
            ));
        }
        if self.outbox.max_bytes < 1024 * 1024 {
            return bad("outbox.max_bytes must be at least 1048576 (1 MiB)".into());
        }
        if self.intake.max_events == 0 {
            return bad("intake.max_events must be at least 1".into());
        }
        if self.intake.max_line_bytes > self.intake.max_body_bytes {
            return bad("intake.max_line_bytes cannot exceed intake.max_body_bytes".into());
        }
        if self.intake.max_bytes_in_flight < self.intake.max_body_bytes {
            return bad(format!(
                "intake.max_bytes_in_flight ({}) cannot be less than intake.max_body_bytes ({}): \
                 one body of the largest size must fit",
                self.intake.max_bytes_in_flight, self.intake.max_body_bytes
            ));
        }
        if self.push.batch_max_events == 0 || self.push.batch_max_bytes < 1024 {
            return bad("push.batch_max_events must be ≥ 1 and push.batch_max_bytes ≥ 1024".into());
        }
        let p = &self.push;
        if p.backoff_base_ms == 0 || p.backoff_base_ms > p.backoff_cap_ms {
            return bad(format!(
                "push.backoff_base_ms ({}) must be at least 1 and at most push.backoff_cap_ms ({}): \
                 the first retry waits up to the base, later ones up to the cap",
                p.backoff_base_ms, p.backoff_cap_ms
            ));
        }
        for (key, v) in [
            ("push.concurrency", p.concurrency as u64),
            ("push.connect_timeout_ms", p.connect_timeout_ms),
            ("push.request_timeout_ms", p.request_timeout_ms),
            ("push.poll_interval_ms", p.poll_interval_ms),
            ("push.coalesce_events", p.coalesce_events as u64),
            ("push.heartbeat_interval_secs", p.heartbeat_interval_secs),
        ] {
            if v == 0 {
                return bad(format!("{key} must be at least 1"));
            }
        }
        if p.min_interval_ms > p.max_interval_ms {
            return bad(format!(
                "push.min_interval_ms ({}) cannot exceed push.max_interval_ms ({}): they bound the \
                 push interval the ingest asks for",
                p.min_interval_ms, p.max_interval_ms
            ));
        }
        if p.connect_timeout_ms > p.request_timeout_ms {
            return bad(format!(
                "push.connect_timeout_ms ({}) cannot exceed push.request_timeout_ms ({}): the request \
                 timeout includes connecting",
                p.connect_timeout_ms, p.request_timeout_ms
            ));
        }
        if let Err(e) = self.zone.parse::<apiary_schema::hive::Zone>() {
            return bad(format!(
                "zone: {e} (use \"local\", \"UTC\" or an IANA name like \"Europe/Paris\")"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mode_word_is_its_serialized_name() {
        for mode in [Mode::Online, Mode::Airgapped] {
            assert_eq!(serde_json::json!(mode), mode.as_str());
        }
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn layers_apply_in_order_defaults_file_env_flags() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("agent.toml");
        std::fs::write(
            &file,
            "mode = \"airgapped\"\nlisten = \"127.0.0.1:5000\"\n[outbox]\nmax_bytes = 2000000\n[identity]\nuser_id = \"alice\"\n",
        )
        .unwrap();
        let s = Settings::load(dir.path(), None, env(&[]), &Overrides::default()).unwrap();
        assert_eq!(s.mode, Mode::Airgapped);
        assert_eq!(s.outbox.max_bytes, 2_000_000);
        assert_eq!(s.identity.user_id.as_deref(), Some("alice"));
        let e = env(&[
            ("APIARY_OUTBOX_MAX_BYTES", "3000000"),
            ("APIARY_LISTEN", "127.0.0.1:6000"),
        ]);
        let flags = Overrides {
            listen: Some("127.0.0.1:7000".parse().unwrap()),
            ..Overrides::default()
        };
        let s = Settings::load(dir.path(), Some(&file), e, &flags).unwrap();
        assert_eq!(s.outbox.max_bytes, 3_000_000);
        assert_eq!(s.listen.port(), 7000);
        assert_eq!(s.outbox.overflow, crate::outbox::Overflow::Reject);
    }

    #[test]
    fn the_bodies_in_flight_must_hold_one_body_of_the_largest_size() {
        let dir = tempfile::tempdir().unwrap();
        let e = env(&[("APIARY_INTAKE_MAX_BYTES_IN_FLIGHT", "1048576")]);
        let err = Settings::load(dir.path(), None, e, &Overrides::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("intake.max_bytes_in_flight (1048576) cannot be less than"),
            "{err}"
        );
        let e = env(&[
            ("APIARY_INTAKE_MAX_BYTES_IN_FLIGHT", "1048576"),
            ("APIARY_INTAKE_MAX_BODY_BYTES", "1048576"),
        ]);
        let s = Settings::load(dir.path(), None, e, &Overrides::default()).unwrap();
        assert_eq!(s.intake.max_bytes_in_flight, 1_048_576);
    }

    #[test]
    fn typos_and_bad_values_fail_with_a_clear_message() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("agent.toml"), "[outbox]\nmax_byte = 1\n").unwrap();
        let err = Settings::load(dir.path(), None, env(&[]), &Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("max_byte"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let e = env(&[("APIARY_OUTBOX_MAX_BYTES", "lots")]);
        let err = Settings::load(dir.path(), None, e, &Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("APIARY_OUTBOX_MAX_BYTES"), "{err}");
        let e = env(&[("APIARY_LISTEN", "0.0.0.0:4319")]);
        let err = Settings::load(dir.path(), None, e, &Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("loopback"), "{err}");
    }

    /// The sample says "every key, with its default": loading it must give the built-in defaults, and
    /// every key of the registry must be in it (set or commented out, in its section).
    #[test]
    fn the_sample_config_shows_every_key_with_its_real_default() {
        let sample = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/config/agent.toml");
        let dir = tempfile::tempdir().unwrap();
        let loaded =
            Settings::load(dir.path(), Some(&sample), env(&[]), &Overrides::default()).unwrap();
        assert_eq!(loaded, Settings::default());
        let text = std::fs::read_to_string(&sample).unwrap();
        let mut section = String::new();
        let mut found = std::collections::HashSet::new();
        for line in text.lines() {
            let line = line.trim_start_matches("# ").trim();
            if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = format!("{name}.");
            } else if let Some((key, _)) = line.split_once(" = ") {
                found.insert(format!("{section}{key}"));
            }
        }
        for key in KEYS {
            assert!(
                found.contains(key.path),
                "{} is not in the sample",
                key.path
            );
        }
    }

    #[test]
    fn impossible_push_settings_and_misspelled_variables_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = env(&[
            ("APIARY_PUSH_BACKOFF_BASE_MS", "5000"),
            ("APIARY_PUSH_BACKOFF_CAP_MS", "1000"),
        ]);
        let err = Settings::load(dir.path(), None, e, &Overrides::default()).unwrap_err();
        assert!(
            err.to_string().contains("push.backoff_base_ms (5000)"),
            "{err}"
        );
        let e = env(&[("APIARY_PUSH_CONCURRENCY", "0")]);
        let err = Settings::load(dir.path(), None, e, &Overrides::default()).unwrap_err();
        assert!(err.to_string().contains("push.concurrency"), "{err}");
        let e = env(&[("APIARY_OUTBOX_MAX_BYTE", "5")]);
        let err = Settings::load(dir.path(), None, e, &Overrides::default()).unwrap_err();
        assert!(
            err.to_string()
                .contains("did you mean APIARY_OUTBOX_MAX_BYTES?"),
            "{err}"
        );
        // The ingest's variables and strangers' are not the agent's business.
        let e = env(&[("APIARY_POOL_SIZE", "3"), ("APIARY_API_KEY", "k")]);
        Settings::load(dir.path(), None, e, &Overrides::default()).unwrap();
    }

    #[test]
    fn every_key_has_an_environment_variable_that_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let e = env(&[
            ("APIARY_OUTBOX_OVERFLOW", "drop_oldest"),
            ("APIARY_IDENTITY_TENANT_ID", "acme"),
            ("APIARY_HIVE_HOME", "/tmp/hive"),
        ]);
        let s = Settings::load(dir.path(), None, e, &Overrides::default()).unwrap();
        assert_eq!(s.outbox.overflow, crate::outbox::Overflow::DropOldest);
        assert_eq!(s.identity.tenant_id.as_deref(), Some("acme"));
        assert_eq!(s.hive_home, Some(PathBuf::from("/tmp/hive")));
        assert_eq!(
            env_name("push.heartbeat_interval_secs"),
            "APIARY_PUSH_HEARTBEAT_INTERVAL_SECS"
        );
    }
}
