//! The Citus placement of the schema (`store::citus`) and the write path on it. The first two tests run on
//! both engines; the others need a Citus cluster (`scripts/citus.sh start`) and say they were skipped on
//! plain PostgreSQL (`APIARY_TEST_CITUS=1` makes that a failure).

use apiary_ingest::store::citus::{self, DISTRIBUTED_TABLES, REFERENCE_TABLES, WORKER_FUNCTIONS};
use apiary_ingest::store::{self, Engine, Store, StoreError};
use chrono::Utc;
use reqwest::StatusCode;
use serde_json::json;
use sqlx::PgPool;
use uuid::Uuid;

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

/// The worker (port) holding `tenant`'s shard group.
async fn worker_of(pool: &PgPool, tenant: Uuid) -> i32 {
    sqlx::query_scalar(
        "SELECT nodeport FROM pg_dist_shard_placement
         WHERE shardid = get_shard_id_for_distribution_column('event_keys', $1)",
    )
    .bind(tenant)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Transactions that committed on several workers (two-phase commit across workers) and that the
/// coordinator has not recovered yet: Citus records each prepared worker transaction in
/// `pg_dist_transaction` (gid `citus_<group>_<pid>_<transaction>_<connection>`) until its recovery, every
/// minute by default, removes those whose outcome is known. (A transaction prepared on one worker only is
/// not counted: on Citus every batch is one — its INSERT … SELECT from arrays and COPY into a distributed
/// table always use two-phase commit, even on one worker; docs/scaling.md, "Two-phase commit and the live stream".)
async fn multi_worker_transactions(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM (
             SELECT regexp_replace(gid, '_[0-9]+$', '') FROM pg_dist_transaction
             GROUP BY 1 HAVING count(DISTINCT groupid) > 1) t",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// On Citus the group commit keeps one tenant per transaction: many concurrent small batches
/// of tenants whose shards live on different workers — the load that makes groups — never make a
/// transaction that commits on two workers, and each tenant's usage is exact. The probe is checked as
/// well: one transaction that writes two of those tenants is seen.
/// The database distributed ([`helpers::citus_prepare`]) and an ingest serving it whose connections
/// count the statements Citus runs on one shard and on several (`citus.enable_stat_counters`, read by
/// [`shard_counts`]): the routes without the server's background work (partitions ahead, retention,
/// the live stream's upkeep, budgets, alerts), whose statements span every worker on purpose.
async fn counted_app(pool: &PgPool) -> (helpers::TestApp, apiary_ingest::state::AppState) {
    helpers::citus_prepare(pool).await;
    let counted = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .after_connect(|c, _| {
            Box::pin(async move {
                sqlx::Executor::execute(c, "SET citus.enable_stat_counters = on").await?;
                Ok(())
            })
        })
        .connect_with((*pool.connect_options()).clone())
        .await
        .unwrap();
    let state = apiary_ingest::state::AppState::new(helpers::test_settings(), counted);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let router = apiary_ingest::startup::router(state.clone())
        .into_make_service_with_connect_info::<std::net::SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, router).await });
    let app = helpers::TestApp {
        base,
        pool: pool.clone(),
        client: reqwest::Client::new(),
    };
    (app, state)
}

/// The statements the counted connections ran on one shard and on several, so far.
async fn shard_counts(pool: &PgPool) -> (i64, i64) {
    sqlx::query_as::<_, (i64, i64)>(
        "SELECT query_execution_single_shard, query_execution_multi_shard
         FROM citus_stat_counters WHERE name = current_database()",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

#[sqlx::test(migrations = "../migrations")]
async fn on_citus_every_read_of_one_tenant_runs_on_its_shard_alone(pool: PgPool) {
    if !helpers::on_citus().await {
        eprintln!("skipped: DATABASE_URL is plain PostgreSQL (scripts/citus.sh start for Citus)");
        return;
    }
    let (app, _state) = counted_app(&pool).await;
    let t = app.tenant("acme").await;
    let key = format!("ck_{}", "7".repeat(32));
    // A queen with a colony run and two workers, usage over three days, a tool call, a budget.
    let now = Utc::now();
    let day0 = now - chrono::Duration::days(2);
    let mut events = vec![helpers::event(
        "colony.created",
        Some("q1"),
        day0 - chrono::Duration::minutes(5),
        json!({ "source": "created", "colony_id": "q1", "queen_session_id": "q1", "colony_key": key }),
    )];
    for d in 0..3 {
        let at = day0 + chrono::Duration::days(d);
        events.push(helpers::llm("q1", at, "m1", 100, 5, 0.01));
        events.push(helpers::tool("q1", at, false));
        for w in ["w1", "w2"] {
            let mut e = helpers::llm(w, at, "m2", 10, 1, 0.001);
            e["agent_role"] = json!("worker");
            e["colony_id"] = json!("q1");
            e["parent_session_id"] = json!("q1");
            events.push(e);
        }
    }
    let sessions = vec![
        helpers::binding("q1", "alice"),
        helpers::binding("w1", "alice"),
        helpers::binding("w2", "bob"),
    ];
    let (s, v) = app
        .post_batch(&t.ingest, &helpers::batch(events, sessions))
        .await;
    assert_eq!((s, &v["rejected"]), (StatusCode::OK, &json!([])), "{v}");
    let admin = app.token(t.id, &["admin"]).await;
    let (s, v) = app
        .post_json(
            &admin,
            "/v1/budgets",
            json!({"period": "month", "limit_usd": "10"}),
        )
        .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let alice = app.tenant_token_for_user(t.id, "alice").await;

    let day = |d: i64| {
        (now - chrono::Duration::days(d))
            .format("%Y-%m-%d")
            .to_string()
    };
    let mut reads: Vec<String> = vec![];
    for group_by in [
        "",
        "user",
        "model",
        "colony",
        "tool",
        "runtime",
        "device",
        "session",
        "user,model",
        "colony,model",
        "user,tool",
        "device,runtime",
    ] {
        for (from, gran, tz) in [
            (1, "hour", "UTC"),
            (30, "day", "UTC"),
            (30, "day", "America/New_York"),
            (365, "month", "UTC"),
            (365, "month", "America/New_York"),
        ] {
            reads.push(format!(
                "/v1/usage?group_by={group_by}&granularity={gran}&tz={tz}&from={}",
                day(from)
            ));
        }
    }
    reads.extend(
        [
            "/v1/colonies",
            "/v1/sessions",
            "/v1/sessions?status=active",
            "/v1/sessions?status=stalled,failed",
            "/v1/sessions?status=completed",
            "/v1/sessions?user=alice",
            "/v1/sessions/q1",
            "/v1/sessions/q1/tree",
            "/v1/sessions/q1/history",
            "/v1/sessions/q1/usage",
            "/v1/status/transitions",
            "/v1/budgets",
            "/v1/devices",
        ]
        .map(String::from),
    );
    reads.push("/v1/colonies/q1/usage".into());
    reads.push("/v1/metrics".into());
    reads.push(format!("/v1/sessions?colony={key}"));
    let mut checked = 0;
    let mut spread = vec![];
    for token in [&t.read, &alice] {
        for path in &reads {
            let (single, multi) = shard_counts(&pool).await;
            let (s, v) = app.get(token, path).await;
            assert_eq!(s, StatusCode::OK, "{path}: {v}");
            let (single_after, multi_after) = shard_counts(&pool).await;
            if multi_after > multi {
                spread.push(path.clone());
            }
            checked += i64::from(single_after > single);
        }
        // The dashboard's pages, signed in with the same token.
        let cookie = app.cookie(token).await;
        for path in [
            "/",
            "/sessions",
            "/sessions/q1",
            "/colonies",
            "/devices",
            "/budgets",
        ] {
            let (_, multi) = shard_counts(&pool).await;
            let page = app.page(Some(&cookie), path).await;
            assert_eq!(page.status, StatusCode::OK, "{path}: {}", page.body);
            if shard_counts(&pool).await.1 > multi {
                spread.push(format!("page {path}"));
            }
        }
    }
    assert!(
        checked > reads.len() as i64,
        "the counters did not count the reads' statements ({checked} of {} reads counted)",
        2 * reads.len()
    );
    assert!(
        spread.is_empty(),
        "reads of one tenant ran statements on several shards: {spread:?}"
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn on_citus_group_commit_writes_one_tenant_per_transaction(pool: PgPool) {
    if !helpers::on_citus().await {
        eprintln!("skipped: DATABASE_URL is plain PostgreSQL (scripts/citus.sh start for Citus)");
        return;
    }
    // The routes and the group commit's writers without the server's background work (partitions ahead,
    // retention, the live stream's upkeep, budgets, alerts), whose statements span every worker on
    // purpose: only the batches' transactions are counted.
    // The writers' connections count the statements Citus runs on one shard and on several
    // (`citus_stat_counters`): a batch's statement that is not pruned to its tenant's shard runs on
    // every worker, and only sometimes does that show as a two-phase commit across workers.
    let (app, state) = counted_app(&pool).await;
    // Tenants on both workers (4 shards on 2 workers: a few tenants are enough, more if not).
    let mut tenants = vec![];
    let mut workers = std::collections::BTreeSet::new();
    while tenants.len() < 6 || workers.len() < 2 {
        assert!(tenants.len() < 40, "every tenant landed on one worker");
        let t = app.tenant(&format!("t{}", tenants.len())).await;
        workers.insert(worker_of(&pool, t.id).await);
        tenants.push(t);
    }
    // The set-up wrote on every worker (tenants and tokens are reference tables, partitions are DDL on
    // every worker; the days' partitions are made here, so the batches have none to create): its
    // records are recovered before the load.
    sqlx::query("SELECT apiary_ensure_event_partitions(current_date - 1, current_date + 3)")
        .execute(&pool)
        .await
        .unwrap();
    let mut before = -1;
    for _ in 0..100 {
        sqlx::query("SELECT recover_prepared_transactions()")
            .execute(&pool)
            .await
            .unwrap();
        before = multi_worker_transactions(&pool).await;
        if before == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(before, 0, "the set-up's transactions were not recovered");
    let (single_before, multi_before) = shard_counts(&pool).await;

    let now = Utc::now();
    let mut requests = vec![];
    let mut expected = vec![0u64; tenants.len()];
    for (i, t) in tenants.iter().enumerate() {
        for d in 0..4 {
            for b in 0..3 {
                let device = format!("d{d}");
                let session = format!("s{d}_{b}");
                let events = (0..5)
                    .map(|e| {
                        let input = 10 + (i * 100 + d * 10 + b + e) as u64;
                        expected[i] += input;
                        helpers::llm(&session, now, "m1", input, 1, 0.001)
                    })
                    .collect();
                let mut batch =
                    helpers::batch(events, vec![helpers::binding(&session, &format!("u{d}"))]);
                batch["agent"]["device_id"] = json!(device);
                requests.push((t.ingest.clone(), batch));
            }
        }
    }
    let answers =
        futures::future::join_all(requests.iter().map(|(token, b)| app.post_batch(token, b))).await;
    for (status, v) in &answers {
        assert_eq!(*status, StatusCode::OK, "{v}");
        assert_eq!(
            (&v["accepted"], &v["duplicates"], &v["rejected"]),
            (&json!(5), &json!(0), &json!([]))
        );
    }
    let (single_after, multi_after) = shard_counts(&pool).await;
    assert!(
        single_after > single_before,
        "the counters did not count the batches' statements"
    );
    assert_eq!(
        multi_after - multi_before,
        0,
        "statements of the batches ran on several shards ({} on one shard)",
        single_after - single_before
    );
    let after = multi_worker_transactions(&pool).await;
    let gids: Vec<String> = sqlx::query_scalar("SELECT gid FROM pg_dist_transaction ORDER BY gid")
        .fetch_all(&pool)
        .await
        .unwrap();
    assert_eq!(
        after, 0,
        "a group's transaction spanned several workers (two-phase commit across workers): {gids:?}"
    );
    assert_eq!(state.store.engine(), Some(Engine::Citus));
    assert_eq!(
        Store::new(pool.clone()).detect_engine().await.unwrap(),
        Engine::Citus
    );
    for (i, t) in tenants.iter().enumerate() {
        let (s, u) = app.get(&t.read, "/v1/usage").await;
        assert_eq!(s, StatusCode::OK, "{u}");
        assert_eq!(u["totals"]["input_tokens"], expected[i], "tenant {i}: {u}");
        assert_eq!(u["totals"]["llm_calls"], 60, "tenant {i}: {u}");
    }

    // The probe sees a transaction that writes two tenants on two workers.
    let (a, b) = {
        let first = worker_of(&pool, tenants[0].id).await;
        let mut other = None;
        for t in &tenants[1..] {
            if worker_of(&pool, t.id).await != first {
                other = Some(t.id);
                break;
            }
        }
        (tenants[0].id, other.unwrap())
    };
    let mut tx = pool.begin().await.unwrap();
    for t in [a, b] {
        sqlx::query("UPDATE devices SET agent_version = agent_version WHERE tenant_id = $1")
            .bind(t)
            .execute(&mut *tx)
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    assert_eq!(
        multi_worker_transactions(&pool).await,
        after + 1,
        "the probe missed a transaction across two workers"
    );
}

#[sqlx::test(migrations = false)]
async fn on_citus_a_cluster_distributed_by_an_earlier_release_takes_every_later_migration(
    pool: PgPool,
) {
    if !helpers::on_citus().await {
        eprintln!("skipped: DATABASE_URL is plain PostgreSQL (scripts/citus.sh start for Citus)");
        return;
    }
    // A cluster as the release before the sessions' stored end left it: its migrations applied (and
    // recorded) by sqlx's migrator, its tables distributed, usage stored.
    let all = sqlx::migrate!("../migrations");
    let at = all
        .iter()
        .position(|m| m.description.contains("sessions ended"))
        .unwrap();
    let earlier = sqlx::migrate::Migrator {
        migrations: std::borrow::Cow::Owned(all.migrations[..at].to_vec()),
        ..sqlx::migrate::Migrator::DEFAULT
    };
    earlier.run(&pool).await.unwrap();
    helpers::citus_prepare(&pool).await;
    let tenant = Uuid::new_v4();
    sqlx::raw_sql(&format!(
        "INSERT INTO tenants (tenant_id, name) VALUES ('{tenant}', 'acme');
         INSERT INTO usage_rollups_hourly (tenant_id, bucket, user_id, device_id, colony_id, session_id,
             model, runtime, input_tokens, llm_calls, events)
         VALUES ('{tenant}', '2026-11-03T10:00:00Z', 'alice', 'd1', '', 's1', 'm1', 'hive', 10, 1, 1),
                ('{tenant}', '2026-11-03T10:00:00Z', 'alice', 'd2', '', 's2', 'm1', 'hive', 20, 2, 2);
         INSERT INTO usage_rollups_narrow (tenant_id, bucket, user_id, model, runtime, input_tokens,
             llm_calls, events)
         VALUES ('{tenant}', '2026-11-03T10:00:00Z', 'alice', 'm1', 'hive', 30, 3, 3);"
    ))
    .execute(&pool)
    .await
    .unwrap();

    // The ingest's migrate: the later migrations (indexes on distributed tables among them) apply.
    store::migrate(&pool).await.unwrap();
    let recorded: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM _sqlx_migrations WHERE success AND execution_time >= 0",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(recorded, all.iter().count() as i64);
    let narrow: Vec<(String, i64)> = sqlx::query_as(
        "SELECT device_id, input_tokens FROM usage_rollups_narrow WHERE tenant_id = $1 ORDER BY 1",
    )
    .bind(tenant)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(narrow, vec![("d1".into(), 10), ("d2".into(), 20)]);
    for table in ["usage_rollups_narrow", "sessions"] {
        let kind: Option<String> = sqlx::query_scalar(
            "SELECT partmethod::text FROM pg_dist_partition WHERE logicalrelid = to_regclass($1)",
        )
        .bind(table)
        .fetch_optional(&pool)
        .await
        .unwrap();
        assert_eq!(kind.as_deref(), Some("h"), "{table}");
    }
    // Migrating again changes nothing.
    store::migrate(&pool).await.unwrap();
}
