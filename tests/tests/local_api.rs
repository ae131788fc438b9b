//! The agent's local status API for the desktop, black box, with sync off (nothing ever leaves the
//! device): `GET /v1/sessions` (list, paging, status filter), `GET /v1/sessions/{id}/tree` and the live
//! stream `GET /v1/stream` — its statuses equal `GET /v1/sessions/{id}`, a reconnect with `Last-Event-ID`
//! gets exactly the rest (also across an agent restart), a foreign position gets `reset`, and the 17th
//! concurrent stream is refused with 503.

use std::time::Duration;

use apiary_schema::usage::StreamUsage;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use tests::agent::Agent;
use tests::events;
use tests::sse::{Sse, SseClient};

const QUEEN: &str = "session_20261125_010000_aaaa0001";
const WORKER: &str = "session_20261125_010005_bbbb0002";

/// Native Hive lines: `(secs from base, type, data)` of `session` (a worker when `colony` is set).
fn ndjson(
    session: &str,
    colony: Option<&str>,
    base: DateTime<Utc>,
    first_seq: usize,
    lines: &[(i64, &str, Value)],
) -> Vec<u8> {
    let out: Vec<Value> = (first_seq as u64..)
        .zip(lines)
        .map(|(seq, (secs, kind, data))| {
            let at = base + chrono::Duration::seconds(*secs);
            match colony {
                Some(c) => events::hive_worker(kind, session, c, at, seq, data.clone()),
                None => events::hive(kind, session, at, seq, data.clone()),
            }
        })
        .collect();
    events::ndjson(&out)
}

fn turn(tokens: u64) -> Value {
    json!({"stop_reason": "tool_use", "model": "claude-sonnet-4-5-20250929", "input_tokens": tokens,
           "output_tokens": 10, "cost_usd": 0.001})
}

async fn get(agent: &Agent, path: &str) -> (u16, Value) {
    let r = tests::stack::client()
        .get(format!("http://{}{path}", agent.addr))
        .bearer_auth(&agent.token)
        .send()
        .await
        .unwrap();
    let code = r.status().as_u16();
    (code, r.json().await.unwrap_or(Value::Null))
}

async fn post(agent: &Agent, body: Vec<u8>) {
    let (code, v) = agent.post_events(body).await.unwrap();
    assert_eq!(code, 200, "{v}");
}

async fn open(agent: &Agent, last: Option<&str>) -> SseClient {
    SseClient::open(
        &format!("http://{}/v1/stream", agent.addr),
        &agent.token,
        last,
    )
    .await
    .map_err(|r| r.status())
    .unwrap()
}

fn statuses_of(events: &[Sse], session: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.event == "status" && e.data["session_id"] == session)
        .map(|e| e.data["to"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_list_tree_and_stream_work_with_sync_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start(&dir.path().join("agent"), None).await.unwrap();
    let base = Utc::now() - chrono::Duration::seconds(60);

    let mut stream = open(&agent, None).await;
    let ready = stream.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(ready.event, "ready");

    post(
        &agent,
        ndjson(
            QUEEN,
            None,
            base,
            1,
            &[
                (0, "execution_started", json!({})),
                (1, "llm_turn_complete", turn(100)),
            ],
        ),
    )
    .await;
    post(
        &agent,
        ndjson(
            WORKER,
            Some(QUEEN),
            base,
            1,
            &[
                (5, "execution_started", json!({})),
                (6, "llm_turn_complete", turn(200)),
                (7, "node_stalled", json!({"reason": "no progress"})),
            ],
        ),
    )
    .await;

    // The stream: both sessions' transitions, in commit order, and their usage totals.
    let got = stream
        .until(Duration::from_secs(10), |e| {
            e.event == "status" && e.data["session_id"] == WORKER && e.data["to"] == "stalled"
        })
        .await
        .expect("the worker's stall is streamed");
    assert_eq!(statuses_of(&got, QUEEN), vec!["active"]);
    assert_eq!(statuses_of(&got, WORKER), vec!["active", "stalled"]);
    let more = stream.drain(Duration::from_millis(1500)).await;
    let usage: Vec<&Sse> = got
        .iter()
        .chain(&more)
        .filter(|e| e.event == "usage")
        .collect();
    let worker_usage = usage
        .iter()
        .rev()
        .find(|e| e.data["session_id"] == WORKER)
        .unwrap();
    assert_eq!(worker_usage.data["input_tokens"], 200);
    assert_eq!(worker_usage.data["events"], 3);
    // The ingest's usage event, field for field: the device's costs are reported, its active time is
    // the worker's two seconds before the stall.
    let sums: StreamUsage = serde_json::from_value(worker_usage.data.clone())
        .unwrap_or_else(|e| panic!("{e}: {}", worker_usage.data));
    assert_eq!(sums.cost_reported_nanos, sums.cost_nanos);
    assert_eq!((sums.cost_estimated_nanos, sums.estimated_turns), (0, 0));
    assert!(sums.active_seconds >= 1.0, "{}", worker_usage.data);

    // The list: most recently active first, the statuses the detail reads say.
    let (code, list) = get(&agent, "/v1/sessions").await;
    assert_eq!(code, 200, "{list}");
    let ids: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["session_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec![WORKER, QUEEN]);
    assert_eq!(list["next_cursor"], Value::Null);
    for s in list["sessions"].as_array().unwrap() {
        let id = s["session_id"].as_str().unwrap();
        let (_, detail) = get(&agent, &format!("/v1/sessions/{id}")).await;
        assert_eq!(s["status"], detail["status"], "{id}");
        assert_eq!(s["status_cause"], detail["status_cause"], "{id}");
    }
    assert_eq!(list["sessions"][0]["status"], "stalled");
    assert_eq!(list["sessions"][0]["parent_session_id"], QUEEN);
    assert_eq!(list["sessions"][0]["totals"]["input_tokens"], 200);
    // The ingest's session type, field for field: durations, the statuses below, the usage sums.
    let queen = &list["sessions"][1];
    assert_eq!(queen["below"], json!({ "stalled": 1 }), "{queen}");
    assert_eq!(list["sessions"][0]["below"], json!({}));
    assert!(queen["durations"]["started_at"].is_string(), "{queen}");
    assert!(
        queen["durations"]["wall_clock_seconds"].as_f64() > Some(0.0),
        "{queen}"
    );
    assert_eq!(
        queen["durations"]["active_seconds"],
        queen["totals"]["active_seconds"]
    );
    assert_eq!(queen["totals"]["cost_basis"], "reported", "{queen}");
    assert_eq!(
        queen["totals"]["cost_reported_nanos"],
        queen["totals"]["cost_nanos"]
    );
    assert_eq!(queen["totals"]["cost_estimated_nanos"], 0);
    let (_, page1) = get(&agent, "/v1/sessions?limit=1").await;
    let cursor = page1["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_string();
    assert_eq!(page1["sessions"][0]["session_id"], WORKER);
    let (_, page2) = get(&agent, &format!("/v1/sessions?limit=1&cursor={cursor}")).await;
    assert_eq!(page2["sessions"][0]["session_id"], QUEEN);
    let (_, stalled) = get(&agent, "/v1/sessions?status=stalled,crashed").await;
    assert_eq!(stalled["sessions"].as_array().unwrap().len(), 1);
    for bad in ["status=bogus", "limit=0", "cursor=x", "colour=red"] {
        let (code, v) = get(&agent, &format!("/v1/sessions?{bad}")).await;
        assert_eq!(code, 400, "{bad}: {v}");
        assert!(v["error"]["message"].is_string(), "{bad}: {v}");
    }

    // The tree: queen → its colony → the worker, usage rolled up.
    let (code, tree) = get(&agent, &format!("/v1/sessions/{QUEEN}/tree")).await;
    assert_eq!(code, 200, "{tree}");
    assert_eq!(tree["session_id"], QUEEN);
    assert_eq!(tree["usage"]["input_tokens"], 100);
    assert_eq!(tree["totals"]["input_tokens"], 300);
    assert_eq!(tree["colonies"][0]["colony_id"], QUEEN);
    assert_eq!(tree["colonies"][0]["workers"][0]["session_id"], WORKER);
    assert_eq!(tree["colonies"][0]["workers"][0]["status"], "stalled");
    assert_eq!(tree["below"], json!({ "stalled": 1 }));
    assert_eq!(tree["colonies"][0]["totals"]["input_tokens"], 200);
    // The ingest's colony node: what the device cannot know is null, or left out when a value would
    // mislead (no roles, so no count of workers).
    let colony = tree["colonies"][0].as_object().unwrap();
    for key in ["colony_key", "colony_label", "colony_name"] {
        assert_eq!(colony.get(key), Some(&Value::Null), "{key}: {tree}");
    }
    assert!(!colony.contains_key("workers_by_status"), "{tree}");
    assert_eq!(get(&agent, "/v1/sessions/nope/tree").await.0, 404);

    // Resume: reconnect after the first status event; exactly the rest, then what came meanwhile.
    let all: Vec<Sse> = got.into_iter().chain(more).collect();
    let first_status = all.iter().position(|e| e.event == "status").unwrap();
    drop(stream);
    post(
        &agent,
        ndjson(
            WORKER,
            Some(QUEEN),
            base,
            4,
            &[(
                8,
                "tool_call_completed",
                json!({"tool_use_id": "t1", "tool_name": "grep", "is_error": false}),
            )],
        ),
    )
    .await;
    let mut again = open(&agent, Some(&all[first_status].id)).await;
    let ready = again.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        (ready.event.as_str(), ready.id.as_str()),
        ("ready", all[first_status].id.as_str())
    );
    let rest = again
        .until(Duration::from_secs(10), |e| {
            e.event == "status"
                && e.data["session_id"] == WORKER
                && e.data["to"] == "active"
                && e.data["cause"] == "tool_call"
        })
        .await
        .expect("the recovery is streamed after the reconnect");
    let ids = |v: &[Sse]| v.iter().map(|e| e.id.clone()).collect::<Vec<_>>();
    assert_eq!(
        ids(&rest[..all.len() - first_status - 1]),
        ids(&all[first_status + 1..])
    );
    let last = rest.last().unwrap();
    let (_, detail) = get(&agent, &format!("/v1/sessions/{WORKER}")).await;
    assert_eq!(detail["status"], last.data["to"]);
    assert_eq!(
        detail["transitions"].as_array().unwrap().len() as u64,
        last.data["seq"].as_u64().unwrap() + 1
    );
    drop(again);

    // Positions survive a restart; one from another outbox (or pruned) says reset.
    let last_id = last.id.clone();
    agent.restart().await.unwrap();
    let mut after_restart = open(&agent, Some(&last_id)).await;
    let ready = after_restart.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(ready.event, "ready");
    post(
        &agent,
        ndjson(
            QUEEN,
            None,
            base,
            3,
            &[(20, "execution_completed", json!({}))],
        ),
    )
    .await;
    let next = after_restart
        .until(Duration::from_secs(10), |e| e.event == "status")
        .await
        .expect("a status after the restart");
    assert_eq!(statuses_of(&next, QUEEN), vec!["completed"]);
    drop(after_restart);
    let mut foreign = open(&agent, Some("0badcafe-3")).await;
    assert_eq!(
        foreign.next(Duration::from_secs(5)).await.unwrap().event,
        "reset"
    );
    drop(foreign);
    let r = tests::stack::client()
        .get(format!("http://{}/v1/stream", agent.addr))
        .bearer_auth(&agent.token)
        .header("Last-Event-ID", "not a position")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);

    // The cap: 16 streams at once; the 17th is refused, and a slot frees when one closes (the server
    // notices a closed connection when it next writes to it: an event makes every stream write).
    post(
        &agent,
        ndjson(QUEEN, None, base, 4, &[(21, "llm_turn_complete", turn(1))]),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut open_streams = Vec::new();
    for _ in 0..16 {
        open_streams.push(open(&agent, None).await);
    }
    let refused = SseClient::open(
        &format!("http://{}/v1/stream", agent.addr),
        &agent.token,
        None,
    )
    .await
    .err()
    .expect("the 17th stream is refused");
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_streams");
    open_streams.pop();
    post(
        &agent,
        ndjson(QUEEN, None, base, 5, &[(22, "llm_turn_complete", turn(1))]),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut one_more = open(&agent, None).await;
    assert_eq!(
        one_more.next(Duration::from_secs(5)).await.unwrap().event,
        "ready"
    );

    // Nothing was sent anywhere: sync is off.
    let c = agent.counters().await.unwrap();
    assert_eq!(c.delivered, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_streamed_at_most_once_a_second_per_session_and_ends_on_the_totals() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start(&dir.path().join("agent"), None).await.unwrap();
    let base = Utc::now() - chrono::Duration::seconds(60);
    let mut stream = open(&agent, None).await;
    assert_eq!(
        stream.next(Duration::from_secs(5)).await.unwrap().event,
        "ready"
    );
    let started = tokio::time::Instant::now();
    for i in 0..20 {
        post(
            &agent,
            ndjson(
                QUEEN,
                None,
                base,
                i + 1,
                &[(i as i64, "llm_turn_complete", turn(10))],
            ),
        )
        .await;
    }
    let burst = started.elapsed();
    let events = stream.drain(Duration::from_millis(2500)).await;
    let usage: Vec<&Sse> = events.iter().filter(|e| e.event == "usage").collect();
    // One a second at most (plus the first, and the due one after the burst).
    let most = burst.as_secs() as usize + 2;
    assert!(
        !usage.is_empty() && usage.len() <= most,
        "{} usage events in {burst:?}",
        usage.len()
    );
    let last = usage.last().unwrap();
    assert_eq!(last.data["llm_calls"], 20);
    assert_eq!(last.data["input_tokens"], 200);
}
