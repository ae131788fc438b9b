//! The one-command demo (`deploy/local/demo.sh`) the way people and CI run it: its output piped to a
//! reader that waits for the end (`demo.sh | tee demo.log`, `out=$(demo.sh)`, a CI log), under a time
//! limit. It must return, and no process it started may be left — also for `--keep-running` followed
//! by `--stop`.
//!
//! The demo runs in a process group of its own, so "its processes" are exactly the members of that
//! group (whatever they run: the binaries, the webhook receiver, a stand-in runtime). It runs in its
//! cheap form: one user, the day written at once, the binaries of this build (`APIARY_DEMO_BIN_DIR`, no
//! release build), a state directory and a database of the test's own — about 15 s a run where a full
//! demo takes about half a minute after its release build.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tests::bins;
use tests::db::TestDb;

/// Longest a demo run may take before the test calls it hung.
const LIMIT: Duration = Duration::from_secs(300);

/// A process group: every process a demo run started, killed when dropped (a failing test leaves
/// nothing running).
struct Group(u32);

impl Group {
    /// The members still running: (pid, command line).
    fn members(&self) -> Vec<(u32, String)> {
        let mut out = vec![];
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|p| p.parse::<u32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // After the command name (which may hold spaces and parentheses): state, ppid, pgrp, ...
            let fields: Vec<&str> = stat
                .rsplit_once(") ")
                .map_or(vec![], |(_, rest)| rest.split(' ').collect());
            let in_group = fields.get(2).and_then(|g| g.parse::<u32>().ok()) == Some(self.0);
            let running = fields.first().is_some_and(|s| *s != "Z");
            if in_group && running {
                let cmdline = std::fs::read(entry.path().join("cmdline"))
                    .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
                    .unwrap_or_default();
                out.push((pid, cmdline));
            }
        }
        out
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.members().is_empty() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.0)])
                .status();
        }
    }
}

/// How a run ended: its exit status, and what it printed (all of stdout: it was read to the end).
struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// A demo with its own state directory and database.
struct Demo {
    state: tempfile::TempDir,
    db: TestDb,
}

impl Demo {
    async fn new() -> Demo {
        Demo {
            state: tempfile::tempdir().unwrap(),
            db: TestDb::create().await.unwrap(),
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let bin_dir: PathBuf = bins::path("apiary-ingest")
            .parent()
            .expect("the binaries' directory")
            .to_path_buf();
        let mut cmd = Command::new("bash");
        cmd.arg(root.join("deploy/local/demo.sh"))
            .args(args)
            .env("APIARY_DEMO_BIN_DIR", bin_dir)
            .env("APIARY_DEMO_STATE", self.state.path())
            .env("APIARY_DEMO_DB", self.db.name())
            .env("APIARY_DEMO_USERS", "alice")
            .env("APIARY_DEMO_TRICKLE", "0")
            .env("APIARY_DEMO_TIMEOUT", "120")
            .env("DATABASE_URL", self.db.admin_url())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        cmd
    }

    /// Starts `demo.sh ARGS` in a group of its own; reads its stdout and stderr to their ends and waits
    /// for it, up to [`LIMIT`]. Err with what it printed so far when it did not return in time.
    fn run(&self, args: &[&str]) -> (Group, Result<Run, String>) {
        let started = Instant::now();
        let mut child = self.command(args).spawn().expect("run bash");
        let group = Group(child.id());
        let out = read_all(child.stdout.take().expect("piped"));
        let err = read_all(child.stderr.take().expect("piped"));
        let result = (|| {
            let stdout = out.recv_timeout(LIMIT).map_err(|_| {
                format!(
                    "the demo's stdout was still open after {LIMIT:?} (demo running: {}; its group: {:?})",
                    running(&mut child),
                    group.members()
                )
            })?;
            let left = LIMIT.saturating_sub(started.elapsed()) + Duration::from_secs(5);
            let stderr = err.recv_timeout(left).unwrap_or_default();
            let status = wait(&mut child, left)
                .ok_or_else(|| format!("the demo did not exit; stdout:\n{stdout}"))?;
            Ok(Run {
                status,
                stdout,
                stderr,
                took: started.elapsed(),
            })
        })();
        if result.is_err() {
            let _ = child.kill();
            let _ = child.wait();
        }
        (group, result)
    }
}

/// Reads `r` to its end on a thread; the text arrives on the channel then.
fn read_all(mut r: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
    });
    rx
}

fn running(child: &mut Child) -> bool {
    matches!(child.try_wait(), Ok(None))
}

fn wait(child: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return Some(s);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (up to 20 s) until no member of `group` runs; the members left otherwise.
fn emptied(group: &Group) -> Vec<(u32, String)> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = group.members();
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn tail(text: &str) -> String {
    tests::agent::tail(text, 40)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_piped_to_a_reader_returns_and_leaves_nothing_running() {
    let demo = Demo::new().await;
    let (group, run) = tokio::task::block_in_place(|| demo.run(&[]));
    let run = run.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        run.status.success(),
        "the demo failed ({}) after {:?}:\n{}\n{}",
        run.status,
        run.took,
        tail(&run.stdout),
        tail(&run.stderr)
    );
    assert!(run.stdout.contains("Demo OK"), "{}", tail(&run.stdout));
    let left = emptied(&group);
    assert!(
        left.is_empty(),
        "processes of the demo left running: {left:#?}"
    );
    eprintln!("demo run: {:?}", run.took);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_demo_returns_with_its_processes_running_and_stop_ends_every_one() {
    let demo = Demo::new().await;
    let (group, run) = tokio::task::block_in_place(|| demo.run(&["--keep-running"]));
    let run = run.unwrap_or_else(|e| panic!("{e}"));
    assert!(
        run.status.success(),
        "the demo failed ({}):\n{}\n{}",
        run.status,
        tail(&run.stdout),
        tail(&run.stderr)
    );
    assert!(run.stdout.contains("--stop"), "{}", tail(&run.stdout));
    // What it keeps: the ingest, the agent and the webhook receiver, none of them holding its output
    // (the reader above saw the end of it).
    let kept = group.members();
    let kept_text = format!("{kept:#?}");
    for what in [
        "apiary-ingest serve",
        "apiary-agent run",
        "demo_util.py receiver",
    ] {
        assert!(
            kept_text.contains(what),
            "{what} is not running: {kept_text}"
        );
    }
    let runfile = std::fs::read_to_string(demo.state.path().join("demo.run")).unwrap();
    for (pid, _) in &kept {
        assert!(
            runfile
                .lines()
                .any(|l| l.starts_with(&format!("pid {pid} "))),
            "pid {pid} is not in the run file:\n{runfile}"
        );
    }

    let (stopper, stop) = tokio::task::block_in_place(|| demo.run(&["--stop"]));
    let stop = stop.unwrap_or_else(|e| panic!("--stop: {e}"));
    assert!(
        stop.status.success(),
        "--stop: {}\n{}",
        stop.stdout,
        stop.stderr
    );
    assert!(
        stop.stdout
            .contains(&format!("stopped {} process(es)", kept.len())),
        "{}",
        stop.stdout
    );
    let left = emptied(&group);
    assert!(
        left.is_empty(),
        "processes of the demo left running after --stop: {left:#?}"
    );
    assert!(stopper.members().is_empty());
    assert!(!demo.state.path().join("demo.run").exists());
}
