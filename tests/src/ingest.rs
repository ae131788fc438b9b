//! `apiary-ingest` processes and its command line.
//!
//! [`Ingest`]: one `apiary-ingest serve` process on a port chosen at run time (a free port is picked here
//! and passed with `--listen`, so a restart reuses it and the agent's endpoint stays valid). Ready when
//! `/readyz` answers 200 **and** this process logged that it listens on that port (JSON logs), so a server
//! of another test that took the port is never mistaken for ours. Killed when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::procs::{run, Proc};
use crate::stack::client;
use crate::{bins, free_port};

/// Runs `apiary-ingest ARGS` against `db_url` to completion; its stdout.
pub fn ingest_cli(db_url: &str, args: &[&str]) -> anyhow::Result<String> {
    let mut cmd = Command::new(bins::path("apiary-ingest"));
    cmd.args(args)
        .env("DATABASE_URL", db_url)
        .env("RUST_LOG", "warn");
    run(&mut cmd)
}

/// `apiary-ingest migrate`.
pub fn migrate(db_url: &str) -> anyhow::Result<()> {
    ingest_cli(db_url, &["migrate"]).map(|_| ())
}

/// A running `apiary-ingest serve`.
pub struct Ingest {
    proc: Option<Proc>,
    pub port: u16,
    db_url: String,
    log: PathBuf,
    env: Vec<(String, String)>,
}

impl Ingest {
    /// Starts a server on a free port (logs in `dir/ingest-<port>.log`) and waits until it is ready.
    pub async fn start(db_url: &str, dir: &Path) -> anyhow::Result<Ingest> {
        Ingest::start_with(db_url, dir, &[]).await
    }

    /// Same, with extra environment (e.g. `APIARY_RATE_LIMIT_PER_SEC`).
    pub async fn start_with(
        db_url: &str,
        dir: &Path,
        env: &[(&str, &str)],
    ) -> anyhow::Result<Ingest> {
        let mut last = None;
        // The port is free when picked but could be taken before the server binds it: try a few.
        for _ in 0..3 {
            let port = free_port();
            let mut ingest = Ingest {
                proc: None,
                port,
                db_url: db_url.to_string(),
                log: dir.join(format!("ingest-{port}.log")),
                env: env
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            };
            match ingest.restart().await {
                Ok(()) => return Ok(ingest),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("at least one attempt"))
    }

    /// (Re)starts the process on the same port and waits until `/readyz` answers 200.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        let mut cmd = Command::new(bins::path("apiary-ingest"));
        cmd.args(["serve", "--listen", &format!("127.0.0.1:{}", self.port)])
            .env("DATABASE_URL", &self.db_url)
            .env("RUST_LOG", "info,sqlx=warn,tower_http=warn")
            .env("APIARY_LOG_FORMAT", "json")
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        // Only this run's lines count: the log is appended to across restarts.
        let log_start = std::fs::metadata(&self.log).map_or(0, |m| m.len() as usize);
        let mut proc = Proc::spawn("apiary-ingest", cmd, &self.log)?;
        let url = format!("{}/readyz", self.url());
        let listening = format!("\"port\":{}", self.port);
        // A 200 from the port proves nothing by itself: another test's server may hold it (ours then
        // fails to bind and exits). Ready means: /readyz answers 200 and our process, still running,
        // logged that it listens on this port.
        let ours = || {
            let text = std::fs::read_to_string(&self.log).unwrap_or_default();
            text.get(log_start..).is_some_and(|t| {
                t.lines()
                    .any(|l| l.contains("\"listening\"") && l.contains(listening.as_str()))
            })
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut ready = None;
        while std::time::Instant::now() < deadline && proc.is_running() {
            let answered = client()
                .get(&url)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if answered && ours() {
                ready = Some(());
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if ready.is_none() {
            let running = proc.is_running();
            anyhow::bail!(
                "apiary-ingest on port {} not ready (running: {running}); log:\n{}",
                self.port,
                proc.output()
            );
        }
        self.proc = Some(proc);
        Ok(())
    }

    /// SIGKILL (no graceful shutdown).
    pub fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill_hard();
        }
    }

    /// `http://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The process id while it runs (for `/proc/PID/status` readings).
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().map(Proc::pid)
    }

    /// Its log so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Ingest {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_server_of_someone_else_on_the_port_is_not_taken_for_ours() {
        // Something that answers 200 to every request, /readyz included, holds the port.
        let other = crate::proxy::echo_upstream().await;
        let dir = tempfile::tempdir().unwrap();
        let mut ingest = Ingest {
            proc: None,
            port: other.port(),
            db_url: "postgres://127.0.0.1:1/none".into(),
            log: dir.path().join("ingest.log"),
            env: vec![],
        };
        let err = ingest
            .restart()
            .await
            .expect_err("ours could not bind the port");
        assert!(
            format!("{err:#}").contains("not ready (running: false)"),
            "{err:#}"
        );
    }
}
