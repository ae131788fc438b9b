//! The device side of a black-box test: an `apiary-agent run` process, its local API and its command line.
//!
//! [`Agent::start`] removes a stale `DIR/agent.addr` (a SIGKILLed agent leaves one behind), starts
//! `run --data-dir DIR --listen 127.0.0.1:0` with `APIARY_ZONE=UTC` (the fixture's naive timestamps are
//! read as UTC, so the fixture day is 2026-11-03 UTC), waits for the new `agent.addr`, reads the bearer
//! token from `DIR/agent.token`, and waits until `GET /v1/status` answers. Killed when dropped.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde::Deserialize;
use serde_json::Value;

use crate::procs::{run, wait_for, Proc};
use crate::stack::client;
use crate::wine::Launcher;

/// The outcome counters of `GET /v1/status` (`counters`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct Counters {
    pub received: u64,
    pub delivered: u64,
    pub duplicate: u64,
    pub rejected: u64,
    pub filtered: u64,
    pub evicted: u64,
    pub purged: u64,
    pub exported: u64,
    pub pending: u64,
}

impl Counters {
    /// The terminal outcomes plus pending.
    pub fn accounted(&self) -> u64 {
        self.delivered
            + self.duplicate
            + self.rejected
            + self.filtered
            + self.evicted
            + self.purged
            + self.exported
            + self.pending
    }

    /// `received = delivered + duplicate + rejected + filtered + evicted + purged + exported + pending`.
    pub fn assert_balanced(&self) {
        assert_eq!(
            self.received,
            self.accounted(),
            "agent counters do not add up: {self:?}"
        );
    }
}

/// A running agent.
pub struct Agent {
    proc: Option<Proc>,
    pub data_dir: PathBuf,
    pub hive_home: Option<PathBuf>,
    pub addr: SocketAddr,
    /// The OTLP receiver's address (`DIR/otlp.addr`; the agent runs with `--otlp-listen 127.0.0.1:0`).
    pub otlp_addr: Option<SocketAddr>,
    /// Bearer token of the local API (`DIR/agent.token`).
    pub token: String,
    env: Vec<(String, String)>,
    log: PathBuf,
    http: reqwest::Client,
    /// The Linux binary, or the Windows exe under Wine.
    pub launcher: Launcher,
}

impl Agent {
    /// Starts an agent on `data_dir`, tailing `hive_home` if given.
    pub async fn start(data_dir: &Path, hive_home: Option<&Path>) -> anyhow::Result<Agent> {
        Agent::start_with(data_dir, hive_home, &[]).await
    }

    /// Same, with extra environment (`APIARY_*` settings).
    pub async fn start_with(
        data_dir: &Path,
        hive_home: Option<&Path>,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Agent> {
        Agent::start_on(Launcher::Native, data_dir, hive_home, env).await
    }

    /// Same, started by `launcher` (the Windows exe under Wine: paths given in Windows form).
    pub async fn start_on(
        launcher: Launcher,
        data_dir: &Path,
        hive_home: Option<&Path>,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Agent> {
        std::fs::create_dir_all(data_dir)?;
        let mut agent = Agent {
            proc: None,
            data_dir: data_dir.to_path_buf(),
            hive_home: hive_home.map(Path::to_path_buf),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            otlp_addr: None,
            token: String::new(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            log: data_dir.join("agent-run.log"),
            http: client(),
            launcher,
        };
        agent.restart().await?;
        Ok(agent)
    }

    /// (Re)starts the process on the same data directory.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.kill_hard();
        let addr_file = self.data_dir.join("agent.addr");
        let _ = std::fs::remove_file(&addr_file);
        let _ = std::fs::remove_file(self.data_dir.join("otlp.addr"));
        let mut cmd = self.launcher.command();
        cmd.arg("run")
            .arg("--data-dir")
            .arg(self.launcher.path_arg(&self.data_dir))
            .args(["--listen", "127.0.0.1:0"])
            .args(["--otlp-listen", "127.0.0.1:0"]);
        if let Some(h) = &self.hive_home {
            cmd.arg("--hive-home").arg(self.launcher.path_arg(h));
        }
        cmd.env("APIARY_ZONE", "UTC")
            .env("RUST_LOG", "info")
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        let mut proc = Proc::spawn("apiary-agent", cmd, &self.log)?;
        // Under Wine a first start also loads Wine itself: give it longer.
        let start_timeout = match self.launcher {
            Launcher::Native => Duration::from_secs(30),
            Launcher::Wine(_) => Duration::from_secs(90),
        };
        let addr = wait_for(start_timeout, || {
            let f = addr_file.clone();
            async move { std::fs::read_to_string(f).ok()?.trim().parse().ok() }
        })
        .await;
        let Some(addr) = addr else {
            anyhow::bail!(
                "apiary-agent wrote no agent.addr within {start_timeout:?} (running: {}); log:\n{}",
                proc.is_running(),
                proc.output()
            );
        };
        self.addr = addr;
        self.otlp_addr = std::fs::read_to_string(self.data_dir.join("otlp.addr"))
            .ok()
            .and_then(|a| a.trim().parse().ok());
        self.token = std::fs::read_to_string(self.data_dir.join("agent.token"))
            .context("reading agent.token")?
            .trim()
            .to_string();
        self.proc = Some(proc);
        let up = wait_for(Duration::from_secs(10), || async {
            self.status().await.ok().map(|_| ())
        })
        .await;
        anyhow::ensure!(
            up.is_some(),
            "agent status not answering; log:\n{}",
            self.output()
        );
        Ok(())
    }

    /// SIGKILL.
    pub fn kill_hard(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill_hard();
        }
    }

    /// SIGTERM and wait (up to `timeout`).
    pub fn terminate(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        self.proc.take()?.terminate(timeout)
    }

    /// Waits up to `timeout` for the agent to end by itself (asked some other way, e.g. `apiary-agent
    /// stop`); its exit status, None (and killed) when it did not end.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        self.proc.take()?.wait_exit(timeout)
    }

    /// The process id (0 when not running).
    pub fn pid(&self) -> u32 {
        self.proc.as_ref().map_or(0, Proc::pid)
    }

    pub fn is_running(&mut self) -> bool {
        self.proc.as_mut().is_some_and(Proc::is_running)
    }

    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// `GET /v1/status`.
    pub async fn status(&self) -> anyhow::Result<Value> {
        let r = self
            .http
            .get(self.url("/v1/status"))
            .bearer_auth(&self.token)
            .timeout(Duration::from_secs(5))
            .send()
            .await?;
        anyhow::ensure!(r.status().is_success(), "status: {}", r.status());
        Ok(r.json().await?)
    }

    /// The outcome counters of `/v1/status`.
    pub async fn counters(&self) -> anyhow::Result<Counters> {
        let s = self.status().await?;
        Ok(serde_json::from_value(s["counters"].clone())?)
    }

    /// `POST /v1/events` with an NDJSON body → (status, response body).
    pub async fn post_events(&self, body: Vec<u8>) -> anyhow::Result<(u16, Value)> {
        self.post_events_for(body, None).await
    }

    /// `POST /v1/events?session=ID`: the producer names the session of Hive events that name none
    /// (what a producer replaying a per-session log knows from its directory).
    pub async fn post_events_for(
        &self,
        body: Vec<u8>,
        session: Option<&str>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut url = self.url("/v1/events");
        if let Some(s) = session {
            url = format!("{url}?session={s}");
        }
        let r = self
            .http
            .post(url)
            .bearer_auth(&self.token)
            .header("content-type", "application/x-ndjson")
            .timeout(Duration::from_secs(60))
            .body(body)
            .send()
            .await?;
        let status = r.status().as_u16();
        let text = r.text().await?;
        Ok((
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }

    /// `POST /v1/sessions` with a JSON body → (status, response body).
    pub async fn register_session(&self, body: &Value) -> anyhow::Result<(u16, Value)> {
        let r = self
            .http
            .post(self.url("/v1/sessions"))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await?;
        let status = r.status().as_u16();
        Ok((status, r.json().await.unwrap_or(Value::Null)))
    }

    /// Runs `apiary-agent ARGS --data-dir DIR` to completion; its stdout.
    pub fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        agent_cli_on(&self.launcher, &self.data_dir, args, &self.env)
    }

    /// `sync enable --endpoint URL --token-file F [--include-backlog]`.
    pub fn sync_enable(
        &self,
        endpoint: &str,
        token_file: &Path,
        include_backlog: bool,
    ) -> anyhow::Result<String> {
        let tf = self
            .launcher
            .path_arg(token_file)
            .to_string_lossy()
            .into_owned();
        let mut args = vec![
            "sync",
            "enable",
            "--endpoint",
            endpoint,
            "--token-file",
            &tf,
        ];
        if include_backlog {
            args.push("--include-backlog");
        }
        self.cli(&args)
    }

    /// Waits until `check` holds for the counters (polling), or fails with the last counters and the log.
    pub async fn wait_counters(
        &self,
        timeout: Duration,
        what: &str,
        check: impl Fn(&Counters) -> bool,
    ) -> anyhow::Result<Counters> {
        let last = std::sync::Mutex::new(Counters::default());
        let got = wait_for(timeout, || {
            let c = self.counters();
            let (last, check) = (&last, &check);
            async move {
                let c = c.await.ok()?;
                *last.lock().expect("counters") = c;
                check(&c).then_some(c)
            }
        })
        .await;
        let last = *last.lock().expect("counters");
        match got {
            Some(c) => Ok(c),
            None => anyhow::bail!(
                "timed out after {timeout:?} waiting for {what}; last counters {last:?}; agent log tail:\n{}",
                tail(&self.output(), 40)
            ),
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill_hard();
    }
}

/// Runs `apiary-agent ARGS --data-dir DIR` (no running agent needed).
pub fn agent_cli(
    data_dir: &Path,
    args: &[&str],
    env: &[(String, String)],
) -> anyhow::Result<String> {
    agent_cli_on(&Launcher::Native, data_dir, args, env)
}

/// [`agent_cli`], started by `launcher`.
pub fn agent_cli_on(
    launcher: &Launcher,
    data_dir: &Path,
    args: &[&str],
    env: &[(String, String)],
) -> anyhow::Result<String> {
    let mut cmd = launcher.command();
    cmd.args(args)
        .arg("--data-dir")
        .arg(launcher.path_arg(data_dir))
        .env("APIARY_ZONE", "UTC")
        .env("RUST_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (k, v)));
    run(&mut cmd)
}

/// The last `n` lines of a log.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
