//! What the agent's benchmarks share: a real `apiary-agent` process (this build's, or another build's
//! binary for a baseline measured in the same run), HTTP posting over a fixed number of connections,
//! and the statistics they print.

#![allow(dead_code)] // each bench uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// This build's agent binary.
pub fn this_build() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_apiary-agent"))
}

/// A running `apiary-agent run` with its data directory, intake address and token.
pub struct Agent {
    child: Child,
    pub base: String,
    pub token: String,
    /// `http://` + the OTLP receiver's address.
    pub otlp: String,
}

impl Agent {
    /// This build's agent on `dir`.
    pub fn start(dir: &Path) -> Agent {
        Agent::start_bin(&this_build(), dir, &[])
    }

    /// The agent binary `bin` on `dir`, with extra `args` to `run` (e.g. `--hive-home`).
    pub fn start_bin(bin: &Path, dir: &Path, args: &[&str]) -> Agent {
        Agent::start_env(bin, dir, args, &[])
    }

    /// Same, with extra environment (`APIARY_*` settings).
    #[allow(clippy::zombie_processes)] // waited for in `stop` and `drop`
    pub fn start_env(bin: &Path, dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Agent {
        // The agent wants its data directory private (it would tighten it itself, with a warning).
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
        }
        let child = Command::new(bin)
            .args(["run", "--data-dir"])
            .arg(dir)
            .args(["--listen", "127.0.0.1:0"])
            .args(["--otlp-listen", "127.0.0.1:0"])
            .args(args)
            .env("RUST_LOG", "warn")
            .env("APIARY_ZONE", "UTC")
            .env("APIARY_OUTBOX_MAX_BYTES", (8u64 << 30).to_string())
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(addr) = std::fs::read_to_string(dir.join("agent.addr")) {
                let token = std::fs::read_to_string(dir.join("agent.token")).unwrap();
                let otlp = std::fs::read_to_string(dir.join("otlp.addr")).unwrap_or_default();
                return Agent {
                    child,
                    base: format!("http://{}", addr.trim()),
                    token: token.trim().to_string(),
                    otlp: format!("http://{}", otlp.trim()),
                };
            }
            assert!(Instant::now() < deadline, "agent did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// (VmRSS, VmHWM) in MiB.
    pub fn rss_mib(&self) -> (f64, f64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let kb = |key: &str| {
            status
                .lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (kb("VmRSS:") / 1024.0, kb("VmHWM:") / 1024.0)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// CPU-seconds (user + system) the agent has used since it started: the whole process, and its
    /// outbox writer thread (the one thread every event's commit goes through). From `/proc`: `None`
    /// where there is none.
    pub fn cpu(&self) -> Option<Cpu> {
        let dir = format!("/proc/{}", self.child.id());
        let process = stat_seconds(&format!("{dir}/stat"))?;
        let mut writer = 0.0;
        for task in std::fs::read_dir(format!("{dir}/task")).ok()?.flatten() {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if comm.trim() == "outbox-writer" {
                writer += stat_seconds(&task.path().join("stat").to_string_lossy()).unwrap_or(0.0);
            }
        }
        Some(Cpu { process, writer })
    }

    pub fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }

    /// The agent's `GET /v1/status`.
    pub async fn status(&self) -> Value {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let r = client
            .get(format!("{}/v1/status", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap();
        r.json::<Value>().await.unwrap()
    }
}

/// CPU-seconds used (see [`Agent::cpu`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct Cpu {
    pub process: f64,
    pub writer: f64,
}

impl Cpu {
    /// Milliseconds of CPU per 1000 `lines` used between `before` and `self`: (process, writer).
    pub fn per_1000_since(self, before: Cpu, lines: usize) -> (f64, f64) {
        let per = |s: f64| s * 1e6 / lines.max(1) as f64;
        (
            per(self.process - before.process),
            per(self.writer - before.writer),
        )
    }
}

/// utime + stime of a `/proc/…/stat` file, in seconds.
fn stat_seconds(path: &str) -> Option<f64> {
    let text = std::fs::read_to_string(path).ok()?;
    // Fields after the command name (which may hold spaces), from field 3 (state): utime is field 14,
    // stime field 15.
    let fields: Vec<&str> = text.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / clock_ticks())
}

/// The kernel's clock ticks per second (`getconf CLK_TCK`; 100 on Linux when that fails).
fn clock_ticks() -> f64 {
    static TICKS: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100.0)
    })
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Posts `bodies` to `url` over `connections` connections, each body after the previous answer on its
/// connection (closed loop). Returns (events/s, sorted per-request latencies in ms).
pub async fn post_to(
    url: &str,
    ctype: &'static str,
    token: &str,
    bodies: &[bytes::Bytes],
    events: usize,
    connections: usize,
) -> (f64, Vec<f64>) {
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let (url, token) = (url.to_string(), token.to_string());
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (client, url, next, token) = (client.clone(), url.clone(), next.clone(), token.clone());
        let bodies = bodies.to_vec();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(body) = bodies.get(i) else { break };
                let t = Instant::now();
                let r = client
                    .post(&url)
                    .bearer_auth(&token)
                    .header("content-type", ctype)
                    .body(body.clone())
                    .send()
                    .await
                    .unwrap();
                let status = r.status();
                let text = r.text().await.unwrap_or_default();
                assert!(status.is_success(), "{status}: {text}");
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            lat
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    let rate = events as f64 / start.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    (rate, lat)
}

/// Lines joined into NDJSON bodies of `per_body` lines.
pub fn bodies(lines: &[String], per_body: usize) -> Vec<bytes::Bytes> {
    lines
        .chunks(per_body)
        .map(|c| bytes::Bytes::from(c.join("\n")))
        .collect()
}

#[path = "../../../bench-support/stats.rs"]
mod stats;
// Not every benchmark uses both.
#[allow(unused_imports)]
pub use stats::{median, percentile};
