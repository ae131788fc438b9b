//! Shared by the ingest benches (`mod common;` with `#[path = "common/mod.rs"]`): a fresh database per
//! run, tenants and tokens, the real server in this process, and small helpers. Not every bench uses
//! every item.
#![allow(dead_code)]

use std::io::Write;
use std::time::Duration;

use apiary_ingest::config::IngestSettings;
use apiary_ingest::startup::Application;
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};
use uuid::Uuid;

/// An env knob (`BENCH_*`), else the default.
pub fn env_usize(k: &str, d: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

/// The `p` quantile of sorted latencies.
pub fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// The median of some figures.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn gzip(b: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(b).unwrap();
    enc.finish().unwrap()
}

/// A fresh, migrated database `apiary_bench_<name>_<random>` on `DATABASE_URL`'s server; [`BenchDb::drop`]
/// removes it.
pub struct BenchDb {
    admin: PgConnection,
    name: String,
    pub pool: PgPool,
}

impl BenchDb {
    pub async fn create(name: &str, pool_size: u32) -> anyhow::Result<BenchDb> {
        let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
        let name = format!("apiary_bench_{name}_{}", rand::random::<u32>());
        let mut admin = PgConnection::connect(&url).await?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await?;
        let db_url = match url.rsplit_once('/') {
            Some((base, _)) => format!("{base}/{name}"),
            None => unreachable!("a URL with a database"),
        };
        let pool = PgPoolOptions::new()
            .max_connections(pool_size)
            .connect(&db_url)
            .await?;
        apiary_ingest::store::migrate(&pool).await?;
        Ok(BenchDb { admin, name, pool })
    }

    pub async fn tenant(&self, name: &str) -> anyhow::Result<Uuid> {
        Ok(apiary_ingest::store::admin::create_tenant(&self.pool, name).await?)
    }

    /// An ingest token of `tenant`, bound to `device` when given.
    pub async fn ingest_token(&self, tenant: Uuid, device: Option<&str>) -> anyhow::Result<String> {
        let spec = apiary_ingest::store::admin::TokenSpec {
            tenant: tenant.to_string(),
            scopes: vec![apiary_ingest::auth::Scope::Ingest],
            user_id: None,
            device_id: device.map(str::to_string),
        };
        Ok(apiary_ingest::store::admin::create_token(&self.pool, &spec)
            .await?
            .1)
    }

    /// Serves the ingest (no rate limit) on port 0; returns `http://127.0.0.1:PORT`.
    pub async fn serve(&self, settings: IngestSettings) -> anyhow::Result<String> {
        let settings = IngestSettings {
            listen: "127.0.0.1:0".into(),
            rate_limit_per_sec: 1e9,
            rate_limit_burst: 1e9,
            ..settings
        };
        let app = Application::build(settings, self.pool.clone()).await?;
        let base = format!("http://127.0.0.1:{}", app.port());
        tokio::spawn(app.run_until_stopped(std::future::pending()));
        Ok(base)
    }

    pub async fn drop(mut self) -> anyhow::Result<()> {
        self.pool.close().await;
        sqlx::query(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
            .execute(&mut self.admin)
            .await?;
        Ok(())
    }
}

/// Posts one gzip-compressed JSON batch; asserts a 2xx and returns (latency, the answer).
pub async fn post_gzip(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    body: Vec<u8>,
) -> (Duration, serde_json::Value) {
    let t0 = std::time::Instant::now();
    let r = client
        .post(url)
        .bearer_auth(token)
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    let v: serde_json::Value = r.json().await.unwrap();
    (t0.elapsed(), v)
}
