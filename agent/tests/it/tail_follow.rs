//! Following a log as Hive writes it: partial lines, truncation, rewriting, replacement and rotation, and
//! new files. Driven step by step with `Tailer::try_poll_once` against the in-memory sink, except where
//! the timing of the long-running loop is the point.

use crate::tail_support;

use std::fs;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use apiary_agent::tail::memory::MemorySink;
use apiary_agent::tail::{run_until_stopped, Tailer};
use tail_support::{append, log_path, settings, turn, turns, LOG};
use tokio_util::sync::CancellationToken;

async fn start(home: &Path, sink: &Arc<MemorySink>) -> Tailer<MemorySink> {
    Tailer::start(settings(home), sink.clone()).await.unwrap()
}

#[tokio::test]
async fn a_partial_line_waits_for_its_newline() {
    let home = tempfile::tempdir().unwrap();
    let path = log_path(home.path());
    let second = turn(2);
    let (head, tail) = second.split_at(40);
    append(&path, format!("{}{head}", turn(1)).as_bytes());
    let sink = Arc::new(MemorySink::new());
    let mut tailer = start(home.path(), &sink).await;

    tailer.try_poll_once().await.unwrap();
    assert_eq!(turns(&sink), vec![1]);
    let committed = sink.checkpoint(LOG).unwrap();
    assert_eq!(committed.offset, turn(1).len() as u64);

    // Nothing changes while the line is incomplete, however often we look.
    let report = tailer.try_poll_once().await.unwrap();
    assert_eq!((report.commits, report.files_scanned), (0, 0));
    append(&path, &tail.as_bytes()[..tail.len() - 1]);
    assert_eq!(tailer.try_poll_once().await.unwrap().commits, 0);

    append(&path, b"\n");
    tailer.try_poll_once().await.unwrap();
    assert_eq!(turns(&sink), vec![1, 2]);
    assert_eq!(
        sink.checkpoint(LOG).unwrap().offset,
        fs::metadata(&path).unwrap().len()
    );
}

#[tokio::test]
async fn a_truncated_or_rewritten_file_is_read_again_from_the_start() {
    let home = tempfile::tempdir().unwrap();
    let path = log_path(home.path());
    append(
        &path,
        format!("{}{}{}", turn(1), turn(2), turn(3)).as_bytes(),
    );
    let sink = Arc::new(MemorySink::new());
    let mut tailer = start(home.path(), &sink).await;
    tailer.try_poll_once().await.unwrap();

    // Truncated: shorter than the committed offset.
    fs::write(&path, turn(4)).unwrap();
    let report = tailer.try_poll_once().await.unwrap();
    assert_eq!((report.restarts, report.kept), (1, 1));
    assert_eq!(turns(&sink), vec![1, 2, 3, 4]);

    // Rewritten in place and longer than before: same inode, but the head no longer matches.
    let inode_before = sink.checkpoint(LOG).unwrap().file_id;
    fs::write(&path, format!("{}{}", turn(5), turn(6))).unwrap();
    let report = tailer.try_poll_once().await.unwrap();
    assert_eq!(report.restarts, 1);
    assert_eq!(turns(&sink), vec![1, 2, 3, 4, 5, 6]);
    assert_eq!(sink.checkpoint(LOG).unwrap().file_id, inode_before);

    // The restart itself was committed (offset 0) before the lines read again.
    let restarts: Vec<u64> = sink
        .commits()
        .iter()
        .filter(|c| c.items.is_empty())
        .map(|c| c.checkpoint.offset)
        .collect();
    assert_eq!(restarts, vec![0, 0]);
}

#[tokio::test]
async fn rotation_drains_the_old_file_then_follows_the_new_one() {
    let home = tempfile::tempdir().unwrap();
    let path = log_path(home.path());
    append(&path, format!("{}{}", turn(1), turn(2)).as_bytes());
    let sink = Arc::new(MemorySink::new());
    let mut tailer = start(home.path(), &sink).await;
    tailer.try_poll_once().await.unwrap();
    let old_id = sink.checkpoint(LOG).unwrap().file_id;

    // A line lands just before the file is renamed away and a new one created.
    append(&path, turn(3).as_bytes());
    fs::rename(&path, path.with_extension("jsonl.1")).unwrap();
    append(&path, turn(4).as_bytes());
    let report = tailer.try_poll_once().await.unwrap();
    assert_eq!(report.restarts, 1);
    assert_eq!(turns(&sink), vec![1, 2, 3, 4]);

    let commits = sink.commits();
    let n = commits.len();
    assert_eq!(
        commits[n - 3].checkpoint.file_id,
        old_id,
        "drained from the old file"
    );
    assert!(commits[n - 2].items.is_empty() && commits[n - 2].checkpoint.offset == 0);
    let new_id = commits[n - 1].checkpoint.file_id.clone();
    assert_ne!(new_id, old_id);
    assert_eq!(commits[n - 1].checkpoint.offset, turn(4).len() as u64);
}

#[tokio::test]
async fn a_file_replaced_while_the_agent_was_down_is_read_from_the_start() {
    let home = tempfile::tempdir().unwrap();
    let path = log_path(home.path());
    append(&path, format!("{}{}", turn(1), turn(2)).as_bytes());
    let sink = Arc::new(MemorySink::new());
    start(home.path(), &sink)
        .await
        .try_poll_once()
        .await
        .unwrap();

    // Longer than before, so only the inode tells it is another file.
    fs::remove_file(&path).unwrap();
    append(
        &path,
        format!("{}{}{}", turn(7), turn(8), turn(9)).as_bytes(),
    );
    let report = start(home.path(), &sink)
        .await
        .try_poll_once()
        .await
        .unwrap();
    assert_eq!(report.restarts, 1);
    assert_eq!(turns(&sink), vec![1, 2, 7, 8, 9]);
}

#[tokio::test]
async fn new_files_are_picked_up_while_the_tailer_runs() {
    let home = tempfile::tempdir().unwrap();
    let sink = Arc::new(MemorySink::new());
    let shutdown = CancellationToken::new();
    let mut s = settings(home.path());
    s.discover_interval = Duration::from_millis(500);
    let task = tokio::spawn(run_until_stopped(s, sink.clone(), shutdown.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await;

    let written = Instant::now();
    append(
        &home.path().join("sessions/session_new/events.jsonl"),
        turn(1).as_bytes(),
    );
    append(
        &home.path().join("event_logs/20261103_100000.jsonl"),
        turn(1).as_bytes(),
    );
    // A generous bound (the discovery interval is 500 ms; a loaded CI machine may take longer): the
    // point is that new files are found at all while the tailer runs, not how fast.
    while sink.items().len() < 2 && written.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = written.elapsed();
    shutdown.cancel();
    task.await.unwrap().unwrap();
    assert_eq!(
        sink.items().len(),
        2,
        "the new files were not read within {took:?}"
    );
    eprintln!("new files read {took:?} after they were written");
    let ids = sink.kept_event_ids();
    assert_eq!(ids.len(), 2);
    assert_eq!(ids[0], ids[1], "the same event in both logs has one id");
}
