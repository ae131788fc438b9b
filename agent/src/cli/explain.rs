//! `policy explain FILE`: what the agent would keep of each event of FILE, and what it would drop.
//!
//! It shows what `run` would send, so it reads the same settings and applies the same rules:
//! - settings: `--config FILE`, else `DIR/agent.toml` of `--data-dir` when it exists, then the `APIARY_*`
//!   variables — the layers `run` reads (only the data directory is optional here);
//! - the policy: [`app::load_policy`], the loader `run` uses, so a `policy_file` that widens the default
//!   without `allow_widening = true` is refused with the same message;
//! - the session: a per-session log (`…/sessions/<id>/events.jsonl`) gives its directory name as the
//!   session of lines that name none, as the tailer does ([`tail::session_hint`]); the debug log and
//!   stdin give none.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use apiary_schema::hive::Zone;
use apiary_schema::ProcessOptions;

use crate::app;
use crate::config::{LogFormat, Overrides, Settings};
use crate::tail;
use crate::telemetry;

/// Runs `policy explain`.
pub fn explain(
    file: &Path,
    json: bool,
    zone: Option<String>,
    data_dir: Option<PathBuf>,
    config: Option<PathBuf>,
) -> anyhow::Result<ExitCode> {
    telemetry::init(LogFormat::Text, "warn");
    let settings = settings(data_dir.as_deref(), config.as_deref())?;
    let policy = app::load_policy(&settings)?;
    let zone: Zone = zone
        .as_deref()
        .unwrap_or(&settings.zone)
        .parse()
        .map_err(|e: String| anyhow::anyhow!(e))?;
    let stdin = file == Path::new("-");
    let hint = if stdin { None } else { hint_of(file) };
    let opts = ProcessOptions {
        policy: &policy,
        zone,
        source_identity: None,
        session_hint: hint.as_deref(),
        colony: None,
    };
    let mut out = apiary_plumbing::output::Stdout::lock();
    if stdin {
        apiary_schema::explain::explain(std::io::stdin().lock(), &opts, json, &mut out)?;
    } else {
        let f = std::fs::File::open(file).with_context(|| format!("opening {}", file.display()))?;
        apiary_schema::explain::explain(std::io::BufReader::new(f), &opts, json, &mut out)?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The settings `run` would read, without requiring a data directory.
fn settings(data_dir: Option<&Path>, config: Option<&Path>) -> anyhow::Result<Settings> {
    let env = std::env::vars();
    let flags = Overrides::default();
    Ok(match data_dir {
        Some(dir) => Settings::load(dir, config, env, &flags)?,
        None => Settings::load_from(config, env, &flags)?,
    })
}

/// The tailer's session hint for `file`, judged on its absolute path (`explain events.jsonl` run inside
/// the session's directory names the session too).
fn hint_of(file: &Path) -> Option<String> {
    let absolute = std::path::absolute(file).ok()?;
    tail::session_hint(&absolute)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_per_session_log_names_its_session_and_other_files_none() {
        let dir = tempfile::tempdir().unwrap();
        let session = dir.path().join("sessions/session_rel");
        std::fs::create_dir_all(&session).unwrap();
        let abs = session.join("events.jsonl");
        assert_eq!(hint_of(&abs).as_deref(), Some("session_rel"));
        assert_eq!(hint_of(&session.join("conversation.jsonl")), None);
        assert_eq!(hint_of(Path::new("event_logs/20261103_090000.jsonl")), None);
    }
}
