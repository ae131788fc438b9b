//! /v1/usage in pages (`limit`, `cursor`), and the bound on a whole answer's rows.

use reqwest::StatusCode;
use serde_json::Value;

use crate::helpers::*;

/// Every page of `path` (which asks `limit`), walked by `next_cursor`: the pages' bodies.
async fn pages(app: &TestApp, token: &str, path: &str) -> Vec<Value> {
    let mut out = vec![];
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            Some(c) => format!("{path}&cursor={c}"),
            None => path.to_string(),
        };
        let (status, v) = app.get(token, &url).await;
        assert_eq!(status, StatusCode::OK, "{url}: {v}");
        assert!(
            v.get("next_cursor").is_some(),
            "a page names its next cursor: {v}"
        );
        cursor = v["next_cursor"].as_str().map(str::to_string);
        out.push(v);
        if cursor.is_none() {
            return out;
        }
        assert!(out.len() < 1000, "the pages never end");
    }
}

/// Usage of five users, two models each, on ten days (a turn a day each, at 03:00 and 15:00 UTC so that
/// New York's days cut them apart from UTC's).
async fn ten_days_of_five_users(app: &TestApp, t: &Tenant) {
    let mut events = vec![];
    let mut sessions = vec![];
    for u in 0..5 {
        let s = format!("s{u}");
        sessions.push(binding(&s, &format!("user{u}")));
        for d in 0..10 {
            let day = ts("2026-09-01T03:00:00Z") + chrono::Duration::days(d * 3);
            events.push(llm(&s, day, "m1", 100 + u as u64, d as u64 + 1, 0.01));
            events.push(llm(&s, day + chrono::Duration::hours(12), "m2", 7, 1, 0.0));
        }
    }
    let (status, v) = app.post_batch(&t.ingest, &batch(events, sessions)).await;
    assert_eq!(status, StatusCode::OK, "{v}");
}

#[sqlx::test(migrations = "../migrations")]
async fn pages_walked_by_their_cursors_are_the_whole_answer_with_its_totals(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    ten_days_of_five_users(&app, &t).await;
    // A range past two months (clamped to the data first), in UTC and in a zone whose days cut UTC's,
    // by day and by hour, grouped by one and by two dimensions, and in totals.
    for (query, limit) in [
        ("group_by=user&granularity=day", 3),
        ("group_by=user,model&granularity=day&tz=America/New_York", 4),
        ("group_by=model&granularity=hour", 1),
        ("group_by=user,model&granularity=total", 3),
        ("group_by=user&granularity=month", 100),
    ] {
        let whole_path = format!("/v1/usage?from=2026-07-01&to=2026-11-01&{query}");
        let (status, whole) = app.get(&t.read, &whole_path).await;
        assert_eq!(status, StatusCode::OK, "{whole}");
        assert!(
            whole.get("next_cursor").is_none(),
            "only pages name a cursor: {whole}"
        );
        let rows = whole["rows"].as_array().unwrap();
        assert!(rows.len() >= 5, "{query}: {whole}");
        let walked = pages(&app, &t.read, &format!("{whole_path}&limit={limit}")).await;
        assert_eq!(walked.len(), rows.len().div_ceil(limit).max(1), "{query}");
        let mut joined = vec![];
        for p in &walked {
            let page_rows = p["rows"].as_array().unwrap();
            assert!(page_rows.len() <= limit, "{query}: {p}");
            assert_eq!(
                p["totals"], whole["totals"],
                "{query}: every page has the range's totals"
            );
            assert_eq!(p["from"], whole["from"]);
            joined.extend(page_rows.iter().cloned());
        }
        assert_eq!(
            &joined, rows,
            "{query}: the pages, in order, are the whole answer"
        );
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn a_page_as_csv_carries_its_cursor_in_a_header_and_bad_cursors_are_refused(
    pool: sqlx::PgPool,
) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    ten_days_of_five_users(&app, &t).await;
    let path = "/v1/usage?from=2026-09-01&to=2026-10-01&group_by=user&granularity=day";
    let csv = |url: String| {
        app.client
            .get(format!("{}{url}", app.base))
            .bearer_auth(&t.read)
            .query(&[("format", "csv")])
            .send()
    };
    let first = csv(format!("{path}&limit=4")).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let cursor = first
        .headers()
        .get("x-next-cursor")
        .expect("a page that is not the last names the next")
        .to_str()
        .unwrap()
        .to_string();
    assert_eq!(
        first.text().await.unwrap().lines().count(),
        1 + 4,
        "a header row and four rows"
    );
    let (_, json) = app.get(&t.read, &format!("{path}&limit=4")).await;
    assert_eq!(
        json["next_cursor"],
        cursor.as_str(),
        "the same cursor as the JSON page's"
    );
    let last = csv(format!("{path}&limit=100")).await.unwrap();
    assert!(last.headers().get("x-next-cursor").is_none());

    for (url, names) in [
        (format!("{path}&cursor={cursor}"), "limit"),
        (format!("{path}&limit=4&cursor=not-a-cursor"), "cursor"),
        (format!("{path}&limit=0"), "limit"),
        (format!("{path}&limit=100001"), "limit"),
        // A cursor of another range, zone, grouping or granularity.
        (
            format!("{path}&tz=Europe/Berlin&limit=4&cursor={cursor}"),
            "cursor",
        ),
        (
            format!("/v1/usage?from=2026-09-01&to=2026-10-02&group_by=user&granularity=day&limit=4&cursor={cursor}"),
            "cursor",
        ),
        (
            format!("/v1/usage?from=2026-09-01&to=2026-10-01&group_by=model&granularity=day&limit=4&cursor={cursor}"),
            "cursor",
        ),
        (
            format!("/v1/usage?from=2026-09-01&to=2026-10-01&group_by=user,model&granularity=day&limit=4&cursor={cursor}"),
            "cursor",
        ),
        (
            format!("/v1/usage?from=2026-09-01&to=2026-10-01&group_by=user&limit=4&cursor={cursor}"),
            "cursor",
        ),
    ] {
        let (status, v) = app.get(&t.read, &url).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{url}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(names), "{url}: {message}");
    }
    // A session's usage is paged alike.
    let session = "/v1/sessions/s1/usage?from=2026-09-01&to=2026-10-01&granularity=day";
    let (_, whole) = app.get(&t.read, session).await;
    let rows = whole["session_id"]
        .as_str()
        .and(whole["rows"].as_array())
        .expect("a session's usage");
    assert!(rows.len() >= 20, "ten days of two models: {whole}");
    let walked = pages(&app, &t.read, &format!("{session}&limit=3")).await;
    let joined: Vec<Value> = walked
        .iter()
        .flat_map(|p| p["rows"].as_array().unwrap().iter().cloned())
        .collect();
    assert_eq!(&joined, rows);
    assert_eq!(walked.len(), rows.len().div_ceil(3));
}

#[sqlx::test(migrations = "../migrations")]
async fn an_answer_past_the_bound_of_rows_is_refused_whole_and_read_in_pages(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    // 100,001 sessions' usage, half in one hour and half in the next, as the batch writer leaves it in
    // the 15-minute rows (posting them would take minutes here; what is bounded is the read).
    sqlx::query(
        "INSERT INTO usage_rollups (tenant_id, bucket, user_id, device_id, colony_id, session_id, model,
             runtime, input_tokens, llm_calls, events)
         SELECT $1, '2026-09-01T10:00:00Z'::timestamptz + (i % 2) * interval '1 hour', 'u', '', '',
             's' || lpad(i::text, 6, '0'), 'm', 'hive', i, 1, 1
         FROM generate_series(1, 100001) AS i",
    )
    .bind(t.id)
    .execute(&app.pool)
    .await
    .unwrap();
    // And in the rollups these reads take whole hours (by session) and the whole day (the totals) from.
    for rollup in [
        "INSERT INTO usage_rollups_hourly (tenant_id, bucket, user_id, device_id, colony_id, session_id,
             model, runtime, input_tokens, llm_calls, events)
         SELECT tenant_id, date_bin('1 hour', bucket, '2000-01-01'), user_id, device_id, colony_id,
             session_id, model, runtime, sum(input_tokens), sum(llm_calls), sum(events)
         FROM usage_rollups WHERE tenant_id = $1 GROUP BY 1, 2, 3, 4, 5, 6, 7, 8",
        "INSERT INTO usage_rollups_colony_daily (tenant_id, bucket, colony_id, fork_session_id, model,
             runtime, input_tokens, llm_calls, events)
         SELECT tenant_id, date_bin('1 day', bucket, '2000-01-01'), '', '', model, runtime,
             sum(input_tokens), sum(llm_calls), sum(events)
         FROM usage_rollups WHERE tenant_id = $1 GROUP BY 1, 2, 5, 6",
    ] {
        sqlx::query(rollup)
            .bind(t.id)
            .execute(&app.pool)
            .await
            .unwrap();
    }
    let path = "/v1/usage?from=2026-09-01&to=2026-09-02&group_by=session&granularity=hour";
    let (status, v) = app.get(&t.read, path).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(v["error"]["code"], "too_many_rows");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("limit"),
        "{v}"
    );
    // In pages: the first holds the first hour's sessions by id, and the totals of all; the second the
    // next hour's.
    let (status, v) = app.get(&t.read, &format!("{path}&limit=50000")).await;
    assert_eq!(status, StatusCode::OK, "{}", v["error"]);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 50_000);
    assert_eq!(rows[0]["session_id"], "s000002");
    assert_eq!(rows[0]["bucket"], "2026-09-01T10:00:00+00:00");
    assert_eq!(v["totals"]["events"], 100_001);
    assert_eq!(v["totals"]["input_tokens"], 100_001_i64 * 100_002 / 2);
    let cursor = v["next_cursor"].as_str().expect("a next page").to_string();
    let (status, v) = app
        .get(&t.read, &format!("{path}&limit=50001&cursor={cursor}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{}", v["error"]);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 50_001);
    assert_eq!(rows[0]["session_id"], "s000001");
    assert_eq!(rows[0]["bucket"], "2026-09-01T11:00:00+00:00");
    assert_eq!(rows[50_000]["session_id"], "s100001");
    assert_eq!(v["next_cursor"], Value::Null);
    // One bucket past the bound cannot be cut by buckets: refused, saying to ask finer.
    let (status, v) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-09-01&to=2026-09-02&group_by=session&granularity=day&limit=10",
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("finer"),
        "{v}"
    );
    // Ungrouped it is one row.
    let (status, v) = app
        .get(&t.read, "/v1/usage?from=2026-09-01&to=2026-09-02")
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(v["rows"].as_array().unwrap().len(), 1);
    assert_eq!(v["totals"]["events"], 100_001);
}
