//! Bad input → a clear 4xx (never a 5xx), and nothing partially stored.

use chrono::Utc;
use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::*;

/// Rows per table of every table with a `tenant_id` column (listed from the catalog, so a table added
/// later is covered) and of `event_keys`.
async fn tenant_rows(app: &TestApp) -> std::collections::BTreeMap<String, i64> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT c.table_name::text FROM information_schema.columns c
           JOIN pg_class k ON k.relname = c.table_name AND k.relnamespace = 'public'::regnamespace
          WHERE c.table_schema = 'public' AND c.column_name = 'tenant_id' AND NOT k.relispartition
            AND k.relkind IN ('r', 'p')
         UNION SELECT 'event_keys' ORDER BY 1",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert!(tables.len() > 20, "{tables:?}");
    let mut out = std::collections::BTreeMap::new();
    for t in tables {
        out.insert(t.clone(), app.count(&t).await);
    }
    out
}

/// Every tenant table holds what it held `before`, but for the tables named in `heard_from`: refused
/// input stored nothing anywhere.
async fn assert_nothing_stored(
    app: &TestApp,
    before: &std::collections::BTreeMap<String, i64>,
    heard_from: &[&str],
) {
    let after = tenant_rows(app).await;
    let changed: Vec<String> = after
        .iter()
        .filter(|(t, n)| before.get(*t) != Some(n) && !heard_from.contains(&t.as_str()))
        .map(|(t, n)| format!("{t}: {:?} → {n}", before.get(t)))
        .collect();
    assert!(changed.is_empty(), "refused input stored rows: {changed:?}");
    for table in ["event_keys", "events", "usage_rollups", "sessions"] {
        assert_eq!(after[table], 0, "{table} must stay empty");
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn malformed_bodies_are_4xx_with_a_code_and_store_nothing(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let before = tenant_rows(&app).await;
    let good = serde_json::to_vec(&batch(vec![tool("q1", Utc::now(), false)], vec![])).unwrap();
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)).into_bytes();
    let bomb = gzip(&vec![b' '; 5 * 1024 * 1024]);
    let mut no_id = batch(vec![tool("q1", Utc::now(), false)], vec![]);
    no_id["events"][0]
        .as_object_mut()
        .unwrap()
        .remove("event_id");
    let mut bad_types = batch(vec![tool("q1", Utc::now(), false)], vec![]);
    bad_types["sent_at"] = json!(12);
    let mut events_obj = batch(vec![], vec![]);
    events_obj["events"] = json!({ "a": 1 });
    let mut v2 = batch(vec![tool("q1", Utc::now(), false)], vec![]);
    v2["schema_version"] = json!(2);
    let mut v_huge = v2.clone();
    v_huge["schema_version"] = json!(4294967297u64);
    let cases: Vec<(&str, Vec<u8>, Option<&str>, StatusCode)> = vec![
        (
            "malformed JSON",
            b"{\"schema_version\": 1,".to_vec(),
            None,
            StatusCode::BAD_REQUEST,
        ),
        (
            "not an object",
            b"[1,2]".to_vec(),
            None,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        ("deep nesting", deep, None, StatusCode::BAD_REQUEST),
        (
            "bad gzip",
            b"this is not gzip".to_vec(),
            Some("gzip"),
            StatusCode::BAD_REQUEST,
        ),
        (
            "bad zstd",
            b"this is not zstd".to_vec(),
            Some("zstd"),
            StatusCode::BAD_REQUEST,
        ),
        (
            "unknown encoding",
            good.clone(),
            Some("br"),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
        ),
        (
            "compression bomb",
            bomb,
            Some("gzip"),
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
        (
            "huge body",
            vec![b' '; 2 * 1024 * 1024],
            None,
            StatusCode::PAYLOAD_TOO_LARGE,
        ),
        (
            "event without id",
            serde_json::to_vec(&no_id).unwrap(),
            None,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "wrong types",
            serde_json::to_vec(&bad_types).unwrap(),
            None,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "events not an array",
            serde_json::to_vec(&events_obj).unwrap(),
            None,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            "unknown schema version",
            serde_json::to_vec(&v2).unwrap(),
            None,
            StatusCode::BAD_REQUEST,
        ),
        (
            "overflowing schema version",
            serde_json::to_vec(&v_huge).unwrap(),
            None,
            StatusCode::BAD_REQUEST,
        ),
    ];
    for (name, body, enc, want) in cases {
        let (s, v) = app.post_raw(&t.ingest, body, enc).await;
        assert_eq!(s, want, "{name}: {v}");
        assert!(
            v["error"]["code"].is_string() && v["error"]["message"].is_string(),
            "{name}: {v}"
        );
    }
    let many = batch(
        (0..2001).map(|_| tool("q1", Utc::now(), false)).collect(),
        vec![],
    );
    let (s, _) = app.post_batch(&t.ingest, &many).await;
    assert_eq!(s, StatusCode::PAYLOAD_TOO_LARGE);
    assert_nothing_stored(&app, &before, &[]).await;
}

#[sqlx::test(migrations = "../migrations")]
async fn bad_events_are_rejected_one_by_one_with_reasons(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let before = tenant_rows(&app).await;
    let now = Utc::now();
    let mut wrong_type = llm("q1", now, "m", 1, 1, 0.1);
    wrong_type["data"]["input_tokens"] = json!("lots");
    let mut unknown_kind = tool("q1", now, false);
    unknown_kind["type"] = json!("llm.stream");
    let mut v9 = tool("q1", now, false);
    v9["schema_version"] = json!(9);
    let mut no_session = tool("q1", now, false);
    no_session.as_object_mut().unwrap().remove("session_id");
    let mut extra_envelope = tool("q1", now, false);
    extra_envelope["prompt"] = json!("hello");
    let mut nested = tool("q1", now, false);
    nested["data"]["tool_name"] = json!({ "deep": { "er": 1 } });
    let future = tool("q1", now + chrono::Duration::days(30), false);
    let mut negative_cost = llm("q1", now, "m", 1, 1, 0.1);
    negative_cost["data"]["cost_usd"] = json!(-3.0);
    let events = vec![
        wrong_type,
        unknown_kind,
        v9,
        no_session,
        extra_envelope,
        nested,
        future,
        negative_cost,
    ];
    let n = events.len();
    let (s, v) = app.post_batch(&t.ingest, &batch(events, vec![])).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["accepted"], 0);
    assert_eq!(v["rejected"].as_array().unwrap().len(), n, "{v}");
    for r in v["rejected"].as_array().unwrap() {
        assert!(!r["reason"].as_str().unwrap().is_empty());
    }
    // A batch answered 200 was its device's word: the device was heard from (its row and the live
    // stream's device event), even when every event was refused.
    assert_nothing_stored(
        &app,
        &before,
        &["devices", "stream_devices", "stream_events"],
    )
    .await;
}

#[sqlx::test(migrations = "../migrations")]
async fn bad_query_parameters_are_400_naming_the_parameter(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    for (q, param) in [
        ("tz=Not/AZone", "tz"),
        ("granularity=week", "granularity"),
        ("group_by=prompt", "group_by"),
        ("from=yesterday", "from"),
        ("from=2026-11-03T10:07:00Z", "from"),
        ("from=2026-11-05&to=2026-11-04", "from"),
        ("colour=red", "colour"),
    ] {
        let (s, v) = app.get(&t.read, &format!("/v1/usage?{q}")).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{q}: {v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&format!("`{param}`")),
            "{q}: {v}"
        );
    }
}
