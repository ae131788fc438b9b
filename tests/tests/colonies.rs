//! Colonies you can follow, black box: a Hive queen forks two named colonies on one day and one of
//! them again the next day (native Hive lines, posted to the real agent, pushed to the real ingest).
//!
//! Asserted: the agent derives two distinct tenant colony keys (`ck_…`) and the same key on day 2 for
//! the same name; the names are nowhere in the agent's data directory nor in Postgres; `GET /v1/colonies`
//! lists both with their runs and exact cost per day; `group_by=colony` and `/v1/colonies/{key}/usage`
//! use the key; the session tree puts the forked colony sessions under the queen with their keys and
//! workers by status; an admin's label shows, a read token cannot set one (403); another tenant sees
//! none of it.

use std::time::Duration;

use chrono::{DateTime, Duration as Days, NaiveTime, Utc};
use serde_json::{json, Value};
use tests::agent::Agent;
use tests::stack::{client, Api, Cloud, Tenant};

const ALPHA: &str = "alpha_zzcolonyname";
const BETA: &str = "beta_zzcolonyname";

/// One native Hive line.
struct Line {
    at: DateTime<Utc>,
    kind: &'static str,
    stream: String,
    session: String,
    colony: Option<String>,
    data: Value,
}

fn queen(at: DateTime<Utc>, session: &str, kind: &'static str, data: Value) -> Line {
    Line {
        at,
        kind,
        stream: "queen".into(),
        session: session.into(),
        colony: None,
        data,
    }
}

fn turn(cost: f64) -> Value {
    json!({"stop_reason": "end_turn", "model": "claude-sonnet-4-5-20250929", "input_tokens": 1000,
           "output_tokens": 10, "cached_tokens": 0, "cache_creation_tokens": 0, "cost_usd": cost})
}

/// A worker of the colony session `colony`: one turn, then done.
fn worker(at: DateTime<Utc>, id: &str, colony: &str, cost: f64) -> Vec<Line> {
    let w = |at, kind, data| Line {
        at,
        kind,
        stream: format!("worker:{id}"),
        session: id.into(),
        colony: Some(colony.into()),
        data,
    };
    vec![
        w(at, "llm_turn_complete", turn(cost)),
        w(
            at + Days::seconds(5),
            "execution_completed",
            json!({"worker_id": id, "success": true, "output": "done"}),
        ),
    ]
}

/// The queen `q` creates the colony `name` forked into the session `run`, which runs one turn of
/// `colony_cost` and one worker `w` of `worker_cost`.
fn colony(
    at: DateTime<Utc>,
    q: &str,
    name: &str,
    run: &str,
    w: &str,
    (colony_cost, worker_cost): (f64, f64),
) -> Vec<Line> {
    let mut lines = vec![
        queen(
            at,
            q,
            "colony_created",
            json!({"colony_name": name, "colony_path": format!("/home/alice/.hive/colonies/{name}"),
                   "queen_session_id": run, "is_new": true, "task": format!("work on {name}")}),
        ),
        queen(
            at + Days::seconds(1),
            q,
            "session_forked",
            json!({"new_session_id": run, "from_session_id": q, "queen_id": "default",
                   "reason": "colony"}),
        ),
        queen(
            at + Days::seconds(2),
            run,
            "llm_turn_complete",
            turn(colony_cost),
        ),
        // Hive's worker_colony_loaded names the colony by its directory name in `colony_id`.
        queen(
            at + Days::seconds(3),
            run,
            "worker_colony_loaded",
            json!({"colony_id": name, "colony_name": name, "worker_count": 1,
                   "colony_path": format!("/home/alice/.hive/colonies/{name}")}),
        ),
    ];
    lines.extend(worker(at + Days::seconds(10), w, run, worker_cost));
    lines
}

fn ndjson(lines: &[Line]) -> Vec<u8> {
    let mut out = Vec::new();
    for (seq, l) in lines.iter().enumerate() {
        let v = json!({
            "type": l.kind, "stream_id": l.stream, "node_id": null, "execution_id": l.session,
            "data": l.data, "timestamp": l.at.naive_utc().format("%Y-%m-%dT%H:%M:%S%.6f").to_string(),
            "correlation_id": null, "colony_id": l.colony, "seq": seq + 1,
        });
        serde_json::to_writer(&mut out, &v).unwrap();
        out.push(b'\n');
    }
    out
}

async fn put_label(api: &Api, key: &str, body: Value) -> (u16, Value) {
    let r = client()
        .put(format!("{}/v1/colonies/{key}/label", api.base))
        .bearer_auth(&api.token)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn nanos(v: &Value) -> i64 {
    v["cost_nanos"].as_i64().unwrap_or(-1)
}

/// Every byte of every file under `dir`.
fn files_of(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut out = vec![];
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_of(&p));
        } else if let Ok(bytes) = std::fs::read(&p) {
            out.push((p.display().to_string(), bytes));
        }
    }
    out
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_colonies_are_followed_by_key_across_days_without_their_names_leaving_the_device() {
    let cloud = Cloud::start().await.unwrap();
    let mut agent = Agent::start_with(
        &cloud.dir.path().join("agent"),
        None,
        &[("APIARY_PUSH_POLL_INTERVAL_MS", "50")],
    )
    .await
    .unwrap();
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    agent
        .sync_enable(&cloud.ingest.url(), &token_file, true)
        .unwrap();
    // `sync enable` stored the tenant's colony secret; a start puts it in force.
    agent.restart().await.unwrap();

    let today = Utc::now().date_naive();
    let ten = NaiveTime::from_hms_opt(10, 0, 0).unwrap();
    let day1 = (today - Days::days(2)).and_time(ten).and_utc();
    let day2 = (today - Days::days(1)).and_time(ten).and_utc();
    let (q1, q2) = ("session_d1_queen_3f2a", "session_d2_queen_7c1e");
    let mut lines = vec![queen(day1, q1, "llm_turn_complete", turn(0.1))];
    lines.extend(colony(
        day1 + Days::minutes(1),
        q1,
        ALPHA,
        "session_d1_alpha_aa01",
        "session_d1_alpha_w1",
        (0.01, 0.002),
    ));
    lines.extend(colony(
        day1 + Days::minutes(2),
        q1,
        BETA,
        "session_d1_beta_bb01",
        "session_d1_beta_w1",
        (0.005, 0.003),
    ));
    lines.push(queen(day2, q2, "llm_turn_complete", turn(0.1)));
    lines.extend(colony(
        day2 + Days::minutes(1),
        q2,
        ALPHA,
        "session_d2_alpha_aa02",
        "session_d2_alpha_w1",
        (0.02, 0.004),
    ));
    let (s, v) = agent.post_events(ndjson(&lines)).await.unwrap();
    assert_eq!(s, 200, "{v}");
    let total = lines.len() as u64;
    agent
        .wait_counters(Duration::from_secs(60), "every event delivered", |c| {
            c.delivered == total
        })
        .await
        .unwrap();

    let read = cloud.read_api();
    let range = format!(
        "from={}&to={}&tz=UTC",
        today - Days::days(3),
        today + Days::days(1)
    );
    let list = read.get_ok(&format!("/v1/colonies?{range}")).await.unwrap();
    let colonies = list["colonies"].as_array().unwrap().clone();
    assert_eq!(colonies.len(), 2, "{list:#}");
    let by_runs = |n: usize| {
        colonies
            .iter()
            .find(|c| c["runs"].as_array().unwrap().len() == n)
            .unwrap()
            .clone()
    };
    let (alpha, beta) = (by_runs(2), by_runs(1));
    let (ka, kb) = (
        alpha["colony_key"].as_str().unwrap().to_string(),
        beta["colony_key"].as_str().unwrap().to_string(),
    );
    assert!(ka.starts_with("ck_") && kb.starts_with("ck_"), "{ka} {kb}");
    assert_ne!(ka, kb, "two names, two keys");
    // The same name on day 2 (another queen, another session) has the same key: both runs are alpha's.
    let runs: Vec<&str> = alpha["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(runs, ["session_d1_alpha_aa01", "session_d2_alpha_aa02"]);
    assert_eq!(alpha["runs"][0]["parent_session_id"], q1);
    assert_eq!(alpha["runs"][1]["parent_session_id"], q2);
    assert_eq!(
        (alpha["workers"].as_i64(), alpha["sessions"].as_i64()),
        (Some(2), Some(4))
    );
    assert_eq!(beta["workers"].as_i64(), Some(1));
    // Cost per day, exact in nano-USD: the colony session's turn plus its worker's; never the queen's.
    let days: Vec<(String, i64)> = alpha["days"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (d["bucket"].as_str().unwrap()[..10].to_string(), nanos(d)))
        .collect();
    assert_eq!(
        days,
        [
            (day1.date_naive().to_string(), 12_000_000),
            (day2.date_naive().to_string(), 24_000_000)
        ]
    );
    assert_eq!(nanos(&alpha["totals"]), 36_000_000);
    assert_eq!(nanos(&beta["totals"]), 8_000_000);
    assert_eq!(beta["days"].as_array().unwrap().len(), 1);

    // group_by=colony answers by key, with the same sums.
    let usage = read
        .get_ok(&format!("/v1/usage?group_by=colony&{range}"))
        .await
        .unwrap();
    let by_colony = |k: &str| {
        usage["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["colony_id"] == k)
            .map(nanos)
    };
    assert_eq!(by_colony(&ka), Some(36_000_000), "{usage:#}");
    assert_eq!(by_colony(&kb), Some(8_000_000));
    let one = read
        .get_ok(&format!("/v1/colonies/{ka}/usage"))
        .await
        .unwrap();
    assert_eq!(nanos(&one["totals"]), 36_000_000, "{one:#}");

    // The tree: the queen's forked colony sessions, each a colony of its own with its key.
    let tree = read
        .get_ok(&format!("/v1/sessions/{q1}/tree"))
        .await
        .unwrap();
    let cols = tree["colonies"].as_array().unwrap();
    let keyed: Vec<(&str, &Value)> = cols
        .iter()
        .filter_map(|c| Some((c["colony_key"].as_str()?, &c["workers_by_status"])))
        .collect();
    assert_eq!(keyed.len(), 2, "{tree:#}");
    for (k, by_status) in keyed {
        assert!(k == ka || k == kb);
        assert_eq!(by_status, &json!({"completed": 1}), "{tree:#}");
    }

    // Labels: admin only, validated, shown to readers.
    let (s, v) = put_label(&read, &ka, json!({"label": "Alpha"})).await;
    assert_eq!(s, 403, "{v}");
    let admin = cloud.admin_api();
    let (s, v) = put_label(&admin, &ka, json!({"label": "two\nlines"})).await;
    assert_eq!(s, 422, "{v}");
    let (s, v) = put_label(
        &admin,
        &format!("ck_{}", "0".repeat(32)),
        json!({"label": "x"}),
    )
    .await;
    assert_eq!(s, 404, "{v}");
    let (s, v) = put_label(&admin, &ka, json!({"label": "  Alpha team  "})).await;
    assert_eq!((s, &v["label"]), (200, &json!("Alpha team")), "{v}");
    let list = read.get_ok(&format!("/v1/colonies?{range}")).await.unwrap();
    let labelled = list["colonies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["colony_key"] == ka.as_str())
        .unwrap();
    assert_eq!(labelled["label"], "Alpha team");

    // Another tenant sees none of it.
    let url = cloud.db.url.clone();
    let other = tokio::task::spawn_blocking(move || Tenant::create(&url, "globex"))
        .await
        .unwrap()
        .unwrap();
    let theirs = Api::new(&cloud.ingest.url(), &other.read_token);
    let list = theirs
        .get_ok(&format!("/v1/colonies?{range}"))
        .await
        .unwrap();
    assert_eq!(list["colonies"], json!([]));
    let (s, _) = theirs
        .get(&format!("/v1/colonies/{ka}/usage"))
        .await
        .unwrap();
    assert_eq!(s, 404);
    let (s, _) = put_label(
        &Api::new(&cloud.ingest.url(), &other.admin_token),
        &ka,
        json!({"label": "x"}),
    )
    .await;
    assert_eq!(s, 404);

    // The names never left the device, and were not kept on it either.
    agent.terminate(Duration::from_secs(10));
    let files = files_of(&agent.data_dir);
    assert!(files.iter().any(|(p, _)| p.ends_with("outbox.db")));
    for (path, bytes) in &files {
        for name in [ALPHA, BETA] {
            assert!(!contains(bytes, name), "{name} in {path}");
        }
    }
    let dump = tests::scan::dump(&cloud.db.url).await.unwrap();
    assert!(
        dump.contains(&ka),
        "the dump holds the keys, so it is a real dump"
    );
    for name in [ALPHA, BETA, "zzcolonyname"] {
        assert!(!dump.contains(name), "{name} in Postgres");
    }
}
