//! Locating the workspace's binaries from a test executable.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// `target/<profile>/` of the running executable: a test (`target/<profile>/deps/<test>-<hash>`) or a
/// binary of this package (`target/<profile>/bench-e2e`).
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("the executable's directory");
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().expect("target/<profile>").to_path_buf()
    } else {
        dir.to_path_buf()
    }
}

/// The path of a workspace binary (`apiary-agent`, `apiary-ingest`), built on first use if it is missing
/// (e.g. when only `cargo test -p tests` ran). `APIARY_TEST_BIN_DIR` points at another directory of
/// binaries (e.g. a release build) and is used as is.
pub fn path(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("APIARY_TEST_BIN_DIR") {
        return PathBuf::from(dir).join(name);
    }
    static BUILT: OnceLock<()> = OnceLock::new();
    let p = profile_dir().join(name);
    if !p.exists() {
        BUILT.get_or_init(|| {
            let release = profile_dir().file_name().is_some_and(|n| n == "release");
            let mut cmd = Command::new(env!("CARGO"));
            cmd.args([
                "build",
                "--bins",
                "-p",
                "apiary-agent",
                "-p",
                "apiary-ingest",
            ]);
            if release {
                cmd.arg("--release");
            }
            let status = cmd.status().expect("run cargo build");
            assert!(status.success(), "cargo build of the binaries failed");
        });
    }
    assert!(p.exists(), "{} not found after building", p.display());
    p
}
