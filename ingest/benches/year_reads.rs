//! Reads over a year of history: a seeded synthetic fleet loaded with `COPY`, then every read the API and
//! the dashboard answer, timed warm and (with `--restart`) cold after a PostgreSQL restart.
//!
//! Run (a private cluster, so that it can be restarted for the cold figures):
//!
//! ```sh not-run: takes minutes and a cluster of its own
//! APIARY_PG_DIR=/tmp/apiary-year APIARY_PG_FORCE_PRIVATE=1 eval "$(scripts/pg.sh start)"
//! cargo bench -p apiary-ingest --bench year_reads -- --scale 0.1 \
//!     --restart "runuser -u postgres -- pg_ctl -D /tmp/apiary-year/data -l /tmp/apiary-year/log -w restart"
//! ```
//!
//! Options: `--scale X` (default 0.1; 1.0 is the full year below), `--seed N` (default 42), `--reload`
//! (generate again even when the database `apiary_bench_year` of the same scale and seed exists; it is
//! kept between runs), `--repeat N` (timed requests per read, warm; default 9), `--restart CMD` (a shell
//! command that restarts PostgreSQL: each read is then also timed once right after a restart; give
//! `pg_ctl` a log file with `-l`, or the server keeps the command's output open and it never returns),
//! `--only WORD` (only the reads whose name contains WORD), `--load-only`.
//!
//! The fleet at scale 1.0 (scale multiplies sessions, runs and events; users, devices, models and
//! colonies stay): one tenant with 1,000 users on 1,200 devices, 20 models, 5,000 colonies with 40,000
//! runs, 3M sessions over 365 days and about 100M events' worth of usage; nine tenants of a tenth of that
//! each (100 users, 120 devices, 500 colonies). What is loaded is what the write path leaves behind,
//! not raw events: the 15-minute `usage_rollups` and `tool_rollups` rows of every session, the
//! `sessions`, `colony_runs`, `session_forks`, `devices` and 100 budgets of the large tenant; the hourly,
//! narrow, daily and monthly usage rollups, the hourly, daily and monthly tool rollups and the tenant's
//! (those summed over users) are then summed from the 15-minute rows in SQL (an hourly row is the sum of
//! its quarter rows, and so on, as the write path keeps them). Each session: a start (working
//! hours weighted), 1–12 quarter hours, one or two models (a skewed choice of 20), a row per quarter and
//! model with its LLM turns, and a row per quarter with model '' holding the tool calls and active time.
//! A colony run: a queen session, the run's own forked session (parent: the queen; its rows have no
//! colony id) and its workers (colony id and parent: the run's session); the first run of the large
//! tenant has 50 workers.
//!
//! Output: per read, the warm p50 / p95 of `--repeat` requests, the cold time, and the 8 KiB pages the
//! read touched (`shared_blks_hit + shared_blks_read` of `pg_stat_statements`, when the server has it
//! in `shared_preload_libraries`), timed at the client on loopback against the real server in this
//! process.

#[path = "common/mod.rs"]
mod common;

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgPool};
use uuid::Uuid;

use common::percentile;

/// Command-line options (see the module notes).
struct Opts {
    scale: f64,
    seed: u64,
    reload: bool,
    repeat: usize,
    restart: Option<String>,
    only: Option<String>,
    load_only: bool,
}

fn opts() -> Opts {
    let mut o = Opts {
        scale: 0.1,
        seed: 42,
        reload: false,
        repeat: 9,
        restart: None,
        only: None,
        load_only: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--scale" => o.scale = args.next().and_then(|v| v.parse().ok()).expect("--scale X"),
            "--seed" => o.seed = args.next().and_then(|v| v.parse().ok()).expect("--seed N"),
            "--repeat" => {
                o.repeat = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--repeat N")
            }
            "--restart" => o.restart = args.next(),
            "--only" => o.only = args.next(),
            "--reload" => o.reload = true,
            "--load-only" => o.load_only = true,
            _ => {} // cargo bench passes `--bench`
        }
    }
    o
}

/// One tenant's shape.
#[derive(Debug, Clone, Copy)]
struct Shape {
    users: usize,
    devices: usize,
    models: usize,
    colonies: usize,
    runs: usize,
    sessions: usize,
    /// Events per session, on average.
    events_per_session: f64,
}

impl Shape {
    fn large(scale: f64) -> Shape {
        Shape {
            users: 1000,
            devices: 1200,
            models: 20,
            colonies: 5000,
            runs: (40_000.0 * scale).round().max(1.0) as usize,
            sessions: (3_000_000.0 * scale).round() as usize,
            events_per_session: 100.0 / 3.0,
        }
    }

    fn small(scale: f64) -> Shape {
        Shape {
            users: 100,
            devices: 120,
            models: 20,
            colonies: 500,
            runs: (4_000.0 * scale).round().max(1.0) as usize,
            sessions: (300_000.0 * scale).round() as usize,
            events_per_session: 100.0 / 3.0,
        }
    }
}

const DAYS: i64 = 365;
const RUNTIMES: [&str; 4] = ["hive", "claude_code", "codex", "otel"];
const TOOLS: [&str; 12] = [
    "read_file",
    "write_file",
    "edit",
    "bash",
    "grep",
    "glob",
    "web_fetch",
    "web_search",
    "task",
    "todo",
    "notebook",
    "ls",
];
/// Slots of a tool row's duration histogram (`crate::tool_rollups::SLOTS`).
const SLOTS: usize = 53;

/// A skewed index in `0..n`: low indexes are picked far more often (a few heavy users, popular models).
fn skewed(rng: &mut StdRng, n: usize, power: f64) -> usize {
    ((rng.gen::<f64>().powf(power) * n as f64) as usize).min(n - 1)
}

fn ts(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S%.6f+00").to_string()
}

/// Text buffers of the `COPY` streams, flushed when large.
struct Copies {
    usage: String,
    tools: String,
    sessions: String,
    rows: [u64; 3],
}

/// One tenant's rows into the three `COPY` streams (and its runs, forks and devices in small inserts).
async fn generate_tenant(
    pool: &PgPool,
    tenant: Uuid,
    shape: Shape,
    rng: &mut StdRng,
    end: DateTime<Utc>,
    out: &mut Copies,
    streams: &mut Streams,
) -> anyhow::Result<()> {
    let start = end - TimeDelta::days(DAYS);
    // Devices: one per user, the rest second devices of the first users.
    let device_of = |u: usize, pick: bool| -> usize {
        if pick && u < shape.devices - shape.users {
            shape.users + u
        } else {
            u
        }
    };
    let mut devices = String::new();
    for d in 0..shape.devices {
        let u = if d < shape.users { d } else { d - shape.users };
        writeln!(
            devices,
            "{tenant}\tdevice_{d:05}\tuser_{u:04}\t{}\t{}\t{}\t0\t0\t0\tin_sync\t0.3.0",
            ts(start),
            ts(end - TimeDelta::minutes(rng.gen_range(0..600))),
            ts(end - TimeDelta::minutes(rng.gen_range(0..600))),
        )?;
    }
    copy(pool, "COPY devices (tenant_id, device_id, user_id, first_seen_at, last_seen_at, last_heartbeat_at, backlog_events, backlog_bytes, oldest_pending_age_seconds, sync_state, agent_version) FROM STDIN", devices).await?;

    // Colony runs: queen, the run's forked session, workers. Sessions 0..colony_sessions are theirs.
    let keys: Vec<String> = (0..shape.colonies)
        .map(|_| format!("ck_{:032x}", rng.gen::<u128>()))
        .collect();
    struct Role {
        colony: String,
        parent: Option<String>,
        role: &'static str,
    }
    let mut roles: HashMap<usize, Role> = HashMap::new();
    let mut runs = String::new();
    let mut forks = String::new();
    let mut next = 0usize;
    let mut run_start: HashMap<usize, DateTime<Utc>> = HashMap::new();
    for r in 0..shape.runs {
        let workers = if r == 0 { 50 } else { 1 + skewed(rng, 12, 2.0) };
        if next + 2 + workers > shape.sessions {
            break;
        }
        let (queen, run) = (next, next + 1);
        let (queen_id, run_id) = (format!("s{queen:08}"), format!("s{run:08}"));
        roles.insert(
            queen,
            Role {
                colony: String::new(),
                parent: None,
                role: "queen",
            },
        );
        roles.insert(
            run,
            Role {
                colony: String::new(),
                parent: Some(queen_id.clone()),
                role: "queen",
            },
        );
        for w in 0..workers {
            roles.insert(
                run + 1 + w,
                Role {
                    colony: run_id.clone(),
                    parent: Some(run_id.clone()),
                    role: "worker",
                },
            );
        }
        next = run + 1 + workers;
        let at = start + TimeDelta::seconds(rng.gen_range(0..DAYS * 86_400 - 86_400));
        for s in queen..next {
            run_start.insert(s, at + TimeDelta::seconds(rng.gen_range(0..120)));
        }
        // Most runs of a colony come back to it: 8 runs per colony on average, skewed.
        let key = &keys[skewed(rng, shape.colonies, 1.3)];
        let user = skewed(rng, shape.users, 1.5);
        writeln!(
            runs,
            "{tenant}\t{run_id}\t{key}\t{queen_id}\tuser_{user:04}\t{}\t{}",
            ts(at),
            Uuid::from_u128(rng.gen())
        )?;
        writeln!(
            forks,
            "{tenant}\t{run_id}\t{queen_id}\t{}\t{}",
            ts(at),
            Uuid::from_u128(rng.gen())
        )?;
    }
    copy(pool, "COPY colony_runs (tenant_id, session_id, colony_key, parent_session_id, user_id, created_at, event_id) FROM STDIN", runs).await?;
    copy(pool, "COPY session_forks (tenant_id, session_id, parent_session_id, forked_at, event_id) FROM STDIN", forks).await?;

    let quarter = TimeDelta::minutes(15);
    for s in 0..shape.sessions {
        let user = skewed(rng, shape.users, 1.5);
        let device = device_of(user, rng.gen_bool(0.3));
        let runtime = RUNTIMES[skewed(rng, RUNTIMES.len(), 2.0)];
        let begin = match run_start.get(&s) {
            Some(at) => *at,
            None => {
                let day = rng.gen_range(0..DAYS);
                // Working hours (07–19 UTC) twice as likely as the rest.
                let hour = if rng.gen_bool(2.0 / 3.0) {
                    rng.gen_range(7..19)
                } else {
                    rng.gen_range(0..24)
                };
                start
                    + TimeDelta::days(day)
                    + TimeDelta::hours(hour)
                    + TimeDelta::seconds(rng.gen_range(0..3600))
            }
        };
        let quarters = 1 + skewed(rng, 12, 2.2);
        let mut models = vec![skewed(rng, shape.models, 2.0)];
        if rng.gen_bool(0.3) {
            let second = skewed(rng, shape.models, 2.0);
            if second != models[0] {
                models.push(second);
            }
        }
        let role = roles.get(&s);
        let colony = role.map_or("", |r| r.colony.as_str());
        let sid = format!("s{s:08}");
        let first = begin.duration_trunc(quarter)?;
        let events_per_quarter = shape.events_per_session / quarters as f64;
        let mut total_events = 0i64;
        let mut last = begin;
        for q in 0..quarters {
            let bucket = first + quarter * q as i32;
            if bucket >= end {
                break;
            }
            last = (bucket + quarter - TimeDelta::seconds(1)).min(end - TimeDelta::seconds(1));
            let n = (events_per_quarter * rng.gen_range(0.5..1.5))
                .round()
                .max(1.0) as i64;
            let turns = (n * 6 / 10).max(1);
            let calls = n - turns;
            // Turns split between the models; the '' row holds the tool calls and active time.
            let mut left = turns;
            for (i, &m) in models.iter().enumerate() {
                let k = if i + 1 == models.len() {
                    left
                } else {
                    left / 2
                };
                left -= k;
                if k == 0 {
                    continue;
                }
                let input = k * rng.gen_range(500..6000);
                let output = k * rng.gen_range(50..800);
                let cached = input / rng.gen_range(2..9);
                let cost = input * 3 + output * 15; // nano-dollars
                let estimated = i64::from(rng.gen_bool(0.05)) * k;
                writeln!(
                    out.usage,
                    "{tenant}\t{}\tuser_{user:04}\tdevice_{device:05}\t{colony}\t{sid}\tmodel-{m:02}\t{runtime}\t{input}\t{output}\t{cached}\t0\t{cost}\t{k}\t0\t0\t0\t{k}\t0\t0\t{}\t{}\t{estimated}",
                    ts(bucket),
                    cost - cost * estimated / k,
                    cost * estimated / k,
                )?;
                out.rows[0] += 1;
                total_events += k;
            }
            let errors = calls / 9;
            let mut tool_ms = 0i64;
            let mut left = calls;
            let mut t = rng.gen_range(0..TOOLS.len());
            for i in 0..TOOLS.len() {
                if left == 0 {
                    break;
                }
                // Each tool once per row key: the last one takes what is left.
                let k = if left > 2 && i + 1 < TOOLS.len() {
                    rng.gen_range(1..=left)
                } else {
                    left
                };
                left -= k;
                let mut hist = [0i64; SLOTS];
                let mut ms = 0i64;
                for _ in 0..k {
                    let d = rng.gen_range(10..60_000i64);
                    ms += d;
                    // About the slot `tool_rollups` gives it (bounds at powers of √2 from 1 ms).
                    let slot = ((d as f64).log2() * 2.0).floor() as usize + 1;
                    hist[slot.min(SLOTS - 1)] += 1;
                }
                tool_ms += ms;
                let h: Vec<String> = hist.iter().map(i64::to_string).collect();
                writeln!(
                    out.tools,
                    "{tenant}\t{}\tuser_{user:04}\tdevice_{device:05}\t{colony}\t{sid}\t{runtime}\t{}\t{k}\t{}\t{k}\t{ms}\t{{{}}}",
                    ts(bucket),
                    TOOLS[t],
                    errors.min(k) * i64::from(rng.gen_bool(0.3)),
                    h.join(",")
                )?;
                out.rows[1] += 1;
                t = (t + 1) % TOOLS.len();
            }
            let active = rng.gen_range(60_000..900_000i64);
            writeln!(
                out.usage,
                "{tenant}\t{}\tuser_{user:04}\tdevice_{device:05}\t{colony}\t{sid}\t\t{runtime}\t0\t0\t0\t0\t0\t0\t0\t{calls}\t{errors}\t{calls}\t{tool_ms}\t{active}\t0\t0\t0",
                ts(bucket)
            )?;
            out.rows[0] += 1;
            total_events += calls;
        }
        let live = end - last < TimeDelta::hours(2);
        let status = if live {
            ["running", "paused"][rng.gen_range(0..2)]
        } else if rng.gen_bool(0.04) {
            "failed"
        } else {
            "completed"
        };
        let (health, due, ended) = tracker(rng, begin, last, status);
        writeln!(
            out.sessions,
            "{tenant}\t{sid}\tuser_{user:04}\tdevice_{device:05}\t{}\t{}\t{}\t{runtime}\t{}\t{}\t{}\t{}\t{status}\t{}\t{total_events}\t{health}\t{}\t{}",
            role.and_then(|r| r.parent.clone()).unwrap_or_else(|| "\\N".into()),
            if colony.is_empty() { "\\N" } else { colony },
            role.map_or("\\N", |r| r.role),
            ts(begin),
            ts(last),
            ts(last),
            ts(last),
            ts(last),
            due.map_or_else(|| "\\N".to_string(), ts),
            ended.unwrap_or("\\N"),
        )?;
        out.rows[2] += 1;
        streams.flush(out, false).await?;
    }
    Ok(())
}

/// A session's status tracker as the write path leaves it (`sessions.health`, its `stall_due_at` and
/// `ended`, as COPY text) after a run that started at `begin` and took turns until `last`, where it
/// ended as `status` says (`completed`, `failed`), paused, or is still running.
fn tracker(
    rng: &mut StdRng,
    begin: DateTime<Utc>,
    last: DateTime<Utc>,
    status: &str,
) -> (String, Option<DateTime<Utc>>, Option<&'static str>) {
    use apiary_schema::status::{Input, Rules, Run, Tracker, What};
    let rules = Rules::default();
    let input = |rng: &mut StdRng, at, what| Input {
        at,
        id: Uuid::from_u128(rng.gen()),
        what,
        interactive: false,
    };
    let mut inputs = vec![
        input(rng, begin, What::Run { run: Run::Started }),
        input(
            rng,
            begin + (last - begin) / 2,
            What::Llm { ends_turn: false },
        ),
        input(rng, last, What::Llm { ends_turn: true }),
    ];
    let end = match status {
        "completed" => Some(Run::Completed),
        "failed" => Some(Run::Failed),
        "paused" => Some(Run::Paused),
        _ => None,
    };
    if let Some(run) = end {
        inputs.push(input(rng, last, What::Run { run }));
    }
    let mut t = Tracker::default();
    let update = t.push(inputs, &rules);
    let ended = update.current.end().map(|s| s.as_str());
    // COPY text: the JSON holds no tab or newline; a backslash is doubled.
    let json = serde_json::to_string(&t)
        .expect("a tracker serialises")
        .replace('\\', "\\\\");
    (json, update.current.due(&rules), ended)
}

/// The three open `COPY` streams, each on its own connection.
struct Streams {
    usage: sqlx::postgres::PgCopyIn<sqlx::pool::PoolConnection<sqlx::Postgres>>,
    tools: sqlx::postgres::PgCopyIn<sqlx::pool::PoolConnection<sqlx::Postgres>>,
    sessions: sqlx::postgres::PgCopyIn<sqlx::pool::PoolConnection<sqlx::Postgres>>,
}

const FLUSH: usize = 4 << 20;

impl Streams {
    async fn open(pool: &PgPool) -> anyhow::Result<Streams> {
        use sqlx::postgres::PgPoolCopyExt;
        Ok(Streams {
            usage: pool.copy_in_raw("COPY usage_rollups (tenant_id, bucket, user_id, device_id, colony_id, session_id, model, runtime, input_tokens, output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls, tool_errors, events, tool_duration_ms, active_ms, cost_reported_nanos, cost_estimated_nanos, estimated_turns) FROM STDIN").await?,
            tools: pool.copy_in_raw("COPY tool_rollups (tenant_id, bucket, user_id, device_id, colony_id, session_id, runtime, tool_name, calls, errors, timed_calls, duration_ms, duration_hist) FROM STDIN").await?,
            sessions: pool.copy_in_raw("COPY sessions (tenant_id, session_id, user_id, device_id, parent_session_id, colony_id, agent_role, runtime, first_seen_at, last_event_at, last_received_at, last_progress_at, status, status_at, events, health, stall_due_at, ended) FROM STDIN").await?,
        })
    }

    async fn flush(&mut self, out: &mut Copies, all: bool) -> anyhow::Result<()> {
        if all || out.usage.len() > FLUSH {
            self.usage
                .send(std::mem::take(&mut out.usage).into_bytes())
                .await?;
        }
        if all || out.tools.len() > FLUSH {
            self.tools
                .send(std::mem::take(&mut out.tools).into_bytes())
                .await?;
        }
        if all || out.sessions.len() > FLUSH {
            self.sessions
                .send(std::mem::take(&mut out.sessions).into_bytes())
                .await?;
        }
        Ok(())
    }

    async fn finish(self) -> anyhow::Result<()> {
        self.usage.finish().await?;
        self.tools.finish().await?;
        self.sessions.finish().await?;
        Ok(())
    }
}

async fn copy(pool: &PgPool, statement: &str, rows: String) -> anyhow::Result<()> {
    use sqlx::postgres::PgPoolCopyExt;
    let mut c = pool.copy_in_raw(statement).await?;
    c.send(rows.into_bytes()).await?;
    c.finish().await?;
    Ok(())
}

/// The derived rollups, summed from the 15-minute rows as the write path keeps them. The tool rollups,
/// whose reads fetch heap rows (their keys carry no sums), are inserted in time order, as the write path
/// appends them.
const DERIVED: [&str; 10] = [
    "INSERT INTO usage_rollups_hourly (tenant_id, bucket, user_id, device_id, colony_id, session_id, model, runtime,
        input_tokens, output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns,
        tool_calls, tool_errors, events, tool_duration_ms, active_ms, cost_reported_nanos, cost_estimated_nanos,
        estimated_turns)
     SELECT tenant_id, date_bin('1 hour', bucket, '2000-01-01 00:00:00+00'), user_id, device_id, colony_id, session_id,
        model, runtime, sum(input_tokens), sum(output_tokens), sum(cached_tokens), sum(cache_creation_tokens),
        sum(cost_nanos), sum(llm_calls), sum(unpriced_turns), sum(tool_calls), sum(tool_errors), sum(events),
        sum(tool_duration_ms), sum(active_ms), sum(cost_reported_nanos), sum(cost_estimated_nanos), sum(estimated_turns)
     FROM usage_rollups GROUP BY 1, 2, 3, 4, 5, 6, 7, 8",
    "INSERT INTO usage_rollups_narrow (tenant_id, bucket, user_id, device_id, model, runtime, input_tokens,
        output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls,
        tool_errors, events, tool_duration_ms, active_ms, cost_reported_nanos, cost_estimated_nanos, estimated_turns)
     SELECT tenant_id, bucket, user_id, device_id, model, runtime, sum(input_tokens), sum(output_tokens), sum(cached_tokens),
        sum(cache_creation_tokens), sum(cost_nanos), sum(llm_calls), sum(unpriced_turns), sum(tool_calls),
        sum(tool_errors), sum(events), sum(tool_duration_ms), sum(active_ms), sum(cost_reported_nanos),
        sum(cost_estimated_nanos), sum(estimated_turns)
     FROM usage_rollups_hourly GROUP BY 1, 2, 3, 4, 5, 6",
    "INSERT INTO usage_rollups_daily (tenant_id, bucket, user_id, device_id, model, runtime, input_tokens,
        output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls,
        tool_errors, events, tool_duration_ms, active_ms, cost_reported_nanos, cost_estimated_nanos, estimated_turns)
     SELECT tenant_id, date_bin('1 day', bucket, '2000-01-01 00:00:00+00'), user_id, device_id, model, runtime,
        sum(input_tokens),
        sum(output_tokens), sum(cached_tokens), sum(cache_creation_tokens), sum(cost_nanos), sum(llm_calls),
        sum(unpriced_turns), sum(tool_calls), sum(tool_errors), sum(events), sum(tool_duration_ms), sum(active_ms),
        sum(cost_reported_nanos), sum(cost_estimated_nanos), sum(estimated_turns)
     FROM usage_rollups_narrow GROUP BY 1, 2, 3, 4, 5, 6",
    "INSERT INTO usage_rollups_monthly (tenant_id, bucket, user_id, device_id, model, runtime, input_tokens,
        output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls,
        tool_errors, events, tool_duration_ms, active_ms, cost_reported_nanos, cost_estimated_nanos, estimated_turns)
     SELECT tenant_id, date_trunc('month', bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', user_id, device_id, model,
        runtime,
        sum(input_tokens), sum(output_tokens), sum(cached_tokens), sum(cache_creation_tokens), sum(cost_nanos),
        sum(llm_calls), sum(unpriced_turns), sum(tool_calls), sum(tool_errors), sum(events), sum(tool_duration_ms),
        sum(active_ms), sum(cost_reported_nanos), sum(cost_estimated_nanos), sum(estimated_turns)
     FROM usage_rollups_daily GROUP BY 1, 2, 3, 4, 5, 6",
    "INSERT INTO tool_rollups_hourly
     SELECT tenant_id, date_bin('1 hour', bucket, '2000-01-01 00:00:00+00'), user_id, runtime, tool_name, sum(calls),
        sum(errors), sum(timed_calls), sum(duration_ms), apiary_hist_sum(duration_hist)
     FROM tool_rollups GROUP BY 1, 2, 3, 4, 5 ORDER BY 2",
    "INSERT INTO tool_rollups_daily
     SELECT tenant_id, date_bin('1 day', bucket, '2000-01-01 00:00:00+00'), user_id, runtime, tool_name, sum(calls),
        sum(errors), sum(timed_calls), sum(duration_ms), apiary_hist_sum(duration_hist)
     FROM tool_rollups_hourly GROUP BY 1, 2, 3, 4, 5 ORDER BY 2",
    "INSERT INTO tool_rollups_monthly
     SELECT tenant_id, date_trunc('month', bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', user_id, runtime, tool_name,
        sum(calls), sum(errors), sum(timed_calls), sum(duration_ms), apiary_hist_sum(duration_hist)
     FROM tool_rollups_daily GROUP BY 1, 2, 3, 4, 5 ORDER BY 2",
    "INSERT INTO tool_rollups_tenant_hourly
     SELECT tenant_id, bucket, runtime, tool_name, sum(calls), sum(errors), sum(timed_calls), sum(duration_ms),
        apiary_hist_sum(duration_hist)
     FROM tool_rollups_hourly GROUP BY 1, 2, 3, 4 ORDER BY 2",
    "INSERT INTO tool_rollups_tenant_daily
     SELECT tenant_id, bucket, runtime, tool_name, sum(calls), sum(errors), sum(timed_calls), sum(duration_ms),
        apiary_hist_sum(duration_hist)
     FROM tool_rollups_daily GROUP BY 1, 2, 3, 4 ORDER BY 2",
    "INSERT INTO tool_rollups_tenant_monthly
     SELECT tenant_id, bucket, runtime, tool_name, sum(calls), sum(errors), sum(timed_calls), sum(duration_ms),
        apiary_hist_sum(duration_hist)
     FROM tool_rollups_monthly GROUP BY 1, 2, 3, 4 ORDER BY 2",
];

/// Generates the fleet (see the module notes) into a fresh, migrated database.
async fn generate(pool: &PgPool, o: &Opts, end: DateTime<Utc>) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let mut rng = StdRng::seed_from_u64(o.seed);
    let mut tenants = vec![];
    for i in 0..10 {
        tenants.push(apiary_ingest::store::admin::create_tenant(pool, &format!("year-{i}")).await?);
    }
    let mut out = Copies {
        usage: String::new(),
        tools: String::new(),
        sessions: String::new(),
        rows: [0; 3],
    };
    let mut streams = Streams::open(pool).await?;
    for (i, &t) in tenants.iter().enumerate() {
        let shape = if i == 0 {
            Shape::large(o.scale)
        } else {
            Shape::small(o.scale)
        };
        generate_tenant(pool, t, shape, &mut rng, end, &mut out, &mut streams).await?;
        eprintln!(
            "tenant {i}: {} usage rows, {} tool rows, {} sessions so far ({:.0} s)",
            out.rows[0],
            out.rows[1],
            out.rows[2],
            t0.elapsed().as_secs_f64()
        );
    }
    streams.flush(&mut out, true).await?;
    streams.finish().await?;
    // 100 budgets of the large tenant: per user, model and colony scopes, the tenant's whole usage.
    let colonies: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT colony_key FROM colony_runs WHERE tenant_id = $1 ORDER BY 1 LIMIT 20",
    )
    .bind(tenants[0])
    .fetch_all(pool)
    .await?;
    for b in 0..100usize {
        let (user, model, colony) = match b % 4 {
            0 => (Some(format!("user_{:04}", b)), None, None),
            1 => (None, Some(format!("model-{:02}", b % 20)), None),
            2 => (None, None, colonies.get(b % colonies.len().max(1)).cloned()),
            _ => (None, None, None),
        };
        sqlx::query(
            "INSERT INTO budgets (tenant_id, budget_id, name, scope_user, scope_model, scope_colony, period, tz,
                unit, limit_amount, thresholds)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, '{50,80,100}')",
        )
        .bind(tenants[0])
        .bind(format!("b{b:03}"))
        .bind(format!("budget {b}"))
        .bind(user)
        .bind(model)
        .bind(colony)
        .bind(["day", "week", "month"][b % 3])
        .bind(["UTC", "Europe/Berlin", "Asia/Kolkata"][b % 3])
        .bind(if b % 2 == 0 { "usd" } else { "tokens" })
        .bind(1_000_000_000_000i64)
        .execute(pool)
        .await?;
    }
    eprintln!("copied in {:.0} s", t0.elapsed().as_secs_f64());
    let t1 = Instant::now();
    for q in DERIVED {
        sqlx::query(q).execute(pool).await?;
    }
    for q in apiary_ingest::rollups::colony_rollups_from_hourly() {
        sqlx::query(&q).execute(pool).await?;
    }
    eprintln!(
        "hourly, narrow, daily, monthly and colony sums in {:.0} s",
        t1.elapsed().as_secs_f64()
    );
    sqlx::query("VACUUM ANALYZE").execute(pool).await?;
    eprintln!("loaded in {:.0} s", t0.elapsed().as_secs_f64());
    Ok(())
}

/// One read: a name, a path (with query) and whether it is a dashboard page (cookie) or the API (token).
struct Read {
    name: String,
    path: String,
    page: bool,
}

fn reads(end: DateTime<Utc>, queen: &str, colony: &str) -> Vec<Read> {
    let mut out = vec![];
    let day = |d: i64| {
        (end - TimeDelta::days(d))
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    };
    let to = day(0);
    let groups = [
        "",
        "user",
        "model",
        "colony",
        "tool",
        "runtime",
        "device",
        "user,model",
        "colony,model",
        "user,tool",
        "device,runtime",
    ];
    let spans: [(i64, &[&str]); 3] = [
        (1, &["hour"]),
        (30, &["hour", "day"]),
        (365, &["day", "month"]),
    ];
    for g in groups {
        for (days, grans) in spans {
            for gran in grans {
                let label = if g.is_empty() { "none" } else { g };
                out.push(Read {
                    name: format!("usage {label} {days}d {gran}"),
                    path: format!(
                        "/v1/usage?from={}&to={to}&group_by={g}&granularity={gran}",
                        day(days)
                    ),
                    page: false,
                });
            }
        }
    }
    // The answers past the bound of rows (refused whole) as pages: the first page of 10,000 rows.
    for g in [
        "user",
        "device",
        "user,model",
        "user,tool",
        "device,runtime",
    ] {
        out.push(Read {
            name: format!("usage {g} 365d day, a page"),
            path: format!(
                "/v1/usage?from={}&to={to}&group_by={g}&granularity=day&limit=10000",
                day(365)
            ),
            page: false,
        });
    }
    // A zone whose days start at 04:00 or 05:00 UTC: each of its days cuts a UTC day.
    for g in ["", "model", "tool"] {
        for (days, gran) in [(30, "day"), (365, "day"), (365, "month")] {
            let label = if g.is_empty() { "none" } else { g };
            out.push(Read {
                name: format!("usage {label} {days}d {gran} New York"),
                path: format!(
                    "/v1/usage?from={}&to={to}&group_by={g}&granularity={gran}&tz=America/New_York",
                    day(days)
                ),
                page: false,
            });
        }
    }
    for days in [30, 365] {
        out.push(Read {
            name: format!("colonies api {days}d"),
            path: format!("/v1/colonies?from={}&to={to}", day(days)),
            page: false,
        });
        out.push(Read {
            name: format!("colonies page {days}d"),
            path: format!(
                "/colonies?from={}&to={}",
                (end - TimeDelta::days(days)).format("%Y-%m-%d"),
                end.format("%Y-%m-%d")
            ),
            page: true,
        });
    }
    for (name, q) in [
        ("sessions", String::new()),
        ("sessions status=active", "status=active".into()),
        ("sessions status=failed", "status=failed".into()),
        (
            "sessions status=stalled,failed",
            "status=stalled,failed".into(),
        ),
        ("sessions status=idle", "status=idle".into()),
        ("sessions user", "user=user_0007".into()),
        ("sessions colony", format!("colony={colony}")),
    ] {
        out.push(Read {
            name: name.into(),
            path: format!("/v1/sessions?{q}"),
            page: false,
        });
    }
    out.push(Read {
        name: "session of a queen with 50 workers".into(),
        path: format!("/v1/sessions/{queen}"),
        page: false,
    });
    out.push(Read {
        name: "session tree of that queen".into(),
        path: format!("/v1/sessions/{queen}/tree"),
        page: false,
    });
    out.push(Read {
        name: "session page of that queen".into(),
        path: format!("/sessions/{queen}"),
        page: true,
    });
    out.push(Read {
        name: "budgets (100)".into(),
        path: "/v1/budgets".into(),
        page: false,
    });
    out.push(Read {
        name: "overview page".into(),
        path: "/".into(),
        page: true,
    });
    out
}

/// pg_stat_statements' pages touched since its last reset (None without the extension).
async fn pages(pool: &PgPool) -> Option<i64> {
    sqlx::query_scalar(
        "SELECT COALESCE(sum(shared_blks_hit + shared_blks_read), 0)::int8 FROM pg_stat_statements
         WHERE query NOT LIKE '%pg_stat_statements%'",
    )
    .fetch_one(pool)
    .await
    .ok()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let o = opts();
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let db = "apiary_bench_year";
    let db_url = format!("{}/{db}", url.rsplit_once('/').expect("a URL").0);
    let mut admin = sqlx::PgConnection::connect(&url).await?;
    let exists: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)")
            .bind(db)
            .fetch_one(&mut admin)
            .await?;
    let tag = format!("scale {} seed {}", o.scale, o.seed);
    let same: bool = exists
        && sqlx::query_scalar::<_, Option<String>>(&format!(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = '{db}'"
        ))
        .fetch_one(&mut admin)
        .await?
        .is_some_and(|d| d.starts_with(&tag));
    // On a Citus coordinator with workers (`scripts/citus.sh`), the new database joins the cluster: its
    // tables distributed by tenant, as the ingest's own migration leaves them there.
    let nodes = apiary_ingest::store::citus::cluster_nodes(&mut admin)
        .await?
        .filter(|n| n.iter().any(|node| node.2 != 0));
    let end = if !same || o.reload {
        if exists {
            sqlx::query(&format!("DROP DATABASE {db} WITH (FORCE)"))
                .execute(&mut admin)
                .await?;
        }
        sqlx::query(&format!("CREATE DATABASE {db}"))
            .execute(&mut admin)
            .await?;
        let end = Utc::now().duration_trunc(TimeDelta::days(1))? + TimeDelta::days(1);
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect(&db_url)
            .await?;
        apiary_ingest::store::migrate(&pool).await?;
        if let Some(nodes) = &nodes {
            apiary_ingest::store::citus::join_cluster(&pool, nodes).await?;
        }
        generate(&pool, &o, end).await?;
        pool.close().await;
        sqlx::query(&format!(
            "COMMENT ON DATABASE {db} IS '{tag} end {}'",
            end.to_rfc3339()
        ))
        .execute(&mut admin)
        .await?;
        end
    } else {
        let d: String = sqlx::query_scalar(&format!(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = '{db}'"
        ))
        .fetch_one(&mut admin)
        .await?;
        d.rsplit_once(" end ")
            .expect("a tagged database")
            .1
            .parse()?
    };
    drop(admin);
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect(&db_url)
        .await?;
    // A kept database may gain tables by migration here (their backfill is part of the upgrade).
    let t0 = Instant::now();
    apiary_ingest::store::migrate(&pool).await?;
    if t0.elapsed() > Duration::from_secs(2) {
        sqlx::query("VACUUM ANALYZE").execute(&pool).await?;
        eprintln!(
            "migrated the kept database in {:.0} s",
            t0.elapsed().as_secs_f64()
        );
    }
    let size: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(&pool)
        .await?;
    let counts: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT c.relname::text, c.reltuples::int8, pg_total_relation_size(c.oid)::int8 FROM pg_class c
         JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.reltuples > 1000 ORDER BY 3 DESC",
    )
    .fetch_all(&pool)
    .await?;
    println!(
        "year of reads, {tag}, data until {end}: database {:.2} GB",
        size as f64 / 1e9
    );
    for (t, n, b) in &counts {
        println!("  {t:<24} {n:>12} rows {:>8.2} GB", *b as f64 / 1e9);
    }
    if o.load_only {
        return Ok(());
    }
    let _ = sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(&pool)
        .await;

    let tenant: Uuid = sqlx::query_scalar("SELECT tenant_id FROM tenants WHERE name = 'year-0'")
        .fetch_one(&pool)
        .await?;
    let queen: String = sqlx::query_scalar(
        "SELECT parent_session_id FROM colony_runs r WHERE tenant_id = $1
         ORDER BY (SELECT count(*) FROM sessions s WHERE s.tenant_id = r.tenant_id AND s.colony_id = r.session_id) DESC
         LIMIT 1",
    )
    .bind(tenant)
    .fetch_one(&pool)
    .await?;
    let colony: String = sqlx::query_scalar(
        "SELECT colony_key FROM colony_runs WHERE tenant_id = $1 GROUP BY 1 ORDER BY count(*) DESC LIMIT 1",
    )
    .bind(tenant)
    .fetch_one(&pool)
    .await?;
    let spec = apiary_ingest::store::admin::TokenSpec {
        tenant: tenant.to_string(),
        scopes: vec![apiary_ingest::auth::Scope::Read],
        user_id: None,
        device_id: None,
    };
    let token = apiary_ingest::store::admin::create_token(&pool, &spec)
        .await?
        .1;
    let server_pool = PgPoolOptions::new()
        .max_connections(8)
        .connect(&db_url)
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
        .timeout(Duration::from_secs(300))
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
    let get = |r: &Read| {
        let req = client.get(format!("{base}{}", r.path));
        if r.page {
            req.header("cookie", &cookie)
        } else {
            req.bearer_auth(&token)
        }
    };
    let all = reads(end, &queen, &colony);
    let chosen: Vec<&Read> = all
        .iter()
        .filter(|r| o.only.as_ref().is_none_or(|w| r.name.contains(w.as_str())))
        .collect();
    println!(
        "{:<36} {:>9} {:>9} {:>9} {:>10} {:>8}",
        "read", "warm p50", "warm p95", "cold", "pages", "bytes"
    );
    for r in chosen {
        let mut cold = None;
        if let Some(cmd) = &o.restart {
            let st = std::process::Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .output()?;
            anyhow::ensure!(
                st.status.success(),
                "restart: {}",
                String::from_utf8_lossy(&st.stderr)
            );
            // The server's pool finds its connections closed and opens new ones: readyz asks the
            // database, so the timed read meets a connected pool and a cold cache.
            for _ in 0..50 {
                if client
                    .get(format!("{base}/readyz"))
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            for _ in 0..8 {
                let _ = client.get(format!("{base}/readyz")).send().await;
            }
            let t = Instant::now();
            let resp = get(r).send().await?;
            if resp.status() == reqwest::StatusCode::REQUEST_TIMEOUT {
                println!("{:<36} the server's request timeout (cold)", r.name);
                continue;
            }
            if resp.status() == reqwest::StatusCode::UNPROCESSABLE_ENTITY {
                println!(
                    "{:<36} refused (cold, {:.1} ms): {}",
                    r.name,
                    t.elapsed().as_secs_f64() * 1e3,
                    resp.text().await.unwrap_or_default()
                );
                continue;
            }
            anyhow::ensure!(resp.status().is_success(), "{}: {}", r.path, resp.status());
            resp.bytes().await?;
            cold = Some(t.elapsed());
        }
        let stats = sqlx::query("SELECT pg_stat_statements_reset()")
            .execute(&pool)
            .await
            .is_ok();
        let mut times = vec![];
        let mut bytes = 0;
        let mut touched = None;
        let mut timed_out = false;
        let mut refused = None;
        for i in 0..=o.repeat {
            let t = Instant::now();
            let resp = get(r).send().await?;
            // A read past the server's request timeout is a figure too (and the rest still run).
            if resp.status() == reqwest::StatusCode::REQUEST_TIMEOUT {
                timed_out = true;
                break;
            }
            // An answer past the bound of rows is refused: how fast is a figure too.
            if resp.status() == reqwest::StatusCode::UNPROCESSABLE_ENTITY {
                refused = Some(t.elapsed());
                resp.bytes().await?;
                break;
            }
            anyhow::ensure!(
                resp.status().is_success(),
                "{}: {} {}",
                r.path,
                resp.status(),
                resp.text().await.unwrap_or_default()
            );
            bytes = resp.bytes().await?.len();
            let took = t.elapsed();
            if i == 0 {
                // The first request warms the cache; its pages are the read's pages.
                if stats {
                    touched = pages(&pool).await;
                }
            } else {
                times.push(took);
            }
        }
        if timed_out {
            println!("{:<36} the server's request timeout (warm)", r.name);
            continue;
        }
        if let Some(t) = refused {
            println!(
                "{:<36} refused: more rows than an answer holds ({:.1} ms)",
                r.name,
                t.as_secs_f64() * 1e3
            );
            continue;
        }
        times.sort();
        let ms = |d: Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
        println!(
            "{:<36} {:>9} {:>9} {:>9} {:>10} {:>8}",
            r.name,
            ms(percentile(&times, 0.5)),
            ms(percentile(&times, 0.95)),
            cold.map_or("-".into(), ms),
            touched.map_or("-".into(), |p| p.to_string()),
            bytes
        );
    }
    Ok(())
}
