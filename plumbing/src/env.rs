//! The `APIARY_*` variables: every one any Apiary program or script reads, in one registry, so that a
//! misspelled one is named instead of silently ignored.
//!
//! Rule at start-up (both binaries, and `doctor`):
//! - a variable in the registry is fine, whichever program reads it (the agent and the ingest may share
//!   an environment, e.g. in the demo);
//! - an unknown variable within two edits of a known one is a typo: start-up fails with the closest
//!   valid name (`APIARY_OUTBOX_MAX_BYTE is not an Apiary setting; did you mean APIARY_OUTBOX_MAX_BYTES?`);
//! - any other unknown `APIARY_*` variable is only warned about: the prefix is not ours alone (another
//!   tool named Apiary reads `APIARY_API_KEY`), and refusing to start over a stranger's variable would
//!   be worse than the typo it might be.
//!
//! Prefixes reserved for scripts and tests (`APIARY_PG_`, `APIARY_DEMO_`, `APIARY_TEST_`) are never
//! reported.

use crate::config::{Key, Kind};

/// The agent's settings keys (see `deploy/config/agent.toml`).
pub const AGENT_KEYS: &[Key] = &[
    Key::new("mode", Kind::Str),
    Key::new("listen", Kind::Str),
    Key::new("hive_home", Kind::Str),
    Key::new("zone", Kind::Str),
    Key::new("policy_file", Kind::Str),
    Key::new("log_format", Kind::Str),
    Key::new("identity.user_id", Kind::Str),
    Key::new("identity.tenant_id", Kind::Str),
    Key::new("identity.device_id", Kind::Str),
    Key::new("outbox.max_bytes", Kind::Int),
    Key::new("outbox.overflow", Kind::Str),
    Key::new("outbox.dedup_retention_hours", Kind::Int),
    Key::new("outbox.retry_after_secs", Kind::Int),
    Key::new("outbox.sqlite_max_page_count", Kind::Int),
    Key::new("intake.max_body_bytes", Kind::Int),
    Key::new("intake.max_line_bytes", Kind::Int),
    Key::new("intake.max_events", Kind::Int),
    Key::new("intake.max_bytes_in_flight", Kind::Int),
    Key::new("push.batch_max_events", Kind::Int),
    Key::new("push.batch_max_bytes", Kind::Int),
    Key::new("push.concurrency", Kind::Int),
    Key::new("push.connect_timeout_ms", Kind::Int),
    Key::new("push.request_timeout_ms", Kind::Int),
    Key::new("push.backoff_base_ms", Kind::Int),
    Key::new("push.backoff_cap_ms", Kind::Int),
    Key::new("push.poll_interval_ms", Kind::Int),
    Key::new("push.coalesce_interval_ms", Kind::Int),
    Key::new("push.coalesce_jitter_ms", Kind::Int),
    Key::new("push.min_interval_ms", Kind::Int),
    Key::new("push.max_interval_ms", Kind::Int),
    Key::new("push.coalesce_events", Kind::Int),
    Key::new("push.heartbeat_interval_secs", Kind::Int),
    Key::new("push.shutdown_grace_ms", Kind::Int),
    Key::new("otlp.enabled", Kind::Bool),
    Key::new("otlp.listen", Kind::Str),
];

/// The ingest's settings keys (see `deploy/config/ingest.toml`).
pub const INGEST_KEYS: &[Key] = &[
    Key::new("database_url", Kind::Str),
    Key::new("listen", Kind::Str),
    Key::new("pool_size", Kind::Int),
    Key::new("request_timeout_secs", Kind::Int),
    Key::new("shutdown_timeout_secs", Kind::Int),
    Key::new("max_body_bytes", Kind::Int),
    Key::new("max_decompressed_bytes", Kind::Int),
    Key::new("max_batch_events", Kind::Int),
    Key::new("rate_limit_per_sec", Kind::Float),
    Key::new("rate_limit_burst", Kind::Float),
    Key::new("stall_after_secs", Kind::Int),
    Key::new("offline_after_secs", Kind::Int),
    Key::new("retention_days", Kind::Int),
    Key::new("max_future_secs", Kind::Int),
    Key::new("clock_skew_tolerance_secs", Kind::Int),
    Key::new("token_cache_secs", Kind::Int),
    Key::new("header_read_timeout_secs", Kind::Int),
    Key::new("auth_failure_burst", Kind::Float),
    Key::new("auth_failures_per_sec", Kind::Float),
    Key::new("stream_max_subscribers", Kind::Int),
    Key::new("stream_max_per_tenant", Kind::Int),
    Key::new("group_commit", Kind::Bool),
    Key::new("group_commit_queue", Kind::Int),
    Key::new("group_commit_writers", Kind::Int),
    Key::new("group_commit_wait_ms", Kind::Int),
    Key::new("group_commit_max_events", Kind::Int),
    Key::new("cadence_base_ms", Kind::Int),
    Key::new("cadence_max_ms", Kind::Int),
    Key::new("cadence_target_ms", Kind::Int),
    Key::new("max_batches_in_flight", Kind::Int),
    Key::new("min_batches_in_flight", Kind::Int),
    Key::new("max_batches_in_flight_per_token", Kind::Int),
    Key::new("log_format", Kind::Str),
    Key::new("alerts.allow_private_destinations", Kind::Bool),
    Key::new("alerts.egress_proxy", Kind::Str),
    Key::new("alerts.evaluate_secs", Kind::Int),
    Key::new("alerts.max_attempts", Kind::Int),
    Key::new("alerts.retry_base_ms", Kind::Int),
    Key::new("alerts.retry_cap_secs", Kind::Int),
    Key::new("alerts.delivery_timeout_secs", Kind::Int),
];

/// Variables read outside the settings keys: command-line defaults and the test harness, each with what
/// it does (the configuration reference lists them).
pub const OTHER_VARS: &[(&str, &str)] = &[
    ("APIARY_CONFIG", "the ingest's config file (as `--config`)"),
    ("APIARY_DATA_DIR", "the agent's data directory (as `--data-dir`)"),
    (
        "APIARY_FULL_FAULTS",
        "tests: `1` runs the black-box fault loops at their full count (20 kill cycles instead of 10)",
    ),
    (
        "APIARY_REQUIRE_TMPFS",
        "tests: the real full-disk tests (a small tmpfs, as root) must run instead of skipping",
    ),
    (
        "APIARY_REQUIRE_BROWSER",
        "tests: the browser tests must run (Chromium installed) instead of skipping",
    ),
    (
        "APIARY_REQUIRE_WINDOWS",
        "tests: the Windows tests must run (the Windows agent under Wine) instead of skipping",
    ),
    (
        "APIARY_WINDOWS_AGENT",
        "Windows tests: the `apiary-agent.exe` they run under Wine (set by `scripts/windows.sh test`)",
    ),
    (
        "APIARY_WINDOWS_SDDL",
        "Windows tests: `sddl.exe`, which prints a file's owner and DACL (set by `scripts/windows.sh test`)",
    ),
    (
        "APIARY_CHROMIUM",
        "browser tests: the Chromium binary to drive (default: the one on `PATH`)",
    ),
    (
        "APIARY_SCREENSHOT_DIR",
        "browser tests: where screenshots go (default: under the target directory)",
    ),
    ("APIARY_HOSTILE_SEED", "hostile-input tests: replay this one seed"),
    (
        "APIARY_WRITE_COSTS",
        "write-path guard: `1` runs the statements and WAL count against its baseline (needs a private cluster)",
    ),
    (
        "APIARY_WRITE_COSTS_BLESS",
        "write-path guard: `1` rewrites the baseline with the figures measured",
    ),
];

/// Prefixes of variables that scripts and tests own (never reported).
pub const RESERVED_PREFIXES: &[&str] = &["APIARY_PG_", "APIARY_DEMO_", "APIARY_TEST_"];

/// Unknown variables at most this many edits from a known one are typos.
const TYPO_DISTANCE: usize = 2;

/// An `APIARY_*` variable no Apiary program reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownVar {
    /// The variable as set.
    pub var: String,
    /// The closest registered variable and its distance in edits.
    pub closest: Option<(String, usize)>,
}

impl UnknownVar {
    /// Close enough to a real name that it is surely a misspelling of it.
    pub fn is_typo(&self) -> bool {
        self.closest
            .as_ref()
            .is_some_and(|(_, d)| *d <= TYPO_DISTANCE)
    }

    /// One line for a log, an error or `doctor`.
    pub fn message(&self) -> String {
        match &self.closest {
            Some((name, _)) if self.is_typo() => format!(
                "{} is not an Apiary setting; did you mean {name}?",
                self.var
            ),
            Some((name, _)) => format!(
                "{} is not an Apiary setting and is ignored (the closest is {name})",
                self.var
            ),
            None => format!("{} is not an Apiary setting and is ignored", self.var),
        }
    }
}

/// Every registered variable name.
pub fn registered() -> Vec<String> {
    let mut all: Vec<String> = AGENT_KEYS
        .iter()
        .chain(INGEST_KEYS)
        .map(Key::env_var)
        .chain(OTHER_VARS.iter().map(|(name, _)| name.to_string()))
        .collect();
    all.sort();
    all.dedup();
    all
}

/// The `APIARY_*` variables of `env` that no program reads, in the order given.
pub fn unknown_vars<'a>(env: impl IntoIterator<Item = &'a (String, String)>) -> Vec<UnknownVar> {
    let known = registered();
    env.into_iter()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("APIARY_"))
        .filter(|k| !RESERVED_PREFIXES.iter().any(|p| k.starts_with(p)))
        .filter(|k| known.binary_search(k).is_err())
        .map(|k| UnknownVar {
            var: k.clone(),
            closest: known
                .iter()
                .map(|n| (n.clone(), edit_distance(k, n)))
                .min_by_key(|(_, d)| *d),
        })
        .collect()
}

/// The process environment without its unknown `APIARY_*` variables (for `doctor`, which reports those
/// itself and then checks the rest as if they were not set).
pub fn known_vars() -> Vec<(String, String)> {
    let env: Vec<(String, String)> = std::env::vars().collect();
    let unknown: Vec<String> = unknown_vars(&env).into_iter().map(|u| u.var).collect();
    env.into_iter()
        .filter(|(k, _)| !unknown.contains(k))
        .collect()
}

/// Logs a warning for each unknown variable of the process environment that is not a typo (typos stop
/// start-up before logging exists; see the module notes).
pub fn warn_unknown_vars() {
    let env: Vec<(String, String)> = std::env::vars().collect();
    for u in unknown_vars(&env).into_iter().filter(|u| !u.is_typo()) {
        tracing::warn!("{}", u.message());
    }
}

/// Levenshtein distance over bytes (variable names are ASCII).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(names: &[&str]) -> Vec<(String, String)> {
        names
            .iter()
            .map(|n| (n.to_string(), "x".to_string()))
            .collect()
    }

    #[test]
    fn a_misspelled_variable_is_a_typo_naming_the_real_one() {
        let found = unknown_vars(&vars(&["APIARY_OUTBOX_MAX_BYTE", "PATH"]));
        assert_eq!(found.len(), 1);
        assert!(found[0].is_typo());
        assert_eq!(
            found[0].message(),
            "APIARY_OUTBOX_MAX_BYTE is not an Apiary setting; did you mean APIARY_OUTBOX_MAX_BYTES?"
        );
    }

    #[test]
    fn known_reserved_and_foreign_variables_are_told_apart() {
        let found = unknown_vars(&vars(&[
            "APIARY_POOL_SIZE",
            "APIARY_PUSH_CONCURRENCY",
            "APIARY_PG_DIR",
            "APIARY_TEST_BIN_DIR",
            "APIARY_CONFIG",
            "APIARY_API_KEY",
        ]));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].var, "APIARY_API_KEY");
        assert!(!found[0].is_typo(), "{found:?}");
        assert!(found[0].message().contains("is ignored"));
    }

    #[test]
    fn edit_distance_counts_insertions_deletions_and_substitutions() {
        assert_eq!(edit_distance("abc", "abc"), 0);
        assert_eq!(edit_distance("abc", "abd"), 1);
        assert_eq!(edit_distance("abc", "ab"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
