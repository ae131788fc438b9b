//! Ingest benchmark: 1k-event gzip batches with 10% duplicates, rollups included, posted over HTTP by
//! concurrent clients to the real server (in this process, port 0), against raw `COPY` of the same rows
//! into a plain table in the same run and database.
//!
//! Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p apiary-ingest --bench ingest`
//! Knobs (env): BENCH_BATCHES (default 200), BENCH_CLIENTS (default 4), BENCH_TENANTS (default 1; client
//! `c` sends for tenant `c % BENCH_TENANTS`), BENCH_GROUP_COMMIT (0 = off), BENCH_ROUNDS (default 1).
//! Workload per client (device): 200 sessions of which 20 are active in any batch, event times within
//! ~30 s per batch (a streaming agent), 60% llm.turn / 40% tool.call (completed, timed, four tool names);
//! each batch = 900 new events + 100 already sent. After the posts: `GET /v1/usage` (30 days by day and
//! model) 20 times per tenant, and the bytes the tables take per million events (above the empty schema's). Uses a fresh database
//! `apiary_bench_ingest_<random>` and drops it at the end.
//!
//! **Two engines in one run:** with `BENCH_CITUS_URL` (a Citus coordinator with workers, e.g.
//! `scripts/citus.sh start`'s `DATABASE_URL`), each round runs on `DATABASE_URL` and on the cluster
//! (alternating which goes first), the same pre-built batches on each, and prints the medians side by
//! side with the ratio Citus / PostgreSQL. The raw `COPY` baseline is measured on each engine (into a
//! table keyed and, on Citus, distributed by tenant).

use std::time::{Duration, Instant};

use apiary_ingest::config::IngestSettings;
use chrono::Utc;
use common::{env_usize, gzip, median, percentile, BenchDb};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use uuid::Uuid;

#[path = "common/mod.rs"]
mod common;

/// Event `k`-th batch: a streaming agent's window — 20 of 200 sessions active, times within ~30 s.
fn make_event(rng: &mut StdRng, now: chrono::DateTime<Utc>, k: usize) -> Value {
    let s = (k * 7 + rng.gen_range(0..20)) % 200;
    let at = now - chrono::Duration::seconds(3600)
        + chrono::Duration::milliseconds(k as i64 * 3000 + rng.gen_range(0..30_000));
    let (kind, data) = if rng.gen_bool(0.6) {
        let model = ["claude-sonnet-4-5", "gpt-5", "gemini-2.5-pro"][s % 3];
        (
            "llm.turn",
            json!({ "model": model, "input_tokens": rng.gen_range(100..20_000),
            "output_tokens": rng.gen_range(10..2000), "cached_tokens": rng.gen_range(0..100), "cache_creation_tokens": 0,
            "cost_usd": rng.gen_range(1..50_000) as f64 / 1e6, "cost_source": "reported", "stop_reason": "tool_use" }),
        )
    } else {
        let tool = ["read_file", "grep", "bash", "web_search"][rng.gen_range(0..4)];
        (
            "tool.call",
            json!({ "tool_name": tool,
            "tool_use_id": format!("toolu_{}", rng.gen::<u32>()), "status": "completed", "is_error": rng.gen_bool(0.05),
            "duration_ms": rng.gen_range(1..20_000) }),
        )
    };
    let mut e = json!({ "schema_version": 1, "event_id": Uuid::new_v4(), "type": kind, "occurred_at": at,
        "runtime": "hive", "session_id": format!("session_{s}"), "agent_role": "queen", "native_type": "x", "data": data });
    if s.is_multiple_of(3) {
        e["agent_role"] = "worker".into();
        e["colony_id"] = format!("session_{}", s + 1).into();
    }
    e
}

/// The pre-built workload, the same for every run.
struct Input {
    n_batches: usize,
    tenants: usize,
    /// Per client: its gzip bodies in order.
    bodies: Vec<Vec<Vec<u8>>>,
    /// The new events, with the client that sent each (for the raw COPY baseline).
    rows_for_copy: Vec<(usize, Value)>,
}

/// What one run measured.
struct Figures {
    eps: f64,
    p50: Duration,
    p95: Duration,
    p99: Duration,
    copy_rps: f64,
    usage_p50: Duration,
    usage_p95: Duration,
    bytes_per_million: f64,
    /// CPU ms per 1000 events of each server and of the ingest process, by name.
    cpu: Vec<(String, Option<f64>)>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n_batches = env_usize("BENCH_BATCHES", 200);
    let clients = env_usize("BENCH_CLIENTS", 4);
    let tenants = env_usize("BENCH_TENANTS", 1).clamp(1, clients);
    let rounds = env_usize("BENCH_ROUNDS", 1).max(1);

    // Pre-build every body (gzip) so the clients measure the server, not JSON generation. Client `c` is
    // device `bench-dev-c` with its own 200 sessions (as separate agents would be); batch `k` belongs to
    // client `k % clients`; its 100 duplicates are re-sends of that client's earlier events.
    let mut rng = StdRng::seed_from_u64(1);
    let now = Utc::now();
    let mut sent: Vec<Vec<Value>> = vec![Vec::new(); clients];
    let mut bodies: Vec<Vec<Vec<u8>>> = vec![Vec::new(); clients];
    let mut rows_for_copy: Vec<(usize, Value)> = Vec::new();
    for k in 0..n_batches {
        let c = k % clients;
        let mut events: Vec<Value> = (0..900)
            .map(|_| {
                let mut e = make_event(&mut rng, now, k);
                let sid = format!("dev{c}_{}", e["session_id"].as_str().unwrap());
                e["session_id"] = sid.into();
                if let Some(col) = e["colony_id"].as_str().map(|x| format!("dev{c}_{x}")) {
                    e["colony_id"] = col.into();
                }
                e
            })
            .collect();
        rows_for_copy.extend(events.iter().map(|e| (c, e.clone())));
        for _ in 0..100 {
            let pool = if sent[c].is_empty() {
                &events
            } else {
                &sent[c]
            };
            let dup = pool[rng.gen_range(0..pool.len())].clone();
            events.push(dup);
        }
        sent[c].extend(events.iter().take(900).cloned());
        let mut ids: Vec<&str> = events
            .iter()
            .filter_map(|e| e["session_id"].as_str())
            .collect();
        ids.sort();
        ids.dedup();
        let sessions: Vec<Value> = ids
            .iter()
            .map(|s| json!({ "session_id": s, "user_id": format!("user_{c}"), "first_seen_at": now }))
            .collect();
        let b = json!({ "schema_version": 1, "batch_id": Uuid::new_v4(), "sent_at": now,
            "agent": { "device_id": format!("bench-dev-{c}"), "agent_version": "0.1.0" },
            "policy_hash": "bench", "sessions": sessions, "events": events });
        bodies[c].push(gzip(&serde_json::to_vec(&b)?));
    }
    let avg_kb = bodies.iter().flatten().map(Vec::len).sum::<usize>() / n_batches / 1024;

    // CPU cost of intake alone (decompress + JSON + JSON Schema + allowlist + usage), one core.
    let principal = apiary_ingest::auth::Principal::command_line(Uuid::new_v4());
    let policy = apiary_schema::Policy::default_policy();
    let rules = apiary_ingest::intake::IntakeRules::from_settings(&IngestSettings::default());
    let t0 = Instant::now();
    let sample = n_batches.min(20);
    for body in bodies.iter().flatten().take(sample) {
        let raw = apiary_ingest::intake::decode_body(Some("gzip"), body, 64 << 20)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        apiary_ingest::intake::check_batch(&raw, &principal, &policy, &rules, Utc::now(), true)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let intake_eps = (sample * 1000) as f64 / t0.elapsed().as_secs_f64();

    let input = Input {
        n_batches,
        tenants,
        bodies,
        rows_for_copy,
    };
    println!("ingest benchmark: {n_batches} batches x 1000 events (10% duplicates), {clients} concurrent clients, {tenants} tenant(s), gzip ~{avg_kb} KiB/batch");
    println!("  intake CPU alone (decompress, JSON, JSON Schema, allowlist), one core: {intake_eps:.0} events/s");

    let mut engines = vec![("PostgreSQL", std::env::var("DATABASE_URL")?)];
    if let Ok(url) = std::env::var("BENCH_CITUS_URL") {
        engines.push(("Citus", url));
    }
    let mut figures: Vec<Vec<Figures>> = engines.iter().map(|_| vec![]).collect();
    for round in 0..rounds {
        let mut order: Vec<usize> = (0..engines.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for e in order {
            let (name, url) = &engines[e];
            println!("round {}/{rounds}, {name}:", round + 1);
            figures[e].push(run(url, &input).await?);
        }
    }
    if engines.len() == 2 {
        summary(&engines, &figures);
    }
    Ok(())
}

/// One run on the server `url` names: a fresh database, the posts, the baseline, the queries.
async fn run(url: &str, input: &Input) -> anyhow::Result<Figures> {
    let db = BenchDb::create_at(url, "ingest", 16).await?;
    let pool = db.pool.clone();
    let mut tenants = vec![];
    for t in 0..input.tenants {
        let id = db.tenant(&format!("bench{t}")).await?;
        tenants.push((
            id,
            db.ingest_token(id, None).await?,
            db.read_token(id).await?,
        ));
    }

    let settings = IngestSettings {
        pool_size: 16,
        group_commit: std::env::var("BENCH_GROUP_COMMIT").map_or(true, |v| v != "0"),
        // The clients share one token: no share of the batches in flight per token.
        max_batches_in_flight_per_token: IngestSettings::default().max_batches_in_flight,
        ..IngestSettings::default()
    };
    // What an empty schema takes (pre-created partitions, indexes, reference rows), not counted per event.
    let empty_bytes = db.table_bytes().await?;
    let server = db.serve(settings).await?;
    let base = format!("{server}/v1/batches");

    // CPU of each server (the one PostgreSQL, or the coordinator and each worker) and of this process
    // (the ingest and the clients) while the batches go in.
    let nodes = common::servers(&pool).await?;
    let cpu_of = |nodes: &[(String, String)]| -> Vec<Option<f64>> {
        nodes
            .iter()
            .map(|(_, dir)| common::server_cpu(dir))
            .collect()
    };
    let (cpu_before, own_before) = (cpu_of(&nodes), common::own_cpu());

    let started = Instant::now();
    let mut tasks = vec![];
    for (c, chunk) in input.bodies.iter().cloned().enumerate() {
        let (base, token) = (base.clone(), tenants[c % input.tenants].1.clone());
        tasks.push(tokio::spawn(async move {
            let c = reqwest::Client::new();
            let mut lat = vec![];
            let mut dups = 0u64;
            for body in chunk {
                let (took, v) = common::post_gzip(&c, &base, &token, body).await;
                lat.push(took);
                dups += v["duplicates"].as_u64().unwrap();
            }
            (lat, dups)
        }));
    }
    let mut lat = vec![];
    let mut dups = 0;
    for t in tasks {
        let (l, d) = t.await?;
        lat.extend(l);
        dups += d;
    }
    let wall = started.elapsed();
    let (cpu_after, own_after) = (cpu_of(&nodes), common::own_cpu());
    lat.sort();
    let total_events = (input.n_batches * 1000) as f64;
    // CPU milliseconds per 1000 posted events: each server, then this process.
    let per_k = |a: Option<f64>, b: Option<f64>| {
        a.zip(b).map(|(a, b)| (b - a) * 1e3 * 1000.0 / total_events)
    };
    let mut cpu: Vec<(String, Option<f64>)> = nodes
        .iter()
        .zip(cpu_before.iter().zip(&cpu_after))
        .map(|((name, _), (a, b))| (name.clone(), per_k(*a, *b)))
        .collect();
    cpu.push(("ingest + clients".into(), per_k(own_before, own_after)));
    let eps = total_events / wall.as_secs_f64();

    // Raw COPY of the same (new) rows into a table keyed by (tenant, event) — distributed by tenant on
    // Citus — in 900-row chunks like the batches, one connection.
    sqlx::query("CREATE TABLE raw_copy (tenant_id uuid, event_id uuid, occurred_at timestamptz, kind text, session_id text, data jsonb, PRIMARY KEY (tenant_id, event_id))").execute(&pool).await?;
    if db.citus {
        sqlx::query("SELECT create_distributed_table('raw_copy', 'tenant_id')")
            .execute(&pool)
            .await?;
    }
    let mut conn = pool.acquire().await?;
    let mut copy_lat = vec![];
    let copy_started = Instant::now();
    for chunk in input.rows_for_copy.chunks(900) {
        let mut csv = String::new();
        for (c, e) in chunk {
            let tenant = tenants[c % input.tenants].0;
            let data = e["data"].to_string().replace('"', "\"\"");
            csv.push_str(&format!(
                "{tenant},{},{},{},{},\"{data}\"\n",
                e["event_id"].as_str().unwrap(),
                e["occurred_at"].as_str().unwrap(),
                e["type"].as_str().unwrap(),
                e["session_id"].as_str().unwrap()
            ));
        }
        let t0 = Instant::now();
        let mut copy = conn
            .copy_in_raw("COPY raw_copy FROM STDIN (FORMAT csv)")
            .await?;
        copy.send(csv.as_bytes()).await?;
        copy.finish().await?;
        copy_lat.push(t0.elapsed());
    }
    let copy_wall = copy_started.elapsed();
    copy_lat.sort();
    let copy_rps = input.rows_for_copy.len() as f64 / copy_wall.as_secs_f64();
    drop(conn);
    sqlx::query("DROP TABLE raw_copy").execute(&pool).await?;

    // The rollup query a dashboard's overview makes: 30 days by day and model, each tenant in turn.
    let today = Utc::now().date_naive();
    let client = reqwest::Client::new();
    let mut usage_lat = vec![];
    for _ in 0..20 {
        for (_, _, read) in &tenants {
            let t0 = Instant::now();
            let r = client
                .get(format!(
                    "{server}/v1/usage?from={}&to={}&granularity=day&group_by=model",
                    today - chrono::Days::new(29),
                    today + chrono::Days::new(1)
                ))
                .bearer_auth(read)
                .send()
                .await?;
            anyhow::ensure!(r.status().is_success(), "GET /v1/usage: {}", r.status());
            r.bytes().await?;
            usage_lat.push(t0.elapsed());
        }
    }
    usage_lat.sort();

    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(&pool)
        .await?;
    let bytes = db.table_bytes().await?;
    let bytes_per_million = (bytes - empty_bytes) as f64 * 1e6 / stored.max(1) as f64;
    let f = Figures {
        eps,
        p50: percentile(&lat, 0.5),
        p95: percentile(&lat, 0.95),
        p99: percentile(&lat, 0.99),
        copy_rps,
        usage_p50: percentile(&usage_lat, 0.5),
        usage_p95: percentile(&usage_lat, 0.95),
        bytes_per_million,
        cpu,
    };
    println!("  stored {stored} new events, {dups} duplicates answered");
    println!("  ingest (HTTP + validation + dedup + events + rollups + sessions): {eps:.0} events/s over {:.2} s", wall.as_secs_f64());
    println!(
        "  batch latency: p50 {:?}  p95 {:?}  p99 {:?}  max {:?}",
        f.p50,
        f.p95,
        f.p99,
        lat[lat.len() - 1]
    );
    let shown: Vec<String> = f
        .cpu
        .iter()
        .map(|(name, ms)| match ms {
            Some(ms) => format!("{name} {ms:.1}"),
            None => format!("{name} unknown"),
        })
        .collect();
    println!("  CPU ms per 1000 events: {}", shown.join(", "));
    println!("  raw COPY of the same {} rows (900-row chunks, one connection): {copy_rps:.0} rows/s; chunk p50 {:?}", input.rows_for_copy.len(), percentile(&copy_lat, 0.5));
    println!("  ratio ingest / raw COPY: {:.2}", eps / copy_rps);
    println!(
        "  GET /v1/usage (30 days by day and model), {} queries: p50 {:?}  p95 {:?}",
        usage_lat.len(),
        f.usage_p50,
        f.usage_p95
    );
    println!(
        "  tables on disk: {:.1} MiB ({:.1} MiB empty), {:.0} MiB per million events",
        bytes as f64 / 1048576.0,
        empty_bytes as f64 / 1048576.0,
        bytes_per_million / 1048576.0
    );
    if !db.citus {
        let top: Vec<String> = db
            .largest_tables(6)
            .await?
            .into_iter()
            .map(|(t, b)| format!("{t} {:.1}", b as f64 / 1048576.0))
            .collect();
        println!("  largest tables, MiB: {}", top.join(", "));
    }
    db.drop().await?;
    Ok(f)
}

/// One figure of a run.
type Pick<'a> = &'a dyn Fn(&Figures) -> f64;

/// The medians of both engines side by side, and Citus / PostgreSQL.
fn summary(engines: &[(&str, String)], figures: &[Vec<Figures>]) {
    let med = |e: usize, f: &dyn Fn(&Figures) -> f64| median(figures[e].iter().map(f));
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let rows: [(&str, Pick); 8] = [
        ("ingest events/s", &|f| f.eps),
        ("batch p50 ms", &|f| ms(f.p50)),
        ("batch p95 ms", &|f| ms(f.p95)),
        ("batch p99 ms", &|f| ms(f.p99)),
        ("raw COPY rows/s", &|f| f.copy_rps),
        ("usage query p50 ms", &|f| ms(f.usage_p50)),
        ("usage query p95 ms", &|f| ms(f.usage_p95)),
        ("MiB per million events", &|f| {
            f.bytes_per_million / 1048576.0
        }),
    ];
    println!(
        "  {:<44} {:>12} {:>12} {:>8}",
        format!("summary: medians of {} round(s)", figures[0].len()),
        engines[0].0,
        engines[1].0,
        "ratio"
    );
    for (name, f) in rows {
        let (a, b) = (med(0, f), med(1, f));
        println!("  {name:<44} {a:>12.1} {b:>12.1} {:>8.2}", b / a);
    }
    // Where the CPU went, per engine (medians; unknown where /proc could not be read).
    for (e, (engine, _)) in engines.iter().enumerate() {
        let names: Vec<String> = figures[e][0].cpu.iter().map(|c| c.0.clone()).collect();
        let parts: Vec<String> = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                let v: Vec<f64> = figures[e].iter().filter_map(|f| f.cpu[i].1).collect();
                if v.is_empty() {
                    format!("{name} unknown")
                } else {
                    format!("{name} {:.1}", median(v))
                }
            })
            .collect();
        println!("  {engine}: CPU ms per 1000 events: {}", parts.join(", "));
    }
}
