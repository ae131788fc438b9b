//! The budget state in batch answers (`X-Apiary-Quota`), against a fake ingest (wiremock) and a real
//! outbox: asked for on every batch and heartbeat, kept in memory and on disk, never erased by an answer
//! without it, replaced by an empty one, not replaced by an earlier reading arriving late.

use apiary_schema::quota::{BudgetScope, BudgetState, Quota, QUOTA_HEADER};
use apiary_schema::{BatchResponse, Policy};
use wiremock::matchers::{header, method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use super::tests::{batch_of, outbox_with_turns, settings};
use super::*;
use crate::identity::IdentityDefaults;
use crate::outbox::{OutboxReader, OutboxSettings};

fn budget(spent: i64) -> BudgetState {
    BudgetState {
        budget_id: "b_1".into(),
        name: Some("team monthly".into()),
        scope: BudgetScope::default(),
        period: "month".into(),
        tz: "Europe/Berlin".into(),
        period_start: "2026-10-31T23:00:00Z".parse().unwrap(),
        period_end: "2026-11-30T23:00:00Z".parse().unwrap(),
        unit: "usd".into(),
        limit: 100_000_000_000,
        spent,
        percent: spent as f64 / 1e9,
        thresholds: vec![50, 80, 100],
        crossed: vec![50, 80],
    }
}

fn quota(as_of: &str, budgets: Vec<BudgetState>) -> Quota {
    Quota {
        as_of: as_of.parse().unwrap(),
        budgets,
    }
}

/// Answers every batch (when it asks for the quota) with all accepted and `quota`.
async fn ingest_answering(quota: Option<Quota>) -> MockServer {
    let ingest = MockServer::start().await;
    answer_with(&ingest, quota).await;
    ingest
}

async fn answer_with(ingest: &MockServer, quota: Option<Quota>) {
    ingest.reset().await;
    Mock::given(method("POST"))
        .and(path("/v1/batches"))
        .and(header(QUOTA_HEADER, "1"))
        .respond_with(move |req: &Request| {
            ResponseTemplate::new(200).set_body_json(BatchResponse {
                accepted: batch_of(req).events.len() as u64,
                duplicates: 0,
                rejected: vec![],
                quota: quota.clone(),
                push_interval_ms: None,
            })
        })
        .mount(ingest)
        .await;
}

/// Pushes the next pending turn (the pushers here send one event per batch); it must be answered.
async fn push_one(pusher: &Pusher) {
    let outcome = pusher.try_push_once().await.unwrap();
    assert!(matches!(outcome, PushOutcome::Sent { .. }), "{outcome:?}");
}

#[tokio::test]
async fn push_asks_for_the_quota_and_keeps_it_in_memory_and_on_disk() {
    let q = quota("2026-11-03T10:00:00Z", vec![budget(82_400_000_000)]);
    let ingest = ingest_answering(Some(q.clone())).await;
    let f = outbox_with_turns(3, Some(&ingest.uri())).await;
    assert_eq!(
        f.outbox.quota(),
        None,
        "nothing known before the first answer"
    );
    let pusher = Pusher::new(f.outbox.clone(), settings()).unwrap();
    let before = chrono::Utc::now() - chrono::Duration::milliseconds(1);
    let outcome = pusher.try_push_once().await.unwrap();
    assert!(
        matches!(outcome, PushOutcome::Sent { events: 3, .. }),
        "the batch carried the quota header (else the fake ingest answers 404): {outcome:?}"
    );
    let kept = f.outbox.quota().expect("the answer's quota is kept");
    assert_eq!(kept.quota, q);
    assert!(kept.received_at >= before && kept.received_at <= chrono::Utc::now());
    let requests = super::tests::posts(&ingest).await;
    assert!(requests
        .iter()
        .all(|r| r.headers.get(QUOTA_HEADER).is_some_and(|v| v == "1")));

    // Another process (`status`) and a restarted agent read the same.
    let db = f.outbox.path().to_path_buf();
    f.outbox.close().await;
    let reader = OutboxReader::open(&db).unwrap();
    assert_eq!(reader.quota().unwrap(), Some(kept.clone()));
    let status = reader.stored_status().unwrap();
    assert_eq!(status.quota.quota, Some(q.clone()));
    assert!(status.quota.advisory);
    let reopened = Outbox::open(
        &db,
        OutboxSettings::default(),
        IdentityDefaults::default(),
        &Policy::default_policy(),
    )
    .unwrap();
    assert_eq!(reopened.quota(), Some(kept));
    reopened.close().await;
}

#[tokio::test]
async fn an_answer_without_quota_keeps_the_known_one_and_an_empty_one_replaces_it() {
    let first = quota("2026-11-03T10:00:00Z", vec![budget(50_000_000_000)]);
    let ingest = ingest_answering(Some(first.clone())).await;
    let f = outbox_with_turns(4, Some(&ingest.uri())).await;
    let pusher = Pusher::new(
        f.outbox.clone(),
        PushSettings {
            batch_max_events: 1,
            ..settings()
        },
    )
    .unwrap();
    push_one(&pusher).await;
    assert_eq!(f.outbox.quota().unwrap().quota, first);

    answer_with(&ingest, None).await;
    push_one(&pusher).await;
    assert_eq!(
        f.outbox.quota().unwrap().quota,
        first,
        "an answer without the field keeps what is known"
    );

    let none_apply = quota("2026-11-03T10:05:00Z", vec![]);
    answer_with(&ingest, Some(none_apply.clone())).await;
    push_one(&pusher).await;
    assert_eq!(
        f.outbox.quota().unwrap().quota,
        none_apply,
        "an empty list replaces it"
    );
    let db = f.outbox.path().to_path_buf();
    f.outbox.close().await;
    let on_disk = OutboxReader::open(&db).unwrap().quota().unwrap().unwrap();
    assert_eq!(on_disk.quota, none_apply);
}

#[tokio::test]
async fn an_earlier_reading_arriving_late_does_not_replace_a_later_one() {
    let later = quota("2026-11-03T10:00:10Z", vec![budget(60_000_000_000)]);
    let earlier = quota("2026-11-03T10:00:00Z", vec![budget(59_000_000_000)]);
    let ingest = ingest_answering(Some(later.clone())).await;
    let f = outbox_with_turns(2, Some(&ingest.uri())).await;
    let pusher = Pusher::new(
        f.outbox.clone(),
        PushSettings {
            batch_max_events: 1,
            ..settings()
        },
    )
    .unwrap();
    push_one(&pusher).await;
    answer_with(&ingest, Some(earlier)).await;
    push_one(&pusher).await;
    assert_eq!(f.outbox.quota().unwrap().quota, later);
    let db = f.outbox.path().to_path_buf();
    f.outbox.close().await;
    let on_disk = OutboxReader::open(&db).unwrap().quota().unwrap().unwrap();
    assert_eq!(on_disk.quota, later, "memory and disk agree");
}

#[tokio::test]
async fn a_heartbeat_answer_brings_the_quota_too() {
    let q = quota("2026-11-03T10:00:00Z", vec![budget(1)]);
    let ingest = ingest_answering(Some(q.clone())).await;
    let f = outbox_with_turns(0, Some(&ingest.uri())).await;
    let pusher = Pusher::new(f.outbox.clone(), settings()).unwrap();
    pusher.standalone_heartbeat().await;
    assert_eq!(f.outbox.quota().map(|k| k.quota), Some(q));
}
