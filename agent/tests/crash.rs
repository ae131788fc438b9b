//! Kill -9 under load: the real `apiary-agent` binary takes NDJSON over HTTP from several concurrent
//! producers and is SIGKILLed at a random moment, 20 times in a row on the same data directory. Every
//! event whose request got a 2xx must be in the outbox exactly once afterwards, and the outcome counters
//! must still add up.

mod support;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apiary_agent::outbox::{read, store};
use apiary_schema::hive::Zone;
use apiary_schema::{process_value, Outcome, Policy, ProcessOptions};
use rand::Rng;
use uuid::Uuid;

const CYCLES: usize = 20;
const PRODUCERS: usize = 4;
const BATCH: u64 = 200;

/// The event id the agent will compute for a line.
fn event_id(line: &str, policy: &Policy) -> Uuid {
    let opts = ProcessOptions {
        policy,
        zone: Zone::Utc,
        source_identity: None,
        session_hint: None,
    };
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    match process_value(&v, &opts).unwrap() {
        Outcome::Kept { event, .. } => event.event_id,
        other => panic!("not kept: {other:?}"),
    }
}

#[test]
fn every_acknowledged_event_survives_twenty_sigkills_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut next_seq = 0u64;
    let mut rng = rand::thread_rng();
    for cycle in 0..CYCLES {
        let agent = support::Agent::start(dir.path(), &[]);
        let url = agent.url("/v1/events");
        let token = agent.token.clone();
        let start = next_seq;
        next_seq += 1_000_000;
        let kill_after = Duration::from_millis(rng.gen_range(150..600));
        rt.block_on(async {
            let stop = tokio_util::sync::CancellationToken::new();
            let mut tasks = Vec::new();
            for p in 0..PRODUCERS as u64 {
                let (url, token, acked, stop) =
                    (url.clone(), token.clone(), acked.clone(), stop.clone());
                tasks.push(tokio::spawn(async move {
                    let client = support::client();
                    let mut seq = start + p * 100_000;
                    while !stop.is_cancelled() {
                        let lines: Vec<String> = (seq..seq + BATCH)
                            .map(|s| support::hive_turn(&format!("session_crash_{cycle}_{p}"), s))
                            .collect();
                        seq += BATCH;
                        let body = lines.join("\n");
                        let sent = client
                            .post(&url)
                            .bearer_auth(&token)
                            .body(body)
                            .send()
                            .await;
                        match sent {
                            Ok(r) if r.status().is_success() => {
                                acked.lock().unwrap().extend(lines);
                            }
                            _ => break,
                        }
                    }
                }));
            }
            tokio::time::sleep(kill_after).await;
            agent.kill();
            stop.cancel();
            for t in tasks {
                let _ = t.await;
            }
        });
    }
    // One last clean start and stop, so the test also covers recovery of the WAL by the agent itself.
    drop(support::Agent::start(dir.path(), &[]));

    let policy = Policy::default_policy();
    let acked = acked.lock().unwrap();
    assert!(
        acked.len() > 1000,
        "the load produced too few acks: {}",
        acked.len()
    );
    let conn = store::open_reader(&dir.path().join("outbox.db")).unwrap();
    let ids: HashSet<Vec<u8>> = {
        let mut stmt = conn.prepare("SELECT event_id FROM events").unwrap();
        let rows = stmt.query_map([], |r| r.get::<_, Vec<u8>>(0)).unwrap();
        rows.map(Result::unwrap).collect()
    };
    let rows: i64 = conn
        .query_row("SELECT count(*) FROM events", [], |r| r.get(0))
        .unwrap();
    assert_eq!(rows as usize, ids.len(), "an event id is stored twice");
    let mut missing = 0;
    for line in acked.iter() {
        if !ids.contains(event_id(line, &policy).as_bytes().as_slice()) {
            missing += 1;
        }
    }
    assert_eq!(
        missing,
        0,
        "{missing} of {} acknowledged events are missing",
        acked.len()
    );
    let status = read::stored_status(&conn).unwrap();
    assert!(status.balanced, "{:?}", status.counters);
    assert_eq!(status.counters.pending as i64, rows);
    let ok: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(ok, "ok");
}
