//! The cloud side of a black-box test: `apiary-ingest` processes on a test database, tenants and tokens made
//! through its command line, and typed helpers for its query API.
//!
//! - [`Ingest`]: one `apiary-ingest serve` process on a port chosen at run time (a free port is picked
//!   here and passed with `--listen`, so a restart reuses it and the agent's endpoint stays valid). Ready
//!   when `/readyz` answers 200. Killed when dropped.
//! - [`Tenant`]: `tenant create` + three tokens (`ingest` bound to user `alice`, `read`, `admin`).
//! - [`Api`]: `GET /v1/usage`, `/v1/sessions/{id}`, `/v1/devices`, `POST /v1/batches` as `serde_json::Value`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;

use crate::procs::{last_line, run, wait_for, Proc};
use crate::{bins, free_port};

/// The user the ingest token is bound to (sessions without a device-side identity get it).
pub const USER: &str = "alice";

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

/// A tenant and its tokens, created through the command line.
#[derive(Debug, Clone)]
pub struct Tenant {
    pub id: String,
    /// Scope `ingest`, bound to [`USER`].
    pub ingest_token: String,
    pub read_token: String,
    pub admin_token: String,
}

impl Tenant {
    pub fn create(db_url: &str, name: &str) -> anyhow::Result<Tenant> {
        let id = last_line(&ingest_cli(db_url, &["tenant", "create", "--name", name])?);
        anyhow::ensure!(!id.is_empty(), "tenant create printed no id");
        let token = |scope: &str, user: Option<&str>| -> anyhow::Result<String> {
            let mut args = vec!["token", "create", "--tenant", &id, "--scope", scope];
            if let Some(u) = user {
                args.extend(["--user", u]);
            }
            let t = last_line(&ingest_cli(db_url, &args)?);
            anyhow::ensure!(!t.is_empty(), "token create printed no token");
            Ok(t)
        };
        Ok(Tenant {
            ingest_token: token("ingest", Some(USER))?,
            read_token: token("read", None)?,
            admin_token: token("admin", None)?,
            id,
        })
    }

    /// Writes the ingest token to `dir/ingest.token` (for `sync enable --token-file`); returns the path.
    pub fn write_ingest_token(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        let p = dir.join("ingest.token");
        std::fs::write(&p, format!("{}\n", self.ingest_token))?;
        Ok(p)
    }
}

/// An HTTP client that ignores proxy settings and never waits long.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("reqwest client")
}

/// Typed access to an ingest's API with one token.
#[derive(Clone)]
pub struct Api {
    pub base: String,
    pub token: String,
    http: reqwest::Client,
}

impl Api {
    pub fn new(base: &str, token: &str) -> Api {
        Api {
            base: base.to_string(),
            token: token.to_string(),
            http: client(),
        }
    }

    /// GET `path` (with query) → (status, JSON body).
    pub async fn get(&self, path_and_query: &str) -> anyhow::Result<(u16, Value)> {
        let r = self
            .http
            .get(format!("{}{path_and_query}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await
            .with_context(|| format!("GET {path_and_query}"))?;
        let status = r.status().as_u16();
        let text = r.text().await?;
        let v = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Ok((status, v))
    }

    /// GET that must answer 200.
    pub async fn get_ok(&self, path_and_query: &str) -> anyhow::Result<Value> {
        let (s, v) = self.get(path_and_query).await?;
        anyhow::ensure!(s == 200, "GET {path_and_query}: {s} {v}");
        Ok(v)
    }

    /// `GET /v1/usage?group_by=G&granularity=GRAN&from=FROM&to=TO&tz=UTC`.
    pub async fn usage(
        &self,
        group_by: &str,
        granularity: &str,
        from: &str,
        to: &str,
    ) -> anyhow::Result<Value> {
        self.get_ok(&format!(
            "/v1/usage?group_by={group_by}&granularity={granularity}&from={from}&to={to}&tz=UTC"
        ))
        .await
    }

    pub async fn session(&self, id: &str) -> anyhow::Result<Value> {
        self.get_ok(&format!("/v1/sessions/{id}")).await
    }

    pub async fn devices(&self) -> anyhow::Result<Value> {
        self.get_ok("/v1/devices").await
    }

    /// `POST /v1/batches` with a JSON body → (status, verdicts).
    pub async fn post_batch(&self, body: &[u8]) -> anyhow::Result<(u16, Value)> {
        let r = self
            .http
            .post(format!("{}/v1/batches", self.base))
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .timeout(Duration::from_secs(120))
            .body(body.to_vec())
            .send()
            .await?;
        let status = r.status().as_u16();
        let text = r.text().await?;
        Ok((
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        ))
    }
}

/// A whole cloud for one test: a fresh database (migrated), a tenant with tokens, one ingest process,
/// and a temp directory for logs and files. Fields drop in order: the process first, the database last.
pub struct Cloud {
    pub ingest: Ingest,
    pub tenant: Tenant,
    pub dir: tempfile::TempDir,
    pub db: crate::db::TestDb,
}

impl Cloud {
    pub async fn start() -> anyhow::Result<Cloud> {
        Cloud::start_with(crate::db::TestDb::create().await?).await
    }

    /// The same on a given test database (e.g. on a private cluster).
    pub async fn start_with(db: crate::db::TestDb) -> anyhow::Result<Cloud> {
        let dir = tempfile::tempdir()?;
        let url = db.url.clone();
        let tenant = tokio::task::spawn_blocking(move || -> anyhow::Result<Tenant> {
            migrate(&url)?;
            Tenant::create(&url, "acme")
        })
        .await??;
        let ingest = Ingest::start(&db.url, dir.path()).await?;
        Ok(Cloud {
            ingest,
            tenant,
            dir,
            db,
        })
    }

    /// The API with the read token, on the first ingest.
    pub fn read_api(&self) -> Api {
        Api::new(&self.ingest.url(), &self.tenant.read_token)
    }

    pub fn admin_api(&self) -> Api {
        Api::new(&self.ingest.url(), &self.tenant.admin_token)
    }

    pub fn ingest_api(&self) -> Api {
        Api::new(&self.ingest.url(), &self.tenant.ingest_token)
    }

    /// Another `serve` process on the same database.
    pub async fn replica(&self) -> anyhow::Result<Ingest> {
        Ingest::start(&self.db.url, self.dir.path()).await
    }
}

/// What the cloud holds for one session of synthetic turns (see [`crate::fixture::synthetic_turns`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    /// `llm_calls` of `/v1/usage` for the session.
    pub llm_calls: i64,
    /// `input_tokens` of `/v1/usage` for the session.
    pub input_tokens: i64,
    /// Rows of the `events` table for the session.
    pub rows: i64,
    /// Distinct event ids among them.
    pub distinct: i64,
}

impl Cloud {
    /// Rollups and raw rows of one session.
    pub async fn stored(&self, session: &str) -> anyhow::Result<Stored> {
        let v = self
            .read_api()
            .usage(
                "session",
                "total",
                "2026-01-01T00:00:00Z",
                "2027-01-01T00:00:00Z",
            )
            .await?;
        let row = v["rows"]
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["session_id"] == session))
            .cloned()
            .unwrap_or_default();
        let pool = self.db.pool().await?;
        let (rows, distinct): (i64, i64) = sqlx::query_as(
            "SELECT count(*), count(DISTINCT event_id) FROM events WHERE session_id = $1",
        )
        .bind(session)
        .fetch_one(&pool)
        .await?;
        pool.close().await;
        Ok(Stored {
            llm_calls: row["llm_calls"].as_i64().unwrap_or(0),
            input_tokens: row["input_tokens"].as_i64().unwrap_or(0),
            rows,
            distinct,
        })
    }

    /// Asserts the session holds exactly `n` synthetic turns: nothing lost, nothing counted twice.
    pub async fn assert_exactly(&self, session: &str, n: i64) -> anyhow::Result<()> {
        let s = self.stored(session).await?;
        let want = Stored {
            llm_calls: n,
            input_tokens: 100 * n,
            rows: n,
            distinct: n,
        };
        anyhow::ensure!(s == want, "session {session}: stored {s:?}, want {want:?}");
        Ok(())
    }
}
