//! What a new user is told, black box: each cause said once, a refused token with the way out, the usage
//! answer as the docs describe it, and `follow`'s "last 10".

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;
use tests::agent::Agent;
use tests::db::TestDb;
use tests::stack::Cloud;
use tests::{bins, fixture};

use tests::bins::run as run_bin;

/// `DATABASE_URL` naming a role without privileges: Postgres' reason appears once, not once per layer of
/// the error (`…: permission denied for table t: permission denied for table t`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_error_says_its_cause_once() {
    let db = TestDb::create().await.unwrap();
    tests::stack::migrate(&db.url).unwrap();
    let role = format!("apiary_noperm_{}", uuid::Uuid::new_v4().simple());
    let pool = db.pool().await.unwrap();
    sqlx::query(&format!("CREATE ROLE {role} LOGIN"))
        .execute(&pool)
        .await
        .unwrap();
    let mut url = reqwest::Url::parse(&db.url).unwrap();
    url.set_username(&role).unwrap();
    url.set_password(None).unwrap();
    let (code, out) = run_bin(
        "apiary-ingest",
        &["tenant", "create", "--name", "acme"],
        &[("DATABASE_URL", url.as_str())],
    );
    sqlx::query(&format!("DROP ROLE {role}"))
        .execute(&pool)
        .await
        .unwrap();
    assert_eq!(code, 1, "{out}");
    assert_eq!(
        out.matches("permission denied for table").count(),
        1,
        "{out}"
    );
}

/// A token the ingest does not know: sync pauses with the events kept, and `status`, `doctor` and the
/// ingest's own 401 answer say what to do about it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_is_named_with_what_to_do() {
    let cloud = Cloud::start().await.unwrap();
    let data = cloud.dir.path().join("agent");
    let agent = Agent::start_with(&data, None, &[("APIARY_PUSH_POLL_INTERVAL_MS", "50")])
        .await
        .unwrap();
    let token = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    agent
        .sync_enable(&cloud.ingest.url(), &token, false)
        .unwrap();
    let wrong = format!("apy_{}", "0".repeat(64));
    tests::stack::write_private(&token, &format!("{wrong}\n")).unwrap();
    let (code, v) = agent
        .post_events(fixture::synthetic_turns("session_newcomer_401", 1, 3))
        .await
        .unwrap();
    assert_eq!(code, 200, "{v}");
    let paused = tests::procs::wait_for(Duration::from_secs(30), || async {
        let s = agent.status().await.ok()?;
        (s.pointer("/sync/paused_reason")?.as_str()? == "re-authenticate").then_some(s)
    })
    .await
    .unwrap_or_else(|| panic!("never paused: {}", tests::agent::tail(&agent.output(), 30)));
    let c = agent.counters().await.unwrap();
    assert_eq!((c.rejected, c.pending), (0, 3), "{c:?} {paused}");

    let human = agent.cli(&["status"]).unwrap();
    assert!(
        human.contains("the ingest refused the token (401")
            && human.contains("apiary-ingest token create"),
        "`apiary-agent status`:\n{human}"
    );
    let data_arg = data.to_string_lossy().into_owned();
    let (code, out) = run_bin("apiary-agent", &["doctor", "--data-dir", &data_arg], &[]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("✗ the ingest refused the token (401)")
            && out.contains("apiary-ingest token create"),
        "{out}"
    );
    let (status, body) = tests::stack::Api::new(&cloud.ingest.url(), &wrong)
        .get("/v1/whoami")
        .await
        .unwrap();
    assert_eq!(status, 401, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("apiary-ingest token create"), "{body}");
}

/// The usage page's section on the `/v1/usage` answer, checked against a real answer: every field of
/// the answer and of a row grouped by every tenant dimension is documented, and the defaults are what it
/// says (30 days ending at the end of the current 15-minute period, `total`, UTC; costs also in exact
/// `cost_nanos`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_usage_answer_is_what_the_docs_say() {
    let page =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/usage.md")).unwrap();
    let start = page
        .find("## The `/v1/usage` answer")
        .expect("docs/usage.md documents /v1/usage");
    let body = &page[start + 3..];
    let doc = &body[..body.find("\n## ").unwrap()];
    let doc = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    for said in [
        "default `from`: 30 days before `to`",
        "Default `to`: the end of the current 15-minute period",
        "default `total`",
        "default `UTC`",
        "`user` → `user_id`",
        "`colony` → `colony_id`",
    ] {
        assert!(doc.contains(said), "docs/usage.md no longer says {said:?}");
    }
    let cloud = Cloud::start().await.unwrap();
    let events = fixture::synthetic_canonical("session_newcomer_usage", 1, 3);
    let (code, v) = cloud
        .ingest_api()
        .post_batch(&fixture::batch_body(&events, "dev-newcomer"))
        .await
        .unwrap();
    assert_eq!((code, v["accepted"].as_u64()), (200, Some(3)), "{v}");

    let before = chrono::Utc::now();
    let answer = cloud.read_api().get_ok("/v1/usage").await.unwrap();
    let time = |k: &str| chrono::DateTime::parse_from_rfc3339(answer[k].as_str().unwrap()).unwrap();
    let (from, to) = (time("from"), time("to"));
    assert_eq!(to - from, chrono::TimeDelta::days(30), "{answer}");
    assert!(
        to > before && to <= before + chrono::TimeDelta::minutes(15),
        "{answer}"
    );
    assert_eq!(
        (answer["granularity"].as_str(), answer["tz"].as_str()),
        (Some("total"), Some("UTC"))
    );
    let rows = answer["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{answer}");
    assert_eq!(time_of(&rows[0]["bucket"]), from, "{answer}");
    assert_eq!(answer["totals"]["cost_nanos"], 3_000_000, "{answer}");

    let grouped = cloud
        .read_api()
        .get_ok("/v1/usage?group_by=tenant,user,model,colony,session,device&granularity=day")
        .await
        .unwrap();
    // The turns' row (the session's active time has a row of its own, under model null).
    let row = grouped["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["events"] != 0)
        .unwrap();
    assert_eq!(row["session_id"], "session_newcomer_usage", "{grouped}");
    assert_eq!(row["cost_nanos"], 3_000_000, "{grouped}");
    let keys = answer
        .as_object()
        .unwrap()
        .keys()
        .chain(row.as_object().unwrap().keys());
    for key in keys {
        assert!(
            doc.contains(&format!("`{key}`")),
            "docs/usage.md does not document `{key}`"
        );
    }
}

fn time_of(v: &Value) -> chrono::DateTime<chrono::FixedOffset> {
    chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap()).unwrap()
}

/// `apiary-agent follow --session S` starts with S's last 10 events, whatever came after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follow_starts_with_the_last_10_events_it_is_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(&dir.path().join("agent"), None).await.unwrap();
    for session in ["session_follow_a", "session_follow_b"] {
        let (code, v) = agent
            .post_events(fixture::synthetic_turns(session, 1, 15))
            .await
            .unwrap();
        assert_eq!(code, 200, "{v}");
    }
    let follow = |extra: &[&str]| -> Vec<Value> {
        let mut child = Command::new(bins::path("apiary-agent"))
            .args(["follow", "--data-dir"])
            .arg(&agent.data_dir)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .map(|l| serde_json::from_str::<Value>(&l).unwrap())
                .collect::<Vec<_>>()
        });
        std::thread::sleep(Duration::from_secs(2));
        child.kill().unwrap();
        child.wait().unwrap();
        reader.join().unwrap()
    };
    let ids = |rows: &[Value], session: &str| -> Vec<String> {
        rows.iter()
            .inspect(|r| assert_eq!(r["session_id"], session, "{r}"))
            .map(|r| r["event_id"].as_str().unwrap().to_string())
            .collect()
    };
    let all = follow(&[]);
    assert_eq!(all.len(), 10, "{all:?}");
    let b = ids(
        &follow(&["--session", "session_follow_b", "--from-start"]),
        "session_follow_b",
    );
    assert_eq!(ids(&all, "session_follow_b"), b[5..]);
    let a = follow(&["--session", "session_follow_a"]);
    assert_eq!(
        a.len(),
        10,
        "`follow --session` printed {} events: {a:?}",
        a.len()
    );
    let every_a = ids(
        &follow(&["--session", "session_follow_a", "--from-start"]),
        "session_follow_a",
    );
    assert_eq!(ids(&a, "session_follow_a"), every_a[5..]);
    let turns = follow(&["--type", "llm.turn", "--from-start"]);
    assert_eq!(turns.len(), 30);
}
