//! `apiary-ingest import FILE --tenant T`: loads an air-gapped agent's export bundle.
//!
//! Bundle format: the shared contract [`apiary_schema::bundle`] (written by `apiary-agent export`), gzip
//! NDJSON, a manifest line then one canonical event per line. Its reader verifies the checksum and the
//! count over the whole file before anything is stored. Events then go through exactly the batch path of `POST /v1/batches` — same
//! validation, allowlist and dedup — in chunks, so importing twice changes nothing. No clock correction
//! (a bundle is loaded long after it was written) and no device liveness (an import says nothing about
//! whether the device is up now). Progress goes to stderr.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use apiary_schema::bundle::{self, BundleError, ManifestHead};
use apiary_schema::BatchResponse;
use serde_json::{json, Value};
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
    /// Not a bundle, or one that fails its checksum or count ([`apiary_schema::bundle::verify`]).
    #[error(transparent)]
    Bundle(BundleError),
    #[error("refused: {0}")]
    Refused(String),
}

fn open(path: &Path) -> Result<impl BufRead, ImportError> {
    let f = File::open(path).map_err(|e| ImportError::Read(path.display().to_string(), e))?;
    Ok(BufReader::new(flate2::read::MultiGzDecoder::new(
        BufReader::new(f),
    )))
}

/// A bundle error, with the file named when it is a read error.
fn bundle_error(path: &Path) -> impl Fn(BundleError) -> ImportError + '_ {
    move |e| match e {
        BundleError::Read(io) => ImportError::Read(path.display().to_string(), io),
        other => ImportError::Bundle(other),
    }
}

/// First pass: the manifest, and the checksum and count of the event lines (the shared reader).
pub fn verify(path: &Path) -> Result<ManifestHead, ImportError> {
    bundle::verify(open(path)?).map_err(bundle_error(path))
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
    let mut principal = Principal::command_line(tenant_id);
    principal.colony_names = crate::store::admin::tenant_settings(&store.pool, tenant_id)
        .await?
        .colony_names;
    let policy = apiary_schema::Policy::default_policy().with_colony_names();
    let sender = Sender {
        tenant_id,
        user_id: None,
        device_id: None,
        live: false,
    };
    let mut summary = BatchResponse::default();
    let mut lines = bundle::event_lines(open(path)?).map_err(bundle_error(path))?;
    let mut chunk: Vec<Value> = Vec::with_capacity(CHUNK);
    loop {
        let at_end = match lines.next().transpose().map_err(bundle_error(path))? {
            Some((_, event)) => {
                chunk.push(event);
                false
            }
            None => true,
        };
        if chunk.len() >= CHUNK || (at_end && !chunk.is_empty()) {
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
                    .map_err(|e| refused(e.into()))?;
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
        if at_end {
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
