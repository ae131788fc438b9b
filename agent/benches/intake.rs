//! Intake benchmark — a program that prints figures (`cargo bench -p apiary-agent --bench intake`).
//!
//! 1. **Throughput**: durable HTTP NDJSON intake of realistic Hive events (the durable lines of the
//!    fixture day, replicated with shifted `seq` so every event id is new) into the real `apiary-agent`
//!    binary, against raw rusqlite batched inserts (1000 rows per transaction, same schema, same pragmas,
//!    same prepared rows) in the same run. Medians of several runs, and their ratio.
//! 2. **Latency**: p50/p99/max ack latency with 10k events/s offered open-loop (20 events per request
//!    every 2 ms, measured from the scheduled send time, so a stall is not hidden), next to the device's
//!    own floor in the same run (a 16 KiB write + fsync: no durable ack can beat it).
//! 4. **OTLP** (`otlp`): OTLP/HTTP protobuf intake (`POST /v1/traces`, GenAI chat spans, 1000 per export)
//!    next to NDJSON intake of as many Hive events, alternating in the same run: events/s (medians), and
//!    ack p50/p99 with 10k events/s offered open-loop to each (20 per request every 2 ms).
//! 3. **Memory**: the agent's RSS (VmRSS, and peak VmHWM) with a 1M-event backlog.
//!
//! Environment: `BENCH_EVENTS` (per throughput run, default 200000), `BENCH_RUNS` (default 5),
//! `BENCH_BACKLOG` (default 1000000), `BENCH_DIR` (where data dirs go, default the system temp dir),
//! `BENCH_PARTS` (comma-separated subset of `throughput,latency,memory,otlp`; default all four).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{bodies, env_usize, median, percentile, post_to, Agent};

use apiary_agent::outbox::{open_raw_writer, Item, PreparedEvent};
use apiary_schema::hive::Zone;
use apiary_schema::{process_value, Policy, ProcessOptions};
use serde_json::Value;

const BODY_EVENTS: usize = 1000;
const CONNECTIONS: usize = 4;

/// `n` realistic durable Hive lines: the fixture day's durable lines, replayed as many days as needed
/// (each replica's timestamps one day later and its `seq` shifted, so every event id is new and time
/// moves forward as it does in a live runtime).
fn realistic_lines(n: usize) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hive/day");
    let text = std::fs::read_to_string(root.join("event_logs/20261103_090000.jsonl")).unwrap();
    let policy = Policy::default_policy();
    let opts = ProcessOptions {
        policy: &policy,
        zone: Zone::Utc,
        source_identity: None,
        session_hint: None,
        colony: None,
    };
    let templates: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["seq"].is_u64())
        .filter(|v| {
            matches!(
                process_value(v, &opts),
                Ok(apiary_schema::Outcome::Kept { .. })
            )
        })
        .collect();
    let mut out = Vec::with_capacity(n);
    let mut replica = 0u64;
    while out.len() < n {
        replica += 1;
        for t in &templates {
            let mut v = t.clone();
            v["seq"] = (t["seq"].as_u64().unwrap() + replica * 100_000).into();
            let at = chrono::NaiveDateTime::parse_from_str(
                t["timestamp"].as_str().unwrap(),
                "%Y-%m-%dT%H:%M:%S%.f",
            )
            .unwrap();
            v["timestamp"] = (at + chrono::Days::new(replica))
                .format("%Y-%m-%dT%H:%M:%S%.6f")
                .to_string()
                .into();
            out.push(v.to_string());
            if out.len() == n {
                break;
            }
        }
    }
    out
}

fn prepared(lines: &[String]) -> Vec<PreparedEvent> {
    let policy = Policy::default_policy();
    let opts = ProcessOptions {
        policy: &policy,
        zone: Zone::Utc,
        source_identity: None,
        session_hint: None,
        colony: None,
    };
    lines
        .iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            match Item::from_outcome(&process_value(&v, &opts).unwrap()) {
                Item::Kept(e) => e,
                _ => unreachable!(),
            }
        })
        .collect()
}

/// Raw rusqlite: the same rows into the same schema, 1000 per transaction, synchronous=FULL.
fn raw_rate(rows: &[PreparedEvent], dir: &Path) -> f64 {
    let path = dir.join("raw.db");
    let mut conn = open_raw_writer(&path).unwrap();
    // Plain SQLite: checkpoints run inside commits (the agent moves them to a thread of their own).
    conn.pragma_update(None, "wal_autocheckpoint", 1000)
        .unwrap();
    let start = Instant::now();
    for chunk in rows.chunks(BODY_EVENTS) {
        let tx = conn.transaction().unwrap();
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO events (event_id, state, held, kind, session_id, occurred_at,
                        received_at, policy_id, bytes, body) VALUES (?1, 0, 1, ?2, ?3, ?4, ?5, 1, ?6, ?7)",
                )
                .unwrap();
            for e in chunk {
                stmt.execute(rusqlite::params![
                    e.event_id.as_bytes().as_slice(),
                    e.kind.as_str(),
                    e.session_id,
                    e.occurred_at_ms,
                    e.occurred_at_ms,
                    e.body.len() as i64,
                    e.body
                ])
                .unwrap();
            }
        }
        tx.commit().unwrap();
    }
    rows.len() as f64 / start.elapsed().as_secs_f64()
}

/// Posts `bodies` over `CONNECTIONS` connections; returns events/s.
async fn post_all(agent: &Agent, bodies: &[bytes::Bytes], events: usize) -> f64 {
    let url = format!("{}/v1/events", agent.base);
    let ndjson = "application/x-ndjson";
    post_to(&url, ndjson, &agent.token, bodies, events, CONNECTIONS)
        .await
        .0
}

/// Open-loop: `per_req` events every `every`, for `total` events; returns sorted latencies (ms).
async fn latencies(agent: &Agent, lines: &[String], per_req: usize, every: Duration) -> Vec<f64> {
    let url = format!("{}/v1/events", agent.base);
    open_loop(
        &url,
        "application/x-ndjson",
        &agent.token,
        bodies(lines, per_req),
        every,
    )
    .await
}

/// Open-loop: one of `bodies` every `every`; returns sorted latencies (ms) from the scheduled send time.
async fn open_loop(
    url: &str,
    ctype: &'static str,
    token: &str,
    bodies: Vec<bytes::Bytes>,
    every: Duration,
) -> Vec<f64> {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let (url, token) = (url.to_string(), token.to_string());
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for (i, body) in bodies.into_iter().enumerate() {
        let at = start + every * i as u32;
        tokio::time::sleep_until(at).await;
        let (client, url, token) = (client.clone(), url.clone(), token.clone());
        tasks.push(tokio::spawn(async move {
            let r = client
                .post(&url)
                .bearer_auth(&token)
                .header("content-type", ctype)
                .body(body)
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success());
            at.elapsed().as_secs_f64() * 1000.0
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out.sort_by(f64::total_cmp);
    out
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let n = env_usize("BENCH_EVENTS", 200_000);
    let runs = env_usize("BENCH_RUNS", 5);
    let backlog = env_usize("BENCH_BACKLOG", 1_000_000);
    let base = std::env::var("BENCH_DIR").map_or_else(|_| std::env::temp_dir(), Into::into);
    let parts =
        std::env::var("BENCH_PARTS").unwrap_or_else(|_| "throughput,latency,memory,otlp".into());
    let part = |name: &str| parts.split(',').any(|p| p.trim() == name);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!("intake benchmark: {n} realistic durable Hive events per run, {runs} runs, {CONNECTIONS} connections, {BODY_EVENTS} events per body");
    let lines = realistic_lines(n.max(backlog) + 100_000);
    let rows = prepared(&lines[..n]);
    let bytes: usize = rows.iter().map(|r| r.body.len()).sum();
    println!("  mean canonical event: {} bytes", bytes / n);
    let body_set = bodies(&lines[..n], BODY_EVENTS);
    let (mut raw, mut http) = (Vec::new(), Vec::new());
    for run in 0..runs {
        if !part("throughput") {
            break;
        }
        let dir = tempfile::tempdir_in(&base).unwrap();
        let r = raw_rate(&rows, dir.path());
        let dir = tempfile::tempdir_in(&base).unwrap();
        let agent = Agent::start(dir.path());
        let h = rt.block_on(post_all(&agent, &body_set, n));
        agent.stop();
        println!(
            "  run {}: raw rusqlite {:>9.0} ev/s   HTTP intake {:>9.0} ev/s",
            run + 1,
            r,
            h
        );
        raw.push(r);
        http.push(h);
    }
    if part("throughput") {
        let (raw_m, http_m) = (median(raw), median(http));
        println!("throughput (median): raw {raw_m:.0} ev/s, HTTP durable intake {http_m:.0} ev/s, ratio {:.2}", http_m / raw_m);
    }

    if part("latency") {
        latency_part(&rt, &lines, &base);
    }
    if part("memory") {
        memory_part(&rt, &lines, &base, backlog);
    }
    if part("otlp") {
        otlp_part(&rt, &lines[..n], runs, &base);
    }
}

/// `n` GenAI chat spans from `first` as OTLP protobuf exports of `per` spans (ids from the number).
fn span_bodies(first: u64, n: usize, per: usize) -> Vec<bytes::Bytes> {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value::Value as V, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use prost::Message;
    let kv = |k: &str, v: V| KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..KeyValue::default()
    };
    let ids: Vec<u64> = (first..first + n as u64).collect();
    ids.chunks(per)
        .map(|chunk| {
            let spans = chunk
                .iter()
                .map(|&i| Span {
                    trace_id: (u128::from(i / 8) | 1 << 100).to_be_bytes().to_vec(),
                    span_id: (i | 1 << 60).to_be_bytes().to_vec(),
                    name: "chat claude-sonnet-4-5".into(),
                    start_time_unix_nano: 1_793_613_600_000_000_000 + i * 1_000_000,
                    end_time_unix_nano: 1_793_613_600_000_000_000 + i * 1_000_000 + 900_000,
                    attributes: vec![
                        kv("gen_ai.operation.name", V::StringValue("chat".into())),
                        kv("gen_ai.provider.name", V::StringValue("anthropic".into())),
                        kv(
                            "gen_ai.request.model",
                            V::StringValue("claude-sonnet-4-5".into()),
                        ),
                        kv(
                            "gen_ai.conversation.id",
                            V::StringValue(format!("conv-{}", i / 200)),
                        ),
                        kv("gen_ai.usage.input_tokens", V::IntValue(18_250)),
                        kv("gen_ai.usage.cache_read.input_tokens", V::IntValue(12_000)),
                        kv("gen_ai.usage.output_tokens", V::IntValue(412)),
                        kv(
                            "gen_ai.response.finish_reasons",
                            V::StringValue("tool_use".into()),
                        ),
                    ],
                    ..Span::default()
                })
                .collect();
            let r = ExportTraceServiceRequest {
                resource_spans: vec![ResourceSpans {
                    scope_spans: vec![ScopeSpans {
                        spans,
                        ..ScopeSpans::default()
                    }],
                    ..ResourceSpans::default()
                }],
            };
            bytes::Bytes::from(r.encode_to_vec())
        })
        .collect()
}

/// OTLP protobuf intake next to NDJSON intake, alternating runs on fresh agents, then ack latency.
fn otlp_part(rt: &tokio::runtime::Runtime, lines: &[String], runs: usize, base: &Path) {
    let n = lines.len();
    let (mut ndjson, mut otlp) = (Vec::new(), Vec::new());
    let ndjson_bodies = bodies(lines, BODY_EVENTS);
    for run in 0..runs {
        let spans = span_bodies(run as u64 * n as u64, n, BODY_EVENTS);
        let dir = tempfile::tempdir_in(base).unwrap();
        let agent = Agent::start(dir.path());
        let url = format!("{}/v1/traces", agent.otlp);
        let o = rt
            .block_on(post_to(
                &url,
                "application/x-protobuf",
                &agent.token,
                &spans,
                n,
                CONNECTIONS,
            ))
            .0;
        agent.stop();
        let dir = tempfile::tempdir_in(base).unwrap();
        let agent = Agent::start(dir.path());
        let h = rt.block_on(post_all(&agent, &ndjson_bodies, n));
        agent.stop();
        println!(
            "  run {}: OTLP protobuf {o:>9.0} spans/s   NDJSON {h:>9.0} ev/s",
            run + 1
        );
        otlp.push(o);
        ndjson.push(h);
    }
    let (o, h) = (median(otlp), median(ndjson));
    println!(
        "OTLP intake (median): {o:.0} spans/s, NDJSON {h:.0} ev/s, ratio {:.2}",
        o / h
    );
    let dir = tempfile::tempdir_in(base).unwrap();
    let agent = Agent::start(dir.path());
    let url = format!("{}/v1/traces", agent.otlp);
    let spans = span_bodies(1 << 40, 50_000, 20);
    let lo = rt.block_on(open_loop(
        &url,
        "application/x-protobuf",
        &agent.token,
        spans,
        Duration::from_millis(2),
    ));
    let lh = rt.block_on(latencies(
        &agent,
        &lines[..50_000.min(n)],
        20,
        Duration::from_millis(2),
    ));
    println!(
        "ack latency at 10k ev/s offered: OTLP p50 {:.2} ms, p99 {:.2} ms; NDJSON p50 {:.2} ms, p99 {:.2} ms (same agent, one after the other)",
        percentile(&lo, 0.5), percentile(&lo, 0.99), percentile(&lh, 0.5), percentile(&lh, 0.99)
    );
    agent.stop();
}

/// The device's own commit floor, measured in the same run: a 16 KiB write plus `fsync` (what one small
/// SQLite WAL commit needs at least), 500 times. Returns sorted latencies (ms).
fn fsync_floor(dir: &Path) -> Vec<f64> {
    use std::io::{Seek, Write};
    let mut f = std::fs::File::create(dir.join("fsync.probe")).unwrap();
    let page = vec![7u8; 16 * 1024];
    let mut out = Vec::new();
    for _ in 0..500 {
        f.rewind().unwrap();
        let t = Instant::now();
        f.write_all(&page).unwrap();
        f.sync_all().unwrap();
        out.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    out.sort_by(f64::total_cmp);
    out
}

fn latency_part(rt: &tokio::runtime::Runtime, lines: &[String], base: &Path) {
    let dir = tempfile::tempdir_in(base).unwrap();
    let floor = fsync_floor(dir.path());
    println!(
        "device floor: 16 KiB write + fsync p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        percentile(&floor, 0.5),
        percentile(&floor, 0.99),
        floor[floor.len() - 1]
    );
    let agent = Agent::start(dir.path());
    let offered = &lines[lines.len() - 100_000..];
    let lat = rt.block_on(latencies(&agent, offered, 20, Duration::from_millis(2)));
    println!(
        "ack latency at 10k ev/s offered (20 ev/request every 2 ms, {} requests): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        lat.len(), percentile(&lat, 0.5), percentile(&lat, 0.99), lat[lat.len() - 1]
    );
    let status = rt.block_on(agent.status());
    let health = &status["health"];
    println!(
        "  the writer committed {} groups carrying {} submissions",
        health["commits"], health["ops_committed"]
    );
    agent.stop();
}

fn memory_part(rt: &tokio::runtime::Runtime, lines: &[String], base: &Path, backlog: usize) {
    let dir = tempfile::tempdir_in(base).unwrap();
    let agent = Agent::start(dir.path());
    let (idle_rss, _) = agent.rss_mib();
    let backlog_bodies = bodies(&lines[..backlog], BODY_EVENTS);
    let rate = rt.block_on(post_all(&agent, &backlog_bodies, backlog));
    let (rss, hwm) = agent.rss_mib();
    let status = rt.block_on(agent.status());
    let (rss_after_status, _) = agent.rss_mib();
    println!(
        "RSS with a {} event backlog: {rss:.1} MiB (idle at start {idle_rss:.1} MiB, peak {hwm:.1} MiB, after a status query {rss_after_status:.1} MiB); filled at {rate:.0} ev/s; outbox {} MiB used",
        status["pending_events"], status["used_bytes"].as_u64().unwrap_or(0) >> 20
    );
    agent.stop();
}
