//! `apiary-ingest doctor`: checks what a deployment needs before `serve` — the `APIARY_*` variables, the
//! configuration, the database (URL given, reachable, migrated to this binary's schema), the listen
//! address (valid, free), and whether any tenant exists yet — one line per check with the fix; exit
//! status 1 when something is wrong. Read-only: it applies no migration and creates nothing.

use std::path::Path;
use std::time::Duration;

use apiary_plumbing::doctor::Report;

use crate::config::IngestSettings;
use crate::store;

/// Runs every check; true when nothing is wrong.
pub async fn run(config: Option<&Path>) -> bool {
    let mut r = Report::default();
    apiary_plumbing::doctor::check_variables(&mut r);
    let known = apiary_plumbing::env::known_vars();
    let settings = match IngestSettings::load_from(config, &known).and_then(|s| {
        s.validate()?;
        Ok(s)
    }) {
        Ok(s) => {
            r.ok("configuration loads and is consistent");
            s
        }
        Err(e) => {
            r.wrong(
                format!("configuration: {e}"),
                "fix the key or variable named (every key: deploy/config/ingest.toml)",
            );
            let _ = r.print();
            return false;
        }
    };
    check_database(&mut r, &settings).await;
    check_listen(&mut r, &settings.listen).await;
    match r.print() {
        Ok(()) => !r.failed(),
        Err(e) => {
            apiary_plumbing::errln!("apiary-ingest doctor: {e}");
            false
        }
    }
}

async fn check_database(r: &mut Report, settings: &IngestSettings) {
    let url = match settings.database_url() {
        Ok(u) => u,
        Err(e) => {
            r.wrong(
                e.to_string(),
                "export DATABASE_URL=postgres://USER@HOST:5432/DB",
            );
            return;
        }
    };
    match store::diagnose(url, Duration::from_secs(5)).await {
        Ok(()) => {}
        Err(store::ConnectProblem::MissingDatabase { place, createdb }) => {
            r.wrong(
                format!("{place}: the database does not exist"),
                format!(
                    "{createdb}   (or: apiary-ingest migrate, which creates it when the role may)"
                ),
            );
            return;
        }
        Err(problem) => {
            r.wrong(
                problem.to_string(),
                "start Postgres or correct DATABASE_URL",
            );
            return;
        }
    }
    r.ok("the database answers");
    let Ok(pool) = store::Store::connect_lazy(url, 1) else {
        return;
    };
    match store::schema_state(&pool).await {
        Ok(state) => match state.problem() {
            None => r.ok("the schema is current"),
            Some(p) => r.wrong(p, "apiary-ingest migrate"),
        },
        Err(e) => r.wrong(format!("cannot read the schema version: {e}"), ""),
    }
    let tenants: Result<i64, _> = sqlx::query_scalar("SELECT count(*) FROM tenants")
        .fetch_one(&pool)
        .await;
    match tenants {
        Ok(0) => r.note(
            "no tenant yet",
            "apiary-ingest tenant create --name NAME, then token create",
        ),
        Ok(n) => r.ok(format!("{n} tenant(s)")),
        Err(_) => {}
    }
    pool.close().await;
}

async fn check_listen(r: &mut Report, listen: &str) {
    let addr: std::net::SocketAddr = match listen.parse() {
        Ok(a) => a,
        Err(_) => {
            r.wrong(
                format!("listen = {listen:?} is not an address"),
                "give HOST:PORT, e.g. 0.0.0.0:8080 (flag --listen, APIARY_LISTEN)",
            );
            return;
        }
    };
    match tokio::net::TcpListener::bind(addr).await {
        Ok(_) => r.ok(format!("{addr} is free to listen on")),
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => r.note(
            format!("{addr} is in use (is `serve` already running here?)"),
            "",
        ),
        Err(e) => r.wrong(
            format!("cannot listen on {addr}: {e}"),
            "pick another address or port",
        ),
    }
}
