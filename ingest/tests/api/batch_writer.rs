//! The batch writer's groups and retries (`store::batch`): a group that mixes tenants stores each batch
//! under its own; a day partition dropped under this replica's cache answers 503 and the retry creates it
//! again; a bad batch fails alone and the rest of its group is stored; a usage row the database holds
//! fuller than the first attempt assumed is read, and the turn that does not fit refused; any other
//! failure of a rollup statement fails the batch at once.

use apiary_ingest::config::IngestSettings;
use chrono::Duration;
use reqwest::StatusCode;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::helpers::*;

/// One writer, and a group closes as soon as it holds `events` events and bindings: batches posted at
/// once that hold that many together share a group (the wait only bounds how long the first one waits).
async fn spawn_grouping(pool: sqlx::PgPool, events: usize) -> TestApp {
    spawn_app_with(
        pool,
        IngestSettings {
            group_commit_writers: 1,
            group_commit_wait_ms: 5_000,
            group_commit_max_events: events,
            ..test_settings()
        },
    )
    .await
}

/// A batch of one completed tool call of `session` at `at`, sent by `device` (None: no device).
fn one_call(session: &str, at: chrono::DateTime<chrono::Utc>, device: Option<&str>) -> Value {
    let mut b = batch(vec![tool(session, at, false)], vec![]);
    match device {
        Some(d) => b["agent"]["device_id"] = json!(d),
        None => {
            b["agent"].as_object_mut().unwrap().remove("device_id");
        }
    }
    b
}

/// Retention on another replica: the partitions of the days before `cutoff` (`YYYY-MM-DD`) are dropped
/// while this replica still counts them as created.
async fn drop_partitions_before(app: &TestApp, cutoff: &str) {
    sqlx::query("SELECT apiary_drop_event_partitions($1::date)")
        .bind(cutoff)
        .execute(&app.pool)
        .await
        .unwrap();
}

/// The answer of an accepted batch: (status, accepted, duplicates).
fn verdict((s, v): &(StatusCode, Value)) -> (StatusCode, Option<u64>, Option<u64>) {
    (*s, v["accepted"].as_u64(), v["duplicates"].as_u64())
}

/// Batches without a device (so the group's device rows cannot collide and fail the group over to
/// batch-by-batch writes, which would hide a mix-up): each tenant's rows are written from its own batch.
#[sqlx::test(migrations = "../migrations")]
async fn a_group_of_two_tenants_stores_each_batch_under_its_own_tenant(pool: sqlx::PgPool) {
    let app = spawn_grouping(pool, 2).await;
    let (a, b) = (app.tenant("acme").await, app.tenant("globex").await);
    let at = ts("2026-10-05T10:00:00Z");
    let (qa, qb) = (one_call("qa", at, None), one_call("qb", at, None));
    let (ra, rb) = tokio::join!(
        app.post_batch(&a.ingest, &qa),
        app.post_batch(&b.ingest, &qb)
    );
    for r in [&ra, &rb] {
        assert_eq!(verdict(r), (StatusCode::OK, Some(1), Some(0)), "{}", r.1);
    }
    let mut want = vec![(a.id, "qa".to_string()), (b.id, "qb".to_string())];
    want.sort();
    for table in ["events", "sessions", "usage_rollups"] {
        let got: Vec<(Uuid, String)> = sqlx::query_as(&format!(
            "SELECT tenant_id, session_id FROM {table} ORDER BY 1, 2"
        ))
        .fetch_all(&app.pool)
        .await
        .unwrap();
        assert_eq!(got, want, "{table}");
    }
}

/// Retention on another replica drops a day's partition this replica still counts as created: the batch
/// for that day answers 503, which makes the replica forget its partitions, and the retry creates the day
/// again. (The replica's own upkeep forgets its partitions once at start-up, at a moment of its own: a
/// round it overtakes finds the day created again, so the test takes up to three rounds, a day each.)
#[sqlx::test(migrations = "../migrations")]
async fn a_batch_whose_day_partition_was_dropped_answers_503_and_its_retry_is_stored(
    pool: sqlx::PgPool,
) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    for round in 0..3 {
        let at = ts("2026-10-05T10:00:00Z") + Duration::days(round);
        let r = app.post_batch(&t.ingest, &one_call("q1", at, None)).await;
        assert_eq!(verdict(&r), (StatusCode::OK, Some(1), Some(0)), "{}", r.1);
        let next_day = (at + Duration::days(1)).date_naive().to_string();
        drop_partitions_before(&app, &next_day).await;

        let b = one_call("q1", at + Duration::minutes(1), None);
        let (s, v) = app.post_batch(&t.ingest, &b).await;
        if s == StatusCode::OK {
            continue;
        }
        assert_eq!(
            (s, &v["error"]["code"]),
            (StatusCode::SERVICE_UNAVAILABLE, &json!("unavailable")),
            "the partition is missing: {v}"
        );
        let r = app.post_batch(&t.ingest, &b).await;
        assert_eq!(verdict(&r), (StatusCode::OK, Some(1), Some(0)), "{}", r.1);
        return;
    }
    panic!("in three rounds the dropped partition was never reported missing");
}

/// One bad batch fails alone: a group whose shared transaction fails is written again batch by batch, so
/// the other batch of the group is stored with its own answer. The bad batch breaks a unique index the
/// writer does not know of (two rollup rows of its session), in the group as alone.
#[sqlx::test(migrations = "../migrations")]
async fn a_bad_batch_fails_alone_and_the_rest_of_its_group_is_stored(pool: sqlx::PgPool) {
    let app = spawn_grouping(pool, 3).await;
    let t = app.tenant("acme").await;
    sqlx::query(
        "CREATE UNIQUE INDEX one_bad_row ON usage_rollups (tenant_id) WHERE session_id = 'bad'",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    let at = ts("2026-10-05T10:00:00Z");
    let good = one_call("good", at, Some("dev-good"));
    let mut bad = one_call("bad", at, Some("dev-bad"));
    bad["events"]
        .as_array_mut()
        .unwrap()
        .push(tool("bad", at + Duration::minutes(20), false));
    let (rg, (s, v)) = tokio::join!(
        app.post_batch(&t.ingest, &good),
        app.post_batch(&t.ingest, &bad)
    );
    assert_eq!(
        verdict(&rg),
        (StatusCode::OK, Some(1), Some(0)),
        "the good batch is written alone: {}",
        rg.1
    );
    assert_eq!(
        (s, &v["error"]["code"]),
        (StatusCode::INTERNAL_SERVER_ERROR, &json!("internal")),
        "{v}"
    );
    let stored: Vec<String> = sqlx::query_scalar("SELECT session_id FROM events")
        .fetch_all(&app.pool)
        .await
        .unwrap();
    assert_eq!(stored, vec!["good".to_string()]);
}

/// The first attempt does not read the stored rollup rows: a usage row the database holds nearly full
/// meets the bigint range in the upsert, the attempt is rolled back, the rows' totals are read and the
/// next attempt refuses the turn that does not fit, keeping the one that does.
#[sqlx::test(migrations = "../migrations")]
async fn a_turn_that_would_overflow_a_stored_usage_row_is_refused_and_the_rest_kept(
    pool: sqlx::PgPool,
) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let at = ts("2026-10-05T10:01:00Z");
    let turn =
        |input: u64, minute: i64| llm("qa", at + Duration::minutes(minute), "m1", input, 1, 0.0);
    let first = batch(vec![turn(100, 0)], vec![binding("qa", "alice")]);
    let r = app.post_batch(&t.ingest, &first).await;
    assert_eq!(verdict(&r), (StatusCode::OK, Some(1), Some(0)), "{}", r.1);
    // As if many earlier turns had filled the quarter-hour's row of the model (the session's row
    // without a model holds its active time).
    sqlx::query(
        "UPDATE usage_rollups SET input_tokens = $2 - 10 WHERE tenant_id = $1 AND model = 'm1'",
    )
    .bind(t.id)
    .bind(i64::MAX)
    .execute(&app.pool)
    .await
    .unwrap();
    let (big, small) = (turn(100, 1), turn(4, 2));
    let (s, v) = app
        .post_batch(&t.ingest, &batch(vec![big.clone(), small], vec![]))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["accepted"].as_u64(), Some(1), "{v}");
    assert_eq!(v["rejected"].as_array().map(Vec::len), Some(1), "{v}");
    assert_eq!(v["rejected"][0]["event_id"], big["event_id"], "{v}");
    let reason = v["rejected"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("supported range"), "{v}");
    let stored: i64 = sqlx::query_scalar(
        "SELECT input_tokens FROM usage_rollups WHERE tenant_id = $1 AND model = 'm1'",
    )
    .bind(t.id)
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(stored, i64::MAX - 6);
}

/// Only the bigint range makes the writer read the rollup rows and try again: a rollup statement that
/// fails for any other reason (here a unique index the writer does not know of, which a tenant's second
/// row breaks) fails the batch at once with 500, not after every attempt as a retryable 503.
#[sqlx::test(migrations = "../migrations")]
async fn a_rollup_statement_failing_for_another_reason_than_the_range_fails_the_batch_at_once(
    pool: sqlx::PgPool,
) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let at = ts("2026-10-05T10:01:00Z");
    // Two quarter-hours: two rows in each rollup table.
    let mut two = one_call("qa", at, None);
    two["events"]
        .as_array_mut()
        .unwrap()
        .push(tool("qa", at + Duration::minutes(20), false));
    for table in ["usage_rollups", "tool_rollups"] {
        sqlx::query(&format!(
            "CREATE UNIQUE INDEX one_row_per_tenant ON {table} (tenant_id)"
        ))
        .execute(&app.pool)
        .await
        .unwrap();
        let (s, v) = app.post_batch(&t.ingest, &two).await;
        assert_eq!(
            (s, &v["error"]["code"]),
            (StatusCode::INTERNAL_SERVER_ERROR, &json!("internal")),
            "{table}: {v}"
        );
        sqlx::query("DROP INDEX one_row_per_tenant")
            .execute(&app.pool)
            .await
            .unwrap();
    }
    assert_eq!(app.count("events").await, 0);
}
