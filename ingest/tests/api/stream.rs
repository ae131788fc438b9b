//! The live stream (`GET /v1/stream`): a batch's transitions, usage totals and device liveness arrive;
//! tenant and user scoping, live and in a resume's backlog; resume with `Last-Event-ID` / `?after=` gets
//! exactly what was missed; transactions committing out of order are delivered without a gap; refusals
//! like the other reads; shutdown ends the open streams; the upkeep prunes what is past the window.

use std::time::Duration;

use apiary_ingest::store::stream::{BatchStream, StatusData, TxStream};
use chrono::Utc;
use reqwest::StatusCode;
use serde_json::{json, Value};

use tests::sse::{Sse, SseClient};

use crate::helpers::*;

/// Opens the stream at `query` with `token` (and `Last-Event-ID`); it must answer a 200 event stream.
async fn open(app: &TestApp, token: &str, last_id: Option<&str>, query: &str) -> SseClient {
    match SseClient::open(&format!("{}/v1/stream{query}", app.base), token, last_id).await {
        Ok(s) => s,
        Err(resp) => panic!(
            "not an event stream: {} {:?}",
            resp.status(),
            resp.headers()
        ),
    }
}

/// (event, session or device, to / online / events) of each event, for comparing lists.
fn brief(events: &[Sse]) -> Vec<(String, String, String)> {
    events
        .iter()
        .map(|e| {
            let d = &e.data;
            let who = d["session_id"].as_str().or(d["device_id"].as_str());
            let what = match e.event.as_str() {
                "status" => d["to"].to_string(),
                "usage" => d["events"].to_string(),
                "device" => d["online"].to_string(),
                _ => String::new(),
            };
            (e.event.clone(), who.unwrap_or("").to_string(), what)
        })
        .collect()
}

fn has(events: &[Sse], kind: &str, who: &str) -> bool {
    brief(events).iter().any(|b| b.0 == kind && b.1 == who)
}

fn position(id: &str) -> (i64, i64) {
    let (x, i) = id.split_once('-').unwrap();
    (x.parse().unwrap(), i.parse().unwrap())
}

#[sqlx::test(migrations = "../migrations")]
async fn a_batch_streams_its_transition_usage_totals_and_device(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let mut s = open(&app, &t.read, None, "").await;
    s.ready().await;
    let now = Utc::now();
    let events = vec![
        llm("q1", now - chrono::Duration::seconds(5), "m", 100, 7, 0.5),
        tool("q1", now - chrono::Duration::seconds(4), true),
    ];
    let (code, v) = app
        .post_batch(&t.ingest, &batch(events, vec![binding("q1", "alice")]))
        .await;
    assert_eq!(code, StatusCode::OK, "{v}");
    let got = s
        .collect_until(|e| {
            has(e, "status", "q1") && has(e, "usage", "q1") && has(e, "device", "dev-1")
        })
        .await;
    let status = got.iter().find(|e| e.event == "status").unwrap();
    assert_eq!(status.data["session_id"], "q1");
    assert_eq!(status.data["seq"], 0);
    assert_eq!(status.data["from"], Value::Null);
    assert_eq!(status.data["to"], "active");
    assert!(status.data["at"].as_str().is_some());
    let usage = got.iter().find(|e| e.event == "usage").unwrap();
    for (k, want) in [
        ("input_tokens", 100),
        ("output_tokens", 7),
        ("cached_tokens", 50),
        ("cost_nanos", 500_000_000),
        ("llm_calls", 1),
        ("tool_calls", 1),
        ("tool_errors", 1),
        ("events", 2),
    ] {
        assert_eq!(usage.data[k], want, "{k}: {}", usage.data);
    }
    assert_eq!(usage.data["cost_usd"], 0.5);
    // The SQL writes the shared type's fields (the agent's live stream serialises the same type).
    let sums: apiary_schema::usage::StreamUsage = serde_json::from_value(usage.data.clone())
        .unwrap_or_else(|e| panic!("{e}: {}", usage.data));
    assert_eq!((sums.llm_calls, sums.tool_calls), (1, 1));
    let device = got.iter().find(|e| e.event == "device").unwrap();
    assert_eq!(device.data["online"], true, "{:?}", device.data);
    // Positions only grow.
    let ids: Vec<(i64, i64)> = got.iter().map(|e| position(&e.id)).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");

    // Matches the document: the event data schemas are served, the route is text/event-stream.
    let (_, doc) = app.get(&t.read, "/openapi.json").await;
    let op = &doc["paths"]["/v1/stream"]["get"];
    assert!(
        op["responses"]["200"]["content"]["text/event-stream"].is_object(),
        "{op}"
    );
    for (name, e) in [
        ("StreamStatus", status),
        ("StreamUsage", usage),
        ("StreamDevice", device),
    ] {
        let schema = &doc["components"]["schemas"][name];
        for key in e.data.as_object().unwrap().keys() {
            assert!(
                schema["properties"][key].is_object(),
                "{name} lacks {key}: {schema}"
            );
        }
        for key in schema["required"].as_array().unwrap() {
            assert!(
                e.data.get(key.as_str().unwrap()).is_some(),
                "{key} missing: {}",
                e.data
            );
        }
    }
}

#[sqlx::test(migrations = "../migrations")]
async fn readers_see_only_their_tenant_and_a_user_bound_reader_only_its_user(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let other = app.tenant("globex").await;
    let alice = app.tenant_token_for_user(t.id, "alice").await;
    let mut all = open(&app, &t.read, None, "").await;
    let mut mine = open(&app, &alice, None, "").await;
    let mut theirs = open(&app, &other.read, None, "").await;
    for s in [&mut all, &mut mine, &mut theirs] {
        s.ready().await;
    }
    let now = Utc::now();
    let events = vec![
        llm("a1", now, "m", 1, 1, 0.1),
        llm("b1", now, "m", 2, 2, 0.2),
    ];
    let (code, _) = app
        .post_batch(
            &t.ingest,
            &batch(events, vec![binding("a1", "alice"), binding("b1", "bob")]),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    let mut got = all
        .collect_until(|e| {
            ["a1", "b1"]
                .iter()
                .all(|s| has(e, "status", s) && has(e, "usage", s))
        })
        .await;
    got.extend(all.drain(Duration::from_millis(500)).await);
    assert!(has(&got, "device", "dev-1"), "{:?}", brief(&got));
    let seen = mine.drain(Duration::from_millis(1500)).await;
    assert_eq!(
        brief(&seen),
        vec![
            ("status".into(), "a1".into(), "\"active\"".into()),
            ("usage".into(), "a1".into(), "1".into())
        ],
        "the device belongs to no user, bob's session to bob"
    );
    let nothing = theirs.drain(Duration::from_millis(500)).await;
    assert!(nothing.is_empty(), "{:?}", brief(&nothing));
}

#[sqlx::test(migrations = "../migrations")]
async fn a_resume_gets_exactly_the_missed_events(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let now = Utc::now();
    let mut s = open(&app, &t.read, None, "").await;
    let start = s.ready().await;
    let post = |sessions: [&'static str; 2]| {
        let events = sessions
            .iter()
            .map(|sid| llm(sid, now, "m", 10, 1, 0.1))
            .collect();
        let app = &app;
        let token = t.ingest.clone();
        async move {
            let (code, v) = app.post_batch(&token, &batch(events, vec![])).await;
            assert_eq!(code, StatusCode::OK, "{v}");
        }
    };
    post(["s1", "s2"]).await;
    let mut first = s
        .collect_until(|e| ["s1", "s2"].iter().all(|x| has(e, "usage", x)))
        .await;
    first.extend(s.drain(Duration::from_millis(500)).await);
    let last_seen = first.last().unwrap().id.clone();
    drop(s);

    // Missed while disconnected.
    post(["s3", "s4"]).await;
    post(["s5", "s6"]).await;
    // Let every row become deliverable (the next reader waits for nothing).
    let mut witness = open(&app, &t.read, Some(&last_seen), "").await;
    witness.ready().await;
    let missed = witness
        .collect_until(|e| ["s3", "s4", "s5", "s6"].iter().all(|x| has(e, "usage", x)))
        .await;
    assert!(missed
        .iter()
        .all(|e| ["status", "usage"].contains(&e.event.as_str())));
    assert_eq!(missed.iter().filter(|e| e.event == "status").count(), 4);
    assert_eq!(missed.iter().filter(|e| e.event == "usage").count(), 4);
    assert!(witness.drain(Duration::from_millis(1500)).await.is_empty());

    // Last-Event-ID and ?after= resume to the same events, nothing before, nothing twice.
    for (header, query) in [
        (Some(last_seen.as_str()), String::new()),
        (None, format!("?after={last_seen}")),
        // The header wins over a stale query (a browser's EventSource keeps the first URL).
        (Some(last_seen.as_str()), format!("?after={start}")),
    ] {
        let mut again = open(&app, &t.read, header, &query).await;
        assert_eq!(again.ready().await, last_seen);
        let got = again.drain(Duration::from_millis(1500)).await;
        assert_eq!(brief(&got), brief(&missed), "{header:?} {query}");
        let ids: Vec<&str> = got.iter().map(|e| e.id.as_str()).collect();
        let want: Vec<&str> = missed.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, want);
    }
    // From the very start: the first batch too.
    let mut from_start = open(&app, &t.read, Some(&start), "").await;
    from_start.ready().await;
    let everything = from_start.drain(Duration::from_millis(1500)).await;
    let mut want = brief(&first);
    want.extend(brief(&missed));
    assert_eq!(brief(&everything), want);
}

/// A transition for `session`, as a batch would stream it.
fn transition(session: &str, seq: i64, to: &'static str) -> BatchStream<'static> {
    BatchStream {
        transitions: vec![StatusData {
            session_id: session.into(),
            seq,
            at: Utc::now(),
            from: None,
            to,
            cause: "test".into(),
        }],
        ..Default::default()
    }
}

/// What a batch's transaction streams (the stream rows, then the notification).
async fn write_batch(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    tenant: uuid::Uuid,
    owners: &std::collections::BTreeMap<&str, &str>,
    s: &BatchStream<'_>,
) -> Result<(), sqlx::Error> {
    let mut t = TxStream::default();
    let one = apiary_ingest::store::stream::TenantStream {
        tenant_id: tenant,
        owners: owners.clone(),
        stream: s.clone(),
    };
    apiary_ingest::store::stream::write_batches(tx, &mut t, &[one]).await?;
    t.finish(tx).await
}

#[sqlx::test(migrations = "../migrations")]
async fn transactions_committing_out_of_order_are_delivered_without_a_gap(pool: sqlx::PgPool) {
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let mut live = open(&app, &t.read, None, "").await;
    let start = live.ready().await;
    let owners = Default::default();

    // A takes the lower id and commits last; B commits first.
    let mut a = pool.begin().await.unwrap();
    write_batch(&mut a, t.id, &owners, &transition("sa", 0, "active"))
        .await
        .unwrap();
    let mut b = pool.begin().await.unwrap();
    write_batch(&mut b, t.id, &owners, &transition("sb", 0, "active"))
        .await
        .unwrap();
    b.commit().await.unwrap();
    // A rolled-back transaction streams nothing.
    let mut c = pool.begin().await.unwrap();
    write_batch(&mut c, t.id, &owners, &transition("sc", 0, "active"))
        .await
        .unwrap();
    c.rollback().await.unwrap();
    let held = live.drain(Duration::from_millis(1000)).await;
    assert!(
        held.is_empty(),
        "delivered past an open transaction: {:?}",
        brief(&held)
    );
    // A reader resuming now has nothing yet either (it would never see A's row otherwise).
    let mut early = open(&app, &t.read, Some(&start), "").await;
    early.ready().await;
    assert!(early.drain(Duration::from_millis(300)).await.is_empty());
    a.commit().await.unwrap();
    let got = live.collect_until(|e| e.len() == 2).await;
    assert_eq!(
        brief(&got),
        vec![
            ("status".into(), "sa".into(), "\"active\"".into()),
            ("status".into(), "sb".into(), "\"active\"".into())
        ]
    );
    let resumed = early.collect_until(|e| e.len() == 2).await;
    assert_eq!(brief(&resumed), brief(&got));
    assert!(live.drain(Duration::from_millis(800)).await.is_empty());

    // One session written by two transactions, the later one holding the LOWER transaction id: the
    // stream keeps the order they committed in (the session's lock order).
    let mut later = pool.begin().await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()")
        .execute(&mut *later)
        .await
        .unwrap();
    let mut first = pool.begin().await.unwrap();
    write_batch(&mut first, t.id, &owners, &transition("s", 0, "active"))
        .await
        .unwrap();
    let blocked = tokio::spawn(async move {
        let owners = Default::default();
        write_batch(&mut later, t.id, &owners, &transition("s", 1, "stalled"))
            .await
            .unwrap();
        later.commit().await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !blocked.is_finished(),
        "the second writer waits for the first"
    );
    first.commit().await.unwrap();
    blocked.await.unwrap();
    let got = live.collect_until(|e| e.len() == 2).await;
    assert_eq!(
        brief(&got),
        vec![
            ("status".into(), "s".into(), "\"active\"".into()),
            ("status".into(), "s".into(), "\"stalled\"".into())
        ]
    );
}

#[sqlx::test(migrations = "../migrations")]
async fn a_busy_sessions_usage_is_coalesced_to_one_event_a_second_of_totals(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let mut s = open(&app, &t.read, None, "").await;
    s.ready().await;
    let now = Utc::now();
    let started = std::time::Instant::now();
    for i in 0..5 {
        let (code, _) = app
            .post_batch(
                &t.ingest,
                &batch(
                    vec![llm(
                        "busy",
                        now + chrono::Duration::milliseconds(i),
                        "m",
                        10,
                        1,
                        0.1,
                    )],
                    vec![],
                ),
            )
            .await;
        assert_eq!(code, StatusCode::OK);
    }
    let got = s
        .collect_until(|e| {
            e.iter()
                .any(|x| x.event == "usage" && x.data["events"] == 5)
        })
        .await;
    let usage: Vec<&Sse> = got.iter().filter(|e| e.event == "usage").collect();
    // At most one a second: two when the five batches came within a second (a loaded machine may
    // spread them over more).
    let most = 2.max(1 + started.elapsed().as_secs() as usize);
    assert!(usage.len() <= most, "{most}: {:?}", brief(&got));
    assert_eq!(usage.last().unwrap().data["input_tokens"], 50);
    assert!(s
        .drain(Duration::from_millis(1500))
        .await
        .iter()
        .all(|e| e.event != "usage"));
}

#[sqlx::test(migrations = "../migrations")]
async fn a_silent_device_is_streamed_offline_and_online_again(pool: sqlx::PgPool) {
    // A device's row on the stream is its latest state: the online one must be streamed before the
    // sweep (every 5 s) finds the device silent, so the silence allowed leaves a busy machine seconds.
    let settings = apiary_ingest::config::IngestSettings {
        offline_after_secs: 3,
        ..test_settings()
    };
    let app = spawn_app_with(pool, settings).await;
    let t = app.tenant("acme").await;
    let mut s = open(&app, &t.read, None, "").await;
    s.ready().await;
    assert_eq!(
        app.post_batch(&t.ingest, &heartbeat_batch()).await.0,
        StatusCode::OK
    );
    let got = s
        .collect_until(|e| e.iter().filter(|x| x.event == "device").count() == 2)
        .await;
    let online: Vec<&Value> = got
        .iter()
        .filter(|e| e.event == "device")
        .map(|e| &e.data["online"])
        .collect();
    assert_eq!(online, [&json!(true), &json!(false)]);
    assert_eq!(
        app.post_batch(&t.ingest, &heartbeat_batch()).await.0,
        StatusCode::OK
    );
    let back = s
        .collect_until(|e| e.iter().any(|x| x.event == "device"))
        .await;
    assert_eq!(back.last().unwrap().data["online"], true);
}

#[sqlx::test(migrations = "../migrations")]
async fn a_position_older_than_the_window_is_told_to_reload(pool: sqlx::PgPool) {
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let mut s = open(&app, &t.read, None, "").await;
    let start = s.ready().await;
    let (code, _) = app
        .post_batch(
            &t.ingest,
            &batch(vec![llm("old", Utc::now(), "m", 1, 1, 0.1)], vec![]),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    let mut got = s.collect_until(|e| has(e, "usage", "old")).await;
    got.extend(s.drain(Duration::from_millis(500)).await);
    let last = got.last().unwrap().id.clone();
    // Everything so far falls out of the window.
    apiary_ingest::store::stream::prune(&pool, Utc::now() + chrono::Duration::seconds(60))
        .await
        .unwrap();
    let mut stale = open(&app, &t.read, Some(&start), "").await;
    let reset = stale.next(Duration::from_secs(5)).await.unwrap();
    assert_eq!(reset.event, "reset");
    assert!(
        position(&reset.id) > position(&last),
        "{} {}",
        reset.id,
        last
    );
    // A position at the edge of the window is still good.
    let mut fine = open(&app, &t.read, Some(&last), "").await;
    assert_eq!(fine.ready().await, last);
}

/// A well-formed position this database never gave (from another database, or one restored from a
/// backup) is answered like a pruned one, and like the agent's stream answers it: `reset`, then what
/// follows — not a 400.
#[sqlx::test(migrations = "../migrations")]
async fn a_position_the_stream_never_gave_is_told_to_reload(pool: sqlx::PgPool) {
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let mut now = open(&app, &t.read, None, "").await;
    let head = now.ready().await;
    // A transaction held open keeps the head at or below its id: a position just past that id is
    // ahead of the head (yet below the snapshot's xmax, which the stream once compared with).
    let mut pin = pool.begin().await.unwrap();
    let xid: i64 = sqlx::query_scalar("SELECT pg_current_xact_id()::text::bigint")
        .fetch_one(&mut *pin)
        .await
        .unwrap();
    for asked in ["99999999999999-1".to_string(), format!("{xid}-1")] {
        for (last_id, query) in [
            (Some(asked.as_str()), String::new()),
            (None, format!("?after={asked}")),
        ] {
            let mut s = open(&app, &t.read, last_id, &query).await;
            let first = s.next(Duration::from_secs(5)).await.unwrap();
            assert_eq!(first.event, "reset", "{asked} ({query}): {first:?}");
            assert!(
                position(&first.id) < position(&asked),
                "{asked}: reset at {}",
                first.id
            );
            assert_eq!(first.data, json!({}));
        }
    }
    pin.rollback().await.unwrap();
    // After the reset, what follows arrives.
    let mut s = open(&app, &t.read, Some("99999999999999-1"), "").await;
    assert_eq!(s.next(Duration::from_secs(5)).await.unwrap().event, "reset");
    let (code, _) = app
        .post_batch(
            &t.ingest,
            &batch(vec![llm("after-reset", Utc::now(), "m", 1, 1, 0.1)], vec![]),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    s.collect_until(|e| has(e, "usage", "after-reset")).await;
    // The head itself is still a position to resume from.
    let mut again = open(&app, &t.read, Some(&head), "").await;
    assert_eq!(again.ready().await, head);
}

/// The `ready` event's id is the head itself: a client that resumes from it before anything else
/// happened is `ready` again at the same position, not told to reload. A transaction held open keeps the
/// head where it is (once every older one has ended, the head is its id until it ends; were the head to
/// move on regardless, the resume would be `ready` at the same id all the same).
#[sqlx::test(migrations = "../migrations")]
async fn a_resume_from_the_head_itself_is_ready_not_reset(pool: sqlx::PgPool) {
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let mut pin = pool.begin().await.unwrap();
    let xid: i64 = sqlx::query_scalar("SELECT pg_current_xact_id()::text::bigint")
        .fetch_one(&mut *pin)
        .await
        .unwrap();
    for _ in 0..100 {
        let xmin: i64 =
            sqlx::query_scalar("SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
                .fetch_one(&pool)
                .await
                .unwrap();
        if xmin == xid {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut first = open(&app, &t.read, None, "").await;
    let head = first.ready().await;
    for (last_id, query) in [
        (Some(head.as_str()), String::new()),
        (None, format!("?after={head}")),
    ] {
        let mut again = open(&app, &t.read, last_id, &query).await;
        let e = again.next(Duration::from_secs(5)).await.unwrap();
        assert_eq!(
            (e.event.as_str(), e.id.as_str()),
            ("ready", head.as_str()),
            "{query}"
        );
    }
    pin.rollback().await.unwrap();
}

#[sqlx::test(migrations = "../migrations")]
async fn the_stream_is_refused_like_the_other_reads(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let (_, operator) = apiary_ingest::store::admin::create_operator_token(&app.pool, "billing")
        .await
        .unwrap();
    let admin = app.token(t.id, &["admin"]).await;
    for (token, want) in [
        (t.ingest.as_str(), StatusCode::FORBIDDEN),
        (operator.as_str(), StatusCode::FORBIDDEN),
        ("apy_unknown", StatusCode::UNAUTHORIZED),
    ] {
        let (code, v, _) = try_open(&app, token, "").await;
        assert_eq!(code, want, "{v}");
        assert!(v["error"]["code"].is_string(), "{v}");
    }
    let r = app
        .client
        .get(format!("{}/v1/stream", app.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    for query in ["?after=yesterday", "?colour=red", "?after=1-2-3"] {
        let (code, v, _) = try_open(&app, &t.read, query).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{query}: {v}");
    }
    let r = app
        .client
        .get(format!("{}/v1/stream", app.base))
        .bearer_auth(&t.read)
        .header("Last-Event-ID", "not-a-position")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    // An admin token reads its tenant, like the other reads.
    let mut s = open(&app, &admin, None, "").await;
    s.ready().await;
}

#[sqlx::test(migrations = "../migrations")]
async fn a_subscriber_that_falls_behind_still_gets_every_event_in_order(pool: sqlx::PgPool) {
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let mut slow = open(&app, &t.read, None, "").await;
    slow.ready().await;
    let mut quick = open(&app, &t.read, None, "").await;
    quick.ready().await;
    // More rows than the replica's channel holds, large enough to fill the slow client's socket while
    // it does not read, so its stream falls behind the channel and has to read the table instead.
    let n = apiary_ingest::stream::CAPACITY as i64 + 2000;
    let mut tx = pool.begin().await.unwrap();
    sqlx::query(
        "INSERT INTO stream_events (tenant_id, xid, kind, user_id, data)
         SELECT $1, pg_current_xact_id()::text::bigint, 'status', '',
             jsonb_build_object('session_id', 'flood', 'seq', g, 'pad', repeat('x', 8000))
         FROM generate_series(1, $2) AS g ORDER BY g",
    )
    .bind(t.id)
    .bind(n)
    .execute(&mut *tx)
    .await
    .unwrap();
    sqlx::query("SELECT pg_notify('apiary_stream', '')")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    // The other subscriber is not held up by the slow one.
    let got = quick.collect_until(|e| e.len() as i64 == n).await;
    assert_eq!(got.last().unwrap().data["seq"], n);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got = slow.collect_until(|e| e.len() as i64 == n).await;
    let seqs: Vec<i64> = got
        .iter()
        .map(|e| e.data["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=n).collect::<Vec<_>>());
    assert!(slow.drain(Duration::from_millis(500)).await.is_empty());
}

#[sqlx::test(migrations = "../migrations")]
async fn open_streams_are_capped_per_tenant_and_per_server_and_a_closed_one_frees_its_place(
    pool: sqlx::PgPool,
) {
    let settings = apiary_ingest::config::IngestSettings {
        stream_max_subscribers: 3,
        stream_max_per_tenant: 2,
        ..test_settings()
    };
    let app = spawn_app_with(pool, settings).await;
    let acme = app.tenant("acme").await;
    let globex = app.tenant("globex").await;
    let initech = app.tenant("initech").await;

    let mut a1 = open(&app, &acme.read, None, "").await;
    a1.ready().await;
    let mut a2 = open(&app, &acme.read, None, "").await;
    a2.ready().await;
    // acme's third is over its tenant's limit; globex still gets one (the server has room for one more).
    let (code, v, retry) = try_open(&app, &acme.read, "").await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "acme's third: {v}");
    assert_eq!(v["error"]["code"], "busy", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stream_max_per_tenant"),
        "{v}"
    );
    assert_eq!(retry.as_deref(), Some("5"));
    let mut g1 = open(&app, &globex.read, None, "").await;
    g1.ready().await;
    // The server is full: even a tenant with no stream open is refused.
    let (code, v, retry) = try_open(&app, &initech.read, "").await;
    assert_eq!(
        code,
        StatusCode::SERVICE_UNAVAILABLE,
        "a fourth on the server: {v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("stream_max_subscribers"),
        "{v}"
    );
    assert_eq!(retry.as_deref(), Some("5"));

    // A client that goes away gives its place back (the server sees it at its next write: the
    // heartbeat, or here the first event after the close).
    drop(a1);
    let mut opened = None;
    for _ in 0..200 {
        let (code, _, _) = try_open(&app, &initech.read, "").await;
        if code == StatusCode::OK {
            opened = Some(code);
            break;
        }
        // Make the server write to every acme stream, so it notices the one that left.
        let at = Utc::now();
        app.post_batch(&acme.ingest, &batch(vec![tool("s-cap", at, false)], vec![]))
            .await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        opened,
        Some(StatusCode::OK),
        "a closed stream's place is given back"
    );
    drop((a2, g1));
}

/// Opens a stream (`query`: what follows `/v1/stream`, or "") and lets it go at once: the status, the
/// error body when refused, `Retry-After`. An opened stream is never read, so a stream opened where it
/// must be refused fails on its status rather than leaving the test waiting on its body.
async fn try_open(app: &TestApp, token: &str, query: &str) -> (StatusCode, Value, Option<String>) {
    let r = app
        .client
        .get(format!("{}/v1/stream{query}", app.base))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    let code = r.status();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    if code == StatusCode::OK {
        return (code, Value::Null, retry);
    }
    (code, r.json().await.unwrap_or(Value::Null), retry)
}

/// On Citus a batch commits in two phases: its rows become visible on the worker just after the
/// coordinator's commit. The stream must not read past a transaction still prepared on a worker. Here a
/// transaction is held prepared on a worker by hand while a batch goes in: nothing is delivered until it
/// is committed, then the batch's events are (seen failing: with `settle` skipped, the status arrives
/// while the transaction is still prepared).
#[sqlx::test(migrations = "../migrations")]
async fn on_citus_the_stream_waits_for_transactions_still_prepared_on_a_worker(pool: sqlx::PgPool) {
    use sqlx::Connection;
    if !on_citus().await {
        return;
    }
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let mut s = open(&app, &t.read, None, "").await;
    s.ready().await;

    let mut worker = first_worker(&pool).await;
    let gid = prepare(&mut worker).await;

    let now = Utc::now();
    let events = vec![llm(
        "q1",
        now - chrono::Duration::seconds(5),
        "m",
        100,
        7,
        0.5,
    )];
    let (code, v) = app
        .post_batch(&t.ingest, &batch(events, vec![binding("q1", "alice")]))
        .await;
    let early = s.next(Duration::from_millis(1500)).await;
    let held_for = std::time::Instant::now();
    sqlx::raw_sql(&format!("COMMIT PREPARED '{gid}'"))
        .execute(&mut worker)
        .await
        .unwrap();
    worker.close().await.unwrap();
    assert_eq!(code, StatusCode::OK, "{v}");
    assert!(
        early.is_none(),
        "delivered while a transaction was prepared: {early:?}"
    );
    let got = s
        .collect_until(|e| has(e, "status", "q1") && has(e, "usage", "q1"))
        .await;
    assert!(held_for.elapsed() < Duration::from_secs(5), "{got:?}");
}

/// A resume reads what it missed from the table, and there too only the reader's tenant, and for a
/// user-bound reader only its user's rows: each reader's backlog from a position is exactly what it got
/// live after that position.
#[sqlx::test(migrations = "../migrations")]
async fn a_resume_reads_only_the_readers_tenant_and_user_from_the_table(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let other = app.tenant("globex").await;
    let alice = app.tenant_token_for_user(t.id, "alice").await;
    let readers = [
        ("acme", t.read.clone()),
        ("alice", alice),
        ("globex", other.read.clone()),
    ];
    let mut live = vec![];
    let mut start = None;
    for (_, token) in &readers {
        let mut s = open(&app, token, None, "").await;
        let at = s.ready().await;
        start.get_or_insert(at);
        live.push(s);
    }
    let start = start.unwrap();
    let now = Utc::now();
    for (tenant, events, owners) in [
        (
            &t,
            vec![
                llm("a1", now, "m", 1, 1, 0.1),
                llm("b1", now, "m", 2, 2, 0.2),
            ],
            vec![binding("a1", "alice"), binding("b1", "bob")],
        ),
        (
            &other,
            vec![llm("g1", now, "m", 3, 3, 0.3)],
            vec![binding("g1", "alice")],
        ),
    ] {
        let (code, v) = app.post_batch(&tenant.ingest, &batch(events, owners)).await;
        assert_eq!(code, StatusCode::OK, "{v}");
    }
    let done = |sessions: &'static [&'static str]| {
        move |e: &[Sse]| {
            has(e, "device", "dev-1")
                && sessions
                    .iter()
                    .all(|s| has(e, "status", s) && has(e, "usage", s))
        }
    };
    let mut seen = vec![
        live[0].collect_until(done(&["a1", "b1"])).await,
        live[1].drain(Duration::from_millis(1500)).await,
        live[2].collect_until(done(&["g1"])).await,
    ];
    for (got, s) in seen.iter_mut().zip(&mut live) {
        got.extend(s.drain(Duration::from_millis(500)).await);
    }
    assert_eq!(
        brief(&seen[1]),
        vec![
            ("status".into(), "a1".into(), "\"active\"".into()),
            ("usage".into(), "a1".into(), "1".into())
        ]
    );
    for ((who, token), want) in readers.iter().zip(&seen) {
        let mut again = open(&app, token, Some(&start), "").await;
        assert_eq!(again.ready().await, start, "{who}");
        let got = again.drain(Duration::from_millis(1500)).await;
        assert_eq!(brief(&got), brief(want), "{who}'s backlog");
    }
}

/// Shutting down ends every open stream (its client reconnects elsewhere with its Last-Event-ID) and
/// the replica's stream reader, so that the server's run returns.
#[sqlx::test(migrations = "../migrations")]
async fn shutting_down_ends_the_open_streams_and_the_stream_reader(pool: sqlx::PgPool) {
    citus_prepare(&pool).await;
    let server = apiary_ingest::startup::Application::build(test_settings(), pool.clone())
        .await
        .unwrap();
    let app = TestApp {
        base: format!("http://127.0.0.1:{}", server.port()),
        pool,
        client: reqwest::Client::new(),
    };
    let (stop, stopping) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(server.run_until_stopped(async {
        let _ = stopping.await;
    }));
    let t = app.tenant("acme").await;
    let mut s = open(&app, &t.read, None, "").await;
    s.ready().await;
    let (code, _) = app
        .post_batch(
            &t.ingest,
            &batch(vec![llm("q1", Utc::now(), "m", 1, 1, 0.1)], vec![]),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    s.collect_until(|e| has(e, "usage", "q1")).await;
    stop.send(()).unwrap();
    let end = loop {
        match s.try_next(Duration::from_secs(5)).await {
            Ok(Some(_)) => continue,
            other => break other,
        }
    };
    assert_eq!(end, Err(tests::sse::Ended::Closed), "the open stream ends");
    let ran = tokio::time::timeout(Duration::from_secs(10), running).await;
    assert!(
        matches!(ran, Ok(Ok(Ok(())))),
        "the server's run returns: {ran:?}"
    );
}

/// Each replica's reader waits on `LISTEN apiary_stream`, woken by the commits that wrote rows, so an
/// event goes out as soon as it is deliverable rather than at the next poll (every second).
#[sqlx::test(migrations = "../migrations")]
async fn the_stream_reader_listens_for_new_rows(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    assert!(
        reader_listens(&app.pool).await,
        "no connection of this database listens on apiary_stream"
    );
}

/// The upkeep prunes the rows older than the window (24 hours) as it starts (then every ten minutes),
/// and only those, and records the tenant's horizon so that a resume from before it is told to reload.
#[sqlx::test(migrations = "../migrations")]
async fn the_upkeep_prunes_the_rows_older_than_the_window_and_only_those(pool: sqlx::PgPool) {
    citus_prepare(&pool).await;
    let tenant = apiary_ingest::store::admin::create_tenant(&pool, "acme")
        .await
        .unwrap();
    let ids: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO stream_events (tenant_id, xid, at, kind, data)
         SELECT $1, 10, now() - make_interval(hours => h), 'status', '{}'
         FROM unnest(ARRAY[25, 1]) AS h
         RETURNING id",
    )
    .bind(tenant)
    .fetch_all(&pool)
    .await
    .unwrap();
    let _app = spawn_app(pool.clone()).await;
    let mut left: Vec<i64> = vec![];
    for _ in 0..100 {
        left = sqlx::query_scalar("SELECT id FROM stream_events ORDER BY id")
            .fetch_all(&pool)
            .await
            .unwrap();
        if left.len() < 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        left,
        ids[1..],
        "the row of an hour ago stays, the older one goes"
    );
    let horizon: (i64, i64) =
        sqlx::query_as("SELECT xid, id FROM stream_horizon WHERE tenant_id = $1")
            .bind(tenant)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(horizon, (10, ids[0]));
}

/// The statements the replica sends, as sqlx logs each one it runs (target `sqlx::query`: a summary and
/// the text). A test's runtime is one thread, the app's tasks (the stream reader, the upkeep) included,
/// so a subscriber set for that thread sees every statement of the test's replica and of no other test.
#[derive(Clone, Default)]
struct Statements(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl Statements {
    /// Records this thread's statements until the guard is dropped; returns once a statement on `pool`
    /// was seen. tracing caches, for each call site, whether any subscriber wants its events, the
    /// first time the site is reached: reached on another test's thread while this subscriber was
    /// being set, sqlx's site can be cached as wanted by no one, so the cache is rebuilt until a probe
    /// shows up.
    async fn record(pool: &sqlx::PgPool) -> (Statements, tracing::subscriber::DefaultGuard) {
        let s = Statements::default();
        let guard = tracing::subscriber::set_default(s.clone());
        for _ in 0..100 {
            tracing::callsite::rebuild_interest_cache();
            sqlx::query("SELECT 'statements probe'")
                .execute(pool)
                .await
                .unwrap();
            if s.count(&["statements probe"]) > 0 {
                return (s, guard);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("sqlx's statements never reached this thread's subscriber");
    }

    /// How many statements so far hold every one of `texts`.
    fn count(&self, texts: &[&str]) -> usize {
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|s| texts.iter().all(|t| s.contains(t)))
            .count()
    }
}

impl tracing::Subscriber for Statements {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        m.target() == "sqlx::query"
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_str(&mut self, _: &tracing::field::Field, v: &str) {
                self.0.push_str(v);
                self.0.push('\n');
            }
            fn record_debug(&mut self, _: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{v:?}\n"));
            }
        }
        let mut text = Text(String::new());
        e.record(&mut text);
        self.0.lock().unwrap().push(text.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// The stream reader's head read (`xmin` in `ingest/src/stream.rs`: the snapshot's xmin, and whether the
/// database is a Citus coordinator, in one statement).
const HEAD_READ: &[&str] = &["pg_snapshot_xmin", "pg_extension"];

/// While no stream is open, the replica's reader reads the head about once a second however often
/// batches commit: not on every notification (that was one statement per group commit per replica), and
/// not never (its cursor follows the head, so a first subscriber's first read does not go through every
/// row written since the replica started). Here a notification, as a committing batch sends it, comes
/// every 50 ms for 4 s: one to six head reads (reads start at least a second apart; a slow one may
/// finish late), not one per notification, not none.
#[sqlx::test(migrations = "../migrations")]
async fn an_idle_reader_reads_the_head_about_once_a_second_however_often_batches_commit(
    pool: sqlx::PgPool,
) {
    let (statements, _recording) = Statements::record(&pool).await;
    let _app = spawn_app(pool.clone()).await;
    assert!(reader_listens(&pool).await, "the reader listens");
    let mut before = 0;
    for _ in 0..200 {
        before = statements.count(HEAD_READ);
        if before > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(before > 0, "the reader reads the head as it starts");
    let started = std::time::Instant::now();
    let mut sent = 0;
    while started.elapsed() < Duration::from_secs(4) {
        sqlx::query("SELECT pg_notify('apiary_stream', '')")
            .execute(&pool)
            .await
            .unwrap();
        sent += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reads = statements.count(HEAD_READ) - before;
    assert!(
        (1..=6).contains(&reads),
        "{reads} head reads in 4 s of {sent} notifications"
    );
}

/// Waits (up to 5 s) until one connection of this database listens on `apiary_stream`.
async fn reader_listens(pool: &sqlx::PgPool) -> bool {
    for _ in 0..100 {
        let listening: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE datname = current_database() AND query = 'LISTEN \"apiary_stream\"'",
        )
        .fetch_one(pool)
        .await
        .unwrap();
        if listening == 1 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The upkeep flushes due usage every 250 ms, looks for silent devices every 5 s and prunes every ten
/// minutes, each first as it starts: in the 3 s after its first pass, about a dozen more flushes, no
/// other sweep or prune (a sweep or a prune on every quarter-second tick would scan their tables 20
/// and 2,400 times as often).
#[sqlx::test(migrations = "../migrations")]
async fn the_upkeep_flushes_every_quarter_second_sweeps_every_five_seconds_and_prunes_every_ten_minutes(
    pool: sqlx::PgPool,
) {
    const FLUSH: &[&str] = &["FROM stream_sessions WHERE usage_due_at <= now()"];
    const SWEEP: &[&str] = &["SELECT DISTINCT sd.tenant_id FROM stream_devices sd"];
    const PRUNE: &[&str] = &["DELETE FROM stream_events WHERE at < $1"];
    let (statements, _recording) = Statements::record(&pool).await;
    let _app = spawn_app(pool).await;
    for _ in 0..200 {
        if statements.count(PRUNE) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let first = statements.count(FLUSH);
    assert_eq!(
        (statements.count(SWEEP), statements.count(PRUNE)),
        (1, 1),
        "the first pass sweeps and prunes once ({first} flushes so far)"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let flushes = statements.count(FLUSH) - first;
    let sweeps = statements.count(SWEEP) - 1;
    let prunes = statements.count(PRUNE) - 1;
    assert!(
        (2..=14).contains(&flushes) && (sweeps, prunes) == (0, 0),
        "in the next 3 s: {flushes} flushes, {sweeps} sweeps, {prunes} prunes"
    );
}

/// A connection listening on the stream's channel, as every replica's reader does.
async fn stream_listener(pool: &sqlx::PgPool) -> sqlx::postgres::PgListener {
    let mut listener = sqlx::postgres::PgListener::connect_with(pool)
        .await
        .unwrap();
    listener
        .listen(apiary_ingest::store::stream::CHANNEL)
        .await
        .unwrap();
    listener
}

/// Waits up to `within` for a notification on `listener`.
async fn woken(listener: &mut sqlx::postgres::PgListener, within: Duration) -> bool {
    tokio::time::timeout(within, listener.recv())
        .await
        .is_ok_and(|n| n.is_ok())
}

/// Every transaction that wrote stream rows wakes the readers (`NOTIFY apiary_stream`, delivered at its
/// commit), whichever rows they were — a device now online alone, a status transition alone, a session's
/// usage alone — and one that wrote none does not (a heartbeat from a device already online). Without
/// the notification, events would still arrive, at the readers' next poll: up to a second late.
#[sqlx::test(migrations = "../migrations")]
async fn a_commit_that_streams_rows_wakes_the_readers_and_one_that_streams_nothing_does_not(
    pool: sqlx::PgPool,
) {
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let mut listener = stream_listener(&pool).await;
    assert_eq!(
        app.post_batch(&t.ingest, &heartbeat_batch()).await.0,
        StatusCode::OK
    );
    assert!(
        woken(&mut listener, Duration::from_secs(5)).await,
        "a device's first heartbeat (the device online)"
    );
    assert_eq!(
        app.post_batch(&t.ingest, &heartbeat_batch()).await.0,
        StatusCode::OK
    );
    assert!(
        !woken(&mut listener, Duration::from_secs(1)).await,
        "another heartbeat streams nothing"
    );

    let mut tx = pool.begin().await.unwrap();
    write_batch(
        &mut tx,
        t.id,
        &Default::default(),
        &transition("s", 0, "active"),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    assert!(
        woken(&mut listener, Duration::from_secs(5)).await,
        "a status transition alone"
    );

    let llm_now = || batch(vec![llm("q", Utc::now(), "m", 1, 1, 0.1)], vec![]);
    assert_eq!(
        app.post_batch(&t.ingest, &llm_now()).await.0,
        StatusCode::OK
    );
    assert!(
        woken(&mut listener, Duration::from_secs(5)).await,
        "a new session's status and usage"
    );
    // Over a second after the session's last usage row: its new totals go out at once, alone.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        app.post_batch(&t.ingest, &llm_now()).await.0,
        StatusCode::OK
    );
    assert!(
        woken(&mut listener, Duration::from_secs(5)).await,
        "a session's usage alone"
    );
}

/// The number of `kind` rows streamed for `tenant` (for devices, those announcing it offline).
async fn streamed(pool: &sqlx::PgPool, tenant: uuid::Uuid, kind: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM stream_events WHERE tenant_id = $1 AND kind = $2
           AND (kind <> 'device' OR data->>'online' = 'false')",
    )
    .bind(tenant)
    .bind(kind)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// The upkeep's writes wake the readers as a batch's do. Here a session's usage held back by the
/// one-a-second rule and written when due: the batch that marked it due streamed nothing, so the wake is
/// the upkeep's. Without the notification, the totals would reach the readers only at their next poll.
#[sqlx::test(migrations = "../migrations")]
async fn the_upkeeps_due_usage_wakes_the_readers(pool: sqlx::PgPool) {
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let mut listener = stream_listener(&pool).await;
    let llm_now = || batch(vec![llm("q", Utc::now(), "m", 1, 1, 0.1)], vec![]);
    assert_eq!(
        app.post_batch(&t.ingest, &llm_now()).await.0,
        StatusCode::OK
    );
    assert!(
        woken(&mut listener, Duration::from_secs(5)).await,
        "a new session's status and usage"
    );
    while woken(&mut listener, Duration::from_millis(100)).await {}
    // Within a second of the session's usage row: marked due, streamed by the upkeep when due.
    assert_eq!(
        app.post_batch(&t.ingest, &llm_now()).await.0,
        StatusCode::OK
    );
    assert!(
        woken(&mut listener, Duration::from_secs(5)).await,
        "the due usage written by the upkeep"
    );
    assert_eq!(
        streamed(&pool, t.id, "usage").await,
        2,
        "usage rows when woken"
    );
}

/// The same for a silent device, streamed offline by the upkeep's sweep (every 5 s).
#[sqlx::test(migrations = "../migrations")]
async fn the_upkeeps_offline_devices_wake_the_readers(pool: sqlx::PgPool) {
    let settings = apiary_ingest::config::IngestSettings {
        offline_after_secs: 1,
        ..test_settings()
    };
    let app = spawn_app_with(pool.clone(), settings).await;
    let t = app.tenant("acme").await;
    let mut listener = stream_listener(&pool).await;
    assert_eq!(
        app.post_batch(&t.ingest, &heartbeat_batch()).await.0,
        StatusCode::OK
    );
    assert!(
        woken(&mut listener, Duration::from_secs(5)).await,
        "the device online"
    );
    while woken(&mut listener, Duration::from_millis(100)).await {}
    assert_eq!(streamed(&pool, t.id, "device").await, 0);
    assert!(
        woken(&mut listener, Duration::from_secs(8)).await,
        "the device streamed offline by the sweep"
    );
    assert_eq!(
        streamed(&pool, t.id, "device").await,
        1,
        "devices offline when woken"
    );
}

/// A connection to the first Citus worker, in this test's database.
async fn first_worker(pool: &sqlx::PgPool) -> sqlx::PgConnection {
    use sqlx::ConnectOptions;
    let (host, port): (String, i32) = sqlx::query_as(
        "SELECT nodename::text, nodeport FROM pg_dist_node WHERE groupid <> 0 ORDER BY groupid LIMIT 1",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    let db: String = sqlx::query_scalar("SELECT current_database()::text")
        .fetch_one(pool)
        .await
        .unwrap();
    (*pool.connect_options())
        .clone()
        .host(&host)
        .port(u16::try_from(port).unwrap())
        .database(&db)
        .connect()
        .await
        .unwrap()
}

/// Prepares an empty transaction on `worker` (as the first phase of a Citus commit leaves one); its
/// global id, for `COMMIT PREPARED`.
async fn prepare(worker: &mut sqlx::PgConnection) -> String {
    let gid = format!("apiary_test_{}", uuid::Uuid::new_v4().simple());
    sqlx::raw_sql(&format!("BEGIN; PREPARE TRANSACTION '{gid}'"))
        .execute(&mut *worker)
        .await
        .unwrap();
    gid
}

/// On Citus a stream's own reads (its backlog) wait for the transactions prepared on a worker too: a
/// stream opened while one is prepared for a moment carries on once it is committed. One that stays
/// prepared (its coordinator failed mid-commit; Citus recovers it, by default within a minute) is given
/// up on after 5 s: the stream ends — its client reconnects with its Last-Event-ID — rather than wait for
/// it without end.
#[sqlx::test(migrations = "../migrations")]
async fn on_citus_a_streams_reads_wait_for_a_prepared_transaction_and_give_up_after_five_seconds(
    pool: sqlx::PgPool,
) {
    use sqlx::Connection;
    if !on_citus().await {
        eprintln!("skipped: DATABASE_URL is plain PostgreSQL (scripts/citus.sh start for Citus)");
        return;
    }
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let mut worker = first_worker(&pool).await;

    let gid = prepare(&mut worker).await;
    let mut s = open(&app, &t.read, None, "").await;
    let ready = s.next(Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    sqlx::raw_sql(&format!("COMMIT PREPARED '{gid}'"))
        .execute(&mut worker)
        .await
        .unwrap();
    assert_eq!(ready.map(|e| e.event).as_deref(), Some("ready"));
    let (code, v) = app
        .post_batch(
            &t.ingest,
            &batch(vec![llm("q1", Utc::now(), "m", 1, 1, 0.1)], vec![]),
        )
        .await;
    assert_eq!(code, StatusCode::OK, "{v}");
    s.collect_until(|e| has(e, "usage", "q1")).await;

    let gid = prepare(&mut worker).await;
    let started = std::time::Instant::now();
    let mut stuck = open(&app, &t.read, None, "").await;
    let ready = stuck.next(Duration::from_secs(5)).await;
    let end = loop {
        match stuck.try_next(Duration::from_secs(10)).await {
            Ok(Some(_)) => continue,
            other => break other,
        }
    };
    let took = started.elapsed();
    sqlx::raw_sql(&format!("COMMIT PREPARED '{gid}'"))
        .execute(&mut worker)
        .await
        .unwrap();
    worker.close().await.unwrap();
    assert_eq!(ready.map(|e| e.event).as_deref(), Some("ready"));
    assert_eq!(
        end,
        Err(tests::sse::Ended::Closed),
        "the stream ends (after {took:?})"
    );
    assert!(took >= Duration::from_secs(5), "{took:?}");
}
