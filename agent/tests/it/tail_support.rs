//! Helpers shared by the `tail_*` tests: settings, Hive lines, and the fixture Hive home.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use apiary_agent::tail::memory::MemorySink;
use apiary_agent::tail::{TailItem, TailSettings};
use apiary_schema::hive::Zone;
use apiary_schema::Policy;

/// The per-session log most tests follow.
pub const LOG: &str = "queens/default/sessions/session_t/events.jsonl";

/// Lines in the fixture home (the debug log and the four session logs).
pub const FIXTURE_LINES: usize = 367 + 58 + 169 + 73 + 20;

/// Default settings, but UTC and discovery on every poll (so a step sees new files at once).
pub fn settings(home: &Path) -> TailSettings {
    let mut s = TailSettings::new(home, Arc::new(Policy::default_policy()));
    s.zone = Zone::Utc;
    s.discover_interval = Duration::ZERO;
    s
}

/// A Hive `llm_turn_complete` line whose `input_tokens` is `n` (to tell lines apart), with its newline.
pub fn turn(n: u64) -> String {
    let at = chrono::NaiveDate::from_ymd_opt(2026, 11, 3)
        .and_then(|d| d.and_hms_micro_opt(10, 0, (n % 60) as u32, 1))
        .unwrap()
        .and_utc();
    let data = serde_json::json!({"model": "claude-sonnet-4-5", "input_tokens": n, "output_tokens": 1, "cost_usd": 0.01});
    tests::events::hive("llm_turn_complete", "session_t", at, n, data).to_string() + "\n"
}

pub fn log_path(home: &Path) -> PathBuf {
    home.join(LOG)
}

/// Appends to a file (creating it and its directories), as Hive does.
pub fn append(path: &Path, bytes: &[u8]) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    f.write_all(bytes).unwrap();
}

/// The `input_tokens` of every kept event committed, in order.
pub fn turns(sink: &MemorySink) -> Vec<u64> {
    sink.items()
        .iter()
        .filter_map(|item| {
            item.kept_event()
                .map(|event| event.data_u64("input_tokens"))
        })
        .collect()
}

/// Every item committed, per source, in order.
pub fn items_by_source(sink: &MemorySink) -> BTreeMap<String, Vec<TailItem>> {
    let mut out: BTreeMap<String, Vec<TailItem>> = BTreeMap::new();
    for commit in sink.commits() {
        out.entry(commit.checkpoint.source_key)
            .or_default()
            .extend(commit.items);
    }
    out
}

/// `tests/fixtures/hive`.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hive")
}

/// A copy of the fixture home, so the test owns the files (and may change them).
pub fn copy_fixture_home() -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    copy_dir(&fixtures().join("day"), home.path());
    home
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), target).unwrap();
        }
    }
}
