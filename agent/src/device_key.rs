//! The device signing key: an Ed25519 key pair that says "this device wrote it"
//! ([`apiary_schema::device_key`]). `export` seals every bundle with it; the ingest imports a sealed
//! bundle as the device and user its key is registered for.
//!
//! ## On disk
//! `DIR/device.key`, mode `0600` (the data directory is `0700`), one line:
//! `apiary-device-key-v1 ed25519-seed:<32 secret bytes, base64>`. Created at the agent's first start
//! (and by `export` on a data directory that has none yet) from the operating system's CSPRNG, linked
//! into place without ever replacing a file ([`crate::private::create_new_private`]): the key of a
//! device never changes behind its back. Read like a token file: a regular file of this user, tightened
//! to `0600` if it is looser, refused if it is anyone else's ([`crate::private::read_secret_file`]).
//! Delete it only to retire the key: the next start makes a new one, which an admin must register again.
//!
//! ## Registration
//! An online agent registers the public key itself, with its device-bound push token ([`crate::push::register_key`]).
//! An air-gapped one is registered by an admin: `apiary-agent identity show` prints the key to read off.

use std::path::{Path, PathBuf};

use apiary_schema::device_key::SigningKey;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use rand::RngCore;

use crate::private::SecretFileError;

/// The key file's name in the data directory.
pub const KEY_FILE: &str = "device.key";

/// What the key file starts with (the format's version).
const PREFIX: &str = "apiary-device-key-v1 ed25519-seed:";

/// Why the device key cannot be had.
#[derive(Debug, thiserror::Error)]
pub enum DeviceKeyError {
    #[error("no device key at {0} yet: it is created when the agent first starts (`apiary-agent run`) or exports")]
    Missing(PathBuf),
    #[error("the device key file is refused: {0}")]
    File(#[source] SecretFileError),
    #[error("{path} is not a device key file ({why}); move it away to make a new key (which must then be registered again)")]
    Malformed { path: PathBuf, why: String },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// `DIR/device.key`.
pub fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(KEY_FILE)
}

/// Reads the device key of `data_dir` (see the module notes).
pub fn load(data_dir: &Path) -> Result<SigningKey, DeviceKeyError> {
    let path = path(data_dir);
    #[cfg(unix)]
    crate::private::tighten(&path, 0o600).map_err(|e| DeviceKeyError::Write {
        path: path.clone(),
        source: e,
    })?;
    // An existing key is made private to this user before the check below reads it.
    #[cfg(windows)]
    if path.is_file() {
        crate::platform::windows::make_private(&path).map_err(|e| DeviceKeyError::Write {
            path: path.clone(),
            source: e,
        })?;
    }
    let text = match crate::private::read_secret_file(&path) {
        Ok(t) => t,
        Err(SecretFileError::Read { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            return Err(DeviceKeyError::Missing(path))
        }
        Err(e) => return Err(DeviceKeyError::File(e)),
    };
    decode(&text).map_err(|why| DeviceKeyError::Malformed { path, why })
}

/// Reads the device key of `data_dir`, creating it when there is none (see the module notes).
pub fn load_or_create(data_dir: &Path) -> Result<SigningKey, DeviceKeyError> {
    match load(data_dir) {
        Err(DeviceKeyError::Missing(path)) => {
            let write = |source| DeviceKeyError::Write {
                path: path.clone(),
                source,
            };
            crate::private::ensure_dir(data_dir).map_err(write)?;
            let mut seed = [0u8; 32];
            rand::rngs::OsRng.fill_bytes(&mut seed);
            let key = SigningKey::from_seed(&seed);
            seed.fill(0);
            if crate::private::create_new_private(&path, encode(&key).as_bytes()).map_err(write)? {
                tracing::info!(path = %path.display(), fingerprint = %key.public().fingerprint(),
                    "created this device's signing key");
                Ok(key)
            } else {
                // Another process (an export beside the starting agent) made it first: use that one.
                load(data_dir)
            }
        }
        other => other,
    }
}

fn encode(key: &SigningKey) -> String {
    format!("{PREFIX}{}\n", STANDARD.encode(key.seed()))
}

fn decode(text: &str) -> Result<SigningKey, String> {
    let b64 = text
        .trim()
        .strip_prefix(PREFIX)
        .ok_or("it does not start with apiary-device-key-v1")?;
    let bytes = STANDARD
        .decode(b64)
        .map_err(|e| format!("bad base64: {e}"))?;
    let seed: [u8; 32] = bytes
        .as_slice()
        .try_into()
        .map_err(|_| format!("{} secret bytes, not 32", bytes.len()))?;
    Ok(SigningKey::from_seed(&seed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_created_once_and_read_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        assert!(matches!(load(&data), Err(DeviceKeyError::Missing(_))));
        let made = load_or_create(&data).unwrap();
        let again = load_or_create(&data).unwrap();
        assert_eq!(made.public(), again.public());
        assert_eq!(load(&data).unwrap().public(), made.public());
        let other = tempfile::tempdir().unwrap();
        assert_ne!(
            load_or_create(other.path()).unwrap().public(),
            made.public()
        );
    }

    #[cfg(unix)]
    #[test]
    fn the_key_file_is_private_and_a_loose_one_is_tightened() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        load_or_create(dir.path()).unwrap();
        let file = path(dir.path());
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&file), 0o600);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        load(dir.path()).unwrap();
        assert_eq!(mode(&file), 0o600);
    }

    #[test]
    fn a_file_that_is_not_a_key_is_refused_never_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let file = path(dir.path());
        crate::private::write_atomic(&file, b"something else").unwrap();
        let e = load_or_create(dir.path()).unwrap_err().to_string();
        assert!(e.contains("is not a device key file"), "{e}");
        assert_eq!(std::fs::read(&file).unwrap(), b"something else");
        crate::private::write_atomic(&file, format!("{PREFIX}AAAA").as_bytes()).unwrap();
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("3 secret bytes, not 32"), "{e}");
    }
}
