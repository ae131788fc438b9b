//! # Runtime liveness: is the process behind a Hive session still there?
//!
//! ## What Hive leaves (read from its source, `aden-hive/hive`)
//! Every execution Hive runs through its execution manager writes `state.json` in its session directory,
//! `<storage>/sessions/<session_id>/state.json` under the Hive home (e.g.
//! `agents/<agent>/sessions/<id>/state.json`), atomically (temp file + rename): at the start with
//! `"status": "active"`, at the end with `completed`, `failed`, `paused` or `cancelled`. Each write stamps
//! `"pid"` with `os.getpid()` — "the owning process ID, for cross-process stale session detection". Hive
//! itself uses exactly that: when a runtime starts it marks every on-disk session still `active` whose
//! pid is not alive as `cancelled` with the error `Stale session: runtime restarted`. There is no lock
//! file, no heartbeat and no pid file of the server; a queen session's own directory
//! (`queens/<queen>/sessions/<id>/`, `meta.json` + `events.jsonl`) records no process at all.
//!
//! ## What the agent concludes
//! Every `scan_interval` it walks the home for `**/sessions/<id>/state.json` and, for each:
//! - `active` with a pid: the pid is checked ([`process`]): running → **alive** (`pid_running`); no such
//!   process or a zombie → **gone** (`pid_exited`); a process younger than the file → **gone**
//!   (`pid_reused`: the owner died and its pid was given to another process);
//! - `cancelled` with Hive's own stale-session error → **gone** (`hive_marked_stale`: a restarted Hive
//!   found it dead first);
//! - anything else (ended normally, paused, unreadable, no pid): not reported — no evidence either way.
//!
//! A gone session is reported while its state file is younger than [`GONE_REPORT_WINDOW`]; `gone_at` is
//! when this agent process first found it gone (kept in memory: after an agent restart it is found
//! again, at the restart's time, and the ingest keeps the first time it was told). Sessions with no
//! `state.json` (queen sessions) are never reported: their status stays the event-driven one (a dead
//! queen reads `stalled` after `stall_after`, not `crashed`).
//!
//! Nothing here leaves the device but the session id, a boolean, an evidence word and a time: never a
//! pid or a path. The heartbeat carries at most [`MAX_RUNTIMES`] entries, gone ones first.

pub mod process;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use apiary_schema::device::{RuntimeLiveness, MAX_RUNTIMES};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use tokio_util::sync::CancellationToken;

use process::Process;

/// Gone sessions whose state file is older than this are no longer reported.
pub const GONE_REPORT_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);
/// Larger state files are not read (they hold the execution's memory; the fields needed come first
/// in practice, but a runaway file is not worth the memory).
pub const MAX_STATE_BYTES: u64 = 16 << 20;
/// Hive's error text on a session it found stale at start-up.
const HIVE_STALE_ERROR: &str = "Stale session: runtime restarted";

/// One session's liveness as last found.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    alive: bool,
    evidence: &'static str,
    gone_at: Option<DateTime<Utc>>,
    /// The state file's modification time (recent first in the report).
    modified: SystemTime,
}

/// The liveness table, shared by the scanner, the heartbeat and the local API. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct RuntimeWatch {
    inner: Arc<Mutex<BTreeMap<String, Entry>>>,
}

/// What one state file says about its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    pub session_id: String,
    pub alive: bool,
    pub evidence: &'static str,
    pub modified: SystemTime,
}

impl RuntimeWatch {
    pub fn new() -> RuntimeWatch {
        RuntimeWatch::default()
    }

    /// Replaces the table with a scan's findings; a session gone before keeps its first `gone_at`.
    /// Returns the sessions found gone in this scan and not in the previous one.
    pub fn update(&self, found: Vec<Found>, now: DateTime<Utc>) -> Vec<(String, DateTime<Utc>)> {
        let mut newly = Vec::new();
        let mut table = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut next = BTreeMap::new();
        for f in found {
            let old_gone = table.get(&f.session_id).and_then(|e| e.gone_at);
            let gone_at = (!f.alive).then(|| old_gone.unwrap_or(now));
            if let (None, Some(at)) = (old_gone, gone_at) {
                newly.push((f.session_id.clone(), at));
            }
            next.insert(
                f.session_id,
                Entry {
                    alive: f.alive,
                    evidence: f.evidence,
                    gone_at,
                    modified: f.modified,
                },
            );
        }
        *table = next;
        newly
    }

    /// When the session's runtime was found gone, if it is.
    pub fn gone_at(&self, session: &str) -> Option<DateTime<Utc>> {
        let table = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        table.get(session).and_then(|e| e.gone_at)
    }

    /// Every session found gone, and since when (the local API's `crashed` overlay).
    pub fn gone(&self) -> HashMap<String, DateTime<Utc>> {
        let table = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        table
            .iter()
            .filter_map(|(id, e)| Some((id.clone(), e.gone_at?)))
            .collect()
    }

    /// The heartbeat's `runtimes`: at most [`MAX_RUNTIMES`], gone ones first, most recent state first.
    pub fn report(&self) -> Vec<RuntimeLiveness> {
        let table = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut rows: Vec<(&String, &Entry)> = table.iter().collect();
        rows.sort_by(|a, b| (a.1.alive, b.1.modified).cmp(&(b.1.alive, a.1.modified)));
        rows.into_iter()
            .take(MAX_RUNTIMES)
            .map(|(id, e)| RuntimeLiveness {
                session_id: id.clone(),
                alive: e.alive,
                evidence: e.evidence.into(),
                gone_at: e.gone_at.map(|t| t.timestamp_millis()),
            })
            .collect()
    }
}

/// The fields of Hive's `state.json` the check needs (everything else is ignored, never kept).
#[derive(Debug, Deserialize)]
struct StateFile {
    #[serde(default)]
    session_id: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    pid: Option<u64>,
    #[serde(default)]
    result: Option<StateResult>,
}

#[derive(Debug, Deserialize)]
struct StateResult {
    #[serde(default)]
    error: Option<String>,
}

/// Reads every `**/sessions/<id>/state.json` under `home` and checks its process. Blocking.
pub fn scan(home: &Path, now: SystemTime) -> std::io::Result<Vec<Found>> {
    let mut files: Vec<(String, PathBuf)> = Vec::new();
    super::discover::walk(home, |rel, name, path| {
        if name == "state.json" && rel.len() >= 2 && rel[rel.len() - 2] == "sessions" {
            files.push((rel[rel.len() - 1].clone(), path));
        }
    })?;
    Ok(files
        .into_iter()
        .filter_map(|(dir, path)| check_file(&dir, &path, now))
        .collect())
}

/// One state file's finding; None when it says nothing about liveness.
fn check_file(dir: &str, path: &Path, now: SystemTime) -> Option<Found> {
    let meta = std::fs::metadata(path).ok()?;
    if meta.len() > MAX_STATE_BYTES {
        return None;
    }
    let modified = meta.modified().ok()?;
    let state: StateFile = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    let session_id = state
        .session_id
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| dir.to_string());
    let (alive, evidence) = match state.status.as_deref() {
        Some("active") => match process::check(u32::try_from(state.pid?).ok()?, modified) {
            Process::Running => (true, "pid_running"),
            Process::Exited => (false, "pid_exited"),
            Process::Reused => (false, "pid_reused"),
            Process::Unknown => return None,
        },
        Some("cancelled")
            if state.result.and_then(|r| r.error).as_deref() == Some(HIVE_STALE_ERROR) =>
        {
            (false, "hive_marked_stale")
        }
        _ => return None,
    };
    let recent = match now.duration_since(modified) {
        Ok(age) => age <= GONE_REPORT_WINDOW,
        Err(_) => true,
    };
    (alive || recent).then_some(Found {
        session_id,
        alive,
        evidence,
        modified,
    })
}

/// Called with the sessions a scan found newly gone (the local live stream streams them).
pub type OnGone = Box<dyn Fn(Vec<(String, DateTime<Utc>)>) + Send + Sync>;

/// Scans `home` every `interval` into `watch` until `shutdown`.
pub async fn run_until_stopped(
    home: PathBuf,
    watch: RuntimeWatch,
    interval: Duration,
    on_gone: OnGone,
    shutdown: CancellationToken,
) {
    let mut logged: HashSet<String> = HashSet::new();
    loop {
        let h = home.clone();
        match tokio::task::spawn_blocking(move || scan(&h, SystemTime::now())).await {
            Ok(Ok(found)) => {
                logged.clear();
                let newly = watch.update(found, Utc::now());
                if !newly.is_empty() {
                    on_gone(newly);
                }
            }
            Ok(Err(e)) => {
                let error = e.to_string();
                if logged.insert(error.clone()) {
                    tracing::warn!(%error, "runtime liveness: cannot list the Hive home");
                }
            }
            Err(e) => tracing::warn!(error = %e, "runtime liveness scan failed"),
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

#[cfg(test)]
mod tests;
