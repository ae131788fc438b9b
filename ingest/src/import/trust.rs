//! Whom an imported bundle speaks for: its seal checked, then its key looked up.
//!
//! ## The rule
//! 1. **Pass 1** ([`inspect`]) reads the whole file before anything is stored: gzip's CRC-32 and length,
//!    the manifest's checksum and count of the event lines, and — when line 1 carries a seal — the
//!    signature over the manifest and gzip's fixed header ([`apiary_schema::bundle::seal`]). A seal that
//!    does not verify is always refused: the file was changed after its device signed it, and no flag
//!    overrides that.
//! 2. **Key** ([`authorize`]): a verified seal whose key is registered in the tenant and not revoked
//!    binds the bundle to that key's user and device; every event is then judged as that device's token
//!    would judge it online (same session ownership, same refusals per event).
//! 3. Otherwise — no seal (an older agent), a key the tenant never registered, or a revoked key — the
//!    bundle is refused with the reason and what to do, unless the admin vouches for it with
//!    `--trust-unsigned --as-user U --device D`: then it is bound to that user and device instead. A
//!    bundle sealed by an active registered key cannot be re-bound that way (it is refused with the key's
//!    device named).
//! 4. **Revocation is final and dateless**: a revoked key's bundles are refused whenever they were
//!    written, because the times inside a bundle are written by its signer and a stolen key could
//!    backdate them. Bundles of a key retired in good order are imported with `--trust-unsigned`.
//! 5. The bundle's own device id, when it names one, must be the bound device (as a batch's
//!    `agent.device_id` must be its token's device).

use std::fs::File;
use std::io::{BufReader, Read, Seek};
use std::path::Path;

use apiary_schema::bundle::{self, BundleError, Verified};
use apiary_schema::device_key::PublicKey;
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use super::ImportError;
use crate::store::device_keys;

/// gzip's fixed header: magic, method, flags, time, extra flags, system.
pub const GZIP_HEADER_LEN: usize = 10;

/// How far the admin vouches for a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trust {
    /// Only a bundle sealed by an active registered key is imported.
    Sealed,
    /// `--trust-unsigned --as-user U --device D`: a bundle without a usable seal is imported as this
    /// user and device.
    Unsigned { user_id: String, device_id: String },
}

/// What pass 1 found.
#[derive(Debug)]
pub struct Inspected {
    pub verified: Verified,
    /// The key whose seal verified, if the bundle is sealed.
    pub key: Option<PublicKey>,
}

/// Whom the bundle is bound to, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Binding {
    pub user_id: Option<String>,
    pub device_id: String,
    /// The fingerprint of the registered key that sealed it; None when the admin vouched for it.
    pub signed_by: Option<String>,
    /// Imported on the admin's word (`--trust-unsigned`).
    pub trusted_unsigned: bool,
}

/// The decompressed stream of `file`, from its start.
pub fn decompress(file: &mut File) -> std::io::Result<impl std::io::BufRead + '_> {
    file.rewind()?;
    Ok(BufReader::new(flate2::read::MultiGzDecoder::new(
        BufReader::new(file),
    )))
}

/// Pass 1 (see the module notes) over the open `file`, digesting its event lines in chunks of
/// `chunk_lines` for pass 2.
pub fn inspect(path: &Path, file: &mut File, chunk_lines: usize) -> Result<Inspected, ImportError> {
    let read = |e: std::io::Error| ImportError::Read(path.display().to_string(), e);
    let mut header = [0u8; GZIP_HEADER_LEN];
    file.read_exact(&mut header).map_err(|e| {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            ImportError::Bundle(BundleError::Format(
                "the file is too short to be a gzip bundle".into(),
            ))
        } else {
            read(e)
        }
    })?;
    let verified = bundle::verify_chunked(decompress(file).map_err(read)?, chunk_lines).map_err(
        |e| match e {
            BundleError::Read(io) => ImportError::Read(path.display().to_string(), io),
            other => ImportError::Bundle(other),
        },
    )?;
    let key = match &verified.first.seal {
        None => None,
        Some(seal) => Some(
            seal.check(&header, &verified.first.manifest_json)
                .map_err(ImportError::Bundle)?,
        ),
    };
    Ok(Inspected { verified, key })
}

/// Step 2–5 of the module notes: the binding the bundle is imported under, or why it is refused.
pub async fn authorize(
    pool: &PgPool,
    tenant_id: Uuid,
    inspected: &Inspected,
    trust: &Trust,
) -> Result<Binding, ImportError> {
    let refused = |m: String| Err(ImportError::Refused(m));
    let vouched = |how: &str| match trust {
        Trust::Unsigned { user_id, device_id } => {
            tracing::warn!(%tenant_id, user_id, device_id, "importing {how} on the admin's word (--trust-unsigned)");
            Ok(Binding {
                user_id: Some(user_id.clone()),
                device_id: device_id.clone(),
                signed_by: None,
                trusted_unsigned: true,
            })
        }
        Trust::Sealed => Err(()),
    };
    const VOUCH: &str =
        "if you vouch for this file, import it with --trust-unsigned --as-user U --device D";
    let binding = match &inspected.key {
        None => match vouched("an unsigned bundle") {
            Ok(b) => b,
            Err(()) => {
                return refused(format!(
                    "the bundle is not signed (an agent older than device keys wrote it, or its \
                     signature was removed); {VOUCH}"
                ))
            }
        },
        Some(key) => {
            let fp = key.fingerprint();
            match device_keys::find(pool, tenant_id, key).await? {
                Some(k) if k.revoked_at.is_none() => {
                    if matches!(trust, Trust::Unsigned { .. }) {
                        return refused(format!(
                            "the bundle is sealed by key {fp}, registered for device {:?}{}: import it \
                             without --trust-unsigned (it is bound to that device)",
                            k.device_id,
                            k.user_id.as_ref().map(|u| format!(" of user {u:?}")).unwrap_or_default()
                        ));
                    }
                    Binding {
                        user_id: k.user_id,
                        device_id: k.device_id,
                        signed_by: Some(fp),
                        trusted_unsigned: false,
                    }
                }
                Some(k) => match vouched("a bundle of a revoked key") {
                    Ok(b) => b,
                    Err(()) => {
                        return refused(format!(
                            "the bundle is sealed by key {fp} of device {:?}, revoked at {}: a revoked \
                             key's bundles are refused whatever their date (a stolen key could backdate \
                             them); {VOUCH}",
                            k.device_id,
                            k.revoked_at.map(|t| t.to_rfc3339()).unwrap_or_default()
                        ))
                    }
                },
                None => match vouched("a bundle of an unregistered key") {
                    Ok(b) => b,
                    Err(()) => {
                        return refused(format!(
                            "the bundle is sealed by key {fp} ({}), which is not registered in this \
                             tenant: if it is the device's key (compare `apiary-agent identity show` on \
                             the device), register it with `apiary-ingest device register --tenant T \
                             --user U --device D --public-key {}`; {VOUCH}",
                            key.to_text(),
                            key.to_text()
                        ))
                    }
                },
            }
        }
    };
    if let Some(named) = &inspected.verified.first.head.device_id {
        if *named != binding.device_id {
            return refused(format!(
                "the bundle comes from device {named:?}, but it is bound to device {:?}{}",
                binding.device_id,
                if binding.trusted_unsigned {
                    " (--device must name the bundle's own device)"
                } else {
                    " (its key is registered for that device)"
                }
            ));
        }
    }
    Ok(binding)
}
