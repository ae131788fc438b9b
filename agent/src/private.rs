//! Files the agent writes are private, and written safely; secret files it is handed are checked.
//!
//! ## What is private (unix)
//! - The data directory is created `0700` whatever the umask; an existing one that group or others can
//!   reach is tightened to `0700` (the agent must own it, else start-up fails and says so).
//! - `outbox.db` is created `0600` exclusively before SQLite opens it; SQLite gives its `-wal` and `-shm`
//!   files the database file's mode, so they are `0600` too. Existing files with group or other bits
//!   (written by an older agent under a loose umask) are tightened to `0600` at open.
//! - `agent.addr`, `agent.token`, `settings.token` and export bundles are written by [`write_atomic`] /
//!   [`AtomicFile`]: a temporary file with a random name, created exclusively (`O_CREAT | O_EXCL`, mode
//!   `0600`, by the `tempfile` crate) in the target's own directory, fsynced, then renamed over the
//!   target. A symlink or file planted at any fixed name is therefore never followed or clobbered, and
//!   the temporary file is removed when anything fails (it is deleted when dropped unless persisted).
//!
//! The device signing key, `DIR/device.key`, is created by [`create_new_private`]: written the same way,
//! but linked into place only if nothing is there yet (never replacing a file), so two processes that
//! create it at once end with one key, the first one's, and a key is never overwritten.
//!
//! ## Secret files the user hands in
//! The ingest token file of `sync enable --token-file F` and `PUT /v1/sync` must be a regular file owned
//! by the user the agent runs as, with no permission bits for group or others (`0600` or stricter); it
//! is opened and then checked on the open handle ([`read_secret_file`]), at enable time and at every
//! read by the push loop, so a file swapped or loosened later is refused too. The error says why.
//!
//! ## Windows
//! Modes are a unix concept; on Windows the same places set a protected DACL instead
//! ([`crate::platform::windows::make_private`]): one ACE, full control for the user the agent runs as,
//! nothing inherited. The data directory's ACE is inherited by what is created in it (so SQLite's
//! `-wal` and `-shm` are private from their first byte); every file written by [`AtomicFile`] gets the
//! DACL on its temporary file before anything is written into it (an export bundle may be written
//! outside the data directory). A token file handed in must be owned by this user and allow nobody else
//! but SYSTEM and Administrators ([`crate::platform::windows::check_private_file`]).
//!
//! macOS follows the unix rules (untested: this project builds no macOS binary).

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The largest token file read (a token is 64 hex digits; anything this large is not a token).
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// Creates `dir` (and its parents) `0700`, or tightens an existing one to `0700`.
pub fn ensure_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)?;
    #[cfg(unix)]
    tighten(dir, 0o700)?;
    #[cfg(windows)]
    crate::platform::windows::make_private(dir)?;
    Ok(())
}

/// Makes an existing regular file (or directory) at `path` no more open than `mode`; a missing file
/// or a symlink is left alone.
#[cfg(unix)]
pub fn tighten(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let current = meta.permissions().mode() & 0o777;
    if meta.file_type().is_symlink() || current & !mode == 0 {
        return Ok(());
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(current & mode)).map_err(
        |e| {
            std::io::Error::new(
                e.kind(),
                format!(
                "{} has mode {current:04o} (open to other users) and cannot be made private: {e}",
                path.display()
            ),
            )
        },
    )?;
    tracing::warn!(path = %path.display(), from = format!("{current:04o}"),
        to = format!("{:04o}", current & mode), "tightened the permissions of an agent file");
    Ok(())
}

/// Prepares the outbox database file before SQLite opens it: created empty, exclusively and `0600`
/// when missing; tightened to `0600` (with its `-wal` and `-shm`) when it exists.
pub fn prepare_database(path: &Path) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    match options.open(path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        #[cfg(unix)]
        tighten(Path::new(&p), 0o600)?;
        #[cfg(windows)]
        if Path::new(&p).exists() {
            crate::platform::windows::make_private(Path::new(&p))?;
        }
    }
    Ok(())
}

/// Opens the log file `path` for appending: created private (`0600`; on Windows the protected DACL),
/// an existing one made private.
pub fn open_log(path: &Path) -> std::io::Result<File> {
    if let Some(dir) = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty() && !d.exists())
    {
        ensure_dir(dir)?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.append(true).create(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options.open(path)?;
    #[cfg(unix)]
    tighten(path, 0o600)?;
    #[cfg(windows)]
    crate::platform::windows::make_private(path)?;
    Ok(file)
}

/// A file being written under a temporary name beside its target (see the module notes). Dropped
/// without [`AtomicFile::commit`], the temporary file is removed.
pub struct AtomicFile {
    temp: tempfile::NamedTempFile,
    target: PathBuf,
}

impl AtomicFile {
    /// Creates the temporary file (exclusively, `0600`) in `target`'s directory.
    pub fn create(target: &Path) -> std::io::Result<AtomicFile> {
        let dir = target
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .suffix(".tmp")
            .tempfile_in(dir)?;
        #[cfg(windows)]
        crate::platform::windows::make_private(temp.path())?;
        Ok(AtomicFile {
            temp,
            target: target.to_path_buf(),
        })
    }

    /// The open temporary file, to write into.
    pub fn file(&mut self) -> &mut File {
        self.temp.as_file_mut()
    }

    /// Fsyncs, renames over the target and fsyncs the directory. On failure the temporary file is
    /// removed and the target is untouched.
    pub fn commit(self) -> std::io::Result<File> {
        self.temp.as_file().sync_all()?;
        let file = self.temp.persist(&self.target).map_err(|e| e.error)?;
        if let Some(dir) = self.target.parent().filter(|d| !d.as_os_str().is_empty()) {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(file)
    }
}

impl AtomicFile {
    /// [`AtomicFile::commit`], but only if the target does not exist: `Ok(false)` (and the temporary
    /// file removed) when it does. Nothing is ever replaced.
    pub fn commit_new(self) -> std::io::Result<bool> {
        self.temp.as_file().sync_all()?;
        match self.temp.persist_noclobber(&self.target) {
            Ok(_) => {}
            Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(e.error),
        }
        if let Some(dir) = self.target.parent().filter(|d| !d.as_os_str().is_empty()) {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(true)
    }
}

/// Creates `path` privately with `bytes` unless it exists (see the module notes); false when it did.
pub fn create_new_private(path: &Path, bytes: &[u8]) -> std::io::Result<bool> {
    let mut f = AtomicFile::create(path)?;
    f.file().write_all(bytes)?;
    f.commit_new()
}

/// Writes `bytes` to `path` atomically and privately (see [`AtomicFile`]).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = AtomicFile::create(path)?;
    f.file().write_all(bytes)?;
    f.commit().map(drop)
}

/// Reads `DIR/name`, creating it (`0600`, 32 random bytes in hex) when it is missing or empty. An
/// existing file open to other users is tightened to `0600`.
pub fn load_or_create_secret(data_dir: &Path, name: &str) -> std::io::Result<String> {
    let path = data_dir.join(name);
    #[cfg(unix)]
    tighten(&path, 0o600)?;
    #[cfg(windows)]
    if path.is_file() {
        crate::platform::windows::make_private(&path)?;
    }
    match std::fs::read_to_string(&path) {
        Ok(t) if !t.trim().is_empty() => return Ok(t.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    ensure_dir(data_dir)?;
    let token = hex::encode(rand::random::<[u8; 32]>());
    write_atomic(&path, token.as_bytes())?;
    Ok(token)
}

/// Why a secret file (an ingest token file) is refused.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a regular file")]
    NotRegular { path: String },
    #[error("{path} is owned by uid {owner}, not by the user the agent runs as (uid {user}); a token file must be the user's own")]
    NotOwned { path: String, owner: u32, user: u32 },
    #[error("{path} has mode {mode:04o}: group or others may read or change it; make it private with `chmod 600 {path}`")]
    TooOpen { path: String, mode: u32 },
    #[error("{path} can be opened by {who}; make it private to you with `icacls \"{path}\" /inheritance:r /grant:r \"%USERNAME%:F\"`")]
    OpenToOthers { path: String, who: String },
    #[error("{path} is owned by {owner}, not by the user the agent runs as; a token file must be the user's own")]
    OwnedByOther { path: String, owner: String },
    #[error("{path} is larger than {MAX_SECRET_FILE_BYTES} bytes; it does not hold a token")]
    TooLarge { path: String },
    #[error("{path} is empty")]
    Empty { path: String },
}

/// Opens `path`, checks the open file (regular, owned by this user, `0600` or stricter on unix; on
/// Windows its DACL, see the module notes) and
/// returns its content, trimmed and non-empty.
pub fn read_secret_file(path: &Path) -> Result<String, SecretFileError> {
    let shown = || path.display().to_string();
    let read_err = |source| SecretFileError::Read {
        path: shown(),
        source,
    };
    let file = File::open(path).map_err(read_err)?;
    let meta = file.metadata().map_err(read_err)?;
    if !meta.is_file() {
        return Err(SecretFileError::NotRegular { path: shown() });
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let user = rustix::process::geteuid().as_raw();
        if meta.uid() != user {
            return Err(SecretFileError::NotOwned {
                path: shown(),
                owner: meta.uid(),
                user,
            });
        }
        if meta.mode() & 0o077 != 0 {
            return Err(SecretFileError::TooOpen {
                path: shown(),
                mode: meta.mode() & 0o7777,
            });
        }
    }
    #[cfg(windows)]
    {
        use crate::platform::windows::{check_private_file, NotPrivate};
        match check_private_file(path).map_err(read_err)? {
            Ok(()) => {}
            Err(NotPrivate::Owner(owner)) => {
                return Err(SecretFileError::OwnedByOther {
                    path: shown(),
                    owner,
                })
            }
            Err(NotPrivate::Open(sids)) => {
                return Err(SecretFileError::OpenToOthers {
                    path: shown(),
                    who: crate::platform::windows::describe_sids(&sids),
                })
            }
        }
    }
    if meta.len() > MAX_SECRET_FILE_BYTES {
        return Err(SecretFileError::TooLarge { path: shown() });
    }
    let mut text = String::new();
    file.take(MAX_SECRET_FILE_BYTES)
        .read_to_string(&mut text)
        .map_err(read_err)?;
    let token = text.trim();
    if token.is_empty() {
        return Err(SecretFileError::Empty { path: shown() });
    }
    Ok(token.to_string())
}

/// Checks a token file handed in by the user and returns its canonical path (what the push loop will
/// read; symlinks resolved once, here).
pub fn check_token_file(path: &Path) -> Result<PathBuf, SecretFileError> {
    let canonical = std::fs::canonicalize(path).map_err(|source| SecretFileError::Read {
        path: path.display().to_string(),
        source,
    })?;
    #[cfg(windows)]
    let canonical = crate::platform::windows::plain_path(canonical);
    read_secret_file(&canonical)?;
    Ok(canonical)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_created_data_directory_is_0700_and_a_loose_one_is_tightened() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a/b");
        ensure_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        ensure_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
    }

    #[test]
    fn the_database_file_is_created_0600_and_an_open_one_is_tightened() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("outbox.db");
        prepare_database(&db).unwrap();
        assert_eq!(mode(&db), 0o600);
        let wal = dir.path().join("outbox.db-wal");
        std::fs::write(&wal, b"").unwrap();
        std::fs::set_permissions(&wal, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o664)).unwrap();
        prepare_database(&db).unwrap();
        assert_eq!((mode(&db), mode(&wal)), (0o600, 0o600));
    }

    #[test]
    fn an_atomic_write_never_follows_a_planted_symlink_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        // The names an older agent used for its temporary files.
        for name in ["agent.token.tmp", ".agent.addr.tmp", "bundle.tmp"] {
            std::os::unix::fs::symlink(&victim, dir.path().join(name)).unwrap();
        }
        let target = dir.path().join("agent.addr");
        write_atomic(&target, b"127.0.0.1:1").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "127.0.0.1:1");
        assert_eq!(mode(&target), 0o600);
        // A failed commit (the target is a directory) removes the temporary file.
        let blocked = dir.path().join("blocked");
        std::fs::create_dir(&blocked).unwrap();
        std::fs::write(blocked.join("x"), "x").unwrap();
        assert!(write_atomic(&blocked, b"data").is_err());
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tmp") && n.starts_with(".blocked"))
            .collect();
        assert!(names.is_empty(), "left behind: {names:?}");
    }

    #[test]
    fn a_token_file_must_be_a_private_regular_file_of_this_user() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("token");
        std::fs::write(&f, "tok\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_secret_file(&f).unwrap_err();
        assert!(
            matches!(e, SecretFileError::TooOpen { mode: 0o644, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("chmod 600"), "{e}");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_secret_file(&f).unwrap(), "tok");
        let e = read_secret_file(dir.path()).unwrap_err();
        assert!(matches!(e, SecretFileError::NotRegular { .. }), "{e}");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert_eq!(check_token_file(&link).unwrap(), f.canonicalize().unwrap());
        std::fs::write(&f, " \n").unwrap();
        assert!(matches!(
            read_secret_file(&f),
            Err(SecretFileError::Empty { .. })
        ));
        if rustix::process::geteuid().is_root() {
            std::fs::write(&f, "tok").unwrap();
            std::os::unix::fs::chown(&f, Some(65534), None).unwrap();
            let e = read_secret_file(&f).unwrap_err();
            assert!(
                matches!(e, SecretFileError::NotOwned { owner: 65534, .. }),
                "{e}"
            );
        }
    }
}
