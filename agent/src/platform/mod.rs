//! What differs between operating systems, each difference behind `cfg`.
//!
//! | | Linux (and other unix) | macOS | Windows |
//! |---|---|---|---|
//! | default data directory | `$XDG_DATA_HOME/apiary`, else `~/.local/share/apiary` | `~/Library/Application Support/Apiary` | `%LOCALAPPDATA%\Apiary` |
//! | private files and directories | mode `0600` / `0700` ([`crate::private`]) | as Linux | a protected DACL: one ACE, full control for the user the agent runs as, inheritance off |
//! | a token file handed in | owned by this user, mode `0600` or stricter | as Linux | owned by this user, no ACE for anyone but this user, SYSTEM and Administrators |
//! | graceful shutdown | SIGTERM, SIGINT | as Linux | Ctrl-C, Ctrl-Break, console close, logoff, shutdown, `apiary-agent stop` (a named event) |
//! | a log file's identity | device and inode | as Linux | volume serial number and file index |
//! | start at login | systemd user unit (`deploy/systemd`) | a launchd agent, `~/Library/LaunchAgents/com.apiary.agent.plist` (not shipped) | a Task Scheduler logon task (`deploy/windows`) |
//!
//! macOS is not built or tested by this project (no SDK on its build machines); where it would keep
//! secrets (the Keychain, instead of files in the data directory) is named in `docs/windows.md`.

use std::path::PathBuf;

#[cfg(windows)]
pub mod windows;

/// The data directory used when neither `--data-dir` nor `APIARY_DATA_DIR` names one: see the module
/// table. `None` when the environment names no home (no `LOCALAPPDATA` on Windows, no `HOME` on unix).
pub fn default_data_dir() -> Option<PathBuf> {
    default_data_dir_from(|name| std::env::var_os(name))
}

fn default_data_dir_from(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Option<PathBuf> {
    let non_empty = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if cfg!(windows) {
        return non_empty("LOCALAPPDATA").map(|d| d.join("Apiary"));
    }
    if cfg!(target_os = "macos") {
        return non_empty("HOME").map(|h| h.join("Library/Application Support/Apiary"));
    }
    // XDG: a relative XDG_DATA_HOME is invalid and ignored.
    if let Some(d) = non_empty("XDG_DATA_HOME").filter(|d| d.is_absolute()) {
        return Some(d.join("apiary"));
    }
    non_empty("HOME").map(|h| h.join(".local/share/apiary"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(vars: &[(&str, &str)]) -> Option<PathBuf> {
        default_data_dir_from(|name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| std::ffi::OsString::from(v))
        })
    }

    #[cfg(all(unix, not(target_os = "macos")))]
    #[test]
    fn the_default_data_directory_follows_xdg_on_linux() {
        assert_eq!(
            with(&[("HOME", "/home/ann")]),
            Some(PathBuf::from("/home/ann/.local/share/apiary"))
        );
        assert_eq!(
            with(&[("HOME", "/home/ann"), ("XDG_DATA_HOME", "/data/ann")]),
            Some(PathBuf::from("/data/ann/apiary"))
        );
        // A relative XDG_DATA_HOME is not a valid one.
        assert_eq!(
            with(&[("HOME", "/home/ann"), ("XDG_DATA_HOME", "rel")]),
            Some(PathBuf::from("/home/ann/.local/share/apiary"))
        );
        assert_eq!(with(&[("HOME", "")]), None);
        assert_eq!(with(&[]), None);
    }

    #[cfg(windows)]
    #[test]
    fn the_default_data_directory_is_under_local_app_data_on_windows() {
        assert_eq!(
            with(&[("LOCALAPPDATA", r"C:\Users\ann\AppData\Local")]),
            Some(PathBuf::from(r"C:\Users\ann\AppData\Local\Apiary"))
        );
        assert_eq!(with(&[("HOME", "/home/ann")]), None);
    }
}
