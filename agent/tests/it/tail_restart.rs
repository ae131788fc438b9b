//! Stopping the tailer mid-way (a failing store, or a shutdown) and starting again from the sink's
//! checkpoints loses no line and reads none twice; a sink error is retried with the same lines.

use crate::tail_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use apiary_agent::tail::memory::MemorySink;
use apiary_agent::tail::sink::{Checkpoint, TailSink};
use apiary_agent::tail::{run_until_stopped, TailItem, TailSettings, Tailer};
use tail_support::{
    append, copy_fixture_home, items_by_source, log_path, turn, turns, FIXTURE_LINES,
};
use tokio_util::sync::CancellationToken;

fn settings(home: &Path, batch_lines: usize) -> TailSettings {
    let mut s = tail_support::settings(home);
    (s.batch_lines, s.poll_interval) = (batch_lines, Duration::from_millis(20));
    s
}

/// What an uninterrupted run commits.
async fn reference(home: &Path) -> BTreeMap<String, Vec<TailItem>> {
    let sink = Arc::new(MemorySink::new());
    let mut tailer = Tailer::start(settings(home, 1000), sink.clone())
        .await
        .unwrap();
    while !tailer.try_poll_once().await.unwrap().caught_up {}
    items_by_source(&sink)
}

#[tokio::test]
async fn a_store_failing_mid_way_then_a_restart_loses_and_repeats_nothing() {
    let home = copy_fixture_home();
    let sink = Arc::new(MemorySink::new());
    sink.fail_commits_after(Some(20));
    let mut tailer = Tailer::start(settings(home.path(), 7), sink.clone())
        .await
        .unwrap();
    assert!(tailer.try_poll_once().await.is_err());
    drop(tailer); // the process dies here
    let committed_before = sink.items().len();
    assert!(committed_before > 0 && committed_before < FIXTURE_LINES);

    sink.fail_commits_after(None);
    let mut tailer = Tailer::start(settings(home.path(), 7), sink.clone())
        .await
        .unwrap();
    while !tailer.try_poll_once().await.unwrap().caught_up {}

    assert_eq!(sink.items().len(), FIXTURE_LINES);
    assert_eq!(items_by_source(&sink), reference(home.path()).await);
}

/// A sink that takes a while to commit, so a shutdown lands mid-way through the home.
struct SlowSink(MemorySink);

impl TailSink for SlowSink {
    async fn commit(&self, items: Vec<TailItem>, checkpoint: Checkpoint) -> anyhow::Result<()> {
        tokio::time::sleep(Duration::from_millis(2)).await;
        self.0.commit(items, checkpoint).await
    }

    async fn load_checkpoints(&self) -> anyhow::Result<Vec<Checkpoint>> {
        self.0.load_checkpoints().await
    }
}

#[tokio::test]
async fn a_shutdown_mid_way_then_a_restart_loses_and_repeats_nothing() {
    let home = copy_fixture_home();
    let sink = Arc::new(SlowSink(MemorySink::new()));
    for round in 0..3 {
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(run_until_stopped(
            settings(home.path(), 5),
            sink.clone(),
            shutdown.clone(),
        ));
        let target = (round + 1) * 30;
        let since = Instant::now();
        while sink.0.commits().len() < target && since.elapsed() < Duration::from_secs(10) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        shutdown.cancel();
        task.await.unwrap().unwrap();
    }
    assert!(
        sink.0.items().len() < FIXTURE_LINES,
        "stopped before the end"
    );

    let shutdown = CancellationToken::new();
    let task = tokio::spawn(run_until_stopped(
        settings(home.path(), 5),
        sink.clone(),
        shutdown.clone(),
    ));
    let since = Instant::now();
    while sink.0.items().len() < FIXTURE_LINES && since.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    shutdown.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(sink.0.items().len(), FIXTURE_LINES);
    assert_eq!(items_by_source(&sink.0), reference(home.path()).await);
}

#[tokio::test]
async fn sink_errors_are_retried_without_skipping_lines() {
    let home = tempfile::tempdir().unwrap();
    let path = log_path(home.path());
    let lines: String = (1..=25).map(turn).collect();
    append(&path, lines.as_bytes());
    let sink = Arc::new(MemorySink::new());
    let mut tailer = Tailer::start(settings(home.path(), 10), sink.clone())
        .await
        .unwrap();

    sink.fail_next_commits(2);
    assert!(tailer.try_poll_once().await.is_err());
    assert!(tailer.try_poll_once().await.is_err());
    assert!(sink.items().is_empty());
    let report = tailer.try_poll_once().await.unwrap();
    assert_eq!((report.commits, report.lines_committed), (3, 25));
    assert_eq!(turns(&sink), (1..=25).collect::<Vec<_>>());

    // The same through the long-running loop, with its backoff.
    append(&path, turn(26).as_bytes());
    sink.fail_next_commits(2);
    let shutdown = CancellationToken::new();
    let s = settings(home.path(), 10);
    let task = tokio::spawn(run_until_stopped(s, sink.clone(), shutdown.clone()));
    let since = Instant::now();
    while turns(&sink).len() < 26 && since.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shutdown.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(turns(&sink), (1..=26).collect::<Vec<_>>());
}

/// The outbox keeps each source's last checkpoint, committed with its lines, across a reopen: the
/// tailer's restart reads from it.
#[tokio::test]
async fn the_outbox_keeps_each_sources_last_checkpoint_across_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let cp = |offset: u64| Checkpoint {
        source_key: "event_logs/a.jsonl".into(),
        path: "/home/u/.hive/event_logs/a.jsonl".into(),
        file_id: "1:2".into(),
        offset,
        head_hash: "00".into(),
    };
    let outbox = crate::support::open(dir.path(), apiary_agent::outbox::OutboxSettings::default());
    outbox
        .submit_with_checkpoint(vec![crate::support::event(1)], cp(120))
        .await
        .unwrap();
    outbox
        .submit_with_checkpoint(vec![], cp(480))
        .await
        .unwrap();
    outbox.close().await;
    let outbox = crate::support::open(dir.path(), apiary_agent::outbox::OutboxSettings::default());
    let kept = outbox.checkpoints().await.unwrap();
    assert_eq!(
        kept.iter()
            .map(|c| (c.source_key.as_str(), c.offset))
            .collect::<Vec<_>>(),
        [("event_logs/a.jsonl", 480)]
    );
    outbox.close().await;
}
