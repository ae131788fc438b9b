//! Tools of the hostile-input tests, for the ingest and the agent: a process's resident memory and its
//! peak (from `/proc`, Linux only), gzip bombs, raw HTTP over a TCP socket for what a well-behaved client
//! cannot send, raw requests to an agent with any method, path, token and body, processes and commands
//! run under a chosen umask, and file modes.

use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::agent::Agent;
use crate::bins;
use crate::procs::{run, wait_for, Proc};

/// A field of `/proc/PID/status` in KiB (`VmHWM`: peak resident set, `VmRSS`: current). None off Linux.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Resets the process's `VmHWM` to its current RSS (`/proc/PID/clear_refs` ← 5, Linux ≥ 4.0). False when
/// the kernel refuses; the peak then counts from the start of the process.
pub fn reset_peak(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// `bytes` gzip-compressed (fast level): a request body with `Content-Encoding: gzip`.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).expect("writing to a Vec cannot fail");
    enc.finish().expect("finishing a Vec cannot fail")
}

/// gzip (best compression) of `head`, then `unit` repeated until the text is `size` bytes, then `tail`.
/// Streams, so building a 64 MiB bomb needs only its compressed size in memory.
pub fn gzip_bomb(head: &str, unit: &str, tail: &str, size: usize) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(head.as_bytes()).unwrap();
    let body = size.saturating_sub(head.len() + tail.len());
    let chunk = unit.repeat((64 * 1024 / unit.len()).max(1));
    let mut left = body / unit.len();
    while left > 0 {
        let n = left.min(chunk.len() / unit.len());
        gz.write_all(&chunk.as_bytes()[..n * unit.len()]).unwrap();
        left -= n;
    }
    gz.write_all(tail.as_bytes()).unwrap();
    gz.finish().unwrap()
}

/// Sends `bytes` as they are on a fresh connection to `addr` and reads the answer until the server closes
/// the connection or `wait` passes; returns what was read (the status line first).
pub async fn raw_http(addr: std::net::SocketAddr, bytes: &[u8], wait: Duration) -> String {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(bytes).await.expect("write");
    let mut out = Vec::new();
    let _ = tokio::time::timeout(wait, s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// What a raw request got back.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub content_type: String,
    /// The body as JSON (a JSON string holding the text when it is not JSON).
    pub body: Value,
}

impl Answer {
    /// Asserts the error shape every agent error has: JSON `{"error": {"code", "message"}}`.
    pub fn assert_json_error(&self, status: u16, what: &str) {
        assert_eq!(self.status, status, "{what}: {self:?}");
        assert!(
            self.content_type.starts_with("application/json"),
            "{what}: not JSON: {self:?}"
        );
        let code = self.body.pointer("/error/code").and_then(Value::as_str);
        let message = self.body.pointer("/error/message").and_then(Value::as_str);
        assert!(
            code.is_some_and(|c| !c.is_empty()) && message.is_some_and(|m| !m.is_empty()),
            "{what}: no error code and message: {self:?}"
        );
    }

    pub fn message(&self) -> &str {
        self.body
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
}

/// Sends `method path` to the agent with `token` (none when empty) and `body`.
pub async fn raw(
    agent: &Agent,
    method: &str,
    path: &str,
    token: &str,
    body: impl Into<reqwest::Body>,
) -> anyhow::Result<Answer> {
    let method = reqwest::Method::from_bytes(method.as_bytes())?;
    let mut req = crate::stack::client()
        .request(method, format!("http://{}{path}", agent.addr))
        .timeout(Duration::from_secs(120))
        .body(body);
    if !token.is_empty() {
        req = req.bearer_auth(token);
    }
    let r = req.send().await?;
    let status = r.status().as_u16();
    let content_type = r
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let text = r.text().await?;
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    Ok(Answer {
        status,
        content_type,
        body,
    })
}

/// The settings token of the agent's data directory (`DIR/settings.token`).
pub fn settings_token(data_dir: &Path) -> anyhow::Result<String> {
    Ok(std::fs::read_to_string(data_dir.join("settings.token"))?
        .trim()
        .to_string())
}

/// The peak resident set size of a process so far (`VmHWM` in `/proc/PID/status`), in KiB (Linux).
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmHWM")
}

/// A command run by `sh` after `umask MASK`, so the binary starts with that umask.
fn under_umask(umask: u32, args: &[&str], data_dir: &Path) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("umask {umask:03o} && exec \"$0\" \"$@\""))
        .arg(bins::path("apiary-agent"))
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .env("APIARY_ZONE", "UTC")
        .env("RUST_LOG", "warn");
    cmd
}

/// `apiary-agent run` on `data_dir` under `umask`; returns the process once `DIR/agent.addr` exists.
pub async fn run_under_umask(data_dir: &Path, umask: u32, log: &Path) -> anyhow::Result<Proc> {
    let mut cmd = under_umask(umask, &["run", "--listen", "127.0.0.1:0"], data_dir);
    cmd.env("RUST_LOG", "info");
    let mut proc = Proc::spawn("apiary-agent", cmd, log)?;
    let addr = data_dir.join("agent.addr");
    let up = wait_for(Duration::from_secs(30), || {
        let a = addr.clone();
        async move { a.exists().then_some(()) }
    })
    .await;
    anyhow::ensure!(
        up.is_some(),
        "no agent.addr within 30 s (running: {}): {}",
        proc.is_running(),
        proc.output()
    );
    Ok(proc)
}

/// `apiary-agent ARGS --data-dir DIR` under `umask`, to completion; its stdout.
pub fn cli_under_umask(data_dir: &Path, umask: u32, args: &[&str]) -> anyhow::Result<String> {
    run(&mut under_umask(umask, args, data_dir))
}

/// The permission bits of `path` (not following a symlink).
#[cfg(unix)]
pub fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .map(|m| m.permissions().mode() & 0o7777)
        .unwrap_or(0)
}

/// Names in `dir` (for "nothing was left behind" checks).
pub fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}
