//! Kill -9 under load: the real `apiary-agent` binary takes NDJSON over HTTP from several concurrent
//! producers and is SIGKILLed at a random moment, 20 times in a row on the same data directory. After
//! each restart the producers first re-send every batch that got no 2xx (as a producer must), then go
//! on with new ones. Every line has its own timestamp, so no two events share an `(occurred_at,
//! event_id)` key and the outbox's unique index cannot hide a lost or doubled event.
//!
//! Checked after every restart: the stored ids are the acknowledged ones plus a subset of the
//! unacknowledged ones (a batch may commit and lose its response), each batch whole or not at all,
//! nothing else. Checked at the end, after a clean stop (SIGTERM, not SIGKILL): every line stored
//! exactly once with its own timestamp; `received` counts the acknowledged requests' lines plus those of
//! the unacknowledged requests found committed at the next restart, `duplicate` the rest. Also: the writer's connection runs
//! `synchronous = FULL` (an acknowledged event must survive power loss, not only a crash).

use crate::support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiary_agent::outbox::{OutboxReader, OutboxSettings};
use apiary_schema::hive::Zone;
use apiary_schema::{process_value, Outcome, Policy, ProcessOptions};
use rand::Rng;
use uuid::Uuid;

const CYCLES: usize = 20;
const PRODUCERS: usize = 4;
const BATCH: usize = 200;

/// A batch of lines some producer posts; `acked` once a request of it got a 2xx.
struct Batch {
    lines: Vec<String>,
    acked: bool,
}

/// What the producers did: every batch, and the lines of the requests acked and not acked.
#[derive(Default)]
struct Ledger {
    batches: Vec<Batch>,
    acked_request_lines: u64,
    unacked_request_lines: u64,
    /// Batches whose request got no answer in the current cycle.
    unacked_attempts: Vec<usize>,
    /// Lines of unacknowledged requests found committed at the next restart (their batch was not
    /// stored before and is after).
    committed_unacked_lines: u64,
    /// Lines of unacknowledged requests whose batch was already stored: as duplicates they may or may
    /// not have been counted before the kill.
    ambiguous_lines: u64,
}

/// An `llm_turn_complete` line with its own millisecond timestamp (`n` ms after the day started).
fn turn(session: &str, seq: u64, n: u64) -> String {
    let at = chrono::NaiveDate::from_ymd_opt(2026, 11, 3)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc()
        + chrono::TimeDelta::milliseconds(n as i64);
    let data = serde_json::json!({"model": "claude-sonnet-4-5-20250929", "input_tokens": 100, "output_tokens": 7});
    tests::events::hive("llm_turn_complete", session, at, seq, data).to_string()
}

/// The (event id, occurred_at ms) the agent computes for a line.
fn key(line: &str, policy: &Policy) -> (Uuid, i64) {
    let opts = ProcessOptions {
        policy,
        zone: Zone::Utc,
        source_identity: None,
        session_hint: None,
        colony: None,
    };
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    match process_value(&v, &opts).unwrap() {
        Outcome::Kept { event, .. } => (event.event_id, event.occurred_at.timestamp_millis()),
        other => panic!("not kept: {other:?}"),
    }
}

/// Every stored row: event id → occurred_at ms (panics on a doubled id).
fn stored(dir: &std::path::Path) -> BTreeMap<Uuid, i64> {
    let reader = OutboxReader::open(&dir.join("outbox.db")).unwrap();
    let mut stmt = reader
        .raw_connection_for_test()
        .prepare("SELECT event_id, occurred_at FROM events")
        .unwrap();
    let rows = stmt
        .query_map([], |r| Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, i64>(1)?)))
        .unwrap();
    let mut out = BTreeMap::new();
    for row in rows {
        let (id, at) = row.unwrap();
        let id = Uuid::from_slice(&id).unwrap();
        assert!(out.insert(id, at).is_none(), "event {id} is stored twice");
    }
    out
}

/// Posts batches from the shared queue (indexes into the ledger) until it is empty or the agent is
/// gone; records each request's fate.
async fn produce(
    url: String,
    token: String,
    queue: Arc<Mutex<Vec<usize>>>,
    ledger: Arc<Mutex<Ledger>>,
) {
    let client = support::client();
    loop {
        let Some(i) = queue.lock().unwrap().pop() else {
            return;
        };
        let (body, n) = {
            let l = ledger.lock().unwrap();
            (
                l.batches[i].lines.join("\n"),
                l.batches[i].lines.len() as u64,
            )
        };
        let sent = client
            .post(&url)
            .bearer_auth(&token)
            .body(body)
            .send()
            .await;
        let mut l = ledger.lock().unwrap();
        match sent {
            Ok(r) if r.status().is_success() => {
                l.batches[i].acked = true;
                l.acked_request_lines += n;
            }
            _ => {
                l.unacked_request_lines += n;
                l.unacked_attempts.push(i);
                return;
            }
        }
    }
}

/// Runs producers against a started agent over `work` (batch indexes, popped from the end).
async fn run_producers(
    agent: &support::Agent,
    work: Vec<usize>,
    ledger: &Arc<Mutex<Ledger>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let queue = Arc::new(Mutex::new(work));
    (0..PRODUCERS)
        .map(|_| {
            tokio::spawn(produce(
                agent.url("/v1/events"),
                agent.token.clone(),
                queue.clone(),
                ledger.clone(),
            ))
        })
        .collect()
}

/// Which batches are stored (whole: a batch stored in part fails), asserting acked ⊆ stored ⊆ sent,
/// each row with its line's own timestamp.
fn stored_batches(
    dir: &std::path::Path,
    ledger: &Ledger,
    keys: &[Vec<(Uuid, i64)>],
    when: &str,
) -> Vec<bool> {
    let stored = stored(dir);
    let sent: BTreeMap<Uuid, i64> = keys.iter().flatten().copied().collect();
    for (id, at) in &stored {
        assert_eq!(
            sent.get(id),
            Some(at),
            "{when}: stored {id} at {at} was never sent so"
        );
    }
    keys.iter()
        .enumerate()
        .map(|(b, batch)| {
            let n = batch
                .iter()
                .filter(|(id, _)| stored.contains_key(id))
                .count();
            assert!(
                n == 0 || n == batch.len(),
                "{when}: batch {b} stored in part ({n} of {})",
                batch.len()
            );
            assert!(
                n > 0 || !ledger.batches[b].acked,
                "{when}: acknowledged batch {b} is missing"
            );
            n > 0
        })
        .collect()
}

/// At a restart: settles which of the last cycle's unacknowledged requests had committed.
fn account_unacked(ledger: &mut Ledger, before: &[bool], now: &[bool]) {
    for b in std::mem::take(&mut ledger.unacked_attempts) {
        match (before.get(b).copied().unwrap_or(false), now[b]) {
            (false, true) => ledger.committed_unacked_lines += BATCH as u64,
            (true, _) => ledger.ambiguous_lines += BATCH as u64,
            (false, false) => {}
        }
    }
}

#[test]
fn every_acknowledged_event_survives_twenty_sigkills_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let policy = Policy::default_policy();
    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let mut keys: Vec<Vec<(Uuid, i64)>> = vec![];
    let mut rng = rand::thread_rng();
    let mut n = 0u64;
    let mut before: Vec<bool> = vec![];
    for cycle in 0..CYCLES {
        let agent = support::Agent::start(dir.path(), &[]);
        {
            let mut l = ledger.lock().unwrap();
            let now = stored_batches(dir.path(), &l, &keys, &format!("after restart {cycle}"));
            account_unacked(&mut l, &before, &now);
            before = now;
        }
        // Re-sends of what was not acknowledged come first (popped last), then new batches.
        let mut work: Vec<usize> = vec![];
        {
            let mut l = ledger.lock().unwrap();
            for _ in 0..PRODUCERS * 10 {
                let session = format!("session_crash_{cycle}_{}", l.batches.len() % PRODUCERS);
                let lines: Vec<String> = (0..BATCH)
                    .map(|_| {
                        n += 1;
                        turn(&session, n, n)
                    })
                    .collect();
                keys.push(lines.iter().map(|line| key(line, &policy)).collect());
                work.push(l.batches.len());
                l.batches.push(Batch {
                    lines,
                    acked: false,
                });
            }
            work.extend((0..l.batches.len() - PRODUCERS * 10).filter(|b| !l.batches[*b].acked));
        }
        let kill_after = Duration::from_millis(rng.gen_range(150..600));
        rt.block_on(async {
            let tasks = run_producers(&agent, work, &ledger).await;
            tokio::time::sleep(kill_after).await;
            agent.kill();
            for t in tasks {
                let _ = t.await;
            }
        });
    }
    // A last run: every batch not yet acknowledged is re-sent until it is, then a clean stop.
    let agent = support::Agent::start(dir.path(), &[]);
    let pending: Vec<usize> = {
        let mut l = ledger.lock().unwrap();
        let now = stored_batches(dir.path(), &l, &keys, "after the last kill");
        account_unacked(&mut l, &before, &now);
        (0..l.batches.len())
            .filter(|b| !l.batches[*b].acked)
            .collect()
    };
    rt.block_on(async {
        for t in run_producers(&agent, pending, &ledger).await {
            t.await.unwrap();
        }
    });
    let exit = agent.terminate(Duration::from_secs(30));
    assert!(exit.is_some_and(|s| s.success()), "SIGTERM: {exit:?}");

    let l = ledger.lock().unwrap();
    assert!(
        l.batches.iter().all(|b| b.acked),
        "a batch was never acknowledged"
    );
    let all: BTreeMap<Uuid, i64> = keys.iter().flatten().copied().collect();
    assert_eq!(
        all.len(),
        l.batches.len() * BATCH,
        "harness: every line has its own key"
    );
    let stored = stored(dir.path());
    assert_eq!(stored.len(), all.len(), "stored rows vs lines sent");
    assert!(l.unacked_attempts.is_empty());
    assert_eq!(
        stored, all,
        "every line stored once, with its own timestamp"
    );
    let reader = OutboxReader::open(&dir.path().join("outbox.db")).unwrap();
    let status = reader.stored_status().unwrap();
    let c = status.counters;
    assert!(status.balanced, "{c:?}");
    assert_eq!(c.pending, all.len() as u64, "{c:?}");
    // received = every acknowledged request's lines + the lines of unacknowledged requests that had
    // committed before the kill (found at the next restart); their re-sends came back as duplicates.
    let least = l.acked_request_lines + l.committed_unacked_lines;
    assert!(
        (least..=least + l.ambiguous_lines).contains(&c.received),
        "received {} vs acknowledged lines {} + committed unacknowledged {} (+ up to {} re-sent ones)",
        c.received,
        l.acked_request_lines,
        l.committed_unacked_lines,
        l.ambiguous_lines
    );
    assert_eq!(c.duplicate, c.received - c.pending, "{c:?}");
    eprintln!(
        "{} batches; {} lines in acknowledged requests, {} in unacknowledged ones ({} found committed, {} ambiguous)",
        l.batches.len(),
        l.acked_request_lines,
        l.unacked_request_lines,
        l.committed_unacked_lines,
        l.ambiguous_lines
    );
    assert_eq!(reader.integrity_check().unwrap(), "ok");
}

#[tokio::test]
async fn the_outbox_writer_commits_with_synchronous_full_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = support::open(dir.path(), OutboxSettings::default());
    // 2 = FULL: the WAL is fsynced at every commit (NORMAL, 1, would lose the last commits on power loss).
    assert_eq!(outbox.writer_pragma("synchronous").await.unwrap(), "2");
    assert_eq!(outbox.writer_pragma("journal_mode").await.unwrap(), "wal");
    outbox.close().await;
}
