//! Colony names, opt-in per tenant: the setting (`GET`/`PUT /v1/tenant/settings`), what devices hear
//! (`GET /v1/whoami`), and what the intake keeps: a colony's name only for a tenant that chose `names`.

use chrono::{Duration, Utc};
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use crate::helpers::*;

const KEY: &str = "ck_0123456789abcdef0123456789abcdef";

/// A queen's `colony.created` of colony [`KEY`], carrying `name`.
fn colony_created(queen: &str, name: &str) -> Value {
    event(
        "colony.created",
        Some(queen),
        Utc::now() - Duration::minutes(5),
        json!({ "source": "created", "colony_id": queen, "queen_session_id": queen,
                "colony_key": KEY, "colony_name": name }),
    )
}

#[sqlx::test(migrations = "../migrations")]
async fn an_admin_chooses_colony_names_and_devices_hear_it_from_whoami(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let other = app.tenant("other").await;
    let admin = app.token(t.id, &["admin"]).await;
    let (s, v) = app.get(&t.read, "/v1/tenant/settings").await;
    assert_eq!((s, &v), (StatusCode::OK, &json!({"colony_names": "keys"})));
    let (_, v) = app.get(&t.ingest, "/v1/whoami").await;
    assert_eq!(v["colony_names"], "keys", "the default: {v}");
    let put = |token: String, body: Value| {
        let app = &app;
        async move {
            app.send(Method::PUT, &token, "/v1/tenant/settings", Some(body))
                .await
        }
    };
    let (s, v) = put(t.read.clone(), json!({"colony_names": "names"})).await;
    assert_eq!(s, StatusCode::FORBIDDEN, "a read token may not: {v}");
    for bad in [
        json!({"colony_names": "Names"}),
        json!({}),
        json!({"colony_names": "names", "more": 1}),
    ] {
        let (s, v) = put(admin.clone(), bad.clone()).await;
        assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {v}");
    }
    let (s, v) = put(admin.clone(), json!({"colony_names": "names"})).await;
    assert_eq!((s, &v), (StatusCode::OK, &json!({"colony_names": "names"})));
    let (_, v) = app.get(&t.read, "/v1/tenant/settings").await;
    assert_eq!(v["colony_names"], "names");
    let (_, v) = app.get(&t.ingest, "/v1/whoami").await;
    assert_eq!(v["colony_names"], "names", "{v}");
    let (_, v) = app.get(&other.ingest, "/v1/whoami").await;
    assert_eq!(
        v["colony_names"], "keys",
        "another tenant is untouched: {v}"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn a_colony_name_is_kept_only_for_a_tenant_that_chose_names(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let keys = app.tenant("keys-tenant").await;
    let names = app.tenant("names-tenant").await;
    apiary_ingest::store::admin::set_colony_names(
        &app.pool,
        names.id,
        apiary_schema::colony::ColonyNames::Names,
    )
    .await
    .unwrap();
    // A token verified after the change (the choice rides with the token, cached for token_cache_secs).
    let names_ingest = app.token(names.id, &["ingest"]).await;
    for token in [&keys.ingest, &names_ingest] {
        let mut worker = llm("w1", Utc::now() - Duration::minutes(4), "m", 5, 1, 0.1);
        worker["agent_role"] = "worker".into();
        worker["colony_id"] = "q1".into();
        worker["parent_session_id"] = "q1".into();
        let events = vec![
            llm("q1", Utc::now() - Duration::minutes(6), "m", 10, 1, 0.1),
            colony_created("q1", "billing_refactor"),
            worker,
        ];
        let (s, v) = app
            .post_batch(token, &batch(events, vec![binding("q1", "alice")]))
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["accepted"], 3, "nothing refused, a name or not: {v}");
    }
    let (_, v) = app.get(&keys.read, "/v1/colonies").await;
    assert_eq!(v["colonies"][0]["colony_key"], KEY, "{v}");
    assert_eq!(v["colonies"][0]["name"], Value::Null, "{v}");
    let stored: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM events WHERE tenant_id = $1 AND data::text LIKE '%billing_refactor%'",
    )
    .bind(keys.id)
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(stored, 0, "a keys tenant never stores a colony's name");
    let (_, v) = app.get(&names.read, "/v1/colonies").await;
    assert_eq!(v["colonies"][0]["name"], "billing_refactor", "{v}");
    assert_eq!(
        v["colonies"][0]["runs"][0]["colony_name"],
        "billing_refactor"
    );
    let (_, tree) = app.get(&names.read, "/v1/sessions/q1/tree").await;
    assert_eq!(tree["colonies"][0]["colony_key"], KEY, "{tree}");
    assert_eq!(
        tree["colonies"][0]["colony_name"], "billing_refactor",
        "{tree}"
    );
    let (_, tree) = app.get(&keys.read, "/v1/sessions/q1/tree").await;
    assert_eq!(tree["colonies"][0]["colony_name"], Value::Null, "{tree}");
    // The label an admin gives the key shows beside the name, in the list and the tree.
    let admin = app.token(names.id, &["admin"]).await;
    let (s, _) = app
        .send(
            Method::PUT,
            &admin,
            &format!("/v1/colonies/{KEY}/label"),
            Some(json!({"label": "Billing refactor"})),
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (_, v) = app.get(&names.read, "/v1/colonies").await;
    assert_eq!(v["colonies"][0]["label"], "Billing refactor");
    let (_, tree) = app.get(&names.read, "/v1/sessions/w1/tree").await;
    assert_eq!(tree["session_id"], "w1");
    let (_, tree) = app.get(&names.read, "/v1/sessions/q1/tree").await;
    assert_eq!(
        tree["colonies"][0]["colony_label"], "Billing refactor",
        "{tree}"
    );
    // The dashboard's colonies page shows label and name, escaped, and says how colonies are named.
    let cookie = app.cookie(&names.read).await;
    let p = app.page(Some(&cookie), "/colonies").await;
    assert!(p.body.contains("Billing refactor"), "{}", p.body);
    assert!(p.body.contains("name: billing_refactor"), "{}", p.body);
    assert!(p.body.contains("data-colony-names=\"names\""), "{}", p.body);
}
