//! Hive events through the adapter and the default policy into the fold, the rules one by one, and the
//! property that order and duplicates do not matter.

use chrono::{DateTime, Duration, Utc};
use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::hive::Zone;
use crate::{process_value, Outcome, Policy, ProcessOptions};

const T0_MS: i64 = 1_793_700_000_000;

fn t(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(T0_MS).unwrap() + Duration::seconds(secs)
}

/// A native Hive event of session `s1` at `secs`, through the adapter and the default policy.
fn hive(seq: u64, secs: i64, ty: &str, data: Value) -> CanonicalEvent {
    let policy = Policy::default_policy();
    let native = json!({"type": ty, "stream_id": "queen", "execution_id": null, "data": data,
        "timestamp": t(secs).format("%Y-%m-%dT%H:%M:%S%.6f").to_string(), "seq": seq});
    let opts = ProcessOptions {
        zone: Zone::Utc,
        session_hint: Some("s1"),
        colony: None,
        ..ProcessOptions::new(&policy)
    };
    match process_value(&native, &opts).unwrap() {
        Outcome::Kept { event, .. } => *event,
        other => panic!("{ty} was not kept: {other:?}"),
    }
}

fn task_created(seq: u64, secs: i64, id: u64) -> CanonicalEvent {
    hive(
        seq,
        secs,
        "task_created",
        json!({"session_id": "s1", "task": {"id": id,
        "subject": "SUBJECT-CANARY", "description": "DESCRIPTION-CANARY", "status": "pending",
        "created_at": 1.0, "updated_at": 1.0}}),
    )
}

fn task_updated(seq: u64, secs: i64, id: u64, status: &str) -> CanonicalEvent {
    hive(
        seq,
        secs,
        "task_updated",
        json!({"session_id": "s1", "task_id": id,
        "after": {"id": id, "subject": "SUBJECT-CANARY", "status": status}, "fields": ["status"]}),
    )
}

fn task_deleted(seq: u64, secs: i64, id: u64) -> CanonicalEvent {
    hive(
        seq,
        secs,
        "task_deleted",
        json!({"session_id": "s1", "task_id": id, "cascade": []}),
    )
}

fn tool(seq: u64, secs: i64, status: &str, id: &str, name: &str) -> CanonicalEvent {
    let ty = format!("tool_call_{status}");
    hive(
        seq,
        secs,
        &ty,
        json!({"tool_use_id": id, "tool_name": name, "tool_index": seq,
        "tool_input": {"cmd": "INPUT-CANARY"}}),
    )
}

fn fold_all<'a>(events: impl IntoIterator<Item = &'a CanonicalEvent>) -> Work {
    let mut w = Work::default();
    for e in events {
        w.fold(e, e.occurred_at);
    }
    w
}

#[test]
fn tasks_fold_from_hive_events_without_their_text() {
    let events = [
        task_created(1, 0, 1),
        task_created(2, 1, 2),
        task_created(3, 2, 3),
        task_updated(4, 3, 1, "in_progress"),
        task_updated(5, 4, 2, "completed"),
        task_deleted(6, 5, 3),
    ];
    let w = fold_all(&events);
    let v = w.view();
    let ids: Vec<_> = v.task_list.iter().map(|t| t.task_id.as_str()).collect();
    assert_eq!(ids, ["1", "2"]);
    assert_eq!(v.task_list[0].state.as_deref(), Some("in_progress"));
    assert_eq!(
        (v.task_list[0].created_at, v.task_list[0].updated_at),
        (t(0), t(3))
    );
    assert_eq!(
        v.summary.tasks,
        TaskCounts {
            pending: 0,
            in_progress: 1,
            completed: 1,
            other: 0
        }
    );
    let stored = serde_json::to_string(&w).unwrap() + &serde_json::to_string(&v).unwrap();
    assert!(!stored.contains("CANARY"), "{stored}");
}

#[test]
fn a_list_reset_hides_the_tasks_it_came_after() {
    let mut events = vec![task_created(1, 0, 1), task_created(2, 1, 2)];
    events.push(hive(3, 2, "task_list_reset", json!({"session_id": "s1"})));
    events.push(task_updated(4, 3, 2, "in_progress"));
    let ids: Vec<_> = fold_all(&events)
        .view()
        .task_list
        .into_iter()
        .map(|t| t.task_id)
        .collect();
    assert_eq!(ids, ["2"]);
}

#[test]
fn the_task_list_keeps_the_greatest_ids_past_the_cap() {
    let events: Vec<_> = (1..=MAX_TASKS as u64 + 3)
        .rev()
        .map(|id| task_created(id, id as i64, id))
        .collect();
    let v = fold_all(&events).view();
    assert_eq!(v.task_list.len(), MAX_TASKS);
    assert_eq!(v.task_list[0].task_id, "4");
    assert!(v.tasks_truncated);
}

#[test]
fn triggers_keep_type_state_fire_times_and_the_next_wake() {
    let next = T0_MS + 3_600_000;
    let events = [
        hive(
            1,
            0,
            "trigger_available",
            json!({"trigger_id": "daily", "trigger_type": "timer",
            "trigger_config": {"cron": "0 9 * * *"}, "name": "NAME-CANARY"}),
        ),
        hive(
            2,
            1,
            "trigger_activated",
            json!({"trigger_id": "daily", "trigger_type": "timer",
            "trigger_config": {"cron": "0 9 * * *", "next_fire_at": next + 5_000}}),
        ),
        hive(
            3,
            2,
            "trigger_fired",
            json!({"trigger_id": "daily", "trigger_type": "timer",
            "name": "NAME-CANARY", "task": "TASK-CANARY", "last_fired_at": T0_MS + 2_000,
            "fire_count": 4, "next_fire_at": next}),
        ),
        hive(
            4,
            3,
            "trigger_activated",
            json!({"trigger_id": "hook", "trigger_type": "webhook",
            "trigger_config": {"path": "/PATH-CANARY", "next_fire_at": next - 1}}),
        ),
        hive(
            5,
            4,
            "trigger_deactivated",
            json!({"trigger_id": "hook", "trigger_type": "webhook"}),
        ),
    ];
    let v = fold_all(&events).view();
    let daily = &v.triggers[0];
    assert_eq!(daily.trigger_id, "daily");
    assert_eq!(daily.trigger_type.as_deref(), Some("timer"));
    assert_eq!(daily.state.as_deref(), Some("activated"));
    assert_eq!(daily.fire_count, Some(4));
    assert_eq!(daily.last_fired_at, Some(t(2)));
    assert_eq!(
        daily.next_fire_at,
        DateTime::from_timestamp_millis(next),
        "the latest event's next fire time wins"
    );
    assert_eq!(v.triggers[1].state.as_deref(), Some("deactivated"));
    assert_eq!(v.triggers[1].next_fire_at, None);
    assert_eq!(
        v.summary.next_wake_at,
        DateTime::from_timestamp_millis(next)
    );
    let text = serde_json::to_string(&v).unwrap();
    assert!(!text.contains("CANARY"), "{text}");
}

#[test]
fn the_activity_is_the_latest_tool_call_without_its_completion() {
    let started = [
        tool(1, 0, "started", "a", "web_search"),
        tool(2, 1, "started", "b", "terminal_exec"),
    ];
    let w = fold_all(&started);
    let a = w.view().summary.activity.unwrap();
    assert_eq!(
        (a.tool_name.as_deref(), a.since, a.in_flight),
        (Some("terminal_exec"), t(1), 2)
    );

    let done = tool(3, 2, "completed", "b", "terminal_exec");
    let a = fold_all(started.iter().chain([&done]))
        .summary()
        .activity
        .unwrap();
    assert_eq!(
        (a.tool_name.as_deref(), a.in_flight),
        (Some("web_search"), 1)
    );

    let end = hive(4, 3, "execution_completed", json!({"output": {}}));
    let mut w = fold_all(started.iter().chain([&done]));
    // Hive's execution events name the session by execution id; this one is folded for s1 anyway.
    w.fold(&end, end.occurred_at);
    assert_eq!(w.summary().activity, None, "the session's end clears it");
    let again = tool(5, 4, "started", "c", "read_file");
    w.fold(&again, again.occurred_at);
    assert_eq!(
        w.summary().activity.unwrap().tool_name.as_deref(),
        Some("read_file")
    );
}

#[test]
fn a_completion_that_arrives_first_still_closes_its_call() {
    let events = [
        tool(2, 1, "completed", "a", "x"),
        tool(1, 0, "started", "a", "x"),
    ];
    assert_eq!(fold_all(&events).summary().activity, None);
}

#[test]
fn the_policy_keeps_trigger_times_as_timestamps_only() {
    let e = hive(
        1,
        0,
        "trigger_fired",
        json!({"trigger_id": "d", "trigger_type": "timer",
        "last_fired_at": "yesterday", "next_fire_at": -5}),
    );
    assert!(!e.data.contains_key("last_fired_at"));
    assert!(!e.data.contains_key("next_fire_at"));
}

/// One random event of session s1.
fn any_event() -> impl Strategy<Value = CanonicalEvent> {
    let task = (1u64..6, 0i64..40, 0usize..5).prop_map(|(id, secs, what)| match what {
        0 => task_created(0, secs, id),
        1 => task_updated(0, secs, id, "in_progress"),
        2 => task_updated(0, secs, id, "completed"),
        3 => task_deleted(0, secs, id),
        _ => hive(0, secs, "task_list_reset", json!({"session_id": "s1"})),
    });
    let trigger = (0usize..3, 0i64..40, 0usize..5, 0i64..100).prop_map(|(id, secs, what, next)| {
        let ty = [
            "trigger_available",
            "trigger_activated",
            "trigger_fired",
            "trigger_deactivated",
            "trigger_removed",
        ][what];
        hive(
            0,
            secs,
            ty,
            json!({"trigger_id": format!("t{id}"), "trigger_type": "timer",
            "next_fire_at": T0_MS + next * 60_000, "fire_count": next}),
        )
    });
    let call = (0usize..4, 0i64..40, any::<bool>()).prop_map(|(id, secs, done)| {
        let status = if done { "completed" } else { "started" };
        tool(0, secs, status, &format!("c{id}"), &format!("tool{id}"))
    });
    let end = (0i64..40).prop_map(|secs| hive(0, secs, "execution_completed", json!({})));
    prop_oneof![task, trigger, call, end]
}

proptest! {
    #[test]
    fn order_and_duplicates_do_not_change_the_view(
        events in proptest::collection::vec(any_event(), 0..40),
        order in any::<u64>(),
        dups in proptest::collection::vec(any::<prop::sample::Index>(), 0..10),
    ) {
        let mut events = events;
        // Distinct ids, as distinct native events have (their seq differs).
        for (i, e) in events.iter_mut().enumerate() {
            e.event_id = uuid::Uuid::from_u128(i as u128 + 1);
        }
        let mut shuffled = events.clone();
        shuffled.extend(dups.iter().filter(|_| !events.is_empty()).map(|i| i.get(&events).clone()));
        let mut rng = order;
        for i in (1..shuffled.len()).rev() {
            rng = rng.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            shuffled.swap(i, (rng >> 33) as usize % (i + 1));
        }
        let a = fold_all(&events);
        let b = fold_all(&shuffled);
        prop_assert_eq!(a.view(), b.view());
        // Through its stored form too (what both sides keep between batches).
        let mut c: Work = serde_json::from_str(&serde_json::to_string(&fold_all(&shuffled[..shuffled.len() / 2])).unwrap()).unwrap();
        for e in &shuffled[shuffled.len() / 2..] {
            c.fold(e, e.occurred_at);
        }
        prop_assert_eq!(a.view(), c.view());
    }
}
