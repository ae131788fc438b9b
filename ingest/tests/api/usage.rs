//! /v1/usage buckets in any zone, across DST, and in half- and quarter-hour zones.

use reqwest::StatusCode;
use serde_json::Value;

use crate::helpers::*;

fn buckets(v: &Value) -> Vec<(String, i64)> {
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["bucket"].as_str().unwrap().to_string(),
                r["events"].as_i64().unwrap(),
            )
        })
        .collect()
}

#[sqlx::test(migrations = "../migrations")]
async fn day_buckets_follow_the_zone_across_the_fall_back_change(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    // America/New_York falls back on 2026-11-01: that local day is 25 hours long.
    let events = vec![
        tool("q1", ts("2026-11-01T04:30:00Z"), false), // 00:30 EDT, Nov 1
        tool("q1", ts("2026-11-02T04:30:00Z"), false), // 23:30 EST, Nov 1 (hour 25 of the day)
        tool("q1", ts("2026-11-02T05:30:00Z"), false), // 00:30 EST, Nov 2
    ];
    let sent = batch_sent_at(events, vec![], chrono::Utc::now());
    assert_eq!(app.post_batch(&t.ingest, &sent).await.0, StatusCode::OK);
    let (s, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-10-31&to=2026-11-04&granularity=day&tz=America/New_York",
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        buckets(&v),
        vec![
            ("2026-11-01T00:00:00-04:00".into(), 2),
            ("2026-11-02T00:00:00-05:00".into(), 1)
        ]
    );
    let (_, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-10-31&to=2026-11-04&granularity=day&tz=UTC",
        )
        .await;
    assert_eq!(
        buckets(&v),
        vec![
            ("2026-11-01T00:00:00+00:00".into(), 1),
            ("2026-11-02T00:00:00+00:00".into(), 2)
        ]
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn half_and_quarter_hour_zones_get_exact_day_and_hour_buckets(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let events = vec![
        tool("q1", ts("2026-11-01T18:29:59Z"), false), // 23:59:59 IST Nov 1; 00:14:59 NPT Nov 2
        tool("q1", ts("2026-11-01T18:30:00Z"), false), // 00:00 IST Nov 2
        tool("q1", ts("2026-11-01T18:14:00Z"), false), // 23:59 NPT Nov 1 (+05:45)
    ];
    assert_eq!(
        app.post_batch(&t.ingest, &batch(events, vec![])).await.0,
        StatusCode::OK
    );
    let (_, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-11-01&to=2026-11-03&granularity=day&tz=Asia/Kolkata",
        )
        .await;
    assert_eq!(
        buckets(&v),
        vec![
            ("2026-11-01T00:00:00+05:30".into(), 2),
            ("2026-11-02T00:00:00+05:30".into(), 1)
        ]
    );
    let (_, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-11-01&to=2026-11-03&granularity=day&tz=Asia/Kathmandu",
        )
        .await;
    assert_eq!(
        buckets(&v),
        vec![
            ("2026-11-01T00:00:00+05:45".into(), 1),
            ("2026-11-02T00:00:00+05:45".into(), 2)
        ]
    );
    let (_, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-11-01&to=2026-11-03&granularity=hour&tz=Asia/Kolkata",
        )
        .await;
    assert_eq!(
        buckets(&v),
        vec![
            ("2026-11-01T23:00:00+05:30".into(), 2),
            ("2026-11-02T00:00:00+05:30".into(), 1)
        ]
    );
    let (_, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-10-01&to=2026-12-01&granularity=month&tz=Asia/Kolkata",
        )
        .await;
    assert_eq!(buckets(&v), vec![("2026-11-01T00:00:00+05:30".into(), 3)]);
}

#[sqlx::test(migrations = "../migrations")]
async fn rows_carry_every_group_key_and_totals_add_up(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let at = ts("2026-11-03T10:00:00Z");
    let events = vec![
        llm("q1", at, "m1", 100, 10, 0.1),
        llm("q1", at, "m2", 50, 5, 0.0),
        llm("q2", at, "m1", 10, 1, 0.2),
    ];
    let sessions = vec![binding("q1", "alice"), binding("q2", "bob")];
    assert_eq!(
        app.post_batch(&t.ingest, &batch(events, sessions)).await.0,
        StatusCode::OK
    );
    let (_, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-11-03&to=2026-11-04&group_by=user,model,session,device,colony",
        )
        .await;
    // The turns' rows, and each session's active time under model null.
    let rows: Vec<&Value> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["events"] != 0)
        .collect();
    assert_eq!(rows.len(), 3, "{v}");
    assert_eq!(v["rows"].as_array().unwrap().len(), 5, "{v}");
    for k in [
        "user_id",
        "model",
        "session_id",
        "device_id",
        "colony_id",
        "bucket",
    ] {
        assert!(rows[0].get(k).is_some(), "{k} missing: {v}");
    }
    assert_eq!(v["totals"]["input_tokens"], 160);
    assert_eq!(v["totals"]["llm_calls"], 3);
    assert_eq!(v["totals"]["unpriced_turns"], 1);
    assert!((v["totals"]["cost_usd"].as_f64().unwrap() - 0.3).abs() < 1e-12);
    let (_, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-11-03&to=2026-11-04&group_by=user",
        )
        .await;
    let alice = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["user_id"] == "alice")
        .unwrap();
    assert_eq!(alice["input_tokens"], 150);
}

#[sqlx::test(migrations = "../migrations")]
async fn device_level_events_update_the_device_and_never_count_as_usage(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let now = chrono::Utc::now();
    let beat = event(
        "agent.heartbeat",
        None,
        now,
        serde_json::json!({ "backlog_events": 3 }),
    );
    let drop = event(
        "outbox.dropped",
        None,
        now,
        serde_json::json!({ "reason": "evicted", "count": 7 }),
    );
    let b = batch(vec![beat, drop, tool("q1", now, false)], vec![]);
    for _ in 0..2 {
        // The replay is all duplicates: neither usage nor the drop count may move.
        let (s, _) = app.post_batch(&t.ingest, &b).await;
        assert_eq!(s, StatusCode::OK);
    }
    for group in ["", "user", "device", "session"] {
        let (s, v) = app
            .get(&t.read, &format!("/v1/usage?group_by={group}"))
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["totals"]["events"], 1, "group_by={group}: {v}");
        assert_eq!(v["rows"].as_array().unwrap().len(), 1, "{v}");
    }
    let (_, v) = app.get(&t.read, "/v1/devices").await;
    let d = &v["devices"][0];
    assert_eq!(d["backlog_events"], 3, "{v}");
    assert_eq!(d["dropped_events"], 7, "{v}");
    assert_eq!(
        app.count("events").await,
        3,
        "device-level events are stored"
    );
}

/// The bucket starts the API computes in Rust name every quarter hour exactly as Postgres'
/// `date_trunc(unit, t, tz)` does (the raw scans' definition), in zones with DST, half-hour DST and
/// quarter-hour offsets, over a whole year.
#[sqlx::test(migrations = "../migrations")]
async fn rust_buckets_match_postgres_date_trunc_in_every_odd_zone(pool: sqlx::PgPool) {
    use apiary_ingest::query::buckets::{buckets, Unit};
    let (from, to) = (ts("2025-12-31T00:00:00Z"), ts("2027-01-01T00:00:00Z"));
    for zone in [
        "America/New_York",
        "Asia/Kolkata",
        "Asia/Kathmandu",
        "Pacific/Chatham",
        "Australia/Lord_Howe",
        "America/Santiago",
        "America/Havana",
        "Asia/Tehran",
        "Africa/Casablanca",
        "America/St_Johns",
    ] {
        let tz: chrono_tz::Tz = zone.parse().unwrap();
        for (unit, name) in [
            (Unit::Hour, "hour"),
            (Unit::Day, "day"),
            (Unit::Month, "month"),
        ] {
            let b = buckets(unit, tz, from, to);
            let wrong: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM generate_series($1::timestamptz, $2::timestamptz - interval '15 minutes',
                    interval '15 minutes') q
                 WHERE date_trunc($3, q, $4) IS DISTINCT FROM ($6::timestamptz[])[width_bucket(q, $5::timestamptz[])]",
            )
            .bind(from)
            .bind(to)
            .bind(name)
            .bind(zone)
            .bind(&b.starts)
            .bind(&b.labels)
            .fetch_one(&pool)
            .await
            .unwrap();
            assert_eq!(wrong, 0, "{zone} {name}");
        }
    }
}

/// The llm turns of `session` from `runtime`, `n` of them (100 input tokens, 0.01 USD each) at `at`.
fn turns_of(
    runtime: &str,
    session: &str,
    at: chrono::DateTime<chrono::Utc>,
    n: usize,
) -> Vec<Value> {
    (0..n)
        .map(|i| {
            let mut e = llm(
                session,
                at + chrono::Duration::minutes(i as i64),
                "m1",
                100,
                1,
                0.01,
            );
            e["runtime"] = runtime.into();
            e
        })
        .collect()
}

#[sqlx::test(migrations = "../migrations")]
async fn group_by_runtime_answers_each_runtime_from_both_rollups(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    // 09:50 is a quarter row of a cut hour in Asia/Kolkata; 11:00-11:04 lies in whole hours.
    let mut events = turns_of("hive", "q1", ts("2026-11-03T09:50:00Z"), 2);
    events.extend(turns_of(
        "claude_code",
        "cc-1",
        ts("2026-11-03T11:00:00Z"),
        3,
    ));
    events.extend(turns_of("otel", "conv-1", ts("2026-11-03T11:00:00Z"), 4));
    assert_eq!(
        app.post_batch(&t.ingest, &batch(events, vec![])).await.0,
        StatusCode::OK
    );
    for (tz, gran) in [("UTC", "total"), ("Asia/Kolkata", "day"), ("UTC", "hour")] {
        let (s, v) = app
            .get(
                &t.read,
                &format!("/v1/usage?from=2026-11-03&to=2026-11-04&group_by=runtime&granularity={gran}&tz={tz}"),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["group_by"], serde_json::json!(["runtime"]), "{v}");
        let mut by: std::collections::BTreeMap<String, (i64, i64)> = Default::default();
        for r in v["rows"].as_array().unwrap() {
            let e = by
                .entry(r["runtime"].as_str().unwrap().to_string())
                .or_default();
            e.0 += r["llm_calls"].as_i64().unwrap();
            e.1 += r["input_tokens"].as_i64().unwrap();
        }
        let want: std::collections::BTreeMap<String, (i64, i64)> = [
            ("claude_code".to_string(), (3, 300)),
            ("hive".to_string(), (2, 200)),
            ("otel".to_string(), (4, 400)),
        ]
        .into();
        assert_eq!(by, want, "{tz} {gran}: {v}");
    }
    let (s, v) = app.get(&t.read, "/v1/usage?group_by=runtimes").await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(
        v.to_string().contains("runtime"),
        "the error names the words: {v}"
    );
}

#[sqlx::test(migrations = false)]
async fn the_runtime_migration_backfills_rollups_from_their_sessions(pool: sqlx::PgPool) {
    // Every migration before the runtime one, as its SQL, then rows written by the old code.
    let rest = migrate_before(&pool, "rollup runtime").await;
    let tenant = uuid::Uuid::new_v4();
    sqlx::query("INSERT INTO tenants (tenant_id, name) VALUES ($1, 'acme')")
        .bind(tenant)
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query(
        "INSERT INTO sessions (tenant_id, session_id, runtime, first_seen_at)
         VALUES ($1, 'cc-1', 'claude_code', now()), ($1, 'q1', 'hive', now())",
    )
    .bind(tenant)
    .execute(&pool)
    .await
    .unwrap();
    for table in ["usage_rollups", "usage_rollups_hourly"] {
        sqlx::query(&format!(
            "INSERT INTO {table} (tenant_id, bucket, user_id, device_id, colony_id, session_id, model, events)
             VALUES ($1, '2026-11-03T10:00:00Z', '', '', '', 'cc-1', 'm', 3),
                    ($1, '2026-11-03T10:00:00Z', '', '', '', 'q1', 'm', 2),
                    ($1, '2026-11-03T10:00:00Z', '', '', '', '', '', 5)"
        ))
        .bind(tenant)
        .execute(&pool)
        .await
        .unwrap();
    }
    apply(&pool, &rest[..1]).await;
    for table in ["usage_rollups", "usage_rollups_hourly"] {
        let rows: Vec<(String, String, i64)> = sqlx::query_as(&format!(
            "SELECT session_id, runtime, events FROM {table} ORDER BY session_id"
        ))
        .fetch_all(&pool)
        .await
        .unwrap();
        assert_eq!(
            rows,
            vec![
                ("".into(), "".into(), 5),
                ("cc-1".into(), "claude_code".into(), 3),
                ("q1".into(), "hive".into(), 2)
            ],
            "{table}"
        );
    }
}

#[sqlx::test(migrations = false)]
async fn the_narrow_rollup_migration_sums_the_hourly_rows_without_sessions(pool: sqlx::PgPool) {
    // Every migration before the narrow rollup, then hourly rows the old code wrote: two sessions and
    // two devices of one user and model in one hour, another model, another hour.
    let rest = migrate_before(&pool, "usage rollups narrow").await;
    let tenant = uuid::Uuid::new_v4();
    sqlx::raw_sql(&format!(
        "INSERT INTO tenants (tenant_id, name) VALUES ('{tenant}', 'acme');
         INSERT INTO usage_rollups_hourly (tenant_id, bucket, user_id, device_id, colony_id, session_id, model,
             runtime, input_tokens, cost_nanos, llm_calls, events, active_ms)
         VALUES ('{tenant}', '2026-11-03T10:00:00Z', 'alice', 'd1', '', 's1', 'm1', 'hive', 10, 100, 1, 1, 0),
                ('{tenant}', '2026-11-03T10:00:00Z', 'alice', 'd2', 'c1', 's2', 'm1', 'hive', 20, 200, 2, 2, 0),
                ('{tenant}', '2026-11-03T10:00:00Z', 'alice', 'd1', '', 's1', 'm2', 'hive', 5, 50, 1, 1, 0),
                ('{tenant}', '2026-11-03T10:00:00Z', 'alice', 'd1', '', 's1', '', 'hive', 0, 0, 0, 0, 60000),
                ('{tenant}', '2026-11-03T11:00:00Z', 'alice', 'd1', '', 's1', 'm1', 'hive', 7, 70, 1, 1, 0);"
    ))
    .execute(&pool)
    .await
    .unwrap();
    apply(&pool, &rest[..1]).await;
    type Row = (
        chrono::DateTime<chrono::Utc>,
        String,
        String,
        i64,
        i64,
        i64,
        i64,
        i64,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT bucket, user_id, model, input_tokens, cost_nanos, llm_calls, events, active_ms
         FROM usage_rollups_narrow ORDER BY bucket, model",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let at = |s: &str| s.parse::<chrono::DateTime<chrono::Utc>>().unwrap();
    let row = |b: &str, model: &str, sums: [i64; 5]| -> Row {
        let [i, c, l, e, a] = sums;
        (at(b), "alice".into(), model.into(), i, c, l, e, a)
    };
    assert_eq!(
        rows,
        vec![
            row("2026-11-03T10:00:00Z", "", [0, 0, 0, 0, 60_000]),
            row("2026-11-03T10:00:00Z", "m1", [30, 300, 3, 3, 0]),
            row("2026-11-03T10:00:00Z", "m2", [5, 50, 1, 1, 0]),
            row("2026-11-03T11:00:00Z", "m1", [7, 70, 1, 1, 0]),
        ]
    );
    // The rest of the migrations still apply on top.
    apply(&pool, &rest[1..]).await;
}

#[sqlx::test(migrations = false)]
async fn the_calendar_rollup_migration_sums_narrow_rows_per_utc_day_and_month(pool: sqlx::PgPool) {
    // Every migration before the daily and monthly rollups, then narrow rows the old code wrote: two
    // hours of one day, another day of the same month, and the next month.
    let all = sqlx::migrate!("../migrations");
    let is_calendar =
        |m: &&sqlx::migrate::Migration| m.description.contains("usage rollups calendar");
    assert_eq!(all.iter().filter(is_calendar).count(), 1);
    for m in all.iter().take_while(|m| !is_calendar(m)) {
        sqlx::raw_sql(&m.sql).execute(&pool).await.unwrap();
    }
    let tenant = uuid::Uuid::new_v4();
    sqlx::raw_sql(&format!(
        "INSERT INTO tenants (tenant_id, name) VALUES ('{tenant}', 'acme');
         INSERT INTO usage_rollups_narrow (tenant_id, bucket, user_id, model, runtime, input_tokens, cost_nanos,
             llm_calls, events, active_ms)
         VALUES ('{tenant}', '2026-11-03T10:00:00Z', 'alice', 'm1', 'hive', 10, 100, 1, 1, 0),
                ('{tenant}', '2026-11-03T23:00:00Z', 'alice', 'm1', 'hive', 20, 200, 2, 2, 0),
                ('{tenant}', '2026-11-03T23:00:00Z', 'alice', '', 'hive', 0, 0, 0, 0, 60000),
                ('{tenant}', '2026-11-30T23:00:00Z', 'alice', 'm1', 'hive', 5, 50, 1, 1, 0),
                ('{tenant}', '2026-12-01T00:00:00Z', 'alice', 'm1', 'hive', 7, 70, 1, 1, 0);"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let m = all.iter().find(is_calendar).unwrap();
    sqlx::raw_sql(&m.sql).execute(&pool).await.unwrap();
    type Row = (
        chrono::DateTime<chrono::Utc>,
        String,
        i64,
        i64,
        i64,
        i64,
        i64,
    );
    let read = |table: &str| {
        format!(
            "SELECT bucket, model, input_tokens, cost_nanos, llm_calls, events, active_ms
             FROM {table} WHERE user_id = 'alice' AND runtime = 'hive' ORDER BY bucket, model"
        )
    };
    let at = |s: &str| s.parse::<chrono::DateTime<chrono::Utc>>().unwrap();
    let row = |b: &str, model: &str, sums: [i64; 5]| -> Row {
        let [i, c, l, e, a] = sums;
        (at(b), model.into(), i, c, l, e, a)
    };
    let daily: Vec<Row> = sqlx::query_as(&read("usage_rollups_daily"))
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(
        daily,
        vec![
            row("2026-11-03T00:00:00Z", "", [0, 0, 0, 0, 60_000]),
            row("2026-11-03T00:00:00Z", "m1", [30, 300, 3, 3, 0]),
            row("2026-11-30T00:00:00Z", "m1", [5, 50, 1, 1, 0]),
            row("2026-12-01T00:00:00Z", "m1", [7, 70, 1, 1, 0]),
        ]
    );
    let monthly: Vec<Row> = sqlx::query_as(&read("usage_rollups_monthly"))
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(
        monthly,
        vec![
            row("2026-11-01T00:00:00Z", "", [0, 0, 0, 0, 60_000]),
            row("2026-11-01T00:00:00Z", "m1", [35, 350, 4, 4, 0]),
            row("2026-12-01T00:00:00Z", "m1", [7, 70, 1, 1, 0]),
        ]
    );
    // A row off its grain is refused.
    let off = sqlx::query(&format!(
        "INSERT INTO usage_rollups_monthly (tenant_id, bucket, user_id, model, runtime)
         VALUES ('{tenant}', '2026-11-02T00:00:00Z', 'bob', 'm1', 'hive')"
    ))
    .execute(&pool)
    .await;
    assert!(off.is_err(), "a monthly row on the 2nd was stored");
    for m in all.iter().skip_while(|m| !is_calendar(m)).skip(1) {
        sqlx::raw_sql(&m.sql).execute(&pool).await.unwrap();
    }
}

#[sqlx::test(migrations = false)]
async fn the_device_migration_splits_the_narrow_daily_and_monthly_rows_by_device(
    pool: sqlx::PgPool,
) {
    // Every migration before the device joined the narrow key, then what the old code wrote: hourly rows
    // of alice on two devices in one hour (two sessions on d1), on d2 the next day and the next month, bob
    // on d3; and their narrow, daily and monthly sums without the device.
    let rest = migrate_before(&pool, "usage rollups by device").await;
    let tenant = uuid::Uuid::new_v4();
    let hourly = [
        ("2026-11-03T10:00:00Z", "alice", "d1", "s1", "m1", 10, 100),
        ("2026-11-03T10:00:00Z", "alice", "d1", "s2", "m1", 20, 200),
        ("2026-11-03T10:00:00Z", "alice", "d2", "s3", "m1", 3, 30),
        ("2026-11-04T23:00:00Z", "alice", "d2", "s3", "m1", 4, 40),
        ("2026-12-01T00:00:00Z", "alice", "d2", "s4", "m1", 5, 50),
        ("2026-11-03T10:00:00Z", "bob", "d3", "s5", "m2", 6, 60),
    ];
    let mut sql = format!("INSERT INTO tenants (tenant_id, name) VALUES ('{tenant}', 'acme');");
    for (bucket, user, device, session, model, tokens, cost) in hourly {
        sql += &format!(
            "INSERT INTO usage_rollups_hourly (tenant_id, bucket, user_id, device_id, colony_id, session_id,
                 model, runtime, input_tokens, cost_nanos, llm_calls, events)
             VALUES ('{tenant}', '{bucket}', '{user}', '{device}', '', '{session}', '{model}', 'hive',
                 {tokens}, {cost}, 1, 1);"
        );
    }
    for (table, unit) in [
        (
            "usage_rollups_narrow",
            "date_bin('1 hour', bucket, '2000-01-01 00:00:00+00')",
        ),
        (
            "usage_rollups_daily",
            "date_bin('1 day', bucket, '2000-01-01 00:00:00+00')",
        ),
        (
            "usage_rollups_monthly",
            "date_trunc('month', bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'",
        ),
    ] {
        sql += &format!(
            "INSERT INTO {table} (tenant_id, bucket, user_id, model, runtime, input_tokens, cost_nanos,
                 llm_calls, events)
             SELECT tenant_id, {unit}, user_id, model, runtime, sum(input_tokens), sum(cost_nanos),
                 sum(llm_calls), sum(events)
             FROM usage_rollups_hourly GROUP BY 1, 2, 3, 4, 5;"
        );
    }
    sqlx::raw_sql(&sql).execute(&pool).await.unwrap();
    apply(&pool, &rest[..1]).await;
    type Row = (
        chrono::DateTime<chrono::Utc>,
        String,
        String,
        String,
        i64,
        i64,
        i64,
    );
    let read = |table: &str| {
        format!(
            "SELECT bucket, user_id, device_id, model, input_tokens, cost_nanos, llm_calls FROM {table}
             WHERE tenant_id = '{tenant}' AND runtime = 'hive' ORDER BY bucket, user_id, device_id, model"
        )
    };
    let at = |s: &str| s.parse::<chrono::DateTime<chrono::Utc>>().unwrap();
    let row = |b: &str, user: &str, device: &str, model: &str, sums: [i64; 3]| -> Row {
        let [i, c, l] = sums;
        (at(b), user.into(), device.into(), model.into(), i, c, l)
    };
    let rows = |table: &str| {
        let q = read(table);
        let pool = pool.clone();
        async move { sqlx::query_as::<_, Row>(&q).fetch_all(&pool).await.unwrap() }
    };
    assert_eq!(
        rows("usage_rollups_narrow").await,
        vec![
            row("2026-11-03T10:00:00Z", "alice", "d1", "m1", [30, 300, 2]),
            row("2026-11-03T10:00:00Z", "alice", "d2", "m1", [3, 30, 1]),
            row("2026-11-03T10:00:00Z", "bob", "d3", "m2", [6, 60, 1]),
            row("2026-11-04T23:00:00Z", "alice", "d2", "m1", [4, 40, 1]),
            row("2026-12-01T00:00:00Z", "alice", "d2", "m1", [5, 50, 1]),
        ]
    );
    assert_eq!(
        rows("usage_rollups_daily").await,
        vec![
            row("2026-11-03T00:00:00Z", "alice", "d1", "m1", [30, 300, 2]),
            row("2026-11-03T00:00:00Z", "alice", "d2", "m1", [3, 30, 1]),
            row("2026-11-03T00:00:00Z", "bob", "d3", "m2", [6, 60, 1]),
            row("2026-11-04T00:00:00Z", "alice", "d2", "m1", [4, 40, 1]),
            row("2026-12-01T00:00:00Z", "alice", "d2", "m1", [5, 50, 1]),
        ]
    );
    assert_eq!(
        rows("usage_rollups_monthly").await,
        vec![
            row("2026-11-01T00:00:00Z", "alice", "d1", "m1", [30, 300, 2]),
            row("2026-11-01T00:00:00Z", "alice", "d2", "m1", [7, 70, 2]),
            row("2026-11-01T00:00:00Z", "bob", "d3", "m2", [6, 60, 1]),
            row("2026-12-01T00:00:00Z", "alice", "d2", "m1", [5, 50, 1]),
        ]
    );
    // The device is in each table's key: a second row of a key is refused, another device's is not.
    for table in [
        "usage_rollups_narrow",
        "usage_rollups_daily",
        "usage_rollups_monthly",
    ] {
        let insert = |device: &str| {
            format!(
                "INSERT INTO {table} (tenant_id, bucket, user_id, device_id, model, runtime)
                 VALUES ('{tenant}', '2026-12-01T00:00:00Z', 'alice', '{device}', 'm1', 'hive')"
            )
        };
        assert!(
            sqlx::query(&insert("d2")).execute(&pool).await.is_err(),
            "{table}"
        );
        sqlx::query(&insert("d9")).execute(&pool).await.unwrap();
    }
    // The rest of the migrations still apply on top.
    apply(&pool, &rest[1..]).await;
}

#[sqlx::test(migrations = false)]
async fn the_tool_rollup_migration_sums_sessions_and_histograms_per_utc_hour_day_and_month(
    pool: sqlx::PgPool,
) {
    // Every migration before the narrow tool rollups, then quarter rows the old code wrote: two sessions
    // and devices in one hour, a later hour of the same day, another day, and the next month.
    let all = sqlx::migrate!("../migrations");
    let is_tools = |m: &&sqlx::migrate::Migration| m.description.contains("tool rollups calendar");
    assert_eq!(all.iter().filter(is_tools).count(), 1);
    for m in all.iter().take_while(|m| !is_tools(m)) {
        sqlx::raw_sql(&m.sql).execute(&pool).await.unwrap();
    }
    let tenant = uuid::Uuid::new_v4();
    let hist = |slot: usize, n: i64| -> String {
        let mut h = vec![0i64; apiary_ingest::tool_rollups::SLOTS];
        h[slot] = n;
        let h: Vec<String> = h.iter().map(i64::to_string).collect();
        format!("'{{{}}}'", h.join(","))
    };
    sqlx::raw_sql(&format!(
        "INSERT INTO tenants (tenant_id, name) VALUES ('{tenant}', 'acme');
         INSERT INTO tool_rollups (tenant_id, bucket, user_id, device_id, colony_id, session_id, runtime, tool_name,
             calls, errors, timed_calls, duration_ms, duration_hist)
         VALUES ('{tenant}', '2026-11-03T10:00:00Z', 'alice', 'd1', '', 's1', 'hive', 'grep', 2, 1, 2, 10, {}),
                ('{tenant}', '2026-11-03T10:45:00Z', 'alice', 'd2', 'c1', 's2', 'hive', 'grep', 1, 0, 1, 2000, {}),
                ('{tenant}', '2026-11-03T23:15:00Z', 'alice', 'd1', '', 's1', 'hive', 'grep', 3, 0, 0, 0, {}),
                ('{tenant}', '2026-11-30T23:00:00Z', 'alice', 'd1', '', 's3', 'hive', 'grep', 1, 0, 1, 5, {}),
                ('{tenant}', '2026-12-01T00:00:00Z', 'alice', 'd1', '', 's3', 'hive', 'grep', 1, 0, 1, 5, {});",
        hist(4, 2),
        hist(21, 1),
        hist(0, 0),
        hist(4, 1),
        hist(4, 1),
    ))
    .execute(&pool)
    .await
    .unwrap();
    let m = all.iter().find(is_tools).unwrap();
    sqlx::raw_sql(&m.sql).execute(&pool).await.unwrap();
    type Row = (chrono::DateTime<chrono::Utc>, i64, i64, i64, i64, Vec<i64>);
    let read = |table: &str| {
        format!(
            "SELECT bucket, calls, errors, timed_calls, duration_ms, duration_hist FROM {table}
             WHERE user_id = 'alice' AND runtime = 'hive' AND tool_name = 'grep' ORDER BY bucket"
        )
    };
    let at = |s: &str| s.parse::<chrono::DateTime<chrono::Utc>>().unwrap();
    let row = |b: &str, sums: [i64; 4], slots: &[(usize, i64)]| -> Row {
        let mut h = vec![0i64; apiary_ingest::tool_rollups::SLOTS];
        for (i, n) in slots {
            h[*i] = *n;
        }
        (at(b), sums[0], sums[1], sums[2], sums[3], h)
    };
    let fetch = |table: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_as::<_, Row>(&read(table))
                .fetch_all(&pool)
                .await
                .unwrap()
        }
    };
    assert_eq!(
        fetch("tool_rollups_hourly").await,
        vec![
            row("2026-11-03T10:00:00Z", [3, 1, 3, 2010], &[(4, 2), (21, 1)]),
            row("2026-11-03T23:00:00Z", [3, 0, 0, 0], &[]),
            row("2026-11-30T23:00:00Z", [1, 0, 1, 5], &[(4, 1)]),
            row("2026-12-01T00:00:00Z", [1, 0, 1, 5], &[(4, 1)]),
        ]
    );
    assert_eq!(
        fetch("tool_rollups_daily").await,
        vec![
            row("2026-11-03T00:00:00Z", [6, 1, 3, 2010], &[(4, 2), (21, 1)]),
            row("2026-11-30T00:00:00Z", [1, 0, 1, 5], &[(4, 1)]),
            row("2026-12-01T00:00:00Z", [1, 0, 1, 5], &[(4, 1)]),
        ]
    );
    assert_eq!(
        fetch("tool_rollups_monthly").await,
        vec![
            row("2026-11-01T00:00:00Z", [7, 1, 4, 2015], &[(4, 3), (21, 1)]),
            row("2026-12-01T00:00:00Z", [1, 0, 1, 5], &[(4, 1)]),
        ]
    );
    // A row off its grain is refused.
    let off = sqlx::query(&format!(
        "INSERT INTO tool_rollups_daily (tenant_id, bucket, user_id, runtime, tool_name, duration_hist)
         VALUES ('{tenant}', '2026-11-02T01:00:00Z', 'bob', 'hive', 'grep', '{{}}')"
    ))
    .execute(&pool)
    .await;
    assert!(off.is_err(), "a daily row at 01:00 was stored");
    for m in all.iter().skip_while(|m| !is_tools(m)).skip(1) {
        sqlx::raw_sql(&m.sql).execute(&pool).await.unwrap();
    }
}
