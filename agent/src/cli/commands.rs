//! What each subcommand does.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use apiary_plumbing::{out, outln};

use serde::Serialize;

use super::{settings, Common, SyncAction};
use crate::app::{self, Application};
use crate::config::{LogFormat, Mode, Overrides, Settings};
use crate::http::StatusBody;
use crate::outbox::{Health, OutboxReader, StoredStatus, SyncChange};
use crate::telemetry;
use apiary_schema::colony::ColonyNames;

pub async fn run(
    common: &Common,
    flags: &Overrides,
    log_file: Option<&Path>,
) -> anyhow::Result<ExitCode> {
    let settings = settings(common, flags)?;
    match log_file {
        Some(path) => {
            let file = crate::private::open_log(path)
                .with_context(|| format!("opening the log file {}", path.display()))?;
            telemetry::init_file(settings.log_format, "info", file);
        }
        None => telemetry::init(settings.log_format, "info"),
    }
    apiary_plumbing::env::warn_unknown_vars();
    let stop = app::shutdown_on_signals();
    // `apiary-agent stop` on Windows: a named event (there is no SIGTERM).
    #[cfg(windows)]
    crate::platform::windows::stop_event(&common.data_dir, stop.clone())?;
    let app = Application::build(&common.data_dir, settings).await?;
    let result = app.run_until_stopped(stop).await;
    #[cfg(windows)]
    crate::platform::windows::shutdown_finished();
    result?;
    Ok(ExitCode::SUCCESS)
}

/// `apiary-agent stop` (Windows): asks the agent on the data directory to stop and waits for its ordered
/// shutdown.
#[cfg(windows)]
pub async fn stop(common: &Common, wait: Duration) -> anyhow::Result<ExitCode> {
    use crate::platform::windows::{signal_stop, StopOutcome};
    let dir = common.data_dir.clone();
    let outcome = tokio::task::spawn_blocking(move || signal_stop(&dir, wait)).await??;
    let shown = common.data_dir.display();
    Ok(match outcome {
        StopOutcome::Stopped => {
            outln!("stopped the agent on {shown}")?;
            ExitCode::SUCCESS
        }
        StopOutcome::NotRunning => {
            outln!("no agent is running on {shown}")?;
            ExitCode::SUCCESS
        }
        StopOutcome::StillRunning => {
            apiary_plumbing::errln!(
                "error: the agent on {shown} was asked to stop but is still running after {}s",
                wait.as_secs()
            );
            ExitCode::FAILURE
        }
    })
}

/// What `apiary-agent status` shows (and prints as is with `--json`): the running agent's answer
/// when it gives one, else the outbox as stored with the configured mode and cap.
#[derive(Debug, Clone, Serialize)]
pub struct CliStatus {
    #[serde(flatten)]
    pub shown: Shown,
    /// Whether the status is the running agent's (its health is known only then).
    pub agent_running: bool,
}

/// Where a [`CliStatus`] comes from.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Shown {
    /// The running agent's `GET /v1/status`.
    Live(StatusBody),
    /// Read from the outbox file: no agent answered.
    Stored {
        #[serde(flatten)]
        stored: StoredStatus,
        /// The configured mode.
        mode: Mode,
        /// The configured cap (`outbox.max_bytes`).
        max_bytes: u64,
    },
}

impl CliStatus {
    fn live(body: StatusBody) -> CliStatus {
        CliStatus {
            shown: Shown::Live(body),
            agent_running: true,
        }
    }

    fn stored(stored: StoredStatus, settings: &Settings) -> CliStatus {
        CliStatus {
            shown: Shown::Stored {
                stored,
                mode: settings.mode,
                max_bytes: settings.outbox.max_bytes,
            },
            agent_running: false,
        }
    }

    fn stored_status(&self) -> &StoredStatus {
        match &self.shown {
            Shown::Live(body) => &body.status.stored,
            Shown::Stored { stored, .. } => stored,
        }
    }

    fn mode(&self) -> Mode {
        match &self.shown {
            Shown::Live(body) => body.mode,
            Shown::Stored { mode, .. } => *mode,
        }
    }

    fn max_bytes(&self) -> u64 {
        match &self.shown {
            Shown::Live(body) => body.status.max_bytes,
            Shown::Stored { max_bytes, .. } => *max_bytes,
        }
    }

    /// The writer's health: the running agent's only.
    fn health(&self) -> Option<&Health> {
        match &self.shown {
            Shown::Live(body) => Some(&body.status.health),
            Shown::Stored { .. } => None,
        }
    }
}

pub async fn status(common: &Common, json: bool) -> anyhow::Result<ExitCode> {
    telemetry::init(LogFormat::Text, "warn");
    let settings = settings(common, &Overrides::default())?;
    let db = common.data_dir.join("outbox.db");
    anyhow::ensure!(
        db.exists(),
        "no outbox at {} (has the agent run yet?)",
        db.display()
    );
    let status = match live_status(&common.data_dir).await {
        Some(body) => CliStatus::live(body),
        None => {
            let reader = OutboxReader::open(&db).context("opening the outbox")?;
            let stored = reader.stored_status().context("reading the outbox")?;
            CliStatus::stored(stored, &settings)
        }
    };
    if json {
        outln!("{}", serde_json::to_string_pretty(&status)?)?;
    } else {
        out!("{}", render_status(&status))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Asks the running agent, if any, for its status (1 s budget).
pub(super) async fn live_status(data_dir: &Path) -> Option<StatusBody> {
    let addr = std::fs::read_to_string(data_dir.join("agent.addr")).ok()?;
    let token = std::fs::read_to_string(data_dir.join("agent.token")).ok()?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .no_proxy()
        .build()
        .ok()?;
    let resp = client
        .get(format!("http://{}/v1/status", addr.trim()))
        .bearer_auth(token.trim())
        .send()
        .await
        .ok()?;
    resp.error_for_status().ok()?.json().await.ok()
}

/// A readable summary of a status.
pub fn render_status(status: &CliStatus) -> String {
    let v = status.stored_status();
    let c = &v.counters;
    let mut out = String::new();
    let running = status.agent_running;
    let sync = if v.sync.enabled {
        format!("on → {}", v.sync.endpoint.as_deref().unwrap_or("-"))
    } else {
        "off".into()
    };
    out += &format!(
        "agent:     {} (mode {}, device {})\n",
        if running { "running" } else { "not running" },
        status.mode().as_str(),
        v.device_id.as_deref().unwrap_or("-")
    );
    out += &format!("sync:      {sync}");
    if let Some(p) = v.sync.paused_reason.as_deref() {
        match crate::push::pauses::of(p) {
            // The code, then the reason in words with its detail and fix on a line of its own.
            Some(known) => {
                let explained = crate::push::pauses::explain(p);
                out += &format!(" (paused: {})\n           {explained}", known.code);
            }
            None => out += &format!(" (paused: {p})"),
        }
    }
    out += "\n";
    if let Some(health) = status.health().filter(|_| running) {
        out += &format!("health:    {}", health.state.as_str());
        if let Some(e) = &health.last_error {
            out += &format!(" — {e}");
        }
        out += "\n";
    }
    let age = v
        .oldest_pending_age_seconds
        .map_or("-".into(), |a| format!("{a:.0}s"));
    out += &format!(
        "pending:   {} events ({} bytes; {} uploadable, {} held from before consent), oldest {age}\n",
        v.pending_events, v.pending_bytes, v.uploadable_events, v.held_events
    );
    out += &format!(
        "disk:      {} of {} bytes used (+ {} bytes of write-ahead log)\n",
        v.used_bytes,
        status.max_bytes(),
        v.wal_bytes
    );
    out += &format!(
        "outcomes:  received {} = delivered {} + duplicate {} + rejected {} + filtered {} + evicted {} + purged {} + exported {} + pending {} ({})\n",
        c.received, c.delivered, c.duplicate, c.rejected, c.filtered, c.evicted, c.purged, c.exported,
        c.pending,
        if v.balanced { "balanced" } else { "NOT BALANCED" }
    );
    out += &format!(
        "sessions:  {}    dead letters: {}    refused at cap: {}\n",
        v.sessions, v.dead_letters, c.refused
    );
    if let Some(p) = v.last_push.as_ref().filter(|p| !p.is_null()) {
        out += &format!("last push: {p}\n");
        if let Some(e) = p.get("error").and_then(|e| e.as_str()) {
            out += &format!("problem:   {e}\n");
        }
    }
    out += &crate::quota::status_lines(&v.quota);
    out
}

pub async fn sync(action: SyncAction) -> anyhow::Result<ExitCode> {
    telemetry::init(LogFormat::Text, "warn");
    let (common, change, force) = match action {
        SyncAction::Enable {
            common,
            endpoint,
            token_file,
            include_backlog,
            force,
        } => {
            let token_file = crate::push::target::check(&endpoint, &token_file)
                .context("sync not enabled")?
                .display()
                .to_string();
            let change = SyncChange::Enable {
                endpoint,
                token_file,
                include_backlog,
            };
            (common, change, force)
        }
        SyncAction::Disable { common, purge } => (common, SyncChange::Disable { purge }, false),
    };
    let settings = settings(&common, &Overrides::default())?;
    if matches!(change, SyncChange::Enable { .. }) && settings.mode == Mode::Airgapped {
        anyhow::bail!("mode is airgapped: sync cannot be enabled; use `apiary-agent export` (or set mode = \"online\")");
    }
    let adopted = match &change {
        SyncChange::Enable {
            endpoint,
            token_file,
            ..
        } => token_identity(&settings, endpoint, Path::new(token_file), force).await?,
        _ => None,
    };
    let outbox = match &adopted {
        Some(adoption) => {
            let policy = app::load_policy(&settings)?;
            app::open_outbox_as(
                &common.data_dir,
                &settings,
                &policy,
                adoption.identity.clone(),
            )?
        }
        None => open(&common, &settings)?,
    };
    let adopt = match &adopted {
        Some(adoption) => outbox.adopt(adoption).await,
        None => Ok(()),
    };
    let report = match adopt {
        Ok(()) => outbox.set_sync(change).await,
        Err(e) => Err(e),
    };
    outbox.close().await;
    let report = report?;
    if report.enabled {
        let consented = match outbox.colony_keys().names().consent {
            ColonyNames::Names => outbox.policy_hash_with_names(),
            ColonyNames::Keys => outbox.policy_hash(),
        };
        outln!(
            "sync enabled (consent recorded with policy {consented}); {} held events released",
            report.released
        )?;
        if let Some(adoption) = &adopted {
            outln!(
                "identity: user {}, device {} (agrees with the token)",
                adoption
                    .identity
                    .user_id
                    .as_deref()
                    .unwrap_or("(the token's)"),
                outbox.device_id()
            )?;
        }
        if running_agent(&common.data_dir) {
            outln!("the running agent takes the change within a second, no restart needed")?;
        }
        let names = adopted
            .as_ref()
            .and_then(|a| a.colony_names)
            .unwrap_or_default();
        outln!("{}", colony_names_line(names, outbox.colony_keys().names()))?;
    } else {
        outln!("sync disabled; {} pending events purged", report.purged)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether an agent runs on `data_dir` (its `agent.addr` answers).
fn running_agent(data_dir: &Path) -> bool {
    std::fs::read_to_string(data_dir.join("agent.addr"))
        .ok()
        .and_then(|a| a.trim().parse::<std::net::SocketAddr>().ok())
        .is_some_and(|a| {
            std::net::TcpStream::connect_timeout(&a, Duration::from_millis(300)).is_ok()
        })
}

/// Asks the ingest who the token is ([`crate::push::whoami::ask`]): the identity to adopt. Err when the
/// configured identity contradicts the token, or (unless `force`) when the ingest refused the token or
/// the endpoint is not an ingest's; `None` (with a note) when the ingest cannot be reached now.
async fn token_identity(
    settings: &Settings,
    endpoint: &str,
    token_file: &Path,
    force: bool,
) -> anyhow::Result<Option<crate::identity::Adoption>> {
    use crate::push::whoami::AskError;
    match crate::push::whoami::ask(&settings.identity, endpoint, token_file).await {
        Ok(adoption) => Ok(Some(adoption)),
        Err(e @ AskError::Contradicts(_)) => anyhow::bail!("sync not enabled: {e}"),
        Err(e @ AskError::Unreachable(_)) => {
            outln!(
                "note: {e}; sharing is on, and the agent adopts the token's identity and sends once \
                 the ingest answers — events are kept meanwhile"
            )?;
            Ok(None)
        }
        Err(e) if force => {
            outln!("note: {e}; stored anyway (--force): nothing is sent until the ingest accepts the token")?;
            Ok(None)
        }
        Err(e) => anyhow::bail!(
            "sync not enabled: {e}\n(fix the endpoint or the token, or add --force to store them anyway)"
        ),
    }
}

/// What `sync enable` says about colony names: the tenant's choice and what this consent agreed to.
fn colony_names_line(tenant: ColonyNames, now: crate::outbox::ColonyNamesState) -> String {
    match (tenant, now.consent) {
        (ColonyNames::Names, ColonyNames::Names) => {
            "colony names: your organisation shares them, and \
            this consent agrees: each colony's name is sent beside its key"
                .into()
        }
        (ColonyNames::Names, _) => {
            "colony names: your organisation shares them, but you declined on \
            the settings page: they stay on this device (colonies are sent as keys)"
                .into()
        }
        _ => "colony names: they stay on this device (colonies are sent as keys)".into(),
    }
}

fn open(common: &Common, settings: &Settings) -> anyhow::Result<crate::outbox::Outbox> {
    let policy = app::load_policy(settings)?;
    app::open_outbox(&common.data_dir, settings, &policy)
}

pub async fn export(common: &Common, out: &Path) -> anyhow::Result<ExitCode> {
    telemetry::init(LogFormat::Text, "warn");
    let settings = settings(common, &Overrides::default())?;
    let outbox = open(common, &settings)?;
    let report = outbox.export(out).await;
    outbox.close().await;
    let report = report?;
    outln!(
        "exported {} events to {} ({} bytes, sha256 {})",
        report.events,
        report.path.display(),
        report.file_bytes,
        report.checksum
    )?;
    if report.marked < report.events {
        outln!(
            "{} of them were delivered or purged while the bundle was being written and keep that outcome",
            report.events - report.marked
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn follow(
    common: &Common,
    session: Option<String>,
    kind: Option<String>,
    from_start: bool,
) -> anyhow::Result<ExitCode> {
    telemetry::init(LogFormat::Text, "warn");
    let db = common.data_dir.join("outbox.db");
    anyhow::ensure!(db.exists(), "no outbox at {}", db.display());
    let reader = OutboxReader::open(&db)?;
    let mut after = if from_start {
        0
    } else {
        reader.seq_before_last(10, session.as_deref(), kind.as_deref())?
    };
    let stop = app::shutdown_on_signals();
    let mut stdout = apiary_plumbing::output::Stdout::lock();
    while !stop.is_cancelled() {
        let rows = reader.follow_after(after, session.as_deref(), kind.as_deref(), 1000)?;
        for row in &rows {
            after = row.seq;
            let line = match &row.body {
                Some(body) => body.clone(),
                None => serde_json::json!({"event_id": row.event_id, "type": row.kind,
                    "session_id": row.session_id, "state": row.state})
                .to_string(),
            };
            // A reader that went away (`follow | head`) ends the command quietly (see `main`).
            writeln!(stdout, "{line}")?;
        }
        stdout.flush()?;
        if rows.is_empty() {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
