//! A queen with a colony of two workers, read on the dashboard: the session page's spend with
//! everything below is the tree's (its own beside it), model rows of zeros are left out, a worker's page
//! shows its queen and colony above it, the list shows the worst status below a queen and the runtime,
//! and a series has one colour in both charts of the overview.

use chrono::{Duration, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

const KEY: &str = "ck_00112233445566778899aabbccddeeff";

/// An event of worker `id` in queen `queen`'s colony.
fn of_worker(mut e: Value, queen: &str) -> Value {
    e["agent_role"] = "worker".into();
    e["colony_id"] = queen.into();
    e["parent_session_id"] = queen.into();
    e
}

/// The queen q1 ($1.00, a tool call), its colony, worker w1 ($0.50, then stalled) and w2 ($0.25, then
/// failed); models m-one and m-two.
async fn a_queen_and_her_colony(app: &TestApp, t: &Tenant) {
    let at = |m: i64| Utc::now() - Duration::minutes(m);
    let events = vec![
        llm("q1", at(20), "m-one", 1000, 10, 1.0),
        tool("q1", at(19), false),
        event(
            "colony.created",
            Some("q1"),
            at(18),
            json!({ "source": "created", "colony_id": "q1", "queen_session_id": "q1", "colony_key": KEY }),
        ),
        of_worker(llm("w1", at(17), "m-two", 500, 5, 0.5), "q1"),
        of_worker(
            event(
                "health.signal",
                Some("w1"),
                at(16),
                json!({ "signal": "stalled" }),
            ),
            "q1",
        ),
        of_worker(llm("w2", at(15), "m-one", 250, 2, 0.25), "q1"),
        of_worker(
            event(
                "execution",
                Some("w2"),
                at(14),
                json!({ "scope": "execution", "status": "failed" }),
            ),
            "q1",
        ),
        event(
            "execution",
            Some("q1"),
            at(13),
            json!({ "scope": "execution", "status": "completed" }),
        ),
    ];
    let (s, v) = app
        .post_batch(&t.ingest, &batch(events, vec![binding("q1", "alice")]))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["accepted"], 8, "{v}");
}

/// The `data-value` of the element whose `data-field` is `field`.
fn value_of(body: &str, field: &str) -> i128 {
    let key = format!("data-field=\"{field}\" data-value=\"");
    let at = body.find(&key).unwrap_or_else(|| panic!("no {field}")) + key.len();
    body[at..].split('"').next().unwrap().parse().unwrap()
}

/// The opening tags of `body` that hold `needle`.
fn tags_with<'a>(body: &'a str, needle: &str) -> Vec<&'a str> {
    body.split('<')
        .filter(|t| t.contains(needle))
        .map(|t| t.split('>').next().unwrap_or(t))
        .collect()
}

/// The `class` of a tag.
fn class_of(tag: &str) -> &str {
    tag.split("class=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn a_worker_names_its_root_and_a_queen_counts_the_statuses_below(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    a_queen_and_her_colony(&app, &t).await;
    let (_, w1) = app.get(&t.read, "/v1/sessions/w1").await;
    assert_eq!(w1["root_session_id"], "q1", "{w1}");
    assert_eq!(w1["below"], json!({}), "{w1}");
    let (_, q1) = app.get(&t.read, "/v1/sessions/q1").await;
    assert_eq!(q1["root_session_id"], "q1");
    assert_eq!(q1["status"], "completed");
    assert_eq!(q1["below"], json!({"stalled": 1, "failed": 1}), "{q1}");
    let (_, list) = app.get(&t.read, "/v1/sessions").await;
    let q1_listed = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["session_id"] == "q1")
        .unwrap();
    assert_eq!(q1_listed["below"], json!({"stalled": 1, "failed": 1}));
    let (_, tree) = app.get(&t.read, "/v1/sessions/q1/tree").await;
    assert_eq!(tree["below"], json!({"stalled": 1, "failed": 1}), "{tree}");
    // Another tenant's reader finds nothing.
    let other = app.tenant("other").await;
    let (s, _) = app.get(&other.read, "/v1/sessions/w1").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[sqlx::test(migrations = "../migrations")]
async fn the_session_pages_read_the_tree_s_numbers_and_show_a_worker_in_place(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    a_queen_and_her_colony(&app, &t).await;
    let cookie = app.cookie(&t.read).await;
    let (_, tree) = app.get(&t.read, "/v1/sessions/q1/tree").await;

    // The queen: spend with everything below is the tree's total, her own beside it.
    let p = app.page(Some(&cookie), "/sessions/q1").await;
    assert_eq!(p.status, StatusCode::OK, "{}", p.body);
    let all = value_of(&p.body, "cost_nanos_with_below");
    let own = value_of(&p.body, "cost_nanos");
    assert_eq!(all, 1_750_000_000);
    assert_eq!(own, 1_000_000_000);
    assert_eq!(tree["totals"]["cost_nanos"].as_i64(), Some(all as i64));
    assert_eq!(tree["usage"]["cost_nanos"].as_i64(), Some(own as i64));
    assert!(p.body.contains("$1.75"), "shown in dollars too");
    // Her tool call made a usage row without a model: all zeros in the model table, so not shown.
    let models = p.body.split("id=\"models-title\"").nth(1).unwrap();
    let models = models.split("</section>").next().unwrap();
    assert!(models.contains("m-one"), "{models}");
    assert!(!models.contains("(none)"), "{models}");

    // A worker: the queen and the colony above it, itself marked; its own subtree's spend.
    let p = app.page(Some(&cookie), "/sessions/w1").await;
    let tree_html = p.body.split("<ul class=\"tree\">").nth(1).unwrap();
    let tree_html = tree_html.split("</section>").next().unwrap();
    assert!(tree_html.contains("data-session=\"q1\""), "{tree_html}");
    assert!(tree_html.contains(KEY), "the colony: {tree_html}");
    assert!(
        tree_html.contains("data-session=\"w2\""),
        "its sibling: {tree_html}"
    );
    let here = tags_with(tree_html, "aria-current=\"page\"");
    assert_eq!(here.len(), 1, "{here:?}");
    assert!(here[0].contains("/sessions/w1"), "{here:?}");
    assert!(
        tree_html.find("data-session=\"q1\"") < tree_html.find("data-session=\"w1\""),
        "the queen above the worker"
    );
    assert_eq!(value_of(&p.body, "cost_nanos_with_below"), 500_000_000);

    // The list: the worst status below the queen, then the next; the runtime.
    let p = app.page(Some(&cookie), "/sessions").await;
    let row = p.body.split("data-session=\"q1\"").nth(1).unwrap();
    let row = row.split("</tr>").next().unwrap();
    assert!(row.contains("data-worst-below=\"failed\""), "{row}");
    assert!(row.contains("1 failed, 1 stalled below"), "{row}");
    assert!(row.contains("data-field=\"runtime\">hive<"), "{row}");
    let row = p.body.split("data-session=\"w2\"").nth(1).unwrap();
    let row = row.split("</tr>").next().unwrap();
    assert!(!row.contains("below"), "nothing below a worker: {row}");
}

#[sqlx::test(migrations = "../migrations")]
async fn a_series_has_one_colour_in_both_charts(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    // m-cheap spends least but uses the most tokens: its rank differs between the two charts.
    let at = Utc::now() - Duration::minutes(30);
    let events = vec![
        llm("s1", at, "m-dear", 10, 1, 5.0),
        llm("s1", at, "m-cheap", 100_000, 100, 0.01),
        llm("s1", at, "m-mid", 1_000, 10, 1.0),
    ];
    let (s, v) = app
        .post_batch(&t.ingest, &batch(events, vec![binding("s1", "alice")]))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let cookie = app.cookie(&t.read).await;
    let p = app.page(Some(&cookie), "/").await;
    for model in ["m-dear", "m-cheap", "m-mid"] {
        let rects = tags_with(&p.body, &format!("data-series=\"{model}\""));
        let classes: std::collections::BTreeSet<&str> = rects
            .iter()
            .filter(|t| t.starts_with("rect"))
            .map(|t| class_of(t))
            .collect();
        assert_eq!(classes.len(), 1, "{model}: {classes:?}");
    }
    let spend = p.body.split("id=\"spend-title\"").nth(1).unwrap();
    let tokens = p.body.split("id=\"tokens-title\"").nth(1).unwrap();
    let first = |html: &str| {
        tags_with(html, "data-series=")
            .into_iter()
            .find(|t| t.starts_with("li"))
            .map(|t| {
                t.split("data-series=\"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap()
                    .to_string()
            })
    };
    assert_eq!(
        first(spend).as_deref(),
        Some("m-dear"),
        "largest spend first"
    );
    assert_eq!(
        first(tokens).as_deref(),
        Some("m-cheap"),
        "most tokens first"
    );
}
