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

#[path = "../../../bench-support/stats.rs"]
mod stats;
// Not every benchmark uses both.
#[allow(unused_imports)]
pub use stats::{median, percentile};

pub fn gzip(b: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(b).unwrap();
    enc.finish().unwrap()
}

/// A fresh, migrated database `apiary_bench_<name>_<random>` on `DATABASE_URL`'s server (or another's,
/// [`BenchDb::create_at`]); [`BenchDb::drop`] removes it. On a Citus coordinator (its maintenance
/// database registers workers) the database is distributed like a deployment's.
pub struct BenchDb {
    admin: PgConnection,
    name: String,
    pub pool: PgPool,
    /// Whether the database is distributed on a Citus cluster.
    pub citus: bool,
}

impl BenchDb {
    pub async fn create(name: &str, pool_size: u32) -> anyhow::Result<BenchDb> {
        let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
        Self::create_at(&url, name, pool_size).await
    }

    pub async fn create_at(url: &str, name: &str, pool_size: u32) -> anyhow::Result<BenchDb> {
        let name = format!("apiary_bench_{name}_{}", rand::random::<u32>());
        let mut admin = PgConnection::connect(url).await?;
        let nodes = apiary_ingest::store::citus::cluster_nodes(&mut admin)
            .await?
            .filter(|n| n.iter().any(|node| node.2 != 0));
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
        if let Some(nodes) = &nodes {
            apiary_ingest::store::citus::join_cluster(&pool, nodes).await?;
        }
        Ok(BenchDb {
            admin,
            name,
            pool,
            citus: nodes.is_some(),
        })
    }

    /// A `read` token of `tenant`.
    pub async fn read_token(&self, tenant: Uuid) -> anyhow::Result<String> {
        let spec = apiary_ingest::store::admin::TokenSpec {
            tenant: tenant.to_string(),
            scopes: vec![apiary_ingest::auth::Scope::Read],
            user_id: None,
            device_id: None,
        };
        Ok(apiary_ingest::store::admin::create_token(&self.pool, &spec)
            .await?
            .1)
    }

    /// The `n` largest tables of `public` by bytes on disk (with indexes and TOAST; a partitioned
    /// table with its partitions), largest first. Plain PostgreSQL only (on Citus the coordinator's
    /// relations are empty shells).
    pub async fn largest_tables(&self, n: i64) -> anyhow::Result<Vec<(String, i64)>> {
        Ok(sqlx::query_as(
            "SELECT coalesce(p.relname, c.relname)::text AS t, sum(pg_total_relation_size(c.oid))::int8 AS b
             FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
             LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
             LEFT JOIN pg_class p ON p.oid = i.inhparent
             WHERE ns.nspname = 'public' AND c.relkind IN ('r', 'm')
             GROUP BY 1 ORDER BY 2 DESC LIMIT $1",
        )
        .bind(n)
        .fetch_all(&self.pool)
        .await?)
    }

    /// Bytes on disk of the database's tables (with their indexes and TOAST): on Citus, every shard on
    /// every node (`citus_shard_sizes()`) plus the coordinator's own tables; else every table of `public`.
    pub async fn table_bytes(&self) -> anyhow::Result<i64> {
        let plain: i64 = sqlx::query_scalar(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::int8 FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'public' AND c.relkind IN ('r', 'm')",
        )
        .fetch_one(&self.pool)
        .await?;
        if !self.citus {
            return Ok(plain);
        }
        // The coordinator's relations of distributed and reference tables are empty shells; their
        // shards (a reference table's on every node) are counted where they are.
        let shards: i64 =
            sqlx::query_scalar("SELECT coalesce(sum(size), 0)::int8 FROM citus_shard_sizes()")
                .fetch_one(&self.pool)
                .await?;
        let shells: i64 = sqlx::query_scalar(
            "SELECT coalesce(sum(pg_total_relation_size(logicalrelid)), 0)::int8
             FROM pg_dist_partition",
        )
        .fetch_one(&self.pool)
        .await?;
        Ok(plain - shells + shards)
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
        // On Citus the drop reaches the workers, where the coordinator's cached connections into the
        // database may linger a moment ("being accessed by other users"): try again for a while, then
        // leave it (a benchmark's figures do not depend on it) and say so.
        for attempt in 0.. {
            match sqlx::query(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
                .execute(&mut self.admin)
                .await
            {
                Ok(_) => break,
                Err(_) if self.citus && attempt < 20 => {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(e) if self.citus => {
                    eprintln!("note: database {} left on the cluster: {e}", self.name);
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
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

/// CPU seconds used so far by the process `pid` (user + system; with `reaped`, also what its exited
/// and reaped children used). Linux `/proc`, clock ticks of 100 Hz (USER_HZ on every mainstream
/// Linux); None elsewhere.
fn proc_cpu(pid: u32, reaped: bool) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces): state ppid ... utime(14) stime(15)
    // cutime(16) cstime(17), counted from 1 with the pid.
    let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let field = |n: usize| rest.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    let mut ticks = field(14)? + field(15)?;
    if reaped {
        ticks += field(16)? + field(17)?;
    }
    Some(ticks / 100.0)
}

/// The parent of process `pid`.
fn proc_parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// CPU seconds used so far by a PostgreSQL server: its postmaster, its live backends and the backends
/// it has reaped. `data_dir` is the server's `data_directory` (its `postmaster.pid` names the
/// postmaster; readable by the server's user or root). None where `/proc` is not there to read.
pub fn server_cpu(data_dir: &str) -> Option<f64> {
    let pid: u32 = std::fs::read_to_string(format!("{data_dir}/postmaster.pid"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()?;
    let mut total = proc_cpu(pid, true)?;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if proc_parent(child) == Some(pid) {
            total += proc_cpu(child, true).unwrap_or(0.0);
        }
    }
    Some(total)
}

/// CPU seconds this process (the bench: the ingest server and its clients) used so far.
pub fn own_cpu() -> Option<f64> {
    proc_cpu(std::process::id(), false)
}

/// The servers behind `pool`'s database: `(name, data_directory)` — the one server, or on Citus the
/// coordinator and each worker.
pub async fn servers(pool: &PgPool) -> anyhow::Result<Vec<(String, String)>> {
    use sqlx::ConnectOptions;
    let dir: String = sqlx::query_scalar("SHOW data_directory")
        .fetch_one(pool)
        .await?;
    let mut conn = pool.acquire().await?;
    let Some(nodes) = apiary_ingest::store::citus::cluster_nodes(&mut conn).await? else {
        return Ok(vec![("server".into(), dir)]);
    };
    let mut out = vec![];
    for (host, port, group) in nodes {
        if group == 0 {
            out.push(("coordinator".to_string(), dir.clone()));
            continue;
        }
        let mut c = (*pool.connect_options())
            .clone()
            .host(&host)
            .port(u16::try_from(port)?)
            .connect()
            .await?;
        let d: String = sqlx::query_scalar("SHOW data_directory")
            .fetch_one(&mut c)
            .await?;
        out.push((format!("worker {port}"), d));
    }
    Ok(out)
}
