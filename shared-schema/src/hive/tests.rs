use std::collections::HashSet;

use serde_json::json;

use super::*;

fn ctx() -> Context<'static> {
    Context {
        zone: Zone::Utc,
        source_identity: None,
        session_hint: None,
    }
}

fn turn() -> Value {
    json!({"type": "llm_turn_complete", "stream_id": "worker:session_20261103_101502_9f3c2a1b",
        "node_id": "session_20261103_101502_9f3c2a1b", "execution_id": "session_20261103_101502_9f3c2a1b",
        "data": {"stop_reason": "tool_use", "model": "claude-sonnet-4-5-20250929", "input_tokens": 18250,
                 "output_tokens": 412, "cached_tokens": 12000, "cache_creation_tokens": 0, "cost_usd": 0.02958, "iteration": 2},
        "timestamp": "2026-11-03T10:15:09.412338", "correlation_id": null,
        "colony_id": "session_20261103_101433_51be07d2", "seq": 41})
}

fn event(v: &Value, c: &Context<'_>) -> CanonicalEvent {
    match adapt(v, c).unwrap() {
        Adapted::Event(e) => e,
        other => panic!("expected an event, got {other:?}"),
    }
}

/// The 74 names of `class EventType` at Hive commit 54fd8db4, written out by group (deltas, chatty, usage and
/// lifecycle, status and health, session/queen/colony, tasks and triggers, other) independently of `types.rs`.
const EVENT_TYPE_NAMES: &str = "llm_text_delta llm_reasoning_delta client_output_delta context_usage_updated \
    node_loop_iteration loop_state_changed reminder_injected judge_verdict session_snapshot llm_turn_complete \
    tool_call_started tool_call_completed execution_started execution_completed execution_failed execution_paused \
    execution_resumed execution_resurrected payment_required stream_started stream_stopped node_loop_started \
    node_loop_completed subagent_report worker_completed worker_failed node_stalled node_tool_doom_loop node_retry \
    node_input_blocked stream_ttft_exceeded stream_inactive stream_nudge_sent tool_call_replay_detected \
    context_compaction_started context_compacted escalation_requested queen_identity_selected queen_phase_changed \
    colony_created colony_suggestion_requested worker_colony_loaded session_forked credentials_required \
    client_input_requested client_input_received client_input_committed client_reasoning \
    client_credential_form_requested node_internal_output task_created task_updated task_deleted task_list_reset \
    task_list_reattach_mismatch trigger_available trigger_activated trigger_deactivated trigger_fired \
    trigger_removed trigger_updated missed_triggers state_changed state_conflict goal_progress goal_achieved \
    constraint_violation webhook_received custom credential_provider_connected credential_provider_disconnected \
    tool_catalog_refreshed tools_config_changed crm_changed";

#[test]
fn every_one_of_hives_74_types_is_classified_exactly_once() {
    let names: Vec<&str> = EVENT_TYPE_NAMES.split_whitespace().collect();
    assert_eq!(names.len(), 74);
    let table: HashSet<&str> = HIVE_EVENT_TYPES.iter().map(|(n, _)| *n).collect();
    assert_eq!(table.len(), 74, "duplicate names in HIVE_EVENT_TYPES");
    for name in names {
        assert!(classify(name).is_some(), "{name} is not classified");
    }
    assert_eq!(classify("llm_turn_completed"), None);
}

#[test]
fn deltas_and_chatty_events_are_filtered_with_their_reason() {
    for (ty, reason) in [
        ("llm_text_delta", FilterReason::StreamingDelta),
        ("client_output_delta", FilterReason::StreamingDelta),
        ("context_usage_updated", FilterReason::Chatty),
        ("node_internal_output", FilterReason::NotDurable),
        ("brand_new_type", FilterReason::UnknownType),
    ] {
        let v = json!({"type": ty, "stream_id": "queen", "execution_id": "s1", "data": {"content": "x"},
            "timestamp": "2026-11-03T10:00:00", "seq": 1});
        assert_eq!(
            adapt(&v, &ctx()).unwrap(),
            Adapted::Filtered {
                native_type: ty.into(),
                reason
            }
        );
    }
}

#[test]
fn worker_events_resolve_session_parent_colony_and_role() {
    let e = event(&turn(), &ctx());
    assert_eq!(e.kind, EventKind::LlmTurn);
    assert_eq!(
        e.session_id.as_deref(),
        Some("session_20261103_101502_9f3c2a1b")
    );
    assert_eq!(
        e.parent_session_id.as_deref(),
        Some("session_20261103_101433_51be07d2")
    );
    assert_eq!(
        e.colony_id.as_deref(),
        Some("session_20261103_101433_51be07d2")
    );
    assert_eq!(
        e.worker_id.as_deref(),
        Some("session_20261103_101502_9f3c2a1b")
    );
    assert_eq!(e.agent_role, Some(AgentRole::Worker));
    assert_eq!(e.data["cost_source"], "reported");
    assert_eq!(e.data["provider"], "anthropic");
}

#[test]
fn queen_events_take_the_session_from_data_or_the_log_directory() {
    let task = json!({"type": "task_created", "stream_id": "queen", "execution_id": null,
        "data": {"session_id": "s-queen", "task": {"id": 7, "subject": "secret plan", "status": "pending"}},
        "timestamp": "2026-11-03T10:00:00", "seq": 3});
    let e = event(&task, &ctx());
    assert_eq!(
        (e.session_id.as_deref(), e.agent_role),
        (Some("s-queen"), Some(AgentRole::Queen))
    );
    assert_eq!(e.data["task_id"], "7");
    assert_eq!(e.data["status"], "pending");
    assert_eq!(e.parent_session_id, None);

    let phase = json!({"type": "queen_phase_changed", "stream_id": "queen", "execution_id": null,
        "data": {"phase": "working"}, "timestamp": "2026-11-03T10:00:00", "seq": 4});
    let filtered = adapt(&phase, &ctx()).unwrap();
    assert_eq!(
        filtered,
        Adapted::Filtered {
            native_type: "queen_phase_changed".into(),
            reason: FilterReason::NoSession
        }
    );
    let hinted = Context {
        session_hint: Some("s-dir"),
        ..ctx()
    };
    assert_eq!(event(&phase, &hinted).session_id.as_deref(), Some("s-dir"));
}

#[test]
fn event_id_depends_on_identity_not_payload() {
    let a = event(&turn(), &ctx());
    let mut reordered = turn();
    reordered["data"] = json!({"iteration": 2, "model": "other", "input_tokens": 1});
    let b = event(
        &reordered,
        &Context {
            zone: Zone::Named(chrono_tz::Tz::Asia__Tokyo),
            source_identity: Some("file:1:2:3"),
            session_hint: None,
        },
    );
    assert_eq!(
        a.event_id, b.event_id,
        "payload, zone and source must not change the id"
    );
    for (field, value) in [
        ("seq", json!(42)),
        ("timestamp", json!("2026-11-03T10:15:09.412339")),
        ("stream_id", json!("queen")),
    ] {
        let mut other = turn();
        other[field] = value;
        assert_ne!(
            event(&other, &ctx()).event_id,
            a.event_id,
            "{field} is part of the identity"
        );
    }
}

#[test]
fn events_without_seq_fall_back_to_source_then_content() {
    let mut v = turn();
    v["seq"] = Value::Null;
    let at = |s| {
        event(
            &v,
            &Context {
                source_identity: Some(s),
                ..ctx()
            },
        )
        .event_id
    };
    assert_eq!(at("file:9:9:100"), at("file:9:9:100"));
    assert_ne!(at("file:9:9:100"), at("file:9:9:200"));
    assert_eq!(
        event(&v, &ctx()).event_id,
        event(&v.clone(), &ctx()).event_id
    );
}

#[test]
fn naive_timestamps_resolve_in_the_producer_zone_across_dst() {
    let ny = Zone::Named(chrono_tz::Tz::America__New_York);
    let at = |raw: &str, z| parse_timestamp(raw, z).unwrap().to_rfc3339();
    assert_eq!(
        at("2026-11-03T10:15:09.412338", ny),
        "2026-11-03T15:15:09.412338+00:00"
    );
    assert_eq!(at("2026-07-03T10:15:09", ny), "2026-07-03T14:15:09+00:00");
    // 01:30 happens twice on 2026-11-01 in New York: the earlier (EDT) instant is taken.
    assert_eq!(at("2026-11-01T01:30:00", ny), "2026-11-01T05:30:00+00:00");
    // 02:30 does not exist on 2026-03-08: read with the offset from before the gap.
    assert_eq!(at("2026-03-08T02:30:00", ny), "2026-03-08T07:30:00+00:00");
    assert_eq!(
        at("2026-11-03T10:15:09+01:00", ny),
        "2026-11-03T09:15:09+00:00"
    );
    assert_eq!(
        at("2026-11-03 10:15:09", Zone::Utc),
        "2026-11-03T10:15:09+00:00"
    );
    assert!(parse_timestamp("yesterday", Zone::Utc).is_err());
}

#[test]
fn zero_cost_with_tokens_is_unreported_not_free() {
    let mut v = turn();
    v["data"]["cost_usd"] = json!(0.0);
    assert_eq!(event(&v, &ctx()).data["cost_source"], "unreported");
    v["data"]["input_tokens"] = json!(0);
    v["data"]["output_tokens"] = json!(0);
    assert_eq!(event(&v, &ctx()).data["cost_source"], "reported");
    v["data"].as_object_mut().unwrap().remove("cost_usd");
    assert_eq!(event(&v, &ctx()).data["cost_source"], "unreported");
}

#[test]
fn malformed_events_get_a_clear_error() {
    let cases = [
        (json!([1, 2]), "JSON object"),
        (json!({"stream_id": "queen"}), "`type`"),
        (
            json!({"type": "llm_turn_complete", "execution_id": "s", "data": "text", "timestamp": "2026-11-03T10:00:00"}),
            "`data`",
        ),
        (
            json!({"type": "llm_turn_complete", "execution_id": "s", "timestamp": "2026-11-03T10:00:00", "seq": "4"}),
            "`seq`",
        ),
        (
            json!({"type": "llm_turn_complete", "execution_id": 5, "timestamp": "2026-11-03T10:00:00"}),
            "`execution_id`",
        ),
        (
            json!({"type": "llm_turn_complete", "execution_id": "s", "timestamp": "soon"}),
            "timestamp",
        ),
    ];
    for (v, needle) in cases {
        let err = adapt(&v, &ctx()).unwrap_err().to_string();
        assert!(err.contains(needle), "{v}: {err}");
    }
}

#[test]
fn providers_are_recognised_from_model_names() {
    assert_eq!(provider_of("gpt-5-mini"), Some("openai"));
    assert_eq!(
        provider_of("openrouter/google/gemini-2.5-pro"),
        Some("google")
    );
    assert_eq!(provider_of("claude-haiku-4-5-20251001"), Some("anthropic"));
    assert_eq!(provider_of("my-finetune"), None);
}

/// The id of an event with a `seq` is the v5 id of its five parts joined by U+001F, as `format!` writes
/// them, for every `seq` (the name is now built without the formatter).
#[test]
fn the_id_of_a_sequenced_event_is_the_formatted_name_s() {
    for seq in [0, 7, 41, 10_000_000, -1, -10, i64::MAX, i64::MIN] {
        let (session, stream, kind, ts) = (
            "s_1",
            "worker:w",
            "tool_call_started",
            "2026-11-03T10:15:09",
        );
        let name = format!("hive\u{1f}{session}\u{1f}{stream}\u{1f}{seq}\u{1f}{kind}\u{1f}{ts}");
        assert_eq!(
            event_id(
                session,
                stream,
                Some(seq),
                kind,
                ts,
                Some("file:1:2:3"),
                &turn()
            ),
            Uuid::new_v5(&HIVE_NAMESPACE, name.as_bytes()),
            "seq {seq}"
        );
    }
}

/// [`adapt_owned`] answers as [`adapt`] does, events and errors alike: with and without `seq`, a source
/// identity or `data`, and for values that are not events.
#[test]
fn adapting_an_owned_value_answers_as_adapting_a_borrowed_one() {
    let mut cases = vec![turn(), json!(7), json!({"seq": 1}), json!({"type": 7})];
    for (key, value) in [
        ("seq", Value::Null),
        ("seq", json!("x")),
        ("data", Value::Null),
        ("data", json!([1])),
        ("timestamp", json!(1)),
        ("execution_id", json!(2)),
        ("type", json!("llm_text_delta")),
        ("type", json!("no_such_type")),
    ] {
        let mut v = turn();
        v[key] = value;
        cases.push(v);
    }
    let mut no_seq = turn();
    no_seq.as_object_mut().unwrap().remove("seq");
    cases.push(no_seq);
    for source in [None, Some("file:1:2:40")] {
        let c = Context {
            source_identity: source,
            ..ctx()
        };
        for v in &cases {
            assert_eq!(
                adapt_owned(v.clone(), &c),
                adapt(v, &c),
                "{v} from {source:?}"
            );
        }
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(20_000))]

    /// Hive's usual timestamp read by hand is the time chrono's format-string parse reads, and a shape
    /// or value it does not take is left to that parse: random digits in the shape (days and hours that do
    /// not exist, leap seconds, 1 to 12 fraction digits) and near misses.
    #[test]
    fn a_plain_timestamp_read_by_hand_is_the_format_string_parse(
        digits in proptest::collection::vec(0u8..10, 26),
        ty in proptest::sample::select(vec![b'T', b' ', b't', b'_']),
        frac in 0usize..13,
        dot in proptest::sample::select(vec![b'.', b',']),
        small in proptest::bool::weighted(0.7),
    ) {
        let mut d = digits.clone();
        if small {
            // Mostly valid dates and times, so both answers are often a time.
            d[4] %= 2; d[6] %= 3; d[8] %= 3; d[10] %= 6; d[12] %= 6;
        }
        let c = |i: usize| char::from(b'0' + d[i]);
        let mut raw = format!(
            "{}{}{}{}-{}{}-{}{}{}{}{}:{}{}:{}{}",
            c(0), c(1), c(2), c(3), c(4), c(5), c(6), c(7), char::from(ty), c(8), c(9), c(10), c(11),
            c(12), c(13)
        );
        if frac > 0 {
            raw.push(char::from(dot));
            for i in 0..frac {
                raw.push(c(14 + i % 12));
            }
        }
        let by_hand = super::naive_plain(&raw);
        let by_format = chrono::NaiveDateTime::parse_from_str(&raw, "%Y-%m-%dT%H:%M:%S%.f")
            .or_else(|_| chrono::NaiveDateTime::parse_from_str(&raw, "%Y-%m-%d %H:%M:%S%.f"))
            .ok();
        if let Some(t) = by_hand {
            proptest::prop_assert_eq!(Some(t), by_format, "{}", raw);
        }
        // Where the hand reader declines, the format parse still reads it as before (parse_timestamp
        // falls back to it); the hand reader takes every plain one it should.
        if by_format.is_some() && frac <= 9 && ty != b'_' && ty != b't' && (frac == 0 || dot == b'.') && &raw[17..19] < "60" {
            proptest::prop_assert!(by_hand.is_some(), "declined {}", raw);
        }
    }
}
