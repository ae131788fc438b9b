//! Air-gapped export: every pending event, whether or not sync is enabled, into one bundle file.
//!
//! ## Bundle format (version 1) — read by `apiary-ingest import`
//! The shared contract [`apiary_schema::bundle`]: a gzip stream of NDJSON, the manifest line (device,
//! session bindings, policy hashes, counts, SHA-256 of the event lines) then one redacted canonical event
//! per line, in commit order. This module gathers the rows; the shared writer lays out the bytes.
//!
//! ## Seal
//! Every bundle is sealed with the device key (`DIR/device.key` beside the outbox, created if missing;
//! [`crate::device_key`]): line 1 carries the key's signature over the manifest — which holds the
//! checksum of every event line — and gzip's fixed header ([`apiary_schema::bundle::seal`]). So the
//! importer knows which device wrote the bundle and that no byte of it changed since.
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

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use apiary_schema::bundle::{self, EventLinesHash, Seal};
use apiary_schema::device_key::SigningKey;
use chrono::Utc;
use flate2::write::GzEncoder;
use rusqlite::params;
use serde::Serialize;

use crate::outbox::error::{ExportError, OutboxError};
use crate::outbox::record::counters::Counter;
use crate::outbox::write::op::{Ctx, Task};
use crate::outbox::write::sessions;
use crate::outbox::write::store::state;

pub use apiary_schema::bundle::{Checksum, Manifest, ManifestCounts};

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
    let sql = ExportError::read;
    let key = device_key_of(conn).map_err(|e| ExportError::write(out, std::io::Error::other(e)))?;
    let tx = conn.unchecked_transaction().map_err(sql)?;
    let (manifest, last_seq) = try_build_manifest(&tx, device_id, policy_hash).map_err(sql)?;
    let report = write_bundle(&tx, out, &manifest, last_seq, &key)?;
    tx.finish().map_err(sql)?;
    Ok(Snapshot { report, last_seq })
}

/// Marks up to [`MARK_CHUNK`] rows pending with `after < seq <= last` as exported.
pub(crate) struct MarkExported {
    pub after: i64,
    pub last: i64,
}

/// How far marking got.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MarkProgress {
    pub marked: u64,
    /// The highest `seq` this chunk marked; the next chunk starts after it.
    pub upto: i64,
    pub done: bool,
}

impl Task for MarkExported {
    type Output = MarkProgress;

    fn apply(&mut self, ctx: &mut Ctx<'_>) -> rusqlite::Result<Result<MarkProgress, OutboxError>> {
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
        ctx.count(Counter::Exported, n);
        ctx.count(Counter::Pending, -n);
        ctx.count(Counter::PendingBytes, -bytes);
        Ok(Ok(MarkProgress {
            marked: n as u64,
            upto: marked
                .iter()
                .map(|(seq, _)| *seq)
                .max()
                .unwrap_or(self.last),
            done: n < MARK_CHUNK,
        }))
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
    let mut hasher = EventLinesHash::default();
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
            hasher.add_line(&body);
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
        format: bundle::FORMAT.into(),
        format_version: bundle::FORMAT_VERSION,
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
        checksum: hasher.finish(),
    };
    Ok((manifest, last_seq))
}

/// The device key of the outbox's data directory (the database's directory).
fn device_key_of(
    conn: &rusqlite::Connection,
) -> Result<SigningKey, crate::device_key::DeviceKeyError> {
    let db = Path::new(conn.path().unwrap_or_default());
    let dir = db
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    crate::device_key::load_or_create(dir)
}

/// The compression bundles are written with.
const LEVEL: flate2::Compression = flate2::Compression::new(6);

/// The 10 bytes of gzip's fixed header that [`GzEncoder`] writes at `LEVEL` (no name, no time): what
/// the seal covers besides the manifest.
fn gzip_header() -> Vec<u8> {
    let empty = GzEncoder::new(Vec::new(), LEVEL)
        .finish()
        .expect("writing to a Vec cannot fail");
    empty[..10].to_vec()
}

/// Pass 2: writes an exclusive, private temporary file beside `FILE`, fsyncs, renames it to `FILE`
/// ([`crate::private::AtomicFile`]: nothing planted is followed; on failure it is removed).
fn write_bundle(
    conn: &rusqlite::Connection,
    out: &Path,
    manifest: &Manifest,
    last_seq: i64,
    key: &SigningKey,
) -> Result<ExportReport, OutboxError> {
    let io = |e: std::io::Error| ExportError::write(out, e);
    let mut tmp = crate::private::AtomicFile::create(out).map_err(io)?;
    let mut gz = GzEncoder::new(std::io::BufWriter::new(tmp.file()), LEVEL);
    let manifest_json = serde_json::to_string(manifest).map_err(|e| io(e.into()))?;
    let seal = Seal::sign(key, &gzip_header(), &manifest_json);
    bundle::seal::write_sealed_manifest(&mut gz, &manifest_json, &seal).map_err(io)?;
    let sql = ExportError::read;
    let mut stmt = conn
        .prepare("SELECT body FROM events WHERE state = 0 AND seq <= ?1 ORDER BY seq")
        .map_err(sql)?;
    let mut rows = stmt.query([last_seq]).map_err(sql)?;
    while let Some(r) = rows.next().map_err(sql)? {
        let body: String = r.get(0).map_err(sql)?;
        bundle::write_event_line(&mut gz, &body).map_err(io)?;
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

/// Reads a bundle back (for tests and for tools): the manifest and the event lines, checksum and count
/// verified by the shared reader.
pub fn read_bundle(path: &Path) -> Result<(Manifest, Vec<String>), String> {
    use std::io::{BufRead, BufReader, Read};
    let mut text = Vec::new();
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    flate2::read::GzDecoder::new(file)
        .read_to_end(&mut text)
        .map_err(|e| e.to_string())?;
    bundle::verify(text.as_slice()).map_err(|e| e.to_string())?;
    let mut lines = BufReader::new(text.as_slice()).lines();
    let head = lines
        .next()
        .ok_or("empty bundle")?
        .map_err(|e| e.to_string())?;
    let v: serde_json::Value = serde_json::from_str(&head).map_err(|e| e.to_string())?;
    let manifest: Manifest =
        serde_json::from_value(v["manifest"].clone()).map_err(|e| e.to_string())?;
    let events = lines
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    Ok((manifest, events))
}
