//! A queen with a colony of two workers, read on the dashboard: the session page's spend with
//! everything below is the tree's (its own beside it), model rows of zeros are left out, a worker's page
//! shows its queen and colony above it, the list shows the worst status below a queen and the runtime,
//! and a series has one colour in both charts of the overview and in every view, whichever other series
//! a view shows beside it.

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

/// The one colour class of `series`' bars on a page (None when the page draws none).
fn colour_of<'a>(body: &'a str, series: &str) -> Option<&'a str> {
    let classes: std::collections::BTreeSet<&str> =
        tags_with(body, &format!("data-series=\"{series}\""))
            .into_iter()
            .filter(|t| t.starts_with("rect"))
            .map(class_of)
            .collect();
    assert!(classes.len() <= 1, "{series}: {classes:?}");
    classes.into_iter().next()
}

#[sqlx::test(migrations = "../migrations")]
async fn a_model_keeps_its_colour_in_views_that_show_other_models_beside_it(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    // Two models whose names prefer the same colour slot (FNV-1a of the name modulo 12): a view that
    // shows both must tell them apart, and neither may then change colour in a view showing one.
    let (gpt, claude) = ("gpt-5-mini", "claude-sonnet-4-5-20250929");
    let slot = |k: &str| {
        k.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        }) % 12
    };
    assert_eq!(
        slot(gpt),
        slot(claude),
        "the premise: the two share a preferred slot"
    );
    let today = Utc::now();
    let events = vec![
        llm("s1", today - Duration::days(5), gpt, 1_000, 10, 0.5),
        llm("s2", today - Duration::minutes(30), claude, 1_000, 10, 0.7),
        llm("s2", today - Duration::minutes(20), gpt, 1_000, 10, 0.2),
    ];
    let sessions = vec![binding("s1", "alice"), binding("s2", "bob")];
    let (s, v) = app.post_batch(&t.ingest, &batch(events, sessions)).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let cookie = app.cookie(&t.read).await;
    let day = |d: i64| (today - Duration::days(d)).format("%Y-%m-%d").to_string();
    // First a view of gpt alone (the day five days ago), then the last 30 days (both), then yesterday
    // and today by the hour (both); at the end a view of claude alone (two days ago).
    let alone = app
        .page(
            Some(&cookie),
            &format!("/?from={}&to={}&tz=UTC", day(5), day(4)),
        )
        .await;
    let both = app.page(Some(&cookie), "/").await;
    let hours = app
        .page(
            Some(&cookie),
            &format!("/?from={}&to={}&tz=UTC&granularity=hour", day(1), day(-1)),
        )
        .await;
    let gpt_colour = colour_of(&alone.body, gpt).expect("gpt is drawn");
    assert_eq!(
        colour_of(&alone.body, claude),
        None,
        "claude is outside the first view"
    );
    assert_eq!(
        colour_of(&both.body, gpt),
        Some(gpt_colour),
        "gpt changed colour"
    );
    let claude_colour = colour_of(&both.body, claude).expect("claude is drawn");
    assert_ne!(
        claude_colour, gpt_colour,
        "two models of one view share a colour"
    );
    assert_eq!(colour_of(&hours.body, gpt), Some(gpt_colour));
    assert_eq!(colour_of(&hours.body, claude), Some(claude_colour));
    // A later view without gpt: claude keeps the colour it had beside gpt.
    let (s, v) = app
        .post_batch(
            &t.ingest,
            &batch(
                vec![llm("s3", today - Duration::days(2), claude, 1, 1, 0.1)],
                vec![binding("s3", "bob")],
            ),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let claude_alone = app
        .page(
            Some(&cookie),
            &format!("/?from={}&to={}&tz=UTC", day(2), day(1)),
        )
        .await;
    assert_eq!(colour_of(&claude_alone.body, gpt), None);
    assert_eq!(
        colour_of(&claude_alone.body, claude),
        Some(claude_colour),
        "claude changed colour"
    );
}
