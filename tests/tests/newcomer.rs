//! A new user's mistakes, black box: each test types what a person would and asserts what they are told,
//! and that nothing they sent is lost.

use std::time::Duration;

use tests::agent::Agent;
use tests::db::TestDb;
use tests::fixture;
use tests::stack::Cloud;

use tests::bins::run as run_bin;

/// `sync enable --endpoint http://host:port/v1/batches` (the path appended): refused at once, naming the
/// base URL (the ingest answers 404 for `/v1/batches/v1/whoami`). Stored anyway (`--force`, or an ingest
/// that moved later), the ingest answers 404 for `/v1/batches/v1/batches`: a wrong endpoint, not a
/// verdict on the event: it stays pending, the status says which URL to give, and after the fix it is
/// delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_with_the_batch_path_appended_keeps_events_and_says_why() {
    let cloud = Cloud::start().await.unwrap();
    let data = cloud.dir.path().join("agent");
    let agent = Agent::start_with(
        &data,
        None,
        &[
            ("APIARY_PUSH_POLL_INTERVAL_MS", "50"),
            ("APIARY_PUSH_BACKOFF_BASE_MS", "100"),
            ("APIARY_PUSH_BACKOFF_CAP_MS", "200"),
        ],
    )
    .await
    .unwrap();
    let token = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    let wrong = format!("{}/v1/batches", cloud.ingest.url());
    let refused = agent
        .sync_enable(&wrong, &token, false)
        .expect_err("an endpoint that is not an ingest's base URL is refused");
    let refused = format!("{refused:#}");
    assert!(
        refused.contains("base URL") && refused.contains("--force"),
        "{refused}"
    );
    let tf = token.display().to_string();
    agent
        .cli(&[
            "sync",
            "enable",
            "--endpoint",
            &wrong,
            "--token-file",
            &tf,
            "--force",
        ])
        .unwrap();
    let (code, v) = agent
        .post_events(fixture::synthetic_turns("session_newcomer_404", 1, 3))
        .await
        .unwrap();
    assert_eq!(code, 200, "{v}");
    let status = tests::procs::wait_for(Duration::from_secs(30), || async {
        let s = agent.status().await.ok()?;
        let err = s.pointer("/last_push/error")?.as_str()?.to_string();
        err.contains("HTTP 404 for /v1/batches").then_some(s)
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "status never named the wrong endpoint: {}",
            tests::agent::tail(&agent.output(), 30)
        )
    });
    assert!(
        status["last_push"]["error"]
            .as_str()
            .unwrap()
            .contains("base URL"),
        "{status}"
    );
    let c = agent.counters().await.unwrap();
    assert_eq!(
        (c.rejected, c.pending),
        (0, 3),
        "nothing dead-lettered: {c:?}"
    );
    let human = agent.cli(&["status"]).unwrap();
    assert!(
        human.contains("base URL"),
        "`apiary-agent status` says it too:\n{human}"
    );
    // The fix: the base URL. Everything pending is delivered.
    agent
        .sync_enable(&cloud.ingest.url(), &token, false)
        .unwrap();
    let c = agent
        .wait_counters(Duration::from_secs(30), "delivery after the fix", |c| {
            c.delivered == 3
        })
        .await
        .unwrap();
    assert_eq!((c.rejected, c.pending), (0, 0), "{c:?}");
}

/// `apiary-ingest tenant create` on a database nobody migrated: the message says to run `migrate`,
/// not `relation "tenants" does not exist`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmigrated_database_is_named_with_the_next_step() {
    let db = TestDb::create().await.unwrap();
    let (code, out) = run_bin(
        "apiary-ingest",
        &["tenant", "create", "--name", "acme"],
        &[("DATABASE_URL", &db.url)],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("run `apiary-ingest migrate`"), "{out}");
    assert!(!out.contains("relation"), "{out}");
}

/// An unreachable server: the message names host and port and the cause, at once (not "pool timed out"
/// after 5 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_is_named_with_its_address_and_cause() {
    let port = tests::free_port();
    let url = format!("postgres://postgres@127.0.0.1:{port}/apiary");
    let t0 = std::time::Instant::now();
    let (code, out) = run_bin(
        "apiary-ingest",
        &["tenant", "create", "--name", "acme"],
        &[("DATABASE_URL", &url)],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!("127.0.0.1:{port}")) && out.contains("refused"),
        "{out}"
    );
    assert!(!out.contains("pool timed out"), "{out}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

/// A misspelled variable stops both programs naming the real one; a variable of another tool does not.
#[test]
fn a_misspelled_variable_is_named_with_the_real_one() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_string_lossy().into_owned();
    let (code, out) = run_bin(
        "apiary-agent",
        &["status", "--data-dir", &data],
        &[("APIARY_PUSH_BACKOF_CAP_MS", "1000")],
    );
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("did you mean APIARY_PUSH_BACKOFF_CAP_MS?"),
        "{out}"
    );
    let (code, out) = run_bin(
        "apiary-ingest",
        &["migrate"],
        &[
            ("APIARY_STALL_AFTER_SEC", "60"),
            ("DATABASE_URL", "postgres://x@127.0.0.1:1/x"),
        ],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("did you mean APIARY_STALL_AFTER_SECS?"),
        "{out}"
    );
    let (code, out) = run_bin(
        "apiary-agent",
        &["status", "--data-dir", &data],
        &[
            ("APIARY_PUSH_BACKOFF_BASE_MS", "5000"),
            ("APIARY_PUSH_BACKOFF_CAP_MS", "1000"),
        ],
    );
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("push.backoff_base_ms (5000)"), "{out}");
}

/// `apiary-agent doctor`: all well on a correctly set up device (exit 0, the ingest and the identity
/// confirmed); each usual mistake is a ✗ line with its fix and exit 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_confirms_a_good_setup_and_names_each_mistake_with_its_fix() {
    let cloud = Cloud::start().await.unwrap();
    let data = cloud.dir.path().join("agent");
    let agent = Agent::start_with(&data, None, &[]).await.unwrap();
    let data_arg = data.to_string_lossy().into_owned();
    let doctor =
        |env: &[(&str, &str)]| run_bin("apiary-agent", &["doctor", "--data-dir", &data_arg], env);
    let token = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    set_mode(&token, 0o600);
    agent
        .sync_enable(&cloud.ingest.url(), &token, false)
        .unwrap();
    let (code, out) = doctor(&[]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("is an Apiary ingest"), "{out}");
    assert!(out.contains("agrees with this device's identity"), "{out}");
    assert!(!out.contains('✗'), "{out}");

    // A token file others can read.
    set_mode(&token, 0o644);
    let (code, out) = doctor(&[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("readable by others") && out.contains("chmod 600"),
        "{out}"
    );
    set_mode(&token, 0o600);

    // A token bound to another device than this agent's.
    let (url, tenant) = (cloud.db.url.clone(), cloud.tenant.id.clone());
    let bound = tokio::task::spawn_blocking(move || {
        tests::isolation::token(&url, &tenant, "ingest", Some("alice"), Some("alice-laptop"))
    })
    .await
    .unwrap()
    .unwrap();
    std::fs::write(&token, format!("{bound}\n")).unwrap();
    let (code, out) = doctor(&[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("bound to device \"alice-laptop\"")
            && out.contains("identity.device_id = \"alice-laptop\""),
        "{out}"
    );

    // An empty token file, an endpoint with the batch path appended, a misspelled variable.
    std::fs::write(&token, "").unwrap();
    let (code, out) = doctor(&[("APIARY_PUSH_CONCURENCY", "2")]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("is empty"), "{out}");
    assert!(
        out.contains("did you mean APIARY_PUSH_CONCURRENCY?"),
        "{out}"
    );
    std::fs::write(&token, format!("{}\n", cloud.tenant.ingest_token)).unwrap();
    // Stored anyway (`sync enable` refuses it without --force), as an ingest that moved would leave it.
    let wrong = format!("{}/v1/batches", cloud.ingest.url());
    let tf = token.display().to_string();
    agent
        .cli(&[
            "sync",
            "enable",
            "--endpoint",
            &wrong,
            "--token-file",
            &tf,
            "--force",
        ])
        .unwrap();
    let (code, out) = doctor(&[]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("ends in /v1/batches"), "{out}");
}

fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// `apiary-ingest doctor`: an unmigrated database and an unusable listen address are ✗ with their fix
/// (exit 1); after `migrate`, all is well (exit 0) and the missing tenant is pointed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ingest_doctor_names_the_database_and_listen_problems() {
    let db = TestDb::create().await.unwrap();
    let (code, out) = run_bin(
        "apiary-ingest",
        &["doctor"],
        &[("DATABASE_URL", &db.url), ("APIARY_LISTEN", "nowhere")],
    );
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("✓ the database answers"), "{out}");
    assert!(
        out.contains("✗ the database has no Apiary tables yet"),
        "{out}"
    );
    assert!(out.contains("→ apiary-ingest migrate"), "{out}");
    assert!(
        out.contains("listen = \"nowhere\" is not an address"),
        "{out}"
    );
    tests::stack::migrate(&db.url).unwrap();
    let (code, out) = run_bin(
        "apiary-ingest",
        &["doctor"],
        &[("DATABASE_URL", &db.url), ("APIARY_LISTEN", "127.0.0.1:0")],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("✓ the schema is current"), "{out}");
    assert!(out.contains("! no tenant yet"), "{out}");
}

/// `apiary-ingest migrate` on a server without the database named in `DATABASE_URL`: `doctor` names the
/// `createdb` command (not "start Postgres"), `migrate` creates the database (the test role may) and
/// migrates it, and `doctor` is then content with the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_creates_a_missing_database_and_doctor_names_createdb() {
    let admin = std::env::var("DATABASE_URL").expect("DATABASE_URL (run ./scripts/test.sh)");
    let name = format!("apiary_fresh_{}", uuid::Uuid::new_v4().simple());
    let url = tests::db::with_database(&admin, &name);
    let doctor = |url: &str| {
        let out = std::process::Command::new(tests::bins::path("apiary-ingest"))
            .arg("doctor")
            .env("DATABASE_URL", url)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let before = doctor(&url);
    assert!(before.contains("does not exist"), "{before}");
    assert!(before.contains("createdb -h"), "{before}");
    assert!(before.contains(&name), "{before}");
    assert!(!before.contains("start Postgres"), "{before}");
    let migrated = tests::stack::migrate(&url);
    let dropped = async {
        let mut conn = <sqlx::PgConnection as sqlx::Connection>::connect(&admin)
            .await
            .unwrap();
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut conn)
            .await
            .unwrap();
    };
    if let Err(e) = &migrated {
        dropped.await;
        panic!("migrate on a missing database failed: {e:#}");
    }
    let after = doctor(&url);
    dropped.await;
    assert!(!after.contains("does not exist"), "{after}");
    assert!(after.contains("the database answers"), "{after}");
}
