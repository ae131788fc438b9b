//! The batch write path's cost in counts a noisy machine cannot blur, checked against a committed baseline
//! (`ingest/tests/write_costs.baseline.json`).
//!
//! For a fixed mix — one 1000-event batch of one device (LLM turns and tool calls over 20 sessions), and
//! 50 batches of 20 events from 50 devices, sent one after the other — it counts per 1000 events:
//! - **statements** sqlx sent (every `sqlx::query` event: `BEGIN`/`COMMIT` included, a `COPY` once);
//! - **WAL bytes** the cluster wrote (`pg_current_wal_insert_lsn()` before and after, after a `CHECKPOINT`
//!   so the full-page images each first touch writes are the same every run);
//! - **buffers** the database's statements touched (shared buffer hits and reads, from
//!   `pg_stat_statements`, which the private cluster of `scripts/pg.sh` loads; the test's own reads of
//!   the counters left out).
//!
//! The instructions the ingest process spends on the same mix are counted by
//! `scripts/ingest-path-guard.sh` (`ingest/benches/write_path.rs`).
//!
//! The check fails when a figure rises past the baseline by more than its tolerance (statements 2%, WAL
//! bytes 5%, buffers 10%; run to run they differ by about 1%, but the buffers of the 20-event batches moved
//! by up to 6% between sittings hours apart with the same code), and when one falls below it by more than that too (so a gain is recorded and cannot hide a
//! later loss): `APIARY_WRITE_COSTS_BLESS=1` rewrites the baseline, in a commit that says why.
//!
//! WAL is counted for the whole cluster, so the check needs a PostgreSQL server nothing else writes to: it
//! runs with `APIARY_WRITE_COSTS=1` on a private cluster (`APIARY_PG_FORCE_PRIVATE=1 APIARY_WRITE_COSTS=1
//! ./scripts/test.sh --test write_costs`; CI's "write costs" step), and otherwise says why it did not.

use std::sync::atomic::{AtomicU64, Ordering};

use apiary_ingest::config::IngestSettings;
use chrono::{DurationRound, Utc};
use reqwest::StatusCode;
use serde_json::{json, Value};

#[path = "api/helpers.rs"]
#[allow(dead_code)]
mod helpers;

use helpers::*;

static STATEMENTS: AtomicU64 = AtomicU64::new(0);

/// A tracing subscriber that only counts the statements sqlx sends.
struct CountStatements;

impl tracing::Subscriber for CountStatements {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        m.target() == "sqlx::query"
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        if e.metadata().target() == "sqlx::query" {
            STATEMENTS.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

const BASELINE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/write_costs.baseline.json"
);
const MODELS: [&str; 3] = ["claude-sonnet-4-5", "gpt-5", "gemini-2.5-pro"];
const TOOLS: [&str; 4] = ["read_file", "grep", "bash", "web_search"];

/// Event `i` of a session: three LLM turns in five, the rest tool calls (every seventh an error).
fn mixed_event(i: usize, session: &str, at: chrono::DateTime<Utc>) -> Value {
    let at = at + chrono::Duration::seconds((i % 1_200) as i64);
    if i % 5 < 3 {
        llm(
            session,
            at,
            MODELS[i % 3],
            1_000 + (i as u64 * 37) % 9_000,
            100 + (i as u64 * 13) % 900,
            ((i % 50) + 1) as f64 / 1_000.0,
        )
    } else {
        let mut e = tool(session, at, i.is_multiple_of(7));
        e["data"]["tool_name"] = json!(TOOLS[i % 4]);
        e["data"]["duration_ms"] = json!(10 + (i * 17) % 2_000);
        e
    }
}

/// A batch of `n` events over `sessions` sessions of `device`, each session bound to its user.
fn device_batch(device: &str, n: usize, sessions: usize, at: chrono::DateTime<Utc>) -> Value {
    let names: Vec<String> = (0..sessions).map(|s| format!("{device}-s{s}")).collect();
    let events = (0..n)
        .map(|i| mixed_event(i, &names[i % sessions], at))
        .collect();
    let bindings = names
        .iter()
        .map(|s| binding(s, &format!("user-of-{device}")))
        .collect();
    let mut b = batch(events, bindings);
    b["agent"]["device_id"] = json!(device);
    b
}

async fn wal_lsn(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar("select (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::int8")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Shared buffers (hits and reads) the statements of this database touched so far, but for this test's
/// own reads of the counters.
async fn buffers(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar(
        "select coalesce(sum(shared_blks_hit + shared_blks_read), 0)::int8 from pg_stat_statements
         where dbid = (select oid from pg_database where datname = current_database())
           and query not like '%pg_stat_statements%' and query not like '%pg_current_wal_insert_lsn%'
           and query not ilike 'checkpoint%'",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Statements, WAL bytes and buffers per 1000 events of `batches` sent one after the other.
async fn measure(app: &TestApp, token: &str, batches: &[Value]) -> Costs {
    sqlx::query("checkpoint").execute(&app.pool).await.unwrap();
    let events: usize = batches
        .iter()
        .map(|b| b["events"].as_array().unwrap().len())
        .sum();
    let wal0 = wal_lsn(&app.pool).await;
    let buf0 = buffers(&app.pool).await;
    let st0 = STATEMENTS.load(Ordering::Relaxed);
    for b in batches {
        let (s, v) = app.post_batch(token, b).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["rejected"], json!([]), "{v}");
    }
    // The reads of the LSN and of the buffers are statements of this test, not of the write path.
    let statements = STATEMENTS.load(Ordering::Relaxed) - st0;
    let wal = wal_lsn(&app.pool).await - wal0;
    let buffers = buffers(&app.pool).await - buf0;
    let per = 1_000.0 / events as f64;
    Costs {
        statements_per_1000: statements as f64 * per,
        wal_bytes_per_1000: wal as f64 * per,
        buffers_per_1000: buffers as f64 * per,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
struct Costs {
    statements_per_1000: f64,
    wal_bytes_per_1000: f64,
    buffers_per_1000: f64,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct Baseline {
    large_batches: Costs,
    small_batches: Costs,
}

/// (what, now, baseline, tolerance) → a problem, if any.
fn compare(what: &str, now: f64, base: f64, tolerance: f64) -> Option<String> {
    let ratio = now / base;
    if ratio > 1.0 + tolerance {
        Some(format!(
            "{what}: {now:.0} against the baseline's {base:.0} ({:+.1}%, more than the {:.0}% allowed)",
            (ratio - 1.0) * 100.0,
            tolerance * 100.0
        ))
    } else if ratio < 1.0 - tolerance {
        Some(format!(
            "{what}: {now:.0} against the baseline's {base:.0} ({:+.1}%): a gain — record it with \
             APIARY_WRITE_COSTS_BLESS=1, so that a later loss cannot hide in the slack",
            (ratio - 1.0) * 100.0
        ))
    } else {
        None
    }
}

/// The ingest's router alone, without its background tasks (live stream reader and upkeep, budgets,
/// alerts, partition upkeep), whose statements and WAL would blur the write path's. Batches are sent one
/// after the other and each group commit takes one: the statements are the same every run.
async fn serve_write_path(pool: sqlx::PgPool) -> TestApp {
    let settings = IngestSettings {
        group_commit_wait_ms: 0,
        ..test_settings()
    };
    let state = apiary_ingest::state::AppState::new(settings, pool.clone());
    state
        .store
        .ensure_ahead(Utc::now() - chrono::Duration::days(1), 3)
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let service = apiary_ingest::startup::router(state)
        .into_make_service_with_connect_info::<std::net::SocketAddr>();
    tokio::spawn(async move { axum::serve(listener, service).await });
    TestApp {
        base,
        pool,
        client: reqwest::Client::new(),
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn the_write_path_costs_no_more_statements_or_wal_than_its_baseline(pool: sqlx::PgPool) {
    if std::env::var("APIARY_WRITE_COSTS").as_deref() != Ok("1") {
        eprintln!(
            "write costs: skipped — WAL is counted for the whole cluster, so this check runs only with \
             APIARY_WRITE_COSTS=1 on a private cluster (APIARY_PG_FORCE_PRIVATE=1 APIARY_WRITE_COSTS=1 \
             ./scripts/test.sh --test write_costs)"
        );
        return;
    }
    assert_eq!(
        std::env::var("APIARY_PG_SOURCE").as_deref(),
        Ok("private"),
        "APIARY_WRITE_COSTS=1 needs a private cluster nothing else writes to (APIARY_PG_FORCE_PRIVATE=1 with scripts/test.sh)"
    );
    let _ = tracing::subscriber::set_global_default(CountStatements);
    sqlx::query("create extension if not exists pg_stat_statements")
        .execute(&pool)
        .await
        .expect("pg_stat_statements: the private cluster of scripts/pg.sh loads it where the server ships it");
    let app = serve_write_path(pool).await;
    let t = app.tenant("acme").await;
    // Two hours ago, on the hour (plus ten minutes): every event falls in one hour and one day.
    let at = Utc::now()
        .duration_trunc(chrono::Duration::hours(1))
        .unwrap()
        - chrono::Duration::minutes(110);
    // Warm-up over the same hours (partitions, caches, the tenant's first rows), not counted.
    let warm: Vec<Value> = (0..3)
        .map(|d| device_batch(&format!("warm-{d}"), 200, 4, at))
        .collect();
    measure(&app, &t.ingest, &warm).await;

    let large = measure(&app, &t.ingest, &[device_batch("big-desk", 1_000, 20, at)]).await;
    let small_batches: Vec<Value> = (0..50)
        .map(|d| device_batch(&format!("desk-{d:02}"), 20, 2, at))
        .collect();
    let small = measure(&app, &t.ingest, &small_batches).await;
    let now = Baseline {
        large_batches: large,
        small_batches: small,
    };
    println!("write costs per 1000 events:");
    println!("| batches | statements | WAL bytes | buffers |");
    println!("|---|---|---|---|");
    for (name, c) in [
        ("1 × 1000 events", now.large_batches),
        ("50 × 20 events, 50 devices", now.small_batches),
    ] {
        println!(
            "| {name} | {:.1} | {:.0} | {:.0} |",
            c.statements_per_1000, c.wal_bytes_per_1000, c.buffers_per_1000
        );
    }
    if std::env::var("APIARY_WRITE_COSTS_BLESS").as_deref() == Ok("1") {
        let text = serde_json::to_string_pretty(&now).unwrap() + "\n";
        std::fs::write(BASELINE, text).unwrap();
        println!("baseline written to {BASELINE}");
        return;
    }
    let base: Baseline = serde_json::from_str(
        &std::fs::read_to_string(BASELINE)
            .expect("the committed baseline (APIARY_WRITE_COSTS_BLESS=1 writes it)"),
    )
    .expect("the baseline is JSON of the printed figures");
    let problems: Vec<String> = [
        (
            "1000-event batches: statements per 1000 events",
            now.large_batches.statements_per_1000,
            base.large_batches.statements_per_1000,
            0.02,
        ),
        (
            "1000-event batches: WAL bytes per 1000 events",
            now.large_batches.wal_bytes_per_1000,
            base.large_batches.wal_bytes_per_1000,
            0.05,
        ),
        (
            "20-event batches: statements per 1000 events",
            now.small_batches.statements_per_1000,
            base.small_batches.statements_per_1000,
            0.02,
        ),
        (
            "20-event batches: WAL bytes per 1000 events",
            now.small_batches.wal_bytes_per_1000,
            base.small_batches.wal_bytes_per_1000,
            0.05,
        ),
        (
            "1000-event batches: buffers per 1000 events",
            now.large_batches.buffers_per_1000,
            base.large_batches.buffers_per_1000,
            0.10,
        ),
        (
            "20-event batches: buffers per 1000 events",
            now.small_batches.buffers_per_1000,
            base.small_batches.buffers_per_1000,
            0.10,
        ),
    ]
    .into_iter()
    .filter_map(|(what, n, b, tol)| compare(what, n, b, tol))
    .collect();
    assert!(
        problems.is_empty(),
        "the write path's costs moved:\n{}",
        problems.join("\n")
    );
}
