//! The air-gapped export bundle: what `apiary-agent export` writes and `apiary-ingest import` reads.
//!
//! ## Format (version 1)
//! NDJSON (UTF-8, `\n` line ends), gzip-compressed by the caller (this module sees the plain lines):
//! 1. line 1 is the manifest, `{"manifest": {...}}` ([`Manifest`]):
//!    - `format`: `"apiary-export"`, `format_version`: 1, `schema_version`: the canonical event version (1)
//!    - `created_at` (RFC 3339 UTC), `agent_version`, `device_id`
//!    - `policy_hash`: the policy the events were redacted under (when several were, the first of
//!      `policy_hashes`); `policy_hashes`: all of them
//!    - `sessions`: a [`SessionBinding`] for every session the events reference, and their parents
//!    - `counts`: `{"events": n, "by_type": {"llm.turn": n, ...}, "held": n}` (`held`: captured while sync
//!      was off)
//!    - `checksum`: `{"algorithm": "sha256", "over": "event_lines", "value": hex}` — SHA-256 over the
//!      bytes of lines 2..n exactly as written, each including its trailing `\n` ([`EventLinesHash`])
//!    - a sealed bundle's line 1 also carries `"signature"`, the device key's seal over the manifest
//!      ([`seal`]): `{"manifest": {...}, "signature": {...}}`
//! 2. lines 2..n: one redacted canonical event each (the same JSON the push loop would send).
//!
//! ## Writing and reading
//! The writer needs the checksum before the lines, so it makes two passes over the same events: hash them
//! with [`EventLinesHash`] into the [`Manifest`], then [`write_manifest`] and [`write_event_line`] each.
//! The reader, [`verify`] (or [`verify_chunked`], which also keeps line 1's exact manifest bytes, the
//! seal and a digest of every chunk of event lines), checks the checksum and the count before anything
//! is loaded; [`event_lines`] (or [`raw_event_lines`]) then yields the events. An importer that reads
//! the file twice compares each chunk's digest on the second pass ([`ChunkDigest`]), so a file changed
//! between the passes cannot slip in events the first pass did not verify. Reading is tolerant of the older spellings some writers used (`device` as a
//! string or `{device_id}`, `session_bindings`, `event_count`/`events`, a plain hex checksum under
//! `checksum` or `sha256`, with or without `sha256:`), and of a last line without its newline.
//!
//! Pure: `Read`/`Write`/`BufRead` only, no files, no compression.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::batch::SessionBinding;

pub mod seal;

pub use seal::Seal;

/// `format` of a bundle.
pub const FORMAT: &str = "apiary-export";
/// `format_version` this build writes.
pub const FORMAT_VERSION: u32 = 1;

/// The `manifest` object of a bundle, as written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub format: String,
    pub format_version: u32,
    pub schema_version: u32,
    pub created_at: DateTime<Utc>,
    pub agent_version: String,
    pub device_id: Option<String>,
    pub policy_hash: String,
    pub policy_hashes: Vec<String>,
    pub sessions: Vec<SessionBinding>,
    pub counts: ManifestCounts,
    pub checksum: Checksum,
}

/// `counts` of a manifest.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ManifestCounts {
    pub events: u64,
    pub by_type: BTreeMap<String, u64>,
    pub held: u64,
}

/// `checksum` of a manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checksum {
    /// `sha256`.
    pub algorithm: String,
    /// `event_lines`.
    pub over: String,
    /// Lower-case hex.
    pub value: String,
}

/// The checksum of the event lines, fed one line at a time (without its `\n`).
#[derive(Default)]
pub struct EventLinesHash(Sha256);

impl EventLinesHash {
    pub fn add_line(&mut self, line: &str) {
        self.0.update(line.as_bytes());
        self.0.update(b"\n");
    }

    pub fn finish(self) -> Checksum {
        Checksum {
            algorithm: "sha256".into(),
            over: "event_lines".into(),
            value: hex::encode(self.0.finalize()),
        }
    }
}

/// Writes line 1, `{"manifest": ...}`.
pub fn write_manifest<W: Write>(w: &mut W, manifest: &Manifest) -> std::io::Result<()> {
    let head = serde_json::json!({ "manifest": manifest });
    writeln!(w, "{head}")
}

/// Writes one event line (the event's JSON, as hashed).
pub fn write_event_line<W: Write>(w: &mut W, line: &str) -> std::io::Result<()> {
    w.write_all(line.as_bytes())?;
    w.write_all(b"\n")
}

/// Why a bundle cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("{0}")]
    Read(#[from] std::io::Error),
    #[error("not an export bundle: {0}")]
    Format(String),
    #[error("checksum mismatch: the manifest says {expected}, the events hash to {actual}")]
    Checksum { expected: String, actual: String },
    #[error("the manifest counts {expected} events, the bundle holds {actual}")]
    Count { expected: u64, actual: u64 },
    /// A seal that does not verify (see [`seal`]).
    #[error("signature refused: {0}")]
    Seal(String),
}

/// What an importer needs from a manifest, read tolerantly (see the module notes).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ManifestHead {
    pub device_id: Option<String>,
    pub agent_version: String,
    pub policy_hash: String,
    pub sessions: Vec<SessionBinding>,
    pub event_count: Option<u64>,
    /// Lower-case hex.
    pub sha256: String,
}

impl ManifestHead {
    /// Parses line 1.
    pub fn parse(line: &str) -> Result<ManifestHead, BundleError> {
        Ok(FirstLine::parse(line)?.head)
    }

    /// Reads the `manifest` object.
    fn from_manifest(m: &Value) -> Result<ManifestHead, BundleError> {
        let format = |m: String| BundleError::Format(m);
        let s = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
        let device_id = s("device_id").or_else(|| {
            let d = m.get("device")?;
            d.as_str()
                .map(str::to_string)
                .or_else(|| d.get("device_id")?.as_str().map(str::to_string))
        });
        let sessions = match m.get("sessions").or_else(|| m.get("session_bindings")) {
            Some(v) => serde_json::from_value(v.clone())
                .map_err(|e| format(format!("manifest sessions: {e}")))?,
            None => vec![],
        };
        let event_count = m
            .get("event_count")
            .or_else(|| m.get("events"))
            .or_else(|| m.get("counts").and_then(|c| c.get("events")))
            .and_then(Value::as_u64);
        let sha256 = match m.get("checksum") {
            Some(Value::Object(c)) => {
                let algo = c
                    .get("algorithm")
                    .and_then(Value::as_str)
                    .unwrap_or("sha256");
                if !algo.eq_ignore_ascii_case("sha256") {
                    return Err(format(format!(
                        "checksum algorithm {algo:?} is not supported"
                    )));
                }
                c.get("value").and_then(Value::as_str).map(str::to_string)
            }
            Some(Value::String(c)) => Some(c.clone()),
            _ => s("sha256"),
        }
        .map(|c| c.trim_start_matches("sha256:").to_ascii_lowercase())
        .ok_or_else(|| format("the manifest has no sha256 checksum".into()))?;
        Ok(ManifestHead {
            device_id,
            agent_version: s("agent_version").unwrap_or_else(|| "unknown".into()),
            policy_hash: s("policy_hash").unwrap_or_else(|| "unknown".into()),
            sessions,
            event_count,
            sha256,
        })
    }
}

/// Line 1 as read: the manifest (tolerantly, see the module notes), its exact bytes, and the seal.
#[derive(Debug, Clone, PartialEq)]
pub struct FirstLine {
    pub head: ManifestHead,
    /// The `manifest` value's bytes as they stand in the file (what a seal signs).
    pub manifest_json: String,
    pub seal: Option<Seal>,
}

/// Line 1's shape: the manifest's raw bytes and the optional seal; nothing else.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFirstLine<'a> {
    #[serde(borrow)]
    manifest: &'a serde_json::value::RawValue,
    #[serde(default)]
    signature: Option<Seal>,
}

impl FirstLine {
    /// Parses line 1 (without its line end).
    pub fn parse(line: &str) -> Result<FirstLine, BundleError> {
        let format = |m: String| BundleError::Format(m);
        let v: Value = serde_json::from_str(line).map_err(|e| format(format!("line 1: {e}")))?;
        let m = v
            .get("manifest")
            .ok_or_else(|| format("line 1 is not {\"manifest\": ...}".into()))?;
        let head = ManifestHead::from_manifest(m)?;
        let raw: RawFirstLine =
            serde_json::from_str(line).map_err(|e| format(format!("line 1: {e}")))?;
        Ok(FirstLine {
            head,
            manifest_json: raw.manifest.get().to_string(),
            seal: raw.signature,
        })
    }
}

/// The digest of one chunk of event lines: SHA-256 over the raw bytes of up to `n` non-blank lines
/// (each with its `\n`, when it has one).
#[derive(Default)]
pub struct ChunkDigest {
    hash: Sha256,
    lines: usize,
}

impl ChunkDigest {
    pub fn add(&mut self, raw_line: &[u8]) {
        self.hash.update(raw_line);
        self.lines += 1;
    }

    /// Lines added since the last [`ChunkDigest::take`].
    pub fn lines(&self) -> usize {
        self.lines
    }

    /// The digest so far; starts the next chunk.
    pub fn take(&mut self) -> [u8; 32] {
        self.lines = 0;
        std::mem::take(&mut self.hash).finalize().into()
    }
}

/// What [`verify_chunked`] read.
#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    pub first: FirstLine,
    /// The [`ChunkDigest`] of each run of `chunk_lines` event lines, in order (the last may be shorter).
    pub chunks: Vec<[u8; 32]>,
}

fn is_blank(line: &[u8]) -> bool {
    line.iter().all(u8::is_ascii_whitespace)
}

/// Reads the whole bundle once: the manifest, then the checksum and count of the event lines, checked.
pub fn verify<R: BufRead>(r: R) -> Result<ManifestHead, BundleError> {
    Ok(verify_chunked(r, usize::MAX)?.first.head)
}

/// [`verify`], keeping line 1 whole and the digest of every `chunk_lines` event lines.
pub fn verify_chunked<R: BufRead>(mut r: R, chunk_lines: usize) -> Result<Verified, BundleError> {
    let mut first = String::new();
    r.read_line(&mut first)?;
    let first = FirstLine::parse(first.trim_end())?;
    let manifest = &first.head;
    let mut hash = Sha256::new();
    let (mut count, mut last) = (0u64, Vec::new());
    let (mut chunk, mut chunks) = (ChunkDigest::default(), Vec::new());
    let mut line = Vec::new();
    loop {
        line.clear();
        if r.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        hash.update(&line);
        if !is_blank(&line) {
            count += 1;
            chunk.add(&line);
            if chunk.lines() >= chunk_lines {
                chunks.push(chunk.take());
            }
        }
        last.clone_from(&line);
    }
    if chunk.lines() > 0 {
        chunks.push(chunk.take());
    }
    let actual = hex::encode(hash.clone().finalize());
    // Also accept a checksum computed as if the last line ended with a newline.
    let with_newline = (!last.is_empty() && !last.ends_with(b"\n")).then(|| {
        hash.update(b"\n");
        hex::encode(hash.finalize())
    });
    if manifest.sha256 != actual && with_newline.as_ref() != Some(&manifest.sha256) {
        return Err(BundleError::Checksum {
            expected: manifest.sha256.clone(),
            actual,
        });
    }
    if let Some(expected) = manifest.event_count.filter(|n| *n != count) {
        return Err(BundleError::Count {
            expected,
            actual: count,
        });
    }
    Ok(Verified { first, chunks })
}

/// The event lines of a bundle raw (each with its `\n` when it has one), blank lines skipped, each
/// with its line number; for an importer that checks [`ChunkDigest`]s on its second pass.
pub fn raw_event_lines<R: BufRead>(
    mut r: R,
) -> Result<impl Iterator<Item = Result<(usize, Vec<u8>), BundleError>>, BundleError> {
    let mut skip = Vec::new();
    r.read_until(b'\n', &mut skip)?;
    let mut line_no = 1;
    Ok(std::iter::from_fn(move || loop {
        let mut line = Vec::new();
        match r.read_until(b'\n', &mut line) {
            Err(e) => return Some(Err(BundleError::Read(e))),
            Ok(0) => return None,
            Ok(_) => {}
        }
        line_no += 1;
        if !is_blank(&line) {
            return Some(Ok((line_no, line)));
        }
    }))
}

/// The event lines of a bundle (after [`verify`]): skips the manifest line and blank lines; each item
/// is (line number, the event's JSON value).
pub fn event_lines<R: BufRead>(
    mut r: R,
) -> Result<impl Iterator<Item = Result<(usize, Value), BundleError>>, BundleError> {
    let mut skip = String::new();
    r.read_line(&mut skip)?;
    Ok(r.lines().enumerate().filter_map(|(i, line)| {
        let line_no = i + 2;
        match line {
            Err(e) => Some(Err(BundleError::Read(e))),
            Ok(l) if l.trim().is_empty() => None,
            Ok(l) => Some(
                serde_json::from_str(&l)
                    .map(|v| (line_no, v))
                    .map_err(|e| BundleError::Format(format!("line {line_no}: {e}"))),
            ),
        }
    }))
}

#[cfg(test)]
mod tests;
