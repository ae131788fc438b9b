//! A fresh database per test.

use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection};

/// A database created for one test and dropped (best effort) when the value is dropped.
pub struct TestDb {
    pub url: String,
    admin_url: String,
    name: String,
}

impl TestDb {
    /// Creates `apiary_t_<random>` on the server of `DATABASE_URL` (set by `scripts/test.sh`).
    pub async fn create() -> anyhow::Result<TestDb> {
        let admin_url = std::env::var("DATABASE_URL").map_err(|_| {
            anyhow::anyhow!("DATABASE_URL is not set: run the tests with ./scripts/test.sh")
        })?;
        TestDb::create_on(&admin_url).await
    }

    /// Creates `apiary_t_<random>` on the server of `admin_url` (e.g. a [`PrivatePg`]).
    pub async fn create_on(admin_url: &str) -> anyhow::Result<TestDb> {
        let admin_url = admin_url.to_string();
        let name = format!("apiary_t_{}", uuid::Uuid::new_v4().simple());
        let mut conn = PgConnection::connect(&admin_url).await?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await?;
        let url = with_database(&admin_url, &name);
        let db = TestDb {
            url,
            admin_url,
            name,
        };
        join_citus_cluster(&mut conn, &db).await?;
        Ok(db)
    }

    /// The database's name (for a script that makes its own database under a name it is given).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The URL of the server's administrative database (`DATABASE_URL`), where databases are made.
    pub fn admin_url(&self) -> &str {
        &self.admin_url
    }

    /// A pool on the test database, for assertions that read the stored rows directly.
    pub async fn pool(&self) -> anyhow::Result<sqlx::PgPool> {
        Ok(PgPoolOptions::new()
            .max_connections(2)
            .connect(&self.url)
            .await?)
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (admin, name) = (self.admin_url.clone(), self.name.clone());
        // Dropping runs outside any runtime the test may have; use a small one of our own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let mut conn = PgConnection::connect(&admin).await.ok()?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut conn)
                    .await
                    .ok()
            })
        })
        .join();
    }
}

/// On a Citus cluster (the admin database has the citus extension and knows the nodes, as
/// `scripts/citus.sh start` leaves it), makes the new database a cluster database before the binaries
/// migrate it: the extension on every node (the coordinator's CREATE DATABASE reached the workers
/// through `citus.enable_create_database_propagation`), the coordinator and the workers registered.
/// `apiary-ingest migrate` then distributes the tables. Does nothing on plain PostgreSQL.
async fn join_citus_cluster(admin: &mut PgConnection, db: &TestDb) -> anyhow::Result<()> {
    let citus: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')")
            .fetch_one(&mut *admin)
            .await?;
    if !citus {
        return Ok(());
    }
    let nodes: Vec<(String, i32, i32)> = sqlx::query_as(
        "SELECT nodename::text, nodeport, groupid FROM pg_dist_node
         WHERE noderole = 'primary' ORDER BY groupid",
    )
    .fetch_all(&mut *admin)
    .await?;
    let opts: sqlx::postgres::PgConnectOptions = db.url.parse()?;
    for (host, port, _) in nodes.iter().filter(|n| n.2 != 0) {
        let worker_opts = opts.clone().host(host).port(u16::try_from(*port)?);
        let mut worker = PgConnection::connect_with(&worker_opts).await?;
        sqlx::query("CREATE EXTENSION IF NOT EXISTS citus")
            .execute(&mut worker)
            .await?;
        worker.close().await?;
    }
    let mut conn = PgConnection::connect(&db.url).await?;
    sqlx::query("CREATE EXTENSION IF NOT EXISTS citus")
        .execute(&mut conn)
        .await?;
    for (host, port, group) in &nodes {
        let sql = if *group == 0 {
            "SELECT citus_set_coordinator_host($1, $2)"
        } else {
            "SELECT citus_add_node($1, $2)"
        };
        sqlx::query(sql)
            .bind(host)
            .bind(port)
            .execute(&mut conn)
            .await?;
    }
    conn.close().await?;
    Ok(())
}

/// A private PostgreSQL cluster (`scripts/pg.sh` with `APIARY_PG_FORCE_PRIVATE=1`) that a test may stop
/// and start — never the shared server. Stopped when dropped; its directory goes with the temp dir.
pub struct PrivatePg {
    /// `postgres://postgres@127.0.0.1:PORT/postgres`
    pub url: String,
    dir: std::path::PathBuf,
    port_base: u16,
    _tmp: tempfile::TempDir,
}

impl PrivatePg {
    /// initdb + start on a free port (a few seconds).
    pub fn start() -> anyhow::Result<PrivatePg> {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = tempfile::tempdir()?;
        // initdb and postgres run as user `postgres`: it must be able to reach the cluster dir.
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755))?;
        let mut pg = PrivatePg {
            url: String::new(),
            dir: tmp.path().join("pg"),
            port_base: crate::free_port(),
            _tmp: tmp,
        };
        pg.start_again()?;
        Ok(pg)
    }

    fn script(&self, arg: &str) -> std::process::Command {
        let mut cmd = std::process::Command::new("bash");
        cmd.arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/pg.sh"))
            .arg(arg)
            .env("APIARY_PG_FORCE_PRIVATE", "1")
            .env("APIARY_PG_DIR", &self.dir)
            .env("APIARY_PG_PORT_BASE", self.port_base.to_string())
            .env_remove("DATABASE_URL");
        cmd
    }

    /// Starts the (existing) cluster again on the same port.
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        let out = crate::procs::run(&mut self.script("start"))?;
        let url = out
            .lines()
            .find_map(|l| l.strip_prefix("export DATABASE_URL="))
            .ok_or_else(|| anyhow::anyhow!("pg.sh start printed no DATABASE_URL: {out}"))?;
        anyhow::ensure!(
            url.contains(&format!(":{}/", self.port_base)),
            "the private cluster came up on another port than {}: {url}",
            self.port_base
        );
        self.url = url.trim_matches('\'').to_string();
        Ok(())
    }

    /// Stops it (fast shutdown: open connections are cut).
    pub fn stop(&self) -> anyhow::Result<()> {
        crate::procs::run(&mut self.script("stop")).map(|_| ())
    }
}

impl Drop for PrivatePg {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// The same server URL with another database name.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map(|i| i + 3).unwrap_or(0);
    let path_start = base[scheme_end..]
        .find('/')
        .map(|i| i + scheme_end)
        .unwrap_or(base.len());
    let mut out = format!("{}/{db}", &base[..path_start]);
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_names_are_swapped_in_urls() {
        assert_eq!(
            with_database("postgres://postgres@127.0.0.1:5432/postgres", "x"),
            "postgres://postgres@127.0.0.1:5432/x"
        );
        assert_eq!(
            with_database("postgres://u@h:1/db?host=/tmp/s", "x"),
            "postgres://u@h:1/x?host=/tmp/s"
        );
        assert_eq!(with_database("postgres://u@h:1", "x"), "postgres://u@h:1/x");
    }
}
