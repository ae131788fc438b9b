//! Random work events for the property tests of both sides (feature `testing`): the agent's local work and
//! the ingest's stored work must both equal the shared fold for the same events, submitted in any order
//! and with replays.

use proptest::prelude::*;
use serde_json::{json, Value};

/// Trigger fire times are `T0_MS` plus whole minutes (epoch milliseconds).
pub const T0_MS: i64 = 1_793_700_000_000;

/// A task, trigger, tool-call, list-reset or lifecycle event: its kind and data.
pub fn kind_and_data() -> impl Strategy<Value = (&'static str, Value)> {
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

/// The order events `0..len` are submitted in: each once, then the `replays` (indexes again), shuffled
/// by a generator seeded with `seed`.
pub fn submission_order(len: usize, seed: u64, replays: &[prop::sample::Index]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..len).collect();
    order.extend(replays.iter().map(|i| i.index(len)));
    let mut x = seed;
    for i in (1..order.len()).rev() {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        order.swap(i, (x >> 33) as usize % (i + 1));
    }
    order
}
