//! Tool durations, active time and wall-clock: `group_by=tool` per tool name, the
//! session body's `durations`, the rollups' `active_seconds` equal to the session's time in `active`
//! once it is over, and the migration's backfill of what was stored before it.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

fn timed(session: &str, at: &str, tool: &str, ms: Option<u64>, is_error: bool) -> Value {
    let mut data = json!({ "tool_name": tool, "status": "completed", "is_error": is_error });
    if let Some(ms) = ms {
        data["duration_ms"] = json!(ms);
    }
    event("tool.call", Some(session), ts(at), data)
}

fn run(session: &str, at: &str, status: &str) -> Value {
    event(
        "execution",
        Some(session),
        ts(at),
        json!({ "scope": "execution", "status": status }),
    )
}

/// A histogram is stored up to its last non-zero slot, so a call in the last slot (18.6 hours or more)
/// keeps it, in the quarter rows and in the hourly, daily and monthly ones a year's read sums.
#[sqlx::test(migrations = "../migrations")]
async fn a_call_in_the_last_histogram_slot_is_kept_in_every_tool_rollup(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let events = vec![
        timed("q3", "2026-11-03T10:01:00Z", "bash", Some(5), false),
        timed(
            "q3",
            "2026-11-03T10:02:00Z",
            "bash",
            Some(90_000_000),
            false,
        ),
    ];
    let (s, v) = app
        .post_batch(&t.ingest, &batch(events, vec![binding("q3", "alice")]))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let last = apiary_ingest::tool_rollups::SLOTS;
    for table in [
        "tool_rollups",
        "tool_rollups_hourly",
        "tool_rollups_daily",
        "tool_rollups_monthly",
        "tool_rollups_tenant_hourly",
        "tool_rollups_tenant_daily",
        "tool_rollups_tenant_monthly",
    ] {
        let (len, first, top): (i32, i64, i64) = sqlx::query_as(&format!(
            "SELECT array_length(duration_hist, 1), duration_hist[{}], COALESCE(duration_hist[{last}], 0) FROM {table}",
            apiary_ingest::tool_rollups::slot(5) + 1
        ))
        .fetch_one(&app.pool)
        .await
        .unwrap();
        assert_eq!((len, first, top), (last as i32, 1, 1), "{table}");
    }
    // A year by month reads the monthly row: the nearest-rank p95 of two calls is the long one, read
    // as its slot's lower bound.
    let (s, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-01-01&to=2027-01-01&group_by=tool&granularity=month",
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let row = &v["rows"][0];
    assert_eq!(row["tool_calls_timed"], 2, "{v}");
    assert_eq!(row["tool_duration_p95_ms"], 67_108_864, "{v}");
    assert_eq!(row["tool_duration_p50_ms"], 5, "{v}");
}

#[sqlx::test(migrations = "../migrations")]
async fn group_by_tool_gives_calls_errors_durations_and_percentiles(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let mut events = vec![run("q1", "2026-11-03T10:00:00Z", "started")];
    // read_file: 1..=10 ms and one of 1,000 ms; one error; one without a duration.
    for i in 1..=10u64 {
        events.push(timed(
            "q1",
            "2026-11-03T10:01:00Z",
            "read_file",
            Some(i),
            i == 3,
        ));
    }
    events.push(timed(
        "q1",
        "2026-11-03T10:02:00Z",
        "read_file",
        Some(1_000),
        false,
    ));
    events.push(timed(
        "q1",
        "2026-11-03T10:03:00Z",
        "read_file",
        None,
        false,
    ));
    events.push(timed(
        "q2",
        "2026-11-03T11:10:00Z",
        "bash",
        Some(60_000),
        true,
    ));
    events.push(run("q1", "2026-11-03T10:04:00Z", "completed"));
    let sessions = vec![binding("q1", "alice"), binding("q2", "bob")];
    let (s, v) = app.post_batch(&t.ingest, &batch(events, sessions)).await;
    assert_eq!(s, StatusCode::OK, "{v}");

    let (s, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-11-03&to=2026-11-04&group_by=tool",
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["group_by"], json!(["tool_name"]));
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{v}");
    let bash = &rows[0];
    assert_eq!(bash["tool_name"], "bash");
    assert_eq!(
        (
            &bash["tool_calls"],
            &bash["tool_errors"],
            &bash["tool_duration_ms"]
        ),
        (&json!(1), &json!(1), &json!(60_000))
    );
    // One call in [46341, 65536): the middle of its slot.
    assert_eq!(bash["tool_duration_p50_ms"], 55_938);
    let read = &rows[1];
    assert_eq!(read["tool_name"], "read_file");
    assert_eq!(
        (
            &read["tool_calls"],
            &read["tool_errors"],
            &read["tool_calls_timed"]
        ),
        (&json!(12), &json!(1), &json!(11))
    );
    assert_eq!(read["tool_duration_ms"], 55 + 1_000);
    // Nearest rank: p50 of 11 is the 6th (6 ms, in [6, 8)), p95 the 11th (1,000 ms, in [724, 1024)).
    assert_eq!(read["tool_duration_p50_ms"], 6);
    assert_eq!(read["tool_duration_p95_ms"], 874);
    assert_eq!(v["totals"]["tool_duration_ms"], 61_055);
    assert_eq!(read["input_tokens"], 0, "tool rows hold tool sums only");

    // By tool and session, and a session's own usage by tool.
    let (_, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-11-03&to=2026-11-04&group_by=tool,session&granularity=hour",
        )
        .await;
    assert_eq!(v["rows"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["rows"][1]["session_id"], "q2");
    let (_, v) = app
        .get(&t.read, "/v1/sessions/q2/usage?group_by=tool")
        .await;
    assert_eq!(v["rows"][0]["tool_name"], "bash", "{v}");
    // Tool calls have no model.
    let (s, v) = app.get(&t.read, "/v1/usage?group_by=tool,model").await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert!(v.to_string().contains("group_by"), "{v}");

    // The usage totals carry the durations; q1 was active from its start to its end (4 minutes).
    let (_, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-11-03&to=2026-11-04&group_by=session",
        )
        .await;
    let q1 = &v["rows"][0];
    assert_eq!(q1["session_id"], "q1");
    assert_eq!(q1["tool_duration_ms"], 1_055);
    assert_eq!(q1["active_seconds"], 240.0);
    let body = app.get(&t.read, "/v1/sessions/q1").await.1;
    assert_eq!(
        body["durations"],
        json!({ "started_at": "2026-11-03T10:00:00Z", "ended_at": "2026-11-03T10:04:00Z",
                "wall_clock_seconds": 240.0, "active_seconds": 240.0 }),
        "{body}"
    );
    assert_eq!(body["totals"]["active_seconds"], 240.0);
}

#[sqlx::test(migrations = "../migrations")]
async fn active_time_in_the_rollups_is_the_sessions_time_in_active_whatever_the_order(
    pool: sqlx::PgPool,
) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    // Active 10:00 → a stall at 10:10:30.5 → progress again 10:20 → completed 10:44:59.999:
    // 630.5 s + 1,499.999 s of active time across four quarter hours.
    let events = vec![
        run("s1", "2026-11-03T10:00:00Z", "started"),
        llm("s1", ts("2026-11-03T10:05:00Z"), "m", 1, 1, 0.1),
        llm("s1", ts("2026-11-03T10:09:00Z"), "m", 1, 1, 0.1),
        event(
            "health.signal",
            Some("s1"),
            ts("2026-11-03T10:10:30.5Z"),
            json!({ "signal": "stalled" }),
        ),
        llm("s1", ts("2026-11-03T10:20:00Z"), "m", 1, 1, 0.1),
        llm("s1", ts("2026-11-03T10:24:00Z"), "m", 1, 1, 0.1),
        llm("s1", ts("2026-11-03T10:28:00Z"), "m", 1, 1, 0.1),
        llm("s1", ts("2026-11-03T10:32:00Z"), "m", 1, 1, 0.1),
        llm("s1", ts("2026-11-03T10:36:00Z"), "m", 1, 1, 0.1),
        llm("s1", ts("2026-11-03T10:40:00Z"), "m", 1, 1, 0.1),
        run("s1", "2026-11-03T10:44:59.999Z", "completed"),
    ];
    // Posted backwards, one event per batch: every batch rewrites the history's end.
    for e in events.iter().rev() {
        let (s, v) = app
            .post_batch(
                &t.ingest,
                &batch(vec![e.clone()], vec![binding("s1", "alice")]),
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }
    let (_, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-11-03&to=2026-11-04&granularity=hour",
        )
        .await;
    assert_eq!(v["totals"]["active_seconds"], 2_130.499, "{v}");
    let body = app.get(&t.read, "/v1/sessions/s1").await.1;
    assert_eq!(body["durations"]["active_seconds"], 2_130.499, "{body}");
    assert_eq!(body["time_in_state"]["active"], 2_130.499);
    assert_eq!(body["durations"]["wall_clock_seconds"], 2_699.999);
    let quarters: Vec<(chrono::DateTime<chrono::Utc>, i64)> = sqlx::query_as(
        "SELECT bucket, sum(active_ms)::int8 FROM usage_rollups GROUP BY 1 HAVING sum(active_ms) <> 0 ORDER BY 1",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(
        quarters,
        vec![
            (ts("2026-11-03T10:00:00Z"), 630_500),
            (ts("2026-11-03T10:15:00Z"), 600_000),
            (ts("2026-11-03T10:30:00Z"), 899_999),
        ]
    );
}

#[sqlx::test(migrations = false)]
async fn the_durations_migration_backfills_what_was_stored_before_it(pool: sqlx::PgPool) {
    let rest = migrate_before(&pool, "tool durations").await;
    let tenant = uuid::Uuid::new_v4();
    sqlx::raw_sql(&format!(
        "SELECT apiary_ensure_event_partitions('2026-11-03', '2026-11-04');
         INSERT INTO tenants (tenant_id, name) VALUES ('{tenant}', 'acme');
         INSERT INTO sessions (tenant_id, session_id, user_id, device_id, colony_id, runtime, first_seen_at,
             stall_due_at)
         VALUES ('{tenant}', 's1', 'alice', 'd', NULL, 'otel', now(), '2026-11-03T10:40:00Z');
         INSERT INTO events (tenant_id, effective_at, event_id, occurred_at, received_at, kind, runtime,
             native_type, session_id, user_id, device_id, data)
         VALUES
         ('{tenant}', '2026-11-03T10:01:00Z', gen_random_uuid(), '2026-11-03T10:01:00Z', now(), 'tool.call',
          'otel', 'execute_tool', 's1', 'alice', 'd', '{{\"status\": \"completed\", \"tool_name\": \"grep\", \"duration_ms\": 1500}}'),
         ('{tenant}', '2026-11-03T10:02:00Z', gen_random_uuid(), '2026-11-03T10:02:00Z', now(), 'tool.call',
          'otel', 'execute_tool', 's1', 'alice', 'd', '{{\"status\": \"completed\", \"tool_name\": \"grep\", \"is_error\": true}}');
         INSERT INTO usage_rollups (tenant_id, bucket, user_id, device_id, colony_id, session_id, model, runtime,
             tool_calls, tool_errors, events)
         VALUES ('{tenant}', '2026-11-03T10:00:00Z', 'alice', 'd', '', 's1', '', 'otel', 2, 1, 2);
         INSERT INTO usage_rollups_hourly (tenant_id, bucket, user_id, device_id, colony_id, session_id, model,
             runtime, tool_calls, tool_errors, events)
         VALUES ('{tenant}', '2026-11-03T10:00:00Z', 'alice', 'd', '', 's1', '', 'otel', 2, 1, 2);
         INSERT INTO status_transitions (tenant_id, session_id, seq, at, from_status, to_status, cause) VALUES
         ('{tenant}', 's1', 0, '2026-11-03T10:00:00Z', NULL, 'active', 'progress'),
         ('{tenant}', 's1', 1, '2026-11-03T10:20:00Z', 'active', 'stalled', 'no_progress'),
         ('{tenant}', 's1', 2, '2026-11-03T10:35:00Z', 'stalled', 'active', 'progress');"
    ))
    .execute(&pool)
    .await
    .unwrap();
    apply(&pool, &rest[..1]).await;
    let rows: Vec<(chrono::DateTime<chrono::Utc>, i64, i64, i64)> = sqlx::query_as(
        "SELECT bucket, events, tool_duration_ms, active_ms FROM usage_rollups ORDER BY bucket",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        vec![
            (ts("2026-11-03T10:00:00Z"), 2, 1_500, 900_000),
            (ts("2026-11-03T10:15:00Z"), 0, 0, 300_000),
            (ts("2026-11-03T10:30:00Z"), 0, 0, 300_000),
        ]
    );
    let hourly: (i64, i64, i64) =
        sqlx::query_as("SELECT events, tool_duration_ms, active_ms FROM usage_rollups_hourly")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(hourly, (2, 1_500, 1_500_000));
    let tool: (String, i64, i64, i64, i64, Vec<i64>) = sqlx::query_as(
        "SELECT tool_name, calls, errors, timed_calls, duration_ms, duration_hist FROM tool_rollups",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let mut hist = vec![0i64; apiary_ingest::tool_rollups::SLOTS];
    hist[apiary_ingest::tool_rollups::slot(1_500)] = 1;
    assert_eq!(tool, ("grep".into(), 2, 1, 1, 1_500, hist));
}

/// The tenant's tool rows sum every user: a call that would take the tenant's month for its runtime past
/// the bigint range is refused (found when the database reports the overflow, then checked against the
/// stored month), while the same tool's calls that still fit, and another month's, are kept.
#[sqlx::test(migrations = "../migrations")]
async fn a_call_that_would_overflow_the_tenants_month_is_refused_and_the_rest_kept(
    pool: sqlx::PgPool,
) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let (s, v) = app
        .post_batch(
            &t.ingest,
            &batch(
                vec![timed("qa", "2026-11-03T10:01:00Z", "bash", Some(5), false)],
                vec![binding("qa", "alice")],
            ),
        )
        .await;
    assert_eq!(
        (s, v["accepted"].as_u64()),
        (StatusCode::OK, Some(1)),
        "{v}"
    );
    // As if the tenant's other users had nearly filled November's durations for bash.
    sqlx::query(
        "UPDATE tool_rollups_tenant_monthly SET duration_ms = 9223372036854775807 - 10
         WHERE tenant_id = $1",
    )
    .bind(t.id)
    .execute(&app.pool)
    .await
    .unwrap();
    let bob = |id: &str, at: &str, ms: u64| {
        batch(
            vec![timed(id, at, "bash", Some(ms), false)],
            vec![binding(id, "bob")],
        )
    };
    let (s, v) = app
        .post_batch(&t.ingest, &bob("qb", "2026-11-20T09:00:00Z", 1000))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["accepted"].as_u64(), Some(0), "{v}");
    let reason = v["rejected"][0]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("supported range"), "{v}");
    let (s, v) = app
        .post_batch(&t.ingest, &bob("qc", "2026-11-20T09:01:00Z", 7))
        .await;
    assert_eq!(
        (s, v["accepted"].as_u64()),
        (StatusCode::OK, Some(1)),
        "{v}"
    );
    let (s, v) = app
        .post_batch(&t.ingest, &bob("qd", "2026-10-02T09:00:00Z", 1000))
        .await;
    assert_eq!(
        (s, v["accepted"].as_u64()),
        (StatusCode::OK, Some(1)),
        "{v}"
    );
    let stored: Vec<(chrono::DateTime<chrono::Utc>, i64, i64)> = sqlx::query_as(
        "SELECT bucket, calls, duration_ms FROM tool_rollups_tenant_monthly WHERE tenant_id = $1
         ORDER BY bucket",
    )
    .bind(t.id)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let month = |s: &str| s.parse::<chrono::DateTime<chrono::Utc>>().unwrap();
    assert_eq!(
        stored,
        vec![
            (month("2026-10-01T00:00:00Z"), 1, 1000),
            (month("2026-11-01T00:00:00Z"), 2, i64::MAX - 3),
        ]
    );
    // Bob's own rows hold only what was kept.
    let (bob_calls, bob_ms): (i64, i64) = sqlx::query_as(
        "SELECT sum(calls)::int8, sum(duration_ms)::int8 FROM tool_rollups_monthly
         WHERE tenant_id = $1 AND user_id = 'bob'",
    )
    .bind(t.id)
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!((bob_calls, bob_ms), (2, 1007));
}
