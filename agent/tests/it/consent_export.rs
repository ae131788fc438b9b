//! Consent (sync off by default, held backlog, include-backlog, disable, purge) and the air-gapped export
//! bundle (manifest first, checksum, exported outcome), through the outbox API and the real CLI.

use crate::support;

use std::process::Command;

use apiary_agent::outbox::{
    read_bundle, ClaimLimits, Idle, OutboxReader, OutboxSettings, SyncChange,
};
use support::enable;

const ALL: ClaimLimits = ClaimLimits {
    max_events: 1000,
    max_bytes: 1 << 24,
};

#[tokio::test]
async fn nothing_is_claimable_while_sync_is_off_and_the_backlog_stays_local() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = support::open(dir.path(), OutboxSettings::default());
    outbox
        .submit((0..5).map(support::event).collect())
        .await
        .unwrap();
    let c = outbox.claim(ALL).await.unwrap();
    assert_eq!((c.events.len(), c.idle), (0, Some(Idle::SyncOff)));
    outbox.set_sync(enable(false)).await.unwrap();
    assert_eq!(
        outbox.claim(ALL).await.unwrap().idle,
        Some(Idle::NothingDue)
    );
    outbox
        .submit((5..8).map(support::event).collect())
        .await
        .unwrap();
    let c = outbox.claim(ALL).await.unwrap();
    assert_eq!(
        c.ids(),
        (5..8).map(support::id).collect::<Vec<_>>(),
        "only events after consent"
    );
    let st = outbox.status().await.unwrap().stored;
    assert_eq!((st.held_events, st.uploadable_events), (5, 3));
    assert_eq!(
        st.sync.consent_policy_hash.as_deref(),
        Some(outbox.policy_hash())
    );
    assert!(st.sync.changed_at.is_some());
    // Disabling stops claims at once; re-enabling with the backlog releases the held rows.
    outbox.release(c.ids()).await.unwrap();
    outbox
        .set_sync(SyncChange::Disable { purge: false })
        .await
        .unwrap();
    assert_eq!(outbox.claim(ALL).await.unwrap().idle, Some(Idle::SyncOff));
    let r = outbox.set_sync(enable(true)).await.unwrap();
    assert_eq!(r.released, 5);
    assert_eq!(outbox.claim(ALL).await.unwrap().events.len(), 8);
    let log = outbox.consent_changes().await.unwrap();
    assert_eq!(log, 3);
    outbox.close().await;
}

#[tokio::test]
async fn disable_with_purge_deletes_pending_rows_and_counts_them() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = support::open(dir.path(), OutboxSettings::default());
    outbox
        .submit((0..4).map(support::event).collect())
        .await
        .unwrap();
    let r = outbox
        .set_sync(SyncChange::Disable { purge: true })
        .await
        .unwrap();
    assert_eq!(r.purged, 4);
    let st = outbox.status().await.unwrap().stored;
    assert_eq!((st.counters.purged, st.pending_events), (4, 0));
    assert!(st.balanced);
    // A purged event sent again is a duplicate (its tombstone remembers it).
    let rep = outbox.submit(vec![support::event(0)]).await.unwrap();
    assert_eq!(rep.duplicates, 1);
    outbox.close().await;
}

#[tokio::test]
async fn the_pause_from_the_push_loop_stops_claims_until_sync_is_enabled_again() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = support::open(dir.path(), OutboxSettings::default());
    outbox.set_sync(enable(false)).await.unwrap();
    outbox.submit(vec![support::event(1)]).await.unwrap();
    let pause = SyncChange::Pause {
        reason: Some("re-authenticate".into()),
    };
    outbox.set_sync(pause).await.unwrap();
    assert_eq!(outbox.claim(ALL).await.unwrap().idle, Some(Idle::Paused));
    let st = outbox.status().await.unwrap().stored;
    assert_eq!(st.sync.paused_reason.as_deref(), Some("re-authenticate"));
    outbox.set_sync(enable(false)).await.unwrap();
    assert_eq!(outbox.claim(ALL).await.unwrap().events.len(), 1);
    outbox.close().await;
}

#[tokio::test]
async fn export_writes_every_pending_event_with_a_manifest_first_and_marks_them_exported() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = support::open(dir.path(), OutboxSettings::default());
    outbox
        .submit((0..6).map(support::event).collect())
        .await
        .unwrap();
    let out = dir.path().join("bundle.ndjson.gz");
    let report = outbox.export(&out).await.unwrap();
    assert_eq!(report.events, 6);
    let (manifest, events) = read_bundle(&out).unwrap();
    assert_eq!(manifest.format, "apiary-export");
    assert_eq!(manifest.device_id.as_deref(), Some("laptop-1"));
    assert_eq!(manifest.counts.events, 6);
    assert_eq!(
        manifest.counts.held, 6,
        "exported whether or not sync is enabled"
    );
    assert_eq!(manifest.policy_hash, outbox.policy_hash());
    assert_eq!(manifest.sessions.len(), 3);
    assert!(manifest
        .sessions
        .iter()
        .all(|s| s.user_id.as_deref() == Some("alice")));
    assert_eq!(events.len(), 6);
    let first: serde_json::Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(first["event_id"], support::id(0).to_string());
    // Sealed by the device key beside the outbox, over gzip's header and the manifest as written.
    let raw = std::fs::read(&out).unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&raw[..]), &mut text).unwrap();
    let line1 = apiary_schema::bundle::FirstLine::parse(text.lines().next().unwrap()).unwrap();
    let sealer = line1
        .seal
        .expect("the bundle is sealed")
        .check(&raw[..10], &line1.manifest_json)
        .unwrap();
    let device_key = apiary_agent::device_key::load(dir.path()).unwrap();
    assert_eq!(sealer, device_key.public());
    let st = outbox.status().await.unwrap().stored;
    assert_eq!((st.counters.exported, st.pending_events), (6, 0));
    assert!(st.balanced);
    let again = outbox.export(&out).await.unwrap();
    assert_eq!(again.events, 0, "exported rows are not exported twice");
    outbox.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_export_runs_beside_intake_and_marks_only_what_its_bundle_holds() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = support::open(dir.path(), OutboxSettings::default());
    let backlog = apiary_agent::outbox::MARK_CHUNK as u128 * 2 + 500;
    for chunk in (0..backlog).collect::<Vec<_>>().chunks(5_000) {
        outbox
            .submit(chunk.iter().map(|n| support::event(*n)).collect())
            .await
            .unwrap();
    }
    // Between the snapshot and the marking a producer submits 200 events one by one: each must be
    // committed while the export is paused there (had the export held the writer, as it once did, the
    // first would wait forever — bounded here by a generous timeout).
    let out = dir.path().join("big.ndjson.gz");
    let producer = outbox.clone();
    let report = outbox
        .export_pausing_after_snapshot(&out, async move {
            for n in 0..200u128 {
                let submitted = tokio::time::timeout(
                    std::time::Duration::from_secs(30),
                    producer.submit(vec![support::event(backlog + n)]),
                )
                .await;
                assert!(
                    matches!(submitted, Ok(Ok(_))),
                    "submission {n} beside the export: {submitted:?}"
                );
            }
        })
        .await
        .unwrap();

    let (manifest, events) = read_bundle(&out).unwrap();
    assert_eq!(events.len() as u64, report.events);
    assert_eq!(manifest.counts.events, report.events);
    assert_eq!(
        report.events, backlog as u64,
        "the whole backlog is in the bundle, nothing that came after the snapshot"
    );
    assert_eq!(
        report.marked, report.events,
        "nothing was delivered meanwhile"
    );
    let st = outbox.status().await.unwrap().stored;
    assert_eq!(st.counters.exported, report.events);
    assert_eq!(
        st.pending_events,
        backlog as u64 + 200 - report.events,
        "events that arrived after the snapshot stay pending for the next export"
    );
    assert!(st.balanced);
    // The next export takes exactly the rest; ids never repeat between the two bundles.
    let rest = outbox
        .export(&dir.path().join("rest.ndjson.gz"))
        .await
        .unwrap();
    assert_eq!(rest.events, 200);
    let (_, rest_lines) = read_bundle(&dir.path().join("rest.ndjson.gz")).unwrap();
    let first: std::collections::HashSet<&String> = events.iter().collect();
    assert!(rest_lines.iter().all(|l| !first.contains(l)));
    outbox.close().await;
}

#[tokio::test]
async fn rows_settled_or_arriving_between_snapshot_and_marking_keep_their_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = support::open_syncing(dir.path(), 4).await;
    let claimed = outbox.claim(ALL).await.unwrap();
    assert_eq!(claimed.ids(), (0..4).map(support::id).collect::<Vec<_>>());
    // The bundle is written from a snapshot holding all four. Before the marking runs, the push loop
    // settles two of them (one delivered, one rejected) and a fifth event arrives.
    let out = dir.path().join("b.ndjson.gz");
    let other = outbox.clone();
    let report = outbox
        .export_pausing_after_snapshot(&out, async move {
            support::deliver(&other, vec![support::id(0)]).await;
            let r = other
                .reject(vec![(support::id(1), "HTTP 422: bad event".into())])
                .await
                .unwrap();
            assert_eq!(r.settled, 1);
            other.submit(vec![support::event(10)]).await.unwrap();
        })
        .await
        .unwrap();
    let (_, lines) = read_bundle(&out).unwrap();
    let ids: Vec<String> = lines
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["event_id"].to_string())
        .collect();
    let want: Vec<String> = (0..4).map(|n| format!("\"{}\"", support::id(n))).collect();
    assert_eq!(ids, want, "the bundle holds the snapshot");
    assert_eq!((report.events, report.marked), (4, 2), "{report:?}");
    let st = outbox.status().await.unwrap().stored;
    let c = st.counters;
    assert_eq!(
        (c.delivered, c.rejected, c.exported, c.pending),
        (1, 1, 2, 1),
        "each row keeps the one outcome it got first: {c:?}"
    );
    assert!(st.balanced);
    // The event that arrived after the snapshot is the next export's, alone.
    let next = outbox
        .export(&dir.path().join("next.ndjson.gz"))
        .await
        .unwrap();
    assert_eq!((next.events, next.marked), (1, 1));
    let (_, lines) = read_bundle(&dir.path().join("next.ndjson.gz")).unwrap();
    assert!(lines[0].contains(&support::id(10).to_string()), "{lines:?}");
    outbox.close().await;
}

#[test]
fn the_cli_exports_reports_status_and_switches_sync() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let outbox = support::open(dir.path(), OutboxSettings::default());
        outbox
            .submit((0..3).map(support::event).collect())
            .await
            .unwrap();
        outbox.close().await;
    });
    let run = |args: &[&str]| {
        let out = Command::new(support::bin())
            .args(args)
            .arg("--data-dir")
            .arg(dir.path())
            .env("APIARY_IDENTITY_DEVICE_ID", "laptop-1")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let (ok, text) = run(&["status"]);
    assert!(
        ok && text.contains("pending:   3 events") && text.contains("balanced"),
        "{text}"
    );
    let (ok, text) = run(&["status", "--json"]);
    assert!(ok && text.contains("\"pending_events\": 3"), "{text}");
    let token = dir.path().join("ingest.token");
    apiary_agent::private::write_atomic(&token, b"secret").unwrap();
    let t = token.to_str().unwrap();
    let (ok, text) = run(&[
        "sync",
        "enable",
        "--endpoint",
        "https://x",
        "--token-file",
        t,
    ]);
    assert!(ok && text.contains("sync enabled"), "{text}");
    let (ok, text) = run(&[
        "sync",
        "enable",
        "--endpoint",
        "https://x",
        "--token-file",
        "/nonexistent",
    ]);
    assert!(!ok && text.contains("/nonexistent"), "{text}");
    let out = dir.path().join("b.gz");
    let (ok, text) = run(&["export", "--out", out.to_str().unwrap()]);
    assert!(ok && text.contains("exported 3 events"), "{text}");
    assert_eq!(read_bundle(&out).unwrap().1.len(), 3);
    let (ok, text) = run(&["sync", "disable", "--purge"]);
    assert!(ok && text.contains("0 pending events purged"), "{text}");
    let (ok, text) = run(&["--help"]);
    assert!(
        ok && ["run", "status", "sync", "export", "follow", "policy"]
            .iter()
            .all(|c| text.contains(c))
    );
    let (ok, text) = run(&["run", "--help"]);
    assert!(
        ok && text.contains("--hive-home") && text.contains("--listen"),
        "{text}"
    );
    let reader = OutboxReader::open(&dir.path().join("outbox.db")).unwrap();
    assert!(reader.stored_status().unwrap().balanced);
}

#[test]
fn policy_explain_shows_kept_and_dropped_fields() {
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/hive/bad_lines.jsonl"
    );
    let out = Command::new(support::bin())
        .args(["policy", "explain", fixture, "--zone", "UTC"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("kept as llm.turn") && text.contains("summary:"),
        "{text}"
    );
    assert!(!text.contains("zzcanary"));
    let out = Command::new(support::bin())
        .args(["policy", "explain", fixture, "--json"])
        .output()
        .unwrap();
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap()
        .to_string();
    assert!(last.starts_with("{\"summary\""), "{last}");
}

#[test]
fn follow_streams_committed_events_as_they_arrive() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let outbox = rt.block_on(async {
        let o = support::open(dir.path(), OutboxSettings::default());
        o.submit(vec![support::event(1)]).await.unwrap();
        o
    });
    let mut child = Command::new(support::bin())
        .args(["follow", "--type", "llm.turn", "--data-dir"])
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.contains(&support::id(1).to_string()), "{first}");
    rt.block_on(outbox.submit(vec![support::event(2)])).unwrap();
    let second = lines.next().unwrap().unwrap();
    assert!(second.contains(&support::id(2).to_string()), "{second}");
    let _ = child.kill();
    let _ = child.wait();
    rt.block_on(outbox.close());
}
