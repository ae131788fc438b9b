//! Commands whose reader goes away, as in `apiary-ingest budget list | head -1`.
//!
//! - [`closed_stdout`]: the command's stdout is a pipe whose only reader has already exited before the
//!   command starts, so its first write fails (`EPIPE`) — deterministic, whatever the output's size.
//! - [`through_head`]: the command piped into a real `head -n 1`, which reads one line and exits while
//!   the command may still be writing.

use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How a command ended, and what it wrote to stderr.
#[derive(Debug)]
pub struct Ended {
    /// None: killed after the time limit.
    pub status: Option<ExitStatus>,
    pub stderr: String,
}

impl Ended {
    /// Whether the process panicked or printed a write failure ("failed printing to stdout: Broken
    /// pipe", a backtrace, an `os error 32`).
    pub fn complained(&self) -> bool {
        ["panicked", "Broken pipe", "os error 32", "backtrace"]
            .iter()
            .any(|w| self.stderr.contains(w))
    }
}

/// Waits for `child` (its stderr piped) up to `limit`, killing it after that.
fn finish(mut child: Child, limit: Duration) -> anyhow::Result<Ended> {
    let mut err = child.stderr.take().expect("stderr is piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = reader.join().unwrap_or_default();
    Ok(Ended { status, stderr })
}

/// Runs `cmd` with a stdout nobody reads any more (see the module notes), up to `limit`.
pub fn closed_stdout(mut cmd: Command, limit: Duration) -> anyhow::Result<Ended> {
    let mut reader = Command::new("true")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()?;
    let write_end = reader.stdin.take().expect("stdin is piped");
    // With `true` gone, no process holds the read end.
    reader.wait()?;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::from(write_end))
        .stderr(Stdio::piped())
        .spawn()?;
    drop(cmd);
    finish(child, limit)
}

/// Runs `cmd | head -n 1` up to `limit`: what `head` printed, and how `cmd` ended.
pub fn through_head(mut cmd: Command, limit: Duration) -> anyhow::Result<(String, Ended)> {
    let mut head = Command::new("head")
        .args(["-n", "1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    let into_head = head.stdin.take().expect("stdin is piped");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::from(into_head))
        .stderr(Stdio::piped())
        .spawn()?;
    // The write end lives in the child only, so `head` sees the end of its input when the child ends.
    drop(cmd);
    let mut first = String::new();
    head.stdout
        .take()
        .expect("stdout is piped")
        .read_to_string(&mut first)?;
    head.wait()?;
    Ok((first, finish(child, limit)?))
}
