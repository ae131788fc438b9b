//! Air-gapped export: every pending event, whether or not sync is enabled, into one bundle file.
//!
//! ## Bundle format (version 1) — read by `apiary-ingest import`
//! A gzip stream of NDJSON (UTF-8, `\n` line ends):
//! 1. line 1 is the manifest, `{"manifest": {...}}`:
//!    - `format`: `"apiary-export"`, `format_version`: 1, `schema_version`: the canonical event version (1)
//!    - `created_at` (RFC 3339 UTC), `agent_version`, `device_id`
//!    - `policy_hash`: the policy the events were redacted under (when several were, the first of
//!      `policy_hashes`); `policy_hashes`: all of them
//!    - `sessions`: a [`SessionBinding`] for every session the events reference, and their parents
//!    - `counts`: `{"events": n, "by_type": {"llm.turn": n, ...}, "held": n}` (`held`: captured while sync
//!      was off)
//!    - `checksum`: `{"algorithm": "sha256", "over": "event_lines", "value": hex}` — SHA-256 over the
//!      bytes of lines 2..n exactly as written, each including its trailing `\n`
//! 2. lines 2..n: one redacted canonical event each (the same JSON the push loop would send), in commit
//!    order.
//!
//! An importer should verify the checksum and the count before loading anything, then load the events
//! with the same dedup by `(tenant, event_id)` as `POST /v1/batches`, so importing a bundle twice — or a
//! bundle whose events were also pushed — changes nothing.
//!
//! ## Outcome, and what an export does to everyone else
//! The bundle is written from a read snapshot on a connection of its own (two passes over the same
//! snapshot: the manifest with its checksum, then the lines), to a private temporary file created
//! exclusively beside `FILE` (mode 0600), fsynced and renamed over `FILE`. Only
//! then are the exported rows turned into `exported` tombstones, by the writer, in chunks of
//! [`MARK_CHUNK`] rows — so producers, the tailer and the push loop go on while a large backlog is being
//! exported, and no transaction holds the write lock for long. The rows marked are the ones pending in
//! the snapshot (`seq` up to the snapshot's last pending row, still pending): one delivered by the push
//! loop meanwhile stays `delivered`; one that arrived after the snapshot stays pending for the next
//! export. A crash before or during the marking leaves (some) exported rows pending, so a later export
//! or push sends them again: harmless, the importer and the ingest dedup by event id. `exported` is a
//! terminal outcome of its own: received = delivered + duplicate + rejected + filtered + evicted + purged
//! + exported + pending.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use apiary_schema::SessionBinding;
use chrono::Utc;
use flate2::write::GzEncoder;
use rusqlite::params;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::store::{self, state};
use super::writer::{Ctx, Op, Reply};
use super::{sessions, OutboxError};

/// The `manifest` object of a bundle.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Manifest {
    pub format: String,
    pub format_version: u32,
    pub schema_version: u32,
    pub created_at: chrono::DateTime<Utc>,
    pub agent_version: String,
    pub device_id: Option<String>,
    pub policy_hash: String,
    pub policy_hashes: Vec<String>,
    pub sessions: Vec<SessionBinding>,
    pub counts: ManifestCounts,
    pub checksum: Checksum,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct ManifestCounts {
    pub events: u64,
    pub by_type: BTreeMap<String, u64>,
    pub held: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Checksum {
    pub algorithm: String,
    pub over: String,
    pub value: String,
}

/// What an export wrote.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportReport {
    pub path: PathBuf,
    /// Events in the bundle.
    pub events: u64,
    /// Rows this export turned into `exported` tombstones: fewer than `events` when some were delivered
    /// (or purged) while the bundle was being written.
    pub marked: u64,
    pub file_bytes: u64,
    pub checksum: String,
}

/// Rows marked `exported` per writer op.
pub const MARK_CHUNK: i64 = 20_000;

/// What [`write_snapshot`] wrote, and the last `seq` it covered.
pub(crate) struct Snapshot {
    pub report: ExportReport,
    pub last_seq: i64,
}

/// Writes the bundle of every row pending in one read snapshot of `conn` (see the module notes).
pub(crate) fn write_snapshot(
    conn: &rusqlite::Connection,
    out: &Path,
    device_id: &str,
    policy_hash: &str,
) -> Result<Snapshot, OutboxError> {
    let sql = |e: rusqlite::Error| OutboxError::Export(e.to_string());
    let tx = conn.unchecked_transaction().map_err(sql)?;
    let (manifest, last_seq) = try_build_manifest(&tx, device_id, policy_hash).map_err(sql)?;
    let report = write_bundle(&tx, out, &manifest, last_seq)?;
    tx.finish().map_err(sql)?;
    Ok(Snapshot { report, last_seq })
}

/// Marks up to [`MARK_CHUNK`] rows pending with `after < seq <= last` as exported.
pub(crate) struct MarkExported {
    pub after: i64,
    pub last: i64,
    pub reply: Reply<MarkProgress>,
}

/// How far marking got.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MarkProgress {
    pub marked: u64,
    /// The highest `seq` this chunk marked; the next chunk starts after it.
    pub upto: i64,
    pub done: bool,
}

impl Op for MarkExported {
    fn apply(&mut self, ctx: &mut Ctx<'_>) -> rusqlite::Result<()> {
        self.reply.reset();
        let marked: Vec<(i64, i64)> = ctx
            .conn
            .prepare_cached(
                "UPDATE events SET state = ?3, body = NULL, done_at = ?4 WHERE seq IN (
                    SELECT seq FROM events WHERE state = 0 AND seq > ?1 AND seq <= ?2 ORDER BY seq LIMIT ?5)
                 RETURNING seq, bytes",
            )?
            .query_map(
                params![self.after, self.last, state::EXPORTED, ctx.now_ms, MARK_CHUNK],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )?
            .collect::<rusqlite::Result<_>>()?;
        let n = marked.len() as i64;
        let bytes: i64 = marked.iter().map(|(_, b)| b).sum();
        ctx.count(store::EXPORTED, n);
        ctx.count(store::PENDING, -n);
        ctx.count(store::PENDING_BYTES, -bytes);
        self.reply.set(Ok(MarkProgress {
            marked: n as u64,
            upto: marked
                .iter()
                .map(|(seq, _)| *seq)
                .max()
                .unwrap_or(self.last),
            done: n < MARK_CHUNK,
        }));
        Ok(())
    }
    fn finish(mut self: Box<Self>, committed: Result<(), OutboxError>) {
        self.reply.send(committed);
    }
    fn weight(&self) -> usize {
        MARK_CHUNK as usize
    }
}

/// Pass 1: counts, sessions, policies and the checksum of the event lines; and the last pending `seq`.
fn try_build_manifest(
    conn: &rusqlite::Connection,
    device_id: &str,
    policy_hash: &str,
) -> rusqlite::Result<(Manifest, i64)> {
    let mut counts = ManifestCounts::default();
    let mut hasher = Sha256::new();
    let mut session_ids = BTreeSet::new();
    let mut policy_ids = BTreeSet::new();
    let mut last_seq = 0;
    {
        let mut stmt = conn.prepare(
            "SELECT body, kind, session_id, held, policy_id, seq FROM events WHERE state = 0 ORDER BY seq",
        )?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let body: String = r.get(0)?;
            hasher.update(body.as_bytes());
            hasher.update(b"\n");
            counts.events += 1;
            *counts.by_type.entry(r.get(1)?).or_default() += 1;
            if let Some(s) = r.get::<_, Option<String>>(2)? {
                session_ids.insert(s);
            }
            counts.held += r.get::<_, i64>(3)? as u64;
            policy_ids.insert(r.get::<_, i64>(4)?);
            last_seq = r.get(5)?;
        }
    }
    let mut policy_hashes = Vec::new();
    for id in policy_ids {
        policy_hashes.push(conn.query_row(
            "SELECT hash FROM policies WHERE id = ?1",
            [id],
            |r| r.get(0),
        )?);
    }
    let manifest = Manifest {
        format: "apiary-export".into(),
        format_version: 1,
        schema_version: apiary_schema::SCHEMA_VERSION,
        created_at: Utc::now(),
        agent_version: env!("CARGO_PKG_VERSION").into(),
        device_id: Some(device_id.to_string()),
        policy_hash: policy_hashes
            .first()
            .cloned()
            .unwrap_or_else(|| policy_hash.to_string()),
        policy_hashes,
        sessions: sessions::bindings_for(conn, session_ids.iter().map(String::as_str))?,
        counts,
        checksum: Checksum {
            algorithm: "sha256".into(),
            over: "event_lines".into(),
            value: hex::encode(hasher.finalize()),
        },
    };
    Ok((manifest, last_seq))
}

/// Pass 2: writes an exclusive, private temporary file beside `FILE`, fsyncs, renames it to `FILE`
/// ([`crate::private::AtomicFile`]: nothing planted is followed; on failure it is removed).
fn write_bundle(
    conn: &rusqlite::Connection,
    out: &Path,
    manifest: &Manifest,
    last_seq: i64,
) -> Result<ExportReport, OutboxError> {
    let io = |e: std::io::Error| OutboxError::Export(format!("{}: {e}", out.display()));
    let mut tmp = crate::private::AtomicFile::create(out).map_err(io)?;
    let mut gz = GzEncoder::new(
        std::io::BufWriter::new(tmp.file()),
        flate2::Compression::default(),
    );
    let head = serde_json::json!({ "manifest": manifest });
    writeln!(gz, "{head}").map_err(io)?;
    let sql = |e: rusqlite::Error| OutboxError::Export(e.to_string());
    let mut stmt = conn
        .prepare("SELECT body FROM events WHERE state = 0 AND seq <= ?1 ORDER BY seq")
        .map_err(sql)?;
    let mut rows = stmt.query([last_seq]).map_err(sql)?;
    while let Some(r) = rows.next().map_err(sql)? {
        let body: String = r.get(0).map_err(sql)?;
        gz.write_all(body.as_bytes()).map_err(io)?;
        gz.write_all(b"\n").map_err(io)?;
    }
    gz.finish()
        .map_err(io)?
        .into_inner()
        .map_err(|e| io(e.into_error()))?;
    let file_bytes = tmp.commit().map_err(io)?.metadata().map_err(io)?.len();
    Ok(ExportReport {
        path: out.to_path_buf(),
        events: manifest.counts.events,
        marked: 0,
        file_bytes,
        checksum: manifest.checksum.value.clone(),
    })
}

/// Reads a bundle back (for tests and for tools): the manifest and the event lines, checksum verified.
pub fn read_bundle(path: &Path) -> Result<(Manifest, Vec<String>), String> {
    use std::io::BufRead;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut lines = std::io::BufReader::new(flate2::read::GzDecoder::new(file)).lines();
    let head = lines
        .next()
        .ok_or("empty bundle")?
        .map_err(|e| e.to_string())?;
    let v: serde_json::Value = serde_json::from_str(&head).map_err(|e| e.to_string())?;
    let manifest: Manifest =
        serde_json::from_value(v["manifest"].clone()).map_err(|e| e.to_string())?;
    let mut hasher = Sha256::new();
    let mut events = Vec::new();
    for line in lines {
        let line = line.map_err(|e| e.to_string())?;
        hasher.update(line.as_bytes());
        hasher.update(b"\n");
        events.push(line);
    }
    if hex::encode(hasher.finalize()) != manifest.checksum.value {
        return Err("checksum mismatch".into());
    }
    if events.len() as u64 != manifest.counts.events {
        return Err("event count mismatch".into());
    }
    Ok((manifest, events))
}
