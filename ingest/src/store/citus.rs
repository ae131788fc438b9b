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

/// Statements of landed migrations (never edited: their checksums are recorded) that Citus refuses on
/// a distributed table, each with what [`migrate_by_statement`] runs instead, to the same schema.
/// Plain PostgreSQL runs the files as they are.
pub const CITUS_EQUIVALENTS: &[(i64, &str, &[&str])] = &[(
    // Citus wants every constraint of a distributed table named; PostgreSQL names this one so.
    20261213000000,
    "ALTER TABLE sessions ADD COLUMN ended text CHECK (ended IN ('completed', 'failed'))",
    &[
        "ALTER TABLE sessions ADD COLUMN ended text",
        "ALTER TABLE sessions ADD CONSTRAINT sessions_ended_check CHECK (ended IN ('completed', 'failed'))",
    ],
)];

/// Applies `migrator`'s pending migrations one statement at a time, each migration in its own
/// transaction with its bookkeeping row, as sqlx's migrator does (same `_sqlx_migrations` rows, lock
/// and checks), so that `migrator.run` afterwards finds nothing to do.
///
/// Why not `migrator.run`: it sends a migration's file as one query string, and Citus builds the
/// command it sends to the workers for some DDL on a distributed table (an index, a primary key) from
/// the whole string, which the workers then refuse ("cannot insert multiple commands into a prepared
/// statement"): every migration that adds an index or key to an existing table failed on a cluster
/// distributed before it. Statement by statement in one transaction, each string is one command.
pub async fn migrate_by_statement(
    pool: &PgPool,
    migrator: &sqlx::migrate::Migrator,
) -> Result<(), sqlx::migrate::MigrateError> {
    use sqlx::migrate::{Migrate, MigrateError};
    use sqlx::Acquire;
    let mut conn = pool.acquire().await?;
    conn.lock().await?;
    conn.ensure_migrations_table().await?;
    if let Some(version) = conn.dirty_version().await? {
        return Err(MigrateError::Dirty(version));
    }
    let applied = conn.list_applied_migrations().await?;
    for a in &applied {
        match migrator.iter().find(|m| m.version == a.version) {
            None if !migrator.ignore_missing => {
                return Err(MigrateError::VersionMissing(a.version))
            }
            Some(m) if m.checksum != a.checksum => {
                return Err(MigrateError::VersionMismatch(a.version))
            }
            _ => {}
        }
    }
    for m in migrator.iter() {
        if m.migration_type.is_down_migration() || applied.iter().any(|a| a.version == m.version) {
            continue;
        }
        let start = std::time::Instant::now();
        let failed = |e| MigrateError::ExecuteMigration(e, m.version);
        let mut tx = conn.begin().await?;
        for statement in statements(&m.sql) {
            let equivalent = CITUS_EQUIVALENTS
                .iter()
                .find(|(v, original, _)| *v == m.version && statement.ends_with(original));
            let run: &[&str] = match equivalent {
                Some((_, _, instead)) => instead,
                None => &[statement],
            };
            for statement in run {
                sqlx::raw_sql(statement)
                    .execute(&mut *tx)
                    .await
                    .map_err(failed)?;
            }
        }
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
             VALUES ($1, $2, TRUE, $3, -1)",
        )
        .bind(m.version)
        .bind(&*m.description)
        .bind(&*m.checksum)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        sqlx::query("UPDATE _sqlx_migrations SET execution_time = $1 WHERE version = $2")
            .bind(i64::try_from(start.elapsed().as_nanos()).unwrap_or(i64::MAX))
            .bind(m.version)
            .execute(&mut *conn)
            .await?;
    }
    conn.unlock().await?;
    Ok(())
}

/// The statements of a migration's SQL, split at the semicolons outside of comments, quoted strings
/// and identifiers and dollar-quoted bodies; each statement keeps its comments, and what holds only
/// whitespace and comments is dropped.
pub fn statements(sql: &str) -> Vec<&str> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let (mut start, mut i) = (0, 0);
    let mut code = false; // the current piece has something besides whitespace and comments
    while i < b.len() {
        match b[i] {
            b'-' if b.get(i + 1) == Some(&b'-') => {
                i = sql[i..].find('\n').map_or(b.len(), |n| i + n);
                continue;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                // Block comments nest in PostgreSQL.
                let mut depth = 0;
                while i < b.len() {
                    if b[i..].starts_with(b"/*") {
                        depth += 1;
                        i += 2;
                    } else if b[i..].starts_with(b"*/") {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
                continue;
            }
            q @ (b'\'' | b'"') => {
                // A doubled quote is the quote itself; either way the string goes on to the next one.
                code = true;
                i += 1;
                while i < b.len() && b[i] != q {
                    i += 1;
                }
                i += 1;
                continue;
            }
            b'$' => {
                let tag_end = b[i + 1..]
                    .iter()
                    .position(|c| !(c.is_ascii_alphanumeric() || *c == b'_'))
                    .map(|n| i + 1 + n);
                if let Some(e) = tag_end.filter(|e| b[*e] == b'$') {
                    let tag = &sql[i..=e];
                    code = true;
                    i = sql[e + 1..]
                        .find(tag)
                        .map_or(b.len(), |n| e + 1 + n + tag.len());
                    continue;
                }
            }
            b';' => {
                if code {
                    out.push(sql[start..i].trim());
                }
                start = i + 1;
                code = false;
            }
            c if !c.is_ascii_whitespace() => code = true,
            _ => {}
        }
        i += 1;
    }
    if code {
        out.push(sql[start..].trim());
    }
    out
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

#[cfg(test)]
mod tests {
    use super::statements;

    #[test]
    fn a_migration_splits_at_the_semicolons_outside_comments_strings_and_bodies() {
        let sql = "-- a comment; not a statement\n\
            CREATE TABLE t (a text DEFAULT 'x;y', \"b;c\" int);\n\
            /* a block; /* nested; */ still; */\n\
            CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$;\n\
            CREATE FUNCTION g() RETURNS int LANGUAGE plpgsql AS $body$ BEGIN RETURN 2; END $body$;\n\
            INSERT INTO t VALUES ('it''s; fine', 1);\n\
            -- a trailing comment\n";
        assert_eq!(
            statements(sql),
            vec![
                "-- a comment; not a statement\nCREATE TABLE t (a text DEFAULT 'x;y', \"b;c\" int)",
                "/* a block; /* nested; */ still; */\nCREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1; $$",
                "CREATE FUNCTION g() RETURNS int LANGUAGE plpgsql AS $body$ BEGIN RETURN 2; END $body$",
                "INSERT INTO t VALUES ('it''s; fine', 1)",
            ]
        );
        // A last statement without its semicolon; a `$1` is no quote.
        assert_eq!(
            statements("SELECT $1; SELECT 2"),
            vec!["SELECT $1", "SELECT 2"]
        );
        assert!(statements("-- only a comment;\n  ").is_empty());
    }

    #[test]
    fn every_citus_equivalent_replaces_a_statement_of_its_migration() {
        for (version, original, _) in super::CITUS_EQUIVALENTS {
            let m = crate::store::MIGRATOR
                .iter()
                .find(|m| m.version == *version)
                .expect("a landed migration");
            let found = statements(&m.sql)
                .into_iter()
                .filter(|s| s.ends_with(original))
                .count();
            assert_eq!(found, 1, "{original}");
        }
    }

    #[test]
    fn every_migration_splits_into_statements_that_hold_all_of_its_code() {
        for m in crate::store::MIGRATOR.iter() {
            let parts = statements(&m.sql);
            assert!(!parts.is_empty(), "{}", m.description);
            // Joined again, the statements are the file without its separators, comments aside: no
            // code is lost between two of them.
            let strip = |s: &str| -> String {
                s.lines()
                    .map(|l| l.split("--").next().unwrap_or(""))
                    .collect::<String>()
                    .chars()
                    .filter(|c| !c.is_whitespace() && *c != ';')
                    .collect()
            };
            assert_eq!(strip(&parts.join("\n")), strip(&m.sql), "{}", m.description);
        }
    }
}
