//! `import`: an export bundle loads through the batch path, idempotently, after its checksum and its
//! device's seal are verified, bound to the device its key is registered for.

use std::io::Write;
use std::path::{Path, PathBuf};

use apiary_ingest::import::{self, Trust};
use apiary_ingest::intake::IntakeRules;
use apiary_ingest::store::device_keys::{self, RegisteredBy};
use apiary_ingest::store::Store;
use apiary_schema::bundle::seal::{write_sealed_manifest, Seal};
use apiary_schema::device_key::SigningKey;
use chrono::Utc;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::helpers::*;

/// The gzip header a `GzEncoder` at this level writes (what a seal covers besides the manifest).
fn gzip_header() -> Vec<u8> {
    flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast())
        .finish()
        .unwrap()[..10]
        .to_vec()
}

/// A bundle of `events` from device `dev-air` (alice's session q1), sealed by `key` when given.
fn bundle_bytes(events: &[serde_json::Value], key: Option<&SigningKey>) -> Vec<u8> {
    let body: String = events.iter().map(|e| format!("{e}\n")).collect();
    let sum = hex::encode(Sha256::digest(body.as_bytes()));
    let manifest = json!({
        "format": "apiary-export", "format_version": 1, "schema_version": 1, "device_id": "dev-air",
        "agent_version": "0.1.0", "policy_hash": "abc", "sessions": [binding("q1", "alice")],
        "counts": { "events": events.len(), "by_type": {}, "held": 0 },
        "checksum": { "algorithm": "sha256", "over": "event_lines", "value": sum } });
    let manifest = serde_json::to_string(&manifest).unwrap();
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    match key {
        Some(k) => {
            let seal = Seal::sign(k, &gzip_header(), &manifest);
            write_sealed_manifest(&mut enc, &manifest, &seal).unwrap();
        }
        None => writeln!(enc, "{{\"manifest\":{manifest}}}").unwrap(),
    }
    enc.write_all(body.as_bytes()).unwrap();
    enc.finish().unwrap()
}

fn write_bundle(dir: &Path, events: &[serde_json::Value], key: Option<&SigningKey>) -> PathBuf {
    let path = dir.join("bundle.ndjson.gz");
    std::fs::write(&path, bundle_bytes(events, key)).unwrap();
    path
}

fn turns(n: u64) -> Vec<serde_json::Value> {
    let now = Utc::now();
    (0..n).map(|i| llm("q1", now, "m", i, 1, 0.001)).collect()
}

/// Registers `key` for alice's device `dev-air`, as `device register` does.
async fn register(pool: &sqlx::PgPool, tenant: uuid::Uuid, key: &SigningKey) {
    device_keys::register(
        pool,
        tenant,
        Some("alice"),
        "dev-air",
        &key.public(),
        RegisteredBy::Admin,
        false,
    )
    .await
    .unwrap();
}

fn rules() -> IntakeRules {
    IntakeRules::from_settings(&test_settings())
}

#[sqlx::test(migrations = "../migrations")]
async fn importing_a_sealed_bundle_twice_changes_nothing_the_second_time(pool: sqlx::PgPool) {
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let key = SigningKey::from_seed(&[1; 32]);
    register(&pool, t.id, &key).await;
    let mut events = turns(2500);
    events.push(tool("q1", Utc::now(), true));
    let dir = tempfile::tempdir().unwrap();
    let path = write_bundle(dir.path(), &events, Some(&key));
    let store = Store::new(pool.clone());
    let first = import::run(&store, &rules(), t.id, &path, &Trust::Sealed)
        .await
        .unwrap();
    assert_eq!(
        (first.verdicts.accepted, first.verdicts.duplicates),
        (2501, 0)
    );
    assert_eq!(
        first.binding.signed_by.as_deref(),
        Some(key.public().fingerprint().as_str())
    );
    assert_eq!(
        (
            first.binding.user_id.as_deref(),
            first.binding.device_id.as_str()
        ),
        (Some("alice"), "dev-air")
    );
    let second = import::run(&store, &rules(), t.id, &path, &Trust::Sealed)
        .await
        .unwrap();
    assert_eq!(
        (second.verdicts.accepted, second.verdicts.duplicates),
        (0, 2501)
    );
    let (_, v) = app.get(&t.read, "/v1/sessions/q1").await;
    assert_eq!(
        (v["user_id"].as_str(), v["device_id"].as_str()),
        (Some("alice"), Some("dev-air"))
    );
    assert_eq!(v["totals"]["llm_calls"], 2500);
    assert_eq!(v["totals"]["input_tokens"], (0..2500).sum::<u64>());
    // The same events pushed over HTTP afterwards are duplicates too.
    let (_, r) = app
        .post_batch(&t.ingest, &batch(events[..10].to_vec(), vec![]))
        .await;
    assert_eq!(r["duplicates"], 10);
}

#[test]
fn every_byte_of_a_sealed_bundle_file_changed_is_refused_with_the_reason() {
    let key = SigningKey::from_seed(&[2; 32]);
    let bytes = bundle_bytes(&turns(3), Some(&key));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.gz");
    std::fs::write(&path, &bytes).unwrap();
    let ok = import::verify(&path).unwrap();
    assert_eq!(ok.key, Some(key.public()));
    let content = |b: &[u8]| {
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::MultiGzDecoder::new(b), &mut out).unwrap();
        out
    };
    let mut reasons = std::collections::BTreeSet::new();
    for i in 0..bytes.len() {
        let mut changed = bytes.clone();
        changed[i] ^= 0xff;
        std::fs::write(&path, &changed).unwrap();
        match import::verify(&path) {
            // What the seal protects is the content: a changed byte may still decode to the same bytes
            // (seen about once in twenty runs: a byte in the middle of the compressed stream of three
            // alike events, flipped whole, decoded to the same text), and then nothing a reader reads
            // was changed.
            Ok(_) => {
                assert_eq!(
                    content(&changed),
                    content(&bytes),
                    "byte {i} of {} flipped was accepted with other content",
                    bytes.len()
                );
            }
            Err(e) => {
                let text = e.to_string();
                assert!(!text.is_empty(), "byte {i}: an empty reason");
                reasons.insert(text.split(':').next().unwrap().to_string());
            }
        }
    }
    // The header and the manifest fail on the seal, the compressed data on gzip's own checks.
    assert!(
        reasons.iter().any(|r| r.starts_with("signature refused")),
        "{reasons:?}"
    );
    // A byte added at the end is refused too (not a gzip member).
    let mut longer = bytes.clone();
    longer.push(0);
    std::fs::write(&path, &longer).unwrap();
    assert!(import::verify(&path).is_err());
    // Single bits: the only ones that pass are padding bits after a deflate stream's last block (in the
    // byte before a gzip member's 8-byte trailer; a bundle is several members), which no reader reads —
    // the content is the same bytes.
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut changed = bytes.clone();
            changed[i] ^= 1 << bit;
            std::fs::write(&path, &changed).unwrap();
            if import::verify(&path).is_ok() {
                assert_eq!(
                    content(&changed),
                    content(&bytes),
                    "bit {bit} of byte {i} flipped was accepted with other content"
                );
            }
        }
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn a_bundle_changed_between_the_two_passes_stops_before_its_unverified_events(
    pool: sqlx::PgPool,
) {
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let key = SigningKey::from_seed(&[3; 32]);
    register(&pool, t.id, &key).await;
    let events = turns(2500);
    let dir = tempfile::tempdir().unwrap();
    let path = write_bundle(dir.path(), &events, Some(&key));
    let mut file = import::open(&path).unwrap();
    let inspected = import::verify(&path).unwrap();
    let binding = import::trust::authorize(&pool, t.id, &inspected, &Trust::Sealed)
        .await
        .unwrap();
    // Between the passes the file (the same inode the import holds) gets another event 1500.
    let mut swapped = events.clone();
    swapped[1500] = llm("q1", Utc::now(), "m", 1_000_000, 1, 0.001);
    std::fs::write(&path, bundle_bytes(&swapped, Some(&key))).unwrap();
    let err = import::load(
        &Store::new(pool.clone()),
        &rules(),
        t.id,
        &path,
        &mut file,
        &inspected,
        binding,
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("changed while it was being imported"),
        "{err}"
    );
    assert_eq!(
        app.count("events").await,
        1000,
        "only the verified first chunk"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn an_unsigned_bundle_is_refused_unless_the_admin_vouches_for_it(pool: sqlx::PgPool) {
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let dir = tempfile::tempdir().unwrap();
    let path = write_bundle(dir.path(), &turns(3), None);
    let store = Store::new(pool.clone());
    let err = import::run(&store, &rules(), t.id, &path, &Trust::Sealed)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("the bundle is not signed"),
        "{err}"
    );
    assert_eq!(app.count("events").await, 0);
    // Vouched for as another device than the one the bundle names: refused.
    let elsewhere = Trust::Unsigned {
        user_id: "alice".into(),
        device_id: "dev-other".into(),
    };
    let err = import::run(&store, &rules(), t.id, &path, &elsewhere)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("comes from device \"dev-air\""),
        "{err}"
    );
    let vouched = Trust::Unsigned {
        user_id: "alice".into(),
        device_id: "dev-air".into(),
    };
    let done = import::run(&store, &rules(), t.id, &path, &vouched)
        .await
        .unwrap();
    assert_eq!(done.verdicts.accepted, 3);
    assert!(done.binding.trusted_unsigned && done.binding.signed_by.is_none());
}

#[sqlx::test(migrations = "../migrations")]
async fn a_tampered_bundle_is_refused_before_anything_is_stored(pool: sqlx::PgPool) {
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let dir = tempfile::tempdir().unwrap();
    let bytes = bundle_bytes(&[tool("q1", Utc::now(), false)], None);
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut text)
        .unwrap();
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(text.replace("read_file", "read_fil3").as_bytes())
        .unwrap();
    let path = dir.path().join("tampered.gz");
    std::fs::write(&path, enc.finish().unwrap()).unwrap();
    let vouched = Trust::Unsigned {
        user_id: "alice".into(),
        device_id: "dev-air".into(),
    };
    let err = import::run(&Store::new(pool), &rules(), t.id, &path, &vouched)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("checksum"), "{err}");
    assert_eq!(app.count("events").await, 0);
}
