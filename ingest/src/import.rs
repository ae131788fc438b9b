//! `apiary-ingest import FILE --tenant T`: loads an air-gapped agent's export bundle.
//!
//! Bundle format (written by `apiary-agent export`, see `agent/src/outbox/export.rs`): gzip NDJSON. Line 1
//! is `{"manifest": {...}}` with `device_id`, `agent_version`, `sessions` (bindings), `policy_hash`,
//! `counts.events` and `checksum: {"algorithm": "sha256", "over": "event_lines", "value"}`;
//! every following line is one canonical event. The checksum is verified over the whole file before
//! anything is stored (it covers the bytes after the manifest line; a bundle whose last line lacks the
//! newline is accepted too). Events then go through exactly the batch path of `POST /v1/batches` — same
//! validation, allowlist and dedup — in chunks, so importing twice changes nothing. No clock correction
//! (a bundle is loaded long after it was written) and no device liveness (an import says nothing about
//! whether the device is up now). Progress goes to stderr.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use apiary_schema::{BatchResponse, SessionBinding};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::auth::Principal;
use crate::error::ApiError;
use crate::intake::{check_batch_value, IntakeRules};
use crate::store::batch::{self, Sender};
use crate::store::Store;

/// Events per stored chunk.
const CHUNK: usize = 1000;

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read {0}: {1}")]
    Read(String, std::io::Error),
    #[error("not an export bundle: {0}")]
    Format(String),
    #[error("checksum mismatch: the manifest says {expected}, the events hash to {actual}")]
    Checksum { expected: String, actual: String },
    #[error("the manifest counts {expected} events, the bundle holds {actual}")]
    Count { expected: u64, actual: u64 },
    #[error("refused: {0}")]
    Refused(String),
}

/// What the manifest says (read tolerantly: only what the import needs).
#[derive(Debug, Clone, Default)]
pub struct Manifest {
    pub device_id: Option<String>,
    pub agent_version: String,
    pub policy_hash: String,
    pub sessions: Vec<SessionBinding>,
    pub event_count: Option<u64>,
    pub sha256: Option<String>,
}

impl Manifest {
    fn parse(line: &str) -> Result<Manifest, ImportError> {
        let v: Value =
            serde_json::from_str(line).map_err(|e| ImportError::Format(format!("line 1: {e}")))?;
        let m = v
            .get("manifest")
            .ok_or_else(|| ImportError::Format("line 1 is not {\"manifest\": ...}".into()))?;
        let s = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
        let device_id = s("device_id").or_else(|| {
            let d = m.get("device")?;
            d.as_str()
                .map(str::to_string)
                .or_else(|| d.get("device_id")?.as_str().map(str::to_string))
        });
        let sessions = match m.get("sessions").or_else(|| m.get("session_bindings")) {
            Some(v) => serde_json::from_value(v.clone())
                .map_err(|e| ImportError::Format(format!("manifest sessions: {e}")))?,
            None => vec![],
        };
        let event_count = m
            .get("event_count")
            .or_else(|| m.get("events"))
            .or_else(|| m.get("counts").and_then(|c| c.get("events")))
            .and_then(Value::as_u64);
        // `checksum: {"algorithm": "sha256", "over": "event_lines", "value": hex}` (agent bundle v1), or a
        // plain hex string under `sha256` / `checksum`.
        let sha256 = match m.get("checksum") {
            Some(Value::Object(c)) => {
                let algo = c
                    .get("algorithm")
                    .and_then(Value::as_str)
                    .unwrap_or("sha256");
                if !algo.eq_ignore_ascii_case("sha256") {
                    return Err(ImportError::Format(format!(
                        "checksum algorithm {algo:?} is not supported"
                    )));
                }
                c.get("value").and_then(Value::as_str).map(str::to_string)
            }
            Some(Value::String(c)) => Some(c.clone()),
            _ => s("sha256"),
        }
        .map(|c| c.trim_start_matches("sha256:").to_ascii_lowercase());
        Ok(Manifest {
            device_id,
            agent_version: s("agent_version").unwrap_or_else(|| "unknown".into()),
            policy_hash: s("policy_hash").unwrap_or_else(|| "unknown".into()),
            sessions,
            event_count,
            sha256,
        })
    }
}

fn open(path: &Path) -> Result<impl BufRead, ImportError> {
    let f = File::open(path).map_err(|e| ImportError::Read(path.display().to_string(), e))?;
    Ok(BufReader::new(flate2::read::MultiGzDecoder::new(
        BufReader::new(f),
    )))
}

/// First pass: the manifest, and the checksum and count of the event lines.
pub fn verify(path: &Path) -> Result<Manifest, ImportError> {
    let shown = path.display().to_string();
    let mut r = open(path)?;
    let mut first = String::new();
    r.read_line(&mut first)
        .map_err(|e| ImportError::Read(shown.clone(), e))?;
    let manifest = Manifest::parse(first.trim_end())?;
    let mut hash = Sha256::new();
    let (mut count, mut last) = (0u64, Vec::new());
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = r
            .read_until(b'\n', &mut line)
            .map_err(|e| ImportError::Read(shown.clone(), e))?;
        if n == 0 {
            break;
        }
        hash.update(&line);
        if line.iter().any(|b| !b.is_ascii_whitespace()) {
            count += 1;
        }
        last.clone_from(&line);
    }
    let actual = hex::encode(hash.clone().finalize());
    // Also accept a checksum computed as if the last line ended with a newline.
    let with_newline = (!last.is_empty() && !last.ends_with(b"\n")).then(|| {
        hash.update(b"\n");
        hex::encode(hash.finalize())
    });
    if let Some(expected) = &manifest.sha256 {
        if *expected != actual && with_newline.as_ref() != Some(expected) {
            return Err(ImportError::Checksum {
                expected: expected.clone(),
                actual,
            });
        }
    } else {
        return Err(ImportError::Format(
            "the manifest has no sha256 checksum".into(),
        ));
    }
    if let Some(expected) = manifest.event_count {
        if expected != count {
            return Err(ImportError::Count {
                expected,
                actual: count,
            });
        }
    }
    Ok(manifest)
}

/// Verifies, then stores the bundle for `tenant_id`; returns the summed verdicts.
pub async fn run(
    store: &Store,
    rules: &IntakeRules,
    tenant_id: Uuid,
    path: &Path,
) -> Result<BatchResponse, anyhow::Error> {
    let manifest = verify(path)?;
    let total = manifest.event_count;
    let principal = Principal::command_line(tenant_id);
    let policy = apiary_schema::Policy::default_policy();
    let sender = Sender {
        tenant_id,
        user_id: None,
        device_id: None,
        live: false,
    };
    let mut summary = BatchResponse::default();
    let mut r = open(path)?;
    let mut skip = String::new();
    r.read_line(&mut skip)?;
    let mut chunk: Vec<Value> = Vec::with_capacity(CHUNK);
    let mut lines = r.lines();
    let mut line_no = 1usize;
    loop {
        let next = lines.next().transpose()?;
        if let Some(line) = &next {
            line_no += 1;
            if line.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(line)
                .map_err(|e| ImportError::Format(format!("line {line_no}: {e}")))?;
            chunk.push(v);
        }
        if chunk.len() >= CHUNK || (next.is_none() && !chunk.is_empty()) {
            let mut agent = json!({ "agent_version": manifest.agent_version });
            if let Some(d) = &manifest.device_id {
                agent["device_id"] = d.as_str().into();
            }
            let batch = json!({
                "schema_version": 1, "batch_id": Uuid::new_v4(), "sent_at": chrono::Utc::now(), "agent": agent,
                "policy_hash": manifest.policy_hash, "sessions": manifest.sessions,
                "events": std::mem::take(&mut chunk),
            });
            let checked =
                check_batch_value(batch, &principal, &policy, rules, chrono::Utc::now(), false)
                    .map_err(refused)?;
            let r = batch::write(store, &sender, checked)
                .await
                .map_err(refused)?;
            summary.accepted += r.accepted;
            summary.duplicates += r.duplicates;
            summary.rejected.extend(r.rejected);
            let done = summary.accepted + summary.duplicates + summary.rejected.len() as u64;
            match total {
                Some(t) => eprintln!(
                    "import: {done}/{t} events (accepted {}, duplicates {}, rejected {})",
                    summary.accepted,
                    summary.duplicates,
                    summary.rejected.len()
                ),
                None => eprintln!("import: {done} events"),
            }
        }
        if next.is_none() {
            break;
        }
    }
    Ok(summary)
}

fn refused(e: ApiError) -> ImportError {
    match e {
        ApiError::Invalid { message, details } => {
            ImportError::Refused(format!("{message}: {}", details.join("; ")))
        }
        other => ImportError::Refused(other.to_string()),
    }
}
