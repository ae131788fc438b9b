//! The Citus placement of the schema (`store::citus`). The first two tests run on both engines; the last
//! one needs a Citus cluster (`scripts/citus.sh start`) and says it was skipped on plain PostgreSQL.

use apiary_ingest::store::citus::{self, DISTRIBUTED_TABLES, REFERENCE_TABLES, WORKER_FUNCTIONS};
use apiary_ingest::store::{self, StoreError};
use sqlx::PgPool;

use crate::helpers;

#[sqlx::test(migrations = "../migrations")]
async fn every_table_of_the_migrations_has_a_place_on_citus(pool: PgPool) {
    let mut conn = pool.acquire().await.unwrap();
    let unlisted = citus::unlisted_tables(&mut conn).await.unwrap();
    assert!(
        unlisted.is_empty(),
        "add {unlisted:?} to store::citus::DISTRIBUTED_TABLES or REFERENCE_TABLES"
    );
}

#[sqlx::test(migrations = false)]
async fn migrate_citus_refuses_a_database_without_the_extension_and_changes_nothing(pool: PgPool) {
    // sqlx::test's fresh database: no citus extension on either engine.
    let err = store::migrate_with(&pool, true).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Citus(citus::CitusError::NotCitus)),
        "{err:?}"
    );
    let migrated: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(
        !migrated,
        "migrate --citus ran migrations on a plain database"
    );
}

/// Foreign keys of the schema as (table, name, definition).
async fn foreign_keys(pool: &PgPool) -> Vec<(String, String, String)> {
    sqlx::query_as(
        "SELECT conrelid::regclass::text, conname::text, pg_get_constraintdef(oid) FROM pg_constraint
         WHERE contype = 'f' AND connamespace = 'public'::regnamespace
           AND conrelid = ANY (SELECT to_regclass(t) FROM unnest($1::text[]) t)
         ORDER BY 1, 2",
    )
    .bind(
        REFERENCE_TABLES
            .iter()
            .chain(DISTRIBUTED_TABLES)
            .copied()
            .collect::<Vec<_>>(),
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// How many tables on each worker have a name starting with `prefix` (shards of a table).
async fn shards_on_workers(pool: &PgPool, prefix: &str) -> Vec<i64> {
    let results: Vec<String> = sqlx::query_scalar(
        "SELECT result FROM run_command_on_workers(format(
             'SELECT count(*) FROM pg_class WHERE relname LIKE %L AND relkind IN (''r'', ''p'')',
             $1 || '%'))
         ORDER BY nodeport",
    )
    .bind(prefix)
    .fetch_all(pool)
    .await
    .unwrap();
    results.iter().map(|r| r.parse().unwrap()).collect()
}

#[sqlx::test(migrations = "../migrations")]
async fn on_citus_tenant_tables_are_distributed_colocated_and_retention_reaches_every_worker(
    pool: PgPool,
) {
    if !helpers::on_citus().await {
        eprintln!("skipped: DATABASE_URL is plain PostgreSQL (scripts/citus.sh start for Citus)");
        return;
    }
    // The migrations ran before the extension existed (sqlx::test), as in a database moved onto a
    // cluster: distribution must also create the functions on the workers.
    sqlx::query("SELECT apiary_ensure_event_partitions('2026-11-01', '2026-11-02')")
        .execute(&pool)
        .await
        .unwrap();
    let keys_before = foreign_keys(&pool).await;
    assert!(keys_before.len() >= 10, "{keys_before:?}");
    helpers::citus_prepare(&pool).await;

    let placed: Vec<(String, String, String, Option<String>, i32)> = sqlx::query_as(
        "SELECT logicalrelid::regclass::text, partmethod::text, repmodel::text,
             column_to_column_name(logicalrelid, partkey), colocationid
         FROM pg_dist_partition ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    let of = |t: &str| {
        placed
            .iter()
            .find(|p| p.0 == t)
            .unwrap_or_else(|| panic!("{t} is not a Citus table: {placed:?}"))
    };
    let group = of("event_keys").4;
    for t in DISTRIBUTED_TABLES
        .iter()
        .copied()
        .chain(["events_20261101", "events_20261102"])
    {
        let p = of(t);
        assert_eq!(
            (p.1.as_str(), p.3.as_deref(), p.4),
            ("h", Some("tenant_id"), group),
            "{t}"
        );
    }
    for t in REFERENCE_TABLES {
        assert_eq!(of(t).2, "t", "{t} is not a reference table");
    }
    // The same foreign keys as on plain PostgreSQL.
    assert_eq!(foreign_keys(&pool).await, keys_before);
    for f in WORKER_FUNCTIONS {
        let name = f.split('(').next().unwrap();
        let on_workers: Vec<String> = sqlx::query_scalar(
            "SELECT result FROM run_command_on_workers(
                 format('SELECT count(*) FROM pg_proc WHERE proname = %L', $1::text))",
        )
        .bind(name)
        .fetch_all(&pool)
        .await
        .unwrap();
        assert!(
            on_workers.len() >= 2 && on_workers.iter().all(|c| c == "1"),
            "{f} on the workers: {on_workers:?}"
        );
    }
    // Idempotent: a second run changes nothing.
    assert_eq!(
        citus::distribute(&pool).await.unwrap(),
        citus::Distributed::default()
    );
    // A partition created later is distributed and co-located by Citus.
    sqlx::query("SELECT apiary_ensure_event_partitions('2026-11-03', '2026-11-03')")
        .execute(&pool)
        .await
        .unwrap();
    let later: (String, i32) = sqlx::query_as(
        "SELECT partmethod::text, colocationid FROM pg_dist_partition
         WHERE logicalrelid = 'events_20261103'::regclass",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(later, ("h".to_string(), group));
    // Retention drops the partitions' shards on every worker.
    let before = shards_on_workers(&pool, "events_20261101_").await;
    assert!(before.iter().all(|n| *n > 0), "{before:?}");
    let dropped: i32 = sqlx::query_scalar("SELECT apiary_drop_event_partitions('2026-11-03')")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(dropped, 2);
    assert_eq!(
        shards_on_workers(&pool, "events_20261101_").await,
        vec![0; before.len()]
    );
    assert_eq!(
        shards_on_workers(&pool, "events_20261102_").await,
        vec![0; before.len()]
    );
    assert!(shards_on_workers(&pool, "events_20261103_")
        .await
        .iter()
        .all(|n| *n > 0));
}
