//! End-to-end benchmark: the real `apiary-agent` and `apiary-ingest` binaries on a fresh database.
//!
//! ```text
//! cargo run --release -p tests --bin bench-e2e -- [--events N] [--backlog N] [--runs R] [--fresh-secs S]
//! ```
//! (needs `DATABASE_URL`, e.g. `eval "$(scripts/pg.sh start)"`; the binaries are built in the same profile)
//!
//! 1. **End to end**: N synthetic Hive turns posted to the agent's intake (NDJSON, 1000 per request, two
//!    producers) with sync on; the clock stops when `/v1/usage` shows all N. Also the intake-only rate.
//! 2. **Backlog drain**: the ingest is down while N_backlog events are taken in; then it comes back and
//!    the clock runs until the agent has nothing pending and `/v1/usage` shows them all.
//! 3. **Freshness** at 1k events/s: 10 events every 10 ms for S seconds; every 100 ms the number posted is
//!    sampled and the time until `/v1/usage` shows at least that many is measured (p50, p95, max).
//!
//! Each measure runs R times on a fresh stack (the backlog once); the medians are printed.

#[path = "../../../bench-support/stats.rs"]
mod stats;
use stats::median;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tests::agent::Agent;
use tests::fixture::synthetic_turns;
use tests::stack::{Api, Cloud};

const SESSION: &str = "session_bench_e2e";
const PUSH_ENV: &[(&str, &str)] = &[
    ("APIARY_PUSH_BACKOFF_BASE_MS", "100"),
    ("APIARY_PUSH_BACKOFF_CAP_MS", "1000"),
    ("APIARY_PUSH_POLL_INTERVAL_MS", "20"),
    ("APIARY_PUSH_HEARTBEAT_INTERVAL_SECS", "3600"),
    ("APIARY_OUTBOX_MAX_BYTES", "8589934592"),
    ("RUST_LOG", "warn"),
];

struct Args {
    events: u64,
    backlog: u64,
    runs: usize,
    fresh_secs: u64,
}

fn args() -> Args {
    let mut a = Args {
        events: 200_000,
        backlog: 1_000_000,
        runs: 3,
        fresh_secs: 10,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let v = pair.get(1).and_then(|v| v.parse().ok()).unwrap_or_else(|| {
            eprintln!("usage: bench-e2e [--events N] [--backlog N] [--runs R] [--fresh-secs S]");
            std::process::exit(2)
        });
        match pair[0].as_str() {
            "--events" => a.events = v,
            "--backlog" => a.backlog = v,
            "--runs" => a.runs = v as usize,
            "--fresh-secs" => a.fresh_secs = v,
            other => {
                eprintln!("unknown flag {other}");
                std::process::exit(2)
            }
        }
    }
    a
}

/// A fresh cloud and an agent with sync on towards it.
async fn stack() -> anyhow::Result<(Cloud, Agent)> {
    let cloud = Cloud::start().await?;
    let agent = Agent::start_with(&cloud.dir.path().join("agent"), None, PUSH_ENV).await?;
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path())?;
    agent.sync_enable(&cloud.ingest.url(), &token_file, false)?;
    Ok((cloud, agent))
}

/// `llm_calls` visible in `/v1/usage` for the bench session.
async fn visible(api: &Api) -> u64 {
    match api
        .usage(
            "session",
            "total",
            "2026-01-01T00:00:00Z",
            "2027-01-01T00:00:00Z",
        )
        .await
    {
        Ok(v) => v["totals"]["llm_calls"].as_u64().unwrap_or(0),
        Err(_) => 0,
    }
}

async fn wait_visible(api: &Api, n: u64, poll: Duration) -> Instant {
    while visible(api).await < n {
        tokio::time::sleep(poll).await;
    }
    Instant::now()
}

/// Posts pre-built bodies with two producers; returns when all are acknowledged.
async fn post_all(agent: &Agent, bodies: Vec<Vec<u8>>) -> anyhow::Result<()> {
    let queue = Arc::new(std::sync::Mutex::new(bodies));
    let producer = |queue: Arc<std::sync::Mutex<Vec<Vec<u8>>>>| async move {
        loop {
            let Some(body) = queue.lock().expect("queue").pop() else {
                return anyhow::Ok(());
            };
            loop {
                let (s, v) = agent.post_events(body.clone()).await?;
                match s {
                    200 => break,
                    503 => tokio::time::sleep(Duration::from_millis(50)).await,
                    _ => anyhow::bail!("intake answered {s}: {v}"),
                }
            }
        }
    };
    let (a, b) = tokio::join!(producer(queue.clone()), producer(queue));
    a.and(b)
}

fn bodies(n: u64, per: u64) -> Vec<Vec<u8>> {
    (0..n.div_ceil(per))
        .map(|i| synthetic_turns(SESSION, 1 + i * per, per.min(n - i * per)))
        .rev()
        .collect()
}

/// `/proc/loadavg` (other work on the machine skews every figure).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

async fn end_to_end(n: u64) -> anyhow::Result<(f64, f64)> {
    let (cloud, agent) = stack().await?;
    let api = cloud.read_api();
    let bodies = bodies(n, 1000);
    let t0 = Instant::now();
    post_all(&agent, bodies).await?;
    let intake = t0.elapsed();
    let done = wait_visible(&api, n, Duration::from_millis(50)).await;
    let e2e = done - t0;
    Ok((
        n as f64 / e2e.as_secs_f64(),
        n as f64 / intake.as_secs_f64(),
    ))
}

/// The ingest alone: the same turns as canonical 1000-event batches posted by two senders, no agent.
async fn ingest_direct(n: u64) -> anyhow::Result<f64> {
    let cloud = Cloud::start().await?;
    let api = cloud.ingest_api();
    let batches: Vec<Vec<u8>> = (0..n.div_ceil(1000))
        .map(|i| {
            let events = tests::fixture::synthetic_canonical(
                "session_bench_direct",
                1 + i * 1000,
                1000.min(n - i * 1000),
            );
            tests::fixture::batch_body(&events, "dev-bench")
        })
        .collect();
    let queue = Arc::new(std::sync::Mutex::new(batches));
    let sender = |queue: Arc<std::sync::Mutex<Vec<Vec<u8>>>>, api: Api| async move {
        loop {
            let Some(body) = queue.lock().expect("queue").pop() else {
                return anyhow::Ok(());
            };
            let (s, v) = api.post_batch(&body).await?;
            anyhow::ensure!(s == 200, "ingest answered {s}: {v}");
        }
    };
    let t0 = Instant::now();
    let (a, b) = tokio::join!(sender(queue.clone(), api.clone()), sender(queue, api));
    a.and(b)?;
    Ok(n as f64 / t0.elapsed().as_secs_f64())
}

async fn backlog_drain(n: u64) -> anyhow::Result<(f64, f64, f64)> {
    let (mut cloud, agent) = stack().await?;
    let api = cloud.read_api();
    cloud.ingest.kill();
    let bodies = bodies(n, 1000);
    let t0 = Instant::now();
    post_all(&agent, bodies).await?;
    let intake = n as f64 / t0.elapsed().as_secs_f64();
    cloud.ingest.restart().await?;
    let back = Instant::now();
    agent
        .wait_counters(Duration::from_secs(3600), "backlog drained", |c| {
            c.pending == 0
        })
        .await?;
    let drained = back.elapsed();
    let visible_at = wait_visible(&api, n, Duration::from_millis(200)).await;
    Ok((
        n as f64 / drained.as_secs_f64(),
        n as f64 / (visible_at - back).as_secs_f64(),
        intake,
    ))
}

async fn freshness(secs: u64) -> anyhow::Result<(f64, f64, f64)> {
    let (cloud, agent) = stack().await?;
    let api = cloud.read_api();
    let posted = Arc::new(AtomicU64::new(0));
    let samples = Arc::new(std::sync::Mutex::new(Vec::<(Instant, u64)>::new()));
    let stop = Instant::now() + Duration::from_secs(secs);
    let producer = {
        let posted = posted.clone();
        async move {
            let mut tick = tokio::time::interval(Duration::from_millis(10));
            let mut seq = 1;
            while Instant::now() < stop {
                tick.tick().await;
                let (s, v) = agent.post_events(synthetic_turns(SESSION, seq, 10)).await?;
                anyhow::ensure!(s == 200, "intake answered {s}: {v}");
                seq += 10;
                posted.store(seq - 1, Ordering::SeqCst);
            }
            anyhow::Ok(agent)
        }
    };
    let sampler = {
        let (posted, samples) = (posted.clone(), samples.clone());
        async move {
            while Instant::now() < stop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let n = posted.load(Ordering::SeqCst);
                samples.lock().expect("samples").push((Instant::now(), n));
            }
        }
    };
    let mut latencies = vec![];
    let poller = async {
        let mut next = 0;
        loop {
            let seen = visible(&api).await;
            let now = Instant::now();
            let s = samples.lock().expect("samples").clone();
            while next < s.len() && s[next].1 <= seen {
                latencies.push((now - s[next].0).as_secs_f64());
                next += 1;
            }
            if Instant::now() > stop + Duration::from_secs(30)
                || (Instant::now() > stop && next == s.len())
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let (agent, _, _) = tokio::join!(producer, sampler, poller);
    drop(agent?);
    latencies.sort_by(f64::total_cmp);
    anyhow::ensure!(!latencies.is_empty(), "no freshness sample became visible");
    let p = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    Ok((p(0.5), p(0.95), p(1.0)))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let a = args();
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    println!(
        "bench-e2e ({profile} build): events={} backlog={} runs={} fresh_secs={}; load average {}",
        a.events,
        a.backlog,
        a.runs,
        a.fresh_secs,
        loadavg()
    );
    if a.runs > 0 && a.events > 0 {
        let (mut e2e, mut intake) = (vec![], vec![]);
        for run in 0..a.runs {
            let (r, i) = end_to_end(a.events).await?;
            println!("  run {run}: end to end {r:.0} events/s (intake alone {i:.0} events/s)");
            e2e.push(r);
            intake.push(i);
        }
        let mut direct = vec![];
        for _ in 0..a.runs {
            direct.push(ingest_direct(a.events).await?);
        }
        println!(
            "END TO END (intake -> visible in /v1/usage), median of {}: {:.0} events/s \
             (agent intake alone {:.0} events/s; ingest alone, 1000-event batches from two \
             senders, {:.0} events/s)",
            a.runs,
            median(e2e),
            median(intake),
            median(direct)
        );
    }
    if a.backlog > 0 {
        let (drain, visible, intake) = backlog_drain(a.backlog).await?;
        println!(
            "BACKLOG of {} events (taken in at {intake:.0} events/s while the ingest was down): \
             drained at {drain:.0} events/s, all visible in /v1/usage at {visible:.0} events/s",
            a.backlog
        );
    }
    if a.runs > 0 && a.fresh_secs > 0 {
        let mut p50s = vec![];
        for run in 0..a.runs {
            let (p50, p95, max) = freshness(a.fresh_secs).await?;
            println!(
                "  run {run}: freshness at 1k events/s p50 {:.0} ms, p95 {:.0} ms, max {:.0} ms",
                p50 * 1e3,
                p95 * 1e3,
                max * 1e3
            );
            p50s.push(p50);
        }
        println!(
            "FRESHNESS at 1k events/s (intake -> visible in /v1/usage), median p50 of {}: {:.0} ms",
            a.runs,
            median(p50s) * 1e3
        );
    }
    println!("load average at the end: {}", loadavg());
    Ok(())
}
