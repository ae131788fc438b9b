//! The floor of an intake that answers only after its commit: what the agent's design could reach on a
//! machine, measured with the same client and load as the agent (`../shared/peers/intake-vs-fluent-bit.sh`
//! runs it in the agent's place: `run --data-dir DIR --listen ADDR`, a token in `DIR/agent.token`,
//! `GET /v1/status`, NDJSON bodies on `POST /v1/events`).
//!
//! It keeps the parts no design of an acknowledged-after-commit intake can drop and nothing else: HTTP,
//! splitting the body into lines, one writer thread committing each group of requests in one SQLite
//! transaction in WAL mode with `synchronous = FULL` (the agent's pragmas and 8 KiB pages; checkpoints on
//! a thread of their own), every request answered after the commit that holds its events. Two levels,
//! chosen by `INTAKE_FLOOR`:
//!
//! - `store` (the default): each line's `type` is read and classified (deltas and chatty lines dropped,
//!   as the agent does); a durable line is stored as received, keyed by a 64-bit hash of its bytes in a
//!   unique index. No parse, no redaction, no derived state: the storage floor.
//! - `validate`: as `store`, and each durable line is read through as JSON (serde_json into
//!   `IgnoredAny`: every byte checked, nothing built) before it is stored: the least any intake that
//!   redacts must do, as it cannot choose what to keep without reading the line.
//! - `parse`: each body goes through the agent's own parse (`parse_body`: the one-pass reader,
//!   adaptation, the redaction policy, the prepared event) and each kept event is stored as the agent
//!   stores it (its id in a unique index, kind, session, time, the redacted body). No derived state
//!   (usage, status, work, durations, the journal, the live stream), no counters: what the agent's path
//!   would cost if the writer did nothing but insert the events.
//!
//! ```sh not-run: a release build and minutes on a quiet machine
//! cargo build --release -p apiary-agent --example intake_floor
//! ../shared/peers/intake-vs-fluent-bit.sh target/release/examples/intake_floor 5
//! INTAKE_FLOOR=validate ../shared/peers/intake-vs-fluent-bit.sh target/release/examples/intake_floor 5
//! INTAKE_FLOOR=parse ../shared/peers/intake-vs-fluent-bit.sh target/release/examples/intake_floor 5
//! ```
//!
//! Not a product: it answers nothing else, pushes nothing and keeps no promise but the commit.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::{bail, Context as _};
use apiary_agent::config::IntakeSettings;
use apiary_agent::http::parse::{parse_body, Limits};
use apiary_agent::outbox::Item;
use apiary_schema::hive::{classify, Classification, Zone};
use apiary_schema::{Policy, ProcessOptions};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::Router;
use rusqlite::{params, Connection};
use tokio::sync::oneshot;

/// One event as the floor stores it.
struct Row {
    key: Vec<u8>,
    kind: &'static str,
    session: Option<String>,
    occurred_at_ms: i64,
    body: String,
}

/// A request's rows and where to answer once they are committed.
type Job = (Vec<Row>, oneshot::Sender<Result<(), String>>);

#[derive(Clone, Copy, PartialEq)]
enum Level {
    Store,
    Validate,
    Parse,
}

struct App {
    token: String,
    level: Level,
    policy: Policy,
    writer: mpsc::Sender<Job>,
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (mut dir, mut listen) = (None, None);
    let mut it = args.iter();
    match it.next().map(String::as_str) {
        Some("run") => {}
        _ => bail!("usage: intake_floor run --data-dir DIR --listen ADDR"),
    }
    while let Some(a) = it.next() {
        match a.as_str() {
            "--data-dir" => dir = it.next().map(PathBuf::from),
            "--listen" => listen = it.next().cloned(),
            other => bail!("unknown argument {other}"),
        }
    }
    let dir = dir.context("--data-dir is required")?;
    let listen = listen.context("--listen is required")?;
    let level = match std::env::var("INTAKE_FLOOR").as_deref() {
        Ok("parse") => Level::Parse,
        Ok("validate") => Level::Validate,
        Ok("store") | Err(_) => Level::Store,
        Ok(other) => bail!("INTAKE_FLOOR is store, validate or parse, not {other}"),
    };

    std::fs::create_dir_all(&dir)?;
    let db = dir.join("floor.db");
    let conn = open(&db)?;
    let wal = Arc::new(Wal::default());
    let checkpointer = {
        let (db, wal) = (db.clone(), wal.clone());
        std::thread::spawn(move || checkpoints(&db, &wal))
    };
    let (tx, rx) = mpsc::channel::<Job>();
    let writer = {
        let wal = wal.clone();
        std::thread::spawn(move || write(conn, rx, &wal))
    };

    let token = format!("{:032x}", rand::random::<u128>());
    let app = Arc::new(App {
        token: token.clone(),
        level,
        policy: Policy::default_policy(),
        writer: tx,
    });
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(&listen).await?;
        std::fs::write(dir.join("agent.token"), &token)?;
        let router = Router::new()
            .route("/v1/status", get(|| async { "ok" }))
            .route("/v1/events", post(events))
            .with_state(app);
        axum::serve(listener, router)
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await?;
        anyhow::Ok(())
    })?;
    drop(rt);
    let _ = writer.join();
    wal.stop.store(true, Ordering::Relaxed);
    let _ = checkpointer.join();
    Ok(())
}

async fn events(State(app): State<Arc<App>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if bearer != Some(app.token.as_str()) {
        return StatusCode::UNAUTHORIZED;
    }
    let parser = app.clone();
    let rows = match tokio::task::spawn_blocking(move || rows(&parser, &body)).await {
        Ok(Ok(rows)) => rows,
        Ok(Err(_)) => return StatusCode::PAYLOAD_TOO_LARGE,
        Err(_) => return StatusCode::INTERNAL_SERVER_ERROR,
    };
    let (done, answer) = oneshot::channel();
    if app.writer.send((rows, done)).is_err() {
        return StatusCode::SERVICE_UNAVAILABLE;
    }
    match answer.await {
        Ok(Ok(())) => StatusCode::OK,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// The rows a body adds, at the floor's level.
fn rows(app: &App, body: &[u8]) -> Result<Vec<Row>, ()> {
    match app.level {
        Level::Store | Level::Validate => Ok(body
            .split(|b| *b == b'\n')
            .filter_map(|line| stored_line(line, app.level == Level::Validate))
            .collect()),
        Level::Parse => {
            let opts = ProcessOptions {
                zone: Zone::Utc,
                ..ProcessOptions::new(&app.policy)
            };
            let parsed = parse_body(body, &opts, Limits::from(&IntakeSettings::default()))
                .map_err(|_| ())?;
            Ok(parsed
                .items
                .into_iter()
                .filter_map(|item| match item {
                    Item::Kept(e) => Some(Row {
                        key: e.event_id.as_bytes().to_vec(),
                        kind: e.kind.as_str(),
                        session: e.session_id,
                        occurred_at_ms: e.occurred_at_ms,
                        body: e.body,
                    }),
                    _ => None,
                })
                .collect())
        }
    }
}

/// A durable line as received (read through as JSON first when `validate`), or None for an empty,
/// unreadable, delta or chatty one.
fn stored_line(line: &[u8], validate: bool) -> Option<Row> {
    let kind = line_type(line)?;
    match classify(kind)? {
        Classification::Durable(..) => {}
        Classification::Filtered(_) => return None,
    }
    if validate {
        serde_json::from_slice::<serde::de::IgnoredAny>(line).ok()?;
    }
    let text = std::str::from_utf8(line).ok()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    line.hash(&mut h);
    Some(Row {
        key: h.finish().to_be_bytes().to_vec(),
        kind: "hive",
        session: None,
        occurred_at_ms: 0,
        body: text.to_owned(),
    })
}

/// The value of the first `"type"` key of a line, read without parsing the rest.
fn line_type(line: &[u8]) -> Option<&str> {
    let at = memchr::memmem::find(line, b"\"type\"")? + 6;
    let rest = &line[at..];
    let open = rest.iter().position(|b| *b == b'"')?;
    if rest[..open].iter().any(|b| !matches!(b, b' ' | b':')) {
        return None;
    }
    let value = &rest[open + 1..];
    let close = value.iter().position(|b| *b == b'"')?;
    std::str::from_utf8(&value[..close]).ok()
}

fn open(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "page_size", 8192)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.pragma_update(None, "cache_size", -8192)?;
    conn.pragma_update(None, "journal_size_limit", 64 * 1024 * 1024)?;
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS events (
            seq INTEGER PRIMARY KEY AUTOINCREMENT,
            event_id BLOB NOT NULL,
            kind TEXT NOT NULL,
            session_id TEXT,
            occurred_at INTEGER NOT NULL,
            body TEXT
         );
         CREATE UNIQUE INDEX IF NOT EXISTS events_dedup ON events(occurred_at, event_id);",
    )?;
    Ok(conn)
}

/// The single writer: takes every job waiting, commits them in one transaction, then answers them;
/// between groups, restarts the WAL when the checkpointer asks (as the agent's writer does: a WAL that
/// only grows makes every commit write into new file blocks).
fn write(mut conn: Connection, rx: mpsc::Receiver<Job>, wal: &Wal) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        jobs.extend(rx.try_iter());
        let result = commit(&mut conn, &jobs).map_err(|e| e.to_string());
        for (_, done) in jobs {
            let _ = done.send(result.clone());
        }
        if wal.restart_wanted.swap(false, Ordering::Relaxed) {
            let _ = conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |_| Ok(()));
        }
    }
}

fn commit(conn: &mut Connection, jobs: &[Job]) -> rusqlite::Result<()> {
    let tx = conn.transaction()?;
    {
        let mut insert = tx.prepare_cached(
            "INSERT OR IGNORE INTO events (event_id, kind, session_id, occurred_at, body)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for (rows, _) in jobs {
            for r in rows {
                insert.execute(params![r.key, r.kind, r.session, r.occurred_at_ms, r.body])?;
            }
        }
    }
    tx.commit()
}

/// Shared by the writer and the checkpointer.
#[derive(Default)]
struct Wal {
    stop: AtomicBool,
    restart_wanted: AtomicBool,
}

/// A PASSIVE checkpoint every 100 ms on a connection of its own, asking the writer to restart the WAL
/// past 4,096 pages (the agent's checkpointer and its limit).
fn checkpoints(db: &Path, wal: &Wal) {
    let Ok(conn) = Connection::open(db) else {
        return;
    };
    let _ = conn.pragma_update(None, "synchronous", "FULL");
    while !wal.stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        let log = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| r.get::<_, i64>(1));
        if matches!(log, Ok(pages) if pages > 4096) {
            wal.restart_wanted.store(true, Ordering::Relaxed);
        }
    }
}
