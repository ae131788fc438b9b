//! The ingest and the shared health model agree: random event sequences of one session, posted in random
//! batches slightly out of order, leave in Postgres (`sessions.health`, `status_transitions`) exactly what
//! folding the same events in time order with `apiary_schema::status` gives — which is what the agent
//! computes locally from the same events.

use apiary_schema::status::{Health, Input, Rules, Transition};
use apiary_schema::CanonicalEvent;
use chrono::{Duration, Utc};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

/// A `status_transitions` row: seq, at, from, to, cause.
type StoredTransition = (i64, chrono::DateTime<Utc>, Option<String>, String, String);

/// One random event: kind and data, and the seconds since the previous one.
fn event_strategy() -> impl Strategy<Value = (i64, &'static str, Value)> {
    let tools = prop::sample::select(vec!["grep", "read_file"]);
    let data = prop_oneof![
        4 => prop::sample::select(vec!["end_turn", "tool_use"])
            .prop_map(|s| ("llm.turn", json!({"model": "m", "input_tokens": 1, "output_tokens": 1, "cost_usd": 0.0, "cost_source": "unreported", "stop_reason": s}))),
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
        1 => Just(("task.changed", json!({"action": "updated", "task_id": "1", "status": "in_progress"}))),
    ];
    (0i64..400, data).prop_map(|(gap, (k, d))| (gap, k, d))
}

#[sqlx::test(migrations = "../migrations")]
async fn the_stored_status_agrees_with_the_shared_model_on_random_sequences(pool: sqlx::PgPool) {
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let rules = Rules {
        stall_after_secs: test_settings().stall_after_secs,
        offline_after_secs: test_settings().offline_after_secs,
        ..Rules::default()
    };
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &[7; 32]),
    );
    let strategy = (
        prop::collection::vec(event_strategy(), 1..80),
        1usize..25,
        any::<u64>(),
    );
    for case in 0..16 {
        let (events, batch, seed) = strategy.new_tree(&mut runner).unwrap().current();
        let session = format!("s{case}");
        let mut at = Utc::now() - Duration::days(2);
        let bodies: Vec<Value> = events
            .iter()
            .map(|(gap, kind, data)| {
                at += Duration::seconds(*gap);
                event(kind, Some(&session), at, data.clone())
            })
            .collect();
        // What the shared model says, folding in time order.
        let mut inputs: Vec<Input> = bodies
            .iter()
            .map(|b| {
                let e: CanonicalEvent = serde_json::from_value(b.clone()).unwrap();
                Input::of(&e, e.occurred_at).unwrap()
            })
            .collect();
        inputs.sort_by_key(Input::key);
        let mut want = Health::default();
        let mut want_t: Vec<Transition> = Vec::new();
        for i in &inputs {
            want.apply(i, &rules, &mut want_t);
        }
        // Posted in batches, shuffled within blocks of 8 (less than the re-order window).
        let mut shuffled = bodies.clone();
        let mut s = seed;
        for block in shuffled.chunks_mut(8) {
            for i in (1..block.len()).rev() {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                block.swap(i, (s >> 33) as usize % (i + 1));
            }
        }
        for chunk in shuffled.chunks(batch) {
            let (code, v) = app.post_batch(&t.ingest, &batch_of(chunk.to_vec())).await;
            assert_eq!(code, StatusCode::OK, "{v}");
            assert_eq!(v["accepted"].as_u64(), Some(chunk.len() as u64), "{v}");
        }
        let health: Option<Value> =
            sqlx::query_scalar("SELECT health FROM sessions WHERE session_id = $1")
                .bind(&session)
                .fetch_one(&pool)
                .await
                .unwrap();
        let stored: Vec<StoredTransition> = sqlx::query_as(
            "SELECT seq, at, from_status, to_status, cause FROM status_transitions
             WHERE session_id = $1 ORDER BY seq",
        )
        .bind(&session)
        .fetch_all(&pool)
        .await
        .unwrap();
        let got = apiary_ingest::status::tracker(health.as_ref()).current(&rules);
        assert_eq!(
            got, want,
            "case {case}: stored health differs from the model's"
        );
        let want_rows: Vec<_> = want_t
            .iter()
            .map(|x| {
                (
                    x.seq as i64,
                    x.at,
                    x.from.map(|s| s.as_str().to_string()),
                    x.to.as_str().to_string(),
                    x.cause.clone(),
                )
            })
            .collect();
        assert_eq!(stored, want_rows, "case {case}: stored transitions differ");
        // And the API reports the model's view of it.
        let (code, v) = app
            .get(&t.read, &format!("/v1/sessions/{session}/history"))
            .await;
        assert_eq!(code, StatusCode::OK, "{v}");
        assert!(
            v["transitions"].as_array().unwrap().len() >= want_t.len(),
            "{v}"
        );
    }
}

fn batch_of(events: Vec<Value>) -> Value {
    batch(events, vec![])
}
