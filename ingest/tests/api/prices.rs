//! Prices: tenant entries through the API (admin scope, validated, effective-dated), and what they do
//! to the cost of the turns stored after them — tenant entries over the shipped catalog, a price change
//! in the middle of a month splitting it, provenance per row.

use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

async fn post_price(app: &TestApp, token: &str, body: &str) -> (StatusCode, Value) {
    let r = app
        .client
        .post(format!("{}/v1/prices", app.base))
        .bearer_auth(token)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// An unreported turn (cost 0 with tokens) of `model`: `input` tokens of which `cached` cache reads.
fn unreported(session: &str, at: &str, model: &str, input: u64, cached: u64, output: u64) -> Value {
    event(
        "llm.turn",
        Some(session),
        ts(at),
        json!({"model": model, "input_tokens": input, "output_tokens": output, "cached_tokens": cached,
               "cache_creation_tokens": 0, "cost_usd": 0.0, "cost_source": "unreported"}),
    )
}

fn tenant_entries(list: &Value) -> Vec<&Value> {
    list["prices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["owner"] == "tenant")
        .collect()
}

#[sqlx::test(migrations = "../migrations")]
async fn bad_price_entries_are_refused_with_the_field_named_and_nothing_is_stored(
    pool: sqlx::PgPool,
) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let admin = app.token(t.id, &["admin"]).await;
    let good = r#"{"models":["m*"],"from":"2026-01-01","input":"1.00","output":"2.00"}"#;
    let (s, v) = post_price(&app, &t.read, good).await;
    assert_eq!(
        s,
        StatusCode::FORBIDDEN,
        "a read token may not set prices: {v}"
    );
    let (s, _) = post_price(&app, &t.ingest, good).await;
    assert_eq!(s, StatusCode::FORBIDDEN);
    let cases = [
        ("{", "the body is not a price entry"),
        (
            r#"{"models":["m"],"from":"2026-01-01","input":3.0,"output":"2"}"#,
            "the body is not",
        ),
        (
            r#"{"models":["m"],"from":"2026-01-01","input":"1","output":"2","cache_reed":"1"}"#,
            "cache_reed",
        ),
        (
            r#"{"models":[],"from":"2026-01-01","input":"1","output":"2"}"#,
            "models:",
        ),
        (
            r#"{"models":["*"],"from":"2026-01-01","input":"1","output":"2"}"#,
            "models:",
        ),
        (
            r#"{"models":["m"],"from":"soon","input":"1","output":"2"}"#,
            "from:",
        ),
        (
            r#"{"models":["m"],"from":"2026-01-01","until":"2025-01-01","input":"1","output":"2"}"#,
            "until:",
        ),
        (
            r#"{"models":["m"],"from":"2026-01-01","input":"3,00","output":"2"}"#,
            "input:",
        ),
        (
            r#"{"models":["m"],"from":"2026-01-01","input":"1","output":"-2"}"#,
            "output:",
        ),
        (
            r#"{"models":["m"],"from":"2026-01-01","input":"1","output":"2","cache_read":"0.0000000001"}"#,
            "cache_read:",
        ),
        (
            r#"{"models":["m"],"from":"2026-01-01","input":"1","output":"2","tiers":[{"above_input_tokens":5,"input":"x","output":"1"}]}"#,
            "tiers[0].input:",
        ),
        (
            r#"{"id":"mine","models":["m"],"from":"2026-01-01","input":"1","output":"2"}"#,
            "id",
        ),
    ];
    for (body, names) in cases {
        let (s, v) = post_price(&app, &admin, body).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{body}: {v}");
        assert_eq!(v["error"]["code"], "invalid_price", "{body}: {v}");
        let message = v["error"]["message"].as_str().unwrap();
        assert!(message.contains(names), "{body}: {message}");
    }
    let (s, list) = app.get(&t.read, "/v1/prices").await;
    assert_eq!(s, StatusCode::OK);
    assert!(tenant_entries(&list).is_empty(), "{list}");
    assert_eq!(app.count("tenant_prices").await, 0);
}

/// Every batch with an LLM turn reads its tenant's entries, so a tenant keeps at most 1,000: one more is a
/// 400 naming the limit and stores nothing; another tenant is not affected.
#[sqlx::test(migrations = "../migrations")]
async fn a_tenant_keeps_at_most_a_thousand_price_entries(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let other = app.tenant("globex").await;
    let admin = app.token(t.id, &["admin"]).await;
    let other_admin = app.token(other.id, &["admin"]).await;
    let good = r#"{"models":["m*"],"from":"2026-01-01","input":"1.00","output":"2.00"}"#;
    let (s, first) = post_price(&app, &admin, good).await;
    assert_eq!(s, StatusCode::OK, "{first}");
    // The other 999 straight into the table (as the API stores them), then one more through the API.
    sqlx::query(
        "INSERT INTO tenant_prices (tenant_id, price_id, spec)
         SELECT tenant_id, price_id || '_' || n, spec FROM tenant_prices, generate_series(1, 999) n",
    )
    .execute(&app.pool)
    .await
    .unwrap();
    assert_eq!(app.count("tenant_prices").await, 1000);
    let (s, v) = post_price(&app, &admin, good).await;
    assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
    assert_eq!(v["error"]["code"], "invalid_price", "{v}");
    assert!(
        v["error"]["message"].as_str().unwrap().contains("1000"),
        "{v}"
    );
    assert_eq!(app.count("tenant_prices").await, 1000);
    let (s, v) = post_price(&app, &other_admin, good).await;
    assert_eq!(s, StatusCode::OK, "another tenant's limit is its own: {v}");
}

#[sqlx::test(migrations = "../migrations")]
async fn a_tenant_price_is_listed_and_wins_over_the_shipped_catalog(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let other = app.tenant("other").await;
    let admin = app.token(t.id, &["admin"]).await;
    // A negotiated Haiku price from November on, and a private model.
    let (s, haiku) = post_price(
        &app,
        &admin,
        r#"{"models":["claude-haiku-4-5*"],"from":"2026-11-01","input":"0.50","output":"2.50",
            "cache_read":"0.05","source":"contract 2026-A","note":"negotiated"}"#,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{haiku}");
    assert!(haiku["price_id"].as_str().unwrap().starts_with("tp_"));
    assert_eq!(
        (
            haiku["from"].as_str(),
            haiku["input"].as_str(),
            haiku["owner"].as_str()
        ),
        (Some("2026-11-01T00:00:00Z"), Some("0.50"), Some("tenant"))
    );
    let (s, _) = post_price(
        &app,
        &admin,
        r#"{"models":["Acme-LLM*"],"from":"2026-01-01","input":"2","output":"8",
            "tiers":[{"above_input_tokens":100000,"input":"4","output":"16"}]}"#,
    )
    .await;
    assert_eq!(s, StatusCode::OK);

    let (s, list) = app.get(&t.read, "/v1/prices").await;
    assert_eq!(s, StatusCode::OK, "{list}");
    let mine = tenant_entries(&list);
    assert_eq!(mine.len(), 2, "{list}");
    assert_eq!(
        mine[0]["from"], "2026-11-01T00:00:00Z",
        "newest start first"
    );
    assert_eq!(mine[0]["note"], "negotiated");
    assert_eq!(mine[1]["models"], json!(["acme-llm*"]));
    assert_eq!(mine[1]["tiers"][0]["input"], "4.00");
    let shipped = list["prices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["price_id"] == "anthropic/claude-haiku-4-5")
        .expect("the shipped catalog is listed");
    assert_eq!(shipped["owner"], "shipped");
    assert!(shipped["source"].as_str().unwrap().starts_with("https://"));
    let (_, theirs) = app.get(&other.read, "/v1/prices").await;
    assert!(
        tenant_entries(&theirs).is_empty(),
        "another tenant's prices are not seen"
    );

    // October: the shipped Haiku price; November: the tenant's. The private model: its tier above 100k.
    let turns = vec![
        unreported(
            "s1",
            "2026-10-20T10:00:00Z",
            "claude-haiku-4-5",
            1_000_000,
            500_000,
            0,
        ),
        unreported(
            "s1",
            "2026-11-20T10:00:00Z",
            "claude-haiku-4-5",
            1_000_000,
            500_000,
            0,
        ),
        unreported("s1", "2026-11-20T10:05:00Z", "acme-llm-2", 100_000, 0, 1000),
        unreported("s1", "2026-11-20T10:10:00Z", "acme-llm-2", 100_001, 0, 1000),
        unreported("s1", "2026-11-20T10:15:00Z", "unknown-model", 10, 0, 1),
        llm(
            "s1",
            ts("2026-11-20T10:20:00Z"),
            "claude-haiku-4-5",
            10,
            1,
            0.25,
        ),
    ];
    let (s, v) = app
        .post_batch(&t.ingest, &batch(turns, vec![binding("s1", "u1")]))
        .await;
    assert_eq!((s, &v["accepted"]), (StatusCode::OK, &json!(6)), "{v}");
    let (_, usage) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-10-01&to=2026-12-01&group_by=model&granularity=month",
        )
        .await;
    let row = |month: &str, model: &str| -> Value {
        usage["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["bucket"].as_str().unwrap().starts_with(month) && r["model"] == model)
            .unwrap_or_else(|| panic!("{month} {model}: {usage}"))
            .clone()
    };
    // 500k uncached × 1.00 + 500k cached × 0.10 (shipped) = 0.55 USD.
    let oct = row("2026-10", "claude-haiku-4-5");
    assert_eq!(oct["cost_nanos"], 550_000_000, "{oct}");
    assert_eq!(
        (oct["cost_basis"].as_str(), oct["estimated_turns"].as_i64()),
        (Some("estimated"), Some(1))
    );
    // 500k × 0.50 + 500k × 0.05 (tenant) = 0.275 USD; and the reported turn's 0.25 USD beside it.
    let nov = row("2026-11", "claude-haiku-4-5");
    assert_eq!(nov["cost_nanos"], 275_000_000 + 250_000_000, "{nov}");
    assert_eq!(nov["cost_reported_nanos"], 250_000_000);
    // The reported turn is estimated too: 5 uncached × 500 + 5 cached × 50 + 1 output × 2500 nano-USD.
    assert_eq!(nov["cost_estimated_nanos"], 275_000_000 + 5_250);
    assert_eq!(nov["cost_basis"], "mixed");
    assert_eq!(
        (nov["llm_calls"].as_i64(), nov["unpriced_turns"].as_i64()),
        (Some(2), Some(0))
    );
    // 100k at 2 + 1000 at 8; then 100,001 at 4 + 1000 at 16.
    let acme = row("2026-11", "acme-llm-2");
    assert_eq!(
        acme["cost_nanos"],
        200_000_000 + 8_000_000 + 400_004_000 + 16_000_000
    );
    let unknown = row("2026-11", "unknown-model");
    assert_eq!(
        (
            unknown["cost_nanos"].as_i64(),
            unknown["unpriced_turns"].as_i64(),
            unknown["cost_basis"].as_str()
        ),
        (Some(0), Some(1), Some("none"))
    );
    assert_eq!(usage["totals"]["cost_basis"], "mixed");
    assert_eq!(
        usage["totals"]["cost_nanos"], 1_699_004_000i64,
        "{}",
        usage["totals"]
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn a_price_change_in_the_middle_of_a_month_splits_the_month(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let admin = app.token(t.id, &["admin"]).await;
    for body in [
        r#"{"models":["m"],"from":"2026-10-01","until":"2026-10-15T12:00:00Z","input":"1","output":"0"}"#,
        r#"{"models":["m"],"from":"2026-10-15T12:00:00Z","input":"3","output":"0"}"#,
    ] {
        let (s, v) = post_price(&app, &admin, body).await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }
    // One million uncached input tokens a day, every day of October (the turn at 11:59:59 on the 15th
    // is the last at the old price; noon starts the new one).
    let mut turns = vec![];
    for day in 1..=31 {
        turns.push(unreported(
            "s1",
            &format!("2026-10-{day:02}T11:59:59Z"),
            "m",
            1_000_000,
            0,
            0,
        ));
    }
    turns.push(unreported(
        "s1",
        "2026-10-15T12:00:00Z",
        "m",
        1_000_000,
        0,
        0,
    ));
    let (s, v) = app
        .post_batch(&t.ingest, &batch(turns, vec![binding("s1", "u1")]))
        .await;
    assert_eq!((s, &v["accepted"]), (StatusCode::OK, &json!(32)), "{v}");
    let (_, month) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-10-01&to=2026-11-01&granularity=month",
        )
        .await;
    // 15 turns at 1 USD, 17 at 3 USD.
    assert_eq!(
        month["totals"]["cost_nanos"],
        (15 + 17 * 3) * 1_000_000_000i64,
        "{month}"
    );
    assert_eq!(month["totals"]["estimated_turns"], 32);
    let (_, days) = app
        .get(
            &t.read,
            "/v1/usage?from=2026-10-14&to=2026-10-17&granularity=day",
        )
        .await;
    let costs: Vec<i64> = days["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["llm_calls"] != 0)
        .map(|r| r["cost_nanos"].as_i64().unwrap())
        .collect();
    assert_eq!(
        costs,
        vec![1_000_000_000, 4_000_000_000, 3_000_000_000],
        "{days}"
    );
}

async fn reprice(app: &TestApp, token: &str, query: &str) -> (StatusCode, Value) {
    let r = app
        .client
        .post(format!("{}/v1/prices/reprice?{query}", app.base))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let status = r.status();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Per UTC day and model: (cost_nanos, cost_reported_nanos, cost_estimated_nanos, estimated_turns,
/// unpriced_turns, llm_calls).
type DayCosts = std::collections::BTreeMap<(String, String), [i64; 6]>;

/// What the rollups must say about `turns` under `tenant` prices: each turn recomputed from what was
/// sent, with the shared catalog lookup (not from anything the ingest stored).
fn recompute(turns: &[Value], tenant: &[apiary_schema::prices::PriceEntry]) -> DayCosts {
    let mut out = DayCosts::new();
    for e in turns.iter().filter(|e| e["type"] == "llm.turn") {
        let d = &e["data"];
        let n = |k: &str| d[k].as_u64().unwrap_or(0);
        let tokens = apiary_schema::prices::TurnTokens {
            input: n("input_tokens"),
            output: n("output_tokens"),
            cache_read: n("cached_tokens"),
            cache_write_5m: n("cache_creation_tokens"),
            cache_write_1h: 0,
        };
        let at: chrono::DateTime<chrono::Utc> = e["occurred_at"].as_str().unwrap().parse().unwrap();
        let model = d["model"].as_str().unwrap();
        let est = apiary_schema::prices::estimate(
            tenant,
            apiary_schema::prices::shipped(),
            model,
            at,
            &tokens,
        );
        let reported = (d["cost_usd"].as_f64().unwrap() * 1e9).round() as i64;
        let has_reported = d["cost_source"] == "reported";
        let row = out
            .entry((at.format("%Y-%m-%d").to_string(), model.to_string()))
            .or_default();
        row[0] += if has_reported {
            reported
        } else {
            est.unwrap_or(reported)
        };
        row[1] += reported;
        row[2] += est.unwrap_or(0);
        row[3] += i64::from(!has_reported && est.is_some());
        row[4] += i64::from(!has_reported && est.is_none());
        row[5] += 1;
    }
    out
}

async fn usage_by_day(app: &TestApp, token: &str) -> DayCosts {
    let (s, v) = app
        .get(
            token,
            "/v1/usage?from=2026-09-01&to=2026-11-01&group_by=model&granularity=day",
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let mut out = DayCosts::new();
    for r in v["rows"].as_array().unwrap() {
        let Some(model) = r["model"].as_str() else {
            continue;
        };
        let n = |k: &str| r[k].as_i64().unwrap();
        out.insert(
            (
                r["bucket"].as_str().unwrap()[..10].to_string(),
                model.to_string(),
            ),
            [
                n("cost_nanos"),
                n("cost_reported_nanos"),
                n("cost_estimated_nanos"),
                n("estimated_turns"),
                n("unpriced_turns"),
                n("llm_calls"),
            ],
        );
    }
    out
}

/// Both rollup tables agree with each other on every cost column.
async fn assert_hourly_equals_quarter(app: &TestApp) {
    let sums = |table: &str| {
        format!(
            "SELECT sum(cost_nanos)::int8, sum(cost_reported_nanos)::int8, sum(cost_estimated_nanos)::int8,
                sum(estimated_turns)::int8, sum(unpriced_turns)::int8 FROM {table}"
        )
    };
    type Sums = (i64, i64, i64, i64, i64);
    let q: Sums = sqlx::query_as(&sums("usage_rollups"))
        .fetch_one(&app.pool)
        .await
        .unwrap();
    let h: Sums = sqlx::query_as(&sums("usage_rollups_hourly"))
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(q, h);
}

fn entries(specs: &[&str]) -> Vec<apiary_schema::prices::PriceEntry> {
    specs
        .iter()
        .enumerate()
        .map(|(i, s)| {
            serde_json::from_str::<apiary_schema::prices::PriceSpec>(s)
                .unwrap()
                .check(&format!("t{i}"))
                .unwrap()
        })
        .collect()
}

#[sqlx::test(migrations = "../migrations")]
async fn repricing_a_period_equals_a_raw_recomputation_splits_the_month_and_is_idempotent(
    pool: sqlx::PgPool,
) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let admin = app.token(t.id, &["admin"]).await;
    // 2,600 turns: a private model nobody prices yet, Haiku (shipped), some reported; three October
    // days (one with more turns than one transaction takes) and the last day of September.
    let mut turns = vec![];
    let days = ["2026-09-30", "2026-10-03", "2026-10-15", "2026-10-20"];
    for i in 0..2600u64 {
        let day = days[if i < 1400 { 2 } else { (i % 4) as usize }];
        let at = format!("{day}T{:02}:{:02}:{:02}Z", i % 24, i % 60, (i / 60) % 60);
        let model = if i % 3 == 0 {
            "claude-haiku-4-5"
        } else {
            "acme-llm"
        };
        let mut e = unreported(
            &format!("s{}", i % 5),
            &at,
            model,
            1000 + i,
            i % 700,
            10 + i % 50,
        );
        if i % 7 == 0 {
            e["data"]["cost_usd"] = json!(0.001 + (i as f64) / 1e6);
            e["data"]["cost_source"] = json!("reported");
        }
        turns.push(e);
    }
    let bindings: Vec<Value> = (0..5).map(|i| binding(&format!("s{i}"), "u1")).collect();
    for part in turns.chunks(900) {
        let (s, v) = app
            .post_batch(&t.ingest, &batch(part.to_vec(), bindings.clone()))
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }
    assert_eq!(usage_by_day(&app, &t.read).await, recompute(&turns, &[]));

    // Prices set afterwards: the private model from October, and a Haiku price from the middle of
    // October (the month splits: shipped before the 15th at noon, the tenant's after).
    let specs = [
        r#"{"models":["acme-llm"],"from":"2026-10-01","input":"2.00","output":"6.00","cache_read":"0.20"}"#,
        r#"{"models":["claude-haiku-4-5*"],"from":"2026-10-15T12:00:00Z","input":"0.40","output":"2.00"}"#,
    ];
    for s in specs {
        let (status, v) = post_price(&app, &admin, s).await;
        assert_eq!(status, StatusCode::OK, "{v}");
    }
    let tenant = entries(&specs);

    for (token, query, want) in [
        (
            &t.read,
            "from=2026-10-01&to=2026-11-01",
            StatusCode::FORBIDDEN,
        ),
        (&admin, "from=2026-10-01", StatusCode::BAD_REQUEST),
        (
            &admin,
            "from=2026-10-01&to=2026-10-01",
            StatusCode::BAD_REQUEST,
        ),
        (
            &admin,
            "from=yesterday&to=2026-10-01",
            StatusCode::BAD_REQUEST,
        ),
        (
            &admin,
            "from=2026-10-01&to=2026-11-01&dry=1",
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let (s, v) = reprice(&app, token, query).await;
        assert_eq!(s, want, "{query}: {v}");
    }
    assert_eq!(
        app.count("price_reprices").await,
        0,
        "refused runs leave no record"
    );

    // Re-price October only, two runs at once: they serialize on the turns, and the result is exact.
    let (a, b) = tokio::join!(
        reprice(&app, &admin, "from=2026-10-01&to=2026-11-01"),
        reprice(&app, &admin, "from=2026-10-01&to=2026-11-01")
    );
    assert_eq!((a.0, b.0), (StatusCode::OK, StatusCode::OK), "{a:?} {b:?}");
    let october: Vec<Value> = turns
        .iter()
        .filter(|e| e["occurred_at"].as_str().unwrap() >= "2026-10")
        .cloned()
        .collect();
    let changed = a.1["turns_changed"].as_i64().unwrap() + b.1["turns_changed"].as_i64().unwrap();
    assert!(changed > 0, "{a:?} {b:?}");
    assert!(a.1["transactions"].as_i64().unwrap() > 31, "bounded: {a:?}");
    // September keeps its prices (out of the range); October follows the new ones.
    let (september, _): (Vec<Value>, Vec<Value>) = turns
        .iter()
        .cloned()
        .partition(|e| e["occurred_at"].as_str().unwrap() < "2026-10");
    let mut want = recompute(&september, &[]);
    want.extend(recompute(&october, &tenant));
    let got = usage_by_day(&app, &t.read).await;
    assert_eq!(got, want);
    let haiku_14 = got[&("2026-10-15".to_string(), "claude-haiku-4-5".to_string())];
    assert!(haiku_14[3] > 0, "estimated Haiku turns on the 15th");
    assert_hourly_equals_quarter(&app).await;
    // The stored estimates are what the recomputation says, turn by turn.
    let stored: i64 = sqlx::query_scalar(
        "SELECT sum(cost_estimated_nanos)::int8 FROM events WHERE effective_at >= '2026-10-01'",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    let october_estimates: i64 = recompute(&october, &tenant).values().map(|r| r[2]).sum();
    assert_eq!(stored, october_estimates);

    // Again: nothing changes.
    let (s, again) = reprice(&app, &admin, "from=2026-09-01&to=2026-10-01T00:00:00Z").await;
    assert_eq!(s, StatusCode::OK, "{again}");
    assert_eq!(
        again["turns_changed"], 0,
        "September: no tenant price applies there"
    );
    let (_, again) = reprice(&app, &admin, "from=2026-10-01&to=2026-11-01").await;
    assert_eq!(
        (
            again["turns_changed"].as_i64(),
            again["cost_delta_nanos"].as_i64()
        ),
        (Some(0), Some(0)),
        "{again}"
    );
    assert!(again["turns_examined"].as_i64().unwrap() > 2000);
    assert_eq!(usage_by_day(&app, &t.read).await, want);

    // The audit: one record per run, finished, with its counts.
    let audit: Vec<(i64, i64, bool)> = sqlx::query_as(
        "SELECT turns_examined, turns_changed, finished_at IS NOT NULL FROM price_reprices
         WHERE tenant_id = $1 ORDER BY started_at",
    )
    .bind(t.id)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert_eq!(audit.len(), 4);
    assert!(audit.iter().all(|r| r.2));
    assert_eq!(audit.iter().map(|r| r.1).sum::<i64>(), changed);
}
