//! The realistic Hive day in `tests/fixtures/hive/` through the adapter and the default policy: both logs
//! together give each durable event exactly once, usage totals equal the generator's independent figures,
//! and no sensitive value survives.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use apiary_schema::hive::Zone;
use apiary_schema::{process_value, CanonicalEvent, Outcome, Policy, ProcessOptions};
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hive")
}

/// Every log file of the fixture Hive home, with the session hint a tailer would give it.
fn logs() -> Vec<(PathBuf, Option<String>)> {
    let mut out = Vec::new();
    let sessions = fixtures().join("day/queens/default/sessions");
    for entry in std::fs::read_dir(&sessions).unwrap() {
        let dir = entry.unwrap().path();
        let hint = dir.file_name().unwrap().to_string_lossy().into_owned();
        out.push((dir.join("events.jsonl"), Some(hint)));
    }
    for entry in std::fs::read_dir(fixtures().join("day/event_logs")).unwrap() {
        out.push((entry.unwrap().path(), None));
    }
    out.sort();
    out
}

fn kept_events() -> HashMap<uuid::Uuid, CanonicalEvent> {
    let policy = Policy::default_policy();
    let mut kept = HashMap::new();
    for (path, hint) in logs() {
        let text = std::fs::read_to_string(&path).unwrap();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let value: Value = serde_json::from_str(line).unwrap();
            let opts = ProcessOptions {
                policy: &policy,
                zone: Zone::Utc,
                source_identity: None,
                session_hint: hint.as_deref(),
                colony: None,
            };
            if let Outcome::Kept { event, .. } = process_value(&value, &opts).unwrap() {
                if let Some(previous) = kept.insert(event.event_id, (*event).clone()) {
                    assert_eq!(previous.kind, event.kind, "same id, same kind");
                }
            }
        }
    }
    kept
}

fn expected() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join("expected_totals.json")).unwrap())
        .unwrap()
}

#[test]
fn both_logs_together_give_each_durable_event_exactly_once() {
    let kept = kept_events();
    let want = expected();
    let mut by_type: BTreeMap<String, u64> = BTreeMap::new();
    for e in kept.values() {
        *by_type.entry(e.native_type.clone()).or_default() += 1;
    }
    let want_by_type: BTreeMap<String, u64> =
        serde_json::from_value(want["durable_events_by_type"].clone()).unwrap();
    assert_eq!(by_type, want_by_type);
    assert_eq!(
        kept.len() as u64,
        want["durable_event_count"].as_u64().unwrap()
    );
}

#[test]
fn usage_totals_match_the_generators_independent_figures() {
    let kept = kept_events();
    let want = &expected()["usage"]["by_model"];
    /// turns, input, output, cached, cache creation, cost, unpriced turns
    type Totals = (u64, u64, u64, u64, u64, f64, u64);
    let mut got: BTreeMap<String, Totals> = BTreeMap::new();
    for e in kept
        .values()
        .filter(|e| e.kind == apiary_schema::EventKind::LlmTurn)
    {
        let t = got
            .entry(e.data_str("model").unwrap().to_string())
            .or_default();
        t.0 += 1;
        t.1 += e.data_u64("input_tokens");
        t.2 += e.data_u64("output_tokens");
        t.3 += e.data_u64("cached_tokens");
        t.4 += e.data_u64("cache_creation_tokens");
        t.5 += e
            .data
            .get("cost_usd")
            .and_then(Value::as_f64)
            .unwrap_or(0.0);
        t.6 += u64::from(e.data_str("cost_source") == Some("unreported"));
    }
    assert_eq!(got.len(), want.as_object().unwrap().len());
    for (model, t) in got {
        let w = &want[&model];
        let ints = [
            ("llm_turns", t.0),
            ("input_tokens", t.1),
            ("output_tokens", t.2),
            ("cached_tokens", t.3),
            ("cache_creation_tokens", t.4),
            ("unpriced_turns", t.6),
        ];
        for (field, value) in ints {
            assert_eq!(value, w[field].as_u64().unwrap(), "{model} {field}");
        }
        assert!(
            (t.5 - w["cost_usd"].as_f64().unwrap()).abs() < 1e-9,
            "{model} cost"
        );
    }
}

#[test]
fn no_canary_and_no_secret_survives_the_default_policy() {
    for e in kept_events().values() {
        let text = serde_json::to_string(e).unwrap();
        for needle in [
            "zzcanary",
            "/home/",
            "@example.com",
            "sk-ant",
            "Bearer",
            "eyJ",
        ] {
            assert!(!text.contains(needle), "{needle} leaked in {text}");
        }
    }
}

#[test]
fn workers_point_at_their_queen() {
    let kept = kept_events();
    let workers = expected()["workers"].clone();
    for (worker, info) in workers.as_object().unwrap() {
        let events: Vec<_> = kept
            .values()
            .filter(|e| e.session_id.as_deref() == Some(worker))
            .collect();
        assert!(!events.is_empty(), "{worker} has events");
        for e in events {
            assert_eq!(
                e.parent_session_id.as_deref(),
                info["parent_session_id"].as_str(),
                "{worker} {}",
                e.native_type
            );
            assert_eq!(e.agent_role, Some(apiary_schema::AgentRole::Worker));
        }
    }
}
