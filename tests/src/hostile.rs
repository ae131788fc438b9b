//! Tools for attacking a running agent from outside: raw requests with any method, path, token and body;
//! the process's memory peak; processes and commands run under a chosen umask; file modes.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::agent::Agent;
use crate::bins;
use crate::procs::{run, wait_for, Proc};

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
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
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
