//! Device rows (`GET /v1/devices`: heartbeats, backlog, agent version, online), tried the way a user of
//! the same tenant holding a valid token would, against the real `apiary-ingest` and Postgres:
//! - naming another user's device id first does not make it one's own: once a token is bound to that
//!   device, the device's heartbeats show to its user's read token and never to the squatter's, and the
//!   squatter's token is refused for that device from then on;
//! - two users whose tokens are bound to no device and who name the same device id each get their own
//!   row: neither sees the other's, neither hides the other's.

use serde_json::Value;
use tests::isolation::{self, body};
use tests::stack::{Api, Cloud};

/// Runs blocking CLI work off the async workers.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> anyhow::Result<T> + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap().unwrap()
}

/// A token of the cloud's tenant made through the CLI.
async fn token(cloud: &Cloud, scope: &str, user: Option<&str>, device: Option<&str>) -> String {
    let (url, tenant) = (cloud.db.url.clone(), cloud.tenant.id.clone());
    let (scope, user, device) = (
        scope.to_string(),
        user.map(str::to_string),
        device.map(str::to_string),
    );
    blocking(move || isolation::token(&url, &tenant, &scope, user.as_deref(), device.as_deref()))
        .await
}

/// A batch from `device` holding one heartbeat with this backlog and agent version.
fn heartbeat(device: &str, backlog: u64, version: &str) -> Vec<u8> {
    let beat = apiary_schema::device::Heartbeat {
        agent_version: Some(version.into()),
        backlog_events: Some(backlog),
        ..Default::default()
    };
    let event = serde_json::to_value(beat.event(chrono::Utc::now())).unwrap();
    body(&[event], &[], device)
}

/// The rows of `device_id` a token's `GET /v1/devices` lists: (user, backlog, agent version).
async fn rows_of(api: &Api, device_id: &str) -> Vec<(String, i64, String)> {
    let v = api.devices().await.unwrap();
    let mut rows: Vec<_> = v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["device_id"] == device_id)
        .map(|d: &Value| {
            (
                d["user_id"].as_str().unwrap_or("").to_string(),
                d["backlog_events"].as_i64().unwrap_or(-1),
                d["agent_version"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    rows.sort();
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_squatter_who_names_a_device_first_never_sees_its_owners_heartbeats() {
    let cloud = Cloud::start().await.unwrap();
    let url = cloud.ingest.url();
    let bob = Api::new(&url, &token(&cloud, "ingest", Some("bob"), None).await);
    let bob_read = Api::new(&url, &token(&cloud, "read", Some("bob"), None).await);
    let alice_read = Api::new(&url, &token(&cloud, "read", Some("alice"), None).await);
    // Bob's token is bound to his user only: he names alice's device first.
    let (s, v) = bob
        .post_batch(&heartbeat("alice-desk", 999, "6.6.6-squat"))
        .await
        .unwrap();
    assert_eq!(s, 200, "{v}");
    // Then alice's agent gets its token, bound to her device, and reports.
    let alice = Api::new(
        &url,
        &token(&cloud, "ingest", Some("alice"), Some("alice-desk")).await,
    );
    let (s, v) = alice
        .post_batch(&heartbeat("alice-desk", 7, "1.2.3"))
        .await
        .unwrap();
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        rows_of(&alice_read, "alice-desk").await,
        [("alice".to_string(), 7, "1.2.3".to_string())],
        "alice's read token shows her device's heartbeat"
    );
    let bob_sees = rows_of(&bob_read, "alice-desk").await;
    assert!(
        bob_sees.iter().all(|r| r.1 != 7 && r.2 != "1.2.3"),
        "the squatter's read token shows alice's heartbeat: {bob_sees:?}"
    );
    // The binding claimed the id: the squatter's earlier row is gone, and he is refused for it now.
    assert_eq!(bob_sees, []);
    let (s, v) = bob
        .post_batch(&heartbeat("alice-desk", 1000, "6.6.6-squat"))
        .await
        .unwrap();
    assert_eq!(s, 403, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("bound to another user"),
        "{v}"
    );
    // A tenant-wide token (bound to no user) is no more allowed to report as alice's device.
    let wide = Api::new(&url, &token(&cloud, "ingest", None, None).await);
    let (s, v) = wide
        .post_batch(&heartbeat("alice-desk", 1001, "6.6.6-wide"))
        .await
        .unwrap();
    assert_eq!(s, 403, "{v}");
    assert_eq!(
        rows_of(&cloud.admin_api(), "alice-desk").await,
        [("alice".to_string(), 7, "1.2.3".to_string())],
        "the admin sees alice's row alone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_users_without_device_bindings_who_name_one_device_each_keep_their_own_row() {
    let cloud = Cloud::start().await.unwrap();
    let url = cloud.ingest.url();
    let carol = Api::new(&url, &token(&cloud, "ingest", Some("carol"), None).await);
    let dave = Api::new(&url, &token(&cloud, "ingest", Some("dave"), None).await);
    let carol_read = Api::new(&url, &token(&cloud, "read", Some("carol"), None).await);
    let dave_read = Api::new(&url, &token(&cloud, "read", Some("dave"), None).await);
    for (api, backlog, version) in [(&carol, 1, "1.0.0"), (&dave, 2, "2.0.0")] {
        let (s, v) = api
            .post_batch(&heartbeat("laptop", backlog, version))
            .await
            .unwrap();
        assert_eq!(s, 200, "{v}");
    }
    assert_eq!(
        rows_of(&carol_read, "laptop").await,
        [("carol".to_string(), 1, "1.0.0".to_string())]
    );
    assert_eq!(
        rows_of(&dave_read, "laptop").await,
        [("dave".to_string(), 2, "2.0.0".to_string())]
    );
    assert_eq!(
        rows_of(&cloud.admin_api(), "laptop").await,
        [
            ("carol".to_string(), 1, "1.0.0".to_string()),
            ("dave".to_string(), 2, "2.0.0".to_string())
        ],
        "the admin sees both, neither hidden"
    );
}
