//! Property tests of the batch decoder (`intake::decode_body` + `intake::check_batch`), pure and bounded:
//! arbitrary bytes, arbitrary compressed bytes, and arbitrary JSON structures in every place of a batch
//! never panic, never answer an internal error, never exceed the limits; valid batches pass whole, whether
//! sent plain, gzip or zstd. `PROPTEST_CASES` raises the case count for a longer local run (CI uses the
//! defaults below).

use apiary_ingest::auth::Principal;
use apiary_ingest::error::ApiError;
use apiary_ingest::intake::{check_batch, decode_body, IntakeError, IntakeRules};
use apiary_ingest::json_budget;
use apiary_schema::Policy;
use axum::response::IntoResponse;
use chrono::{Duration, Utc};
use proptest::prelude::*;
use serde_json::{json, Value};

fn rules(max_batch_events: usize) -> IntakeRules {
    IntakeRules {
        max_decompressed_bytes: 1 << 20,
        max_batch_events,
        retention_days: 90,
        max_future: Duration::days(1),
        skew_tolerance: Duration::seconds(60),
    }
}

fn principal() -> Principal {
    Principal::command_line(uuid::Uuid::nil())
}

/// The decoder's answer is a verdict or a client error (4xx once the route maps it) — never a panic,
/// never a 5xx. Some(verdict), or None after a client error.
fn client_error_or<T>(r: Result<T, IntakeError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(e) => {
            let shown = format!("{e:?}");
            let status = ApiError::from(e).into_response().status();
            assert!(
                status.is_client_error(),
                "{status} for client input: {shown}"
            );
            None
        }
    }
}

use tests::hostile::gzip;

/// Any JSON value, nested a few levels, with hostile strings (NUL, escapes, long runs) among them.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "\\PC{0,24}".prop_map(Value::from),
        Just(Value::from("a\u{0}b")),
        Just(Value::from("/home/alice/.ssh/id_rsa")),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::from),
            proptest::collection::btree_map("[a-z_]{1,12}", inner, 0..8)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn envelope(events: Vec<Value>) -> Value {
    json!({
        "schema_version": 1,
        "batch_id": uuid::Uuid::new_v4(),
        "sent_at": Utc::now(),
        "agent": {"device_id": "dev-1", "agent_version": "0.1.0"},
        "policy_hash": Policy::default_policy().hash(),
        "sessions": [],
        "events": events,
    })
}

/// A valid `llm.turn` within every per-event bound.
fn valid_turn() -> impl Strategy<Value = Value> {
    (
        0u64..=1_000_000_000_000,
        0u64..=1_000_000_000_000,
        0u32..=1_000_000_000,
        0i64..3600,
    )
        .prop_map(|(input, output, cost_micro, secs_ago)| {
            json!({
                "schema_version": 1, "event_id": uuid::Uuid::new_v4(), "type": "llm.turn",
                "occurred_at": Utc::now() - Duration::seconds(secs_ago), "runtime": "hive",
                "native_type": "llm_turn_complete", "session_id": "session_1", "agent_role": "queen",
                "data": {"model": "claude-sonnet-4-5", "input_tokens": input, "output_tokens": output,
                         "cost_usd": f64::from(cost_micro) / 1e3, "cost_source": "reported"}
            })
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_or_fail_internally(
        body in proptest::collection::vec(any::<u8>(), 0..2048),
        enc in prop_oneof![Just(None), Just(Some("gzip")), Just(Some("zstd")), Just(Some("br")), Just(Some("identity"))],
    ) {
        if let Some(d) = client_error_or(decode_body(enc, &body, 4096)) {
            prop_assert!(d.len() <= 4096);
            client_error_or(check_batch(&d, &principal(), &Policy::default_policy(), &rules(100), Utc::now(), true));
        }
    }

    #[test]
    fn compressed_garbage_is_capped_by_the_decompressed_limit(
        unit in "[0-9,\\[\\]{}\"a-z:]{1,8}",
        repeat in 1usize..200_000,
    ) {
        let text = unit.repeat(repeat);
        for (enc, body) in [("gzip", gzip(text.as_bytes())), ("zstd", zstd::encode_all(text.as_bytes(), 3).unwrap())] {
            match decode_body(Some(enc), &body, 64 * 1024) {
                Ok(d) => prop_assert_eq!(d.len(), text.len()),
                Err(IntakeError::TooLarge(_)) => prop_assert!(text.len() > 64 * 1024),
                Err(e) => prop_assert!(false, "{e:?}"),
            }
        }
    }

    #[test]
    fn hostile_structures_anywhere_are_verdicts_or_client_errors(
        events in proptest::collection::vec(any_json(), 0..12),
        data in any_json(),
        extra in any_json(),
        at in 0usize..4,
    ) {
        let mut batch = envelope(events);
        match at {
            0 => batch["agent"] = extra,
            1 => batch["sessions"] = json!([extra]),
            2 => batch["events"].as_array_mut().unwrap().push(json!({
                "schema_version": 1, "event_id": uuid::Uuid::new_v4(), "type": "llm.turn",
                "occurred_at": Utc::now(), "runtime": "hive", "native_type": "x", "data": data })),
            _ => batch["unexpected"] = extra,
        }
        let body = serde_json::to_vec(&batch).unwrap();
        let r = check_batch(&body, &principal(), &Policy::default_policy(), &rules(100), Utc::now(), true);
        if let Some(checked) = client_error_or(r) {
            let n = batch["events"].as_array().map_or(0, Vec::len);
            prop_assert_eq!(checked.events.len() + checked.rejected.len(), n);
        }
    }

    #[test]
    fn more_values_than_the_budget_are_refused_before_parsing(
        events in 1usize..50,
        shape in 0usize..3,
    ) {
        let budget = json_budget::value_budget(events);
        let n = budget + 1;
        let filler = match shape {
            0 => format!("[{}0]", "0,".repeat(n)),
            1 => format!("{{{}\"z\":0}}", (0..n).map(|i| format!("\"k{i}\":1,")).collect::<String>()),
            _ => format!("{}0{}", "[".repeat(100), "]".repeat(100)).repeat(n / 100 + 1),
        };
        let body = format!(r#"{{"schema_version":1,"events":[{{"data":{filler}}}]}}"#);
        let r = check_batch(body.as_bytes(), &principal(), &Policy::default_policy(), &rules(events), Utc::now(), true);
        prop_assert!(matches!(r, Err(IntakeError::TooLarge(_))), "{r:?}");
    }

    #[test]
    fn valid_batches_pass_whole_plain_or_compressed(
        events in proptest::collection::vec(valid_turn(), 1..40),
        enc in prop_oneof![Just(None), Just(Some("gzip")), Just(Some("zstd"))],
    ) {
        let n = events.len();
        let plain = serde_json::to_vec(&envelope(events)).unwrap();
        let body = match enc {
            Some("gzip") => gzip(&plain),
            Some(_) => zstd::encode_all(&plain[..], 3).unwrap(),
            None => plain.clone(),
        };
        let decoded = decode_body(enc, &body, 1 << 20).unwrap();
        prop_assert_eq!(&decoded, &plain);
        let checked = check_batch(&decoded, &principal(), &Policy::default_policy(), &rules(n), Utc::now(), true).unwrap();
        prop_assert_eq!(checked.rejected.len(), 0, "{:?}", checked.rejected);
        prop_assert_eq!(checked.events.len(), n);
    }
}
