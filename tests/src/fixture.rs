//! The Hive fixture day (`tests/fixtures/hive/`, read-only): its files, replayed into a HIVE_HOME the way
//! the runtime writes them, as NDJSON for HTTP intake, or as canonical events for batches.
//!
//! Replay order: the runtime appends to the debug log and to the per-session logs as events happen, so the
//! files are merged by timestamp (a k-way merge: each file keeps its own line order, since a session log's
//! coalesced delta lines carry an earlier timestamp than the lines around them). Every seventh line is
//! written in two parts with a pause between them (a partial last line, as a reader sees it mid-write).

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use apiary_schema::hive::Zone;
use apiary_schema::{process_value, CanonicalEvent, Outcome, Policy, ProcessOptions};
use serde_json::Value;

/// `tests/fixtures/hive`.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/hive")
}

/// The fixture day: 2026-11-03 (UTC: the tests run the agent with `APIARY_ZONE=UTC`).
pub const FROM: &str = "2026-11-03T00:00:00Z";
/// The day after.
pub const TO: &str = "2026-11-04T00:00:00Z";

/// One file of the day: its path relative to HIVE_HOME and its lines (each with its newline).
#[derive(Debug, Clone)]
pub struct DayFile {
    pub rel: PathBuf,
    pub lines: Vec<Vec<u8>>,
}

impl DayFile {
    /// The session directory of a per-session log (`.../sessions/<id>/events.jsonl`).
    pub fn session_hint(&self) -> Option<String> {
        let parent = self.rel.parent()?;
        let grand = parent.parent()?;
        (grand.file_name()? == "sessions")
            .then(|| parent.file_name()?.to_str().map(String::from))?
    }
}

/// Every file of `day/`: the debug log first, then the session logs (sorted).
pub fn day_files() -> Vec<DayFile> {
    let day = root().join("day");
    let mut paths = vec![];
    collect(&day, &mut paths);
    paths.sort_by_key(|p| (!p.starts_with(day.join("event_logs")), p.clone()));
    paths
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).expect("fixture file");
            let lines = bytes
                .split_inclusive(|b| *b == b'\n')
                .map(<[u8]>::to_vec)
                .collect();
            DayFile {
                rel: p.strip_prefix(&day).expect("under day/").to_path_buf(),
                lines,
            }
        })
        .collect()
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("fixture dir").flatten() {
        let p = entry.path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|e| e == "jsonl") {
            out.push(p);
        }
    }
}

fn timestamp(line: &[u8]) -> String {
    serde_json::from_slice::<Value>(line)
        .ok()
        .and_then(|v| v["timestamp"].as_str().map(String::from))
        .unwrap_or_default()
}

/// (file index, line) in emission order: a k-way merge by timestamp keeping each file's own order.
pub fn emission_order(files: &[DayFile]) -> Vec<(usize, Vec<u8>)> {
    let mut next = vec![0usize; files.len()];
    let mut out = vec![];
    loop {
        let pick = (0..files.len())
            .filter(|&i| next[i] < files[i].lines.len())
            .min_by_key(|&i| (timestamp(&files[i].lines[next[i]]), i));
        let Some(i) = pick else { break };
        out.push((i, files[i].lines[next[i]].clone()));
        next[i] += 1;
    }
    out
}

/// Writes the whole day into `home` as the runtime would: appends in emission order, a flush per line,
/// a pause of `pace` every `burst` lines, and every seventh line in two writes with a pause between.
pub fn write_day(home: &Path, pace: Duration, burst: usize) -> std::io::Result<()> {
    let files = day_files();
    let mut handles: Vec<Option<std::fs::File>> = files.iter().map(|_| None).collect();
    for (n, (i, line)) in emission_order(&files).into_iter().enumerate() {
        if handles[i].is_none() {
            let p = home.join(&files[i].rel);
            std::fs::create_dir_all(p.parent().expect("a parent"))?;
            handles[i] = Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)?,
            );
        }
        let f = handles[i].as_mut().expect("opened");
        if n % 7 == 3 && line.len() > 8 {
            let cut = line.len() / 2;
            f.write_all(&line[..cut])?;
            f.flush()?;
            std::thread::sleep(pace.max(Duration::from_millis(2)));
            f.write_all(&line[cut..])?;
        } else {
            f.write_all(&line)?;
        }
        f.flush()?;
        if burst > 0 && n % burst == burst - 1 {
            std::thread::sleep(pace);
        }
    }
    Ok(())
}

/// The day as one NDJSON body per file (what a producer replaying both logs would POST).
pub fn ndjson_bodies() -> Vec<Vec<u8>> {
    day_files().into_iter().map(|f| f.lines.concat()).collect()
}

/// The day's durable events as canonical events (both logs, dedup by `event_id`), as the agent makes them.
pub fn canonical_events() -> Vec<CanonicalEvent> {
    let policy = Policy::default_policy();
    let mut seen = HashSet::new();
    let mut out = vec![];
    for file in day_files() {
        let hint = file.session_hint();
        let mut offset = 0usize;
        for line in &file.lines {
            let source = format!("fixture:{}:{offset}", file.rel.display());
            offset += line.len();
            let Ok(v) = serde_json::from_slice::<Value>(line) else {
                continue;
            };
            let opts = ProcessOptions {
                policy: &policy,
                zone: Zone::Utc,
                source_identity: Some(&source),
                session_hint: hint.as_deref(),
                colony: None,
            };
            if let Ok(Outcome::Kept { event, .. }) = process_value(&v, &opts) {
                if seen.insert(event.event_id) {
                    out.push(*event);
                }
            }
        }
    }
    out
}

/// A `POST /v1/batches` body holding `events`, as an agent on `device_id` sends it.
pub fn batch_body(events: &[CanonicalEvent], device_id: &str) -> Vec<u8> {
    let batch = serde_json::json!({
        "schema_version": apiary_schema::SCHEMA_VERSION,
        "batch_id": uuid::Uuid::new_v4(),
        "sent_at": chrono::Utc::now(),
        "agent": {"device_id": device_id, "agent_version": "0.1.0"},
        "policy_hash": Policy::default_policy().hash(),
        "sessions": [],
        "events": events,
    });
    serde_json::to_vec(&batch).expect("serializable")
}

/// `n` native Hive `llm_turn_complete` lines for one queen session, timestamped now (naive UTC), each with
/// 100 input tokens (40 cached), 10 output tokens and a cost of 0.001 USD. `seq` starts at `seq0`.
pub fn synthetic_turns(session: &str, seq0: u64, n: u64) -> Vec<u8> {
    let now = chrono::Utc::now().naive_utc();
    let mut out = Vec::with_capacity(n as usize * 400);
    for k in 0..n {
        let ts = (now + chrono::TimeDelta::microseconds(k as i64)).format("%Y-%m-%dT%H:%M:%S%.6f");
        let line = serde_json::json!({
            "type": "llm_turn_complete", "stream_id": "queen", "node_id": "queen",
            "execution_id": session,
            "data": {"stop_reason": "end_turn", "model": "claude-sonnet-4-5-20250929",
                     "input_tokens": 100, "output_tokens": 10, "cached_tokens": 40,
                     "cache_creation_tokens": 0, "cost_usd": 0.001, "iteration": 1},
            "timestamp": ts.to_string(), "correlation_id": null, "colony_id": null, "seq": seq0 + k,
        });
        serde_json::to_writer(&mut out, &line).expect("serializable");
        out.push(b'\n');
    }
    out
}

/// [`synthetic_turns`] as canonical events (what an agent would push for them).
pub fn synthetic_canonical(session: &str, seq0: u64, n: u64) -> Vec<CanonicalEvent> {
    let policy = Policy::default_policy();
    let opts = ProcessOptions {
        policy: &policy,
        zone: Zone::Utc,
        source_identity: None,
        session_hint: None,
        colony: None,
    };
    synthetic_turns(session, seq0, n)
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .filter_map(|l| {
            let v: Value = serde_json::from_slice(l).ok()?;
            match process_value(&v, &opts) {
                Ok(Outcome::Kept { event, .. }) => Some(*event),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    fn markers(files: &[DayFile]) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for f in files {
            let text = String::from_utf8_lossy(&f.lines.concat()).into_owned();
            for (i, _) in text.match_indices("zzcanary") {
                out.insert(text[i..i + 12].to_string());
            }
        }
        out
    }

    /// The scans are only as good as their input: both copies of the day's events (the debug log and
    /// the session logs) must carry the canaries, so whichever copy an agent keeps is a test.
    #[test]
    fn both_logs_of_the_day_carry_its_canaries() {
        let listed: serde_json::Value =
            serde_json::from_slice(&std::fs::read(root().join("canaries.json")).unwrap()).unwrap();
        let listed: BTreeSet<String> = listed["canaries"]
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| !k.starts_with("zzcanary900"))
            .cloned()
            .collect();
        let (debug, sessions): (Vec<DayFile>, Vec<DayFile>) = day_files()
            .into_iter()
            .partition(|f| f.session_hint().is_none());
        assert_eq!(
            markers(&debug),
            listed,
            "the debug log holds every listed canary"
        );
        let in_sessions = markers(&sessions);
        // Hive strips `data.full_request` from session logs: its one canary is the only one missing.
        let missing: Vec<&String> = listed.difference(&in_sessions).collect();
        assert_eq!(
            missing,
            ["zzcanary0013"],
            "canaries missing from the session logs"
        );
    }
}
