//! Fleet capacity with the cadence the ingest sets: N simulated devices, each a client that pushes the way
//! the agent does and honours the `push_interval_ms` (and `Retry-After`) the ingest answers.
//!
//! Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p apiary-ingest --bench fleet_cadence`
//!
//! Knobs: BENCH_FLEETS (device counts, `100,500,1000,2000,5000`), BENCH_SECS per fleet (60), BENCH_TENANTS
//! (10), BENCH_EVENT_RATE (events per second of an active device, 1.0), BENCH_TRACE (set: print every
//! five seconds what was stored and refused, and the interval asked), BENCH_CITUS_URL (a Citus
//! coordinator with workers, e.g. from `scripts/citus.sh start`: every fleet runs on `DATABASE_URL`'s
//! server and then on the cluster, each in a fresh database). The ingest reads its settings from the
//! environment as a deployment does (`APIARY_CADENCE_BASE_MS`, `APIARY_MIN_BATCHES_IN_FLIGHT`, ...).
//!
//! A device's day, compressed: it alternates working stretches (exponential, mean 120 s) with idle ones
//! (mean 60 s); while it works, LLM turns and tool calls arrive as a Poisson stream at BENCH_EVENT_RATE over
//! its three sessions. Like the agent, it gathers what arrived and pushes one batch when the oldest event
//! has waited the interval the ingest last asked for (1 s before the first answer, the agent's own) plus
//! the agent's jitter (up to 0.5 s, at most a quarter of the interval), or at once when 100 are there;
//! 429/503 are retried as the agent retries them (its backoff, `Retry-After` as the floor), nothing is
//! dropped. 5% of the devices are offline for the first third of the run and come back with that backlog
//! (sent in batches of up to 1000); 10% of the batches are sent twice (an agent retrying after a lost
//! answer: duplicates). Every device has its own device-bound token.
//!
//! When the run's time is up a device stops working and pushes what it still holds at its own cadence (an
//! agent whose user stops), not at once with the whole fleet.
//!
//! Reported per fleet: events/s accepted, batches/s, mean batch size, latency p50/p99, 429 and 5xx
//! counts, freshness (an event's arrival on an online device to the answer that stored it: from then on it
//! is in `/v1/usage`, exactly; the offline devices' backlog is late by design and not counted) p50/p99,
//! the interval the ingest asked for at the end, CPU seconds of this process (the ingest and the clients)
//! and of the database servers, and both per 1000 events stored, the peak RSS of this process so far
//! (the ingest and the clients; fleets run in ascending size). Then the same run's baseline, 1000-event
//! batches over 4 connections (events/s and CPU per 1000 events), and the ratios: events/s (bounded by
//! what the fleet offers, about 0.67 events/s a device) and CPU per event (what a fleet's event costs
//! against a large batch's). At the end of each fleet every tenant's `/v1/usage` totals are compared
//! with a raw scan of its stored events.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use apiary_ingest::config::IngestSettings;
use apiary_plumbing::backoff::{parse_retry_after, BackoffPolicy};
use chrono::Utc;
use common::{env_usize, gzip, percentile, BenchDb};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use uuid::Uuid;

#[path = "common/mod.rs"]
mod common;

const MODELS: [&str; 3] = ["claude-sonnet-4-5", "gpt-5", "gemini-2.5-pro"];

fn usage_event(rng: &mut StdRng, session: &str) -> Value {
    let (kind, data) = if rng.gen_bool(0.6) {
        (
            "llm.turn",
            json!({ "model": MODELS[rng.gen_range(0..3)], "input_tokens": rng.gen_range(100..20_000),
            "output_tokens": rng.gen_range(10..2000), "cached_tokens": 0, "cache_creation_tokens": 0,
            "cost_usd": rng.gen_range(1..50_000) as f64 / 1e6, "cost_source": "reported" }),
        )
    } else {
        let tool = ["read_file", "grep", "bash"][rng.gen_range(0..3)];
        (
            "tool.call",
            json!({ "tool_name": tool,
            "status": "completed", "is_error": rng.gen_bool(0.05), "duration_ms": rng.gen_range(1..20_000) }),
        )
    };
    json!({ "schema_version": 1, "event_id": Uuid::new_v4(), "type": kind, "occurred_at": Utc::now(),
        "runtime": "hive", "session_id": session, "agent_role": "queen", "native_type": "x", "data": data })
}

/// What every device adds to.
#[derive(Default)]
struct Tally {
    latencies: Mutex<Vec<Duration>>,
    freshness: Mutex<Vec<Duration>>,
    accepted: AtomicU64,
    batches: AtomicU64,
    too_many: AtomicU64,
    server_errors: AtomicU64,
    asked_ms: AtomicU64,
}

struct Device {
    name: String,
    user: String,
    token: String,
}

/// The agent's retry delays (its defaults: `push.backoff_base_ms` 1000, `push.backoff_cap_ms` 300000).
const AGENT_BACKOFF: BackoffPolicy = BackoffPolicy {
    base: Duration::from_secs(1),
    cap: Duration::from_secs(300),
};

/// Posts until the ingest stores the batch (retrying 429/503 as the agent does: after its backoff, with
/// `Retry-After` as the floor); returns the answer.
async fn push(
    client: &reqwest::Client,
    url: &str,
    d: &Device,
    body: &[u8],
    tally: &Tally,
) -> Value {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let t0 = Instant::now();
        let sent = client
            .post(url)
            .bearer_auth(&d.token)
            .header("content-type", "application/json")
            .header("content-encoding", "gzip")
            .body(body.to_vec())
            .send()
            .await;
        let r = match sent {
            Ok(r) => r,
            Err(_) => {
                tally.server_errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let status = r.status();
        let retry = r
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let v: Value = r.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            tally.latencies.lock().unwrap().push(t0.elapsed());
            return v;
        }
        if status.as_u16() == 429 {
            tally.too_many.fetch_add(1, Ordering::Relaxed);
        } else if status.is_server_error() {
            tally.server_errors.fetch_add(1, Ordering::Relaxed);
        } else {
            panic!("{status}: {v}");
        }
        tokio::time::sleep(AGENT_BACKOFF.delay(attempt, retry)).await;
    }
}

fn batch_body(d: &Device, sessions: &[String], events: &[Value]) -> Vec<u8> {
    let now = Utc::now();
    let bindings: Vec<Value> = sessions
        .iter()
        .map(|s| json!({ "session_id": s, "user_id": d.user, "first_seen_at": now - chrono::Duration::hours(1) }))
        .collect();
    gzip(
        &serde_json::to_vec(
            &json!({ "schema_version": 1, "batch_id": Uuid::new_v4(), "sent_at": now,
        "agent": { "device_id": d.name, "agent_version": "0.1.0" }, "policy_hash": "bench",
        "sessions": bindings, "events": events }),
        )
        .unwrap(),
    )
}

/// One device for `secs`, as described in the module notes.
async fn device(
    client: reqwest::Client,
    url: String,
    d: Device,
    seed: u64,
    secs: f64,
    rate: f64,
    tally: Arc<Tally>,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let sessions: Vec<String> = (0..3).map(|s| format!("{}_s{s}", d.name)).collect();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let offline_until = if rng.gen_bool(0.05) {
        start + Duration::from_secs_f64(secs / 3.0)
    } else {
        start
    };
    // The agent's own interval until the ingest answers (`push.coalesce_interval_ms`), and each gather's
    // jitter (`push.coalesce_jitter_ms`, at most a quarter of the interval), drawn when the gather starts.
    let mut interval = Duration::from_millis(1_000);
    let mut extra = Duration::ZERO;
    let mut pending: Vec<(Instant, Value)> = Vec::new();
    let mut working = rng.gen_bool(0.67);
    let mut phase_end = start + exp(&mut rng, if working { 120.0 } else { 60.0 });
    let mut next_event = start + exp(&mut rng, 1.0 / rate);
    loop {
        let now = Instant::now();
        if now >= end && pending.is_empty() {
            return;
        }
        if now >= phase_end {
            working = !working;
            phase_end = now + exp(&mut rng, if working { 120.0 } else { 60.0 });
            if working {
                // Arrivals start now: an idle stretch has none (stamping them at the idle stretch's
                // start would count a minute of idleness as their wait).
                next_event = now + exp(&mut rng, 1.0 / rate);
            }
        }
        let was_empty = pending.is_empty();
        while working && next_event <= now && now < end {
            let s = &sessions[rng.gen_range(0..3)];
            pending.push((next_event, usage_event(&mut rng, s)));
            next_event += exp(&mut rng, 1.0 / rate);
        }
        if was_empty && !pending.is_empty() {
            extra = gather_jitter(&mut rng, interval);
        }
        let online = now >= offline_until;
        // At the end of the run a device stops working but pushes what it holds at its own cadence, as
        // an agent whose user stops does: no flush of the whole fleet in one second.
        let due = pending
            .first()
            .is_some_and(|(t, _)| now >= *t + interval + extra);
        if online && (pending.len() >= 100 || due) {
            let take = pending.len().min(1_000);
            let sent: Vec<(Instant, Value)> = pending.drain(..take).collect();
            extra = gather_jitter(&mut rng, interval);
            let events: Vec<Value> = sent.iter().map(|(_, e)| e.clone()).collect();
            let body = batch_body(&d, &sessions, &events);
            let v = push(&client, &url, &d, &body, &tally).await;
            if rng.gen_bool(0.1) {
                push(&client, &url, &d, &body, &tally).await; // a retry after a lost answer
            }
            let stored = Instant::now();
            tally
                .accepted
                .fetch_add(v["accepted"].as_u64().unwrap_or(0), Ordering::Relaxed);
            tally.batches.fetch_add(1, Ordering::Relaxed);
            {
                let mut f = tally.freshness.lock().unwrap();
                // A backlog from offline time is late by design: freshness counts online arrivals.
                f.extend(
                    sent.iter()
                        .filter(|(t, _)| *t >= offline_until)
                        .map(|(t, _)| stored - *t),
                );
            }
            if let Some(ms) = v["push_interval_ms"].as_u64() {
                interval = Duration::from_millis(ms.clamp(1_000, 30_000));
                tally.asked_ms.store(ms, Ordering::Relaxed);
            }
            continue;
        }
        // Sleep until the next thing: an event, the oldest's due time, or a phase change.
        let mut wake = if now < end {
            phase_end.min(end)
        } else {
            now + interval
        };
        if working && now < end {
            wake = wake.min(next_event);
        }
        if let Some((t, _)) = pending.first() {
            wake = wake.min((*t + interval + extra).max(offline_until));
        }
        let wait = wake
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(5));
        tokio::time::sleep(wait).await;
    }
}

/// The agent's jitter of one gather: up to 500 ms, at most a quarter of the interval.
fn gather_jitter(rng: &mut StdRng, interval: Duration) -> Duration {
    let cap = (interval.as_millis() as u64 / 4).min(500);
    Duration::from_millis(if cap == 0 { 0 } else { rng.gen_range(0..cap) })
}

fn exp(rng: &mut StdRng, mean: f64) -> Duration {
    let u: f64 = rng.gen_range(f64::EPSILON..1.0);
    Duration::from_secs_f64(-u.ln() * mean)
}

/// Large batches in the same run: 4 connections, 1000 events each, for `batches` batches.
async fn large_rate(db: &BenchDb, base: &str, tenant: Uuid, batches: usize) -> (u64, f64) {
    let mut tasks = Vec::new();
    let t0 = Instant::now();
    for c in 0..4 {
        let name = format!("big-{c}-{}", rand::random::<u32>());
        let token = db.ingest_token(tenant, Some(&name)).await.unwrap();
        let d = Device {
            user: format!("user-{name}"),
            name,
            token,
        };
        let url = format!("{base}/v1/batches");
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut rng = StdRng::seed_from_u64(c);
            let sessions: Vec<String> = (0..20).map(|s| format!("{}_s{s}", d.name)).collect();
            let tally = Tally::default();
            let mut events = 0;
            for _ in 0..batches / 4 {
                let evs: Vec<Value> = (0..1000)
                    .map(|_| {
                        let s = rng.gen_range(0..20);
                        usage_event(&mut rng, &sessions[s])
                    })
                    .collect();
                let v = push(&client, &url, &d, &batch_body(&d, &sessions, &evs), &tally).await;
                events += v["accepted"].as_u64().unwrap_or(0);
            }
            events
        }));
    }
    let mut events = 0;
    for t in tasks {
        events += t.await.unwrap();
    }
    (events, events as f64 / t0.elapsed().as_secs_f64())
}

/// Every tenant's `/v1/usage` totals against a raw scan of its stored events.
async fn exact(db: &BenchDb, base: &str, tenants: &[Uuid]) -> bool {
    let client = reqwest::Client::new();
    let today = Utc::now().date_naive();
    let (from, to) = (today - chrono::Days::new(2), today + chrono::Days::new(1));
    let mut ok = true;
    for t in tenants {
        let token = db.read_token(*t).await.unwrap();
        let u: Value = client
            .get(format!("{base}/v1/usage?from={from}&to={to}"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let (events, input): (i64, i64) = sqlx::query_as(
            "SELECT count(*)::int8, coalesce(sum((data->>'input_tokens')::int8), 0)::int8 FROM events WHERE tenant_id = $1",
        )
        .bind(t)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        let (e, i) = (
            u["totals"]["events"].as_i64(),
            u["totals"]["input_tokens"].as_i64(),
        );
        if (e, i) != (Some(events), Some(input)) {
            println!("  NOT EXACT tenant {t}: usage {e:?}/{i:?}, raw scan {events}/{input}");
            ok = false;
        }
    }
    ok
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let fleets: Vec<usize> = std::env::var("BENCH_FLEETS")
        .unwrap_or_else(|_| "100,500,1000,2000,5000".into())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let secs = env_usize("BENCH_SECS", 60) as f64;
    let tenants_n = env_usize("BENCH_TENANTS", 10);
    let rate: f64 = std::env::var("BENCH_EVENT_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1.0);
    let mut engines = vec![("PostgreSQL", std::env::var("DATABASE_URL")?)];
    if let Ok(url) = std::env::var("BENCH_CITUS_URL") {
        engines.push(("Citus", url));
    }
    println!("fleet with the ingest's cadence: {secs} s per fleet, {rate} events/s per working device, {tenants_n} tenants");
    println!("| engine | devices | events/s | batches/s | events per batch | p50 | p99 | 429 | 5xx | freshness p50 | p99 | interval asked at the end | CPU this process / PostgreSQL | peak RSS of this process | CPU ms per 1000 events | 1000-event batches: events/s | CPU ms per 1000 events | ratio events/s | ratio of CPU per event (1000-event batches / fleet) | exact |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    for n in fleets {
        for (engine, url) in &engines {
            fleet(engine, url, n, secs, tenants_n, rate).await?;
        }
    }
    Ok(())
}

/// One fleet of `n` devices on the server `url` names (a fresh database), then the same run's 1000-event
/// batches, then the exactness check; prints one row.
async fn fleet(
    engine: &str,
    url: &str,
    n: usize,
    secs: f64,
    tenants_n: usize,
    rate: f64,
) -> anyhow::Result<()> {
    let db = BenchDb::create_at(url, "fleet_cadence", 64).await?;
    let servers = common::servers(&db.pool).await?;
    // The ingest's own settings from the environment (`APIARY_CADENCE_BASE_MS=1000`, ...), as a
    // deployment reads them.
    let settings = IngestSettings::load(None)?;
    settings.validate()?;
    let base = db.serve(settings).await?;
    let mut tenants = Vec::new();
    for t in 0..tenants_n {
        tenants.push(db.tenant(&format!("tenant-{t}")).await?);
    }
    let mut devices = Vec::new();
    for i in 0..n {
        let name = format!("desk-{i:05}");
        let token = db.ingest_token(tenants[i % tenants_n], Some(&name)).await?;
        devices.push(Device {
            user: format!("user-{}", i / 2),
            name,
            token,
        });
    }
    let tally = Arc::new(Tally::default());
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()?;
    let url = format!("{base}/v1/batches");
    let (cpu0, pg0) = (common::own_cpu(), pg_cpu(&servers));
    let t0 = Instant::now();
    // BENCH_TRACE=1: every five seconds, what was stored, refused and asked in them.
    let trace = std::env::var_os("BENCH_TRACE").map(|_| {
        let tally = tally.clone();
        tokio::spawn(async move {
            let (mut a0, mut r0) = (0, 0);
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                let (a, r) = (
                    tally.accepted.load(Ordering::Relaxed),
                    tally.too_many.load(Ordering::Relaxed),
                );
                println!(
                    "  {:>4.0} s: {:>6} stored, {:>5} refused (429), {} ms asked",
                    t0.elapsed().as_secs_f64(),
                    a - a0,
                    r - r0,
                    tally.asked_ms.load(Ordering::Relaxed)
                );
                (a0, r0) = (a, r);
            }
        })
    });
    let tasks: Vec<_> = devices
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            tokio::spawn(device(
                client.clone(),
                url.clone(),
                d,
                i as u64,
                secs,
                rate,
                tally.clone(),
            ))
        })
        .collect();
    for t in tasks {
        t.await?;
    }
    if let Some(t) = trace {
        t.abort();
    }
    let wall = t0.elapsed().as_secs_f64();
    let (cpu1, pg1) = (common::own_cpu(), pg_cpu(&servers));
    // The ingest and the simulated devices together, over the process's life so far (fleets run in
    // ascending size): what the bound on batches in flight keeps from growing past capacity.
    let peak_rss = peak_rss_kib();
    let mut lat = std::mem::take(&mut *tally.latencies.lock().unwrap());
    let mut fresh = std::mem::take(&mut *tally.freshness.lock().unwrap());
    lat.sort();
    fresh.sort();
    let batches = tally.batches.load(Ordering::Relaxed);
    let accepted = tally.accepted.load(Ordering::Relaxed);
    let (large, large_cpu) = {
        let (c0, p0) = (common::own_cpu(), pg_cpu(&servers));
        let (events, eps) = large_rate(&db, &base, tenants[0], 24).await;
        let (c1, p1) = (common::own_cpu(), pg_cpu(&servers));
        (eps, per_1000(c0, c1, p0, p1, events))
    };
    let ok = exact(&db, &base, &tenants).await;
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1e3);
    let cpu = |a: Option<f64>, b: Option<f64>| {
        a.zip(b)
            .map_or("?".into(), |(a, b)| format!("{:.1}", b - a))
    };
    let fleet_cpu = per_1000(cpu0, cpu1, pg0, pg1, accepted);
    let f1 = |v: Option<f64>| v.map_or("?".into(), |v| format!("{v:.1}"));
    println!(
        "| {engine} | {n} | {:.0} | {:.1} | {:.1} | {} | {} | {} | {} | {} | {} | {} ms | {} / {} s | {} | {} | {:.0} | {} | {:.2} | {} | {} |",
        accepted as f64 / wall,
        batches as f64 / wall,
        accepted as f64 / batches.max(1) as f64,
        ms(percentile(&lat, 0.5)),
        ms(percentile(&lat, 0.99)),
        tally.too_many.load(Ordering::Relaxed),
        tally.server_errors.load(Ordering::Relaxed),
        ms(percentile(&fresh, 0.5)),
        ms(percentile(&fresh, 0.99)),
        tally.asked_ms.load(Ordering::Relaxed),
        cpu(cpu0, cpu1),
        cpu(pg0, pg1),
        peak_rss.map_or("?".into(), |kib| format!("{} MiB", kib / 1024)),
        f1(fleet_cpu),
        large,
        f1(large_cpu),
        (accepted as f64 / wall) / large,
        large_cpu
            .zip(fleet_cpu)
            .map_or("?".into(), |(l, f)| format!("{:.2}", l / f)),
        if ok { "yes" } else { "NO" },
    );
    db.drop().await?;
    Ok(())
}

/// CPU milliseconds (this process and the database servers) per 1000 of `events`.
fn per_1000(
    c0: Option<f64>,
    c1: Option<f64>,
    p0: Option<f64>,
    p1: Option<f64>,
    events: u64,
) -> Option<f64> {
    let used = (c1? - c0?) + (p1? - p0?);
    (events > 0).then(|| used * 1e6 / events as f64)
}

/// This process's peak resident set (`VmHWM`), KiB; None where `/proc` does not have it.
fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn pg_cpu(servers: &[(String, String)]) -> Option<f64> {
    servers.iter().map(|(_, dir)| common::server_cpu(dir)).sum()
}
