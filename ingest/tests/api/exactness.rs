//! Exactness: random batches with duplicates and replays from concurrent clients; afterwards every
//! usage query equals a scan of the raw runtime events (device-level events are stored but are not usage), and the totals equal the generator's own sums over the
//! distinct events.

use std::collections::HashMap;

use chrono::{Duration, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

const DIMS: [(&str, &str); 5] = [
    ("user", "user_id"),
    ("model", "model"),
    ("colony", "colony_id"),
    ("session", "session_id"),
    ("device", "device_id"),
];

fn random_event(rng: &mut StdRng, base: chrono::DateTime<Utc>) -> Value {
    let at = base + Duration::seconds(rng.gen_range(0..3 * 86_400));
    // Device-level events: stored, but never usage (the raw scan below leaves them out too).
    match rng.gen_range(0..20) {
        0 => return event("agent.heartbeat", None, at, json!({ "backlog_events": 1 })),
        1 => {
            return event(
                "outbox.dropped",
                None,
                at,
                json!({ "reason": "evicted", "count": 2 }),
            )
        }
        _ => {}
    }
    let session = format!("s{}", rng.gen_range(0..12));
    let mut e = match rng.gen_range(0..10) {
        0..=5 => {
            let cost = if rng.gen_bool(0.2) {
                0.0
            } else {
                rng.gen_range(1..100_000) as f64 / 1e7
            };
            llm(
                &session,
                at,
                ["m1", "m2", "m3"][rng.gen_range(0..3)],
                rng.gen_range(0..5000),
                rng.gen_range(0..500),
                cost,
            )
        }
        6..=8 => tool(&session, at, rng.gen_bool(0.3)),
        _ => event(
            "health.signal",
            Some(&session),
            at,
            json!({ "signal": "retry" }),
        ),
    };
    if rng.gen_bool(0.4) {
        e["colony_id"] = json!(format!("c{}", rng.gen_range(0..3)));
        e["agent_role"] = json!("worker");
    }
    e
}

#[sqlx::test(migrations = "../migrations")]
async fn rollups_equal_a_raw_scan_after_concurrent_replays(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let mut rng = StdRng::seed_from_u64(7);
    let base = Utc::now() - Duration::days(3);
    let universe: Vec<Value> = (0..3000).map(|_| random_event(&mut rng, base)).collect();
    let sessions: Vec<Value> = (0..12)
        .map(|i| binding(&format!("s{i}"), &format!("u{}", i % 4)))
        .collect();
    let mut batches = vec![];
    for _ in 0..60 {
        let n = rng.gen_range(50..400);
        let evs: Vec<Value> = (0..n)
            .map(|_| universe[rng.gen_range(0..universe.len())].clone())
            .collect();
        let mut b = batch(evs, sessions.clone());
        if rng.gen_bool(0.2) {
            b["sent_at"] = json!(Utc::now() - Duration::minutes(rng.gen_range(2..90)));
        }
        batches.push(b);
    }
    let mut tasks = vec![];
    for client in 0..6 {
        let mine: Vec<Value> = batches
            .iter()
            .skip(client % 3)
            .step_by(2)
            .cloned()
            .collect();
        let (base_url, token) = (app.base.clone(), t.ingest.clone());
        tasks.push(tokio::spawn(async move {
            let c = reqwest::Client::new();
            for b in mine {
                let r = c
                    .post(format!("{base_url}/v1/batches"))
                    .bearer_auth(&token)
                    .header("content-encoding", "gzip")
                    .body(gzip(&serde_json::to_vec(&b).unwrap()))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), StatusCode::OK);
                let v: Value = r.json().await.unwrap();
                assert_eq!(v["rejected"], json!([]), "nothing here is invalid");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Independent expectation: sums over the distinct events that were sent.
    let mut sent: HashMap<String, &Value> = HashMap::new();
    for b in &batches {
        for e in b["events"].as_array().unwrap() {
            sent.insert(
                e["event_id"].as_str().unwrap().to_string(),
                universe
                    .iter()
                    .find(|u| u["event_id"] == e["event_id"])
                    .unwrap(),
            );
        }
    }
    let input: u64 = sent
        .values()
        .filter(|e| e["type"] == "llm.turn")
        .map(|e| e["data"]["input_tokens"].as_u64().unwrap())
        .sum();
    let errors = sent
        .values()
        .filter(|e| e["type"] == "tool.call" && e["data"]["is_error"] == true)
        .count();
    let (_, all) = app
        .get(&t.read, "/v1/usage?from=2020-01-01&to=2060-01-01")
        .await;
    let runtime = sent
        .values()
        .filter(|e| !["agent.heartbeat", "outbox.dropped"].contains(&e["type"].as_str().unwrap()))
        .count();
    assert!(runtime < sent.len(), "the universe has device-level events");
    assert_eq!(all["totals"]["events"].as_u64().unwrap() as usize, runtime);
    assert_eq!(all["totals"]["input_tokens"].as_u64().unwrap(), input);
    assert_eq!(
        all["totals"]["tool_errors"].as_u64().unwrap() as usize,
        errors
    );
    assert_eq!(app.count("events").await as usize, sent.len());
    let sums = |table: &str| {
        format!("SELECT sum(events)::int8, sum(input_tokens)::int8, sum(cost_nanos)::int8, count(DISTINCT bucket) FROM {table}")
    };
    let quarter: (i64, i64, i64, i64) = sqlx::query_as(&sums("usage_rollups"))
        .fetch_one(&app.pool)
        .await
        .unwrap();
    let hourly: (i64, i64, i64, i64) = sqlx::query_as(&sums("usage_rollups_hourly"))
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(
        (quarter.0, quarter.1, quarter.2),
        (hourly.0, hourly.1, hourly.2)
    );
    assert!(hourly.3 < quarter.3, "hourly rows are coarser");

    for tz in ["UTC", "Asia/Kolkata", "America/New_York", "Asia/Kathmandu"] {
        for gran in ["hour", "day", "month", "total"] {
            for mask in [0usize, 1, 2, 4, 8, 16, 3, 31] {
                let dims: Vec<(&str, &str)> = DIMS
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .map(|(_, d)| *d)
                    .collect();
                let group = dims.iter().map(|d| d.0).collect::<Vec<_>>().join(",");
                let (s, api) = app.get(&t.read, &format!("/v1/usage?from=2020-01-01&to=2060-01-01&group_by={group}&granularity={gran}&tz={tz}")).await;
                assert_eq!(s, StatusCode::OK, "{api}");
                let raw = raw_scan(&app, t.id, &dims, gran, tz).await;
                let api_rows: Vec<Value> = api["rows"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| project(r, &dims, gran))
                    .collect();
                assert_eq!(api_rows, raw, "tz={tz} granularity={gran} group_by={group}");
            }
        }
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn rollups_equal_a_raw_scan_across_dst_changes_in_odd_zones(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let mut rng = StdRng::seed_from_u64(11);
    // 2026-10-31 .. 2026-11-03: New York and Havana fall back on Nov 1 (Havana's midnight repeats).
    let base = chrono::DateTime::parse_from_rfc3339("2026-10-31T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc);
    let events: Vec<Value> = (0..1500).map(|_| random_event(&mut rng, base)).collect();
    let sessions: Vec<Value> = (0..12)
        .map(|i| binding(&format!("s{i}"), &format!("u{}", i % 4)))
        .collect();
    for chunk in events.chunks(500) {
        let b = batch_sent_at(chunk.to_vec(), sessions.clone(), Utc::now());
        let (s, v) = app.post_batch(&t.ingest, &b).await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }
    for tz in [
        "America/New_York",
        "America/Havana",
        "Asia/Kathmandu",
        "Pacific/Chatham",
    ] {
        for gran in ["hour", "day", "month"] {
            for mask in [0usize, 1, 6] {
                let dims: Vec<(&str, &str)> = DIMS
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .map(|(_, d)| *d)
                    .collect();
                let group = dims.iter().map(|d| d.0).collect::<Vec<_>>().join(",");
                let (s, api) = app.get(&t.read, &format!("/v1/usage?from=2026-10-01T00:00:00Z&to=2026-12-01T00:00:00Z&group_by={group}&granularity={gran}&tz={tz}")).await;
                assert_eq!(s, StatusCode::OK, "{api}");
                let raw = raw_scan(&app, t.id, &dims, gran, tz).await;
                let api_rows: Vec<Value> = api["rows"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| project(r, &dims, gran))
                    .collect();
                assert_eq!(api_rows, raw, "tz={tz} granularity={gran} group_by={group}");
            }
        }
    }
}

fn project(r: &Value, dims: &[(&str, &str)], gran: &str) -> Value {
    let mut m = serde_json::Map::new();
    if gran != "total" {
        let b = chrono::DateTime::parse_from_rfc3339(r["bucket"].as_str().unwrap()).unwrap();
        m.insert("bucket".into(), json!(b.timestamp()));
    }
    for (_, col) in dims {
        m.insert((*col).into(), json!(r[*col].as_str().unwrap_or("")));
    }
    for k in [
        "input_tokens",
        "output_tokens",
        "cached_tokens",
        "cost_nanos",
        "llm_calls",
        "unpriced_turns",
        "tool_calls",
        "tool_errors",
        "events",
    ] {
        m.insert(k.into(), r[k].clone());
    }
    Value::Object(m)
}

async fn raw_scan(
    app: &TestApp,
    tenant: uuid::Uuid,
    dims: &[(&str, &str)],
    gran: &str,
    tz: &str,
) -> Vec<Value> {
    let bucket = if gran == "total" {
        "0::int8".to_string()
    } else {
        format!("extract(epoch FROM date_trunc('{gran}', effective_at, '{tz}'))::int8")
    };
    let cols: String = dims.iter().map(|(_, c)| format!(", {c}")).collect();
    let group: String = (0..dims.len()).map(|i| format!(", {}", i + 2)).collect();
    let llm = "kind = 'llm.turn'";
    let sql = format!(
        "SELECT {bucket}{cols},
            COALESCE(sum((data->>'input_tokens')::int8) FILTER (WHERE {llm}), 0)::int8,
            COALESCE(sum((data->>'output_tokens')::int8) FILTER (WHERE {llm}), 0)::int8,
            COALESCE(sum((data->>'cached_tokens')::int8) FILTER (WHERE {llm}), 0)::int8,
            COALESCE(sum(round((data->>'cost_usd')::numeric * 1000000000)) FILTER (WHERE {llm}), 0)::int8,
            count(*) FILTER (WHERE {llm}),
            count(*) FILTER (WHERE {llm} AND data->>'cost_source' = 'unreported'),
            count(*) FILTER (WHERE kind = 'tool.call' AND data->>'status' = 'completed'),
            count(*) FILTER (WHERE kind = 'tool.call' AND data->>'status' = 'completed' AND (data->>'is_error')::bool),
            count(*)
         FROM events WHERE tenant_id = $1 AND kind NOT IN ('agent.heartbeat', 'outbox.dropped')
         GROUP BY 1{group} ORDER BY 1{group}"
    );
    let rows = sqlx::query(&sql)
        .bind(tenant)
        .fetch_all(&app.pool)
        .await
        .unwrap();
    use sqlx::Row;
    rows.iter()
        .map(|r| {
            let mut m = serde_json::Map::new();
            if gran != "total" {
                m.insert("bucket".into(), json!(r.get::<i64, _>(0)));
            }
            for (i, (_, col)) in dims.iter().enumerate() {
                m.insert((*col).into(), json!(r.get::<String, _>(i + 1)));
            }
            let n = dims.len() + 1;
            for (i, k) in [
                "input_tokens",
                "output_tokens",
                "cached_tokens",
                "cost_nanos",
                "llm_calls",
                "unpriced_turns",
                "tool_calls",
                "tool_errors",
                "events",
            ]
            .iter()
            .enumerate()
            {
                m.insert((*k).into(), json!(r.get::<i64, _>(n + i)));
            }
            Value::Object(m)
        })
        .collect()
}
