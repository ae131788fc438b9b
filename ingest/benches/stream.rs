//! Live stream benchmark (`GET /v1/stream`): many SSE subscribers on one replica, the real server in this
//! process (port 0) against Postgres.
//!
//! Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p apiary-ingest --bench stream`
//! Knobs (env): BENCH_SUBSCRIBERS (default 1000), BENCH_ROUNDS (default 3), BENCH_BATCHES (batches per
//! phase, default 60), BENCH_CLIENTS (default 4), BENCH_PROBES (idle probes, default 40),
//! BENCH_SUBSCRIBER_USER (set: every subscriber is a read token bound to that user, who owns nothing of
//! the load: connected but receiving nothing — what the connections cost apart from delivery).
//!
//! Prints:
//! - latency from batch commit to event delivered: a probe batch (one event, a new session) is posted
//!   and each subscriber notes when that session's status event reaches it; "commit" is when the POST
//!   was answered (the batch committed just before). Idle (probes only) and under load (probes every
//!   200 ms during the B phases below). Every subscriber × probe is one sample.
//! - ingest throughput without subscribers (A) and with them connected (B), alternating ABBA… in one
//!   run; each subscriber is a tenant-wide reader, so it receives every status and usage event of the
//!   load (the worst case: a thousand dashboards of one busy tenant). Medians and the B/A ratio.
//!
//! The subscribers run in this process too, on the same cores: their reading is part of what B costs.
//! Uses a fresh database `apiary_bench_stream_<random>` and drops it at the end.

#[path = "common/mod.rs"]
mod common;

use common::{gzip, median, percentile};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use apiary_ingest::auth::Scope;
use apiary_ingest::config::IngestSettings;
use apiary_ingest::startup::Application;
use chrono::Utc;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use sqlx::postgres::PgPoolOptions;
use sqlx::Connection;
use tokio::sync::{watch, Mutex};
use uuid::Uuid;

fn env_usize(k: &str, d: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

/// One 1000-event batch of client `c` (its own device and 200 sessions, 20 active per batch).
fn load_batch(rng: &mut StdRng, c: usize, k: usize) -> Vec<u8> {
    let now = Utc::now();
    let events: Vec<Value> = (0..1000)
        .map(|_| {
            let s = (k * 7 + rng.gen_range(0..20)) % 200;
            let at = now - chrono::Duration::seconds(3600)
                + chrono::Duration::milliseconds(k as i64 * 3000 + rng.gen_range(0..30_000));
            let (kind, data) = if rng.gen_bool(0.6) {
                ("llm.turn", json!({ "model": "claude-sonnet-4-5", "input_tokens": rng.gen_range(100..20_000),
                    "output_tokens": rng.gen_range(10..2000), "cost_usd": rng.gen_range(1..50_000) as f64 / 1e6,
                    "cost_source": "reported", "stop_reason": "tool_use" }))
            } else {
                ("tool.call", json!({ "tool_name": "read_file", "status": "completed", "is_error": rng.gen_bool(0.05) }))
            };
            json!({ "schema_version": 1, "event_id": Uuid::new_v4(), "type": kind, "occurred_at": at,
                "runtime": "hive", "session_id": format!("dev{c}_session_{s}"), "agent_role": "queen",
                "native_type": "x", "data": data })
        })
        .collect();
    let b = json!({ "schema_version": 1, "batch_id": Uuid::new_v4(), "sent_at": now,
        "agent": { "device_id": format!("bench-dev-{c}"), "agent_version": "0.1.0" },
        "policy_hash": "bench", "sessions": [], "events": events });
    gzip(&serde_json::to_vec(&b).unwrap())
}

/// A probe: one event in a new session, whose status event the subscribers time.
fn probe_batch(n: u32) -> Vec<u8> {
    let b = json!({ "schema_version": 1, "batch_id": Uuid::new_v4(), "sent_at": Utc::now(),
        "agent": { "device_id": "probe-dev", "agent_version": "0.1.0" }, "policy_hash": "bench", "sessions": [],
        "events": [{ "schema_version": 1, "event_id": Uuid::new_v4(), "type": "llm.turn", "occurred_at": Utc::now(),
            "runtime": "hive", "session_id": format!("probe_{n:06}"), "agent_role": "queen", "native_type": "x",
            "data": { "model": "m", "input_tokens": 1, "output_tokens": 1, "cost_usd": 0.001, "cost_source": "reported" } }] });
    gzip(&serde_json::to_vec(&b).unwrap())
}

struct Target {
    base: String,
    ingest: String,
    read: String,
    http: reqwest::Client,
}

impl Target {
    async fn post(&self, body: Vec<u8>) {
        let r = self
            .http
            .post(format!("{}/v1/batches", self.base))
            .bearer_auth(&self.ingest)
            .header("content-type", "application/json")
            .header("content-encoding", "gzip")
            .body(body)
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
        r.bytes().await.unwrap();
    }
}

/// When each probe's session first showed up on one subscriber's stream.
type Seen = HashMap<u32, Instant>;

/// One subscriber: reads its stream until `stop`, noting probes; counts bytes.
async fn subscribe(
    t: Arc<Target>,
    ready: tokio::sync::mpsc::Sender<()>,
    mut stop: watch::Receiver<bool>,
    bytes: Arc<AtomicU64>,
) -> Seen {
    let mut resp = t
        .http
        .get(format!("{}/v1/stream", t.base))
        .bearer_auth(&t.read)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success());
    let mut seen = Seen::new();
    let mut carry: Vec<u8> = Vec::new();
    let mut is_ready = false;
    loop {
        let chunk = tokio::select! {
            c = resp.chunk() => c,
            _ = stop.wait_for(|s| *s) => break,
        };
        let Ok(Some(chunk)) = chunk else { break };
        let now = Instant::now();
        bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        carry.extend_from_slice(&chunk);
        if !is_ready && find(&carry, "ready").is_some() {
            is_ready = true;
            let _ = ready.send(()).await;
        }
        let mut from = 0;
        while let Some(p) = find(&carry[from..], "\"probe_") {
            let at = from + p + 7;
            let digits = carry
                .get(at..at + 6)
                .and_then(|d| std::str::from_utf8(d).ok());
            match digits.and_then(|d| d.parse::<u32>().ok()) {
                Some(n) => {
                    seen.entry(n).or_insert(now);
                    from = at + 6;
                }
                None => break,
            }
        }
        // Keep a tail in case a marker is split across chunks.
        let keep_from = from.max(carry.len().saturating_sub(16));
        carry.drain(..keep_from);
    }
    seen
}

/// `needle` in `hay` (the stream is ASCII JSON; `str::find` is memchr-accelerated, a naive byte-window
/// scan of every chunk cost the subscribers a visible share of the CPU).
fn find(hay: &[u8], needle: &str) -> Option<usize> {
    String::from_utf8_lossy(hay).find(needle)
}

struct Subscribers {
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<Seen>>,
    bytes: Arc<AtomicU64>,
}

async fn connect(t: &Arc<Target>, n: usize) -> Subscribers {
    let (stop, stop_rx) = watch::channel(false);
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::channel(n.max(1));
    let bytes = Arc::new(AtomicU64::new(0));
    let tasks = (0..n)
        .map(|_| {
            tokio::spawn(subscribe(
                t.clone(),
                ready_tx.clone(),
                stop_rx.clone(),
                bytes.clone(),
            ))
        })
        .collect();
    for _ in 0..n {
        tokio::time::timeout(Duration::from_secs(120), ready_rx.recv())
            .await
            .expect("subscribers connect");
    }
    Subscribers { stop, tasks, bytes }
}

impl Subscribers {
    async fn close(self) -> (Vec<Seen>, u64) {
        self.stop.send_replace(true);
        let mut out = vec![];
        for t in self.tasks {
            out.push(t.await.unwrap());
        }
        (out, self.bytes.load(Ordering::Relaxed))
    }
}

/// Posts probes `range` one every `every`; returns when each was answered.
async fn probes(t: &Target, range: std::ops::Range<u32>, every: Duration) -> HashMap<u32, Instant> {
    let mut answered = HashMap::new();
    for n in range {
        let body = probe_batch(n);
        t.post(body).await;
        answered.insert(n, Instant::now());
        tokio::time::sleep(every).await;
    }
    answered
}

/// Latencies (ms) of every subscriber × probe; a probe a subscriber never saw counts as missing.
fn latencies(answered: &HashMap<u32, Instant>, seen: &[Seen]) -> (Vec<u64>, usize) {
    let mut out = vec![];
    let mut missing = 0;
    for s in seen {
        for (n, at) in answered {
            match s.get(n) {
                Some(got) => out.push(got.saturating_duration_since(*at).as_millis() as u64),
                None => missing += 1,
            }
        }
    }
    out.sort();
    (out, missing)
}

/// Posts `bodies` over `clients` concurrent connections; returns events/s.
async fn load(t: &Arc<Target>, bodies: Vec<Vec<Vec<u8>>>) -> f64 {
    let total: usize = bodies.iter().map(Vec::len).sum();
    let started = Instant::now();
    let tasks: Vec<_> = bodies
        .into_iter()
        .map(|chunk| {
            let t = t.clone();
            tokio::spawn(async move {
                for body in chunk {
                    t.post(body).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    (total * 1000) as f64 / started.elapsed().as_secs_f64()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let n_subs = env_usize("BENCH_SUBSCRIBERS", 1000);
    let rounds = env_usize("BENCH_ROUNDS", 3);
    let per_phase = env_usize("BENCH_BATCHES", 60);
    let clients = env_usize("BENCH_CLIENTS", 4);
    let n_probes = env_usize("BENCH_PROBES", 40) as u32;
    let db = format!("apiary_bench_stream_{}", rand::random::<u32>());
    let mut admin = sqlx::PgConnection::connect(&url).await?;
    sqlx::query(&format!("CREATE DATABASE {db}"))
        .execute(&mut admin)
        .await?;
    let db_url = match url.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{db}"),
        None => unreachable!("a URL with a database"),
    };
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .connect(&db_url)
        .await?;
    apiary_ingest::store::migrate(&pool).await?;
    let tenant = apiary_ingest::store::admin::create_tenant(&pool, "bench").await?;
    let sub_user = std::env::var("BENCH_SUBSCRIBER_USER").ok();
    let token = |scope| apiary_ingest::store::admin::TokenSpec {
        tenant: tenant.to_string(),
        scopes: vec![scope],
        user_id: (scope == Scope::Read).then(|| sub_user.clone()).flatten(),
        device_id: None,
    };
    let ingest = apiary_ingest::store::admin::create_token(&pool, &token(Scope::Ingest))
        .await?
        .1;
    let read = apiary_ingest::store::admin::create_token(&pool, &token(Scope::Read))
        .await?
        .1;
    let settings = IngestSettings {
        listen: "127.0.0.1:0".into(),
        rate_limit_per_sec: 1e9,
        rate_limit_burst: 1e9,
        pool_size: 16,
        // The clients share one token: no share of the batches in flight per token.
        max_batches_in_flight_per_token: IngestSettings::default().max_batches_in_flight,
        ..IngestSettings::default()
    };
    let app = Application::build(settings, pool.clone()).await?;
    let t = Arc::new(Target {
        base: format!("http://127.0.0.1:{}", app.port()),
        ingest,
        read,
        http: reqwest::Client::new(),
    });
    tokio::spawn(app.run_until_stopped(std::future::pending()));

    // Bodies of every load phase, built before anything is timed.
    let mut rng = StdRng::seed_from_u64(7);
    let phases = rounds * 2;
    let mut phase_bodies: Vec<Vec<Vec<Vec<u8>>>> = vec![];
    for p in 0..phases {
        let mut per_client = vec![Vec::new(); clients];
        for k in 0..per_phase {
            let c = k % clients;
            per_client[c].push(load_batch(&mut rng, c, p * per_phase + k));
        }
        phase_bodies.push(per_client);
    }
    // Warm-up: sessions exist, caches and partitions are ready.
    load(&t, vec![vec![load_batch(&mut rng, 0, 0)]]).await;

    // Idle latency: N subscribers, probes only.
    let t0 = Instant::now();
    let subs = connect(&t, n_subs).await;
    let connect_took = t0.elapsed();
    let answered = probes(&t, 0..n_probes, Duration::from_millis(100)).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (seen, _) = subs.close().await;
    let (idle, idle_missing) = latencies(&answered, &seen);

    // A/B: A without subscribers, B with N connected (and a probe every 200 ms), ABBA order.
    let mut a_eps = vec![];
    let mut b_eps = vec![];
    let mut loaded = vec![];
    let mut loaded_missing = 0;
    let mut delivered_bytes = 0u64;
    let mut next_probe = 100_000u32;
    for (p, bodies) in phase_bodies.into_iter().enumerate() {
        let with = (p % 4 == 1) || (p % 4 == 2);
        if !with {
            a_eps.push(load(&t, bodies).await);
            continue;
        }
        let subs = connect(&t, n_subs).await;
        // Steady state: every subscriber has read its (empty) backlog before the load starts.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let (stop_probes, mut stop_rx) = watch::channel(false);
        let answered = Arc::new(Mutex::new(HashMap::new()));
        let prober = {
            let (t, answered) = (t.clone(), answered.clone());
            let first = next_probe;
            tokio::spawn(async move {
                let mut n = first;
                while !*stop_rx.borrow_and_update() {
                    let got = probes(&t, n..n + 1, Duration::from_millis(200)).await;
                    answered.lock().await.extend(got);
                    n += 1;
                }
                n
            })
        };
        b_eps.push(load(&t, bodies).await);
        stop_probes.send_replace(true);
        next_probe = prober.await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (seen, bytes) = subs.close().await;
        delivered_bytes += bytes;
        let answered = answered.lock().await;
        let (l, m) = latencies(&answered, &seen);
        loaded.extend(l);
        loaded_missing += m;
    }
    loaded.sort();

    let stream_rows: i64 = sqlx::query_scalar("SELECT count(*) FROM stream_events")
        .fetch_one(&pool)
        .await?;
    let who = match &sub_user {
        Some(u) => format!("read tokens bound to user {u:?}, who owns none of the load"),
        None => "tenant-wide readers".to_string(),
    };
    println!("live stream benchmark: {n_subs} SSE subscribers ({who}), {clients} load clients, 1000-event batches, {per_phase} batches per phase, {rounds} rounds of A/B");
    println!(
        "  {n_subs} subscribers connected (first event received) in {:.2} s",
        connect_took.as_secs_f64()
    );
    let show = |what: &str, l: &[u64], missing: usize| {
        if l.is_empty() {
            println!("  {what}: no samples ({missing} missing)");
            return;
        }
        println!(
            "  {what}: commit → delivered p50 {} ms  p95 {} ms  p99 {} ms  max {} ms  ({} samples, {missing} missing)",
            percentile(l, 0.5),
            percentile(l, 0.95),
            percentile(l, 0.99),
            l[l.len() - 1],
            l.len()
        );
    };
    show("idle", &idle, idle_missing);
    show("under load", &loaded, loaded_missing);
    let fmt = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("  ingest A (no subscribers): {} events/s", fmt(&a_eps));
    println!(
        "  ingest B ({n_subs} subscribers): {} events/s",
        fmt(&b_eps)
    );
    let (a, b) = (median(a_eps.iter().copied()), median(b_eps.iter().copied()));
    println!(
        "  medians: A {a:.0} events/s, B {b:.0} events/s, B/A {:.3}",
        b / a
    );
    println!(
        "  stream rows written: {stream_rows}; bytes delivered to subscribers during B: {:.1} MiB",
        delivered_bytes as f64 / (1024.0 * 1024.0)
    );
    pool.close().await;
    sqlx::query(&format!("DROP DATABASE {db} WITH (FORCE)"))
        .execute(&mut admin)
        .await?;
    Ok(())
}
