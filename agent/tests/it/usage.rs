//! The local usage table as the outbox's writer keeps it: sums per session and model, and the parent a
//! session's events name.

use apiary_agent::outbox::{Item, Outbox, OutboxSettings};

use crate::support;

async fn accepted(outbox: &Outbox, items: Vec<Item>) -> u64 {
    outbox.submit(items).await.unwrap().accepted
}

/// Event `n` of session `w`: one LLM call of `model`, its parent as the event names it.
fn turn(n: u128, parent: Option<&str>) -> Item {
    let mut item = support::event(n);
    if let Item::Kept(e) = &mut item {
        e.session_id = Some("w".into());
        e.parent_session_id = parent.map(str::to_string);
        let usage = apiary_agent::outbox::UsageAgg {
            parent_session_id: parent.map(str::to_string),
            llm_calls: 1,
            ..Default::default()
        };
        e.usage = Some(Box::new(("m".to_string(), usage)));
    }
    item
}

#[tokio::test]
async fn a_sessions_usage_takes_the_first_parent_named_and_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = support::open(dir.path(), OutboxSettings::default());
    let parent = |dir: &std::path::Path| -> (Option<String>, i64) {
        let conn = rusqlite::Connection::open(dir.join("outbox.db")).unwrap();
        conn.query_row(
            "SELECT parent_session_id, llm_calls FROM usage WHERE session_id = 'w' AND model = 'm'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap()
    };
    assert_eq!(accepted(&outbox, vec![turn(1, None)]).await, 1);
    assert_eq!(parent(dir.path()), (None, 1));
    // A later group names the parent: the row adopts it.
    assert_eq!(accepted(&outbox, vec![turn(2, Some("q"))]).await, 1);
    assert_eq!(parent(dir.path()), (Some("q".into()), 2));
    // Another parent named later, or none, changes nothing.
    let later = vec![turn(3, Some("z")), turn(4, None)];
    assert_eq!(accepted(&outbox, later).await, 2);
    assert_eq!(parent(dir.path()), (Some("q".into()), 4));
    outbox.close().await;
}

/// One group with two models interleaved in one session: each model's row sums its own calls.
#[tokio::test]
async fn two_models_in_one_group_each_sum_their_own_calls() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = support::open(dir.path(), OutboxSettings::default());
    let items: Vec<Item> = (1..=5)
        .map(|n| {
            let mut item = turn(n, None);
            if let Item::Kept(e) = &mut item {
                let model = if n % 2 == 0 { "even" } else { "odd" };
                e.usage.as_mut().unwrap().0 = model.to_string();
            }
            item
        })
        .collect();
    assert_eq!(accepted(&outbox, items).await, 5);
    let conn = rusqlite::Connection::open(dir.path().join("outbox.db")).unwrap();
    let rows: Vec<(String, i64)> = conn
        .prepare("SELECT model, llm_calls FROM usage WHERE session_id = 'w' ORDER BY model")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows, [("even".to_string(), 2), ("odd".to_string(), 3)]);
    outbox.close().await;
}
