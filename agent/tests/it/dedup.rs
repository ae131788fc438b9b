//! Deduplication across the outbox's two key tables: a group's new keys go into a small table, which
//! moves into the big one (in key order, event time first) once it holds 16,384 keys. A duplicate is
//! found in either table whatever its event time, including the latest key of the big table, which the
//! writer's shortcut for later times (no lookup past the big table's last time) must not skip.

use apiary_agent::outbox::{Item, Outbox, OutboxSettings};

use crate::support;

/// Keys the small table holds before it moves into the big one (`store::DEDUP_MERGE_AT`).
const MERGE_AT: u128 = 16_384;
const T0: i64 = 1_793_000_000_000;

/// Event `n` at `T0 + ms`.
fn at(n: u128, ms: i64) -> Item {
    let mut item = support::event(n);
    if let Item::Kept(e) = &mut item {
        e.occurred_at_ms = T0 + ms;
    }
    item
}

fn big_table_keys(dir: &std::path::Path) -> i64 {
    let conn = rusqlite::Connection::open(dir.join("outbox.db")).unwrap();
    conn.query_row("SELECT count(*) FROM dedup_keys", [], |r| r.get(0))
        .unwrap()
}

async fn submit(outbox: &Outbox, items: Vec<Item>) -> (u64, u64) {
    let report = outbox.submit(items).await.unwrap();
    (report.accepted, report.duplicates)
}

#[tokio::test]
async fn duplicates_are_found_in_the_merged_keys_at_any_event_time() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = support::open(dir.path(), OutboxSettings::default());
    let n = MERGE_AT + 10;
    let first: Vec<Item> = (0..n).map(|i| at(i, i as i64)).collect();
    assert_eq!(submit(&outbox, first).await, (n as u64, 0));
    assert_eq!(big_table_keys(dir.path()), n as i64, "the keys moved");

    // The oldest, one in the middle, and the latest key of the big table (its last event time).
    let again = vec![at(0, 0), at(777, 777), at(n - 1, n as i64 - 1)];
    assert_eq!(submit(&outbox, again).await, (0, 3));
    // The same id at another time is another key, as before the shortcut.
    assert_eq!(submit(&outbox, vec![at(5, n as i64 + 50)]).await, (1, 0));
    // A later key is new once, then found in the small table.
    assert_eq!(submit(&outbox, vec![at(n, n as i64 + 100)]).await, (1, 0));
    assert_eq!(submit(&outbox, vec![at(n, n as i64 + 100)]).await, (0, 1));
    outbox.close().await;

    // After a restart, the same answers.
    let outbox = support::open(dir.path(), OutboxSettings::default());
    let again = vec![at(1, 1), at(n - 1, n as i64 - 1), at(n, n as i64 + 100)];
    assert_eq!(submit(&outbox, again).await, (0, 3));
    outbox.close().await;
}

#[tokio::test]
async fn a_submission_is_stored_in_its_order_each_new_event_once_whatever_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = support::open(dir.path(), OutboxSettings::default());
    assert_eq!(submit(&outbox, vec![at(500, 0), at(501, 0)]).await, (2, 0));
    // 104 kept events, 100 of them new (new rows go in by statements of many rows, the rest one by one), with
    // duplicates of earlier items of the same submission and of the earlier submission among them.
    let mut items = Vec::new();
    let mut expected = Vec::new();
    for n in 0..100u128 {
        items.push(at(n, n as i64));
        expected.push(support::id(n));
        match n {
            10 => items.push(at(3, 3)),
            40 => items.push(at(500, 0)),
            41 => items.push(at(40, 40)),
            95 => items.push(at(501, 0)),
            _ => {}
        }
    }
    let bodies: Vec<String> = items
        .iter()
        .filter_map(|i| match i {
            Item::Kept(e) => Some(e.body.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(submit(&outbox, items).await, (100, 4));
    outbox.close().await;

    let conn = rusqlite::Connection::open(dir.path().join("outbox.db")).unwrap();
    let rows: Vec<(Vec<u8>, i64, String)> = conn
        .prepare("SELECT event_id, bytes, body FROM events ORDER BY seq")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let ids: Vec<uuid::Uuid> = rows[2..]
        .iter()
        .map(|(id, _, _)| uuid::Uuid::from_slice(id).unwrap())
        .collect();
    assert_eq!(
        ids, expected,
        "the new events, once each, in the submission's order"
    );
    for (_, bytes, body) in &rows[2..] {
        assert!(bodies.contains(body));
        assert_eq!(*bytes, body.len() as i64);
    }
}
