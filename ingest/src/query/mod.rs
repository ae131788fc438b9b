//! Read queries behind the `/v1` read endpoints.
//!
//! Two seals make a read without the tenant filter impossible to write by accident:
//! - every query takes a typed read scope ([`crate::access::TenantRead`], or for usage across tenants an
//!   [`crate::access::OperatorRead`]) instead of a raw tenant id, and binds its tenant (and user);
//! - the pool is reachable only here: handlers get a [`ReadDb`], whose pool is private to this module
//!   and its children, so a handler can call these functions but cannot run a query of its own.
//!
//! Each read is split the same way: parameters arrive as typed structs (the route's query string
//! deserialized), a pure part plans the SQL ([`usage::plan`]: buckets, which rollup, the statement built
//! with `sqlx::QueryBuilder`) and is unit-tested without a database, a thin fetch runs it and decodes
//! rows into `FromRow` types, and the answer is a `Serialize` + `ToSchema` type (the OpenAPI document is
//! generated from the same types, [`crate::routes::openapi`]).

pub mod buckets;
pub mod budgets;
pub mod colonies;
pub mod devices;
pub mod gauges;
pub mod history;
pub mod listings_csv;
pub mod params;
pub mod sessions;
pub mod stream;
pub mod sums;
pub mod usage;

use apiary_schema::status::Rules;
use sqlx::PgPool;

/// The database as the read handlers see it: the pool, sealed (only [`crate::query`] reaches it), and
/// the health model's thresholds every status read applies.
#[derive(Clone)]
pub struct ReadDb {
    /// Private to this module and its children: see the module notes.
    pool: PgPool,
    /// The thresholds sessions are folded with (the same the batches use).
    rules: Rules,
}

impl ReadDb {
    pub fn new(pool: PgPool, rules: Rules) -> ReadDb {
        ReadDb { pool, rules }
    }

    /// The health model's thresholds.
    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    /// `q`'s rows, run in a transaction of its own without JIT compilation. For a statement whose
    /// estimates pass `jit_above_cost` though it reads little (a recursive walk, a lateral per row): the
    /// compilation, not the reading, was most of its time (35 ms of a session list's page; see the
    /// performance docs).
    async fn fetch_all_without_jit<'q, T>(
        &self,
        q: sqlx::query::QueryAs<'q, sqlx::Postgres, T, sqlx::postgres::PgArguments>,
    ) -> Result<Vec<T>, sqlx::Error>
    where
        T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
    {
        let mut tx = self.pool.begin().await?;
        sqlx::query("SELECT set_config('jit', 'off', true)")
            .execute(&mut *tx)
            .await?;
        let rows = q.fetch_all(&mut *tx).await?;
        tx.commit().await?;
        Ok(rows)
    }
}
