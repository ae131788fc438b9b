//! The agent's local session work agrees with the shared fold: random task, trigger, tool-call and
//! lifecycle events of a few sessions, submitted to a real outbox in any order, in random groups and with
//! replays (the same event ids again), leave in the outbox (and answer through `Outbox::session_status`)
//! exactly the task list, triggers, next wake and activity that `apiary_schema::work` gives for the events
//! in their original order — the same fold the ingest stores (its own property test checks that side).

use crate::support;

use apiary_agent::outbox::{Item, OutboxSettings, PreparedEvent};
use apiary_schema::work::Work;
use apiary_schema::CanonicalEvent;
use chrono::{DateTime, Duration, Utc};
use proptest::prelude::*;
use serde_json::{json, Value};
use uuid::Uuid;

const T0_MS: i64 = 1_793_700_000_000;

fn kind_and_data() -> impl Strategy<Value = (&'static str, Value)> {
    let task = (
        1u64..8,
        prop::sample::select(vec!["created", "updated", "deleted"]),
        prop::sample::select(vec!["pending", "in_progress", "completed"]),
    )
        .prop_map(|(id, action, status)| {
            (
                "task.changed",
                json!({"action": action, "task_id": id.to_string(), "status": status}),
            )
        });
    let trigger = (
        0u8..3,
        prop::sample::select(vec![
            "available",
            "activated",
            "fired",
            "deactivated",
            "removed",
        ]),
        0i64..100,
    )
        .prop_map(|(id, action, next)| {
            (
                "trigger.changed",
                json!({"action": action, "trigger_id": format!("t{id}"),
            "trigger_type": "timer", "fire_count": next, "next_fire_at": T0_MS + next * 60_000}),
            )
        });
    let call = (0u8..5, any::<bool>()).prop_map(|(id, done)| {
        (
            "tool.call",
            json!({"tool_use_id": format!("toolu_{id}"),
        "tool_name": format!("tool{id}"), "status": if done { "completed" } else { "started" }}),
        )
    });
    prop_oneof![
        4 => task,
        2 => trigger,
        3 => call,
        1 => Just(("task.changed", json!({"action": "list_reset"}))),
        1 => prop::sample::select(vec!["started", "completed", "failed"])
            .prop_map(|s| ("execution", json!({"scope": "execution", "status": s}))),
    ]
}

/// (session index, seconds since the start, kind, data).
fn events() -> impl Strategy<Value = Vec<(usize, i64, &'static str, Value)>> {
    prop::collection::vec(
        (0usize..2, 0i64..600, kind_and_data()).prop_map(|(s, at, (k, d))| (s, at, k, d)),
        1..80,
    )
}

fn canonical(
    n: usize,
    session: usize,
    at: DateTime<Utc>,
    kind: &str,
    data: &Value,
) -> CanonicalEvent {
    serde_json::from_value(json!({
        "schema_version": 1, "event_id": Uuid::from_u128(n as u128 + 1), "type": kind,
        "occurred_at": at, "runtime": "hive", "session_id": format!("s{session}"),
        "agent_role": "queen", "native_type": "test", "data": data,
    }))
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn local_work_agrees_with_the_shared_fold_whatever_the_order_and_replays(
        evs in events(), group in 1usize..30, seed in any::<u64>(),
        replays in prop::collection::vec(any::<prop::sample::Index>(), 0..20),
    ) {
        let t0 = "2026-11-03T10:00:00.123456Z".parse::<DateTime<Utc>>().unwrap();
        let all: Vec<CanonicalEvent> = evs
            .iter()
            .enumerate()
            .map(|(n, (s, secs, k, d))| canonical(n, *s, t0 + Duration::seconds(*secs), k, d))
            .collect();
        let mut order: Vec<usize> = (0..all.len()).collect();
        order.extend(replays.iter().map(|i| i.index(all.len())));
        let mut x = seed;
        for i in (1..order.len()).rev() {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            order.swap(i, (x >> 33) as usize % (i + 1));
        }
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let outbox = support::open(dir.path(), OutboxSettings::default());
        for chunk in order.chunks(group) {
            let items: Vec<Item> = chunk.iter().map(|i| Item::Kept(PreparedEvent::new(&all[*i]))).collect();
            rt.block_on(outbox.submit(items)).unwrap();
        }
        for s in 0..2 {
            let name = format!("s{s}");
            let mine: Vec<&CanonicalEvent> =
                all.iter().filter(|e| e.session_id.as_deref() == Some(name.as_str())).collect();
            let mut want = Work::default();
            for e in &mine {
                want.fold(e, e.occurred_at);
            }
            let got = rt.block_on(outbox.session_status(&name, t0)).unwrap();
            let Some(got) = got else {
                prop_assert!(mine.is_empty());
                continue;
            };
            prop_assert_eq!(&got.work, &want.view());
        }
    }
}
