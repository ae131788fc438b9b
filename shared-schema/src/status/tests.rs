//! The rules one by one (including the erasures of the old model), and properties over random inputs.

use chrono::{DateTime, Duration, Utc};
use proptest::prelude::*;
use uuid::Uuid;

use super::*;

fn t(secs: i64) -> DateTime<Utc> {
    "2026-11-03T10:00:00Z".parse::<DateTime<Utc>>().unwrap() + Duration::seconds(secs)
}

fn input(secs: i64, n: u128, what: What) -> Input {
    Input {
        at: t(secs),
        id: Uuid::from_u128(n),
        what,
        interactive: false,
    }
}

fn signal(s: &str) -> What {
    What::Signal {
        signal: s.into(),
        tool: None,
    }
}

fn tool(name: &str) -> What {
    What::ToolDone {
        tool: Some(name.into()),
        error: false,
    }
}

fn llm(ends_turn: bool) -> What {
    What::Llm { ends_turn }
}

/// Folds `whats` one second apart and returns the health and every transition.
fn run(whats: &[What]) -> (Health, Vec<Transition>) {
    let mut h = Health::default();
    let mut out = Vec::new();
    for (i, w) in whats.iter().enumerate() {
        h.apply(
            &input(i as i64, i as u128, w.clone()),
            &Rules::default(),
            &mut out,
        );
    }
    (h, out)
}

fn status(whats: &[What]) -> Status {
    run(whats).0.status.unwrap()
}

#[test]
fn a_nudge_after_inactivity_leaves_the_session_stalled() {
    let (h, out) = run(&[llm(false), signal("inactive"), signal("nudge_sent")]);
    assert_eq!(h.status, Some(Status::Stalled));
    assert_eq!(out.last().unwrap().cause, "inactive");
    // The stream recovering (a turn completes) is progress.
    assert_eq!(
        status(&[
            llm(false),
            signal("inactive"),
            signal("nudge_sent"),
            llm(false)
        ]),
        Status::Active
    );
}

#[test]
fn retries_and_escalations_after_a_doom_loop_do_not_erase_it() {
    for milder in ["retry", "escalation_requested", "nudge_sent", "compacted"] {
        let (h, _) = run(&[tool("grep"), signal("doom_loop"), signal(milder)]);
        assert_eq!(h.status, Some(Status::Stalled), "{milder}");
        assert_eq!(h.cause.as_deref(), Some("doom_loop"), "{milder}");
    }
    assert_eq!(
        status(&[llm(false), signal("stalled"), signal("retry")]),
        Status::Stalled
    );
}

#[test]
fn the_calls_of_a_continuing_doom_loop_are_not_progress() {
    let looping = [
        tool("grep"),
        signal("doom_loop"),
        llm(false),
        tool("grep"),
        llm(false),
        tool("grep"),
    ];
    assert_eq!(status(&looping), Status::Stalled);
    // Another tool, or a turn that answers instead of calling a tool, breaks the loop.
    let mut broken = looping.to_vec();
    broken.push(tool("read_file"));
    assert_eq!(status(&broken), Status::Active);
    let mut answered = looping.to_vec();
    answered.push(llm(true));
    assert_eq!(status(&answered), Status::Active);
}

#[test]
fn the_doom_loop_tool_named_by_the_signal_wins_over_the_last_tool() {
    let named = What::Signal {
        signal: "doom_loop".into(),
        tool: Some("web_search".into()),
    };
    assert_eq!(
        status(&[tool("grep"), named.clone(), tool("web_search")]),
        Status::Stalled
    );
    assert_eq!(status(&[tool("grep"), named, tool("grep")]), Status::Active);
    // Unknown looping tool: no tool call counts.
    assert_eq!(
        status(&[signal("doom_loop"), tool("grep")]),
        Status::Stalled
    );
}

#[test]
fn an_escalation_left_standing_after_the_loop_breaks_needs_attention() {
    let (h, out) = run(&[
        tool("grep"),
        signal("doom_loop"),
        signal("escalation_requested"),
        tool("read_file"),
    ]);
    assert_eq!(h.status, Some(Status::NeedsAttention));
    let last = out.last().unwrap();
    assert_eq!(
        (last.from, last.to),
        (Some(Status::Stalled), Status::NeedsAttention)
    );
    assert_eq!(last.cause, "escalation_requested");
    let answered = [
        tool("grep"),
        signal("doom_loop"),
        signal("escalation_requested"),
        What::UserInput {
            state: "received".into(),
            waiting: false,
        },
    ];
    assert_eq!(status(&answered), Status::Active);
    // A new run clears every standing alarm (a completed tool call alone does not clear attention).
    let restarted = [
        tool("grep"),
        signal("doom_loop"),
        signal("escalation_requested"),
        What::Run { run: Run::Started },
    ];
    let (h, out) = run(&restarted);
    assert_eq!(h.status, Some(Status::Active));
    // The cause of a move into `active` names the input that made progress.
    assert_eq!(out.last().unwrap().cause, "run_started");
}

#[test]
fn waiting_for_the_user_is_not_stalled_however_long_it_lasts() {
    let mut h = Health::default();
    let mut out = Vec::new();
    let r = Rules::default();
    h.apply(&input(0, 1, llm(true)), &r, &mut out);
    let ask = What::UserInput {
        state: "credentials_required".into(),
        waiting: true,
    };
    h.apply(&input(1, 2, ask), &r, &mut out);
    h.advance(t(86_400), &r, &mut out);
    assert_eq!(h.status, Some(Status::Waiting));
    assert_eq!(h.cause.as_deref(), Some("credentials_required"));
    let v = view(&h, t(86_400), &Liveness::local(t(86_400)), &r);
    assert_eq!(v.status, Status::Waiting);
    assert_eq!(v.time_in_state[&Status::Waiting], 86_399.0);
}

#[test]
fn no_progress_for_stall_after_stalls_at_the_exact_deadline() {
    let r = Rules::default();
    let mut h = Health::default();
    let mut out = Vec::new();
    h.apply(&input(0, 1, llm(false)), &r, &mut out);
    // Signals are not progress: the clock keeps running from the turn.
    h.apply(&input(200, 2, signal("nudge_sent")), &r, &mut out);
    h.apply(&input(400, 3, signal("retry")), &r, &mut out);
    let stall = out.iter().find(|x| x.to == Status::Stalled).unwrap();
    assert_eq!((stall.at, stall.cause.as_str()), (t(300), "no_progress"));
    // A loop step is progress (it restarts the clock); a pause is not (it makes the session idle).
    let mut stepped = Health::default();
    let mut steps = Vec::new();
    stepped.apply(&input(0, 1, llm(false)), &r, &mut steps);
    stepped.apply(&input(250, 2, What::Run { run: Run::Step }), &r, &mut steps);
    assert_eq!(stepped.derive(t(400), &r).unwrap().0, Status::Active);
    assert_eq!(stepped.derive(t(551), &r).unwrap().0, Status::Stalled);
    stepped.apply(
        &input(560, 3, What::Run { run: Run::Paused }),
        &r,
        &mut steps,
    );
    assert_eq!(stepped.progress_at, Some(t(250)));
    // "More than stall_after": at the deadline itself the session is still active.
    let (quiet, _) = run(&[llm(false)]);
    assert_eq!(quiet.derive(t(300), &r).unwrap().0, Status::Active);
    assert_eq!(
        quiet
            .derive(t(300) + Duration::milliseconds(1), &r)
            .unwrap()
            .0,
        Status::Stalled
    );
    h.apply(&input(500, 4, tool("grep")), &r, &mut out);
    assert_eq!(h.status, Some(Status::Active));
    assert_eq!(h.time_in[&Status::Stalled], 200_000);
    assert_eq!(h.time_in[&Status::Active], 300_000);
    // A quiet queen in the independent phase is idle instead.
    let (h, _) = run(&[What::Phase { independent: true }]);
    let v = view(&h, t(1_000), &Liveness::local(t(1_000)), &r);
    assert_eq!(
        (v.status, v.cause.as_str()),
        (Status::Idle, "quiet_independent")
    );
    assert_eq!(v.derived[0].at, t(300));
}

#[test]
fn a_quiet_interactive_session_is_idle_and_its_alarms_still_stand() {
    let r = Rules::default();
    let interactive = |secs, n, what| Input {
        interactive: true,
        ..input(secs, n, what)
    };
    // A Claude Code session after its last turn waits for its user: idle at the deadline, not stalled.
    let mut h = Health::default();
    let mut out = Vec::new();
    h.apply(&interactive(0, 1, llm(false)), &r, &mut out);
    h.apply(&interactive(10, 2, tool("Bash")), &r, &mut out);
    let v = view(&h, t(1_000), &Liveness::local(t(1_000)), &r);
    assert_eq!(
        (v.status, v.cause.as_str()),
        (Status::Idle, "quiet_interactive")
    );
    assert_eq!(v.derived[0].at, t(310));
    // A stall alarm it reports still stalls it; the same inputs from Hive stall on no progress.
    h.apply(&interactive(20, 3, signal("stalled")), &r, &mut out);
    assert_eq!(h.status, Some(Status::Stalled));
    let (h, _) = run(&[llm(false), tool("Bash")]);
    let v = view(&h, t(1_000), &Liveness::local(t(1_000)), &r);
    assert_eq!(
        (v.status, v.cause.as_str()),
        (Status::Stalled, "no_progress")
    );
    // Read from events: the runtime decides.
    let mut e: crate::CanonicalEvent = serde_json::from_value(serde_json::json!({
        "schema_version": 1, "event_id": Uuid::from_u128(9), "type": "llm.turn",
        "occurred_at": "2026-11-03T10:00:00Z", "runtime": "claude_code", "session_id": "s",
        "native_type": "claude_code.api_request", "data": {}
    }))
    .unwrap();
    assert!(Input::of(&e, e.occurred_at).unwrap().interactive);
    e.runtime = "hive".into();
    assert!(!Input::of(&e, e.occurred_at).unwrap().interactive);
}

#[test]
fn repeated_trouble_while_progressing_is_degraded_until_it_slides_out() {
    let err = What::ToolDone {
        tool: Some("grep".into()),
        error: true,
    };
    let (h, out) = run(&[llm(false), err.clone(), err.clone(), err]);
    assert_eq!(
        (h.status, h.cause.as_deref()),
        (Some(Status::Degraded), Some("tool_errors"))
    );
    assert_eq!(out.len(), 2);
    let mut w = vec![signal("retry"), signal("retry"), signal("retry")];
    assert_eq!(status(&w), Status::Degraded);
    // The window is exactly 20 units: the first retry is the 20th-latest after 17 more turns (still
    // degraded) and slides out with the 18th.
    w.extend(std::iter::repeat_n(llm(false), 17));
    assert_eq!(status(&w), Status::Degraded);
    w.push(llm(false));
    assert_eq!(status(&w), Status::Active);
    assert_eq!(
        status(&[signal("replay_detected"), signal("replay_detected")]),
        Status::Degraded
    );
}

#[test]
fn lifecycle_ends_win_until_a_new_run_starts() {
    let done = What::Run {
        run: Run::Completed,
    };
    assert_eq!(
        status(&[llm(false), done.clone(), signal("doom_loop")]),
        Status::Completed
    );
    assert_eq!(
        status(&[llm(false), done, What::Run { run: Run::Started }]),
        Status::Active
    );
    let paused = What::Run { run: Run::Paused };
    assert_eq!(status(&[llm(false), paused]), Status::Idle);
}

#[test]
fn overlays_apply_to_open_sessions_only() {
    let r = Rules::default();
    let (h, _) = run(&[llm(false)]);
    let silent = Liveness {
        device_heard_at: Some(t(10)),
        runtime_gone_at: None,
    };
    let v = view(&h, t(250), &silent, &r);
    assert_eq!((v.status, v.since), (Status::Offline, Some(t(190))));
    let gone = Liveness {
        device_heard_at: Some(t(250)),
        runtime_gone_at: Some(t(100)),
    };
    let v = view(&h, t(250), &gone, &r);
    assert_eq!(
        (v.status, v.cause.as_str()),
        (Status::Crashed, "runtime_gone")
    );
    assert_eq!(v.derived.last().map(|x| x.to), Some(Status::Crashed));
    let (h, _) = run(&[llm(false), What::Run { run: Run::Failed }]);
    assert_eq!(
        view(&h, t(10_000), &Liveness::default(), &r).status,
        Status::Failed
    );
}

#[test]
fn a_device_is_offline_only_past_offline_after_and_the_time_there_counts_as_offline() {
    let r = Rules::default();
    let (h, _) = run(&[llm(false)]);
    let heard = |secs| Liveness {
        device_heard_at: Some(t(secs)),
        runtime_gone_at: None,
    };
    // Heard at t(10): exactly `offline_after` (180 s) later it is not offline yet; a millisecond past
    // that it is, since the edge.
    assert_eq!(view(&h, t(190), &heard(10), &r).status, Status::Active);
    let v = view(&h, t(190) + Duration::milliseconds(1), &heard(10), &r);
    assert_eq!((v.status, v.since), (Status::Offline, Some(t(190))));
    // Active from the turn to the edge, offline since: 190 s and 60 s at t(250).
    let v = view(&h, t(250), &heard(10), &r);
    assert_eq!(
        v.time_in_state,
        [(Status::Active, 190.0), (Status::Offline, 60.0)].into()
    );
}

#[test]
fn a_later_event_clears_a_crash_and_a_slow_session_is_not_crashed() {
    let r = Rules::default();
    // Events at t(0), t(1), t(2): the runtime found gone at t(1) is contradicted by the event at t(2).
    let (h, _) = run(&[llm(false), llm(false), llm(false)]);
    let live = |gone: Option<i64>| Liveness {
        device_heard_at: Some(t(400)),
        runtime_gone_at: gone.map(t),
    };
    assert_eq!(view(&h, t(100), &live(Some(1)), &r).status, Status::Active);
    assert_eq!(view(&h, t(100), &live(Some(2)), &r).status, Status::Crashed);
    // Slow but alive: no liveness evidence, so quiet past stall_after is stalled, not crashed.
    let v = view(&h, t(400), &live(None), &r);
    assert_eq!(
        (v.status, v.cause.as_str()),
        (Status::Stalled, "no_progress")
    );
}

#[test]
fn wall_clock_runs_from_the_first_event_to_the_end_and_active_time_is_time_in_active() {
    let r = Rules::default();
    let (h, _) = run(&[
        llm(false),
        llm(false),
        What::Run {
            run: Run::Completed,
        },
    ]);
    let v = view(&h, t(100), &Liveness::local(t(100)), &r);
    let d = Durations::of(&h, &v, t(100));
    assert_eq!((d.started_at, d.ended_at), (Some(t(0)), Some(t(2))));
    assert_eq!((d.wall_clock_seconds, d.active_seconds), (2.0, 2.0));
    // Open: the wall-clock runs to now; active time stops when the no-progress rule stalls it at 300 s.
    let (h, _) = run(&[llm(false)]);
    let d = Durations::of(&h, &view(&h, t(100), &Liveness::local(t(100)), &r), t(100));
    assert_eq!(
        (d.ended_at, d.wall_clock_seconds, d.active_seconds),
        (None, 100.0, 100.0)
    );
    let d = Durations::of(
        &h,
        &view(&h, t(1000), &Liveness::local(t(1000)), &r),
        t(1000),
    );
    assert_eq!((d.wall_clock_seconds, d.active_seconds), (1000.0, 300.0));
    // A run started after the end opens the session again.
    let (h, _) = run(&[
        llm(false),
        What::Run {
            run: Run::Completed,
        },
        What::Run { run: Run::Started },
    ]);
    let d = Durations::of(&h, &view(&h, t(10), &Liveness::local(t(10)), &r), t(10));
    assert_eq!((d.ended_at, d.wall_clock_seconds), (None, 10.0));
    let none = Durations::of(
        &Health::default(),
        &view(&Health::default(), t(5), &Liveness::local(t(5)), &r),
        t(5),
    );
    assert_eq!((none.started_at, none.wall_clock_seconds), (None, 0.0));
}

#[test]
fn events_are_read_from_allowlisted_fields() {
    let e: crate::CanonicalEvent = serde_json::from_value(serde_json::json!({
        "schema_version": 1, "event_id": Uuid::nil(), "type": "llm.turn",
        "occurred_at": "2026-11-03T10:00:00Z", "runtime": "hive", "session_id": "s",
        "agent_role": "queen", "native_type": "llm_turn_complete", "data": {"stop_reason": "end_turn"}
    }))
    .unwrap();
    assert_eq!(What::of(&e), What::Llm { ends_turn: true });
    let mut e2 = e.clone();
    e2.data.insert("stop_reason".into(), "tool_use".into());
    assert_eq!(What::of(&e2), What::Llm { ends_turn: false });
    e2.kind = crate::EventKind::AgentHeartbeat;
    e2.session_id = None;
    assert!(Input::of(&e2, t(0)).is_none());
}

#[test]
fn tool_names_signals_and_fired_triggers_are_read_from_their_fields_and_empty_words_are_none() {
    use crate::EventKind as K;
    let data = |v: serde_json::Value| v.as_object().unwrap().clone();
    let read = |k, v| What::from_data(k, &data(v));
    use serde_json::json;
    assert_eq!(
        read(
            K::ToolCall,
            json!({"status": "started", "tool_name": "grep"})
        ),
        What::ToolStarted {
            tool: Some("grep".into())
        }
    );
    assert_eq!(
        read(K::ToolCall, json!({"status": "started", "tool_name": ""})),
        What::ToolStarted { tool: None },
        "an empty tool name is no tool name"
    );
    assert_eq!(
        read(
            K::ToolCall,
            json!({"status": "completed", "tool_name": "bash", "is_error": true})
        ),
        What::ToolDone {
            tool: Some("bash".into()),
            error: true
        }
    );
    assert_eq!(
        read(
            K::HealthSignal,
            json!({"signal": "doom_loop", "tool_name": "read_file"})
        ),
        What::Signal {
            signal: "doom_loop".into(),
            tool: Some("read_file".into())
        }
    );
    assert_eq!(
        read(K::HealthSignal, json!({"signal": ""})),
        What::Other,
        "a signal without a name is nothing"
    );
    assert_eq!(
        read(K::TriggerChanged, json!({"action": "fired"})),
        What::Work
    );
    assert_eq!(
        read(K::TriggerChanged, json!({"action": "created"})),
        What::Other,
        "only a trigger that fired is work"
    );
    // The user's input: waiting states, and the two that end a wait.
    assert_eq!(
        read(K::SessionInput, json!({"state": "requested"})),
        What::UserInput {
            state: "requested".into(),
            waiting: true
        }
    );
    for state in ["received", "committed"] {
        assert_eq!(
            read(K::SessionInput, json!({ "state": state })),
            What::UserInput {
                state: state.into(),
                waiting: false
            }
        );
    }
    assert_eq!(
        read(K::SessionInput, json!({"state": "typing"})),
        What::Other
    );
    assert_eq!(
        read(K::SessionPhase, json!({"phase": "independent"})),
        What::Phase { independent: true }
    );
    assert_eq!(
        read(K::SessionPhase, json!({"phase": "planning"})),
        What::Phase { independent: false }
    );
}

#[test]
fn runs_are_read_from_execution_and_worker_finished_events() {
    use crate::EventKind as K;
    use serde_json::json;
    let run = |k, v: serde_json::Value| super::input::run_of(k, v.as_object().unwrap());
    for (status, want) in [
        ("started", Run::Started),
        ("resumed", Run::Started),
        ("resurrected", Run::Started),
        ("paused", Run::Paused),
        ("completed", Run::Completed),
        ("failed", Run::Failed),
    ] {
        assert_eq!(
            run(K::Execution, json!({ "status": status })),
            Some(want),
            "{status}"
        );
        assert_eq!(
            run(
                K::Execution,
                json!({ "status": status, "scope": "execution" })
            ),
            Some(want),
            "{status} of the whole execution"
        );
        assert_eq!(
            run(K::Execution, json!({ "status": status, "scope": "node" })),
            Some(Run::Step),
            "{status} of a step"
        );
    }
    assert_eq!(run(K::Execution, json!({"status": "queued"})), None);
    assert_eq!(run(K::Execution, json!({})), None);
    for (data, want) in [
        (json!({"status": "completed"}), Run::Completed),
        (
            json!({"status": "completed", "success": true}),
            Run::Completed,
        ),
        (
            json!({"status": "completed", "success": false}),
            Run::Failed,
        ),
        (json!({"status": "timeout"}), Run::Failed),
        (json!({"status": "cancelled"}), Run::Failed),
        (json!({}), Run::Completed),
    ] {
        assert_eq!(run(K::WorkerFinished, data.clone()), Some(want), "{data}");
    }
    assert_eq!(run(K::LlmTurn, json!({"status": "completed"})), None);
}

// ---- properties ----

fn what() -> impl Strategy<Value = What> {
    let tools = prop::sample::select(vec!["grep", "read_file", "web_search"]);
    let signals = prop::sample::select(vec![
        "stalled",
        "doom_loop",
        "inactive",
        "ttft_exceeded",
        "nudge_sent",
        "retry",
        "escalation_requested",
        "input_blocked",
        "replay_detected",
        "compacted",
    ]);
    let states = prop::sample::select(vec![
        "requested",
        "payment_required",
        "received",
        "committed",
    ]);
    let runs = prop::sample::select(vec![
        Run::Started,
        Run::Paused,
        Run::Completed,
        Run::Failed,
        Run::Step,
    ]);
    prop_oneof![
        4 => any::<bool>().prop_map(|ends_turn| What::Llm { ends_turn }),
        4 => (tools.clone(), any::<bool>()).prop_map(|(t, e)| What::ToolDone { tool: Some(t.into()), error: e }),
        1 => tools.prop_map(|t| What::ToolStarted { tool: Some(t.into()) }),
        3 => signals.prop_map(|s| What::Signal { signal: s.into(), tool: None }),
        1 => states.prop_map(|s| What::UserInput { state: s.into(), waiting: !matches!(s, "received" | "committed") }),
        1 => runs.prop_map(|run| What::Run { run }),
        1 => any::<bool>().prop_map(|independent| What::Phase { independent }),
        1 => Just(What::Work),
    ]
}

/// Inputs in time order: gaps of 0 to 400 s (so the no-progress rule fires now and then), distinct ids.
fn inputs() -> impl Strategy<Value = Vec<Input>> {
    prop::collection::vec((0i64..400, what()), 1..120).prop_map(|v| {
        let mut at = 0;
        v.into_iter()
            .enumerate()
            .map(|(i, (gap, w))| {
                at += gap;
                input(at, (i as u128) * 7919 % 10_007 + 1, w)
            })
            .collect()
    })
}

/// A stored history: `Update`s applied in order.
fn store(history: &mut Vec<Transition>, u: Update) {
    if u.replaces {
        history.truncate(u.first_seq as usize);
    }
    assert_eq!(
        history.len() as u64,
        u.first_seq,
        "an update starts where the history ends"
    );
    history.extend(u.transitions);
}

proptest! {
    #[test]
    fn tracker_pushed_out_of_order_within_the_window_agrees_with_a_fold_in_time_order(
        ins in inputs(), seed in any::<u64>(), batch in 1usize..40,
    ) {
        let r = Rules::default();
        let mut sorted = ins.clone();
        sorted.sort_by_key(Input::key);
        let mut want = Health::default();
        let mut want_t = Vec::new();
        for i in &sorted {
            want.apply(i, &r, &mut want_t);
        }
        // Displace every input by less than the window: shuffle within blocks of 16.
        let mut shuffled = ins.clone();
        let mut s = seed;
        for block in shuffled.chunks_mut(16) {
            for i in (1..block.len()).rev() {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                block.swap(i, (s >> 33) as usize % (i + 1));
            }
        }
        let mut tracker = Tracker::default();
        let mut history = Vec::new();
        for chunk in shuffled.chunks(batch) {
            store(&mut history, tracker.push(chunk.iter().cloned(), &r));
            let json = serde_json::to_string(&tracker).unwrap();
            tracker = serde_json::from_str(&json).unwrap();
        }
        prop_assert_eq!(tracker.current(&r), want);
        prop_assert_eq!(history, want_t);
    }

    #[test]
    fn a_tracker_kept_in_memory_pushes_exactly_as_one_read_back_before_every_push(
        ins in inputs(), seed in any::<u64>(), batch in 1usize..12, shuffle in any::<bool>(),
    ) {
        // In memory, a push of inputs that all come after the window folds only them (the fast path);
        // read back, a tracker has no current health and replays its window. Same updates, same state.
        let r = Rules::default();
        let mut ins = ins;
        if shuffle {
            let mut s = seed;
            for block in ins.chunks_mut(8) {
                for i in (1..block.len()).rev() {
                    s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                    block.swap(i, (s >> 33) as usize % (i + 1));
                }
            }
        }
        let mut kept = Tracker::default();
        let mut read = Tracker::default();
        for chunk in ins.chunks(batch) {
            let a = kept.push(chunk.iter().cloned(), &r);
            let b = read.push(chunk.iter().cloned(), &r);
            prop_assert_eq!(&a, &b);
            prop_assert_eq!(&kept, &read);
            let json = serde_json::to_string(&read).unwrap();
            prop_assert_eq!(&serde_json::to_string(&kept).unwrap(), &json);
            read = serde_json::from_str(&json).unwrap();
        }
        prop_assert_eq!(kept.current(&r), read.current(&r));
    }

    #[test]
    fn history_is_consistent_and_time_in_state_adds_up(ins in inputs(), extra in 0i64..2_000) {
        let r = Rules::default();
        let mut h = Health::default();
        let mut out = Vec::new();
        for i in &ins {
            h.apply(i, &r, &mut out);
        }
        for (n, x) in out.iter().enumerate() {
            prop_assert_eq!(x.seq, n as u64);
            prop_assert!(Some(x.to) != x.from);
            if n > 0 {
                prop_assert_eq!(x.from, Some(out[n - 1].to));
                prop_assert!(x.at >= out[n - 1].at);
            }
        }
        let now = ins.last().unwrap().at + Duration::seconds(extra);
        let v = view(&h, now, &Liveness::local(now), &r);
        let total: f64 = v.time_in_state.values().sum();
        prop_assert!((total - (now - ins[0].at).num_milliseconds() as f64 / 1000.0).abs() < 1e-6);
    }

    #[test]
    fn milder_signals_never_clear_a_stall_alarm(
        ins in inputs(),
        milder in prop::collection::vec(prop::sample::select(vec!["retry", "nudge_sent", "escalation_requested", "compacted", "replay_detected"]), 1..6),
    ) {
        let r = Rules::default();
        let mut h = Health::default();
        let mut out = Vec::new();
        for i in &ins {
            h.apply(i, &r, &mut out);
        }
        let at = ins.last().unwrap().at;
        h.apply(&Input { at, id: Uuid::from_u128(u128::MAX), what: signal("doom_loop"), interactive: false }, &r, &mut out);
        let before = h.status;
        // The doom loop itself raised the stall, unless something at least as grave stands (a
        // terminal status, or a worse alarm): the claim below is about a stall alarm, not any status.
        let graver = before.is_some_and(|s| s.is_terminal() || s.severity() > Status::Stalled.severity());
        prop_assert!(before == Some(Status::Stalled) || graver, "after the doom loop: {:?}", before);
        for (n, m) in milder.iter().enumerate() {
            h.apply(&Input { at, id: Uuid::from_u128(u128::MAX - 1 - n as u128), what: signal(m), interactive: false }, &r, &mut out);
            prop_assert_eq!(h.status, before);
        }
    }
}

#[test]
fn every_status_has_its_own_severity_worst_first_as_people_read_them() {
    let mut by_severity = Status::ALL.to_vec();
    by_severity.sort_by_key(|s| std::cmp::Reverse(s.severity()));
    assert_eq!(
        by_severity,
        [
            Status::Crashed,
            Status::Failed,
            Status::Stalled,
            Status::NeedsAttention,
            Status::Offline,
            Status::Degraded,
            Status::Waiting,
            Status::Idle,
            Status::Active,
            Status::Completed,
        ]
    );
    let distinct: std::collections::BTreeSet<u8> =
        Status::ALL.iter().map(|s| s.severity()).collect();
    assert_eq!(distinct.len(), Status::ALL.len());
}
