//! The WAL stays bounded under sustained intake (see `outbox/write/checkpointer.rs`): with producers always
//! queued, a PASSIVE checkpoint never catches up, so without the writer's RESTART the WAL only grew.

use crate::support;

use std::sync::Arc;

use apiary_agent::outbox::{Item, OutboxSettings, PreparedEvent};
use uuid::Uuid;

const PRODUCERS: u64 = 4;
const PER_SUBMISSION: u64 = 500;
const SUBMISSIONS: u64 = 80; // per producer: 160k events of ~1.1 KiB, about 230 MiB of WAL frames in all

fn padded_event(n: u64) -> Item {
    let id = Uuid::from_u128(u128::from(n) + 1);
    let body = format!(
        r#"{{"schema_version":1,"event_id":"{id}","type":"llm.turn","occurred_at":"2026-11-03T10:00:00Z","runtime":"hive","session_id":"s1","agent_role":"queen","native_type":"llm_turn_complete","data":{{"stop_reason":"{}"}}}}"#,
        "x".repeat(900)
    );
    Item::Kept(PreparedEvent {
        event_id: id,
        kind: apiary_schema::EventKind::LlmTurn,
        session_id: Some("s1".into()),
        parent_session_id: None,
        occurred_at_ms: 1_793_000_000_000 + n as i64,
        body,
        usage: None,
        status: None,
        work: None,
        tool: None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_is_restarted_while_producers_never_let_the_writer_idle() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = support::open(dir.path(), OutboxSettings::default());
    let wal = dir.path().join("outbox.db-wal");
    let largest = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let tasks: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (outbox, wal, largest) = (outbox.clone(), wal.clone(), largest.clone());
            tokio::spawn(async move {
                for s in 0..SUBMISSIONS {
                    let first = (p * SUBMISSIONS + s) * PER_SUBMISSION;
                    let items = (first..first + PER_SUBMISSION).map(padded_event).collect();
                    let r = outbox.submit(items).await.unwrap();
                    assert_eq!(r.accepted, PER_SUBMISSION);
                    let size = std::fs::metadata(&wal).map_or(0, |m| m.len());
                    largest.fetch_max(size, std::sync::atomic::Ordering::Relaxed);
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let st = outbox.status().await.unwrap().stored;
    assert_eq!(st.pending_events, PRODUCERS * SUBMISSIONS * PER_SUBMISSION);
    let on_disk = std::fs::metadata(&wal).unwrap().len();
    assert_eq!(st.wal_bytes, on_disk, "status reports the WAL's size");
    assert!(on_disk > 0);
    let largest = largest.load(std::sync::atomic::Ordering::Relaxed);
    // The restart threshold (16 MiB), plus what is written while a checkpoint run copies the WAL and
    // until the writer's next group (a debug build writes over 100 MB/s of WAL here): 24 to 54 MiB
    // measured. An unbounded WAL reaches about 230 MiB here.
    assert!(largest < 100 << 20, "the WAL grew to {} MiB", largest >> 20);
    outbox.close().await;
}
