//! Bad input in a followed log: huge lines, invalid UTF-8, bad JSON, a partial last line. Each bad line
//! is one malformed item with its line number and offset, never its content; good lines around it are kept.

use crate::tail_support;

use std::fs;
use std::path::Path;
use std::sync::Arc;

use apiary_agent::tail::memory::MemorySink;
use apiary_agent::tail::{TailItem, Tailer};
use tail_support::{append, fixtures, log_path, settings, turn, turns, LOG};

async fn start(home: &Path, sink: &Arc<MemorySink>) -> Tailer<MemorySink> {
    Tailer::start(settings(home), sink.clone()).await.unwrap()
}

#[tokio::test]
async fn a_huge_line_is_skipped_to_its_newline_and_reported() {
    let home = tempfile::tempdir().unwrap();
    let path = log_path(home.path());
    let huge = format!(
        "{{\"type\": \"custom\", \"data\": \"{}\"}}",
        "x".repeat(3 << 20)
    );
    append(&path, format!("{}{}", turn(1), &huge[..2 << 20]).as_bytes());
    let sink = Arc::new(MemorySink::new());
    let mut tailer = start(home.path(), &sink).await;
    tailer.try_poll_once().await.unwrap();
    assert_eq!(sink.items().len(), 1, "the unfinished huge line waits");

    append(
        &path,
        format!("{}\n{}", &huge[2 << 20..], turn(2)).as_bytes(),
    );
    tailer.try_poll_once().await.unwrap();
    assert_eq!(turns(&sink), vec![1, 2]);
    let items = sink.items();
    let TailItem::Malformed {
        line_no,
        offset,
        reason,
        ..
    } = &items[1]
    else {
        panic!("expected the huge line to be malformed: {:?}", items[1]);
    };
    assert_eq!((*line_no, *offset), (2, turn(1).len() as u64));
    assert_eq!(
        reason,
        &format!("line too long: {} bytes (limit 1048576)", huge.len())
    );
}

#[tokio::test]
async fn bad_lines_are_malformed_with_their_position_and_a_partial_last_line_waits() {
    let home = tempfile::tempdir().unwrap();
    let fixture = fixtures().join("bad_lines.jsonl");
    let bytes = fs::read(fixture).unwrap();
    append(&log_path(home.path()), &bytes);
    let sink = Arc::new(MemorySink::new());
    start(home.path(), &sink)
        .await
        .try_poll_once()
        .await
        .unwrap();

    let items = sink.items();
    assert_eq!(items.len(), 13, "line 14 has no newline yet");
    let last_newline = bytes.iter().rposition(|&b| b == b'\n').unwrap() as u64;
    assert_eq!(sink.checkpoint(LOG).unwrap().offset, last_newline + 1);
    let line_starts: Vec<u64> = std::iter::once(0)
        .chain(
            bytes
                .iter()
                .enumerate()
                .filter(|(_, &b)| b == b'\n')
                .map(|(i, _)| i as u64 + 1),
        )
        .collect();
    for (i, item) in items.iter().enumerate() {
        if let TailItem::Malformed {
            line_no,
            offset,
            reason,
            ..
        } = item
        {
            assert_eq!(*line_no, i as u64 + 1);
            assert_eq!(*offset, line_starts[i]);
            assert!(
                !reason.contains("zzcanary") && !reason.contains("/home"),
                "{reason}"
            );
        }
    }
    let malformed = |n: usize| matches!(items[n - 1], TailItem::Malformed { .. });
    assert!(
        malformed(2) && malformed(3) && malformed(9),
        "bad JSON, not an object, bad UTF-8"
    );
    assert!(
        [1, 4, 11, 12, 13].iter().all(|&n| !malformed(n)),
        "good lines"
    );
    let TailItem::Malformed { reason, .. } = &items[8] else {
        unreachable!()
    };
    assert!(reason.starts_with("invalid UTF-8"), "{reason}");
}

#[tokio::test]
async fn line_numbers_continue_after_a_restart_of_the_agent() {
    let home = tempfile::tempdir().unwrap();
    let path = log_path(home.path());
    append(&path, format!("{}{}", turn(1), turn(2)).as_bytes());
    let sink = Arc::new(MemorySink::new());
    start(home.path(), &sink)
        .await
        .try_poll_once()
        .await
        .unwrap();

    append(&path, b"{not json\n");
    start(home.path(), &sink)
        .await
        .try_poll_once()
        .await
        .unwrap();
    let items = sink.items();
    assert!(
        matches!(&items[2], TailItem::Malformed { line_no: 3, offset, .. } if *offset == 2 * turn(1).len() as u64),
        "{:?}",
        items[2]
    );
}
