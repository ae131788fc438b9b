//! `apiary-agent doctor --data-dir DIR`: one line per check, `✓` fine, `!` worth knowing, `✗` wrong (with
//! the fix on the next line); exit status 1 when anything is wrong.
//!
//! Checks, in order (a later one is skipped when what it needs failed): `APIARY_*` variables (a
//! misspelling names the real one); the configuration; the data directory; the outbox (present, counters
//! balanced, health of the running agent, use of its cap, dead letters); consent (sync on, paused and
//! why, air-gapped); the token file (exists, regular, non-empty, private); the endpoint (an `https` URL
//! or loopback `http`, reachable, an Apiary ingest, its clock against ours); the token's identity from
//! `GET /v1/whoami` against the configured and stored identity; the push loop's last problem; the Hive
//! home (found, with logs, when they were last written).
//!
//! Read-only: nothing is written to the outbox and nothing is sent to the ingest but two GETs.

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use apiary_plumbing::doctor::Report;

use super::commands::live_status;
use super::doctor_problems as problem;
use super::Common;
use crate::config::{Mode, Overrides, Settings};
use crate::outbox::OutboxReader;

pub async fn doctor(common: &Common) -> anyhow::Result<ExitCode> {
    let mut r = Report::default();
    let dir = common.data_dir.display().to_string();
    apiary_plumbing::doctor::check_variables(&mut r);
    // The variables were judged above; the rest is checked with the known ones only.
    let known = apiary_plumbing::env::known_vars();
    let loaded = Settings::load(
        &common.data_dir,
        common.config.as_deref(),
        known,
        &Overrides::default(),
    );
    let settings = match loaded {
        Ok(s) => {
            r.ok("configuration loads");
            Some(s)
        }
        Err(e) => {
            let error = apiary_plumbing::error::chain(&e);
            problem::CONFIGURATION.report(&mut r, &[("error", &error)]);
            None
        }
    };
    let status = check_outbox(&mut r, &common.data_dir, &dir).await;
    check_disk(&mut r, &common.data_dir);
    if let Some(status) = &status {
        if let Some(settings) = &settings {
            check_sync(&mut r, settings, status, &dir).await;
        }
    }
    if let Some(settings) = &settings {
        // The running agent's (`--hive-home` wins over the configuration), else the configured one.
        let running = status
            .as_ref()
            .and_then(|s| s["hive_home"].as_str())
            .map(std::path::PathBuf::from);
        check_hive_home(&mut r, running.as_ref().or(settings.hive_home.as_ref()));
    }
    r.print()?;
    Ok(if r.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The outbox and the running agent; the status JSON (live if the agent answers, else stored).
async fn check_outbox(r: &mut Report, data_dir: &Path, dir: &str) -> Option<Value> {
    let db = data_dir.join("outbox.db");
    if !db.exists() {
        problem::NO_OUTBOX.report(r, &[("dir", dir)]);
        return None;
    }
    let (status, running) = match live_status(data_dir).await {
        Some(body) => (serde_json::to_value(body).ok()?, true),
        None => {
            let stored = OutboxReader::open(&db).ok()?.stored_status().ok()?;
            (serde_json::to_value(stored).ok()?, false)
        }
    };
    if running {
        r.ok("the agent is running and answers on its local API");
    } else {
        r.note(
            "the agent is not running (or does not answer on DIR/agent.addr)",
            format!("start it: apiary-agent run --data-dir {dir}"),
        );
    }
    if status["balanced"].as_bool() == Some(true) {
        r.ok("outbox counters add up");
    } else {
        problem::UNBALANCED.report(r, &[]);
    }
    if let Some(state) = status.pointer("/health/state").and_then(Value::as_str) {
        if state == "ok" {
            r.ok("outbox health: ok");
        } else {
            let why = status
                .pointer("/health/last_error")
                .and_then(Value::as_str)
                .unwrap_or("");
            problem::OUTBOX_HEALTH.report(r, &[("state", state), ("why", why)]);
        }
    }
    let (used, max) = (
        status["used_bytes"].as_u64().unwrap_or(0),
        status["max_bytes"].as_u64().unwrap_or(0),
    );
    if max > 0 && used * 10 > max * 8 {
        r.note(
            format!("the outbox uses {used} of its {max} bytes"),
            "deliver the backlog (enable sync) or raise outbox.max_bytes",
        );
    }
    if let Some(n) = status["dead_letters"].as_u64().filter(|n| *n > 0) {
        r.note(
            format!("{n} events were refused by the ingest (dead letters)"),
            "see the reasons in the agent's log; they are never retried",
        );
    }
    Some(status)
}

async fn check_sync(r: &mut Report, settings: &Settings, status: &Value, dir: &str) {
    if settings.mode == Mode::Airgapped {
        r.ok(format!(
            "air-gapped: nothing is sent; export with apiary-agent export --data-dir {dir} --out FILE"
        ));
        return;
    }
    let sync = &status["sync"];
    let enable = format!(
        "apiary-agent sync enable --data-dir {dir} --endpoint https://INGEST --token-file FILE"
    );
    if sync["enabled"].as_bool() != Some(true) {
        r.note("sync is off: events stay on this device", enable);
        return;
    }
    let paused = sync["paused_reason"].as_str();
    if let Some(why) = paused {
        let words =
            crate::push::pauses::of(why).map_or(String::new(), |p| format!(" ({})", p.words));
        r.wrong(
            format!("sync is paused: {why}{words}"),
            pause_fix(why, &enable),
        );
    } else {
        r.ok("sync is on");
    }
    let Some(token_file) = sync["token_file"].as_str() else {
        problem::NO_TOKEN_FILE_RECORDED.report(r, &[("enable", &enable)]);
        return;
    };
    let token = match check_token_file(r, Path::new(token_file)) {
        Some(t) => t,
        None => return,
    };
    let Some(endpoint) = sync["endpoint"].as_str() else {
        problem::NO_ENDPOINT_RECORDED.report(r, &[("enable", &enable)]);
        return;
    };
    if let Some(whoami) = check_endpoint(r, endpoint, &token, &enable).await {
        check_identity(r, settings, status, &whoami);
    }
    if let Some(error) = status.pointer("/last_push/error").and_then(Value::as_str) {
        let failed = if paused.is_some() {
            problem::LAST_PUSH_FAILED_PAUSED
        } else {
            problem::LAST_PUSH_FAILED
        };
        failed.report(r, &[("error", error)]);
    }
}

/// The fix for a pause reason: exactly what lifts it ([`crate::push::pauses`]).
fn pause_fix(reason: &str, enable: &str) -> String {
    match crate::push::pauses::of(reason) {
        Some(p) => p.fix.to_string(),
        None => format!("fix what the reason names, then: {enable}"),
    }
}

/// The token file: exists, regular, non-empty, private. Its trimmed content when usable.
fn check_token_file(r: &mut Report, path: &Path) -> Option<String> {
    let shown = path.display().to_string();
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) => {
            let error = e.to_string();
            problem::TOKEN_FILE_UNREADABLE.report(r, &[("file", &shown), ("error", &error)]);
            return None;
        }
    };
    if !meta.is_file() {
        problem::TOKEN_FILE_NOT_REGULAR.report(r, &[("file", &shown)]);
        return None;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            let mode = format!("{mode:o}");
            problem::TOKEN_FILE_OPEN.report(r, &[("file", &shown), ("mode", &mode)]);
        }
    }
    #[cfg(windows)]
    {
        use crate::platform::windows::{check_private_file, describe_sids, NotPrivate};
        match check_private_file(path) {
            Ok(Ok(())) => {}
            Ok(Err(NotPrivate::Open(sids))) => {
                let who = describe_sids(&sids);
                problem::TOKEN_FILE_DACL.report(r, &[("file", &shown), ("who", &who)])
            }
            Ok(Err(NotPrivate::Owner(owner))) => {
                problem::TOKEN_FILE_OWNER.report(r, &[("file", &shown), ("owner", &owner)])
            }
            Err(e) => {
                let error = e.to_string();
                problem::TOKEN_FILE_PERMISSIONS.report(r, &[("file", &shown), ("error", &error)])
            }
        }
    }
    let token = std::fs::read_to_string(path)
        .map(|t| t.trim().to_string())
        .unwrap_or_default();
    if token.is_empty() {
        problem::TOKEN_FILE_EMPTY.report(r, &[("file", &shown)]);
        return None;
    }
    r.ok(format!("token file {shown} is present and not empty"));
    Some(token)
}

/// Reaches `/healthz` and `/v1/whoami`; the whoami answer when the token is good. The endpoint is
/// judged by the rule the push loop applies ([`crate::push::target::batches_url`]).
async fn check_endpoint(
    r: &mut Report,
    endpoint: &str,
    token: &str,
    enable: &str,
) -> Option<Value> {
    let base = endpoint.trim_end_matches('/');
    if let Err(e) = crate::push::target::batches_url(endpoint) {
        let why = match &e {
            crate::push::PushError::Endpoint(_, why) => why.clone(),
            other => other.to_string(),
        };
        problem::ENDPOINT_REFUSED.report(
            r,
            &[("endpoint", endpoint), ("why", &why), ("enable", enable)],
        );
        return None;
    }
    if base.ends_with("/v1/batches") {
        problem::ENDPOINT_ROUTE.report(r, &[("endpoint", endpoint)]);
    }
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .ok()?;
    let sent = SystemTime::now();
    let health = match client.get(format!("{base}/healthz")).send().await {
        Ok(resp) => resp,
        Err(e) => {
            let error = crate::push::error_chain(&e);
            problem::UNREACHABLE.report(r, &[("base", base), ("error", &error)]);
            return None;
        }
    };
    if let Some(skew) = clock_skew(&health, sent) {
        if skew.abs() > 60 {
            problem::CLOCK.report(r, &[("skew", &skew.to_string())]);
        } else {
            r.ok(format!("clock within {} s of the ingest's", skew.abs()));
        }
    }
    let body: Value = health.json().await.unwrap_or(Value::Null);
    if body["service"] != "apiary-ingest" {
        problem::NOT_AN_INGEST.report(r, &[("base", base)]);
        return None;
    }
    r.ok(format!("{base} is an Apiary ingest"));
    let resp = client
        .get(format!("{base}/v1/whoami"))
        .bearer_auth(token)
        .send()
        .await
        .ok()?;
    match resp.status().as_u16() {
        200 => resp.json().await.ok(),
        s @ (401 | 403) => {
            problem::TOKEN_REFUSED.report(r, &[("status", &s.to_string())]);
            None
        }
        s => {
            r.note(format!("cannot check the token's identity (HTTP {s})"), "");
            None
        }
    }
}

fn check_identity(r: &mut Report, settings: &Settings, status: &Value, whoami: &Value) {
    if !whoami["scopes"]
        .as_array()
        .is_some_and(|s| s.iter().any(|x| x == "ingest"))
    {
        problem::NO_INGEST_SCOPE.report(r, &[]);
    }
    let mut agree = true;
    if let Some(bound) = whoami["device_id"].as_str() {
        let mine = settings
            .identity
            .device_id
            .as_deref()
            .or(status["device_id"].as_str());
        if mine.is_some_and(|m| m != bound) {
            agree = false;
            let (mine, bound) = (
                format!("{:?}", mine.unwrap_or_default()),
                format!("{bound:?}"),
            );
            problem::OTHER_DEVICE.report(r, &[("mine", &mine), ("bound", &bound)]);
        }
    }
    if let (Some(bound), Some(mine)) = (
        whoami["user_id"].as_str(),
        settings.identity.user_id.as_deref(),
    ) {
        if mine != bound {
            agree = false;
            let (mine, bound) = (format!("{mine:?}"), format!("{bound:?}"));
            problem::OTHER_USER.report(r, &[("mine", &mine), ("bound", &bound)]);
        }
    }
    if agree {
        r.ok(format!(
            "the token (tenant {}, user {}, device {}) agrees with this device's identity",
            whoami["tenant_id"].as_str().unwrap_or("?"),
            whoami["user_id"].as_str().unwrap_or("any"),
            whoami["device_id"].as_str().unwrap_or("any"),
        ));
    }
}

/// Below this much free space the outbox is about to refuse events (it keeps what it has, and the
/// runtime's logs are read again once space is freed, but new HTTP intake answers 503).
const DISK_WRONG_BYTES: u64 = crate::outbox::disk::LOW_FREE_BYTES;
/// Below this much, worth knowing.
const DISK_NOTE_BYTES: u64 = 1 << 30;

/// Free space on the data directory's file system, for an unprivileged user.
fn check_disk(r: &mut Report, data_dir: &Path) {
    let Some(free) = crate::outbox::disk::free_bytes(data_dir) else {
        r.note(
            "free disk space not checked (not readable here, or not on this platform)",
            "make sure the data directory's disk has room for the outbox (outbox.max_bytes)",
        );
        return;
    };
    let mib = free >> 20;
    if free < DISK_WRONG_BYTES {
        problem::DISK_FULL.report(r, &[("mib", &mib.to_string())]);
    } else if free < DISK_NOTE_BYTES {
        r.note(
            format!("{mib} MiB free on the data directory's disk"),
            "keep room for the outbox (outbox.max_bytes) and its write-ahead log",
        );
    } else {
        r.ok(format!("{mib} MiB free on the data directory's disk"));
    }
}

fn check_hive_home(r: &mut Report, home: Option<&std::path::PathBuf>) {
    let Some(home) = home else {
        r.note(
            "no Hive home is followed (no hive_home in the configuration, and the agent does not run \
             with --hive-home): only events posted to the local API are taken",
            "to follow Hive's logs (and have doctor check them): hive_home = \"/home/USER/.hive\" in \
             agent.toml",
        );
        return;
    };
    if !home.is_dir() {
        let home = home.display().to_string();
        problem::NO_HIVE_HOME.report(r, &[("home", &home)]);
        return;
    }
    let sources = crate::tail::discover_logs(home).unwrap_or_default();
    let newest = sources
        .iter()
        .filter_map(|s| std::fs::metadata(&s.path).ok()?.modified().ok())
        .max();
    match newest {
        None => r.note(
            format!("no Hive logs under {} yet", home.display()),
            "run Hive once; per-session logs appear under **/sessions/<id>/events.jsonl",
        ),
        Some(t) => {
            let ago = t.elapsed().unwrap_or_default().as_secs();
            r.ok(format!(
                "{} Hive logs under {}, the newest written {ago} s ago",
                sources.len(),
                home.display()
            ));
        }
    }
}

/// Seconds our clock is ahead (+) of the server's, from its `Date` header (1 s resolution).
fn clock_skew(resp: &reqwest::Response, sent: SystemTime) -> Option<i64> {
    let date = resp.headers().get(reqwest::header::DATE)?.to_str().ok()?;
    let theirs = chrono::DateTime::parse_from_rfc2822(date).ok()?;
    let ours = chrono::DateTime::<chrono::Utc>::from(sent);
    Some((ours - theirs.with_timezone(&chrono::Utc)).num_seconds())
}
