//! Spawning the app and typed request helpers.

use apiary_ingest::config::IngestSettings;
use apiary_ingest::startup::Application;
use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};
use sqlx::PgPool;
use uuid::Uuid;

pub struct TestApp {
    pub base: String,
    pub pool: PgPool,
    pub client: reqwest::Client,
}

/// A tenant with an ingest token and a read token.
pub struct Tenant {
    pub id: Uuid,
    pub ingest: String,
    pub read: String,
}

/// For a migration test: applies every migration before the one whose description contains `name`
/// (exactly one does), so that the test can write rows as the code before it did; returns that
/// migration and every one after it, to [`apply`] then.
pub async fn migrate_before(pool: &PgPool, name: &str) -> Vec<sqlx::migrate::Migration> {
    let all = sqlx::migrate!("../migrations");
    let is_it = |m: &&sqlx::migrate::Migration| m.description.contains(name);
    assert_eq!(
        all.iter().filter(is_it).count(),
        1,
        "migrations named {name:?}"
    );
    let at = all.iter().position(|m| is_it(&m)).unwrap();
    apply(pool, &all.migrations[..at]).await;
    all.migrations[at..].to_vec()
}

/// Applies `migrations`, in order, as their SQL.
pub async fn apply(pool: &PgPool, migrations: &[sqlx::migrate::Migration]) {
    for m in migrations {
        sqlx::raw_sql(&m.sql).execute(pool).await.unwrap();
    }
}

/// Settings for tests: any port, generous rate limit, retention long enough for fixed historical dates.
pub fn test_settings() -> IngestSettings {
    IngestSettings {
        listen: "127.0.0.1:0".into(),
        rate_limit_per_sec: 10_000.0,
        rate_limit_burst: 10_000.0,
        retention_days: 36_500,
        max_body_bytes: 1024 * 1024,
        max_decompressed_bytes: 4 * 1024 * 1024,
        max_batch_events: 2_000,
        // A fixed bound on batches in flight: a debug build's batches are slow enough on a busy
        // machine to bring the adaptive bound down under a test's own concurrency (the adaptive bound is
        // tested in `cadence`).
        min_batches_in_flight: IngestSettings::default().max_batches_in_flight,
        // Tests send bursts with one token: no share per token (tested in `cadence`).
        max_batches_in_flight_per_token: IngestSettings::default().max_batches_in_flight,
        ..IngestSettings::default()
    }
}

pub async fn spawn_app(pool: PgPool) -> TestApp {
    spawn_app_with(pool, test_settings()).await
}

pub async fn spawn_app_with(pool: PgPool, settings: IngestSettings) -> TestApp {
    citus_prepare(&pool).await;
    let app = Application::build(settings, pool.clone())
        .await
        .expect("app builds");
    let base = format!("http://127.0.0.1:{}", app.port());
    tokio::spawn(app.run_until_stopped(std::future::pending()));
    TestApp {
        base,
        pool,
        client: reqwest::Client::new(),
    }
}

/// The coordinator and workers of the Citus cluster `DATABASE_URL` names (read from its database's
/// `pg_dist_node`), or None when that database has no citus extension (plain PostgreSQL).
/// `APIARY_TEST_CITUS=1` makes a plain server a failure instead of a plain run.
async fn citus_nodes() -> Option<Vec<apiary_ingest::store::citus::Node>> {
    use sqlx::Connection;
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL is set for sqlx::test");
    let mut master = sqlx::PgConnection::connect(&url)
        .await
        .expect("connect to DATABASE_URL");
    let nodes = apiary_ingest::store::citus::cluster_nodes(&mut master)
        .await
        .unwrap();
    let required = std::env::var("APIARY_TEST_CITUS").is_ok_and(|v| v == "1");
    let Some(nodes) = nodes else {
        assert!(
            !required,
            "APIARY_TEST_CITUS=1 but DATABASE_URL's database has no citus extension \
             (start the cluster with scripts/citus.sh start)"
        );
        return None;
    };
    assert!(
        nodes.iter().any(|n| n.2 == 0) && nodes.iter().any(|n| n.2 != 0),
        "DATABASE_URL's database has the citus extension but not a coordinator and workers \
         registered (scripts/citus.sh start registers them): {nodes:?}"
    );
    Some(nodes)
}

/// Is `DATABASE_URL` a Citus coordinator with workers?
pub async fn on_citus() -> bool {
    citus_nodes().await.is_some()
}

/// On a Citus cluster, turns this test's fresh database (sqlx::test created it on the coordinator, and
/// the coordinator's `citus.enable_create_database_propagation` on the workers; the migrations ran as on
/// plain PostgreSQL) into a distributed one ([`apiary_ingest::store::citus::join_cluster`]). Does
/// nothing on plain PostgreSQL. Idempotent.
pub async fn citus_prepare(pool: &PgPool) {
    let Some(nodes) = citus_nodes().await else {
        return;
    };
    apiary_ingest::store::citus::join_cluster(pool, &nodes)
        .await
        .expect("distribute the test database on Citus");
}

impl TestApp {
    pub async fn tenant(&self, name: &str) -> Tenant {
        self.tenant_bound(name, None, None).await
    }

    pub async fn tenant_bound(
        &self,
        name: &str,
        user: Option<&str>,
        device: Option<&str>,
    ) -> Tenant {
        use apiary_ingest::auth::Scope;
        use apiary_ingest::store::admin::{create_tenant, create_token, TokenSpec};
        let id = create_tenant(&self.pool, name).await.unwrap();
        let spec = |scopes: Vec<Scope>| TokenSpec {
            tenant: id.to_string(),
            scopes,
            user_id: user.map(str::to_string),
            device_id: device.map(str::to_string),
        };
        let ingest = create_token(&self.pool, &spec(vec![Scope::Ingest]))
            .await
            .unwrap()
            .1;
        let read = create_token(&self.pool, &spec(vec![Scope::Read]))
            .await
            .unwrap()
            .1;
        Tenant { id, ingest, read }
    }

    /// A `read` token of `tenant` bound to `user`.
    pub async fn tenant_token_for_user(&self, tenant: Uuid, user: &str) -> String {
        use apiary_ingest::auth::Scope;
        let spec = apiary_ingest::store::admin::TokenSpec {
            tenant: tenant.to_string(),
            scopes: vec![Scope::Read],
            user_id: Some(user.to_string()),
            device_id: None,
        };
        apiary_ingest::store::admin::create_token(&self.pool, &spec)
            .await
            .unwrap()
            .1
    }

    pub async fn token(&self, tenant: Uuid, scopes: &[&str]) -> String {
        use apiary_ingest::auth::Scope;
        let spec = apiary_ingest::store::admin::TokenSpec {
            tenant: tenant.to_string(),
            scopes: scopes.iter().map(|s| Scope::parse(s).unwrap()).collect(),
            user_id: None,
            device_id: None,
        };
        apiary_ingest::store::admin::create_token(&self.pool, &spec)
            .await
            .unwrap()
            .1
    }

    /// POSTs raw bytes to /v1/batches with the given Content-Encoding.
    pub async fn post_raw(
        &self,
        token: &str,
        body: Vec<u8>,
        encoding: Option<&str>,
    ) -> (StatusCode, Value) {
        let mut req = self
            .client
            .post(format!("{}/v1/batches", self.base))
            .bearer_auth(token)
            .header("content-type", "application/json")
            .body(body);
        if let Some(e) = encoding {
            req = req.header("content-encoding", e);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let body = resp.json::<Value>().await.unwrap_or(Value::Null);
        (status, body)
    }

    /// POSTs a batch, gzip-compressed.
    pub async fn post_batch(&self, token: &str, batch: &Value) -> (StatusCode, Value) {
        self.post_raw(
            token,
            gzip(&serde_json::to_vec(batch).unwrap()),
            Some("gzip"),
        )
        .await
    }

    pub async fn get(&self, token: &str, path: &str) -> (StatusCode, Value) {
        let resp = self
            .client
            .get(format!("{}{}", self.base, path))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        let status = resp.status();
        (status, resp.json::<Value>().await.unwrap_or(Value::Null))
    }

    pub async fn count(&self, table: &str) -> i64 {
        sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }
}

pub use tests::hostile::gzip;

/// A batch envelope around `events`, sent now.
pub fn batch(events: Vec<Value>, sessions: Vec<Value>) -> Value {
    batch_sent_at(events, sessions, Utc::now())
}

pub fn batch_sent_at(events: Vec<Value>, sessions: Vec<Value>, sent_at: DateTime<Utc>) -> Value {
    json!({
        "schema_version": 1, "batch_id": Uuid::new_v4(), "sent_at": sent_at,
        "agent": { "device_id": "dev-1", "agent_version": "0.1.0" }, "policy_hash": "test",
        "sessions": sessions, "events": events,
    })
}

pub fn binding(session: &str, user: &str) -> Value {
    json!({ "session_id": session, "user_id": user, "first_seen_at": "2026-01-01T00:00:00Z" })
}

pub use tests::events::{llm, tool};

/// A canonical event (native type `test_event`).
pub fn event(kind: &str, session: Option<&str>, at: DateTime<Utc>, data: Value) -> Value {
    tests::events::canonical(kind, "test_event", session, at, data)
}

/// A batch of one heartbeat of the batch's device (`dev-1`), sent now, with nothing waiting.
pub fn heartbeat_batch() -> Value {
    batch(
        vec![event(
            "agent.heartbeat",
            None,
            Utc::now(),
            json!({ "backlog_events": 0 }),
        )],
        vec![],
    )
}

pub fn ts(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

impl TestApp {
    /// Any method, a JSON body (or none); the status and the JSON answer (null when not JSON).
    pub async fn send(
        &self,
        method: reqwest::Method,
        token: &str,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self
            .client
            .request(method, format!("{}{}", self.base, path))
            .bearer_auth(token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// POST a JSON body.
    pub async fn post_json(&self, token: &str, path: &str, body: Value) -> (StatusCode, Value) {
        self.send(reqwest::Method::POST, token, path, Some(body))
            .await
    }
}
