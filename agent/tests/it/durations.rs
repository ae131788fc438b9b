//! Tool-call durations on the device (`outbox::durations`): a completion gets `duration_ms` from its
//! start whether the two come in one submission (in either order) or in two, across a restart of the
//! outbox; a completion without its start gets none; a runtime's own duration is kept; duplicates add
//! no open start. A property test checks random calls, split into random submissions with restarts and
//! replays, against a model of the rule.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::support;

use apiary_agent::outbox::{Item, Outbox, OutboxSettings};
use apiary_schema::{process_value, Policy, ProcessOptions};
use proptest::prelude::*;
use serde_json::{json, Value};

/// A Hive-native tool event: `id` the tool_use_id, `at_ms` milliseconds after 10:00:00 UTC.
fn hive(kind: &str, id: &str, at_ms: i64, seq: i64, extra: Value) -> Value {
    let t = chrono::DateTime::parse_from_rfc3339("2026-11-03T10:00:00Z").unwrap()
        + chrono::Duration::milliseconds(at_ms);
    let mut data =
        json!({"tool_use_id": id, "tool_name": "read_file", "tool_input": {"path": "/home/a/x"}});
    if kind == "tool_call_completed" {
        data["result"] = json!("...contents...");
        data["is_error"] = json!(false);
    }
    for (k, v) in extra.as_object().into_iter().flatten() {
        data[k] = v.clone();
    }
    tests::events::hive(kind, "s1", t.with_timezone(&chrono::Utc), seq as u64, data)
}

fn start(id: &str, at_ms: i64, seq: i64) -> Value {
    hive("tool_call_started", id, at_ms, seq, json!({}))
}

fn done(id: &str, at_ms: i64, seq: i64) -> Value {
    hive("tool_call_completed", id, at_ms, seq, json!({}))
}

fn items(events: &[Value]) -> Vec<Item> {
    let policy = Policy::default_policy();
    let opts = ProcessOptions {
        zone: apiary_schema::hive::Zone::Utc,
        ..ProcessOptions::new(&policy)
    };
    events
        .iter()
        .map(|v| Item::from_outcome(&process_value(v, &opts).unwrap()))
        .collect()
}

async fn submit(outbox: &Outbox, events: &[Value]) {
    outbox.submit(items(events)).await.unwrap();
}

/// The `duration_ms` of every stored completion, by tool_use_id (None when it has none).
type Timed = BTreeMap<String, Option<i64>>;
/// The open starts: (session, pairing key).
type Open = BTreeSet<(String, String)>;

/// The stored completions' durations and the open starts, read from the outbox file once the outbox is
/// closed.
fn stored(dir: &Path) -> (Timed, Open) {
    let conn = rusqlite::Connection::open(dir.join("outbox.db")).unwrap();
    let mut stmt = conn
        .prepare("SELECT body FROM events WHERE kind = 'tool.call' AND body IS NOT NULL")
        .unwrap();
    let mut done = BTreeMap::new();
    for body in stmt.query_map([], |r| r.get::<_, String>(0)).unwrap() {
        let v: Value = serde_json::from_str(&body.unwrap()).unwrap();
        if v["data"]["status"] == "completed" {
            done.insert(
                v["data"]["tool_use_id"].as_str().unwrap().to_string(),
                v["data"]["duration_ms"].as_i64(),
            );
        }
    }
    let mut stmt = conn
        .prepare("SELECT session_id, call_key FROM tool_starts")
        .unwrap();
    let open = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    (done, open)
}

#[tokio::test]
async fn a_start_and_its_completion_pair_across_submissions_restarts_and_order() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = support::open(dir.path(), OutboxSettings::default());
    // In one submission, the completion first.
    submit(&outbox, &[done("a", 1_500, 2), start("a", 0, 1)]).await;
    // The start now, the completion after a restart (the writer's state is gone, the row is not).
    submit(&outbox, &[start("b", 10_000, 3)]).await;
    outbox.close().await;
    let outbox = support::open(dir.path(), OutboxSettings::default());
    submit(&outbox, &[done("b", 12_345, 4)]).await;
    // A completion without its start; a start without its completion.
    submit(&outbox, &[done("c", 20_000, 5), start("d", 21_000, 6)]).await;
    // A completion whose start comes later: no duration then (it is already written), and its late
    // start waits as an open start like any other.
    submit(&outbox, &[done("e", 30_000, 8)]).await;
    submit(&outbox, &[start("e", 29_000, 7)]).await;
    // The runtime's own duration is kept.
    let reported = hive(
        "tool_call_completed",
        "f",
        41_000,
        10,
        json!({"duration_ms": 7}),
    );
    submit(&outbox, &[start("f", 40_000, 9), reported]).await;
    // A start re-read after its call completed adds no open start (it is a duplicate).
    submit(&outbox, &[start("a", 0, 1), start("b", 10_000, 3)]).await;
    // A completion before its start's time is not timed (never a negative duration).
    submit(&outbox, &[start("g", 50_000, 11), done("g", 49_000, 12)]).await;
    outbox.close().await;

    let (done, open) = stored(dir.path());
    let want: BTreeMap<String, Option<i64>> = [
        ("a", Some(1_500)),
        ("b", Some(2_345)),
        ("c", None),
        ("e", None),
        ("f", Some(7)),
        ("g", None),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(done, want);
    let open: Vec<String> = open.into_iter().map(|(_, k)| k).collect();
    assert_eq!(open, ["id:d", "id:e", "id:g"]);
}

#[tokio::test]
async fn local_usage_sums_the_durations() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = support::open(dir.path(), OutboxSettings::default());
    submit(&outbox, &[start("a", 0, 1), done("a", 250, 2)]).await;
    submit(
        &outbox,
        &[
            start("b", 1_000, 3),
            done("b", 1_750, 4),
            done("c", 2_000, 5),
        ],
    )
    .await;
    let usage = outbox.session_usage("s1").await.unwrap().unwrap();
    let v = serde_json::to_value(&usage.totals).unwrap();
    assert_eq!(
        (v["tool_calls"].as_i64(), v["tool_duration_ms"].as_i64()),
        (Some(3), Some(1_000))
    );
    outbox.close().await;
}

#[tokio::test]
async fn a_narrowed_policy_without_durations_times_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let base = Policy::default_policy();
    let narrowed = Policy::load_user(
        &apiary_schema::policy::DEFAULT_POLICY_TOML
            .replace("duration_ms = \"count\"\nservice_name", "service_name"),
        &base,
    )
    .unwrap();
    let outbox = Outbox::open(
        &dir.path().join("outbox.db"),
        OutboxSettings::default(),
        apiary_agent::identity::IdentityDefaults::default(),
        &narrowed,
    )
    .unwrap();
    submit(&outbox, &[start("a", 0, 1), done("a", 250, 2)]).await;
    outbox.close().await;
    let (done, open) = stored(dir.path());
    assert_eq!(done["a"], None);
    assert!(open.is_empty());
}

/// One call of the property test: its start (ms) and completion (ms, relative to the start), whether
/// each half is sent at all, and the submission (0..8) each half goes into.
#[derive(Debug, Clone)]
struct Call {
    start_ms: i64,
    took_ms: i64,
    halves: (Option<usize>, Option<usize>),
}

fn call() -> impl Strategy<Value = Call> {
    (
        0i64..100_000,
        -50i64..20_000,
        prop::option::weighted(0.85, 0usize..8),
        prop::option::weighted(0.85, 0usize..8),
    )
        .prop_map(|(start_ms, took_ms, s, c)| Call {
            start_ms,
            took_ms,
            halves: (s, c),
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn durations_follow_the_pairing_rule_across_submissions_restarts_and_replays(
        calls in prop::collection::vec(call(), 1..24),
        restarts in prop::collection::vec(any::<bool>(), 8),
        replays in prop::collection::vec((0usize..8, any::<prop::sample::Index>()), 0..10),
        reverse in prop::collection::vec(any::<bool>(), 8),
    ) {
        // Submission k holds the halves assigned to it, in either order, plus replays of events of
        // earlier submissions.
        let mut subs: Vec<Vec<Value>> = vec![vec![]; 8];
        for (n, c) in calls.iter().enumerate() {
            let id = format!("t{n}");
            if let Some(k) = c.halves.0 {
                subs[k].push(start(&id, c.start_ms, 2 * n as i64));
            }
            if let Some(k) = c.halves.1 {
                subs[k].push(done(&id, c.start_ms + c.took_ms, 2 * n as i64 + 1));
            }
        }
        for (k, pick) in &replays {
            let earlier: Vec<Value> = subs[..*k].iter().flatten().cloned().collect();
            if !earlier.is_empty() {
                subs[*k].push(earlier[pick.index(earlier.len())].clone());
            }
        }
        for (k, r) in reverse.iter().enumerate() {
            if *r {
                subs[k].reverse();
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut outbox = support::open(dir.path(), OutboxSettings::default());
        for (k, sub) in subs.iter().enumerate() {
            rt.block_on(submit(&outbox, sub));
            if restarts[k] {
                rt.block_on(outbox.close());
                outbox = support::open(dir.path(), OutboxSettings::default());
            }
        }
        rt.block_on(outbox.close());

        // The model: a completion is timed when its start first came in the same or an earlier
        // submission than the completion did, and is not after it; a start stays open unless a copy of
        // its completion at or after it came in the same or a later submission.
        let copies = |v: &Value| -> Vec<usize> {
            subs.iter().enumerate().filter(|(_, s)| s.contains(v)).map(|(k, _)| k).collect()
        };
        let (got, open) = stored(dir.path());
        let mut want_open = BTreeSet::new();
        for (n, c) in calls.iter().enumerate() {
            let id = format!("t{n}");
            let s = c.halves.0.map(|_| copies(&start(&id, c.start_ms, 2 * n as i64))[0]);
            let d = c.halves.1.map(|_| copies(&done(&id, c.start_ms + c.took_ms, 2 * n as i64 + 1)));
            if let Some(d) = &d {
                let timed = s.is_some_and(|s| s <= d[0]) && c.took_ms >= 0;
                prop_assert_eq!(got.get(&id).copied().flatten(), timed.then_some(c.took_ms), "{}", id);
            }
            if let Some(s) = s {
                let closed = d.as_ref().is_some_and(|d| d.iter().any(|k| *k >= s)) && c.took_ms >= 0;
                if !closed {
                    want_open.insert(("s1".to_string(), format!("id:{id}")));
                }
            }
        }
        prop_assert_eq!(open, want_open);
    }
}

#[tokio::test]
async fn open_starts_stay_under_their_cap() {
    use apiary_agent::outbox::MAX_OPEN_STARTS;
    let dir = tempfile::tempdir().unwrap();
    let outbox = support::open(dir.path(), OutboxSettings::default());
    let n = MAX_OPEN_STARTS + 5;
    let starts: Vec<Value> = (0..n).map(|i| start(&format!("t{i}"), i, i)).collect();
    for chunk in starts.chunks(2_000) {
        submit(&outbox, chunk).await;
    }
    // The oldest five are forgotten: their completions get no duration; a kept one's does.
    submit(&outbox, &[done("t0", 10, n), done("t9", 30, n + 1)]).await;
    outbox.close().await;
    let (done, open) = stored(dir.path());
    assert_eq!((done["t0"], done["t9"]), (None, Some(21)));
    assert_eq!(open.len() as i64, MAX_OPEN_STARTS - 1);
}
