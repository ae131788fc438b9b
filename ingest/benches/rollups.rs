//! Rollup query benchmark: 10M events over 30 days for 50 tenants, generated with SQL (generate_series)
//! straight into `events`, rolled up with the same rules as the ingest (an INSERT … SELECT … GROUP BY
//! into `usage_rollups`, then its hourly sums into `usage_rollups_hourly` and `usage_rollups_narrow` and
//! their daily and monthly sums), then every tenant-scoped group_by × granularity × zone through the
//! real query code (`query::usage::run`), against a raw scan of `events` for the same question.
//!
//! Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p apiary-ingest --bench rollups`
//! Knobs (env): BENCH_EVENTS (default 10_000_000); BENCH_TENANTS (default 50; 1 puts every event in one
//! tenant: the dashboard's worst case); BENCH_KEEP=1 keeps the database `apiary_bench_rollups` and reuses
//! it on the next run (generation takes a few minutes).
//!
//! Last, the dashboard: the overview page's first load (`GET /` with the page's defaults: the last 30
//! days by day and model, plus the budgets) for the tenant with the most events, through the real
//! server and a signed-in cookie, timed at the client on loopback (server time plus a loopback round
//! trip), next to `GET /v1/usage` for the same query; and the page's weight, raw and gzip-compressed.
//!
//! Data shape: 50,000 sessions of 200 events each (~66 minutes per session, start spread over 30 days),
//! 20 users and 20 devices per tenant, 3 models, 40% of sessions are colony workers; 60% llm.turn, 30%
//! tool.call, 10% health.signal.

#[path = "../../bench-support/stats.rs"]
mod stats;
use stats::percentile;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use apiary_ingest::query::usage::{self, UsageQuery};
use chrono::{DurationRound, TimeDelta, Utc};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgPool};
use uuid::Uuid;

const GENERATE: &str = "
INSERT INTO events (tenant_id, effective_at, event_id, occurred_at, received_at, kind, runtime, native_type,
    session_id, user_id, device_id, colony_id, agent_role, model, data)
SELECT t.tenant_id, g.at, md5(g.i::text)::uuid, g.at, g.at, g.kind, 'hive', 'bench',
    'session_' || g.s, 'user_' || (g.s / 50) % 20, 'device_' || (g.s / 50) % 20,
    CASE WHEN g.s % 5 IN (1, 2) THEN 'session_' || (g.s - g.s % 5) ELSE '' END,
    CASE WHEN g.s % 5 IN (1, 2) THEN 'worker' ELSE 'queen' END,
    CASE WHEN g.kind = 'llm.turn' THEN g.model ELSE '' END,
    CASE g.kind
      WHEN 'llm.turn' THEN jsonb_build_object('model', g.model, 'input_tokens', g.i % 9973, 'output_tokens', g.i % 997,
          'cached_tokens', g.i % 499, 'cache_creation_tokens', 0, 'cost_usd', (g.i % 10007) / 1000000.0,
          'cost_source', CASE WHEN g.i % 17 = 0 THEN 'unreported' ELSE 'reported' END)
      WHEN 'tool.call' THEN jsonb_build_object('tool_name', 'read_file', 'status', 'completed', 'is_error', g.i % 13 = 0)
      ELSE jsonb_build_object('signal', 'retry') END
FROM (
    SELECT i, i / 200 AS s,
        $1::timestamptz + (((i / 200) * 7919) % (29 * 86400)) * interval '1 second' + (i % 200) * interval '20 seconds' AS at,
        CASE WHEN i % 10 < 6 THEN 'llm.turn' WHEN i % 10 < 9 THEN 'tool.call' ELSE 'health.signal' END AS kind,
        (ARRAY['claude-sonnet-4-5', 'gpt-5', 'gemini-2.5-pro'])[1 + (i / 200 + i % 3) % 3] AS model
    FROM generate_series($2::bigint, $3::bigint - 1) AS i
) g JOIN (SELECT tenant_id, row_number() OVER (ORDER BY tenant_id) - 1 AS n FROM tenants) t ON t.n = g.s % $4";

const ROLL_UP: &str = "
INSERT INTO usage_rollups (tenant_id, bucket, user_id, device_id, colony_id, session_id, model, runtime, input_tokens, output_tokens,
    cached_tokens, cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls, tool_errors, events)
SELECT tenant_id, date_bin('15 minutes', effective_at, '2000-01-01'), user_id, device_id, colony_id, session_id, model,
    runtime,
    COALESCE(sum((data->>'input_tokens')::int8) FILTER (WHERE kind = 'llm.turn'), 0),
    COALESCE(sum((data->>'output_tokens')::int8) FILTER (WHERE kind = 'llm.turn'), 0),
    COALESCE(sum((data->>'cached_tokens')::int8) FILTER (WHERE kind = 'llm.turn'), 0),
    COALESCE(sum((data->>'cache_creation_tokens')::int8) FILTER (WHERE kind = 'llm.turn'), 0),
    COALESCE(sum(round((data->>'cost_usd')::numeric * 1000000000)) FILTER (WHERE kind = 'llm.turn'), 0),
    count(*) FILTER (WHERE kind = 'llm.turn'),
    count(*) FILTER (WHERE kind = 'llm.turn' AND data->>'cost_source' = 'unreported'),
    count(*) FILTER (WHERE kind = 'tool.call' AND data->>'status' = 'completed'),
    count(*) FILTER (WHERE kind = 'tool.call' AND (data->>'is_error')::bool),
    count(*)
FROM events GROUP BY 1, 2, 3, 4, 5, 6, 7, 8";

/// The hourly rollup from the quarter rows (what the ingest writes in the same transaction).
const ROLL_UP_HOURLY: &str = "
INSERT INTO usage_rollups_hourly (tenant_id, bucket, user_id, device_id, colony_id, session_id, model, runtime, input_tokens, output_tokens,
    cached_tokens, cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls, tool_errors, events)
SELECT tenant_id, date_bin('1 hour', bucket, '2000-01-01 00:00:00+00'), user_id, device_id, colony_id, session_id,
    model, runtime, sum(input_tokens), sum(output_tokens), sum(cached_tokens), sum(cache_creation_tokens), sum(cost_nanos),
    sum(llm_calls), sum(unpriced_turns), sum(tool_calls), sum(tool_errors), sum(events)
FROM usage_rollups GROUP BY 1, 2, 3, 4, 5, 6, 7, 8";

/// The narrow hourly rollup from the hourly rows (likewise written in the same transaction).
const ROLL_UP_NARROW: &str = "
INSERT INTO usage_rollups_narrow (tenant_id, bucket, user_id, device_id, model, runtime, input_tokens, output_tokens,
    cached_tokens, cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls, tool_errors, events)
SELECT tenant_id, bucket, user_id, device_id, model, runtime, sum(input_tokens), sum(output_tokens), sum(cached_tokens),
    sum(cache_creation_tokens), sum(cost_nanos), sum(llm_calls), sum(unpriced_turns), sum(tool_calls),
    sum(tool_errors), sum(events)
FROM usage_rollups_hourly GROUP BY 1, 2, 3, 4, 5, 6";

/// Every usage rollup table.
const ROLLUP_TABLES: [&str; 7] = [
    "usage_rollups",
    "usage_rollups_hourly",
    "usage_rollups_narrow",
    "usage_rollups_daily",
    "usage_rollups_monthly",
    "usage_rollups_colony_daily",
    "usage_rollups_colony_monthly",
];

/// The daily and monthly rollups from the narrow rows (likewise written in the same transaction).
const ROLL_UP_CALENDAR: [&str; 2] = [
    "INSERT INTO usage_rollups_daily (tenant_id, bucket, user_id, device_id, model, runtime, input_tokens, output_tokens,
        cached_tokens, cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls, tool_errors, events)
     SELECT tenant_id, date_bin('1 day', bucket, '2000-01-01 00:00:00+00'), user_id, device_id, model,
        runtime, sum(input_tokens),
        sum(output_tokens), sum(cached_tokens), sum(cache_creation_tokens), sum(cost_nanos), sum(llm_calls),
        sum(unpriced_turns), sum(tool_calls), sum(tool_errors), sum(events)
     FROM usage_rollups_narrow GROUP BY 1, 2, 3, 4, 5, 6",
    "INSERT INTO usage_rollups_monthly (tenant_id, bucket, user_id, device_id, model, runtime, input_tokens, output_tokens,
        cached_tokens, cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls, tool_errors, events)
     SELECT tenant_id, date_trunc('month', bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', user_id, device_id, model,
        runtime,
        sum(input_tokens), sum(output_tokens), sum(cached_tokens), sum(cache_creation_tokens), sum(cost_nanos),
        sum(llm_calls), sum(unpriced_turns), sum(tool_calls), sum(tool_errors), sum(events)
     FROM usage_rollups_daily GROUP BY 1, 2, 3, 4, 5, 6",
];

async fn generate(
    pool: &PgPool,
    total: i64,
    tenants: i64,
    start: chrono::DateTime<Utc>,
) -> anyhow::Result<()> {
    for i in 0..tenants {
        apiary_ingest::store::admin::create_tenant(pool, &format!("tenant-{i:02}")).await?;
    }
    let store = apiary_ingest::store::Store::new(pool.clone());
    store
        .ensure_days(start.date_naive().iter_days().take(32))
        .await?;
    let t0 = Instant::now();
    let chunk = 1_000_000i64;
    let mut from = 0;
    while from < total {
        let to = (from + chunk).min(total);
        sqlx::query(GENERATE)
            .bind(start)
            .bind(from)
            .bind(to)
            .bind(tenants)
            .execute(pool)
            .await?;
        eprintln!(
            "generated {to} events ({:.0} s)",
            t0.elapsed().as_secs_f64()
        );
        from = to;
    }
    let t1 = Instant::now();
    sqlx::query(ROLL_UP).execute(pool).await?;
    sqlx::query(ROLL_UP_HOURLY).execute(pool).await?;
    sqlx::query(ROLL_UP_NARROW).execute(pool).await?;
    for q in ROLL_UP_CALENDAR {
        sqlx::query(q).execute(pool).await?;
    }
    for q in apiary_ingest::rollups::colony_rollups_from_hourly() {
        sqlx::query(&q).execute(pool).await?;
    }
    for table in ROLLUP_TABLES {
        sqlx::query(&format!("VACUUM ANALYZE {table}"))
            .execute(pool)
            .await?;
    }
    sqlx::query("ANALYZE events").execute(pool).await?;
    eprintln!("rolled up in {:.0} s", t1.elapsed().as_secs_f64());
    Ok(())
}

/// One timed usage query.
struct Measure {
    group: &'static str,
    gran: &'static str,
    tz: &'static str,
    took: Duration,
}

/// Every tenant-scoped group_by × granularity × zone, 5 tenants each (a different tenant every query).
async fn run_matrix(
    pool: &PgPool,
    tenants: &[Uuid],
    now: chrono::DateTime<Utc>,
) -> anyhow::Result<Vec<Measure>> {
    let groups = [
        "",
        "user",
        "model",
        "colony",
        "session",
        "device",
        "user,model",
    ];
    let grans = ["hour", "day", "month", "total"];
    let zones = ["UTC", "Asia/Kolkata", "America/New_York", "Asia/Kathmandu"];
    let reads = apiary_ingest::query::ReadDb::new(pool.clone(), Default::default());
    let mut out = vec![];
    let mut i = 0usize;
    for group in groups {
        for gran in grans {
            for tz in zones {
                let to =
                    (now.duration_trunc(TimeDelta::minutes(15))? + TimeDelta::days(1)).to_rfc3339();
                let raw = format!(
                    "from=2020-01-01T00:00:00Z&to={}&group_by={group}&granularity={gran}&tz={tz}",
                    to.replace('+', "%2B")
                );
                let params = apiary_ingest::routes::extract::query_params(&raw)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                let q = UsageQuery::from_params(params, now).map_err(|e| anyhow::anyhow!("{e}"))?;
                for _ in 0..5 {
                    let tenant = tenants[i % tenants.len()];
                    i += 1;
                    let t0 = Instant::now();
                    let reader = apiary_ingest::access::TenantRead::tenant_wide(tenant);
                    let within = usage::Within::Tenant(&reader, &usage::Part::Whole);
                    let rows = usage::run(&reads, within, &q)
                        .await
                        .map_err(|e| anyhow::anyhow!("{e}"))?;
                    let took = t0.elapsed();
                    assert!(!rows.is_empty());
                    out.push(Measure {
                        group,
                        gran,
                        tz,
                        took,
                    });
                }
            }
        }
    }
    Ok(out)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let total: i64 = std::env::var("BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let keep = std::env::var("BENCH_KEEP").is_ok_and(|v| v == "1");
    let n_tenants: i64 = std::env::var("BENCH_TENANTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let db = "apiary_bench_rollups";
    let mut admin = sqlx::PgConnection::connect(&url).await?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(db)
            .fetch_one(&mut admin)
            .await?;
    let db_url = format!(
        "{}/{db}",
        url.rsplit_once('/').expect("URL with a database").0
    );
    let start = (Utc::now() - TimeDelta::days(30)).duration_trunc(TimeDelta::days(1))?;
    let reuse = exists && keep;
    if exists && !reuse {
        sqlx::query(&format!("DROP DATABASE {db} WITH (FORCE)"))
            .execute(&mut admin)
            .await?;
    }
    if !reuse {
        sqlx::query(&format!("CREATE DATABASE {db}"))
            .execute(&mut admin)
            .await?;
    }
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect(&db_url)
        .await?;
    apiary_ingest::store::migrate(&pool).await?;
    if !reuse {
        generate(&pool, total, n_tenants, start).await?;
    } else {
        // A reused database may have just gained a rollup table by migration (backfilled, never
        // vacuumed): index-only scans need the visibility map a fresh generation leaves behind.
        for table in ROLLUP_TABLES {
            sqlx::query(&format!("VACUUM ANALYZE {table}"))
                .execute(&pool)
                .await?;
        }
    }
    let events: i64 = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(&pool)
        .await?;
    let rollup_rows: i64 = sqlx::query_scalar("SELECT count(*) FROM usage_rollups")
        .fetch_one(&pool)
        .await?;
    let hourly_rows: i64 = sqlx::query_scalar("SELECT count(*) FROM usage_rollups_hourly")
        .fetch_one(&pool)
        .await?;
    let narrow_rows: i64 = sqlx::query_scalar("SELECT count(*) FROM usage_rollups_narrow")
        .fetch_one(&pool)
        .await?;
    let tenants: Vec<Uuid> = sqlx::query_scalar("SELECT tenant_id FROM tenants ORDER BY tenant_id")
        .fetch_all(&pool)
        .await?;
    let (first, last): (chrono::DateTime<Utc>, chrono::DateTime<Utc>) =
        sqlx::query_as("SELECT min(bucket), max(bucket) FROM usage_rollups")
            .fetch_one(&pool)
            .await?;
    println!("rollup benchmark: {events} events, {} tenants, {rollup_rows} 15-minute rollup rows ({:.1} events per row), {hourly_rows} hourly rows, {narrow_rows} narrow hourly rows, {} .. {}",
        tenants.len(), events as f64 / rollup_rows as f64, first, last);

    // Two passes over the same 560 queries. The first meets whatever the page cache holds: on these VMs
    // the kernel pages out file pages idle for about a minute (DAMON), so a database left alone since
    // generation is read from disk again. It is reported on its own; the figures per cell are the second
    // pass's, with each tenant's rollup pages in memory as on a dashboard in use.
    let now = Utc::now();
    let cold = run_matrix(&pool, &tenants, now).await?;
    let warm = run_matrix(&pool, &tenants, now).await?;
    let mut first: Vec<Duration> = cold.iter().map(|m| m.took).collect();
    first.sort();
    println!(
        "  first pass (cold cache), {} queries: p50 {:?}  p95 {:?}  max {:?}",
        first.len(),
        percentile(&first, 0.5),
        percentile(&first, 0.95),
        first[first.len() - 1]
    );
    let mut all = vec![];
    let mut by_group: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
    let mut by_zone: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
    for m in &warm {
        all.push(m.took);
        by_zone
            .entry(format!("{:>16} {:>5}", m.tz, m.gran))
            .or_default()
            .push(m.took);
        by_group
            .entry(format!(
                "{:>10} {:>5}",
                if m.group.is_empty() {
                    "(none)"
                } else {
                    m.group
                },
                m.gran
            ))
            .or_default()
            .push(m.took);
    }
    all.sort();
    println!("  second pass, {} tenant-scoped queries over the whole 30 days (7 group_by x 4 granularities x 4 zones x 5 tenants):", all.len());
    println!(
        "  ALL: p50 {:?}  p95 {:?}  max {:?}",
        percentile(&all, 0.5),
        percentile(&all, 0.95),
        all[all.len() - 1]
    );
    for (k, mut v) in by_group {
        v.sort();
        println!(
            "  {k}: p50 {:?}  p95 {:?}",
            percentile(&v, 0.5),
            percentile(&v, 0.95)
        );
    }
    println!("  by zone x granularity (all group_bys):");
    for (k, mut v) in by_zone {
        v.sort();
        println!(
            "  {k}: p50 {:?}  p95 {:?}",
            percentile(&v, 0.5),
            percentile(&v, 0.95)
        );
    }
    // The same question answered by scanning raw events (what the rollups save).
    let mut raw = vec![];
    for (n, tenant) in tenants.iter().cycle().take(5).enumerate() {
        let t0 = Instant::now();
        let _: Vec<(Option<chrono::DateTime<Utc>>, String, Option<i64>)> = sqlx::query_as(
            "SELECT date_trunc('day', effective_at, 'Asia/Kolkata'), model, sum((data->>'input_tokens')::int8)::int8
             FROM events WHERE tenant_id = $1 GROUP BY 1, 2")
            .bind(tenant).fetch_all(&pool).await?;
        raw.push(t0.elapsed());
        if n == 0 {
            raw.clear(); // the first one warms the cache
        }
    }
    raw.sort();
    println!("  raw scan of events (tenant, day in Asia/Kolkata x model): p50 {:?}; ratio raw / rollup p50 = {:.0}x",
        percentile(&raw, 0.5), percentile(&raw, 0.5).as_secs_f64() / percentile(&all, 0.5).as_secs_f64());
    dashboard(&pool, &db_url).await?;
    pool.close().await;
    if !keep {
        sqlx::query(&format!("DROP DATABASE {db} WITH (FORCE)"))
            .execute(&mut admin)
            .await?;
    }
    Ok(())
}

/// The overview page's load for the tenant with the most events (see the module notes).
async fn dashboard(pool: &PgPool, db_url: &str) -> anyhow::Result<()> {
    let (tenant, events): (Uuid, i64) = sqlx::query_as(
        "SELECT tenant_id, sum(events)::int8 FROM usage_rollups_hourly GROUP BY 1 ORDER BY 2 DESC LIMIT 1",
    )
    .fetch_one(pool)
    .await?;
    let spec = apiary_ingest::store::admin::TokenSpec {
        tenant: tenant.to_string(),
        scopes: vec![apiary_ingest::auth::Scope::Read],
        user_id: None,
        device_id: None,
    };
    let token = apiary_ingest::store::admin::create_token(pool, &spec)
        .await?
        .1;
    let server_pool = PgPoolOptions::new()
        .max_connections(8)
        .connect(db_url)
        .await?;
    let settings = apiary_ingest::config::IngestSettings {
        listen: "127.0.0.1:0".into(),
        rate_limit_per_sec: 1e9,
        rate_limit_burst: 1e9,
        ..Default::default()
    };
    let app = apiary_ingest::startup::Application::build(settings, server_pool).await?;
    let base = format!("http://127.0.0.1:{}", app.port());
    tokio::spawn(app.run_until_stopped(std::future::pending()));
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let signed = client
        .post(format!("{base}/sign-in"))
        .header("origin", &base)
        .form(&[("token", token.as_str())])
        .send()
        .await?;
    let cookie = signed
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|c| c.split(';').next())
        .ok_or_else(|| anyhow::anyhow!("sign-in set no cookie: {}", signed.status()))?
        .to_string();
    // The page's defaults, as the API's query (local midnights in UTC, 30 days, by day and model).
    let today = Utc::now().date_naive();
    let api = format!(
        "{base}/v1/usage?from={}&to={}&granularity=day&group_by=model",
        today - chrono::Days::new(29),
        today + chrono::Days::new(1)
    );
    let mut page_times = vec![];
    let mut api_times = vec![];
    let mut first = None;
    let mut body = String::new();
    for i in 0..21 {
        let t0 = Instant::now();
        let r = client
            .get(format!("{base}/"))
            .header("cookie", &cookie)
            .send()
            .await?;
        anyhow::ensure!(r.status().is_success(), "GET /: {}", r.status());
        body = r.text().await?;
        let took = t0.elapsed();
        if i == 0 {
            first = Some(took);
        } else {
            page_times.push(took);
        }
        let t0 = Instant::now();
        let r = client.get(&api).bearer_auth(&token).send().await?;
        anyhow::ensure!(r.status().is_success(), "GET /v1/usage: {}", r.status());
        r.bytes().await?;
        api_times.push(t0.elapsed());
    }
    page_times.sort();
    api_times.sort();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, body.as_bytes())?;
    let compressed = gz.finish()?.len();
    println!("  dashboard overview (GET / with its defaults: 30 days by day and model, budgets) for a tenant of {events} events:");
    println!(
        "  first load {:?}; then p50 {:?}  p95 {:?} (20 loads); GET /v1/usage for the same query p50 {:?}  p95 {:?}; ratio page / API p50 {:.2}",
        first.expect("one load"),
        percentile(&page_times, 0.5),
        percentile(&page_times, 0.95),
        percentile(&api_times, 0.5),
        percentile(&api_times, 0.95),
        percentile(&page_times, 0.5).as_secs_f64() / percentile(&api_times, 0.5).as_secs_f64()
    );
    println!(
        "  page weight: {} KiB raw, {} KiB gzip (assets are separate, cached files)",
        body.len() / 1024,
        compressed / 1024
    );
    Ok(())
}
