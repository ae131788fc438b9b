//! Fleet benchmark: many devices pushing small batches, against the same run's 1000-event batches.
//!
//! Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p apiary-ingest --bench fleet`
//!
//! Workload (knobs in parentheses): BENCH_DEVICES devices (1000) in BENCH_TENANTS tenants (10), each with
//! its own device-bound ingest token and three sessions of its user; BENCH_CLIENTS connections (32), each
//! driving its share of the devices in turn (closed loop: a connection sends its next batch when the last
//! is answered); every batch BENCH_BATCH new events (20: LLM turns and completed tool calls over the
//! device's sessions, with their bindings), and after every sixth batch of a device its heartbeat as the
//! agent sends it: a batch of its own holding one `agent.heartbeat` (the shared `Heartbeat` payload with
//! the runtime liveness of the device's sessions) — the agent's 30 s heartbeat next to a push every 5 s.
//! BENCH_SMALL_BATCHES small batches per round (4000, heartbeats not counted). Baseline in the same run:
//! BENCH_LARGE_BATCHES (48) batches of 1000 new events over 4 connections (one device each, 20 sessions).
//!
//! Two servers (replicas) on one database: group commit off and on (the "on" arm with the default
//! writers, wait and group size, or BENCH_GROUP_WRITERS / BENCH_GROUP_WAIT_MS / BENCH_GROUP_MAX_EVENTS).
//! Rounds alternate off, on, off, on… (BENCH_ROUNDS per arm, 3), each round a small-batch run then a
//! large-batch run with fresh events; the figures are the medians of each arm's rounds.
//!
//! Database cost: transactions per batch from `pg_stat_database.xact_commit` of the bench database (delta
//! over the run; every commit, upkeep tasks included). Statements per batch: `pg_stat_statements` is not
//! loaded on this server, so they are counted in this process: every statement sqlx sends (each logs an
//! event on the `sqlx::query` target; `BEGIN` and `COMMIT` included, the one `COPY` of a group not), by a
//! tracing subscriber that counts those events and nothing else. With BENCH_STATEMENT_TOP=N it also
//! prints, for the first group-commit-on small round, the N statements sent most often (their first 90
//! characters) with their count per batch and the time sqlx saw each take (summed, per batch).
//!
//! At the end it prints the row writes of the tables every batch updates (inserts, updates, HOT updates,
//! deletes; the sessions' TOAST table too) and the sessions' average stored tracker and work sizes.
//! BENCH_SETUP_SQL: SQL run once after the migrations, to try a storage setting without a migration
//! (e.g. `ALTER TABLE sessions ALTER COLUMN health SET STORAGE MAIN`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use apiary_ingest::config::IngestSettings;
use apiary_schema::device::{Heartbeat, RuntimeLiveness};
use chrono::Utc;
use common::{env_usize, gzip, median, percentile, BenchDb};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

#[path = "common/mod.rs"]
mod common;

/// Statements sqlx sent (see the module notes).
static STATEMENTS: AtomicU64 = AtomicU64::new(0);

/// Per statement text (its first 90 characters): how often it was sent and the seconds it took, while
/// `Some` (see the module notes).
static BY_TEXT: std::sync::Mutex<Option<std::collections::HashMap<String, (u64, f64)>>> =
    std::sync::Mutex::new(None);

/// Reads the statement's text and time from a `sqlx::query` event.
#[derive(Default)]
struct Statement {
    summary: String,
    sql: String,
    secs: f64,
}

impl tracing::field::Visit for Statement {
    fn record_str(&mut self, f: &tracing::field::Field, v: &str) {
        match f.name() {
            "summary" => self.summary = v.to_string(),
            "db.statement" => self.sql = v.to_string(),
            _ => {}
        }
    }
    fn record_f64(&mut self, f: &tracing::field::Field, v: f64) {
        if f.name() == "elapsed_secs" {
            self.secs = v;
        }
    }
    fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
}

/// A tracing subscriber that only counts `sqlx::query` events.
struct CountStatements;

impl tracing::Subscriber for CountStatements {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        m.target() == "sqlx::query"
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        if e.metadata().target() == "sqlx::query" && *e.metadata().level() == tracing::Level::DEBUG
        {
            STATEMENTS.fetch_add(1, Ordering::Relaxed);
            let mut by_text = BY_TEXT.lock().unwrap();
            if let Some(map) = by_text.as_mut() {
                let mut st = Statement::default();
                e.record(&mut st);
                let text = if st.sql.trim().is_empty() {
                    st.summary
                } else {
                    st.sql.split_whitespace().collect::<Vec<_>>().join(" ")
                };
                let key: String = text.chars().take(90).collect();
                let entry = map.entry(key).or_default();
                entry.0 += 1;
                entry.1 += st.secs;
            }
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

const MODELS: [&str; 3] = ["claude-sonnet-4-5", "gpt-5", "gemini-2.5-pro"];

/// One device: its token and identity.
struct Device {
    name: String,
    user: String,
    token: String,
}

/// A usage event of `session`, a few seconds ago.
fn usage_event(rng: &mut StdRng, session: &str) -> Value {
    let at = Utc::now() - chrono::Duration::milliseconds(rng.gen_range(0..5_000));
    let (kind, data) = if rng.gen_bool(0.6) {
        let model = MODELS[rng.gen_range(0..3)];
        (
            "llm.turn",
            json!({ "model": model, "input_tokens": rng.gen_range(100..20_000),
            "output_tokens": rng.gen_range(10..2000), "cached_tokens": 0, "cache_creation_tokens": 0,
            "cost_usd": rng.gen_range(1..50_000) as f64 / 1e6, "cost_source": "reported" }),
        )
    } else {
        let tool = ["read_file", "grep", "bash", "web_search"][rng.gen_range(0..4)];
        (
            "tool.call",
            json!({ "tool_name": tool, "tool_use_id": format!("toolu_{}", rng.gen::<u32>()),
            "status": "completed", "is_error": false, "duration_ms": rng.gen_range(1..20_000) }),
        )
    };
    json!({ "schema_version": 1, "event_id": Uuid::new_v4(), "type": kind, "occurred_at": at,
        "runtime": "hive", "session_id": session, "agent_role": "queen", "native_type": "x", "data": data })
}

/// A gzip batch of `events` from `device`, with the bindings of the sessions `sessions`.
fn batch(device: &Device, sessions: &[String], events: Vec<Value>) -> Vec<u8> {
    let now = Utc::now();
    let sessions: Vec<Value> = sessions
        .iter()
        .map(|s| json!({ "session_id": s, "user_id": device.user, "first_seen_at": now - chrono::Duration::hours(1) }))
        .collect();
    let b = json!({ "schema_version": 1, "batch_id": Uuid::new_v4(), "sent_at": now,
        "agent": { "device_id": device.name, "agent_version": "0.1.0" },
        "policy_hash": "bench", "sessions": sessions, "events": events });
    gzip(&serde_json::to_vec(&b).unwrap())
}

fn sessions_of(device: &Device, n: usize) -> Vec<String> {
    (0..n).map(|s| format!("{}_s{s}", device.name)).collect()
}

/// The device's heartbeat batch, as the agent sends it.
fn heartbeat(device: &Device, rng: &mut StdRng) -> Vec<u8> {
    let runtimes = sessions_of(device, 3)
        .into_iter()
        .map(|session_id| RuntimeLiveness {
            session_id,
            alive: true,
            evidence: "pid_running".into(),
            gone_at: None,
        })
        .collect();
    let beat = Heartbeat {
        agent_version: Some("0.1.0".into()),
        backlog_events: Some(rng.gen_range(0..50)),
        backlog_bytes: Some(rng.gen_range(0..50_000)),
        oldest_pending_age_seconds: Some(rng.gen_range(0.0..5.0)),
        sync_state: Some("enabled".into()),
        uptime_seconds: Some(3600.0),
        interval_seconds: Some(30.0),
        runtimes,
    };
    let event = serde_json::to_value(beat.event(Utc::now())).unwrap();
    batch(device, &[], vec![event])
}

/// Bodies per connection for one small-batch round: connection `c` drives devices `c, c + clients, …`
/// in turn; a device's every sixth batch is followed by its heartbeat.
fn small_round(
    rng: &mut StdRng,
    devices: &[Device],
    clients: usize,
    batches: usize,
    per_batch: usize,
    round: usize,
) -> Vec<Vec<(usize, Vec<u8>)>> {
    let mut out: Vec<Vec<(usize, Vec<u8>)>> = vec![Vec::new(); clients];
    for k in 0..batches {
        let d = k % devices.len();
        let dev = &devices[d];
        let sessions = sessions_of(dev, 3);
        let events: Vec<Value> = (0..per_batch)
            .map(|_| {
                let s = rng.gen_range(0..3);
                usage_event(rng, &sessions[s])
            })
            .collect();
        let c = d % clients;
        out[c].push((d, batch(dev, &sessions, events)));
        if (k / devices.len() + round).is_multiple_of(6) {
            out[c].push((d, heartbeat(dev, rng)));
        }
    }
    out
}

/// One large-batch round: 4 connections, each its own device, 1000 events over 20 sessions per batch.
fn large_round(rng: &mut StdRng, big: &[Device], batches: usize) -> Vec<Vec<(usize, Vec<u8>)>> {
    let mut out: Vec<Vec<(usize, Vec<u8>)>> = vec![Vec::new(); big.len()];
    for k in 0..batches {
        let c = k % big.len();
        let sessions = sessions_of(&big[c], 20);
        let events: Vec<Value> = (0..1000)
            .map(|_| {
                let s = rng.gen_range(0..20);
                usage_event(rng, &sessions[s])
            })
            .collect();
        out[c].push((c, batch(&big[c], &sessions, events)));
    }
    out
}

/// What one run measured.
#[derive(Debug, Clone, Copy)]
struct Run {
    events_per_sec: f64,
    batches_per_sec: f64,
    p50: Duration,
    p99: Duration,
    xacts_per_batch: f64,
    statements_per_batch: f64,
}

async fn xact_commits(pool: &PgPool) -> i64 {
    // Backends flush their counters at most once a second when idle.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    sqlx::query_scalar(
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Posts every connection's bodies concurrently (closed loop) to `base`.
async fn run(
    pool: &PgPool,
    base: &str,
    tokens: &[&str],
    bodies: Vec<Vec<(usize, Vec<u8>)>>,
) -> Run {
    let batches: usize = bodies.iter().map(Vec::len).sum();
    let xact0 = xact_commits(pool).await;
    let stmt0 = STATEMENTS.load(Ordering::Relaxed);
    let started = Instant::now();
    let mut tasks = vec![];
    for chunk in bodies {
        let url = format!("{base}/v1/batches");
        let tokens: Vec<String> = chunk.iter().map(|(d, _)| tokens[*d].to_string()).collect();
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut lat = vec![];
            let mut events = 0u64;
            for ((_, body), token) in chunk.into_iter().zip(tokens) {
                let (took, v) = common::post_gzip(&client, &url, &token, body).await;
                lat.push(took);
                assert_eq!(v["rejected"].as_array().map_or(0, Vec::len), 0, "{v}");
                events += v["accepted"].as_u64().unwrap();
            }
            (lat, events)
        }));
    }
    let mut lat = vec![];
    let mut events = 0;
    for t in tasks {
        let (l, e) = t.await.unwrap();
        lat.extend(l);
        events += e;
    }
    let wall = started.elapsed().as_secs_f64();
    let stmts = STATEMENTS.load(Ordering::Relaxed) - stmt0;
    let xacts = xact_commits(pool).await - xact0;
    lat.sort();
    Run {
        events_per_sec: events as f64 / wall,
        batches_per_sec: batches as f64 / wall,
        p50: percentile(&lat, 0.5),
        p99: percentile(&lat, 0.99),
        xacts_per_batch: xacts as f64 / batches as f64,
        statements_per_batch: stmts as f64 / batches as f64,
    }
}

/// The medians of an arm's runs.
fn summary(runs: &[Run]) -> Run {
    let m = |f: fn(&Run) -> f64| median(runs.iter().map(f));
    let d = |f: fn(&Run) -> Duration| {
        Duration::from_secs_f64(median(runs.iter().map(|r| f(r).as_secs_f64())))
    };
    Run {
        events_per_sec: m(|r| r.events_per_sec),
        batches_per_sec: m(|r| r.batches_per_sec),
        p50: d(|r| r.p50),
        p99: d(|r| r.p99),
        xacts_per_batch: m(|r| r.xacts_per_batch),
        statements_per_batch: m(|r| r.statements_per_batch),
    }
}

/// The `top` statements sent most often in a run of `batches` batches.
fn print_statements(
    map: std::collections::HashMap<String, (u64, f64)>,
    batches: usize,
    top: usize,
) {
    let mut rows: Vec<(String, (u64, f64))> = map.into_iter().collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1 .0));
    let n = batches as f64;
    eprintln!("statements of the first group-commit-on small round ({batches} batches): per batch, ms per batch, text");
    for (text, (count, secs)) in rows.into_iter().take(top) {
        eprintln!("  {:6.2} {:7.3}  {text}", count as f64 / n, secs * 1e3 / n);
    }
}

fn print(label: &str, r: &Run) {
    println!(
        "  {label}: {:.0} events/s, {:.0} batches/s, p50 {:.1} ms, p99 {:.1} ms, {:.2} transactions/batch, {:.1} statements/batch",
        r.events_per_sec,
        r.batches_per_sec,
        r.p50.as_secs_f64() * 1e3,
        r.p99.as_secs_f64() * 1e3,
        r.xacts_per_batch,
        r.statements_per_batch
    );
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing::subscriber::set_global_default(CountStatements)?;
    let n_devices = env_usize("BENCH_DEVICES", 1000);
    let n_tenants = env_usize("BENCH_TENANTS", 10);
    let clients = env_usize("BENCH_CLIENTS", 32);
    let per_batch = env_usize("BENCH_BATCH", 20);
    let small_batches = env_usize("BENCH_SMALL_BATCHES", 4000);
    let large_batches = env_usize("BENCH_LARGE_BATCHES", 48);
    let rounds = env_usize("BENCH_ROUNDS", 3);
    let db = BenchDb::create("fleet", 40).await?;
    if let Ok(sql) = std::env::var("BENCH_SETUP_SQL") {
        sqlx::raw_sql(&sql).execute(&db.pool).await?;
        println!("setup after migrations: {sql}");
    }
    let mut tenants = vec![];
    for t in 0..n_tenants {
        tenants.push(db.tenant(&format!("fleet-{t}")).await?);
    }
    let mut devices = vec![];
    for d in 0..n_devices {
        let name = format!("dev-{d}");
        let token = db.ingest_token(tenants[d % n_tenants], Some(&name)).await?;
        devices.push(Device {
            name,
            user: format!("user-{}", d % 200),
            token,
        });
    }
    let mut big = vec![];
    for c in 0..4 {
        let name = format!("big-{c}");
        let token = db.ingest_token(tenants[c % n_tenants], Some(&name)).await?;
        big.push(Device {
            name,
            user: format!("user-big-{c}"),
            token,
        });
    }
    let defaults = IngestSettings::default();
    let writers = env_usize("BENCH_GROUP_WRITERS", defaults.group_commit_writers);
    let wait_ms = env_usize(
        "BENCH_GROUP_WAIT_MS",
        defaults.group_commit_wait_ms as usize,
    ) as u64;
    let max_events = env_usize("BENCH_GROUP_MAX_EVENTS", defaults.group_commit_max_events);
    let serve = |group_commit| IngestSettings {
        pool_size: 16,
        group_commit,
        group_commit_writers: writers,
        group_commit_wait_ms: wait_ms,
        group_commit_max_events: max_events,
        ..IngestSettings::default()
    };
    let bases = [db.serve(serve(false)).await?, db.serve(serve(true)).await?];
    let small_tokens: Vec<&str> = devices.iter().map(|d| d.token.as_str()).collect();
    let big_tokens: Vec<&str> = big.iter().map(|d| d.token.as_str()).collect();

    let mut rng = StdRng::seed_from_u64(7);
    // Warm-up: every device's sessions and device rows exist, the token caches are filled.
    run(
        &db.pool,
        &bases[1],
        &small_tokens,
        small_round(&mut rng, &devices, clients, n_devices, per_batch, 1),
    )
    .await;
    run(
        &db.pool,
        &bases[0],
        &big_tokens,
        large_round(&mut rng, &big, 4),
    )
    .await;

    let top = env_usize("BENCH_STATEMENT_TOP", 0);
    let mut small: [Vec<Run>; 2] = [vec![], vec![]];
    let mut large: [Vec<Run>; 2] = [vec![], vec![]];
    for r in 0..rounds {
        for arm in [0, 1] {
            let bodies = small_round(&mut rng, &devices, clients, small_batches, per_batch, r);
            let profile = top > 0 && r == 0 && arm == 1;
            if profile {
                *BY_TEXT.lock().unwrap() = Some(Default::default());
            }
            let batches: usize = bodies.iter().map(Vec::len).sum();
            small[arm].push(run(&db.pool, &bases[arm], &small_tokens, bodies).await);
            if let Some(map) = BY_TEXT.lock().unwrap().take() {
                print_statements(map, batches, top);
            }
            let bodies = large_round(&mut rng, &big, large_batches);
            large[arm].push(run(&db.pool, &bases[arm], &big_tokens, bodies).await);
            eprintln!(
                "round {r} group_commit={}: small {:.0} ev/s p99 {:?}, large {:.0} ev/s",
                arm == 1,
                small[arm].last().unwrap().events_per_sec,
                small[arm].last().unwrap().p99,
                large[arm].last().unwrap().events_per_sec
            );
        }
    }
    println!(
        "fleet benchmark: {n_devices} devices in {n_tenants} tenants, {per_batch}-event batches (+ a heartbeat batch every 6th) over {clients} connections, {small_batches} batches per round; baseline 1000-event batches over 4 connections, {large_batches} per round; medians of {rounds} rounds per arm; group commit: {writers} writers, {wait_ms} ms wait, groups up to {max_events} events"
    );
    for (arm, label) in [(0, "group commit off"), (1, "group commit on")] {
        let (s, l) = (summary(&small[arm]), summary(&large[arm]));
        println!("{label}:");
        print("small (fleet)", &s);
        print("large (1000) ", &l);
        println!(
            "  ratio small / large events/s: {:.2}",
            s.events_per_sec / l.events_per_sec
        );
    }
    let (s0, s1) = (summary(&small[0]), summary(&small[1]));
    let (l0, l1) = (summary(&large[0]), summary(&large[1]));
    println!(
        "on / off: small {:.2}x, large {:.2}x",
        s1.events_per_sec / s0.events_per_sec,
        l1.events_per_sec / l0.events_per_sec
    );
    print_row_writes(&db.pool).await?;
    db.drop().await?;
    Ok(())
}

/// The write statistics of the tables every batch updates, and of the sessions' TOAST table (a tracker
/// stored out of line adds a TOAST insert, index insert and dead chunk per rewrite), over the whole run.
async fn print_row_writes(pool: &PgPool) -> anyhow::Result<()> {
    // the counters reach the view when the backends report them (at most once a second while busy)
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let rows: Vec<(String, i64, i64, i64, i64)> = sqlx::query_as(
        "SELECT CASE WHEN t.relid = s.reltoastrelid THEN 'sessions (TOAST)' ELSE t.relname::text END,
                t.n_tup_ins, t.n_tup_upd, t.n_tup_hot_upd, t.n_tup_del
         FROM pg_stat_all_tables t, pg_class s
         WHERE s.oid = 'sessions'::regclass
           AND (t.relid = s.reltoastrelid OR t.relname IN ('sessions', 'usage_rollups',
                'usage_rollups_hourly', 'usage_rollups_narrow', 'usage_rollups_daily', 'usage_rollups_monthly',
                'usage_rollups_colony_daily', 'usage_rollups_colony_monthly',
                'tool_rollups', 'tool_rollups_hourly', 'tool_rollups_daily', 'tool_rollups_monthly',
                'tool_rollups_tenant_hourly', 'tool_rollups_tenant_daily', 'tool_rollups_tenant_monthly', 'devices',
                'stream_sessions'))
         ORDER BY 1",
    )
    .fetch_all(pool)
    .await?;
    println!("row writes over the run (inserts / updates / HOT updates / deletes):");
    for (table, ins, upd, hot, del) in rows {
        println!("  {table:<22} {ins:>9} {upd:>9} {hot:>9} {del:>9}");
    }
    let sizes: (Option<f64>, Option<f64>, Option<f64>) = sqlx::query_as(
        "SELECT avg(pg_column_size(health))::float8, avg(pg_column_size(work))::float8,
                avg(length(health::text))::float8 FROM sessions WHERE health IS NOT NULL",
    )
    .fetch_one(pool)
    .await?;
    if let (Some(h), Some(w), Some(text)) = sizes {
        println!("sessions: tracker {h:.0} bytes stored ({text:.0} as text), work {w:.0} bytes stored (averages)");
    }
    Ok(())
}
