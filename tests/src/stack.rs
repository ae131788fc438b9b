//! The cloud side of a black-box test: `apiary-ingest` processes on a test database, tenants and tokens made
//! through its command line, and typed helpers for its query API.
//!
//! - [`Ingest`] (from [`crate::ingest`]): `apiary-ingest serve` processes.
//! - [`Tenant`]: `tenant create` + three tokens (`ingest` bound to user `alice`, `read`, `admin`).
//! - [`Api`]: `GET /v1/usage`, `/v1/sessions/{id}`, `/v1/devices`, `POST /v1/batches` as `serde_json::Value`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;

pub use crate::ingest::{ingest_cli, migrate, Ingest};
use crate::procs::last_line;

/// The user the ingest token is bound to (sessions without a device-side identity get it).
pub const USER: &str = "alice";

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

    /// Writes the ingest token to `dir/ingest.token`, mode 0600 (`sync enable --token-file` refuses a
    /// token file others can read); returns the path.
    pub fn write_ingest_token(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        let p = dir.join("ingest.token");
        write_private(&p, &format!("{}\n", self.ingest_token))?;
        Ok(p)
    }
}

/// Writes `text` to a new file `path` only its owner may read (0600 on unix, whatever the umask).
pub fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut f = options.open(path)?;
    #[cfg(unix)]
    f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    f.write_all(text.as_bytes())
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
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "{e:#}; ingest log tail:\n{}",
                    crate::agent::tail(&self.ingest.output(), 30)
                )
            })?;
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
