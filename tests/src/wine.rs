//! The Windows agent (`apiary-agent.exe`, cross-compiled by `scripts/windows.sh build`) run under Wine.
//!
//! - `APIARY_WINDOWS_AGENT`: the exe to run (the test step copies it beside the test-only
//!   `bcryptprimitives.dll` that gives Wine 8 the `ProcessPrng` Rust's std needs). Unset, the Windows
//!   tests skip, saying why, unless `APIARY_REQUIRE_WINDOWS=1`, which makes them fail instead (CI).
//! - `APIARY_WINDOWS_SDDL`: `sddl.exe`, which prints a file's owner and DACL as SDDL (the DACL test).
//! - `WINEPREFIX`: the Wine prefix (the script makes a private one under `target/windows/wine`).
//!
//! Paths handed to the Windows process are in Windows form: Wine maps the Linux root to drive `Z:`, so
//! `/tmp/x/y` is `Z:\tmp\x\y` ([`windows_path`]).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Windows agent and the Wine it runs under.
#[derive(Debug, Clone)]
pub struct Wine {
    /// `apiary-agent.exe`.
    pub exe: PathBuf,
    /// `sddl.exe`, when given.
    pub sddl: Option<PathBuf>,
}

/// Whether the Windows tests must run (`APIARY_REQUIRE_WINDOWS=1`): then a missing exe or Wine fails.
pub fn required() -> bool {
    std::env::var("APIARY_REQUIRE_WINDOWS").is_ok_and(|v| v == "1")
}

/// The Windows agent, or `None` (after printing why) when the tests cannot run here; panics instead
/// when they are [`required`].
pub fn windows_agent(test: &str) -> Option<Wine> {
    let why = match std::env::var_os("APIARY_WINDOWS_AGENT").map(PathBuf::from) {
        None => "APIARY_WINDOWS_AGENT is not set (scripts/windows.sh test sets it)".to_string(),
        Some(exe) if !exe.is_file() => {
            format!("APIARY_WINDOWS_AGENT={} is not a file", exe.display())
        }
        Some(exe) => match Command::new("wine").arg("--version").output() {
            Ok(o) if o.status.success() => {
                return Some(Wine {
                    exe,
                    sddl: std::env::var_os("APIARY_WINDOWS_SDDL").map(PathBuf::from),
                })
            }
            _ => "wine is not installed (scripts/windows.sh packages)".to_string(),
        },
    };
    if required() {
        panic!("{test}: APIARY_REQUIRE_WINDOWS=1 but {why}");
    }
    // Straight to stderr: the test harness captures `eprintln!`, and a skip must be seen.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {why} (set APIARY_REQUIRE_WINDOWS=1 to make this a failure)"
    );
    None
}

/// `path` (absolute) as the Windows process sees it: `Z:\` and backslashes.
pub fn windows_path(path: &Path) -> String {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    format!("Z:{}", abs.to_string_lossy().replace('/', "\\"))
}

impl Wine {
    /// `wine apiary-agent.exe` (arguments to add), Wine's own messages off.
    pub fn command(&self) -> Command {
        self.command_for(&self.exe)
    }

    /// `wine EXE`.
    pub fn command_for(&self, exe: &Path) -> Command {
        let mut cmd = Command::new("wine");
        cmd.arg(exe);
        if std::env::var_os("WINEDEBUG").is_none() {
            cmd.env("WINEDEBUG", "-all");
        }
        cmd
    }

    /// The owner and DACL of `path` as SDDL, from `sddl.exe` (a Windows program reading the file's
    /// security descriptor through `GetFileSecurityW`).
    pub fn sddl(&self, path: &Path) -> anyhow::Result<String> {
        let sddl = self
            .sddl
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("APIARY_WINDOWS_SDDL is not set"))?;
        let out = self.command_for(sddl).arg(windows_path(path)).output()?;
        anyhow::ensure!(
            out.status.success(),
            "sddl.exe {}: {}{}",
            path.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// The SID of the user Wine runs programs as (the owner of a file the agent creates).
    pub fn user_sid(&self, probe: &Path) -> anyhow::Result<String> {
        let sddl = self.sddl(probe)?;
        sddl.strip_prefix("O:")
            .and_then(|s| s.split("D:").next())
            .map(str::to_string)
            .ok_or_else(|| anyhow::anyhow!("no owner in {sddl}"))
    }
}

/// How the agent harness starts `apiary-agent`: the Linux binary of this workspace, or the Windows exe
/// under Wine.
#[derive(Debug, Clone, Default)]
pub enum Launcher {
    #[default]
    Native,
    Wine(Wine),
}

impl Launcher {
    /// The command that runs the agent (arguments to add).
    pub fn command(&self) -> Command {
        match self {
            Launcher::Native => Command::new(crate::bins::path("apiary-agent")),
            Launcher::Wine(w) => w.command(),
        }
    }

    /// A path argument as the agent process sees it.
    pub fn path_arg(&self, path: &Path) -> std::ffi::OsString {
        match self {
            Launcher::Native => path.as_os_str().to_owned(),
            Launcher::Wine(_) => windows_path(path).into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_paths_are_drive_z_paths_for_wine() {
        assert_eq!(windows_path(Path::new("/tmp/a b/c")), r"Z:\tmp\a b\c");
    }
}
