use super::*;
use proptest::prelude::*;
use serde_json::{json, Value};

fn event(kind: &str, data: Value) -> CanonicalEvent {
    let device = kind == "agent.heartbeat";
    let mut v = json!({
        "schema_version": 1, "event_id": "00000000-0000-0000-0000-000000000001", "type": kind,
        "occurred_at": "2026-11-03T10:00:00Z", "runtime": "hive", "native_type": "x", "data": data,
    });
    if !device {
        v["session_id"] = json!("s1");
        v["agent_role"] = json!("queen");
    }
    serde_json::from_value(v).unwrap()
}

fn turn(data: Value) -> Result<Option<Contribution>, UsageError> {
    contribution_of(&event("llm.turn", data))
}

#[test]
fn cost_is_converted_to_nanos_like_postgres_rounds_the_decimal() {
    assert_eq!(cost_nanos(0.02958), Some(29_580_000));
    assert_eq!(cost_nanos(1.0), Some(1_000_000_000));
    assert_eq!(cost_nanos(1e-7), Some(100));
    assert_eq!(cost_nanos(0.0000000005), Some(1));
    assert_eq!(cost_nanos(0.0000000004), Some(0));
    assert_eq!(cost_nanos(MAX_COST_USD), Some(1_000_000_000_000_000));
    assert_eq!(cost_nanos(-1.0), None);
    assert_eq!(cost_nanos(f64::NAN), None);
    assert_eq!(cost_nanos(MAX_COST_USD * 1.01), None);
    assert_eq!(credits_micros(0.42), Some(420_000));
    assert_eq!(credits_micros(-0.1), None);
}

#[test]
fn nanos_print_as_usd() {
    assert_eq!(nanos_to_usd(3_500_000_000), 3.5);
    assert_eq!(nanos_to_usd(1), 1e-9);
    assert_eq!(nanos_to_usd(-20_000_000), -0.02);
}

#[test]
fn stored_sums_of_either_sign_convert_by_the_same_decimal_rule() {
    assert_eq!(decimal_units(0.9999999999999999, 9), Some(1_000_000_000));
    assert_eq!(decimal_units(-0.0000000015, 9), Some(-2));
    assert_eq!(decimal_units(5e6, 9), Some(5_000_000_000_000_000));
    assert_eq!(decimal_units(1e30, 9), None);
    assert_eq!(decimal_units(f64::INFINITY, 6), None);
}

#[test]
fn a_priced_turn_adds_its_tokens_cost_and_credits() {
    let c = turn(
        json!({"model": "m", "input_tokens": 100, "output_tokens": 7, "cached_tokens": 60,
        "cache_creation_tokens": 5, "cost_usd": 0.1, "cost_source": "reported", "credits": 0.42}),
    )
    .unwrap()
    .unwrap();
    let want = Contribution {
        model: "m".into(),
        input_tokens: 100,
        output_tokens: 7,
        cached_tokens: 60,
        cache_creation_tokens: 5,
        cost_nanos: 100_000_000,
        credits_micros: 420_000,
        llm_calls: 1,
        events: 1,
        ..Contribution::default()
    };
    assert_eq!(c, want);
}

#[test]
fn unpriced_turns_follow_one_rule() {
    let unpriced = |data: Value| turn(data).unwrap().unwrap().unpriced_turns;
    assert_eq!(
        unpriced(json!({"cost_source": "unreported", "cost_usd": 0.5})),
        1
    );
    assert_eq!(
        unpriced(json!({"cost_source": "reported", "cost_usd": 0})),
        0
    );
    assert_eq!(unpriced(json!({"input_tokens": 3})), 1, "no cost at all");
    assert_eq!(
        unpriced(json!({"input_tokens": 3, "cost_usd": 0})),
        1,
        "zero cost with tokens"
    );
    // Any tokens make a zero cost unpriced: output alone, or as many out as in (cargo-mutants: `-` for
    // the `+` of input + output survived the cases above).
    assert_eq!(unpriced(json!({"output_tokens": 7, "cost_usd": 0})), 1);
    assert_eq!(
        unpriced(json!({"input_tokens": 5, "output_tokens": 5, "cost_usd": 0})),
        1
    );
    // The drift case: no cost source, zero cost, zero tokens — nothing consumed, free.
    assert_eq!(unpriced(json!({"cost_usd": 0})), 0);
    assert_eq!(unpriced(json!({"cost_usd": 0.01})), 0);
}

#[test]
fn out_of_range_values_are_refused_and_named() {
    let too_many = MAX_TOKENS + 1;
    assert_eq!(
        turn(json!({"output_tokens": too_many})),
        Err(UsageError::Tokens("output_tokens"))
    );
    assert_eq!(
        turn(json!({"cost_usd": -0.01})).unwrap_err().to_string(),
        "data.cost_usd is out of range"
    );
    assert_eq!(turn(json!({"credits": 2e9})), Err(UsageError::Credits));
    assert!(turn(json!({"input_tokens": MAX_TOKENS})).is_ok());
}

#[test]
fn tool_calls_count_starts_completions_and_errors() {
    let tool = |data: Value| contribution_of(&event("tool.call", data)).unwrap().unwrap();
    let started = tool(json!({"status": "started"}));
    assert_eq!((started.tool_calls_started, started.tool_calls), (1, 0));
    let failed = tool(json!({"status": "completed", "is_error": true}));
    assert_eq!(
        (failed.tool_calls, failed.tool_errors, failed.events),
        (1, 1, 1)
    );
    let ok = tool(json!({"status": "completed", "is_error": false}));
    assert_eq!((ok.tool_calls, ok.tool_errors), (1, 0));
    assert_eq!(ok.model, "");
    assert_eq!((ok.tool_duration_ms, ok.tool_calls_timed), (0, 0));
}

#[test]
fn a_completed_calls_duration_is_summed_and_a_huge_one_refused() {
    let tool = |data: Value| contribution_of(&event("tool.call", data));
    let timed = tool(json!({"status": "completed", "duration_ms": 1500}))
        .unwrap()
        .unwrap();
    assert_eq!((timed.tool_duration_ms, timed.tool_calls_timed), (1500, 1));
    let zero = tool(json!({"status": "completed", "duration_ms": 0}))
        .unwrap()
        .unwrap();
    assert_eq!((zero.tool_duration_ms, zero.tool_calls_timed), (0, 1));
    let started = tool(json!({"status": "started", "duration_ms": 5}))
        .unwrap()
        .unwrap();
    assert_eq!(started.tool_calls_timed, 0, "only completions are timed");
    assert!(tool(json!({"status": "completed", "duration_ms": MAX_DURATION_MS})).is_ok());
    assert_eq!(
        tool(json!({"status": "completed", "duration_ms": MAX_DURATION_MS + 1})),
        Err(UsageError::Duration)
    );
}

#[test]
fn device_level_events_add_nothing() {
    assert_eq!(
        contribution_of(&event("agent.heartbeat", json!({}))),
        Ok(None)
    );
}

#[test]
fn ten_dimes_sum_to_exactly_one_dollar_where_f64_drifts() {
    let dime = turn(json!({"cost_usd": 0.1, "input_tokens": 1}))
        .unwrap()
        .unwrap();
    let f64_sum: f64 = (0..10).map(|_| 0.1).sum();
    assert_ne!(f64_sum, 1.0);
    assert_eq!((0..10).map(|_| dime.cost_nanos).sum::<i64>(), 1_000_000_000);
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    /// The nanos of a cost are the integer its printed decimal names, to within the half-unit rounding:
    /// never off by a whole nano as `(x * 1e9).round()` can be.
    #[test]
    fn nanos_round_the_printed_decimal_half_away_from_zero(
        units in 0i64..=1_000_000_000_000_000, extra in 0u32..10,
    ) {
        // An exact 9-decimal value, optionally with one more digit.
        let text = format!("{}.{:09}{}", units / 1_000_000_000, units % 1_000_000_000, extra);
        let x: f64 = text.parse().unwrap();
        let nanos = cost_nanos(x).unwrap();
        let printed = format!("{x}");
        let back: f64 = printed.parse().unwrap();
        prop_assert_eq!(back, x);
        // Rounding the printed digits by hand must agree.
        let (int, frac) = printed.split_once('.').unwrap_or((&printed, ""));
        let frac = format!("{frac:0<10}");
        let mut want = int.parse::<i64>().unwrap() * 1_000_000_000 + frac[..9].parse::<i64>().unwrap();
        if frac.as_bytes()[9] >= b'5' { want += 1; }
        prop_assert_eq!(nanos, want);
    }

    /// Sums of contributions are exact: any order gives the same integer total.
    #[test]
    fn cost_sums_do_not_depend_on_order(costs in prop::collection::vec(0.0f64..10.0, 1..50)) {
        let nanos: Vec<i64> = costs.iter().map(|c| cost_nanos(*c).unwrap()).collect();
        let forward: i64 = nanos.iter().sum();
        let backward: i64 = nanos.iter().rev().sum();
        prop_assert_eq!(forward, backward);
    }

    /// Every llm.turn counts one call and at most one unpriced turn; tokens come through unchanged.
    #[test]
    fn every_turn_counts_once(input in 0u64..=MAX_TOKENS, output in 0u64..1000, cost in prop::option::of(0.0f64..5.0)) {
        let mut data = json!({"input_tokens": input, "output_tokens": output});
        if let Some(c) = cost { data["cost_usd"] = json!(c); }
        let c = turn(data).unwrap().unwrap();
        prop_assert_eq!((c.llm_calls, c.events), (1, 1));
        prop_assert_eq!(c.input_tokens as u64, input);
        let want_unpriced = cost.is_none() || (c.cost_nanos == 0 && input + output > 0);
        prop_assert_eq!(c.unpriced_turns, i64::from(want_unpriced));
    }
}
