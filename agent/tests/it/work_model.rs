//! The agent's local session work agrees with the shared fold: random task, trigger, tool-call and
//! lifecycle events of a few sessions, submitted to a real outbox in any order, in random groups and with
//! replays (the same event ids again), leave in the outbox (and answer through `Outbox::session_status`)
//! exactly the task list, triggers, next wake and activity that `apiary_schema::work` gives for the events
//! in their original order — the same fold the ingest stores (its own property test checks that side).

use crate::support;

use apiary_agent::outbox::{Item, OutboxSettings, PreparedEvent};
use apiary_schema::work::arb::{kind_and_data, submission_order};
use apiary_schema::work::Work;
use apiary_schema::CanonicalEvent;
use chrono::{DateTime, Duration, Utc};
use proptest::prelude::*;
use serde_json::{json, Value};
use uuid::Uuid;

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
        let order = submission_order(all.len(), seed, &replays);
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
