//! `apiary-ingest` processes and its command line.
//!
//! [`Ingest`]: one `apiary-ingest serve` process on a port chosen at run time (a free port is picked here
//! and passed with `--listen`, so a restart reuses it and the agent's endpoint stays valid). Ready when
//! `/readyz` answers 200. Killed when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::procs::{run, wait_for, Proc};
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
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        let mut proc = Proc::spawn("apiary-ingest", cmd, &self.log)?;
        let url = format!("{}/readyz", self.url());
        let ready = wait_for(Duration::from_secs(30), || {
            let url = url.clone();
            async move {
                let r = client().get(&url).send().await.ok()?;
                r.status().is_success().then_some(())
            }
        })
        .await;
        if ready.is_none() {
            let running = proc.is_running();
            anyhow::bail!(
                "apiary-ingest on port {} not ready after 30 s (running: {running}); log:\n{}",
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
