//! What each subcommand does.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use apiary_schema::hive::Zone;
use apiary_schema::ProcessOptions;

use super::{settings, Common, SyncAction};
use crate::app::{self, Application};
use crate::config::{LogFormat, Mode, Overrides, Settings};
use crate::outbox::{read, store, SyncChange};
use crate::telemetry;

pub async fn run(common: &Common, flags: &Overrides) -> anyhow::Result<ExitCode> {
    let settings = settings(common, flags)?;
    telemetry::init(settings.log_format, "info");
    apiary_plumbing::env::warn_unknown_vars();
    let app = Application::build(&common.data_dir, settings).await?;
    app.run_until_stopped(app::shutdown_on_signals()).await?;
    Ok(ExitCode::SUCCESS)
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
    let live = live_status(&common.data_dir).await;
    let mut v = match live {
        Some(v) => v,
        None => {
            let conn = store::open_reader(&db).context("opening the outbox")?;
            let stored = read::stored_status(&conn).context("reading the outbox")?;
            let mut v = serde_json::to_value(stored)?;
            v["mode"] = serde_json::json!(settings.mode);
            v["max_bytes"] = serde_json::json!(settings.outbox.max_bytes);
            v
        }
    };
    v["agent_running"] = serde_json::json!(v.get("health").is_some());
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", super::commands::render_status(&v));
    }
    Ok(ExitCode::SUCCESS)
}

/// Asks the running agent, if any, for its status (1 s budget).
pub(super) async fn live_status(data_dir: &Path) -> Option<serde_json::Value> {
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

/// A readable summary of a status JSON.
pub fn render_status(v: &serde_json::Value) -> String {
    let n = |p: &str| v.pointer(p).and_then(|x| x.as_u64()).unwrap_or(0);
    let s = |p: &str| {
        v.pointer(p)
            .and_then(|x| x.as_str())
            .unwrap_or("-")
            .to_string()
    };
    let mut out = String::new();
    let running = v["agent_running"].as_bool().unwrap_or(false);
    let sync = if v.pointer("/sync/enabled").and_then(|x| x.as_bool()) == Some(true) {
        format!("on → {}", s("/sync/endpoint"))
    } else {
        "off".into()
    };
    out += &format!(
        "agent:     {} (mode {}, device {})\n",
        if running { "running" } else { "not running" },
        s("/mode"),
        s("/device_id")
    );
    out += &format!("sync:      {sync}");
    if let Some(p) = v.pointer("/sync/paused_reason").and_then(|x| x.as_str()) {
        out += &format!(" (paused: {p})");
    }
    out += "\n";
    if running {
        out += &format!("health:    {}", s("/health/state"));
        if let Some(e) = v.pointer("/health/last_error").and_then(|x| x.as_str()) {
            out += &format!(" — {e}");
        }
        out += "\n";
    }
    let age = v["oldest_pending_age_seconds"]
        .as_f64()
        .map_or("-".into(), |a| format!("{a:.0}s"));
    out += &format!(
        "pending:   {} events ({} bytes; {} uploadable, {} held from before consent), oldest {age}\n",
        n("/pending_events"),
        n("/pending_bytes"),
        n("/uploadable_events"),
        n("/held_events")
    );
    out += &format!(
        "disk:      {} of {} bytes used (+ {} bytes of write-ahead log)\n",
        n("/used_bytes"),
        n("/max_bytes"),
        n("/wal_bytes")
    );
    out += &format!(
        "outcomes:  received {} = delivered {} + duplicate {} + rejected {} + filtered {} + evicted {} + purged {} + exported {} + pending {} ({})\n",
        n("/counters/received"), n("/counters/delivered"), n("/counters/duplicate"), n("/counters/rejected"),
        n("/counters/filtered"), n("/counters/evicted"), n("/counters/purged"), n("/counters/exported"),
        n("/counters/pending"),
        if v["balanced"].as_bool() == Some(true) { "balanced" } else { "NOT BALANCED" }
    );
    out += &format!(
        "sessions:  {}    dead letters: {}    refused at cap: {}\n",
        n("/sessions"),
        n("/dead_letters"),
        n("/counters/refused")
    );
    if let Some(p) = v.get("last_push").filter(|p| !p.is_null()) {
        out += &format!("last push: {p}\n");
        if let Some(e) = p.get("error").and_then(|e| e.as_str()) {
            out += &format!("problem:   {e}\n");
        }
    }
    out
}

pub async fn sync(action: SyncAction) -> anyhow::Result<ExitCode> {
    telemetry::init(LogFormat::Text, "warn");
    let (common, change) = match action {
        SyncAction::Enable {
            common,
            endpoint,
            token_file,
            include_backlog,
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
            (common, change)
        }
        SyncAction::Disable { common, purge } => (common, SyncChange::Disable { purge }),
    };
    let settings = settings(&common, &Overrides::default())?;
    if matches!(change, SyncChange::Enable { .. }) && settings.mode == Mode::Airgapped {
        anyhow::bail!("mode is airgapped: sync cannot be enabled; use `apiary-agent export` (or set mode = \"online\")");
    }
    let outbox = open(&common, &settings)?;
    let report = outbox.set_sync(change).await;
    outbox.close().await;
    let report = report?;
    if report.enabled {
        println!(
            "sync enabled (consent recorded with policy {}); {} held events released",
            outbox.policy_hash(),
            report.released
        );
    } else {
        println!("sync disabled; {} pending events purged", report.purged);
    }
    Ok(ExitCode::SUCCESS)
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
    println!(
        "exported {} events to {} ({} bytes, sha256 {})",
        report.events,
        report.path.display(),
        report.file_bytes,
        report.checksum
    );
    if report.marked < report.events {
        println!(
            "{} of them were delivered or purged while the bundle was being written and keep that outcome",
            report.events - report.marked
        );
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
    let conn = store::open_reader(&db)?;
    let mut after = if from_start {
        0
    } else {
        (read::last_seq(&conn)? - 10).max(0)
    };
    let stop = app::shutdown_on_signals();
    let mut stdout = std::io::stdout().lock();
    while !stop.is_cancelled() {
        let rows = read::follow_after(&conn, after, session.as_deref(), kind.as_deref(), 1000)?;
        for row in &rows {
            after = row.seq;
            let line = match &row.body {
                Some(body) => body.clone(),
                None => serde_json::json!({"event_id": row.event_id, "type": row.kind,
                    "session_id": row.session_id, "state": row.state})
                .to_string(),
            };
            if writeln!(stdout, "{line}").is_err() {
                return Ok(ExitCode::SUCCESS);
            }
        }
        let _ = stdout.flush();
        if rows.is_empty() {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn explain(
    file: &Path,
    json: bool,
    zone: Option<String>,
    data_dir: Option<PathBuf>,
    config: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    telemetry::init(LogFormat::Text, "warn");
    let settings = match &data_dir {
        Some(dir) => Settings::load(
            dir,
            config.as_deref(),
            std::env::vars(),
            &Overrides::default(),
        )?,
        None => Settings::default(),
    };
    let policy = app::load_policy(&settings)?;
    let zone: Zone = zone
        .as_deref()
        .unwrap_or(&settings.zone)
        .parse()
        .map_err(|e: String| anyhow::anyhow!(e))?;
    let opts = ProcessOptions {
        policy: &policy,
        zone,
        source_identity: None,
        session_hint: None,
    };
    let mut out = std::io::stdout().lock();
    if file == Path::new("-") {
        explain_input(std::io::stdin().lock(), &opts, json, &mut out)?;
    } else {
        let f = std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?;
        explain_input(std::io::BufReader::new(f), &opts, json, &mut out)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `policy explain`, as implemented by the schema crate.
fn explain_input<R: std::io::BufRead, W: Write>(
    input: R,
    opts: &ProcessOptions<'_>,
    json: bool,
    out: &mut W,
) -> std::io::Result<apiary_schema::explain::ExplainSummary> {
    apiary_schema::explain::explain(input, opts, json, out)
}
