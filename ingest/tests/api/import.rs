//! `import`: an export bundle loads through the batch path, idempotently, after its checksum is verified.

use std::io::Write;

use apiary_ingest::intake::IntakeRules;
use apiary_ingest::store::Store;
use chrono::Utc;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::helpers::*;

fn write_bundle(
    dir: &std::path::Path,
    events: &[serde_json::Value],
    tamper: bool,
) -> std::path::PathBuf {
    let body: String = events.iter().map(|e| format!("{e}\n")).collect();
    let sum = hex::encode(Sha256::digest(body.as_bytes()));
    let manifest = json!({ "manifest": {
        "format": "apiary-export", "format_version": 1, "schema_version": 1, "device_id": "dev-air", "agent_version": "0.1.0",
        "policy_hash": "abc", "sessions": [binding("q1", "alice")],
        "counts": { "events": events.len(), "by_type": {}, "held": 0 },
        "checksum": { "algorithm": "sha256", "over": "event_lines", "value": sum } } });
    let body = if tamper {
        body.replace("read_file", "read_fil3")
    } else {
        body
    };
    let path = dir.join("bundle.ndjson.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&path).unwrap(),
        flate2::Compression::fast(),
    );
    writeln!(enc, "{manifest}").unwrap();
    enc.write_all(body.as_bytes()).unwrap();
    enc.finish().unwrap();
    path
}

#[sqlx::test(migrations = "../migrations")]
async fn importing_a_bundle_twice_changes_nothing_the_second_time(pool: sqlx::PgPool) {
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let now = Utc::now();
    let mut events: Vec<_> = (0..2500)
        .map(|i| llm("q1", now, "m", i, 1, 0.001))
        .collect();
    events.push(tool("q1", now, true));
    let dir = tempfile::tempdir().unwrap();
    let path = write_bundle(dir.path(), &events, false);
    let store = Store::new(pool.clone());
    let rules = IntakeRules::from_settings(&test_settings());
    let first = apiary_ingest::import::run(&store, &rules, t.id, &path)
        .await
        .unwrap();
    assert_eq!((first.accepted, first.duplicates), (2501, 0));
    let second = apiary_ingest::import::run(&store, &rules, t.id, &path)
        .await
        .unwrap();
    assert_eq!((second.accepted, second.duplicates), (0, 2501));
    let (_, v) = app.get(&t.read, "/v1/sessions/q1").await;
    assert_eq!(v["user_id"], "alice");
    assert_eq!(v["totals"]["llm_calls"], 2500);
    assert_eq!(v["totals"]["input_tokens"], (0..2500).sum::<u64>());
    // The same events pushed over HTTP afterwards are duplicates too.
    let (_, r) = app
        .post_batch(&t.ingest, &batch(events[..10].to_vec(), vec![]))
        .await;
    assert_eq!(r["duplicates"], 10);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_tampered_bundle_is_refused_before_anything_is_stored(pool: sqlx::PgPool) {
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_bundle(dir.path(), &[tool("q1", Utc::now(), false)], true);
    let store = Store::new(pool);
    let err = apiary_ingest::import::run(
        &store,
        &IntakeRules::from_settings(&test_settings()),
        t.id,
        &path,
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("checksum"), "{err}");
    assert_eq!(app.count("events").await, 0);
}
