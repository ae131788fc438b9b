//! The agent's local status agrees with the shared health model: random event sequences of a few
//! sessions, submitted to a real outbox in random groups and slightly out of order, leave in the outbox
//! (and answer through `Outbox::session_status`) exactly the status, history and time in state that
//! folding the same events in time order with `apiary_schema::status` gives — the same fold the ingest
//! stores (its own property test checks that side).

use crate::support;

use apiary_agent::outbox::{Item, OutboxSettings, PreparedEvent};
use apiary_schema::status::{view, Health, Input, Liveness, Rules, Transition};
use apiary_schema::CanonicalEvent;
use chrono::{DateTime, Duration, Utc};
use proptest::prelude::*;
use serde_json::{json, Value};
use uuid::Uuid;

fn kind_and_data() -> impl Strategy<Value = (&'static str, Value)> {
    let tools = prop::sample::select(vec!["grep", "read_file"]);
    prop_oneof![
        4 => prop::sample::select(vec!["end_turn", "tool_use"])
            .prop_map(|s| ("llm.turn", json!({"model": "m", "input_tokens": 1, "stop_reason": s}))),
        4 => (tools.clone(), any::<bool>())
            .prop_map(|(t, e)| ("tool.call", json!({"tool_name": t, "status": "completed", "is_error": e}))),
        1 => tools.prop_map(|t| ("tool.call", json!({"tool_name": t, "status": "started"}))),
        3 => prop::sample::select(vec!["stalled", "doom_loop", "inactive", "nudge_sent", "retry", "escalation_requested", "replay_detected"])
            .prop_map(|s| ("health.signal", json!({"signal": s}))),
        1 => prop::sample::select(vec!["requested", "received", "payment_required"])
            .prop_map(|s| ("session.input", json!({"state": s}))),
        1 => prop::sample::select(vec!["started", "paused", "completed", "failed"])
            .prop_map(|s| ("execution", json!({"scope": "execution", "status": s}))),
        1 => Just(("session.phase", json!({"phase": "independent"}))),
    ]
}

/// (session index, seconds since the previous event, kind, data).
fn events() -> impl Strategy<Value = Vec<(usize, i64, &'static str, Value)>> {
    prop::collection::vec(
        (0usize..3, 0i64..400, kind_and_data()).prop_map(|(s, gap, (k, d))| (s, gap, k, d)),
        1..90,
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
    fn local_status_agrees_with_a_fold_in_time_order(
        evs in events(), group in 1usize..30, seed in any::<u64>(),
    ) {
        let rules = Rules::default();
        let mut at = "2026-11-03T10:00:00.123456Z".parse::<DateTime<Utc>>().unwrap();
        let all: Vec<CanonicalEvent> = evs
            .iter()
            .enumerate()
            .map(|(n, (s, gap, k, d))| {
                at += Duration::seconds(*gap);
                canonical(n, *s, at, k, d)
            })
            .collect();
        // Submitted in groups, each shuffled within blocks of 8 (inside the re-order window).
        let mut order: Vec<usize> = (0..all.len()).collect();
        let mut x = seed;
        for block in order.chunks_mut(8) {
            for i in (1..block.len()).rev() {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                block.swap(i, (x >> 33) as usize % (i + 1));
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let outbox = support::open(dir.path(), OutboxSettings::default());
        for chunk in order.chunks(group) {
            let items: Vec<Item> = chunk.iter().map(|i| Item::Kept(PreparedEvent::new(&all[*i]))).collect();
            rt.block_on(outbox.submit(items)).unwrap();
        }
        let now = at + Duration::seconds(1_000);
        for s in 0..3 {
            let mut inputs: Vec<Input> = all
                .iter()
                .filter(|e| e.session_id.as_deref() == Some(&format!("s{s}")))
                .filter_map(|e| Input::of(e, e.occurred_at))
                .collect();
            inputs.sort_by_key(Input::key);
            let mut want = Health::default();
            let mut want_t: Vec<Transition> = Vec::new();
            for i in &inputs {
                want.apply(i, &rules, &mut want_t);
            }
            let got = rt.block_on(outbox.session_status(&format!("s{s}"), now)).unwrap();
            let Some(got) = got else {
                prop_assert!(inputs.is_empty());
                continue;
            };
            let v = view(&want, now, &Liveness::local(now), &rules);
            want_t.extend(v.derived.clone());
            prop_assert_eq!(got.status, v.status);
            prop_assert_eq!(got.status_since, v.since);
            prop_assert_eq!(&got.status_cause, &v.cause);
            prop_assert_eq!(&got.time_in_state, &v.time_in_state);
            prop_assert_eq!(&got.transitions, &want_t);
        }
    }
}
