//! Migrations on Citus: one statement at a time ([`migrate_by_statement`]).
//!
//! sqlx's migrator sends a migration's file as one query string. Citus builds the command it sends to
//! the workers for some DDL on a distributed table (an index, a primary key) from the whole string,
//! and the workers refuse a string of several commands ("cannot insert multiple commands into a
//! prepared statement", citusdata/citus#6608): a cluster distributed by an earlier release could not
//! take a migration that adds one. On a database with the citus extension, `store::migrate` therefore
//! applies the pending migrations here first, each split into its statements ([`statements`]) and run
//! in one transaction with its bookkeeping row, as sqlx would record it; sqlx's migrator then finds
//! nothing to do. Where Citus refuses a statement of a landed migration outright, the statement's
//! equivalent runs instead ([`CITUS_EQUIVALENTS`]). Plain PostgreSQL runs the files as they are.

use sqlx::PgPool;

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
