//! `apiary-ingest import FILE --tenant T [--trust-unsigned --as-user U --device D]`: loads an air-gapped
//! agent's export bundle.
//!
//! Bundle format: the shared contract [`apiary_schema::bundle`] (written by `apiary-agent export`), gzip
//! NDJSON, a manifest line (sealed by the device's key) then one canonical event per line.
//!
//! Two passes over one open file:
//! 1. [`trust::inspect`] verifies everything before anything is stored — gzip's CRC, the checksum and
//!    count of the event lines, the seal — and [`trust::authorize`] decides whom the bundle speaks for
//!    (the registered key's device and user, or the admin's `--as-user`/`--device`); see [`trust`] for
//!    the rule and every refusal.
//! 2. The events go through exactly the batch path of `POST /v1/batches` — same validation, allowlist,
//!    dedup and session ownership — as a token bound to that device and user, in chunks of [`CHUNK`]
//!    events, so importing twice changes nothing and an event in another user's session is refused on its
//!    own, as it would be online. Each chunk's lines are digested again and compared with pass 1's
//!    digest before the chunk is stored: a file changed between the passes stops the import there (the
//!    chunks before it were the verified ones).
//!
//! No clock correction (a bundle is loaded long after it was written) and no device liveness (an import
//! says nothing about whether the device is up now). Progress goes to stderr.

pub mod trust;

use std::fs::File;
use std::path::Path;

use apiary_schema::bundle::{self, BundleError, ChunkDigest, ManifestHead};
use apiary_schema::BatchResponse;
use serde::Serialize;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::auth::Principal;
use crate::error::ApiError;
use crate::intake::{check_batch_value, IntakeRules};
use crate::store::batch::{self, Sender};
use crate::store::Store;
pub use trust::{Binding, Trust};

/// Events per stored chunk.
const CHUNK: usize = 1000;

/// Why an import failed.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("cannot read {0}: {1}")]
    Read(String, std::io::Error),
    /// Not a bundle, or one that fails its checksum, count or seal ([`apiary_schema::bundle`]).
    #[error(transparent)]
    Bundle(BundleError),
    #[error("refused: {0}")]
    Refused(String),
    #[error("database query failed")]
    Query(#[from] sqlx::Error),
}

/// What an import did: the summed verdicts and whom the events were bound to.
#[derive(Debug, Clone, Serialize)]
pub struct ImportSummary {
    #[serde(flatten)]
    pub verdicts: BatchResponse,
    #[serde(flatten)]
    pub binding: Binding,
}

/// Opens the bundle once for both passes (the same file, whatever happens to its path meanwhile).
pub fn open(path: &Path) -> Result<File, ImportError> {
    File::open(path).map_err(|e| ImportError::Read(path.display().to_string(), e))
}

/// Pass 1 alone (no database): the file's checksum, count and seal checked; the manifest and the key
/// whose seal verified, if it is sealed.
pub fn verify(path: &Path) -> Result<trust::Inspected, ImportError> {
    let mut file = open(path)?;
    trust::inspect(path, &mut file, CHUNK)
}

/// Verifies, authorizes, then stores the bundle for `tenant_id` (see the module notes).
pub async fn run(
    store: &Store,
    rules: &IntakeRules,
    tenant_id: Uuid,
    path: &Path,
    trust: &Trust,
) -> Result<ImportSummary, anyhow::Error> {
    let mut file = open(path)?;
    let inspected = trust::inspect(path, &mut file, CHUNK)?;
    let binding = trust::authorize(&store.pool, tenant_id, &inspected, trust).await?;
    load(
        store, rules, tenant_id, path, &mut file, &inspected, binding,
    )
    .await
}

/// Pass 2 (see the module notes): stores the events of the open `file` that [`trust::inspect`]
/// verified (in chunks of [`CHUNK`]), bound as `binding` says.
pub async fn load(
    store: &Store,
    rules: &IntakeRules,
    tenant_id: Uuid,
    path: &Path,
    file: &mut File,
    inspected: &trust::Inspected,
    binding: Binding,
) -> Result<ImportSummary, anyhow::Error> {
    let manifest = &inspected.verified.first.head;
    let total = manifest.event_count;
    let mut principal = Principal::device_import(
        tenant_id,
        binding.user_id.clone(),
        binding.device_id.clone(),
    );
    principal.colony_names = crate::store::admin::tenant_settings(&store.pool, tenant_id)
        .await?
        .colony_names;
    let sender = Sender {
        tenant_id,
        user_id: binding.user_id.clone(),
        device_id: Some(binding.device_id.clone()),
        live: false,
    };
    let policy = apiary_schema::Policy::default_policy().with_colony_names();
    let mut summary = BatchResponse::default();
    let read_error = |e: BundleError| match e {
        BundleError::Read(io) => ImportError::Read(path.display().to_string(), io),
        other => ImportError::Bundle(other),
    };
    let mut lines = bundle::raw_event_lines(
        trust::decompress(file).map_err(|e| read_error(BundleError::Read(e)))?,
    )
    .map_err(read_error)?;
    let mut expected = inspected.verified.chunks.iter();
    let (mut digest, mut chunk) = (ChunkDigest::default(), Vec::<Value>::with_capacity(CHUNK));
    loop {
        let at_end = match lines.next().transpose().map_err(read_error)? {
            Some((line_no, raw)) => {
                digest.add(&raw);
                let event = serde_json::from_slice(&raw).map_err(|e| {
                    ImportError::Bundle(BundleError::Format(format!("line {line_no}: {e}")))
                })?;
                chunk.push(event);
                false
            }
            None => true,
        };
        if chunk.len() >= CHUNK || (at_end && !chunk.is_empty()) {
            if expected.next() != Some(&digest.take()) {
                return Err(ImportError::Refused(format!(
                    "{} changed while it was being imported: stopped before the events it did not hold \
                     when it was verified ({} events were stored)",
                    path.display(),
                    summary.accepted + summary.duplicates + summary.rejected.len() as u64
                ))
                .into());
            }
            let batch = chunk_batch(manifest, std::mem::take(&mut chunk));
            let checked =
                check_batch_value(batch, &principal, &policy, rules, chrono::Utc::now(), false)
                    .map_err(|e| refused(e.into()))?;
            let r = batch::write(store, &sender, checked)
                .await
                .map_err(refused)?;
            summary.accepted += r.accepted;
            summary.duplicates += r.duplicates;
            summary.rejected.extend(r.rejected);
            progress(&summary, total);
        }
        if at_end {
            break;
        }
    }
    Ok(ImportSummary {
        verdicts: summary,
        binding,
    })
}

/// One chunk as the batch the device would have pushed.
fn chunk_batch(manifest: &ManifestHead, events: Vec<Value>) -> Value {
    let mut agent = json!({ "agent_version": manifest.agent_version });
    if let Some(d) = &manifest.device_id {
        agent["device_id"] = d.as_str().into();
    }
    json!({
        "schema_version": 1, "batch_id": Uuid::new_v4(), "sent_at": chrono::Utc::now(), "agent": agent,
        "policy_hash": manifest.policy_hash, "sessions": manifest.sessions, "events": events,
    })
}

fn progress(summary: &BatchResponse, total: Option<u64>) {
    let done = summary.accepted + summary.duplicates + summary.rejected.len() as u64;
    match total {
        Some(t) => apiary_plumbing::errln!(
            "import: {done}/{t} events (accepted {}, duplicates {}, rejected {})",
            summary.accepted,
            summary.duplicates,
            summary.rejected.len()
        ),
        None => apiary_plumbing::errln!("import: {done} events"),
    }
}

fn refused(e: ApiError) -> ImportError {
    match e {
        ApiError::Invalid { message, details } => {
            ImportError::Refused(format!("{message}: {}", details.join("; ")))
        }
        other => ImportError::Refused(other.to_string()),
    }
}
