//! Claims scan from a cursor (past the rows still in flight), so these check that nothing behind the
//! cursor is forgotten: a retry that falls due, a released claim, rows let go by consent, a restart.

use crate::support;

use std::time::Duration;

use apiary_agent::outbox::{ClaimLimits, OutboxSettings};
use support::enable;
use uuid::Uuid;

const TEN: ClaimLimits = ClaimLimits {
    max_events: 10,
    max_bytes: 1 << 24,
};

fn ids(range: std::ops::Range<u128>) -> Vec<Uuid> {
    range.map(support::id).collect()
}

#[tokio::test]
async fn a_failed_batch_comes_back_when_due_even_while_new_events_keep_arriving() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = support::open_syncing(dir.path(), 10).await;
    let first = outbox.claim(TEN).await.unwrap();
    assert_eq!(first.ids(), ids(0..10));
    outbox
        .fail(first.ids(), Duration::from_millis(400), "503")
        .await
        .unwrap();
    // New events keep coming; until the retry is due only they are claimed, in order.
    let mut next = 10u128;
    let started = std::time::Instant::now();
    let mut retried = None;
    while started.elapsed() < Duration::from_secs(5) {
        outbox
            .submit((next..next + 10).map(support::event).collect())
            .await
            .unwrap();
        let c = outbox.claim(TEN).await.unwrap();
        if c.ids() == ids(0..10) {
            retried = Some(started.elapsed());
            break;
        }
        assert_eq!(c.ids(), ids(next..next + 10), "fresh events, oldest first");
        support::deliver(&outbox, c.ids()).await;
        next += 10;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let waited = retried.expect("the failed batch was never claimed again");
    assert!(
        waited >= Duration::from_millis(350),
        "claimed again before its retry time ({waited:?})"
    );
    let c = outbox.claim(TEN).await.unwrap();
    assert_eq!(c.ids(), ids(next..next + 10), "then the newest ones");
    outbox.close().await;
}

#[tokio::test]
async fn released_claims_and_rows_let_go_by_consent_are_claimed_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = support::open(dir.path(), OutboxSettings::default());
    outbox
        .submit((0..5).map(support::event).collect())
        .await
        .unwrap();
    outbox.set_sync(enable(false)).await.unwrap();
    outbox
        .submit((5..25).map(support::event).collect())
        .await
        .unwrap();
    let a = outbox.claim(TEN).await.unwrap();
    let b = outbox.claim(TEN).await.unwrap();
    assert_eq!((a.ids(), b.ids()), (ids(5..15), ids(15..25)));
    assert!(outbox.claim(TEN).await.unwrap().events.is_empty());
    outbox.release(a.ids()).await.unwrap();
    assert_eq!(outbox.claim(TEN).await.unwrap().ids(), ids(5..15));
    // The backlog from before consent sits behind the cursor; enabling with it makes it claimable now.
    outbox.set_sync(enable(true)).await.unwrap();
    assert_eq!(outbox.claim(TEN).await.unwrap().ids(), ids(0..5));
    outbox.close().await;
}

#[tokio::test]
async fn after_a_restart_everything_unsettled_is_claimable_again_and_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = support::open_syncing(dir.path(), 30).await;
    let a = outbox.claim(TEN).await.unwrap();
    let b = outbox.claim(TEN).await.unwrap();
    support::deliver(&outbox, a.ids()).await;
    outbox
        .fail(b.ids(), Duration::from_secs(3600), "timeout")
        .await
        .unwrap();
    outbox.close().await;
    drop(outbox);

    let outbox = support::open(dir.path(), OutboxSettings::default());
    let c = outbox.claim(TEN).await.unwrap();
    assert_eq!(
        c.ids(),
        ids(20..30),
        "never claimed before, and not delivered"
    );
    assert!(
        outbox.claim(TEN).await.unwrap().events.is_empty(),
        "the failed batch waits for its retry time across the restart"
    );
    outbox.close().await;
}

/// Under `drop_oldest`, eviction passes over the events a push has in flight: they may already be in
/// the cloud, and evicting one would count (and report upstream) as dropped an event that was
/// delivered. The push's acknowledgement then settles every one of them.
#[tokio::test]
async fn eviction_passes_over_the_events_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let settings = OutboxSettings {
        max_bytes: 64 * 1024,
        overflow: apiary_agent::outbox::Overflow::DropOldest,
        ..OutboxSettings::default()
    };
    let outbox = support::open(dir.path(), settings);
    outbox.set_sync(enable(false)).await.unwrap();
    outbox
        .submit((0..10).map(support::event).collect())
        .await
        .unwrap();
    let in_flight = outbox.claim(TEN).await.unwrap();
    assert_eq!(in_flight.ids(), ids(0..10));
    // Far more than the cap: the oldest pending events go, but not the ten in flight.
    for k in 0..40u128 {
        let from = 10 + k * 100;
        outbox
            .submit((from..from + 100).map(support::event).collect())
            .await
            .unwrap();
    }
    let st = outbox.status().await.unwrap().stored;
    assert!(st.counters.evicted > 0, "{:?}", st.counters);
    let report = support::deliver(&outbox, in_flight.ids()).await;
    assert_eq!(
        (report.settled, report.not_pending),
        (10, 0),
        "an event in flight was evicted"
    );
    let st = outbox.status().await.unwrap().stored;
    assert!(st.balanced, "{:?}", st.counters);
    outbox.close().await;
}

/// Submits 100-event batches from `from` until one is refused as full; returns where the next would
/// start.
async fn fill_to_the_cap(outbox: &apiary_agent::outbox::Outbox, mut from: u128) -> u128 {
    loop {
        match outbox
            .submit((from..from + 100).map(support::event).collect())
            .await
        {
            Ok(_) => from += 100,
            Err(apiary_agent::outbox::OutboxError::Full { .. }) => return from,
            Err(e) => panic!("{e}"),
        }
        assert!(from < 100_000, "the cap was never reached");
    }
}

/// Claims and acknowledges every pending event.
async fn deliver_all(outbox: &apiary_agent::outbox::Outbox) {
    let all = ClaimLimits {
        max_events: 10_000,
        max_bytes: usize::MAX,
    };
    loop {
        let claimed = outbox.claim(all).await.unwrap();
        if claimed.events.is_empty() {
            return;
        }
        support::deliver(outbox, claimed.ids()).await;
    }
}

/// At its cap under `reject`, the outbox first prunes what was delivered: a submission that fits once
/// the delivered events are gone is admitted, one larger than the whole cap is still refused, and
/// nothing of it is kept.
#[tokio::test]
async fn at_the_cap_delivered_events_make_room_but_never_more_than_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let settings = OutboxSettings {
        max_bytes: 1024 * 1024,
        ..OutboxSettings::default()
    };
    let outbox = support::open(dir.path(), settings);
    outbox.set_sync(enable(false)).await.unwrap();
    let next = fill_to_the_cap(&outbox, 0).await;
    deliver_all(&outbox).await;
    let report = outbox
        .submit((next..next + 100).map(support::event).collect())
        .await
        .expect("the delivered events make room");
    assert_eq!(report.accepted, 100);

    let next = fill_to_the_cap(&outbox, next + 100).await;
    deliver_all(&outbox).await;
    let pending = outbox.status().await.unwrap().stored.pending_events;
    assert_eq!(pending, 0);
    // Far more than the cap holds, even empty: refused after the delivered events are pruned.
    let refused = outbox
        .submit((next..next + 4000).map(support::event).collect())
        .await;
    assert!(
        matches!(refused, Err(apiary_agent::outbox::OutboxError::Full { .. })),
        "{refused:?}"
    );
    let st = outbox.status().await.unwrap().stored;
    assert_eq!((st.pending_events, st.balanced), (0, true));
    outbox.close().await;
}

/// Under `drop_oldest` at the cap, a submission evicts about what it adds — the oldest pending events
/// whose bytes cover its own estimate — not a multiple of it.
#[tokio::test]
async fn at_the_cap_drop_oldest_evicts_about_as_much_as_a_submission_adds() {
    let dir = tempfile::tempdir().unwrap();
    let settings = OutboxSettings {
        max_bytes: 1024 * 1024,
        overflow: apiary_agent::outbox::Overflow::DropOldest,
        ..OutboxSettings::default()
    };
    let outbox = support::open(dir.path(), settings);
    let mut from = 0u128;
    let mut evicted = Vec::new();
    while from < 8000 {
        let report = outbox
            .submit((from..from + 100).map(support::event).collect())
            .await
            .unwrap();
        assert_eq!(report.accepted, 100);
        evicted.push(report.evicted);
        from += 100;
    }
    let at_the_cap: Vec<u64> = evicted.into_iter().skip_while(|n| *n == 0).collect();
    assert!(
        at_the_cap.len() > 10,
        "the cap was reached late: {at_the_cap:?}"
    );
    assert!(
        at_the_cap.iter().all(|n| (100..=200).contains(n)),
        "events evicted by each 100-event submission at the cap: {at_the_cap:?}"
    );
    // The pending bytes counted are those of the events still pending (all the same size here).
    let apiary_agent::outbox::Item::Kept(one) = support::event(0) else {
        unreachable!()
    };
    let st = outbox.status().await.unwrap().stored;
    assert_eq!(
        st.pending_bytes,
        st.pending_events * one.body.len() as u64,
        "pending bytes after evictions ({} events pending)",
        st.pending_events
    );
    outbox.close().await;
}
