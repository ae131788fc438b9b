//! A bundle's seal: the device key's signature over the manifest, which holds the SHA-256 of every
//! event line — so the seal vouches for the whole bundle and says which device wrote it.
//!
//! ## Layout
//! Line 1 of a sealed bundle is `{"manifest":M,"signature":S}`: `M` is the manifest exactly as the
//! writer serialized it, `S` a [`Seal`]:
//! `{"scheme":"apiary-bundle-seal-v1","public_key":"ed25519:…","value":"<base64 signature>"}`.
//! An unsealed bundle (older agents) has no `signature`; readers that predate seals ignore it.
//!
//! ## What is signed ([`message`])
//! `apiary-bundle-seal-v1\n` + the container's fixed header + the bytes of `M` as they stand in the
//! file. The container is gzip, whose first 10 bytes (magic, method, flags, time, extra flags, system)
//! are not part of the compressed data and would otherwise be free to change; signing them leaves no
//! byte of the file that can change without the import noticing: the compressed data is checked by
//! gzip's CRC-32 and length, the decompressed event lines by the manifest's checksum, the manifest and
//! the header by the signature, and the seal's own bytes by the signature or its parsing. Re-compressing
//! a sealed bundle therefore breaks its seal (its header changes).
//!
//! Verification is strict (see [`crate::device_key`]); [`Seal::check`] proves only that the key named
//! in the seal signed this manifest. Whether that key belongs to a registered, unrevoked device is the
//! importer's question.

use std::io::Write;

use serde::{Deserialize, Serialize};

use super::BundleError;
use crate::device_key::{PublicKey, SigningKey};

/// The one seal scheme this build writes and reads.
pub const SCHEME: &str = "apiary-bundle-seal-v1";

/// The `signature` object of line 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Seal {
    /// [`SCHEME`].
    pub scheme: String,
    /// The signing device's public key, `ed25519:BASE64`.
    pub public_key: String,
    /// The signature of [`message`], base64.
    pub value: String,
}

/// What a seal signs (see the module notes).
pub fn message(container_header: &[u8], manifest_json: &str) -> Vec<u8> {
    let mut m = Vec::with_capacity(SCHEME.len() + 1 + container_header.len() + manifest_json.len());
    m.extend_from_slice(SCHEME.as_bytes());
    m.push(b'\n');
    m.extend_from_slice(container_header);
    m.extend_from_slice(manifest_json.as_bytes());
    m
}

impl Seal {
    /// Seals `manifest_json` (written as is) in a container that starts with `container_header`.
    pub fn sign(key: &SigningKey, container_header: &[u8], manifest_json: &str) -> Seal {
        Seal {
            scheme: SCHEME.into(),
            public_key: key.public().to_text(),
            value: key.sign(&message(container_header, manifest_json)),
        }
    }

    /// The key that made this seal, once the seal is found to verify over (header, manifest).
    pub fn check(
        &self,
        container_header: &[u8],
        manifest_json: &str,
    ) -> Result<PublicKey, BundleError> {
        let bad = |why: String| BundleError::Seal(why);
        if self.scheme != SCHEME {
            return Err(bad(format!(
                "unknown seal scheme {:?} (this build reads {SCHEME})",
                self.scheme
            )));
        }
        let key = PublicKey::parse(&self.public_key).map_err(|e| bad(e.to_string()))?;
        key.verify(&message(container_header, manifest_json), &self.value)
            .map_err(|e| {
                bad(format!(
                    "{e}: the bundle was changed after it was exported (or its header was rewritten, \
                     e.g. by re-compressing it)"
                ))
            })?;
        Ok(key)
    }
}

/// Writes line 1 of a sealed bundle: `{"manifest":M,"signature":S}` and its `\n`.
pub fn write_sealed_manifest<W: Write>(
    w: &mut W,
    manifest_json: &str,
    seal: &Seal,
) -> std::io::Result<()> {
    let seal = serde_json::to_string(seal).map_err(std::io::Error::other)?;
    writeln!(w, "{{\"manifest\":{manifest_json},\"signature\":{seal}}}")
}
