//! Citus: the same schema, distributed by `tenant_id`. Nothing here runs on plain PostgreSQL.
//!
//! The migrations create one schema for both engines. On a database where the `citus` extension exists,
//! [`distribute`] runs after them (`apiary-ingest migrate` calls it; `migrate --citus` insists on the
//! extension) and turns the tables into:
//! - **reference tables** (a full copy on every node, joined locally by any shard): [`REFERENCE_TABLES`]
//!   — tenants and the two token tables, small and read by every request;
//! - **distributed tables**, hash-distributed by `tenant_id` and all co-located with `event_keys`
//!   ([`DISTRIBUTED_TABLES`]): a tenant's rows of every table live in the same shard group, on one
//!   worker. A batch belongs to one tenant (its token's), so its transaction — session claims, dedup
//!   keys, events, rollups, status history, stream rows — is routed to one worker, and the joins of a
//!   tenant's queries (on `tenant_id` and more) run there. `events` is distributed with its daily
//!   partitions, and the partitions created later (`apiary_ensure_event_partitions`) are distributed
//!   and co-located by Citus itself.
//!
//! Keys: a distributed table's unique keys must contain the distribution column. Every primary and
//! unique key of the tenant tables already starts with `tenant_id` (the design's rule since the first
//! migration), so the schema needed no change; `create_distributed_table` would refuse a table
//! otherwise. The reference tables' keys (`api_tokens.token_hash`, `token_id`) need no tenant.
//!
//! Foreign keys: Citus refuses a foreign key from a local table to a distributed one, so a table cannot
//! be distributed while a not-yet-distributed table references it (budgets ← budget_crossings,
//! alerts ← notifications, ...), and distributing `tenants` would turn every table referencing it into a
//! "Citus local table". So the step, in ONE transaction: records the foreign keys between the tables
//! listed here, drops them, creates the reference and distributed tables, and adds the same
//! constraints back (their definitions as `pg_get_constraintdef` printed them). Citus accepts them
//! then: each is distributed → reference, reference → reference, or between co-located distributed
//! tables on keys that start with `tenant_id`.
//!
//! Functions: the queries call `apiary_sum`, `apiary_hist_sum`, `apiary_hist_add` and
//! `apiary_add_seconds` inside statements that run on the workers. Citus propagates a function created
//! while the extension exists; one created before (the migrations ran first, as in a plain database
//! turned into a cluster) is made distributed here with `create_distributed_function`, which creates it
//! on every worker ([`WORKER_FUNCTIONS`]).
//!
//! Idempotent: tables already in their place and functions already distributed are skipped; a database
//! already distributed costs a few catalog reads. Serialized by an advisory lock (replicas may run
//! `migrate` at once).
//!
//! A later migration that adds a table with a foreign key to a distributed table cannot run on Citus
//! before that table is distributed (Citus refuses the local → distributed key): such a migration must
//! create the table without that key, and add it after [`distribute`] has run.

use sqlx::{Connection, PgConnection, PgPool};

/// Reference tables (a copy on every node), in the order they are created.
pub const REFERENCE_TABLES: &[&str] = &["tenants", "api_tokens", "operator_tokens"];

/// Distributed tables, by `tenant_id`, all co-located with the first one.
pub const DISTRIBUTED_TABLES: &[&str] = &[
    "event_keys",
    "events",
    "sessions",
    "devices",
    "device_keys",
    "usage_rollups",
    "usage_rollups_hourly",
    "usage_rollups_narrow",
    "usage_rollups_daily",
    "usage_rollups_monthly",
    "usage_rollups_colony_daily",
    "usage_rollups_colony_monthly",
    "tool_rollups",
    "tool_rollups_hourly",
    "tool_rollups_daily",
    "tool_rollups_monthly",
    "tool_rollups_tenant_hourly",
    "tool_rollups_tenant_daily",
    "tool_rollups_tenant_monthly",
    "status_transitions",
    "stream_events",
    "stream_horizon",
    "stream_sessions",
    "stream_devices",
    "colony_secrets",
    "colony_runs",
    "session_forks",
    "colony_labels",
    "tenant_prices",
    "price_reprices",
    "budgets",
    "budget_crossings",
    "alert_destinations",
    "alert_rules",
    "alerts",
    "notifications",
    "usage_exports",
    "series_colours",
];

/// Functions and aggregates that statements run on the workers call.
pub const WORKER_FUNCTIONS: &[&str] = &[
    "apiary_sum(bigint)",
    "apiary_hist_add(bigint[], bigint[])",
    "apiary_hist_sum(bigint[])",
    "apiary_add_seconds(timestamp with time zone, double precision)",
];

/// The distribution column of every table in [`DISTRIBUTED_TABLES`].
pub const DISTRIBUTION_COLUMN: &str = "tenant_id";

/// Errors of the Citus step.
#[derive(Debug, thiserror::Error)]
pub enum CitusError {
    #[error(
        "the citus extension is not installed in this database: install Citus on every node, \
         `CREATE EXTENSION citus` there, register the workers on the coordinator \
         (citus_set_coordinator_host, citus_add_node; scripts/citus.sh does all of it locally), then \
         migrate again"
    )]
    NotCitus,
    #[error(
        "tables {0:?} are neither distributed nor reference tables in store::citus: add each to \
         DISTRIBUTED_TABLES (it needs a tenant_id column in every unique key) or REFERENCE_TABLES"
    )]
    Unlisted(Vec<String>),
    #[error("table {table} is a Citus table of another kind ({found}); expected {expected}")]
    WrongKind {
        table: String,
        found: String,
        expected: &'static str,
    },
    #[error("distributing the tables failed")]
    Query(#[from] sqlx::Error),
}

/// What [`distribute`] changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Distributed {
    /// Tables made reference tables by this call.
    pub reference: Vec<String>,
    /// Tables distributed by this call.
    pub distributed: Vec<String>,
    /// Functions made distributed by this call.
    pub functions: Vec<String>,
}

/// Is the `citus` extension installed in this database?
pub async fn is_citus(pool: &PgPool) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')")
        .fetch_one(pool)
        .await
}

/// A primary node of a Citus cluster: host, port and group (0: the coordinator).
pub type Node = (String, i32, i32);

/// The cluster's primary nodes as `conn`'s database registers them (`pg_dist_node`, coordinator
/// first), or None when that database has no citus extension (plain PostgreSQL).
pub async fn cluster_nodes(conn: &mut PgConnection) -> Result<Option<Vec<Node>>, sqlx::Error> {
    let citus: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')")
            .fetch_one(&mut *conn)
            .await?;
    if !citus {
        return Ok(None);
    }
    let nodes = sqlx::query_as(
        "SELECT nodename::text, nodeport, groupid FROM pg_dist_node
         WHERE noderole = 'primary' ORDER BY groupid",
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(Some(nodes))
}

/// Turns a fresh database of a Citus cluster (created on the coordinator, and on the workers by the
/// coordinator's `citus.enable_create_database_propagation`; migrated as on plain PostgreSQL) into a
/// distributed one, the way an existing database joins a cluster: the citus extension on every worker
/// and the coordinator, the coordinator and the workers of `nodes` ([`cluster_nodes`] of the cluster's
/// maintenance database) registered, then [`distribute`]. Idempotent. For tests and benchmarks that
/// create a database per run; a deployment runs `apiary-ingest migrate --citus` on a database prepared
/// once (docs/scaling.md, "Citus").
pub async fn join_cluster(pool: &PgPool, nodes: &[Node]) -> Result<Distributed, CitusError> {
    use sqlx::{ConnectOptions, Connection};
    let db: String = sqlx::query_scalar("SELECT current_database()::text")
        .fetch_one(pool)
        .await?;
    let base = pool.connect_options();
    for (host, port, _) in nodes.iter().filter(|n| n.2 != 0) {
        let port = u16::try_from(*port)
            .map_err(|e| sqlx::Error::Configuration(format!("worker {host}:{port}: {e}").into()))?;
        let mut worker = (*base)
            .clone()
            .host(host)
            .port(port)
            .database(&db)
            .connect()
            .await?;
        sqlx::query("CREATE EXTENSION IF NOT EXISTS citus")
            .execute(&mut worker)
            .await?;
        worker.close().await?;
    }
    sqlx::query("CREATE EXTENSION IF NOT EXISTS citus")
        .execute(pool)
        .await?;
    for (host, port, group) in nodes {
        if *group == 0 {
            sqlx::query("SELECT citus_set_coordinator_host($1, $2)")
                .bind(host)
                .bind(port)
                .execute(pool)
                .await?;
        } else {
            // Registering a node syncs the roles to it (`worker_create_or_alter_role`, a catalog
            // shared by every database of the worker): two databases joining at once can collide
            // there ("tuple concurrently updated"). Nothing was registered then; try again.
            for attempt in 1.. {
                let added = sqlx::query(
                    "SELECT citus_add_node($1, $2) WHERE NOT EXISTS
                         (SELECT 1 FROM pg_dist_node WHERE nodename = $1 AND nodeport = $2)",
                )
                .bind(host)
                .bind(port)
                .execute(pool)
                .await;
                match added {
                    Ok(_) => break,
                    Err(e) if attempt < 10 && e.to_string().contains("marked as essential") => {
                        tokio::time::sleep(std::time::Duration::from_millis(50 * attempt)).await;
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    distribute(pool).await
}

/// How a table is known to Citus: `h` distributed (hash), `t` reference, `s` Citus local, None: plain.
async fn kind_of(conn: &mut PgConnection, table: &str) -> Result<Option<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT CASE WHEN partmethod = 'h' THEN 'h' WHEN repmodel = 't' THEN 't' ELSE 's' END
         FROM pg_dist_partition WHERE logicalrelid = to_regclass($1)",
    )
    .bind(table)
    .fetch_optional(&mut *conn)
    .await
}

fn kind_name(k: &str) -> String {
    match k {
        "h" => "a distributed table".into(),
        "t" => "a reference table".into(),
        _ => "a Citus local table".into(),
    }
}

/// Distributes the schema (see the module notes); a no-op for what is already in place. Fails with
/// [`CitusError::NotCitus`] on a database without the extension.
pub async fn distribute(pool: &PgPool) -> Result<Distributed, CitusError> {
    if !is_citus(pool).await? {
        return Err(CitusError::NotCitus);
    }
    let mut conn = pool.acquire().await?;
    sqlx::query("SELECT pg_advisory_lock(hashtext('apiary_citus_distribute'))")
        .execute(&mut *conn)
        .await?;
    let res = distribute_locked(&mut conn).await;
    let unlock = sqlx::query("SELECT pg_advisory_unlock(hashtext('apiary_citus_distribute'))")
        .execute(&mut *conn)
        .await;
    let done = res?;
    unlock?;
    Ok(done)
}

async fn distribute_locked(conn: &mut PgConnection) -> Result<Distributed, CitusError> {
    check_listed(conn).await?;
    let mut todo_ref = Vec::new();
    for t in REFERENCE_TABLES {
        match kind_of(conn, t).await?.as_deref() {
            None => todo_ref.push(*t),
            Some("t") => {}
            Some(k) => {
                return Err(CitusError::WrongKind {
                    table: t.to_string(),
                    found: kind_name(k),
                    expected: "a reference table",
                })
            }
        }
    }
    let mut todo_dist = Vec::new();
    for t in DISTRIBUTED_TABLES {
        match kind_of(conn, t).await?.as_deref() {
            None => todo_dist.push(*t),
            Some("h") => {}
            Some(k) => {
                return Err(CitusError::WrongKind {
                    table: t.to_string(),
                    found: kind_name(k),
                    expected: "a distributed table",
                })
            }
        }
    }
    let mut done = Distributed::default();
    if !todo_ref.is_empty() || !todo_dist.is_empty() {
        let mut tx = conn.begin().await?;
        // DDL on a distributed table after other work in the same transaction must not open parallel
        // connections per shard; sequential mode keeps one connection per worker.
        sqlx::query("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'")
            .execute(&mut *tx)
            .await?;
        let fks = foreign_keys(&mut tx).await?;
        for fk in &fks {
            sqlx::query(&format!(
                "ALTER TABLE {} DROP CONSTRAINT {}",
                quote_ident(&fk.table),
                quote_ident(&fk.name)
            ))
            .execute(&mut *tx)
            .await?;
        }
        for t in &todo_ref {
            sqlx::query("SELECT create_reference_table($1)")
                .bind(t)
                .execute(&mut *tx)
                .await?;
            done.reference.push(t.to_string());
        }
        let anchor = DISTRIBUTED_TABLES[0];
        for t in &todo_dist {
            let colocate = if *t == anchor { "default" } else { anchor };
            sqlx::query("SELECT create_distributed_table($1, $2, colocate_with => $3)")
                .bind(t)
                .bind(DISTRIBUTION_COLUMN)
                .bind(colocate)
                .execute(&mut *tx)
                .await?;
            done.distributed.push(t.to_string());
        }
        for fk in &fks {
            sqlx::query(&format!(
                "ALTER TABLE {} ADD CONSTRAINT {} {}",
                quote_ident(&fk.table),
                quote_ident(&fk.name),
                fk.definition
            ))
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
    }
    for f in WORKER_FUNCTIONS {
        let distributed: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_object
                            WHERE classid = 'pg_proc'::regclass AND objid = $1::regprocedure)",
        )
        .bind(f)
        .fetch_one(&mut *conn)
        .await?;
        if !distributed {
            sqlx::query("SELECT create_distributed_function($1::regprocedure)")
                .bind(f)
                .execute(&mut *conn)
                .await?;
            done.functions.push(f.to_string());
        }
    }
    Ok(done)
}

/// Every table of the schema is listed here.
async fn check_listed(conn: &mut PgConnection) -> Result<(), CitusError> {
    let unlisted = unlisted_tables(conn).await?;
    if unlisted.is_empty() {
        Ok(())
    } else {
        Err(CitusError::Unlisted(unlisted))
    }
}

/// The tables of the schema that neither [`REFERENCE_TABLES`] nor [`DISTRIBUTED_TABLES`] names (the
/// migrations' own bookkeeping table stays a local table on the coordinator). Works on plain
/// PostgreSQL too, so a test keeps the lists in step with the migrations. (Citus hides its shards
/// from `pg_class` by default, so they are not listed.)
pub async fn unlisted_tables(conn: &mut PgConnection) -> Result<Vec<String>, sqlx::Error> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT c.relname::text FROM pg_class c
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'p')
           AND NOT c.relispartition AND c.relname <> '_sqlx_migrations'
         ORDER BY 1",
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(tables
        .into_iter()
        .filter(|t| {
            !REFERENCE_TABLES.contains(&t.as_str()) && !DISTRIBUTED_TABLES.contains(&t.as_str())
        })
        .collect())
}

/// A foreign key between two tables this step places.
struct ForeignKey {
    table: String,
    name: String,
    definition: String,
}

async fn foreign_keys(conn: &mut PgConnection) -> Result<Vec<ForeignKey>, sqlx::Error> {
    let placed: Vec<&str> = REFERENCE_TABLES
        .iter()
        .chain(DISTRIBUTED_TABLES)
        .copied()
        .collect();
    let rows: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT c.conrelid::regclass::text, c.conname::text, pg_get_constraintdef(c.oid)
         FROM pg_constraint c
         WHERE c.contype = 'f' AND c.conrelid = ANY (SELECT to_regclass(t) FROM unnest($1::text[]) t)
           AND c.confrelid = ANY (SELECT to_regclass(t) FROM unnest($1::text[]) t)
           AND c.conparentid = 0
         ORDER BY 1, 2",
    )
    .bind(&placed)
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(table, name, definition)| ForeignKey {
            table,
            name,
            definition,
        })
        .collect())
}

/// `"name"` with embedded quotes doubled.
fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}
