//! `POST /v1/devices/key`: a device registers its own key with its device-bound token, proving it holds
//! the private key; first registration wins, and only an admin rotates keys.

use apiary_schema::device_key::{registration_message, SigningKey};
use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::*;

fn registration(tenant: uuid::Uuid, device: &str, key: &SigningKey) -> serde_json::Value {
    let public = key.public();
    json!({
        "public_key": public.to_text(),
        "proof": key.sign(&registration_message(&tenant.to_string(), device, &public)),
    })
}

#[sqlx::test(migrations = "../migrations")]
async fn a_device_registers_its_own_key_once_and_cannot_swap_it(pool: sqlx::PgPool) {
    let app = spawn_app(pool.clone()).await;
    let t = app
        .tenant_bound("acme", Some("alice"), Some("alice-desk"))
        .await;
    let key = SigningKey::from_seed(&[1; 32]);
    let (s, v) = app
        .post_json(
            &t.ingest,
            "/v1/devices/key",
            registration(t.id, "alice-desk", &key),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(
        (
            v["device_id"].as_str(),
            v["user_id"].as_str(),
            v["registered_by"].as_str()
        ),
        (Some("alice-desk"), Some("alice"), Some("device"))
    );
    let (s, _) = app
        .post_json(
            &t.ingest,
            "/v1/devices/key",
            registration(t.id, "alice-desk", &key),
        )
        .await;
    assert_eq!(s, StatusCode::OK, "the same key again changes nothing");
    // Another key for the device (a thief holding the device token): refused, pointing at the admin.
    let thief = SigningKey::from_seed(&[2; 32]);
    let (s, v) = app
        .post_json(
            &t.ingest,
            "/v1/devices/key",
            registration(t.id, "alice-desk", &thief),
        )
        .await;
    assert_eq!(s, StatusCode::CONFLICT, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--replace"),
        "{v}"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn a_registration_needs_a_device_token_and_a_proof_for_this_tenant_and_device(
    pool: sqlx::PgPool,
) {
    let app = spawn_app(pool.clone()).await;
    let t = app
        .tenant_bound("acme", Some("alice"), Some("alice-desk"))
        .await;
    let key = SigningKey::from_seed(&[3; 32]);
    // An ingest token bound to alice but to no device.
    let unbound = apiary_ingest::store::admin::create_token(
        &pool,
        &apiary_ingest::store::admin::TokenSpec {
            tenant: t.id.to_string(),
            scopes: vec![apiary_ingest::auth::Scope::Ingest],
            user_id: Some("alice".into()),
            device_id: None,
        },
    )
    .await
    .unwrap()
    .1;
    let (s, v) = app
        .post_json(
            &unbound,
            "/v1/devices/key",
            registration(t.id, "alice-desk", &key),
        )
        .await;
    assert_eq!(s, StatusCode::FORBIDDEN, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("bound to a device"),
        "{v}"
    );
    // A proof made for another device, another tenant, or by another key.
    let other = SigningKey::from_seed(&[4; 32]);
    let mut by_other = registration(t.id, "alice-desk", &other);
    by_other["public_key"] = key.public().to_text().into();
    for body in [
        registration(t.id, "bob-desk", &key),
        registration(uuid::Uuid::new_v4(), "alice-desk", &key),
        by_other,
    ] {
        let (s, v) = app.post_json(&t.ingest, "/v1/devices/key", body).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
        assert!(
            v["error"]["message"]
                .as_str()
                .unwrap()
                .contains("proof refused"),
            "{v}"
        );
    }
    let (s, v) = app
        .post_json(
            &t.ingest,
            "/v1/devices/key",
            json!({"public_key": "ed25519:AAAA", "proof": "x"}),
        )
        .await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert_eq!(app.count("device_keys").await, 0);
}
