//! Postgres access: the pool, migrations, event partitions and retention. Writes of a batch live in
//! [`batch`], who may write into a session in [`owners`] (a device's row: [`device_owners`]), session
//! state in [`sessions`], tenants and tokens in [`admin`], device signing keys in [`device_keys`]; alert
//! destinations and rules in [`alert_rules`], what fired and the facts rules watch in [`alerts`], the
//! notification outbox's claims in [`notifications`].
//!
//! Partitions: `events` has one partition per UTC day of `effective_at`. The server creates the days
//! around "now" at start-up and every hour, and any other day a batch needs on demand, before the batch's
//! transaction (DDL takes a strong lock on the parent table; keeping it out of the data path keeps
//! batches from queueing behind it). Days already known to exist are cached in memory.
//!
//! Engine: whether the database is a Citus coordinator ([`Engine`]) is found once, at start-up
//! ([`Store::detect_engine`]), and read by the group commit ([`crate::group_commit`]: one tenant per
//! transaction on Citus).

pub mod active;
pub mod admin;
pub mod alert_rules;
pub mod alerts;
pub mod batch;
pub mod budgets;
pub mod citus;
pub mod colonies;
pub mod device_keys;
pub mod device_owners;
pub mod devices;
pub mod event_rows;
pub mod headroom;
pub mod health;
pub mod migrations;
pub mod notifications;
pub mod owners;
pub mod prices;
pub mod reprice;
pub mod runtime;
pub mod series_colours;
pub mod sessions;
pub mod stream;
pub mod tenant_wide;
pub mod work;

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};
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
    #[error("cannot distribute the tables on Citus")]
    Citus(#[source] citus::CitusError),
    #[error("database query failed")]
    Query(#[from] sqlx::Error),
}

/// The pool plus what the ingest caches about the schema.
#[derive(Debug)]
pub struct Store {
    pub pool: PgPool,
    /// Days whose `events` partition is known to exist.
    partitions: Mutex<HashSet<NaiveDate>>,
    /// Thresholds of the health model the batches fold session events with ([`health`]).
    pub status_rules: apiary_schema::status::Rules,
    /// The database engine, once known ([`Store::detect_engine`]).
    engine: OnceLock<Engine>,
}

/// The database engine, as far as the write path needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// One PostgreSQL server (no `citus` extension in the database).
    Postgres,
    /// A Citus coordinator (the database has the `citus` extension): a transaction that writes to
    /// several tenants may span several workers (two-phase commit), so the group commit keeps one
    /// tenant per transaction.
    Citus,
}

impl Store {
    pub fn new(pool: PgPool) -> Store {
        Store {
            pool,
            partitions: Mutex::new(HashSet::new()),
            status_rules: apiary_schema::status::Rules::default(),
            engine: OnceLock::new(),
        }
    }

    /// This store on a database known to be `engine` (no detection).
    pub fn with_engine(self, engine: Engine) -> Store {
        let _ = self.engine.set(engine);
        self
    }

    /// The engine, or None while [`Store::detect_engine`] has not answered yet (the database was not
    /// reachable at start-up).
    pub fn engine(&self) -> Option<Engine> {
        self.engine.get().copied()
    }

    /// Finds out once whether the database has the `citus` extension ([`citus::is_citus`]); later calls
    /// return the first answer without a query. A failed query decides nothing (the next call asks again).
    pub async fn detect_engine(&self) -> Result<Engine, sqlx::Error> {
        if let Some(e) = self.engine() {
            return Ok(e);
        }
        let found = if citus::is_citus(&self.pool).await? {
            Engine::Citus
        } else {
            Engine::Postgres
        };
        Ok(*self.engine.get_or_init(|| found))
    }

    /// This store folding session health with `rules` (the configured thresholds).
    pub fn with_status_rules(mut self, rules: apiary_schema::status::Rules) -> Store {
        self.status_rules = rules;
        self
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

    /// Drops the partitions of days before `cutoff` and their dedup keys, and the status transitions
    /// older than `cutoff` (history is retained like events); returns how many partitions were dropped.
    pub async fn drop_before(&self, cutoff: NaiveDate) -> Result<i32, sqlx::Error> {
        let n: i32 = sqlx::query_scalar("SELECT apiary_drop_event_partitions($1)")
            .bind(cutoff)
            .fetch_one(&self.pool)
            .await?;
        sqlx::query("DELETE FROM status_transitions WHERE at < $1")
            .bind(cutoff.and_time(chrono::NaiveTime::MIN).and_utc())
            .execute(&self.pool)
            .await?;
        self.forget_partitions();
        Ok(n)
    }
}

/// How the database's schema compares with the migrations this binary carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemaState {
    /// Every migration is applied.
    Current,
    /// No migration was ever applied (a fresh database).
    NotMigrated,
    /// Older migrations only: this binary is newer than the schema.
    Behind { applied: i64, latest: i64 },
}

impl SchemaState {
    /// What to tell a person, or None when the schema is current.
    pub fn problem(self) -> Option<String> {
        match self {
            SchemaState::Current => None,
            SchemaState::NotMigrated => Some(
                "the database has no Apiary tables yet: run `apiary-ingest migrate` (same DATABASE_URL)"
                    .into(),
            ),
            SchemaState::Behind { applied, latest } => Some(format!(
                "the database schema is at migration {applied}, this binary needs {latest}: run \
                 `apiary-ingest migrate`"
            )),
        }
    }
}

/// Reads the schema's migration state (a missing `_sqlx_migrations` table is a fresh database).
pub async fn schema_state(pool: &PgPool) -> Result<SchemaState, sqlx::Error> {
    let latest = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(pool)
        .await?;
    if !exists {
        return Ok(SchemaState::NotMigrated);
    }
    let applied: Option<i64> =
        sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
            .fetch_one(pool)
            .await?;
    Ok(match applied {
        None => SchemaState::NotMigrated,
        Some(a) if a < latest => SchemaState::Behind { applied: a, latest },
        Some(_) => SchemaState::Current,
    })
}

/// Opens one connection to `url` (bounded by `timeout`) to find out why the database cannot be used, in
/// words that name the server and the next step: a pool only says "timed out".
pub async fn diagnose_connection(url: &str, timeout: Duration) -> Result<(), String> {
    diagnose(url, timeout).await.map_err(|p| p.to_string())
}

/// Why the database cannot be used ([`diagnose`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectProblem {
    /// The server answers, but the database named in the URL does not exist: `createdb` is the fix.
    MissingDatabase {
        /// Where, in words.
        place: String,
        /// The `createdb` command line that creates it.
        createdb: String,
    },
    /// Anything else, in words with the next step.
    Other(String),
}

impl std::fmt::Display for ConnectProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectProblem::MissingDatabase { place, createdb } => write!(
                f,
                "{place}: the database does not exist; create it with `{createdb}` (or run \
                 `apiary-ingest migrate`, which creates it when the role may create databases)"
            ),
            ConnectProblem::Other(s) => f.write_str(s),
        }
    }
}

/// Connects once to the database `url` names: `Ok`, or what is wrong in words with the next step.
pub async fn diagnose(url: &str, timeout: Duration) -> Result<(), ConnectProblem> {
    use sqlx::postgres::PgConnectOptions;
    use sqlx::{ConnectOptions, Connection};
    let opts: PgConnectOptions = url.parse().map_err(|e| {
        ConnectProblem::Other(format!(
            "the database URL is not valid ({e}); expected postgres://USER@HOST:PORT/DATABASE"
        ))
    })?;
    let place = format!(
        "Postgres at {}:{} (database {:?}, user {:?})",
        opts.get_host(),
        opts.get_port(),
        opts.get_database().unwrap_or("(default)"),
        opts.get_username()
    );
    let attempt = tokio::time::timeout(timeout, opts.connect()).await;
    match attempt {
        Err(_) => Err(ConnectProblem::Other(format!(
            "{place} did not answer within {} s: is the host right and the port open?",
            timeout.as_secs()
        ))),
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Ok(())
        }
        Ok(Err(sqlx::Error::Database(db))) if db.code().as_deref() == Some("3D000") => {
            Err(ConnectProblem::MissingDatabase {
                place,
                createdb: createdb_command(&opts),
            })
        }
        Ok(Err(e)) => Err(ConnectProblem::Other(match &e {
            sqlx::Error::Io(io) => {
                format!("cannot reach {place}: {io}: is the server running and DATABASE_URL right?")
            }
            sqlx::Error::Database(db) => {
                format!("{place} refused the connection: {}", db.message())
            }
            other => format!("cannot connect to {place}: {other}"),
        })),
    }
}

/// `createdb -h HOST -p PORT -U USER NAME` for the database of `opts`.
fn createdb_command(opts: &sqlx::postgres::PgConnectOptions) -> String {
    format!(
        "createdb -h {} -p {} -U {} {}",
        opts.get_host(),
        opts.get_port(),
        opts.get_username(),
        opts.get_database().unwrap_or("apiary")
    )
}

/// Creates the database `url` names when it does not exist, connected to the server's `postgres`
/// database as the same role. `Ok(true)` when it was created; Err (with the `createdb` command to run)
/// when the role may not create databases.
pub async fn create_database_if_missing(url: &str, timeout: Duration) -> Result<bool, String> {
    use sqlx::postgres::PgConnectOptions;
    use sqlx::{ConnectOptions, Connection, Executor};
    let createdb = match diagnose(url, timeout).await {
        Ok(()) => return Ok(false),
        Err(ConnectProblem::MissingDatabase { createdb, .. }) => createdb,
        Err(other) => return Err(other.to_string()),
    };
    let opts: PgConnectOptions = url.parse().map_err(|e: sqlx::Error| e.to_string())?;
    let name = opts.get_database().unwrap_or("apiary").to_string();
    let maintenance = opts.clone().database("postgres");
    let refused = |e: &dyn std::fmt::Display| {
        format!(
            "the database {name:?} does not exist and could not be created as user {:?} ({e}); \
             create it with `{createdb}` as a role that may, then run `apiary-ingest migrate` again",
            opts.get_username()
        )
    };
    let mut conn = tokio::time::timeout(timeout, maintenance.connect())
        .await
        .map_err(|_| refused(&"the server did not answer"))?
        .map_err(|e| refused(&e))?;
    let quoted = format!("\"{}\"", name.replace('"', "\"\""));
    let created = conn
        .execute(format!("CREATE DATABASE {quoted}").as_str())
        .await;
    let _ = conn.close().await;
    match created {
        Ok(_) => Ok(true),
        // Created meanwhile by someone else: fine.
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("42P04") => Ok(false),
        Err(e) => Err(refused(&e)),
    }
}

/// Applies the migrations (on a database with the `citus` extension one statement at a time,
/// [`migrations::migrate_by_statement`]); on Citus, then distributes the tables by tenant
/// ([`citus::distribute`], idempotent).
pub async fn migrate(pool: &PgPool) -> Result<(), StoreError> {
    migrate_with(pool, false).await
}

/// [`migrate`]; with `require_citus` (`apiary-ingest migrate --citus`) it fails before changing anything
/// when the database has no `citus` extension, instead of leaving a plain schema.
pub async fn migrate_with(pool: &PgPool, require_citus: bool) -> Result<(), StoreError> {
    let on_citus = citus::is_citus(pool).await?;
    if require_citus && !on_citus {
        return Err(StoreError::Citus(citus::CitusError::NotCitus));
    }
    if on_citus {
        // Tables distributed by an earlier release take DDL only one command per query string.
        migrations::migrate_by_statement(pool, &MIGRATOR)
            .await
            .map_err(StoreError::Migrate)?;
    }
    MIGRATOR.run(pool).await.map_err(StoreError::Migrate)?;
    if on_citus {
        let done = citus::distribute(pool).await.map_err(StoreError::Citus)?;
        if done != citus::Distributed::default() {
            tracing::info!(
                reference = ?done.reference,
                distributed = ?done.distributed,
                functions = ?done.functions,
                "tables distributed by tenant_id on Citus"
            );
        }
    }
    Ok(())
}
