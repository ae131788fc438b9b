//! What budgets cost the ingest: A/B in one run, one server, one database. Arm A is a tenant without
//! budgets; arm B a tenant with 20 budgets (tenant-wide, per user, per model, per colony key, in USD and
//! tokens, day/week/month in three zones), half of which cross thresholds during the run. Both arms' agents
//! ask for their quota on every batch (`X-Apiary-Quota: 1`, as the agent does), so B pays for its
//! quota reads (cached 10 s per user), the post-commit mark and the background evaluator (once a second
//! while batches arrive). Rounds alternate A, B, A, B, … so drift on a shared machine hits both; the
//! figure is the median of each arm's rounds and the ratio B / A (target ≥ 0.90).
//!
//! Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p apiary-ingest --bench budgets`
//! Knobs (env): BENCH_ROUNDS (per arm, default 3), BENCH_BATCHES (per round, default 40),
//! BENCH_CLIENTS (default 4). Batches: 1000 new events each (60% LLM turns, 40% tool calls), 50 sessions
//! of 4 users per client. Uses a fresh database and drops it at the end.

#[path = "../../bench-support/stats.rs"]
mod stats;
use stats::median;

use std::io::Write;
use std::time::{Duration, Instant};

use apiary_ingest::config::IngestSettings;
use apiary_ingest::startup::Application;
use chrono::Utc;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use sqlx::postgres::PgPoolOptions;
use sqlx::Connection;
use uuid::Uuid;

fn env_usize(k: &str, d: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

const MODELS: [&str; 3] = ["claude-sonnet-4-5", "gpt-5", "gemini-2.5-pro"];

/// One gzip batch of 1000 new events for client `c`, round `r`, batch `k`.
fn body(rng: &mut StdRng, c: usize, r: usize, k: usize) -> Vec<u8> {
    let now = Utc::now();
    let events: Vec<Value> = (0..1000)
        .map(|_| {
            let s = rng.gen_range(0..50);
            let at = now - chrono::Duration::seconds(rng.gen_range(0..600));
            let data = if rng.gen_bool(0.6) {
                json!({ "model": MODELS[s % 3], "input_tokens": rng.gen_range(100..20_000),
                    "output_tokens": rng.gen_range(10..2000), "cached_tokens": 0, "cache_creation_tokens": 0,
                    "cost_usd": rng.gen_range(1..50_000) as f64 / 1e6, "cost_source": "reported" })
            } else {
                json!({ "tool_name": "grep", "tool_use_id": format!("toolu_{}", rng.gen::<u32>()),
                    "status": "completed", "is_error": false, "duration_ms": rng.gen_range(1..2000) })
            };
            let kind = if data.get("model").is_some() { "llm.turn" } else { "tool.call" };
            json!({ "schema_version": 1, "event_id": Uuid::new_v4(), "type": kind, "occurred_at": at,
                "runtime": "hive", "session_id": format!("c{c}_s{s}"), "agent_role": "queen",
                "native_type": "x", "data": data })
        })
        .collect();
    let sessions: Vec<Value> = (0..50)
        .map(|s| {
            json!({ "session_id": format!("c{c}_s{s}"), "user_id": format!("user_{}", c % 4),
            "first_seen_at": now })
        })
        .collect();
    let b = json!({ "schema_version": 1, "batch_id": Uuid::new_v4(), "sent_at": now,
        "agent": { "device_id": format!("dev-{c}-{r}-{k}"), "agent_version": "0.1.0" },
        "policy_hash": "bench", "sessions": sessions, "events": events });
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&serde_json::to_vec(&b).unwrap()).unwrap();
    enc.finish().unwrap()
}

/// Posts `bodies` (one list per client, concurrently, client `c` with `tokens[c]`); events/s.
async fn round(base: &str, tokens: &[String], bodies: Vec<Vec<Vec<u8>>>) -> f64 {
    let n: usize = bodies.iter().map(Vec::len).sum();
    let started = Instant::now();
    let mut tasks = vec![];
    for (c, chunk) in bodies.into_iter().enumerate() {
        let (base, token) = (base.to_string(), tokens[c].clone());
        tasks.push(tokio::spawn(async move {
            let c = reqwest::Client::new();
            for body in chunk {
                let r = c
                    .post(&base)
                    .bearer_auth(&token)
                    .header("content-type", "application/json")
                    .header("content-encoding", "gzip")
                    .header("x-apiary-quota", "1")
                    .body(body)
                    .send()
                    .await
                    .unwrap();
                assert!(r.status().is_success(), "{}", r.status());
                let v: Value = r.json().await.unwrap();
                assert!(v.get("quota").is_some(), "{v}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (n * 1000) as f64 / started.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let rounds = env_usize("BENCH_ROUNDS", 3);
    let n_batches = env_usize("BENCH_BATCHES", 40);
    let clients = env_usize("BENCH_CLIENTS", 4);
    let db = format!("apiary_bench_budgets_{}", rand::random::<u32>());
    let mut admin = sqlx::PgConnection::connect(&url).await?;
    sqlx::query(&format!("CREATE DATABASE {db}"))
        .execute(&mut admin)
        .await?;
    let db_url = match url.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{db}"),
        None => unreachable!("a URL with a database"),
    };
    let pool = PgPoolOptions::new()
        .max_connections(20)
        .connect(&db_url)
        .await?;
    apiary_ingest::store::migrate(&pool).await?;
    // Per arm: the tenant, and one ingest token per client, bound to that client's user (as agents'
    // tokens are), so each quota is a user's.
    let mut tokens: Vec<(Uuid, Vec<String>)> = vec![];
    for name in ["no-budgets", "budgets"] {
        let tenant = apiary_ingest::store::admin::create_tenant(&pool, name).await?;
        let mut per_client = vec![];
        for c in 0..clients {
            let spec = apiary_ingest::store::admin::TokenSpec {
                tenant: tenant.to_string(),
                scopes: vec![apiary_ingest::auth::Scope::Ingest],
                user_id: Some(format!("user_{}", c % 4)),
                device_id: None,
            };
            per_client.push(
                apiary_ingest::store::admin::create_token(&pool, &spec)
                    .await?
                    .1,
            );
        }
        tokens.push((tenant, per_client));
    }
    let settings = IngestSettings {
        listen: "127.0.0.1:0".into(),
        rate_limit_per_sec: 1e9,
        rate_limit_burst: 1e9,
        pool_size: 16,
        ..IngestSettings::default()
    };
    // Arm B's 20 budgets, crossed during the run (limits a few rounds' spend).
    let reads =
        apiary_ingest::query::ReadDb::new(pool.clone(), apiary_ingest::status::rules(&settings));
    let b_tenant = tokens[1].0;
    let zones = ["UTC", "Europe/Berlin", "Asia/Kolkata"];
    let periods = ["day", "week", "month"];
    for i in 0..20usize {
        let mut scope = json!({});
        match i % 4 {
            0 => {}
            1 => scope["user"] = format!("user_{}", i % 4).into(),
            2 => scope["model"] = MODELS[i % 3].into(),
            _ => {
                scope["user"] = "user_1".into();
                scope["model"] = MODELS[i % 3].into();
            }
        }
        let mut b = json!({ "scope": scope, "period": periods[i % 3], "tz": zones[i % 3],
            "thresholds": [25, 50, 80, 100] });
        // Half cross their first thresholds during the run, half never do (the case that costs most:
        // a budget with a threshold left is evaluated after every second of batches).
        let big = if i % 4 < 2 { 1 } else { 1000 };
        if i % 2 == 0 {
            b["limit_usd"] = format!("{}", (50 + i * 10) * big).into();
        } else {
            b["limit_tokens"] = ((50_000_000 + i * 1_000_000) * big).into();
        }
        let asked: apiary_ingest::service::budgets::NewBudget = serde_json::from_value(b)?;
        apiary_ingest::service::budgets::create(&pool, &reads, b_tenant, asked)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let app = Application::build(settings, pool.clone()).await?;
    let base = format!("http://127.0.0.1:{}/v1/batches", app.port());
    tokio::spawn(app.run_until_stopped(std::future::pending()));

    let mut rng = StdRng::seed_from_u64(3);
    let mut arms: [Vec<f64>; 2] = [vec![], vec![]];
    // A warm-up round (connections, caches, first partitions) counted in neither arm.
    let warm: Vec<Vec<Vec<u8>>> = (0..clients)
        .map(|c| (0..4).map(|k| body(&mut rng, c, 999, k)).collect())
        .collect();
    round(&base, &tokens[0].1, warm).await;
    for r in 0..rounds {
        for (arm, (_, arm_tokens)) in tokens.iter().enumerate() {
            let bodies: Vec<Vec<Vec<u8>>> = (0..clients)
                .map(|c| {
                    (0..n_batches / clients)
                        .map(|k| body(&mut rng, c, r * 2 + arm, k))
                        .collect()
                })
                .collect();
            let eps = round(&base, arm_tokens, bodies).await;
            println!(
                "  round {r} arm {}: {eps:.0} events/s",
                ["A (no budgets)", "B (20 budgets)"][arm]
            );
            arms[arm].push(eps);
        }
    }
    // Let the evaluator finish its last round, then count what it recorded.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let crossings: i64 = sqlx::query_scalar("SELECT count(*) FROM budget_crossings")
        .fetch_one(&pool)
        .await?;
    let (a, b) = (median(arms[0].clone()), median(arms[1].clone()));
    println!(
        "budgets benchmark: {rounds} rounds per arm, {n_batches} batches x 1000 events per round, {clients} clients, quota asked on every batch"
    );
    println!("  A, tenant without budgets: median {a:.0} events/s");
    println!("  B, tenant with 20 budgets: median {b:.0} events/s ({crossings} threshold crossings recorded)");
    println!("  ratio B / A: {:.3} (target >= 0.90)", b / a);
    pool.close().await;
    sqlx::query(&format!("DROP DATABASE {db} WITH (FORCE)"))
        .execute(&mut admin)
        .await?;
    Ok(())
}
