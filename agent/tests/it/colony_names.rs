//! Colony names, opt-in per tenant, on the device: the settings page shows the tenant's choice (from
//! `GET /v1/whoami`) before sharing is turned on and lets the person keep names on the device; the
//! consent records the choice (its policy hash is the widened policy's); a colony's name then leaves the
//! device beside its key, and only then; the page and `GET /v1/colonies` list this device's colonies
//! with their keys.

use std::io::Read;
use std::time::Duration;

use apiary_schema::colony::{ColonyKeyer, KeyScope};
use apiary_schema::{Batch, BatchResponse, Policy};
use reqwest::StatusCode;
use serde_json::{json, Value};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use crate::http_api::App;
use crate::settings_page::Page;

const SECRET: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const QUEEN: &str = "session_20261103_101433_51be07d2";

/// A fake ingest whose tenant chose `names`: whoami says so; batches are accepted.
async fn ingest() -> MockServer {
    let ingest = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v1/whoami"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "tenant_id": "t1", "scopes": ["ingest"], "user_id": "alice", "device_id": null,
            "colony_secret": SECRET, "colony_names": "names"
        })))
        .mount(&ingest)
        .await;
    Mock::given(method("POST"))
        .and(path("/v1/batches"))
        .respond_with(|req: &Request| {
            let batch = batch_of(req);
            ResponseTemplate::new(200).set_body_json(BatchResponse {
                accepted: batch.events.len() as u64,
                ..BatchResponse::default()
            })
        })
        .mount(&ingest)
        .await;
    ingest
}

fn batch_of(req: &Request) -> Batch {
    let mut text = String::new();
    flate2::read::GzDecoder::new(&req.body[..])
        .read_to_string(&mut text)
        .unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A Hive `colony_created` of colony `name` in [`QUEEN`]'s log.
fn colony_created(name: &str, seq: u64) -> String {
    json!({"type": "colony_created", "stream_id": "queen", "node_id": null, "execution_id": QUEEN,
        "data": {"colony_name": name, "colony_path": format!("/home/alice/.hive/colonies/{name}"),
                 "queen_session_id": QUEEN, "is_new": true},
        "timestamp": "2026-11-03T10:14:51.007113", "correlation_id": null, "colony_id": null, "seq": seq})
    .to_string()
}

/// A settings page on an agent following a Hive home with two colonies.
async fn page(home: &std::path::Path) -> Page {
    for name in ["billing_refactor", "etl_backfill"] {
        std::fs::create_dir_all(home.join("colonies").join(name)).unwrap();
    }
    let home = home.to_path_buf();
    let app = App::spawn(move |s| {
        s.hive_home = Some(home);
        s.push.heartbeat_interval_secs = 1;
    })
    .await;
    Page::of(app)
}

/// The colony names the batches the fake ingest received carried (colony key → name or null).
async fn names_sent(ingest: &MockServer) -> Vec<(String, Value)> {
    let mut out = vec![];
    for req in ingest.received_requests().await.unwrap_or_default() {
        if req.url.path() != "/v1/batches" {
            continue;
        }
        for e in batch_of(&req).events {
            let e: Value = serde_json::to_value(e).unwrap();
            if e["type"] == "colony.created" {
                out.push((
                    e["data"]["colony_key"].as_str().unwrap_or("").to_string(),
                    e["data"]["colony_name"].clone(),
                ));
            }
        }
    }
    out
}

async fn wait_sent(ingest: &MockServer, n: usize) -> Vec<(String, Value)> {
    for _ in 0..200 {
        let sent = names_sent(ingest).await;
        if sent.len() >= n {
            return sent;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    names_sent(ingest).await
}

#[tokio::test]
async fn the_tenant_s_choice_is_shown_before_sharing_and_the_consent_records_it() {
    let ingest = ingest().await;
    let home = tempfile::tempdir().unwrap();
    let p = page(home.path()).await;
    let cookie = p.cookie().await;

    // Before anything: the colonies with this device's own keys; names stay here.
    let html = p.html(&cookie).await;
    assert!(html.contains(r#"data-tenant="keys""#), "{html}");
    assert!(
        html.contains(r#"data-colony-name="billing_refactor""#),
        "{html}"
    );
    let (s, local) = p.app.get("/v1/colonies").await;
    assert_eq!(s, StatusCode::OK, "{local}");
    assert_eq!(local["key_scope"], "device");
    let key = local["colonies"][0]["key"].as_str().unwrap().to_string();
    assert!(key.starts_with("dk_"), "{local}");
    assert!(html.contains(&key), "the page shows the same key");

    // Turning sharing on first shows the tenant's choice: nothing is switched yet.
    let on = [
        ("enabled", "true"),
        ("endpoint", &ingest.uri()[..]),
        ("token_file", p.app.token_file.as_str()),
    ];
    let r = p
        .post("/settings/sync", &on, Some(&cookie), Some(&p.origin))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let html = r.text().await.unwrap();
    assert!(
        html.contains("Your organisation shares colony names"),
        "{html}"
    );
    assert!(html.contains(r#"id="share_colony_names""#), "{html}");
    assert!(
        html.contains(&ingest.uri()),
        "the address typed is kept: {html}"
    );
    assert!(
        !p.sync_enabled().await,
        "nothing switched before the choice was seen"
    );

    // Seen and agreed: sharing is on, the consent records the widened policy.
    let mut agreed = on.to_vec();
    agreed.extend([("colony_names_seen", "1"), ("share_colony_names", "on")]);
    let r = p
        .post("/settings/sync", &agreed, Some(&cookie), Some(&p.origin))
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(p.sync_enabled().await);
    let status = p.app.outbox.status().await.unwrap();
    let wide = Policy::default_policy().with_colony_names();
    assert_eq!(
        status.stored.sync.consent_policy_hash.as_deref(),
        Some(wide.hash())
    );

    // Once the tenant's secret is in force (the push loop fetches it within a heartbeat), a colony's
    // name leaves the device beside its key.
    let tenant_key = ColonyKeyer::from_hex(SECRET, KeyScope::Tenant)
        .unwrap()
        .key_of("billing_refactor");
    let mut keyed = false;
    for _ in 0..100 {
        if p.app.outbox.colony_keys().is_tenant() {
            keyed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(keyed, "the tenant's secret was never adopted");
    let (s, v) = p
        .app
        .post("/v1/events", colony_created("billing_refactor", 1))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let sent = wait_sent(&ingest, 1).await;
    assert_eq!(sent, [(tenant_key.clone(), json!("billing_refactor"))]);
    let html = p.html(&cookie).await;
    assert!(html.contains(r#"data-shared="true""#), "{html}");
    assert!(html.contains("Colony names are sent"), "{html}");
    let (_, local) = p.app.get("/v1/colonies").await;
    assert_eq!(local["colonies"][0]["key"], tenant_key.as_str());
    assert_eq!(local["colony_names"]["shared"], true);

    // Turned off, then on again keeping names here: the next colony travels as a key only.
    let r = p
        .post(
            "/settings/sync",
            &[("enabled", "false")],
            Some(&cookie),
            Some(&p.origin),
        )
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let mut declined = on.to_vec();
    declined.push(("colony_names_seen", "1"));
    let r = p
        .post("/settings/sync", &declined, Some(&cookie), Some(&p.origin))
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let status = p.app.outbox.status().await.unwrap();
    assert_eq!(
        status.stored.sync.consent_policy_hash.as_deref(),
        Some(Policy::default_policy().hash())
    );
    let (s, _) = p
        .app
        .post("/v1/events", colony_created("etl_backfill", 2))
        .await;
    assert_eq!(s, StatusCode::OK);
    let sent = wait_sent(&ingest, 2).await;
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[1].1, Value::Null, "declined: no name left the device");
    let html = p.html(&cookie).await;
    assert!(html.contains(r#"data-shared="false""#), "{html}");
    assert!(html.contains("you chose to keep them here"), "{html}");
    p.app.stop().await;
}
