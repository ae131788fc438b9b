//! Exactness: random batches with duplicates and replays from concurrent clients; afterwards every
//! usage query equals a scan of the raw runtime events (device-level events are stored but are not usage), and the totals equal the generator's own sums over the
//! distinct events. Tool durations (`tool_duration_ms`, `group_by=tool` with its percentiles) equal the
//! raw events' too, and the rollups' active time equals the stored status histories' (the migration's
//! formula, in SQL).

use std::collections::HashMap;

use chrono::{Duration, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

const DIMS: [(&str, &str); 5] = [
    ("user", "user_id"),
    ("model", "model"),
    ("colony", "colony_id"),
    ("session", "session_id"),
    ("device", "device_id"),
];

/// The universe's two catalogued models at their published prices (`shared-schema/prices/catalog.toml`,
/// from the providers' price pages), in nano-USD per token — USD per million tokens × 1000, exact for
/// prices of three decimals: `(input, output, cache read, cache write)`; gpt-5-mini has no cache-write
/// price, so its writes cost input.
const PUBLISHED: &[(&str, [i64; 4])] = &[
    ("claude-haiku-4-5", [1_000, 5_000, 100, 1_250]),
    ("gpt-5-mini", [250, 2_000, 25, 250]),
];

fn random_event(rng: &mut StdRng, base: chrono::DateTime<Utc>) -> Value {
    let at = base + Duration::seconds(rng.gen_range(0..3 * 86_400));
    // Device-level events: stored, but never usage (the raw scan below leaves them out too).
    match rng.gen_range(0..20) {
        0 => return event("agent.heartbeat", None, at, json!({ "backlog_events": 1 })),
        1 => {
            return event(
                "outbox.dropped",
                None,
                at,
                json!({ "reason": "evicted", "count": 2 }),
            )
        }
        _ => {}
    }
    let session = format!("s{}", rng.gen_range(0..12));
    let mut e = match rng.gen_range(0..10) {
        0..=5 => {
            let cost = if rng.gen_bool(0.2) {
                0.0
            } else {
                rng.gen_range(1..100_000) as f64 / 1e7
            };
            let input = rng.gen_range(0..5000);
            let mut e = llm(
                &session,
                at,
                // Two models of the shipped price catalog: their turns are estimated.
                ["m1", "claude-haiku-4-5", "gpt-5-mini"][rng.gen_range(0..3)],
                input,
                rng.gen_range(0..500),
                cost,
            );
            // Inside input, beside the cached half (every usage column must vary).
            e["data"]["cache_creation_tokens"] = json!(rng.gen_range(0..=input / 4));
            e
        }
        6..=8 => {
            let mut e = tool(&session, at, rng.gen_bool(0.3));
            e["data"]["tool_name"] = json!(["read_file", "grep", "bash"][rng.gen_range(0..3)]);
            if rng.gen_bool(0.8) {
                // From 0 ms to minutes, log-uniform-ish, so many histogram slots are used.
                let ms = 10f64.powf(rng.gen_range(0.0..6.0)).floor() as u64 - 1;
                e["data"]["duration_ms"] = json!(ms);
            }
            e
        }
        _ => event(
            "health.signal",
            Some(&session),
            at,
            json!({ "signal": "retry" }),
        ),
    };
    if rng.gen_bool(0.4) {
        e["colony_id"] = json!(format!("c{}", rng.gen_range(0..3)));
        e["agent_role"] = json!("worker");
    }
    e
}

#[sqlx::test(migrations = "../migrations")]
async fn rollups_equal_a_raw_scan_after_concurrent_replays(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let mut rng = StdRng::seed_from_u64(7);
    let base = Utc::now() - Duration::days(3);
    let universe: Vec<Value> = (0..3000).map(|_| random_event(&mut rng, base)).collect();
    let sessions: Vec<Value> = (0..12)
        .map(|i| binding(&format!("s{i}"), &format!("u{}", i % 4)))
        .collect();
    let mut batches = vec![];
    for _ in 0..60 {
        let n = rng.gen_range(50..400);
        let evs: Vec<Value> = (0..n)
            .map(|_| universe[rng.gen_range(0..universe.len())].clone())
            .collect();
        let mut b = batch(evs, sessions.clone());
        if rng.gen_bool(0.2) {
            b["sent_at"] = json!(Utc::now() - Duration::minutes(rng.gen_range(2..90)));
        }
        batches.push(b);
    }
    let mut tasks = vec![];
    for client in 0..6 {
        let mine: Vec<Value> = batches
            .iter()
            .skip(client % 3)
            .step_by(2)
            .cloned()
            .collect();
        let (base_url, token) = (app.base.clone(), t.ingest.clone());
        tasks.push(tokio::spawn(async move {
            let c = reqwest::Client::new();
            for b in mine {
                let r = c
                    .post(format!("{base_url}/v1/batches"))
                    .bearer_auth(&token)
                    .header("content-encoding", "gzip")
                    .body(gzip(&serde_json::to_vec(&b).unwrap()))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), StatusCode::OK);
                let v: Value = r.json().await.unwrap();
                assert_eq!(v["rejected"], json!([]), "nothing here is invalid");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    // Independent expectation: sums over the distinct events that were sent.
    let mut sent: HashMap<String, &Value> = HashMap::new();
    for b in &batches {
        for e in b["events"].as_array().unwrap() {
            sent.insert(
                e["event_id"].as_str().unwrap().to_string(),
                universe
                    .iter()
                    .find(|u| u["event_id"] == e["event_id"])
                    .unwrap(),
            );
        }
    }
    let input: u64 = sent
        .values()
        .filter(|e| e["type"] == "llm.turn")
        .map(|e| e["data"]["input_tokens"].as_u64().unwrap())
        .sum();
    let errors = sent
        .values()
        .filter(|e| e["type"] == "tool.call" && e["data"]["is_error"] == true)
        .count();
    let (_, all) = app
        .get(&t.read, "/v1/usage?from=2020-01-01&to=2060-01-01")
        .await;
    let runtime = sent
        .values()
        .filter(|e| !["agent.heartbeat", "outbox.dropped"].contains(&e["type"].as_str().unwrap()))
        .count();
    assert!(runtime < sent.len(), "the universe has device-level events");
    assert_eq!(all["totals"]["events"].as_u64().unwrap() as usize, runtime);
    assert_eq!(all["totals"]["input_tokens"].as_u64().unwrap(), input);
    assert_eq!(
        all["totals"]["tool_errors"].as_u64().unwrap() as usize,
        errors
    );
    assert_eq!(app.count("events").await as usize, sent.len());
    // The estimates, from the published prices directly (not through the ingest's price lookup):
    // every turn of a catalogued model.
    let estimated: i64 = sent
        .values()
        .filter(|e| e["type"] == "llm.turn")
        .filter_map(|e| {
            let n = |k: &str| e["data"][k].as_i64().unwrap_or(0);
            let model = e["data"]["model"].as_str().unwrap();
            let [input, output, cache_read, cache_write] = PUBLISHED
                .iter()
                .find(|(m, _)| *m == model)
                .map(|(_, p)| *p)?;
            let (cached, written) = (n("cached_tokens"), n("cache_creation_tokens"));
            Some(
                (n("input_tokens") - cached - written) * input
                    + n("output_tokens") * output
                    + cached * cache_read
                    + written * cache_write,
            )
        })
        .sum();
    assert!(estimated > 0);
    assert_eq!(
        all["totals"]["cost_estimated_nanos"].as_i64().unwrap(),
        estimated
    );
    assert_eq!(all["totals"]["cost_basis"], "mixed", "{}", all["totals"]);
    let sums = |table: &str| {
        format!("SELECT sum(events)::int8, sum(input_tokens)::int8, sum(cost_nanos)::int8,
            sum(cost_reported_nanos)::int8, sum(cost_estimated_nanos)::int8, sum(estimated_turns)::int8,
            sum(unpriced_turns)::int8, count(DISTINCT bucket) FROM {table}")
    };
    type Sums = (i64, i64, i64, i64, i64, i64, i64, i64);
    let quarter: Sums = sqlx::query_as(&sums("usage_rollups"))
        .fetch_one(&app.pool)
        .await
        .unwrap();
    let hourly: Sums = sqlx::query_as(&sums("usage_rollups_hourly"))
        .fetch_one(&app.pool)
        .await
        .unwrap();
    assert_eq!(
        (quarter.0, quarter.1, quarter.2, quarter.3, quarter.4, quarter.5, quarter.6),
        (hourly.0, hourly.1, hourly.2, hourly.3, hourly.4, hourly.5, hourly.6)
    );
    assert!(
        quarter.5 > 0 && quarter.6 > 0,
        "some turns estimated, some unpriced"
    );
    assert!(hourly.7 < quarter.7, "hourly rows are coarser");
    assert_rollups_agree(&app.pool).await;
    let durations: i64 = sent
        .values()
        .filter(|e| e["type"] == "tool.call")
        .filter_map(|e| e["data"]["duration_ms"].as_i64())
        .sum();
    assert!(durations > 0);
    assert_eq!(
        all["totals"]["tool_duration_ms"].as_i64().unwrap(),
        durations
    );
    assert_active_time_follows_the_histories(&app).await;
    // Kolkata's days and months cut UTC's on the half hour; New York's start at 04:00 or 05:00 UTC, so
    // a tenant's tool months are moved whole and their short sides read by the hour.
    for (tz, groups) in [
        (
            "Asia/Kolkata",
            &["tool", "tool,session", "tool,user,colony"][..],
        ),
        ("America/New_York", &["tool"][..]),
    ] {
        for gran in ["hour", "day", "month", "total"] {
            for group in groups {
                let range = "from=2020-01-01&to=2060-01-01";
                assert_tool_rows_exact(&app, &t, range, group, gran, tz).await;
            }
        }
    }

    for tz in ["UTC", "Asia/Kolkata", "America/New_York", "Asia/Kathmandu"] {
        for gran in ["hour", "day", "month", "total"] {
            for mask in [0usize, 1, 2, 4, 8, 16, 3, 31] {
                let dims: Vec<(&str, &str)> = DIMS
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .map(|(_, d)| *d)
                    .collect();
                let group = dims.iter().map(|d| d.0).collect::<Vec<_>>().join(",");
                let (s, api) = app.get(&t.read, &format!("/v1/usage?from=2020-01-01&to=2060-01-01&group_by={group}&granularity={gran}&tz={tz}")).await;
                assert_eq!(s, StatusCode::OK, "{api}");
                let raw = raw_scan(&app, t.id, &dims, gran, tz).await;
                let api_rows: Vec<Value> = api["rows"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|r| !active_only(r))
                    .map(|r| project(r, &dims, gran))
                    .collect();
                assert_eq!(api_rows, raw, "tz={tz} granularity={gran} group_by={group}");
            }
        }
    }
    assert_rollups_agree(&app.pool).await;
}

/// A row holding active time only (a bucket or model the session was active in without events).
fn active_only(r: &Value) -> bool {
    assert!(r["active_seconds"].as_f64().unwrap() >= 0.0, "{r}");
    r["events"] == 0
}

/// The active time of every session and quarter hour in the rollups equals the one computed from the
/// stored status histories (each stretch to `active`, the last one to `stall_due_at`, split in whole
/// milliseconds since its start), and the hourly rollup holds the same.
async fn assert_active_time_follows_the_histories(app: &TestApp) {
    let from_histories: Vec<(String, chrono::DateTime<Utc>, i64)> = sqlx::query_as(
        "WITH t AS (
             SELECT tenant_id, session_id, seq, at, to_status,
                 lead(at) OVER (PARTITION BY tenant_id, session_id ORDER BY seq) AS next_at
             FROM status_transitions),
         st AS (
             SELECT t.session_id, t.at AS s, COALESCE(t.next_at, ss.stall_due_at) AS e
             FROM t JOIN sessions ss ON ss.tenant_id = t.tenant_id AND ss.session_id = t.session_id
             WHERE t.to_status = 'active' AND COALESCE(t.next_at, ss.stall_due_at) > t.at)
         SELECT session_id, b, sum(
             floor(extract(epoch FROM LEAST(st.e, b + interval '15 minutes') - st.s) * 1000)::int8
             - floor(extract(epoch FROM GREATEST(st.s, b) - st.s) * 1000)::int8)::int8 AS ms
         FROM st, generate_series(date_bin('15 minutes', st.s, '2000-01-01 00:00:00+00'),
             st.e - interval '1 microsecond', interval '15 minutes') AS b
         GROUP BY 1, 2 HAVING sum(
             floor(extract(epoch FROM LEAST(st.e, b + interval '15 minutes') - st.s) * 1000)::int8
             - floor(extract(epoch FROM GREATEST(st.s, b) - st.s) * 1000)::int8) <> 0
         ORDER BY 1, 2",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    let in_rollups: Vec<(String, chrono::DateTime<Utc>, i64)> = sqlx::query_as(
        "SELECT session_id, bucket, sum(active_ms)::int8 FROM usage_rollups
         GROUP BY 1, 2 HAVING sum(active_ms) <> 0 ORDER BY 1, 2",
    )
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert!(from_histories.len() > 10, "the sessions were active");
    assert_eq!(in_rollups, from_histories);
    let negative: i64 =
        sqlx::query_scalar("SELECT count(*) FROM usage_rollups WHERE active_ms < 0")
            .fetch_one(&app.pool)
            .await
            .unwrap();
    assert_eq!(negative, 0);
    let totals: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT sum(active_ms)::int8 FROM usage_rollups), (SELECT sum(active_ms)::int8 FROM usage_rollups_hourly)",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert_eq!(totals.0, totals.1);
}

/// The rollup tables agree row by row: every hourly row is the sum of its quarter rows, every narrow
/// row (`usage_rollups_narrow`) the sum of its hourly rows, every daily row the sum of its narrow rows
/// and every monthly row the sum of its daily rows (no row missing, none extra).
pub(crate) async fn assert_rollups_agree(pool: &sqlx::PgPool) {
    const SUMS: &str = "sum(input_tokens)::int8, sum(output_tokens)::int8, sum(cached_tokens)::int8,
        sum(cache_creation_tokens)::int8, sum(cost_nanos)::int8, sum(llm_calls)::int8, sum(unpriced_turns)::int8,
        sum(tool_calls)::int8, sum(tool_errors)::int8, sum(events)::int8, sum(tool_duration_ms)::int8,
        sum(active_ms)::int8, sum(cost_reported_nanos)::int8, sum(cost_estimated_nanos)::int8,
        sum(estimated_turns)::int8";
    let hour = "date_bin('1 hour', bucket, '2000-01-01 00:00:00+00')";
    let pairs = [
        (
            format!("SELECT tenant_id, {hour}, user_id, device_id, colony_id, session_id, model, runtime, {SUMS}
                FROM usage_rollups GROUP BY 1, 2, 3, 4, 5, 6, 7, 8"),
            format!("SELECT tenant_id, bucket, user_id, device_id, colony_id, session_id, model, runtime, {SUMS}
                FROM usage_rollups_hourly GROUP BY 1, 2, 3, 4, 5, 6, 7, 8"),
        ),
        (
            format!("SELECT tenant_id, bucket, user_id, device_id, model, runtime, {SUMS}
                FROM usage_rollups_hourly GROUP BY 1, 2, 3, 4, 5, 6"),
            format!("SELECT tenant_id, bucket, user_id, device_id, model, runtime, {SUMS}
                FROM usage_rollups_narrow GROUP BY 1, 2, 3, 4, 5, 6"),
        ),
        (
            format!("SELECT tenant_id, date_bin('1 day', bucket, '2000-01-01 00:00:00+00'), user_id,
                device_id, model, runtime, {SUMS} FROM usage_rollups_narrow GROUP BY 1, 2, 3, 4, 5, 6"),
            format!("SELECT tenant_id, bucket, user_id, device_id, model, runtime, {SUMS}
                FROM usage_rollups_daily GROUP BY 1, 2, 3, 4, 5, 6"),
        ),
        (
            format!("SELECT tenant_id, date_trunc('month', bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', user_id,
                device_id, model, runtime, {SUMS} FROM usage_rollups_daily GROUP BY 1, 2, 3, 4, 5, 6"),
            format!("SELECT tenant_id, bucket, user_id, device_id, model, runtime, {SUMS}
                FROM usage_rollups_monthly GROUP BY 1, 2, 3, 4, 5, 6"),
        ),
    ];
    // Histograms compared slot by slot: a row holds its slots up to its last non-zero one.
    let slots: Vec<String> = (1..=apiary_ingest::tool_rollups::SLOTS)
        .map(|i| format!("COALESCE(sum(duration_hist[{i}]), 0)::int8"))
        .collect();
    let tool_sums = format!(
        "sum(calls)::int8, sum(errors)::int8, sum(timed_calls)::int8, sum(duration_ms)::int8, {}",
        slots.join(", ")
    );
    let day = "date_bin('1 day', bucket, '2000-01-01 00:00:00+00')";
    let month = "date_trunc('month', bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'";
    let tool_pairs = [
        (hour, "tool_rollups", "tool_rollups_hourly"),
        (day, "tool_rollups_hourly", "tool_rollups_daily"),
        (month, "tool_rollups_daily", "tool_rollups_monthly"),
    ]
    .map(|(unit, finer, coarser)| {
        (
            format!(
                "SELECT tenant_id, {unit}, user_id, runtime, tool_name, {tool_sums} FROM {finer}
                GROUP BY 1, 2, 3, 4, 5"
            ),
            format!(
                "SELECT tenant_id, bucket, user_id, runtime, tool_name, {tool_sums} FROM {coarser}
                GROUP BY 1, 2, 3, 4, 5"
            ),
        )
    });
    // The tenant's tool rows: the per-user rows of the same grain summed over users.
    let tenant_pairs = ["hourly", "daily", "monthly"].map(|grain| {
        (
            format!(
                "SELECT tenant_id, bucket, runtime, tool_name, {tool_sums} FROM tool_rollups_{grain}
                GROUP BY 1, 2, 3, 4"
            ),
            format!(
                "SELECT tenant_id, bucket, runtime, tool_name, {tool_sums} FROM tool_rollups_tenant_{grain}
                GROUP BY 1, 2, 3, 4"
            ),
        )
    });
    // The colony rows: the hourly rows per UTC day and colony, the session kept where it is a forked
    // run (as `colony_runs` says now), then per month; rows whose sums are all zero (usage moved away
    // when a run became forked) left out on both sides.
    let nonzero = format!(
        "HAVING NOT ({})",
        apiary_ingest::rollups::SUM_COLUMNS
            .map(|c| format!("sum({c}) = 0"))
            .join(" AND ")
    );
    let colony_keys = "colony_id, fork_session_id, model, runtime";
    let colony_pairs = [
        (
            format!(
                "SELECT h.tenant_id, date_bin('1 day', h.bucket, '2000-01-01 00:00:00+00'), h.colony_id,
                CASE WHEN f.session_id IS NULL THEN '' ELSE h.session_id END, h.model, h.runtime,
                {SUMS} FROM usage_rollups_hourly h LEFT JOIN colony_runs f ON f.tenant_id = h.tenant_id
                AND f.session_id = h.session_id AND f.parent_session_id IS NOT NULL
                GROUP BY 1, 2, 3, 4, 5, 6 {nonzero}"
            )
            .replace("sum(", "sum(h."),
            format!(
                "SELECT tenant_id, bucket, {colony_keys}, {SUMS} FROM usage_rollups_colony_daily
                GROUP BY 1, 2, 3, 4, 5, 6 {nonzero}"
            ),
        ),
        (
            format!(
                "SELECT tenant_id, {month}, {colony_keys}, {SUMS} FROM usage_rollups_colony_daily
                GROUP BY 1, 2, 3, 4, 5, 6 {nonzero}"
            ),
            format!(
                "SELECT tenant_id, bucket, {colony_keys}, {SUMS} FROM usage_rollups_colony_monthly
                GROUP BY 1, 2, 3, 4, 5, 6 {nonzero}"
            ),
        ),
    ];
    for (finer, coarser) in pairs
        .into_iter()
        .chain(tool_pairs)
        .chain(tenant_pairs)
        .chain(colony_pairs)
    {
        let differ: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM (({finer} EXCEPT {coarser}) UNION ALL ({coarser} EXCEPT {finer})) d"
        ))
        .fetch_one(pool)
        .await
        .unwrap();
        assert_eq!(differ, 0, "{coarser}\ndiffers from the sums of\n{finer}");
    }
    let rows: (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM usage_rollups_hourly), (SELECT count(*) FROM usage_rollups_narrow),
            (SELECT count(*) FROM usage_rollups_daily), (SELECT count(*) FROM usage_rollups_monthly)",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(
        rows.3 > 0 && rows.3 <= rows.2 && rows.2 <= rows.1 && rows.1 <= rows.0,
        "{rows:?}"
    );
}

/// `/v1/usage` grouped by `group` (tool and others) over `range` equals the raw scan of the tool calls.
async fn assert_tool_rows_exact(
    app: &TestApp,
    t: &Tenant,
    range: &str,
    group: &str,
    gran: &str,
    tz: &str,
) {
    let path = format!("/v1/usage?{range}&group_by={group}&granularity={gran}&tz={tz}");
    let (s, api) = app.get(&t.read, &path).await;
    assert_eq!(s, StatusCode::OK, "{api}");
    let raw = raw_tool_scan(app, t.id, group, gran, tz).await;
    assert_eq!(tool_rows(&api, group, gran), raw, "{path}");
}

/// The tool rows of an answer: bucket, keys, calls, errors, durations, timed calls, p50, p95.
fn tool_rows(api: &Value, group: &str, gran: &str) -> Vec<Value> {
    api["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let mut m = serde_json::Map::new();
            if gran != "total" {
                let b =
                    chrono::DateTime::parse_from_rfc3339(r["bucket"].as_str().unwrap()).unwrap();
                m.insert("bucket".into(), json!(b.timestamp()));
            }
            for d in group.split(',') {
                let col = tool_col(d);
                m.insert(col.into(), json!(r[col].as_str().unwrap_or("")));
            }
            for k in [
                "tool_calls",
                "tool_errors",
                "tool_duration_ms",
                "tool_calls_timed",
                "tool_duration_p50_ms",
                "tool_duration_p95_ms",
            ] {
                m.insert(k.into(), r[k].clone());
            }
            Value::Object(m)
        })
        .collect()
}

fn tool_col(d: &str) -> &'static str {
    match d {
        "tool" => "tool_name",
        "session" => "session_id",
        "user" => "user_id",
        "colony" => "colony_id",
        other => panic!("{other}"),
    }
}

/// The same from the raw events: the completed calls per group, their durations' histogram by the
/// rollups' slots, and the percentiles of that histogram.
async fn raw_tool_scan(
    app: &TestApp,
    tenant: uuid::Uuid,
    group: &str,
    gran: &str,
    tz: &str,
) -> Vec<Value> {
    use apiary_ingest::tool_rollups::{percentile, slot, SLOTS};
    use sqlx::Row;
    let bucket = if gran == "total" {
        "0::int8".to_string()
    } else {
        format!("extract(epoch FROM date_trunc('{gran}', effective_at, '{tz}'))::int8")
    };
    let cols: Vec<String> = group
        .split(',')
        .map(|d| match d {
            "tool" => "COALESCE(data->>'tool_name', '')".to_string(),
            d => tool_col(d).to_string(),
        })
        .collect();
    let sql = format!(
        "SELECT {bucket}, {}, (data->>'is_error')::bool, (data->>'duration_ms')::int8 FROM events
         WHERE tenant_id = $1 AND kind = 'tool.call' AND data->>'status' = 'completed'",
        cols.join(", ")
    );
    let rows = sqlx::query(&sql)
        .bind(tenant)
        .fetch_all(&app.pool)
        .await
        .unwrap();
    let n = cols.len();
    // (bucket, keys) → (calls, errors, duration, timed, histogram)
    type Sums = (i64, i64, i64, i64, Vec<i128>);
    let mut groups: std::collections::BTreeMap<(i64, Vec<String>), Sums> = Default::default();
    for r in &rows {
        let keys: Vec<String> = (0..n).map(|i| r.get::<String, _>(i + 1)).collect();
        let g = groups
            .entry((r.get::<i64, _>(0), keys))
            .or_insert_with(|| (0, 0, 0, 0, vec![0; SLOTS]));
        g.0 += 1;
        g.1 += i64::from(r.get::<Option<bool>, _>(n + 1) == Some(true));
        if let Some(ms) = r.get::<Option<i64>, _>(n + 2) {
            g.2 += ms;
            g.3 += 1;
            g.4[slot(ms)] += 1;
        }
    }
    groups
        .into_iter()
        .map(|((b, keys), (calls, errors, ms, timed, hist))| {
            let mut m = serde_json::Map::new();
            if gran != "total" {
                m.insert("bucket".into(), json!(b));
            }
            for (d, k) in group.split(',').zip(keys) {
                m.insert(tool_col(d).into(), json!(k));
            }
            m.insert("tool_calls".into(), json!(calls));
            m.insert("tool_errors".into(), json!(errors));
            m.insert("tool_duration_ms".into(), json!(ms));
            m.insert("tool_calls_timed".into(), json!(timed));
            m.insert("tool_duration_p50_ms".into(), json!(percentile(&hist, 0.5)));
            m.insert(
                "tool_duration_p95_ms".into(),
                json!(percentile(&hist, 0.95)),
            );
            Value::Object(m)
        })
        .collect()
}

#[sqlx::test(migrations = "../migrations")]
async fn rollups_equal_a_raw_scan_across_dst_changes_in_odd_zones(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let mut rng = StdRng::seed_from_u64(11);
    // 2026-10-31 .. 2026-11-03: New York and Havana fall back on Nov 1 (Havana's midnight repeats).
    let base = chrono::DateTime::parse_from_rfc3339("2026-10-31T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc);
    let mut events: Vec<Value> = (0..1500).map(|_| random_event(&mut rng, base)).collect();
    // A tool used only in the first hours of UTC November, which are New York's October: the UTC month
    // is moved into New York's November and those hours taken back out, netting to nothing there.
    let mut rare = tool("s0", base + Duration::hours(26), false);
    rare["data"]["tool_name"] = json!("rare");
    rare["data"]["duration_ms"] = json!(40);
    events.push(rare);
    let sessions: Vec<Value> = (0..12)
        .map(|i| binding(&format!("s{i}"), &format!("u{}", i % 4)))
        .collect();
    // From two devices, one after the other: every user's usage lands on both.
    for (i, chunk) in events.chunks(500).enumerate() {
        let mut b = batch_sent_at(chunk.to_vec(), sessions.clone(), Utc::now());
        b["agent"]["device_id"] = json!(format!("laptop-{}", i % 2));
        let (s, v) = app.post_batch(&t.ingest, &b).await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["rejected"].as_array().map(Vec::len), Some(0), "{v}");
    }
    // UTC too: its months and days are whole, so they come from the monthly and daily rollups.
    for tz in [
        "UTC",
        "America/New_York",
        "America/Havana",
        "Asia/Kathmandu",
        "Pacific/Chatham",
    ] {
        for gran in ["hour", "day", "month"] {
            // Nothing; user; model and colony; device; user and device.
            for mask in [0usize, 1, 6, 16, 17] {
                let dims: Vec<(&str, &str)> = DIMS
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << i) != 0)
                    .map(|(_, d)| *d)
                    .collect();
                let group = dims.iter().map(|d| d.0).collect::<Vec<_>>().join(",");
                let (s, api) = app.get(&t.read, &format!("/v1/usage?from=2026-10-01T00:00:00Z&to=2026-12-01T00:00:00Z&group_by={group}&granularity={gran}&tz={tz}")).await;
                assert_eq!(s, StatusCode::OK, "{api}");
                let raw = raw_scan(&app, t.id, &dims, gran, tz).await;
                let api_rows: Vec<Value> = api["rows"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|r| !active_only(r))
                    .map(|r| project(r, &dims, gran))
                    .collect();
                assert_eq!(api_rows, raw, "tz={tz} granularity={gran} group_by={group}");
            }
        }
        // Per tool too: whole months and days from the narrow tool rollups, New York's November moved.
        for gran in ["hour", "day", "month", "total"] {
            for group in ["tool", "tool,user"] {
                let range = "from=2026-10-01T00:00:00Z&to=2026-12-01T00:00:00Z";
                assert_tool_rows_exact(&app, &t, range, group, gran, tz).await;
            }
        }
    }
    assert_rollups_agree(&app.pool).await;
}

fn project(r: &Value, dims: &[(&str, &str)], gran: &str) -> Value {
    let mut m = serde_json::Map::new();
    if gran != "total" {
        let b = chrono::DateTime::parse_from_rfc3339(r["bucket"].as_str().unwrap()).unwrap();
        m.insert("bucket".into(), json!(b.timestamp()));
    }
    for (_, col) in dims {
        m.insert((*col).into(), json!(r[*col].as_str().unwrap_or("")));
    }
    for k in [
        "input_tokens",
        "output_tokens",
        "cached_tokens",
        "cache_creation_tokens",
        "cost_nanos",
        "cost_reported_nanos",
        "cost_estimated_nanos",
        "llm_calls",
        "estimated_turns",
        "unpriced_turns",
        "tool_calls",
        "tool_errors",
        "tool_duration_ms",
        "events",
        "cost_basis",
    ] {
        m.insert(k.into(), r[k].clone());
    }
    Value::Object(m)
}

async fn raw_scan(
    app: &TestApp,
    tenant: uuid::Uuid,
    dims: &[(&str, &str)],
    gran: &str,
    tz: &str,
) -> Vec<Value> {
    let bucket = if gran == "total" {
        "0::int8".to_string()
    } else {
        format!("extract(epoch FROM date_trunc('{gran}', effective_at, '{tz}'))::int8")
    };
    let cols: String = dims.iter().map(|(_, c)| format!(", {c}")).collect();
    let group: String = (0..dims.len()).map(|i| format!(", {}", i + 2)).collect();
    let llm = "kind = 'llm.turn'";
    // A turn's reported cost as sent, and whether it has one (the helpers send `cost_source`).
    let reported = "round((data->>'cost_usd')::numeric * 1000000000)";
    let unreported = "kind = 'llm.turn' AND data->>'cost_source' = 'unreported'";
    let sql = format!(
        "SELECT {bucket}{cols},
            COALESCE(sum((data->>'input_tokens')::int8) FILTER (WHERE {llm}), 0)::int8,
            COALESCE(sum((data->>'output_tokens')::int8) FILTER (WHERE {llm}), 0)::int8,
            COALESCE(sum((data->>'cached_tokens')::int8) FILTER (WHERE {llm}), 0)::int8,
            COALESCE(sum((data->>'cache_creation_tokens')::int8) FILTER (WHERE {llm}), 0)::int8,
            COALESCE(sum(CASE WHEN {unreported} AND cost_estimated_nanos IS NOT NULL
                THEN cost_estimated_nanos ELSE {reported} END) FILTER (WHERE {llm}), 0)::int8,
            COALESCE(sum({reported}) FILTER (WHERE {llm}), 0)::int8,
            COALESCE(sum(cost_estimated_nanos) FILTER (WHERE {llm}), 0)::int8,
            count(*) FILTER (WHERE {llm}),
            count(*) FILTER (WHERE {unreported} AND cost_estimated_nanos IS NOT NULL),
            count(*) FILTER (WHERE {unreported} AND cost_estimated_nanos IS NULL),
            count(*) FILTER (WHERE kind = 'tool.call' AND data->>'status' = 'completed'),
            count(*) FILTER (WHERE kind = 'tool.call' AND data->>'status' = 'completed' AND (data->>'is_error')::bool),
            COALESCE(sum((data->>'duration_ms')::int8) FILTER (WHERE kind = 'tool.call' AND data->>'status' = 'completed'), 0)::int8,
            count(*)
         FROM events WHERE tenant_id = $1 AND kind NOT IN ('agent.heartbeat', 'outbox.dropped')
         GROUP BY 1{group} ORDER BY 1{group}"
    );
    let rows = sqlx::query(&sql)
        .bind(tenant)
        .fetch_all(&app.pool)
        .await
        .unwrap();
    use sqlx::Row;
    rows.iter()
        .map(|r| {
            let mut m = serde_json::Map::new();
            if gran != "total" {
                m.insert("bucket".into(), json!(r.get::<i64, _>(0)));
            }
            for (i, (_, col)) in dims.iter().enumerate() {
                m.insert((*col).into(), json!(r.get::<String, _>(i + 1)));
            }
            let n = dims.len() + 1;
            for (i, k) in [
                "input_tokens",
                "output_tokens",
                "cached_tokens",
                "cache_creation_tokens",
                "cost_nanos",
                "cost_reported_nanos",
                "cost_estimated_nanos",
                "llm_calls",
                "estimated_turns",
                "unpriced_turns",
                "tool_calls",
                "tool_errors",
                "tool_duration_ms",
                "events",
            ]
            .iter()
            .enumerate()
            {
                m.insert((*k).into(), json!(r.get::<i64, _>(n + i)));
            }
            // Where the cost comes from, by the turns' counts.
            let count = |k: &str| m[k].as_i64().unwrap();
            let estimated = count("estimated_turns") > 0;
            let reported =
                count("llm_calls") - count("estimated_turns") - count("unpriced_turns") > 0;
            let basis = match (reported, estimated) {
                (true, false) => "reported",
                (false, true) => "estimated",
                (true, true) => "mixed",
                (false, false) => "none",
            };
            m.insert("cost_basis".into(), json!(basis));
            Value::Object(m)
        })
        .collect()
}

/// Group commit under a fleet: many devices (device-bound tokens, three tenants) post small batches at
/// once, every batch twice (concurrent replays) and some overlapping an earlier one; one batch trespasses
/// into another device's session (those events alone are rejected), one is refused whole (422) and one
/// carries an invalid event. Every answer is exact for its own request (accepted + duplicates + rejected
/// = its events; the replays of a batch together accept it exactly once), the usage equals a raw
/// scan of the stored events, and every device and live-stream row is under its own tenant (the
/// statements a group's tenants share, `store::batch`).
#[sqlx::test(migrations = "../migrations")]
async fn group_commit_answers_each_of_many_small_concurrent_batches_exactly(pool: sqlx::PgPool) {
    use apiary_ingest::auth::Scope;
    use apiary_ingest::store::admin::{create_tenant, create_token, TokenSpec};
    // About 300 batches go at once: past `max_batches_in_flight` (256) a slow machine would answer some
    // 429 `overloaded` (tested on its own in `cadence`); here every batch is to be answered on its merits.
    let app = spawn_app_with(
        pool.clone(),
        apiary_ingest::config::IngestSettings {
            max_batches_in_flight: 10_000,
            min_batches_in_flight: 10_000,
            ..test_settings()
        },
    )
    .await;
    let mut rng = StdRng::seed_from_u64(21);
    let now = Utc::now();
    // (tenant, device, token)
    let mut devices = vec![];
    for t in 0..3 {
        let tenant = create_tenant(&pool, &format!("fleet{t}")).await.unwrap();
        for d in 0..8 {
            let name = format!("dev{t}_{d}");
            let spec = TokenSpec {
                tenant: tenant.to_string(),
                scopes: vec![Scope::Ingest],
                user_id: None,
                device_id: Some(name.clone()),
            };
            let token = create_token(&pool, &spec).await.unwrap().1;
            devices.push((tenant, name, token));
        }
    }
    let small_batch = |rng: &mut StdRng, device: &str, events: Vec<Value>| {
        let sessions = (0..2)
            .map(|s| binding(&format!("{device}_s{s}"), &format!("u_{device}")))
            .collect();
        let mut b = batch(events, sessions);
        b["agent"]["device_id"] = json!(device);
        if rng.gen_bool(0.1) {
            b["events"].as_array_mut().unwrap().push(event(
                "agent.heartbeat",
                None,
                now,
                json!({ "backlog_events": 3 }),
            ));
        }
        b
    };
    let usage = |rng: &mut StdRng, device: &str| {
        let s = format!("{device}_s{}", rng.gen_range(0..2));
        let at = now - Duration::seconds(rng.gen_range(0..3600));
        llm(
            &s,
            at,
            "m1",
            rng.gen_range(1..5000),
            rng.gen_range(1..500),
            0.001,
        )
    };
    // Device 0 of tenant 0 owns its sessions before the storm (so the trespass below is deterministic).
    let (owner_tenant, owner, owner_token) = devices[0].clone();
    let one = vec![usage(&mut rng, &owner)];
    let first = small_batch(&mut rng, &owner, one);
    assert_eq!(app.post_batch(&owner_token, &first).await.0, StatusCode::OK);

    // (token, batch, expected status)
    let mut requests: Vec<(String, Value, StatusCode)> = vec![];
    for (i, (tenant, device, token)) in devices.iter().enumerate() {
        let mut previous: Vec<Value> = vec![];
        for _ in 0..6 {
            let mut events: Vec<Value> = (0..rng.gen_range(3..15))
                .map(|_| usage(&mut rng, device))
                .collect();
            // Some batches overlap the device's previous one (an agent re-sending after a timeout).
            if rng.gen_bool(0.3) {
                events.extend(previous.iter().take(3).cloned());
            }
            previous = events.clone();
            let b = small_batch(&mut rng, device, events);
            requests.push((token.clone(), b.clone(), StatusCode::OK));
            requests.push((token.clone(), b, StatusCode::OK));
        }
        if i == 1 && *tenant == owner_tenant {
            // Into device 0's session: those events are rejected, the rest accepted.
            let mut events = vec![usage(&mut rng, device), usage(&mut rng, device)];
            let mut trespass = usage(&mut rng, &owner);
            trespass["session_id"] = json!(format!("{owner}_s0"));
            events.push(trespass);
            requests.push((
                token.clone(),
                small_batch(&mut rng, device, events),
                StatusCode::OK,
            ));
        }
        if i == 2 {
            // Refused whole: a binding whose user id is an e-mail address.
            let one = vec![usage(&mut rng, device)];
            let mut b = small_batch(&mut rng, device, one);
            b["sessions"][0]["user_id"] = json!("someone@example.com");
            requests.push((token.clone(), b, StatusCode::UNPROCESSABLE_ENTITY));
        }
        if i == 3 {
            // One invalid event (negative tokens) among good ones.
            let mut bad = usage(&mut rng, device);
            bad["data"]["input_tokens"] = json!(-5);
            let events = vec![usage(&mut rng, device), bad, usage(&mut rng, device)];
            requests.push((
                token.clone(),
                small_batch(&mut rng, device, events),
                StatusCode::OK,
            ));
        }
    }
    // Fire everything at once, in a shuffled order.
    for i in (1..requests.len()).rev() {
        requests.swap(i, rng.gen_range(0..=i));
    }
    let posts = requests
        .iter()
        .map(|(token, b, _)| app.post_batch(token, b));
    let answers = futures::future::join_all(posts).await;

    let mut accepted_total = 0u64;
    let mut rejected_reasons = vec![];
    for ((_, b, want), (status, v)) in requests.iter().zip(&answers) {
        assert_eq!(status, want, "{v}");
        if *want != StatusCode::OK {
            continue;
        }
        let n = b["events"].as_array().unwrap().len() as u64;
        let (acc, dup) = (
            v["accepted"].as_u64().unwrap(),
            v["duplicates"].as_u64().unwrap(),
        );
        let rejected = v["rejected"].as_array().unwrap();
        assert_eq!(acc + dup + rejected.len() as u64, n, "{v}");
        rejected_reasons.extend(
            rejected
                .iter()
                .map(|r| r["reason"].as_str().unwrap().to_string()),
        );
        accepted_total += acc;
    }
    assert_eq!(rejected_reasons.len(), 2, "{rejected_reasons:?}");
    assert!(
        rejected_reasons
            .iter()
            .any(|r| r.contains("another device")),
        "{rejected_reasons:?}"
    );
    // A batch and its replay together accepted each of their new events once: the stored events are
    // exactly the accepted ones (plus the first batch's one).
    let stored = app.count("events").await as u64;
    assert_eq!(stored, accepted_total + 1);
    assert_rollups_agree(&pool).await;
    for (tenant, _, _) in devices.iter().step_by(8) {
        let rows: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT session_id, sum(events)::int8, sum(input_tokens)::int8 FROM usage_rollups
             WHERE tenant_id = $1 GROUP BY 1 ORDER BY 1",
        )
        .bind(tenant)
        .fetch_all(&pool)
        .await
        .unwrap();
        let raw: Vec<(String, i64, i64)> = sqlx::query_as(
            "SELECT session_id, count(*)::int8, sum((data->>'input_tokens')::int8)::int8 FROM events
             WHERE tenant_id = $1 AND kind NOT IN ('agent.heartbeat', 'outbox.dropped')
             GROUP BY 1 ORDER BY 1",
        )
        .bind(tenant)
        .fetch_all(&pool)
        .await
        .unwrap();
        assert!(!raw.is_empty());
        assert_eq!(rows, raw);
    }
    // The group's statements shared by its tenants put every row under its own tenant: each device row,
    // and each stream row of a session or device, names a device or session of that tenant.
    let mut want: Vec<(uuid::Uuid, String)> =
        devices.iter().map(|(t, d, _)| (*t, d.clone())).collect();
    want.sort();
    let got: Vec<(uuid::Uuid, String)> =
        sqlx::query_as("SELECT tenant_id, device_id FROM devices ORDER BY 1, 2")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(got, want);
    let astray: Vec<(uuid::Uuid, String)> = sqlx::query_as(
        "SELECT x.tenant_id, x.session_id FROM stream_sessions x
         LEFT JOIN sessions s ON s.tenant_id = x.tenant_id AND s.session_id = x.session_id
         WHERE s.session_id IS NULL
         UNION ALL
         SELECT e.tenant_id, e.data->>'session_id' FROM stream_events e
         LEFT JOIN sessions s ON s.tenant_id = e.tenant_id AND s.session_id = e.data->>'session_id'
         WHERE e.kind IN ('usage', 'status') AND s.session_id IS NULL
         UNION ALL
         SELECT e.tenant_id, e.data->>'device_id' FROM stream_events e
         LEFT JOIN devices d ON d.tenant_id = e.tenant_id AND d.device_id = e.data->>'device_id'
         WHERE e.kind = 'device' AND d.device_id IS NULL",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(astray, vec![], "stream rows under another tenant");
    let streamed: i64 = sqlx::query_scalar(
        "SELECT count(DISTINCT (tenant_id, data->>'session_id')) FROM stream_events WHERE kind = 'usage'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(streamed > 0, "no usage streamed");
}
