//! Device signing keys: the Ed25519 key pair each agent holds, in the text forms both binaries print
//! and read, and the messages such a key signs.
//!
//! ## Text forms
//! - Public key: `ed25519:` followed by the 32 key bytes in standard base64 (44 characters, padded).
//!   [`PublicKey::parse`] also takes the bare base64. What `apiary-agent identity show` prints and
//!   `apiary-ingest device register --public-key` takes.
//! - Fingerprint: `SHA256:` followed by the SHA-256 of the 32 key bytes in unpadded base64 (43
//!   characters). How a key is named in listings, logs and refusals.
//! - Signature: the 64 signature bytes in standard base64.
//!
//! ## What a device key signs (domain-separated: one message kind can never pass as another)
//! - A bundle's seal ([`crate::bundle::seal`]): `apiary-bundle-seal-v1\n` + the container's fixed header
//!   + the manifest's bytes as written.
//! - Its online registration ([`registration_message`]): `apiary-device-key-registration-v1\n` +
//!   tenant id + `\n` + device id + `\n` + the public key's text form. Signing it proves the sender
//!   holds the private key, so nobody can register a key they do not hold (and then pass its bundles off as
//!   their device's).
//!
//! ## Verification
//! Strict ([`ed25519_dalek::VerifyingKey::verify_strict`]): weak (small-order) public keys and
//! non-canonical signatures are refused, so a signature cannot be altered into another valid one.

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine;
use ed25519_dalek::{Signer, VerifyingKey};
use sha2::{Digest, Sha256};

/// Prefix of a public key's text form.
pub const PUBLIC_KEY_PREFIX: &str = "ed25519:";
/// Prefix of a fingerprint.
pub const FINGERPRINT_PREFIX: &str = "SHA256:";
/// What a registration message starts with.
const REGISTRATION_DOMAIN: &[u8] = b"apiary-device-key-registration-v1\n";

/// Why a key or a signature is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("not an Ed25519 public key: {0} (expected ed25519: followed by 44 characters of base64, as `apiary-agent identity show` prints it)")]
    PublicKey(String),
    #[error("not an Ed25519 signature: {0}")]
    Signature(String),
    #[error("the signature does not verify with key {0}")]
    Mismatch(String),
}

/// A device's public key (never a weak one).
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PublicKey({})", self.fingerprint())
    }
}

impl PublicKey {
    /// Parses the text form (`ed25519:BASE64`, or the bare base64; surrounding space ignored).
    pub fn parse(text: &str) -> Result<PublicKey, KeyError> {
        let text = text.trim();
        let b64 = text.strip_prefix(PUBLIC_KEY_PREFIX).unwrap_or(text);
        let bytes = STANDARD
            .decode(b64)
            .map_err(|e| KeyError::PublicKey(format!("bad base64 ({e})")))?;
        PublicKey::from_bytes(&bytes)
    }

    /// From the 32 raw key bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<PublicKey, KeyError> {
        let raw: [u8; 32] = bytes
            .try_into()
            .map_err(|_| KeyError::PublicKey(format!("{} bytes, not 32", bytes.len())))?;
        let key = VerifyingKey::from_bytes(&raw)
            .map_err(|_| KeyError::PublicKey("not a point of the curve".into()))?;
        if key.is_weak() {
            return Err(KeyError::PublicKey(
                "a weak (small-order) key, which would verify almost any signature".into(),
            ));
        }
        Ok(PublicKey(key))
    }

    /// The 32 raw key bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        self.0.as_bytes()
    }

    /// `ed25519:BASE64`.
    pub fn to_text(&self) -> String {
        format!("{PUBLIC_KEY_PREFIX}{}", STANDARD.encode(self.as_bytes()))
    }

    /// `SHA256:BASE64` (unpadded) of the raw key bytes.
    pub fn fingerprint(&self) -> String {
        let digest = Sha256::digest(self.as_bytes());
        format!("{FINGERPRINT_PREFIX}{}", STANDARD_NO_PAD.encode(digest))
    }

    /// Checks `signature` (base64) over `message`, strictly (see the module notes).
    pub fn verify(&self, message: &[u8], signature: &str) -> Result<(), KeyError> {
        let bytes = STANDARD
            .decode(signature.trim())
            .map_err(|e| KeyError::Signature(format!("bad base64 ({e})")))?;
        let sig = ed25519_dalek::Signature::from_slice(&bytes)
            .map_err(|_| KeyError::Signature(format!("{} bytes, not 64", bytes.len())))?;
        self.0
            .verify_strict(message, &sig)
            .map_err(|_| KeyError::Mismatch(self.fingerprint()))
    }
}

/// A device's private signing key. Its `Debug` shows only the public key's fingerprint; the secret is
/// wiped from memory when it is dropped.
pub struct SigningKey(ed25519_dalek::SigningKey);

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SigningKey({})", self.public().fingerprint())
    }
}

impl SigningKey {
    /// The key whose secret is these 32 bytes (from a CSPRNG when new, see the agent's key file).
    pub fn from_seed(seed: &[u8; 32]) -> SigningKey {
        SigningKey(ed25519_dalek::SigningKey::from_bytes(seed))
    }

    /// The 32 secret bytes, to store.
    pub fn seed(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    pub fn public(&self) -> PublicKey {
        PublicKey(self.0.verifying_key())
    }

    /// Signs `message`; the signature in base64.
    pub fn sign(&self, message: &[u8]) -> String {
        STANDARD.encode(self.0.sign(message).to_bytes())
    }
}

/// What a device signs to register its key online (see the module notes).
pub fn registration_message(tenant_id: &str, device_id: &str, key: &PublicKey) -> Vec<u8> {
    let mut m = REGISTRATION_DOMAIN.to_vec();
    for part in [tenant_id, device_id] {
        m.extend_from_slice(part.as_bytes());
        m.push(b'\n');
    }
    m.extend_from_slice(key.to_text().as_bytes());
    m
}

/// `POST /v1/devices/key`: a device registers its public key, proving it holds the private key.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "json-schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct KeyRegistration {
    /// `ed25519:BASE64`.
    pub public_key: String,
    /// The signature of [`registration_message`] (tenant, the token's device, this key), base64.
    pub proof: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u8) -> SigningKey {
        SigningKey::from_seed(&[n; 32])
    }

    #[test]
    fn the_text_forms_round_trip_and_the_fingerprint_is_stable() {
        let k = key(7).public();
        let text = k.to_text();
        assert!(
            text.starts_with("ed25519:") && text.len() == 8 + 44,
            "{text}"
        );
        assert_eq!(PublicKey::parse(&text).unwrap(), k);
        assert_eq!(PublicKey::parse(&format!("  {}\n", &text[8..])).unwrap(), k);
        let fp = k.fingerprint();
        assert!(fp.starts_with("SHA256:") && fp.len() == 7 + 43, "{fp}");
        assert_eq!(fp, key(7).public().fingerprint());
        assert_ne!(fp, key(8).public().fingerprint());
    }

    #[test]
    fn malformed_and_weak_keys_are_refused_with_the_reason() {
        for (text, why) in [
            ("ed25519:not base64!", "bad base64"),
            ("ed25519:AAAA", "3 bytes, not 32"),
            // The identity point: small order, it would verify forged signatures.
            (
                "ed25519:AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
                "weak",
            ),
        ] {
            let e = PublicKey::parse(text).unwrap_err().to_string();
            assert!(e.contains(why), "{text}: {e}");
        }
    }

    #[test]
    fn a_signature_verifies_only_for_its_message_and_key() {
        let k = key(1);
        let sig = k.sign(b"hello");
        k.public().verify(b"hello", &sig).unwrap();
        assert!(matches!(
            k.public().verify(b"hellp", &sig),
            Err(KeyError::Mismatch(_))
        ));
        assert!(matches!(
            key(2).public().verify(b"hello", &sig),
            Err(KeyError::Mismatch(_))
        ));
        assert!(matches!(
            k.public().verify(b"hello", "AAAA"),
            Err(KeyError::Signature(_))
        ));
    }

    #[test]
    fn a_registration_names_tenant_device_and_key() {
        let k = key(3).public();
        let m = registration_message("t1", "alice-desk", &k);
        let text = String::from_utf8(m.clone()).unwrap();
        assert!(text.starts_with("apiary-device-key-registration-v1\nt1\nalice-desk\ned25519:"));
        assert_ne!(m, registration_message("t2", "alice-desk", &k));
        assert_ne!(m, registration_message("t1", "bob-desk", &k));
    }

    #[test]
    fn the_debug_form_never_shows_the_secret() {
        let k = key(9);
        let shown = format!("{k:?}");
        assert!(shown.starts_with("SigningKey(SHA256:"), "{shown}");
        assert!(!shown.contains(&STANDARD.encode(k.seed())), "{shown}");
    }
}
