//! Postgres access: the pool, migrations, event partitions and retention. Writes of a batch live in
//! [`batch`], session state in [`sessions`], tenants and tokens in [`admin`].
//!
//! Partitions: `events` has one partition per UTC day of `effective_at`. The server creates the days
//! around "now" at start-up and every hour, and any other day a batch needs on demand, before the batch's
//! transaction (DDL takes a strong lock on the parent table; keeping it out of the data path keeps
//! batches from queueing behind it). Days already known to exist are cached in memory.

pub mod admin;
pub mod batch;
pub mod headroom;
pub mod sessions;

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, NaiveDate, Utc};
use sqlx::migrate::Migrator;
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;

/// The migrations in `migrations/`, embedded at build time.
pub static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

/// Errors of store set-up and maintenance.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot connect to Postgres")]
    Connect(#[source] sqlx::Error),
    #[error("cannot apply migrations")]
    Migrate(#[source] sqlx::migrate::MigrateError),
    #[error("database query failed")]
    Query(#[from] sqlx::Error),
}

/// The pool plus what the ingest caches about the schema.
#[derive(Debug)]
pub struct Store {
    pub pool: PgPool,
    /// Days whose `events` partition is known to exist.
    partitions: Mutex<HashSet<NaiveDate>>,
}

impl Store {
    pub fn new(pool: PgPool) -> Store {
        Store {
            pool,
            partitions: Mutex::new(HashSet::new()),
        }
    }

    /// A pool to `url` (connections are opened lazily, so start-up does not need the database up).
    pub fn connect_lazy(url: &str, size: u32) -> Result<PgPool, StoreError> {
        PgPoolOptions::new()
            .max_connections(size)
            .acquire_timeout(Duration::from_secs(5))
            .connect_lazy(url)
            .map_err(StoreError::Connect)
    }

    /// Makes sure every day in `days` has its partition.
    pub async fn ensure_days(
        &self,
        days: impl IntoIterator<Item = NaiveDate>,
    ) -> Result<(), sqlx::Error> {
        let missing: Vec<NaiveDate> = {
            let known = self.partitions.lock().unwrap();
            let mut m: Vec<NaiveDate> = days.into_iter().filter(|d| !known.contains(d)).collect();
            m.sort();
            m.dedup();
            m
        };
        let (Some(first), Some(last)) = (missing.first(), missing.last()) else {
            return Ok(());
        };
        // Usually a single day; a long span (an old backlog) is still one call.
        let span = (*last - *first).num_days();
        if span > 62 {
            for d in &missing {
                self.create_range(*d, *d).await?;
            }
        } else {
            self.create_range(*first, *last).await?;
        }
        let mut known = self.partitions.lock().unwrap();
        if span <= 62 {
            known.extend(first.iter_days().take_while(|d| d <= last));
        } else {
            known.extend(missing);
        }
        Ok(())
    }

    async fn create_range(&self, from: NaiveDate, to: NaiveDate) -> Result<(), sqlx::Error> {
        sqlx::query("SELECT apiary_ensure_event_partitions($1, $2)")
            .bind(from)
            .bind(to)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Creates the partitions from yesterday to `ahead_days` after today.
    pub async fn ensure_ahead(
        &self,
        now: DateTime<Utc>,
        ahead_days: u64,
    ) -> Result<(), sqlx::Error> {
        let today = now.date_naive();
        let from = today.pred_opt().unwrap_or(today);
        let to = today + chrono::Days::new(ahead_days);
        self.ensure_days(from.iter_days().take_while(|d| *d <= to))
            .await
    }

    /// Forgets the cached partitions (after an insert found one missing, or after retention).
    pub fn forget_partitions(&self) {
        self.partitions.lock().unwrap().clear();
    }

    /// Drops the partitions of days before `cutoff` and their dedup keys; returns how many were dropped.
    pub async fn drop_before(&self, cutoff: NaiveDate) -> Result<i32, sqlx::Error> {
        let n: i32 = sqlx::query_scalar("SELECT apiary_drop_event_partitions($1)")
            .bind(cutoff)
            .fetch_one(&self.pool)
            .await?;
        self.forget_partitions();
        Ok(n)
    }

    /// True when the database answers and every embedded migration is applied.
    pub async fn is_ready(&self) -> Result<bool, sqlx::Error> {
        let latest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
        let applied: Option<i64> =
            sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
                .fetch_one(&self.pool)
                .await?;
        Ok(applied.unwrap_or(0) >= latest)
    }
}

/// Applies the migrations.
pub async fn migrate(pool: &PgPool) -> Result<(), StoreError> {
    MIGRATOR.run(pool).await.map_err(StoreError::Migrate)
}
