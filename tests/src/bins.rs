//! Locating the workspace's binaries from a test executable — and making sure they are the code on disk.
//!
//! A black-box test that ran a stale `apiary-agent` would test yesterday's code and pass or fail for the
//! wrong reason (`cargo test -p tests` builds this crate, not the binaries it starts). So the first call
//! of [`path`] in a test process runs cargo ([`build_command`]: `cargo test --workspace --no-run`, the
//! test command's own build, for the dev profile) for the profile this test was built with, into the
//! target directory it runs from: a no-op (well under a second) when the binaries are fresh, a rebuild
//! of exactly what changed otherwise. Cargo's own lock on the build directory
//! (`Blocking waiting for file lock on build directory`) serialises test binaries that start at the same
//! time, so they never build over each other; each waits for the first and then finds the binaries fresh.
//!
//! `APIARY_TEST_BIN_DIR` points at another directory of binaries (e.g. a release build made beforehand)
//! and is used as is, without building.

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

/// The cargo command that brings the binaries of `profile_dir` up to date with the sources.
///
/// For the dev profile it is `cargo test --workspace --no-run`: the build the test command
/// (`scripts/test.sh`) makes, with the dependencies' features unified across the workspace's tests and
/// dev-dependencies; it builds both binaries (the agent's and the ingest's integration tests need them)
/// and is a no-op once the test command has compiled. A `cargo build --bins -p …` would unify features
/// without the dev-dependencies: a second flavour of ~150 dependencies, compiled once (≈ 4.5 minutes in
/// CI) and relinking the binaries back and forth with the test build. Release (a benchmark's
/// `target/release`) keeps the plain build of the two binaries.
fn build_command(profile_dir: &std::path::Path) -> Command {
    let manifest = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let target_dir = profile_dir.parent().expect("target/");
    let mut cmd = Command::new(env!("CARGO"));
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        cmd.args(["build", "--release", "--bins"])
            .args(["-p", "apiary-agent", "-p", "apiary-ingest"])
            // What `cargo test --workspace` unifies into the agent (its tests enable the feature
            // through a dev-dependency on itself). The feature only adds test entry points the binary
            // never calls.
            .args(["--features", "apiary-agent/test-hooks"]);
    } else {
        cmd.args(["test", "--workspace", "--no-run"]);
    }
    cmd.arg("--locked")
        .arg("--manifest-path")
        .arg(&manifest)
        .arg("--target-dir")
        .arg(target_dir);
    // Cargo runs a test with variables describing the test's own package (CARGO_MANIFEST_DIR, CARGO_PKG_*,
    // ...). Build scripts that watch one of them (ring's watches CARGO_MANIFEST_DIR) would see it changed
    // and rebuild half the dependency tree on every run, for this build and for the next plain one.
    for (key, _) in std::env::vars_os() {
        let Some(key) = key.to_str() else { continue };
        if TEST_ONLY_VARS.contains(&key)
            || key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_BIN_EXE_")
        {
            cmd.env_remove(key);
        }
    }
    cmd
}

/// Variables cargo sets for a test process only (never in the environment `cargo test` itself ran in).
const TEST_ONLY_VARS: &[&str] = &[
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_MANIFEST_LINKS",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "CARGO_RUSTC_CURRENT_DIR",
];

/// Runs [`build_command`] with `extra` arguments; panics with cargo's output when the build fails, since
/// every black-box test would otherwise run something other than the sources.
fn build(extra: &[&str]) -> std::process::Output {
    let out = build_command(&profile_dir())
        .args(extra)
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "building apiary-agent and apiary-ingest failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Builds the binaries once per test process (see the module notes).
fn ensure_fresh() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let started = std::time::Instant::now();
        build(&[]);
        eprintln!(
            "tests::bins: binaries checked against the sources in {:?}",
            started.elapsed()
        );
    });
}

/// The path of a workspace binary (`apiary-agent`, `apiary-ingest`), built from the sources on disk
/// first (once per test process).
pub fn path(name: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("APIARY_TEST_BIN_DIR") {
        return PathBuf::from(dir).join(name);
    }
    ensure_fresh();
    let p = profile_dir().join(name);
    assert!(p.exists(), "{} not found after building", p.display());
    p
}

/// Runs the binary `name` (as [`path`] builds it) with `args` and `env` added and `RUST_LOG=warn`, to
/// its end; (exit code, stdout followed by stderr), as a user sees them.
pub fn run(name: &str, args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let mut cmd = std::process::Command::new(path(name));
    cmd.args(args).env("RUST_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the binary");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// The sources a dep-info file names (`<file>: src1 src2 …` on its first line, spaces in names
    /// escaped), relative to the workspace root. A file only tests compile (a `#[cfg(test)]` module) is
    /// not in a binary's or library's dep-info, so it cannot make a fresh binary look stale.
    fn sources_in(dep_info: &Path, root: &Path) -> Vec<PathBuf> {
        let text = std::fs::read_to_string(dep_info)
            .unwrap_or_else(|e| panic!("dep-info {}: {e}", dep_info.display()));
        let list = text
            .lines()
            .next()
            .and_then(|l| l.split_once(": "))
            .map_or("", |(_, r)| r);
        let mut out = vec![];
        let mut cur = String::new();
        let mut chars = list.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' if chars.peek() == Some(&' ') => cur.push(chars.next().unwrap()),
                ' ' => out.extend((!cur.is_empty()).then(|| root.join(std::mem::take(&mut cur)))),
                c => cur.push(c),
            }
        }
        out.extend((!cur.is_empty()).then(|| root.join(cur)));
        out
    }

    /// The dep-info rustc wrote for the artifact `file` lives in `deps/`: `<crate>-<hash>.d` beside
    /// `lib<crate>-<hash>.rlib`, or beside the binary `target/<profile>` holds a hard link of.
    #[cfg(unix)]
    fn dep_info_of(file: &Path) -> PathBuf {
        use std::os::unix::fs::MetadataExt;
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        if let Some(stem) = name.strip_suffix(".rlib") {
            return file.with_file_name(format!("{}.d", stem.trim_start_matches("lib")));
        }
        let ino = std::fs::metadata(file).unwrap().ino();
        let deps = file.parent().unwrap().join("deps");
        let linked = std::fs::read_dir(&deps)
            .unwrap()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .find(|p| p.extension().is_none() && std::fs::metadata(p).is_ok_and(|m| m.ino() == ino))
            .unwrap_or_else(|| {
                panic!(
                    "{}: no hard link of it in {}",
                    file.display(),
                    deps.display()
                )
            });
        linked.with_extension("d")
    }

    /// The workspace libraries each binary links (its package's own, the schema, the plumbing; this
    /// crate, `tests`, is not one of them; see the packages' Cargo.toml).
    fn links(bin: &str, lib: &str) -> bool {
        lib == bin.replace('-', "_") || lib == "apiary_schema" || lib == "apiary_plumbing"
    }

    /// The binaries the black-box tests run are the ones cargo's build of the test command made, cargo
    /// finds them fresh, and they are newer than every source file of theirs and of the workspace
    /// libraries they link (from rustc's dep-info of each).
    #[cfg(unix)]
    #[test]
    fn the_binaries_tests_run_are_freshly_built_from_every_source_they_are_built_from() {
        if std::env::var_os("APIARY_TEST_BIN_DIR").is_some() {
            eprintln!("skipped: APIARY_TEST_BIN_DIR names prebuilt binaries");
            return;
        }
        let bins: Vec<(String, PathBuf)> = ["apiary-agent", "apiary-ingest"]
            .into_iter()
            .map(|b| (b.to_string(), super::path(b)))
            .collect();
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .canonicalize()
            .unwrap();
        let out = super::build(&["--message-format=json"]);
        let mut dep_infos = vec![];
        let mut seen = vec![];
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Ok(m) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let ours = m["manifest_path"]
                .as_str()
                .is_some_and(|p| Path::new(p).starts_with(&root));
            if m["reason"] != "compiler-artifact" || !ours || m["profile"]["test"] == true {
                continue;
            }
            let kinds = m["target"]["kind"].to_string();
            let name = m["target"]["name"].as_str().unwrap_or_default();
            if let Some((_, path)) = bins
                .iter()
                .find(|(b, _)| b == name && kinds.contains("bin"))
            {
                assert_eq!(
                    m["fresh"], true,
                    "{name}: cargo rebuilt it right after path()"
                );
                let exe = PathBuf::from(m["executable"].as_str().expect("executable"));
                assert_eq!(
                    &exe, path,
                    "{name}: the tests run another file than cargo built"
                );
                dep_infos.push((name.to_string(), dep_info_of(&exe)));
                seen.push(name.to_string());
            } else if kinds.contains("lib") {
                for f in m["filenames"].as_array().into_iter().flatten() {
                    let f = Path::new(f.as_str().unwrap_or_default());
                    if f.extension().is_some_and(|e| e == "rlib") {
                        dep_infos.push((name.to_string(), dep_info_of(f)));
                    }
                }
            }
        }
        seen.sort();
        assert_eq!(
            seen,
            ["apiary-agent", "apiary-ingest"],
            "cargo's artifacts: {dep_infos:?}"
        );
        for (bin, path) in &bins {
            let sources: Vec<PathBuf> = dep_infos
                .iter()
                .filter(|(crate_name, _)| crate_name == bin || links(bin, crate_name))
                .flat_map(|(_, d)| sources_in(d, &root))
                .collect();
            let own = if bin == "apiary-agent" {
                "agent/src/outbox/handle.rs"
            } else {
                "ingest/src/store/batch.rs"
            };
            assert!(
                sources.iter().any(|s| s.ends_with(own))
                    && sources
                        .iter()
                        .any(|s| s.ends_with("shared-schema/src/lib.rs"))
                    && sources.iter().any(|s| s.ends_with("src/main.rs")),
                "{bin}: its sources are missing: {dep_infos:?}"
            );
            let built = std::fs::metadata(path).and_then(|m| m.modified()).unwrap();
            for src in &sources {
                let Ok(t) = std::fs::metadata(src).and_then(|m| m.modified()) else {
                    continue;
                };
                assert!(
                    built >= t,
                    "{bin} is older than {}: a test would run stale code",
                    src.display()
                );
            }
        }
    }
}
