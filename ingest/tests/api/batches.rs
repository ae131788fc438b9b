use chrono::{Duration, Utc};
use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::*;

#[sqlx::test(migrations = "../migrations")]
async fn a_batch_is_stored_once_and_a_replay_changes_nothing(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let now = Utc::now();
    let b = batch(
        vec![
            llm("q1", now, "m1", 100, 10, 0.5),
            tool("q1", now, true),
            tool("q1", now, false),
        ],
        vec![binding("q1", "alice")],
    );
    let (s, v) = app.post_batch(&t.ingest, &b).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        v,
        json!({ "accepted": 3, "duplicates": 0, "rejected": [], "push_interval_ms": 1000 }),
        "at rest the ingest asks for its base interval"
    );
    let (s, v) = app.post_batch(&t.ingest, &b).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(
        v,
        json!({ "accepted": 0, "duplicates": 3, "rejected": [], "push_interval_ms": 1000 })
    );
    assert_eq!(app.count("events").await, 3);
    let (_, u) = app.get(&t.read, "/v1/usage").await;
    assert_eq!(u["totals"]["events"], 3);
    assert_eq!(u["totals"]["tool_calls"], 2);
    assert_eq!(u["totals"]["tool_errors"], 1);
    assert_eq!(
        u["totals"]["input_tokens"], 100,
        "cached tokens are included in input, never added"
    );
    assert_eq!(u["totals"]["cached_tokens"], 50);
}

#[sqlx::test(migrations = "../migrations")]
async fn zstd_and_plain_bodies_are_accepted(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let b = batch(vec![tool("q1", Utc::now(), false)], vec![]);
    let raw = serde_json::to_vec(&b).unwrap();
    let (s, v) = app
        .post_raw(
            &t.ingest,
            zstd::encode_all(&raw[..], 3).unwrap(),
            Some("zstd"),
        )
        .await;
    assert_eq!((s, v["accepted"].as_u64()), (StatusCode::OK, Some(1)));
    let (s, v) = app.post_raw(&t.ingest, raw, None).await;
    assert_eq!((s, v["duplicates"].as_u64()), (StatusCode::OK, Some(1)));
}

#[sqlx::test(migrations = "../migrations")]
async fn a_non_allowlisted_field_rejects_only_that_event_and_is_never_stored(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let mut bad = tool("q1", Utc::now(), false);
    bad["data"]["result"] = "SECRET-CANARY-1234".into();
    let id = bad["event_id"].clone();
    let (s, v) = app
        .post_batch(
            &t.ingest,
            &batch(vec![bad, tool("q1", Utc::now(), false)], vec![]),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["accepted"], 1);
    assert_eq!(v["rejected"][0]["event_id"], id);
    assert!(
        v["rejected"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("data.result"),
        "{v}"
    );
    let dump: String = sqlx::query_scalar("SELECT string_agg(data::text, ' ') FROM events")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert!(!dump.contains("SECRET-CANARY"));
}

#[sqlx::test(migrations = "../migrations")]
async fn a_binding_claiming_another_tenant_or_user_refuses_the_whole_batch(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant_bound("acme", Some("alice"), Some("dev-1")).await;
    let other = app.tenant("other").await;
    let mut claim = binding("q1", "alice");
    claim["tenant_id"] = other.id.to_string().into();
    let (s, v) = app
        .post_batch(
            &t.ingest,
            &batch(vec![tool("q1", Utc::now(), false)], vec![claim]),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    let (s, _) = app
        .post_batch(
            &t.ingest,
            &batch(
                vec![tool("q1", Utc::now(), false)],
                vec![binding("q1", "bob")],
            ),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let mut b = batch(vec![tool("q1", Utc::now(), false)], vec![]);
    b["agent"]["device_id"] = "dev-2".into();
    let (s, _) = app.post_batch(&t.ingest, &b).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    assert_eq!(app.count("event_keys").await, 0);
    let (s, _) = app
        .post_batch(
            &t.ingest,
            &batch(
                vec![tool("q1", Utc::now(), false)],
                vec![binding("q1", "alice")],
            ),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_device_clock_off_by_more_than_a_minute_is_corrected_and_dedup_ignores_it(
    pool: sqlx::PgPool,
) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let now = Utc::now();
    let device_now = now - Duration::hours(2);
    let e = tool("q1", device_now, false);
    let (s, _) = app
        .post_batch(
            &t.ingest,
            &batch_sent_at(vec![e.clone()], vec![], device_now),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let eff: chrono::DateTime<Utc> = sqlx::query_scalar("SELECT effective_at FROM events")
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert!(
        (eff - now).num_seconds().abs() < 30,
        "corrected to about now: {eff}"
    );
    // The same event again with a correct clock is a duplicate, not a second row.
    let (_, v) = app.post_batch(&t.ingest, &batch(vec![e], vec![])).await;
    assert_eq!(v["duplicates"], 1);
    // A 30-second skew is within tolerance: not corrected.
    let e2 = tool("q1", now - Duration::seconds(30), false);
    app.post_batch(
        &t.ingest,
        &batch_sent_at(vec![e2.clone()], vec![], now - Duration::seconds(30)),
    )
    .await;
    let occ: (chrono::DateTime<Utc>, chrono::DateTime<Utc>) =
        sqlx::query_as("SELECT occurred_at, effective_at FROM events WHERE event_id = $1")
            .bind(uuid::Uuid::parse_str(e2["event_id"].as_str().unwrap()).unwrap())
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(occ.0, occ.1);
}

#[sqlx::test(migrations = "../migrations")]
async fn heartbeats_update_the_device(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let hb = event(
        "agent.heartbeat",
        None,
        Utc::now(),
        json!({ "backlog_events": 42, "agent_version": "0.2.0", "oldest_pending_age_seconds": 1.5 }),
    );
    let (s, _) = app.post_batch(&t.ingest, &batch(vec![hb], vec![])).await;
    assert_eq!(s, StatusCode::OK);
    let (s, v) = app.get(&t.read, "/v1/devices").await;
    assert_eq!(s, StatusCode::OK);
    let d = &v["devices"][0];
    assert_eq!(
        (d["device_id"].as_str(), d["backlog_events"].as_i64()),
        (Some("dev-1"), Some(42))
    );
    assert_eq!(
        (d["agent_version"].as_str(), d["online"].as_bool()),
        (Some("0.2.0"), Some(true))
    );
    assert!(d["last_heartbeat_at"].is_string());
}

#[sqlx::test(migrations = "../migrations")]
async fn scopes_are_enforced(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let (s, _) = app.post_batch(&t.read, &batch(vec![], vec![])).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, _) = app.get(&t.ingest, "/v1/usage").await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let (s, v) = app.get("apy_nope", "/v1/usage").await;
    assert_eq!(
        (s, v["error"]["code"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("unauthenticated"))
    );
}

/// An event a fraction of a microsecond before midnight is stored in that day's partition, with the
/// same `effective_at` as its key in `event_keys`: the COPY text cuts times to microseconds as a bound
/// timestamp is cut (the server rounded them, and rounding up crossed into the next day's partition, so
/// retention would have dropped the key a day before the event — and a replay then counted it twice).
#[sqlx::test(migrations = "../migrations")]
async fn an_event_just_before_midnight_stays_in_its_day_with_its_key(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let day = (Utc::now() - Duration::days(1)).date_naive();
    let at = format!("{day}T23:59:59.9999996Z");
    let mut e = tool("q1", Utc::now(), false);
    e["occurred_at"] = json!(at);
    let b = batch(vec![e], vec![binding("q1", "alice")]);
    let (s, v) = app.post_batch(&t.ingest, &b).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["accepted"], 1, "{v}");
    let (stored, partition, key): (chrono::DateTime<Utc>, String, chrono::DateTime<Utc>) =
        sqlx::query_as(
            "SELECT e.effective_at, e.tableoid::regclass::text, k.effective_at
             FROM events e JOIN event_keys k USING (tenant_id, event_id) WHERE e.tenant_id = $1",
        )
        .bind(t.id)
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(stored, key, "the event and its key disagree on its time");
    assert_eq!(partition, format!("events_{}", day.format("%Y%m%d")));
    assert_eq!(stored.to_rfc3339(), format!("{day}T23:59:59.999999+00:00"));
}
