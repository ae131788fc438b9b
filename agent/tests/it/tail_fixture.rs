//! The fixture Hive home (`tests/fixtures/hive/day`: four queen sessions and the debug log of the same
//! day) tailed as a whole gives exactly the events that processing each file directly gives, and, after
//! dedup by id, exactly the durable events `expected_totals.json` counts.

use crate::tail_support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use apiary_agent::tail::memory::MemorySink;
use apiary_agent::tail::{TailItem, Tailer};
use apiary_schema::hive::Zone;
use apiary_schema::{process_value, Outcome, Policy, ProcessOptions};
use serde_json::Value;
use tail_support::{fixtures, items_by_source, settings};
use uuid::Uuid;

fn expected_totals() -> Value {
    let text = std::fs::read_to_string(fixtures().join("expected_totals.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Kept event ids (with their native type) from processing one file directly, line by line.
fn process_file(path: &Path, session_hint: Option<&str>) -> Vec<(Uuid, String)> {
    let policy = Policy::default_policy();
    let text = std::fs::read_to_string(path).unwrap();
    let opts = ProcessOptions {
        zone: Zone::Utc,
        session_hint,
        ..ProcessOptions::new(&policy)
    };
    text.lines()
        .filter_map(|line| {
            let value: Value = serde_json::from_str(line).unwrap();
            match process_value(&value, &opts).unwrap() {
                Outcome::Kept { event, .. } => Some((event.event_id, event.native_type)),
                Outcome::Filtered { .. } => None,
            }
        })
        .collect()
}

/// Tails `home` until caught up; returns the sink.
async fn tail_home(home: &Path, batch_lines: usize) -> Arc<MemorySink> {
    let mut settings = settings(home);
    settings.batch_lines = batch_lines;
    let sink = Arc::new(MemorySink::new());
    let mut tailer = Tailer::start(settings, sink.clone()).await.unwrap();
    while !tailer.try_poll_once().await.unwrap().caught_up {}
    sink
}

fn kept(items: &[TailItem]) -> Vec<(Uuid, String)> {
    items
        .iter()
        .filter_map(|item| {
            item.kept_event()
                .map(|event| (event.event_id, event.native_type.clone()))
        })
        .collect()
}

#[tokio::test]
async fn the_fixture_home_gives_the_events_of_each_file_processed_directly() {
    let home = fixtures().join("day");
    let sink = tail_home(&home, 50).await;

    // Per file, in order: what the tailer committed equals what processing the file gives.
    let by_source = items_by_source(&sink);
    let files = expected_totals()["files"].clone();
    let debug_key = files["debug_log"]["path"]
        .as_str()
        .unwrap()
        .trim_start_matches("day/");
    let mut expected_sources = vec![debug_key.to_string()];
    for (session, file) in files["session_logs"].as_object().unwrap() {
        let key = file["path"]
            .as_str()
            .unwrap()
            .trim_start_matches("day/")
            .to_string();
        assert_eq!(
            kept(&by_source[&key]),
            process_file(&home.join(&key), Some(session)),
            "{key}"
        );
        assert_eq!(
            by_source[&key].len() as u64,
            file["lines"].as_u64().unwrap()
        );
        expected_sources.push(key);
    }
    assert_eq!(
        kept(&by_source[debug_key]),
        process_file(&home.join(debug_key), None)
    );
    assert_eq!(
        by_source[debug_key].len() as u64,
        files["debug_log"]["lines"].as_u64().unwrap()
    );
    expected_sources.sort();
    assert_eq!(
        by_source.keys().cloned().collect::<Vec<_>>(),
        expected_sources
    );
    assert!(sink
        .items()
        .iter()
        .all(|i| !matches!(i, TailItem::Malformed { .. })));

    // After dedup by id: the durable events of the day, each once, by type.
    let distinct: BTreeMap<Uuid, String> = kept(&sink.items()).into_iter().collect();
    let totals = expected_totals();
    assert_eq!(
        distinct.len() as u64,
        totals["durable_event_count"].as_u64().unwrap()
    );
    let mut by_type: BTreeMap<String, u64> = BTreeMap::new();
    for native_type in distinct.values() {
        *by_type.entry(native_type.clone()).or_default() += 1;
    }
    let expected_by_type: BTreeMap<String, u64> = totals["durable_events_by_type"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_u64().unwrap()))
        .collect();
    assert_eq!(by_type, expected_by_type);
}

#[tokio::test]
async fn the_same_event_in_both_logs_is_one_event() {
    let home = fixtures().join("day");
    let sink = tail_home(&home, 1000).await;
    let mut from_debug: BTreeSet<Uuid> = BTreeSet::new();
    let mut from_sessions: BTreeSet<Uuid> = BTreeSet::new();
    for commit in sink.commits() {
        let ids = kept(&commit.items).into_iter().map(|(id, _)| id);
        if commit.checkpoint.source_key.starts_with("event_logs/") {
            from_debug.extend(ids);
        } else {
            from_sessions.extend(ids);
        }
    }
    // The debug log keeps every durable event that names its session; each is also in a session log.
    assert!(from_debug.len() > 100, "{}", from_debug.len());
    assert!(from_debug.is_subset(&from_sessions));
    let all: BTreeSet<Uuid> = from_debug.union(&from_sessions).copied().collect();
    assert_eq!(all.len(), from_sessions.len());
}
