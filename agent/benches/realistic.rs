//! Realistic intake loads, each measured on this build's agent and on a baseline agent binary in the
//! same run, alternating, so the ratio is the figure (`cargo bench -p apiary-agent --bench realistic`).
//!
//! 1. **mixed**: Hive's debug stream as it comes — ≈55% streaming deltas, ≈20% chatty, ≈25% durable
//!    lines, event times moving forward — NDJSON bodies of 1000 lines over 2 connections (closed loop;
//!    `BENCH_CONNECTIONS` sets another count, to find where the machine's cores, not the loop's
//!    latency, cap the rate).
//!    Input lines/s, and the ack latency of each body (p50/p99).
//!
//! Every part also reports the agent's CPU (user + system, from `/proc/PID/stat`) per 1000 lines (the
//! backfill: per 1000 new events), and that of its outbox writer thread: the one serial step every
//! commit goes through, so the figure that bounds the rate once the parse has cores to spare.
//! 2. **backfill**: durable events only, from `BENCH_SESSIONS` sessions interleaved (each session's
//!    start somewhere in the last 14 days, so consecutive events' times jump back and forth), as the
//!    tailer sees when it catches up on a Hive home or several runtimes post at once; then the same
//!    bodies again (all duplicates).
//! 3. **tail**: a Hive home of `BENCH_SESSIONS` queen sessions (the fixture day's four sessions
//!    replicated, every queen and worker session id new per replica: per-session logs and the debug event
//!    logs, so every event is read twice), from `apiary-agent run --hive-home` to every line committed.
//!
//! Baseline: `BENCH_BASELINE_BIN=/path/to/apiary-agent` (an agent built from the baseline revision:
//! `scripts/bench-baseline.sh REV` builds one and prints its path). Without it, only this build is
//! measured and no ratio is printed.
//!
//! Environment: `BENCH_RUNS` (per arm, default 3), `BENCH_MIXED` (lines, default 300000),
//! `BENCH_BACKFILL` (events, default 200000), `BENCH_SESSIONS` (default 3000), `BENCH_DIR`,
//! `BENCH_PARTS` (subset of `mixed,backfill,tail`), `BENCH_CONNECTIONS` (default 2).

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use apiary_schema::hive::{FilterReason, Zone};
use apiary_schema::{process_value, Outcome, Policy, ProcessOptions};
use common::{bodies, env_usize, median, percentile, post_to, Agent};
use serde_json::Value;

const BODY_LINES: usize = 1000;
const CONNECTIONS: usize = 2;
const DAY: &str = "tests/fixtures/hive/day";

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    Durable,
    Delta,
    Chatty,
}

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(rel)
}

/// The fixture day's debug-log lines by class (what the agent's pipeline makes of them).
fn templates() -> [Vec<Value>; 3] {
    let text =
        std::fs::read_to_string(fixture(DAY).join("event_logs/20261103_090000.jsonl")).unwrap();
    let policy = Policy::default_policy();
    let opts = utc(&policy);
    let mut out: [Vec<Value>; 3] = Default::default();
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        if !v["seq"].is_u64() {
            continue;
        }
        let class = match process_value(&v, &opts) {
            Ok(Outcome::Kept { .. }) => Class::Durable,
            Ok(Outcome::Filtered {
                reason: FilterReason::StreamingDelta,
                ..
            }) => Class::Delta,
            Ok(Outcome::Filtered {
                reason: FilterReason::Chatty | FilterReason::NotDurable,
                ..
            }) => Class::Chatty,
            _ => continue,
        };
        out[class as usize].push(v);
    }
    out
}

/// The pipeline's options for the fixtures: Hive times read as UTC, no source or session hint.
fn utc(policy: &Policy) -> ProcessOptions<'_> {
    ProcessOptions {
        zone: Zone::Utc,
        ..ProcessOptions::new(policy)
    }
}

fn naive(t: chrono::NaiveDateTime) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6f").to_string()
}

/// `n` lines of Hive's mixed debug stream: of every 20, 11 deltas, 4 chatty, 5 durable, interleaved;
/// times 2 ms apart, moving forward from a day ago; every `seq` new.
fn mixed_lines(t: &[Vec<Value>; 3], n: usize) -> Vec<String> {
    let start = chrono::Utc::now().naive_utc() - chrono::Duration::days(1);
    (0..n)
        .map(|i| {
            let slot = (i * 7) % 20;
            let class = match slot {
                0..=10 => Class::Delta,
                11..=14 => Class::Chatty,
                _ => Class::Durable,
            };
            let list = &t[class as usize];
            let mut v = list[(i / 20 + slot) % list.len()].clone();
            v["seq"] = (10_000_000 + i as u64).into();
            v["timestamp"] = naive(start + chrono::Duration::milliseconds(2 * i as i64)).into();
            v.to_string()
        })
        .collect()
}

/// `n` durable events from `sessions` sessions, round-robin over the sessions (so times jump), each
/// session starting somewhere in the last 14 days, its events 7 s apart.
fn backfill_lines(t: &[Vec<Value>; 3], n: usize, sessions: usize) -> Vec<String> {
    let durable = &t[Class::Durable as usize];
    let end = chrono::Utc::now().naive_utc() - chrono::Duration::hours(1);
    let span = 13 * 86_400i64;
    (0..n)
        .map(|i| {
            let (s, j) = (i % sessions, i / sessions);
            let mut v = durable[(s + j) % durable.len()].clone();
            let sid = format!("session_20261101_000000_{s:08x}");
            v["execution_id"] = sid.into();
            if let Some(o) = v.as_object_mut() {
                o.remove("colony_id");
            }
            v["stream_id"] = "queen".into();
            v["seq"] = (j as u64 + 1).into();
            let at = end - chrono::Duration::seconds(span)
                + chrono::Duration::seconds((s as i64 * 7919) % span + j as i64 * 7);
            v["timestamp"] = naive(at).into();
            v.to_string()
        })
        .collect()
}

/// Writes a Hive home of `replicas × 4` queen sessions (the fixture day's per-session logs and its debug
/// log, every session id replaced by a replica's own). Returns the number of durable lines written
/// (each event is in two logs) and the number of distinct durable events.
/// Writes `replicas` copies of the fixture day's Hive home (per-session logs and the debug event log) and
/// returns the number of lines written. Every session id in them — the queens' and their colony workers'
/// (`session_YYYYMMDD_HHMMSS_xxxxxxxx`) — gets a new hex part per replica ([`replica_ids`]), so no event
/// of one replica is a duplicate of another's.
fn write_home(home: &Path, replicas: usize) -> usize {
    let day = fixture(DAY);
    let sessions_dir = day.join("queens/default/sessions");
    let mut per_session = Vec::new();
    for entry in std::fs::read_dir(&sessions_dir).unwrap() {
        let entry = entry.unwrap();
        let sid = entry.file_name().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(entry.path().join("events.jsonl")).unwrap();
        per_session.push((sid, text));
    }
    let debug = std::fs::read_to_string(day.join("event_logs/20261103_090000.jsonl")).unwrap();
    let mut lines = 0;
    std::fs::create_dir_all(home.join("event_logs")).unwrap();
    for r in 0..replicas {
        for (sid, text) in &per_session {
            let dir = home
                .join("queens/default/sessions")
                .join(replica_ids(sid, r));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("events.jsonl"), replica_ids(text, r)).unwrap();
            lines += text.lines().count();
        }
        let secs = 9 * 3600 + r;
        let name = format!(
            "20261103_{:02}{:02}{:02}.jsonl",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        );
        std::fs::write(home.join("event_logs").join(name), replica_ids(&debug, r)).unwrap();
        lines += debug.lines().count();
    }
    lines
}

/// `text` with the hex part of every Hive session id (`session_` + 8 digits + `_` + 6 digits + `_` + 8 hex
/// digits) XORed with a per-replica mask: a bijection for each replica, so ids stay distinct within a
/// replica, and replica 0 keeps the fixture's ids.
fn replica_ids(text: &str, r: usize) -> String {
    const PREFIX: &str = "session_";
    let mask = (r as u32).wrapping_mul(0x9E37_79B1);
    let shape = |b: &[u8]| {
        b.len() >= 24
            && b[..8].iter().all(u8::is_ascii_digit)
            && b[8] == b'_'
            && b[9..15].iter().all(u8::is_ascii_digit)
            && b[15] == b'_'
            && b[16..24].iter().all(u8::is_ascii_hexdigit)
    };
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(PREFIX) {
        let (before, at) = rest.split_at(i + PREFIX.len());
        out.push_str(before);
        if shape(at.as_bytes()) {
            let hex = u32::from_str_radix(&at[16..24], 16).unwrap();
            out.push_str(&at[..16]);
            out.push_str(&format!("{:08x}", hex ^ mask));
            rest = &at[24..];
        } else {
            rest = at;
        }
    }
    out.push_str(rest);
    out
}

/// One arm: the agent binary and its name.
struct Arm {
    name: &'static str,
    bin: PathBuf,
}

fn arms() -> Vec<Arm> {
    let mut arms = vec![Arm {
        name: "this build",
        bin: common::this_build(),
    }];
    if let Ok(b) = std::env::var("BENCH_BASELINE_BIN") {
        arms.insert(
            0,
            Arm {
                name: "baseline",
                bin: b.into(),
            },
        );
    }
    arms
}

/// Per arm: the medians of the figures its runs collected.
struct Figures {
    per_arm: Vec<Vec<Vec<f64>>>,
}

impl Figures {
    fn new(arms: usize, figures: usize) -> Figures {
        Figures {
            per_arm: vec![vec![Vec::new(); figures]; arms],
        }
    }

    fn push(&mut self, arm: usize, values: &[f64]) {
        for (i, v) in values.iter().enumerate() {
            self.per_arm[arm][i].push(*v);
        }
    }

    /// None when no run of the arm gave the figure, or there is no such arm (no baseline).
    fn median(&self, arm: usize, figure: usize) -> Option<f64> {
        let v = self.per_arm.get(arm)?.get(figure)?;
        (!v.is_empty()).then(|| median(v.clone()))
    }

    /// Prints each figure's median per arm and, with a baseline, this build's over the baseline's.
    fn report(&self, arms: &[Arm], names: &[&str]) {
        for (f, name) in names.iter().enumerate() {
            let values: Vec<String> = arms
                .iter()
                .enumerate()
                .map(|(a, arm)| match self.median(a, f) {
                    Some(m) => format!("{} {m:.1}", arm.name),
                    None => format!("{} (no finished run)", arm.name),
                })
                .collect();
            let ratio = match (arms.len(), self.median(0, f), self.median(1, f)) {
                (2, Some(base), Some(this)) => format!("   ratio {:.2}", this / base),
                _ => String::new(),
            };
            println!("  {name:<32} {}{ratio}", values.join("   "));
        }
    }
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let runs = env_usize("BENCH_RUNS", 3);
    let mixed_n = env_usize("BENCH_MIXED", 300_000);
    let backfill_n = env_usize("BENCH_BACKFILL", 200_000);
    let sessions = env_usize("BENCH_SESSIONS", 3000);
    let base: PathBuf =
        std::env::var("BENCH_DIR").map_or_else(|_| std::env::temp_dir(), Into::into);
    let connections = env_usize("BENCH_CONNECTIONS", CONNECTIONS);
    let parts = std::env::var("BENCH_PARTS").unwrap_or_else(|_| "mixed,backfill,tail".into());
    let part = |name: &str| parts.split(',').any(|p| p.trim() == name);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let arms = arms();
    if arms.len() == 1 {
        println!("no BENCH_BASELINE_BIN: this build only, no ratios (scripts/bench-baseline.sh REV builds a baseline)");
    }
    let t = templates();
    println!(
        "realistic intake: {runs} runs per arm, alternating; {connections} connections, {BODY_LINES} lines per body; templates: {} durable, {} delta, {} chatty",
        t[0].len(),
        t[1].len(),
        t[2].len()
    );

    if part("mixed") {
        let lines = mixed_lines(&t, mixed_n);
        let set = bodies(&lines, BODY_LINES);
        let mut fig = Figures::new(arms.len(), 5);
        for run in 0..runs {
            for (a, arm) in arms.iter().enumerate() {
                let dir = tempfile::tempdir_in(&base).unwrap();
                let agent = Agent::start_bin(&arm.bin, dir.path(), &[]);
                let url = format!("{}/v1/events", agent.base);
                let before = agent.cpu().unwrap_or_default();
                let (rate, lat) = rt.block_on(post_to(
                    &url,
                    "application/x-ndjson",
                    &agent.token,
                    &set,
                    lines.len(),
                    connections,
                ));
                let (cpu, writer) = agent
                    .cpu()
                    .unwrap_or_default()
                    .per_1000_since(before, lines.len());
                agent.stop();
                let (p50, p99) = (percentile(&lat, 0.5), percentile(&lat, 0.99));
                println!(
                    "  mixed run {} {:<10}: {rate:>9.0} lines/s, ack p50 {p50:.1} ms, p99 {p99:.1} ms, CPU {cpu:.2} ms per 1000 lines (writer {writer:.2})",
                    run + 1,
                    arm.name
                );
                fig.push(a, &[rate, p50, p99, cpu, writer]);
            }
        }
        println!(
            "mixed Hive stream ({mixed_n} lines: 55% deltas, 20% chatty, 25% durable), medians:"
        );
        fig.report(
            &arms,
            &[
                "input lines/s",
                "ack p50 ms",
                "ack p99 ms",
                "CPU ms per 1000 lines",
                "writer CPU ms per 1000 lines",
            ],
        );
    }

    if part("backfill") {
        let lines = backfill_lines(&t, backfill_n, sessions);
        let set = bodies(&lines, BODY_LINES);
        let mut fig = Figures::new(arms.len(), 5);
        for run in 0..runs {
            for (a, arm) in arms.iter().enumerate() {
                let dir = tempfile::tempdir_in(&base).unwrap();
                let agent = Agent::start_bin(&arm.bin, dir.path(), &[]);
                let url = format!("{}/v1/events", agent.base);
                let post = |set| {
                    rt.block_on(post_to(
                        &url,
                        "application/x-ndjson",
                        &agent.token,
                        set,
                        lines.len(),
                        connections,
                    ))
                };
                let before = agent.cpu().unwrap_or_default();
                let (new, lat) = post(&set);
                let (cpu, writer) = agent
                    .cpu()
                    .unwrap_or_default()
                    .per_1000_since(before, lines.len());
                let (dup, _) = post(&set);
                agent.stop();
                println!(
                    "  backfill run {} {:<10}: new {new:>9.0} ev/s (ack p99 {:.1} ms, CPU {cpu:.2} ms per 1000, writer {writer:.2}), all duplicates {dup:>9.0} ev/s",
                    run + 1,
                    arm.name,
                    percentile(&lat, 0.99)
                );
                fig.push(a, &[new, dup, percentile(&lat, 0.99), cpu, writer]);
            }
        }
        println!(
            "backfill ({backfill_n} durable events from {sessions} sessions, times not monotonic), medians:"
        );
        fig.report(
            &arms,
            &[
                "new events/s",
                "duplicate events/s",
                "ack p99 ms",
                "CPU ms per 1000 new events",
                "writer CPU ms per 1000 new",
            ],
        );
    }

    if part("tail") {
        let replicas = sessions.div_ceil(4);
        let home = tempfile::tempdir_in(&base).unwrap();
        let lines = write_home(home.path(), replicas);
        let mut fig = Figures::new(arms.len(), 4);
        let mut distinct = vec![];
        for run in 0..runs {
            for (a, arm) in arms.iter().enumerate() {
                let dir = tempfile::tempdir_in(&base).unwrap();
                let home_arg = home.path().to_str().unwrap();
                let started = Instant::now();
                let agent = Agent::start_bin(&arm.bin, dir.path(), &["--hive-home", home_arg]);
                let (read, events) = rt.block_on(wait_read(&agent, lines as u64));
                let secs = started.elapsed().as_secs_f64();
                let (cpu, writer) = agent
                    .cpu()
                    .unwrap_or_default()
                    .per_1000_since(common::Cpu::default(), lines);
                let (_, hwm) = agent.rss_mib();
                agent.stop();
                if read < lines as u64 {
                    // Not a figure: a rate over the time limit would read as a finished run.
                    println!(
                        "  tail run {} {:<10}: DID NOT FINISH: {read} of {lines} lines committed in {secs:.0} s",
                        run + 1,
                        arm.name
                    );
                    continue;
                }
                println!(
                    "  tail run {} {:<10}: {lines} lines ({events} events) committed in {secs:.2} s = {:.0} lines/s, peak RSS {hwm:.0} MiB, CPU {cpu:.2} ms per 1000 lines (writer {writer:.2})",
                    run + 1,
                    arm.name,
                    lines as f64 / secs
                );
                distinct.push(events);
                fig.push(a, &[lines as f64 / secs, hwm, cpu, writer]);
            }
        }
        distinct.sort();
        distinct.dedup();
        println!(
            "tail a Hive home of {} queen sessions and their workers ({lines} lines in both logs; events kept: {distinct:?}, one figure when every run agrees), medians:",
            replicas * 4,
        );
        fig.report(
            &arms,
            &[
                "lines/s to committed",
                "peak RSS MiB",
                "CPU ms per 1000 lines",
                "writer CPU ms per 1000 lines",
            ],
        );
    }
}

/// Polls the agent's status until `want` lines were read and committed (the `received` counter counts
/// every line, kept, filtered or duplicate, in the transaction that commits it), or 10 minutes passed.
/// Returns the lines and the events kept (pending, as sync is off, or delivered).
async fn wait_read(agent: &Agent, want: u64) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let s = agent.status().await;
        let c = &s["counters"];
        let n = |k: &str| c[k].as_u64().unwrap_or(0);
        let read = n("received");
        if read >= want || Instant::now() > deadline {
            return (read, n("pending") + n("delivered"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
