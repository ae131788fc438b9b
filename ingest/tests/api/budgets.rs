//! Budgets: exact thresholds, crossings once per period, spend equal to a raw scan under concurrent
//! replays through two replicas, the quota in a batch answer, bad input, and changes: `PUT` replaces a
//! budget whole (its scope required), `PATCH` changes only the fields sent.

use std::time::Duration;

use chrono::{DateTime, Datelike, TimeZone, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

/// The middle of the current UTC month so far (events there fall in this month's budget period).
fn this_month() -> DateTime<Utc> {
    let now = Utc::now();
    let start = Utc
        .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
        .unwrap();
    start + (now - start) / 2
}

async fn budget(app: &TestApp, token: &str, id: &str) -> Value {
    let (status, b) = app.get(token, &format!("/v1/budgets/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{b}");
    b
}

fn turn(session: &str, at: DateTime<Utc>, model: &str, nanos: i64) -> Value {
    llm(session, at, model, 10, 5, nanos as f64 / 1e9)
}

#[sqlx::test(migrations = "../migrations")]
async fn thresholds_are_crossed_at_exact_amounts_and_once_per_period(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let admin = app.token(t.id, &["admin"]).await;
    let (status, b) = app
        .post_json(
            &admin,
            "/v1/budgets",
            json!({"name": "team", "scope": {"tenant": true}, "period": "month", "limit_usd": "1.00"}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{b}");
    let id = b["budget_id"].as_str().unwrap().to_string();
    assert_eq!(b["thresholds"], json!([50, 80, 100]));
    assert_eq!(
        (b["spent"].as_i64(), b["percent"].as_f64()),
        (Some(0), Some(0.0))
    );

    let at = this_month();
    let bind = vec![binding("s1", "u1")];
    // 0.5 USD: 50% exactly.
    let first = batch(vec![turn("s1", at, "m1", 500_000_000)], bind.clone());
    assert_eq!(app.post_batch(&t.ingest, &first).await.0, StatusCode::OK);
    let b = budget(&app, &t.read, &id).await;
    assert_eq!(b["spent"], 500_000_000);
    assert_eq!(b["percent"], 50.0);
    let crossed: Vec<i64> = b["crossed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["threshold"].as_i64().unwrap())
        .collect();
    assert_eq!(crossed, [50]);
    // One nano-dollar short of 80%: not crossed.
    let second = batch(vec![turn("s1", at, "m1", 299_999_999)], bind.clone());
    app.post_batch(&t.ingest, &second).await;
    let b = budget(&app, &t.read, &id).await;
    assert_eq!(b["spent"], 799_999_999);
    assert_eq!(b["crossed"].as_array().unwrap().len(), 1, "{b}");
    // The last nano-dollar crosses it.
    let third = batch(vec![turn("s1", at, "m1", 1)], bind.clone());
    app.post_batch(&t.ingest, &third).await;
    // Replays count nothing and cross nothing again.
    for b in [&first, &second, &third] {
        app.post_batch(&t.ingest, b).await;
    }
    let b = budget(&app, &t.read, &id).await;
    assert_eq!(b["spent"], 800_000_000);
    assert_eq!(b["remaining"], 200_000_000);
    assert_eq!(b["spent_usd"], 0.8);
    let crossed: Vec<i64> = b["crossed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["threshold"].as_i64().unwrap())
        .collect();
    assert_eq!(crossed, [50, 80]);
    let rows: i64 =
        sqlx::query_scalar("SELECT count(*) FROM budget_crossings WHERE budget_id = $1")
            .bind(&id)
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(rows, 2);
    // The spend is the usage API's cost for the same range.
    let q = format!(
        "/v1/usage?from={}&to={}",
        b["period_start"].as_str().unwrap(),
        b["period_end"].as_str().unwrap()
    )
    .replace('+', "%2B");
    let (_, usage) = app.get(&t.read, &q).await;
    assert_eq!(usage["totals"]["cost_nanos"], b["spent"], "{usage}");
    // The forecast carries the rate so far to the period's end: at least the spend.
    assert!(b["forecast"].as_i64().unwrap() >= 800_000_000, "{b}");
}

#[sqlx::test(migrations = "../migrations")]
async fn crossings_are_recorded_in_the_background_without_a_read(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let admin = app.token(t.id, &["admin"]).await;
    let (_, b) = app
        .post_json(
            &admin,
            "/v1/budgets",
            json!({"period": "day", "limit_tokens": 100, "thresholds": [100]}),
        )
        .await;
    let id = b["budget_id"].as_str().unwrap().to_string();
    // 150 tokens today (10 + 5 per turn).
    let turns = (0..10)
        .map(|i| turn("s1", Utc::now() - chrono::Duration::seconds(i), "m1", 1))
        .collect();
    app.post_batch(&t.ingest, &batch(turns, vec![binding("s1", "u1")]))
        .await;
    let mut rows = 0i64;
    for _ in 0..50 {
        rows = sqlx::query_scalar(
            "SELECT count(*) FROM budget_crossings WHERE budget_id = $1 AND threshold_percent = 100 AND spent = 150",
        )
        .bind(&id)
        .fetch_one(&app.pool)
        .await
        .unwrap();
        if rows == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        rows, 1,
        "the evaluator did not record the crossing within 5 s"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn spend_equals_a_raw_scan_under_concurrent_replays_through_two_replicas(pool: sqlx::PgPool) {
    let a = spawn_app(pool.clone()).await;
    let b_app = spawn_app(pool).await;
    let t = a.tenant("acme").await;
    let admin = a.token(t.id, &["admin"]).await;
    let kolkata = "Asia/Kolkata";
    let mut ids = vec![];
    for body in [
        json!({"period": "month", "tz": kolkata, "limit_usd": 0.05}),
        json!({"period": "month", "tz": kolkata, "limit_tokens": 20000, "scope": {"user": "u1"}}),
        json!({"period": "week", "tz": "America/New_York", "limit_usd": "0.02", "scope": {"model": "claude-haiku-4-5"}}),
        json!({"period": "day", "tz": "Pacific/Chatham", "limit_tokens": 5000, "scope": {"user": "u2", "model": "m1"}, "thresholds": [10, 20, 40, 80]}),
    ] {
        let (status, b) = a.post_json(&admin, "/v1/budgets", body).await;
        assert_eq!(status, StatusCode::CREATED, "{b}");
        ids.push(b["budget_id"].as_str().unwrap().to_string());
    }
    // Turns in the last hour (inside every period but at the very start of one; then fewer count).
    let mut rng = StdRng::seed_from_u64(17);
    let now = Utc::now();
    let mut batches: Vec<Value> = (0..24)
        .map(|i| {
            let events = (0..20)
                .map(|_| {
                    let user = ["u1", "u2", "u3"][rng.gen_range(0..3)];
                    let at = now - chrono::Duration::seconds(rng.gen_range(0..3600));
                    let model = ["m1", "claude-haiku-4-5", "gpt-5-mini"][rng.gen_range(0..3)];
                    let cost = if rng.gen_bool(0.3) {
                        0.0
                    } else {
                        rng.gen_range(1..100_000) as f64 / 1e9
                    };
                    llm(
                        &format!("s-{user}"),
                        at,
                        model,
                        rng.gen_range(0..500),
                        rng.gen_range(0..100),
                        cost,
                    )
                })
                .collect();
            let _ = i;
            batch(
                events,
                vec![
                    binding("s-u1", "u1"),
                    binding("s-u2", "u2"),
                    binding("s-u3", "u3"),
                ],
            )
        })
        .collect();
    // Turns in the half hour the zone's month starts with (18:30 UTC: quarter rows, not a whole UTC
    // hour) and in the hour after it, unless the month began less than an hour ago.
    let (_, list) = a.get(&admin, &format!("/v1/budgets/{}", ids[0])).await;
    let start: DateTime<Utc> = list["period_start"].as_str().unwrap().parse().unwrap();
    if start + chrono::Duration::minutes(70) < now {
        let edge = [10, 25, 35, 65]
            .iter()
            .map(|m| {
                let at = start + chrono::Duration::minutes(*m);
                llm("s-u1", at, "m1", 300, 40, 0.00002)
            })
            .collect();
        batches.push(batch(edge, vec![binding("s-u1", "u1")]));
    }
    // Every batch twice, through both replicas, concurrently.
    let mut tasks = vec![];
    for (i, b) in batches.iter().enumerate() {
        for app in [&a, &b_app] {
            let (client, base, token, body) = (
                app.client.clone(),
                app.base.clone(),
                t.ingest.clone(),
                gzip(&serde_json::to_vec(b).unwrap()),
            );
            tasks.push(tokio::spawn(async move {
                let resp = client
                    .post(format!("{base}/v1/batches"))
                    .bearer_auth(token)
                    .header("content-type", "application/json")
                    .header("content-encoding", "gzip")
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                assert_eq!(resp.status(), 200, "batch {i}");
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (_, list) = a.get(&admin, "/v1/budgets").await;
    let list = list["budgets"].as_array().unwrap().clone();
    assert_eq!(list.len(), 4);
    let reported = "round((data->>'cost_usd')::numeric * 1000000000)";
    let cost = format!(
        "CASE WHEN data->>'cost_source' = 'unreported' AND cost_estimated_nanos IS NOT NULL
              THEN cost_estimated_nanos ELSE {reported} END"
    );
    let tokens = "(data->>'input_tokens')::int8 + (data->>'output_tokens')::int8";
    let mut crossed_somewhere = 0;
    for b in &list {
        let unit = b["unit"].as_str().unwrap();
        let sql = format!(
            "SELECT COALESCE(sum({}), 0)::int8 FROM events e
             WHERE e.tenant_id = $1 AND e.kind = 'llm.turn'
               AND e.effective_at >= $2::timestamptz AND e.effective_at < $3::timestamptz
               AND ($4::text IS NULL OR e.user_id = $4) AND ($5::text IS NULL OR e.data->>'model' = $5)",
            if unit == "usd" { cost.as_str() } else { tokens }
        );
        let raw: i64 = sqlx::query_scalar(&sql)
            .bind(t.id)
            .bind(b["period_start"].as_str().unwrap())
            .bind(b["period_end"].as_str().unwrap())
            .bind(b["scope"]["user"].as_str())
            .bind(b["scope"]["model"].as_str())
            .fetch_one(&a.pool)
            .await
            .unwrap();
        assert_eq!(b["spent"].as_i64().unwrap(), raw, "{b}");
        assert!(raw > 0, "{b}");
        // Every threshold the spend reached is crossed, once; no other.
        let limit = b["limit"].as_i64().unwrap() as i128;
        let want: Vec<i64> = b["thresholds"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_i64().unwrap())
            .filter(|t| i128::from(raw) * 100 >= i128::from(*t) * limit)
            .collect();
        let got: Vec<i64> = b["crossed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["threshold"].as_i64().unwrap())
            .collect();
        assert_eq!(got, want, "{b}");
        crossed_somewhere += got.len();
    }
    assert!(crossed_somewhere > 0, "the limits are set to be crossed");
    let dup: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT budget_id, period_start, threshold_percent FROM budget_crossings
         GROUP BY 1, 2, 3 HAVING count(*) > 1) d",
    )
    .fetch_one(&a.pool)
    .await
    .unwrap();
    assert_eq!(dup, 0);
    let _ = ids;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_batch_answer_carries_the_quota_of_the_tokens_user_on_request(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant_bound("acme", Some("u1"), None).await;
    let admin = app.token(t.id, &["admin"]).await;
    for body in [
        json!({"name": "everyone", "period": "month", "limit_usd": "10"}),
        json!({"name": "mine", "period": "day", "limit_usd": "1", "scope": {"user": "u1"}}),
        json!({"name": "theirs", "period": "day", "limit_usd": "1", "scope": {"user": "u2"}}),
    ] {
        assert_eq!(
            app.post_json(&admin, "/v1/budgets", body).await.0,
            StatusCode::CREATED
        );
    }
    let body = batch(
        vec![turn("s1", Utc::now(), "m1", 250_000_000)],
        vec![binding("s1", "u1")],
    );
    let post = |quota: bool| {
        let mut req = app
            .client
            .post(format!("{}/v1/batches", app.base))
            .bearer_auth(&t.ingest)
            .json(&body);
        if quota {
            req = req.header("X-Apiary-Quota", "1");
        }
        req.send()
    };
    let plain: Value = post(false).await.unwrap().json().await.unwrap();
    assert!(plain.get("quota").is_none(), "{plain}");
    let answer: Value = post(true).await.unwrap().json().await.unwrap();
    let quota = &answer["quota"];
    let mut names: Vec<&str> = quota["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["everyone", "mine"], "{answer}");
    let mine = quota["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["name"] == "mine")
        .unwrap();
    assert_eq!(mine["spent"], 250_000_000);
    assert_eq!(mine["percent"], 25.0);
    assert_eq!(mine["unit"], "usd");
    // The agent's type reads it.
    let typed: apiary_schema::BatchResponse = serde_json::from_value(answer.clone()).unwrap();
    assert_eq!(typed.quota.unwrap().budgets.len(), 2);
}

#[sqlx::test(migrations = "../migrations")]
async fn bad_budgets_are_refused_and_budgets_stay_within_their_tenant(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let other = app.tenant("globex").await;
    let admin = app.token(t.id, &["admin"]).await;
    let other_admin = app.token(other.id, &["admin"]).await;
    for (body, needle) in [
        (json!({"period": "month"}), "exactly one"),
        (
            json!({"period": "month", "limit_usd": "1", "limit_tokens": 5}),
            "exactly one",
        ),
        (json!({"period": "year", "limit_usd": "1"}), "period"),
        (
            json!({"period": "day", "tz": "Mars/Olympus", "limit_usd": "1"}),
            "tz",
        ),
        (json!({"period": "day", "limit_usd": "-1"}), "limit_usd"),
        (json!({"period": "day", "limit_usd": "0"}), "above zero"),
        (
            json!({"period": "day", "limit_usd": "1.0000000001"}),
            "limit_usd",
        ),
        (
            json!({"period": "day", "limit_usd": "1", "thresholds": [0]}),
            "thresholds",
        ),
        (
            json!({"period": "day", "limit_usd": "1", "thresholds": []}),
            "thresholds",
        ),
        (
            json!({"period": "day", "limit_usd": "1", "scope": {"colony": "x"}}),
            "colony",
        ),
        (
            json!({"period": "day", "limit_usd": "1", "scope": {"tenant": other.id.to_string()}}),
            "tenant",
        ),
        (
            json!({"period": "day", "limit_usd": "1", "colour": "red"}),
            "colour",
        ),
    ] {
        let (status, err) = app.post_json(&admin, "/v1/budgets", body.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {err}");
        assert_eq!(err["error"]["code"], "invalid_budget", "{err}");
        let message = err["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{body}: {message}");
    }
    assert_eq!(app.count("budgets").await, 0);
    // Writes need admin.
    let (status, _) = app
        .post_json(
            &t.read,
            "/v1/budgets",
            json!({"period": "day", "limit_usd": "1"}),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, b) = app
        .post_json(
            &admin,
            "/v1/budgets",
            json!({"period": "day", "limit_usd": "1", "scope": {"user": "u1"}}),
        )
        .await;
    let id = b["budget_id"].as_str().unwrap();
    let (_, tenant_wide) = app
        .post_json(
            &admin,
            "/v1/budgets",
            json!({"period": "day", "limit_usd": "5"}),
        )
        .await;
    // Another tenant sees nothing of it.
    let path = format!("/v1/budgets/{id}");
    assert_eq!(app.get(&other.read, &path).await.0, StatusCode::NOT_FOUND);
    let put = json!({"period": "week", "limit_usd": "2", "scope": {}});
    let (status, _) = app
        .send(reqwest::Method::PUT, &other_admin, &path, Some(put.clone()))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = app
        .send(reqwest::Method::DELETE, &other_admin, &path, None)
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (_, list) = app.get(&other.read, "/v1/budgets").await;
    assert_eq!(list["budgets"], json!([]));
    // A read token bound to a user sees the budgets scoped to that user only.
    let u1 = app.tenant_token_for_user(t.id, "u1").await;
    let u2 = app.tenant_token_for_user(t.id, "u2").await;
    let (_, list) = app.get(&u1, "/v1/budgets").await;
    assert_eq!(list["budgets"].as_array().unwrap().len(), 1);
    assert_eq!(list["budgets"][0]["budget_id"], id);
    assert_eq!(app.get(&u2, &path).await.0, StatusCode::NOT_FOUND);
    let (_, list) = app.get(&u2, "/v1/budgets").await;
    assert_eq!(list["budgets"], json!([]));
    let _ = tenant_wide;
    // The owner replaces and deletes it.
    let (status, b) = app
        .send(reqwest::Method::PUT, &admin, &path, Some(put))
        .await;
    assert_eq!(status, StatusCode::OK, "{b}");
    assert_eq!(
        (b["period"].as_str(), b["limit"].as_i64()),
        (Some("week"), Some(2_000_000_000))
    );
    assert_eq!(b["scope"], json!({}));
    let (status, _) = app.send(reqwest::Method::DELETE, &admin, &path, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(app.get(&t.read, &path).await.0, StatusCode::NOT_FOUND);
}

/// A user's budget with every field set, as stored.
async fn full_budget(app: &TestApp, admin: &str) -> Value {
    let (status, b) = app
        .post_json(
            admin,
            "/v1/budgets",
            json!({"name": "alice's month", "scope": {"user": "alice", "model": "m1"}, "period": "month",
                   "tz": "Asia/Kolkata", "limit_usd": "120.5", "thresholds": [25, 90]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{b}");
    b
}

/// The definition of a budget answer (what a change may touch), without its period's numbers.
fn definition(b: &Value) -> Value {
    json!({"name": b["name"], "scope": b["scope"], "period": b["period"], "tz": b["tz"],
           "unit": b["unit"], "limit": b["limit"], "thresholds": b["thresholds"]})
}

#[sqlx::test(migrations = "../migrations")]
async fn put_without_a_scope_is_refused_and_changes_nothing(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let admin = app.token(t.id, &["admin"]).await;
    let b = full_budget(&app, &admin).await;
    let path = format!("/v1/budgets/{}", b["budget_id"].as_str().unwrap());
    // The body of a partial change, sent with PUT, would make it the whole tenant's budget.
    let (status, err) = app
        .send(
            reqwest::Method::PUT,
            &admin,
            &path,
            Some(json!({"period": "month", "limit_usd": "150"})),
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{err}");
    assert_eq!(err["error"]["code"], "missing_scope", "{err}");
    let message = err["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("scope") && message.contains("PATCH"),
        "{message}"
    );
    let (_, now) = app.get(&admin, &path).await;
    assert_eq!(definition(&now), definition(&b));
    // With the scope, PUT replaces the whole budget (what it leaves out takes POST's defaults).
    let (status, put) = app
        .send(
            reqwest::Method::PUT,
            &admin,
            &path,
            Some(json!({"scope": {"user": "alice"}, "period": "week", "limit_tokens": 5000})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{put}");
    assert_eq!(
        definition(&put),
        json!({"name": null, "scope": {"user": "alice"}, "period": "week", "tz": "UTC",
               "unit": "tokens", "limit": 5000, "thresholds": [50, 80, 100]})
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn patch_changes_only_the_fields_it_sends(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let admin = app.token(t.id, &["admin"]).await;
    let b = full_budget(&app, &admin).await;
    let path = format!("/v1/budgets/{}", b["budget_id"].as_str().unwrap());
    let patch = |body: Value| app.send(reqwest::Method::PATCH, &admin, &path, Some(body));
    let mut want = definition(&b);
    for (body, changes) in [
        // The README's body: the limit changes, the scope, name and zone stay.
        (
            json!({"period": "month", "limit_usd": "150"}),
            json!({"limit": 150_000_000_000i64}),
        ),
        (
            json!({"tz": "Europe/Berlin"}),
            json!({"tz": "Europe/Berlin"}),
        ),
        (json!({"name": "renamed"}), json!({"name": "renamed"})),
        (
            json!({"thresholds": [100, 50]}),
            json!({"thresholds": [50, 100]}),
        ),
        (
            json!({"scope": {"colony": "ck_0123456789abcdef0123456789abcdef"}}),
            json!({"scope": {"colony": "ck_0123456789abcdef0123456789abcdef"}}),
        ),
        // The limit's unit goes with it.
        (
            json!({"limit_tokens": 7000, "period": "day"}),
            json!({"unit": "tokens", "limit": 7000, "period": "day"}),
        ),
        // null: what POST gives a field left out.
        (
            json!({"name": null, "tz": null, "thresholds": null, "scope": null}),
            json!({"name": null, "tz": "UTC", "thresholds": [50, 80, 100], "scope": {}}),
        ),
        (json!({}), json!({})),
    ] {
        let (status, got) = patch(body.clone()).await;
        assert_eq!(status, StatusCode::OK, "{body}: {got}");
        for (k, v) in changes.as_object().unwrap() {
            want[k] = v.clone();
        }
        assert_eq!(definition(&got), want, "after {body}");
        let (_, stored) = app.get(&admin, &path).await;
        assert_eq!(definition(&stored), want, "stored after {body}");
        assert_eq!(stored["created_at"], b["created_at"]);
    }
    // Refused patches change nothing.
    for (body, code, needle) in [
        (json!({"period": "year"}), 400, "period"),
        (json!({"period": null}), 400, "period"),
        (json!({"limit_usd": null}), 400, "limit"),
        (
            json!({"limit_usd": "1", "limit_tokens": 1}),
            400,
            "at most one",
        ),
        (json!({"thresholds": [0]}), 400, "thresholds"),
        (json!({"colour": "red"}), 400, "colour"),
        (json!(["period"]), 400, "patch"),
    ] {
        let (status, err) = patch(body.clone()).await;
        assert_eq!(status.as_u16(), code, "{body}: {err}");
        assert_eq!(err["error"]["code"], "invalid_budget", "{err}");
        let message = err["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{body}: {message}");
    }
    let (_, stored) = app.get(&admin, &path).await;
    assert_eq!(definition(&stored), want);
    // Like the other writes: admin only, within the tenant.
    let (status, _) = app
        .send(
            reqwest::Method::PATCH,
            &t.read,
            &path,
            Some(json!({"name": "x"})),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let other = app.tenant("globex").await;
    let other_admin = app.token(other.id, &["admin"]).await;
    let (status, _) = app
        .send(
            reqwest::Method::PATCH,
            &other_admin,
            &path,
            Some(json!({"name": "x"})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = patch(json!({"name": "x"})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = app
        .send(
            reqwest::Method::PATCH,
            &admin,
            "/v1/budgets/bu_nope",
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[sqlx::test(migrations = "../migrations")]
async fn concurrent_patches_of_different_fields_all_land(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let admin = app.token(t.id, &["admin"]).await;
    let b = full_budget(&app, &admin).await;
    let path = format!("/v1/budgets/{}", b["budget_id"].as_str().unwrap());
    for round in 0..5 {
        let tz = ["Europe/Berlin", "Asia/Tokyo"][round % 2];
        let period = ["day", "week"][round % 2];
        let bodies = [
            json!({"name": format!("name {round}")}),
            json!({ "tz": tz }),
            json!({"limit_usd": format!("{}", 100 + round)}),
            json!({"thresholds": [10 + round as u32, 90]}),
            json!({ "period": period }),
        ];
        let answers = futures::future::join_all(
            bodies
                .iter()
                .map(|body| app.send(reqwest::Method::PATCH, &admin, &path, Some(body.clone()))),
        )
        .await;
        for (status, body) in &answers {
            assert_eq!(*status, StatusCode::OK, "{body}");
        }
        let (_, stored) = app.get(&admin, &path).await;
        assert_eq!(
            definition(&stored),
            json!({"name": format!("name {round}"), "scope": {"user": "alice", "model": "m1"},
                   "period": period, "tz": tz,
                   "unit": "usd", "limit": (100 + round as i64) * 1_000_000_000,
                   "thresholds": [10 + round as u32, 90]}),
            "round {round}: a patch was lost"
        );
    }
}
