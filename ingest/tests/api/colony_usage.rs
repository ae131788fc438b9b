//! Usage grouped by colony and another key (user, model, tool) equals a recomputation from the events
//! sent. Each event's colony is the key of the run its colony id names, else the key of the forked run
//! its own session is, else its colony id as stored ("" for none): with runs told before and after their
//! usage arrives, a session that is a forked run of one colony and whose events name another colony's
//! run, colony ids no run names, and sessions of two users on two models.

use std::collections::BTreeMap;

use chrono::{Datelike, Duration, DurationRound, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use reqwest::StatusCode;
use serde_json::{json, Value};

use crate::helpers::*;

/// (input tokens, events, tool calls) per (bucket as a Unix time, colony key, the other key).
type Sums = BTreeMap<(i64, String, String), (u64, u64, u64)>;

/// Adds `s` to `key`.
fn add(m: &mut Sums, key: (i64, String, String), s: (u64, u64, u64)) {
    let e = m.entry(key).or_default();
    (e.0, e.1, e.2) = (e.0 + s.0, e.1 + s.1, e.2 + s.2);
}

/// The answer's rows as sums per (bucket, colony, `other` field); bucket 0 when `by_bucket` is false.
fn read(v: &Value, other: &str, by_bucket: bool) -> Sums {
    let mut got = Sums::new();
    for r in v["rows"].as_array().expect("rows") {
        let b = match by_bucket {
            true => chrono::DateTime::parse_from_rfc3339(r["bucket"].as_str().unwrap())
                .unwrap()
                .timestamp(),
            false => 0,
        };
        let key = (
            b,
            r["colony_id"].as_str().unwrap_or("").to_string(),
            r[other].as_str().unwrap_or("").to_string(),
        );
        let s = (
            r["input_tokens"].as_u64().unwrap(),
            r["events"].as_u64().unwrap(),
            r["tool_calls"].as_u64().unwrap(),
        );
        add(&mut got, key, s);
    }
    got
}

#[sqlx::test(migrations = "../migrations")]
async fn usage_by_colony_and_user_model_or_tool_gives_each_row_its_runs_colony(pool: sqlx::PgPool) {
    let app = spawn_app(pool).await;
    let t = app.tenant("acme").await;
    let mut rng = StdRng::seed_from_u64(11);
    let keys: Vec<String> = (0..3)
        .map(|i| format!("ck_{}", format!("{i}").repeat(32)))
        .collect();
    let now = Utc::now();
    // Events from an hour into a day four days back, over three days (none in the future).
    let day0 = (now - Duration::days(4))
        .duration_trunc(Duration::days(1))
        .unwrap();
    let base = day0 + Duration::hours(1);
    // Six runs of three colonies: run-i forked from queen q{i % 2}.
    let run_key = |i: usize| keys[i % 3].clone();
    // Sessions: (session, colony id its events carry, the key the read must give it, its user).
    let mut sessions: Vec<(String, String, String, String)> = vec![];
    let user = |n: usize| format!("u{}", n % 2);
    for i in 0..6 {
        // The run's own session carries no colony id: its key comes from being a forked run.
        sessions.push((format!("run-{i}"), String::new(), run_key(i), user(i)));
        for w in 0..3 {
            sessions.push((
                format!("w-{i}-{w}"),
                format!("run-{i}"),
                run_key(i),
                user(i + w),
            ));
        }
    }
    // A run (run-6, of colony 0) whose own events name run-1 (colony 1) as their colony: the run its
    // colony id names wins.
    sessions.push(("run-6".into(), "run-1".into(), run_key(1), user(1)));
    // Queens, a colony id that no run names, and plain sessions.
    sessions.push(("q0".into(), String::new(), String::new(), user(0)));
    sessions.push(("q1".into(), String::new(), String::new(), user(1)));
    sessions.push((
        "orphan".into(),
        "unknown-queen".into(),
        "unknown-queen".into(),
        user(1),
    ));
    sessions.push(("plain".into(), String::new(), String::new(), user(0)));
    let bindings: Vec<Value> = sessions.iter().map(|s| binding(&s.0, &s.3)).collect();

    let mut usage = vec![];
    // Per day: (colony, user) and (colony, model); per tool: (colony, user) of the tool calls.
    let (mut by_user, mut by_model, mut tools) = (Sums::new(), Sums::new(), Sums::new());
    for _ in 0..600 {
        let (sid, colony, key, uid) = &sessions[rng.gen_range(0..sessions.len())];
        let at = base + Duration::seconds(rng.gen_range(0..3 * 86_400 - 600));
        let model = ["m1", "m2"][rng.gen_range(0..2)];
        let is_llm = rng.gen_bool(0.6);
        let mut e = match is_llm {
            true => llm(
                sid,
                at,
                model,
                rng.gen_range(1..5000),
                rng.gen_range(0..500),
                0.001,
            ),
            false => tool(sid, at, rng.gen_bool(0.2)),
        };
        if !colony.is_empty() {
            e["colony_id"] = json!(colony);
            e["parent_session_id"] = json!(colony);
            e["agent_role"] = json!("worker");
        }
        let day = at.duration_trunc(Duration::days(1)).unwrap().timestamp();
        let s = (
            e["data"]["input_tokens"].as_u64().unwrap_or(0),
            1,
            u64::from(!is_llm),
        );
        add(&mut by_user, (day, key.clone(), uid.clone()), s);
        let m = if is_llm { model } else { "" };
        add(&mut by_model, (day, key.clone(), m.to_string()), s);
        if !is_llm {
            add(&mut tools, (0, key.clone(), uid.clone()), (0, 0, 1));
        }
        usage.push(e);
    }
    let created = |i: usize| {
        event(
            "colony.created",
            Some(&format!("q{}", i % 2)),
            base - Duration::minutes(5),
            json!({ "source": "created", "colony_id": format!("run-{i}"), "queen_session_id": format!("q{}", i % 2),
                    "forked_session_id": format!("run-{i}"), "colony_key": run_key(i) }),
        )
    };
    // A run's `colony.created` is an event of its queen's session (no colony, model '').
    let told = (base - Duration::minutes(5))
        .duration_trunc(Duration::days(1))
        .unwrap()
        .timestamp();
    for i in 0..7 {
        add(&mut by_user, (told, String::new(), user(i % 2)), (0, 1, 0));
        add(
            &mut by_model,
            (told, String::new(), String::new()),
            (0, 1, 0),
        );
    }
    // Runs 0, 2, 4 are told before their usage, 1, 3, 5 and 6 after it.
    let mut first: Vec<Value> = [0, 2, 4].into_iter().map(created).collect();
    first.extend(usage.drain(..300));
    let mut second = usage;
    second.extend([1, 3, 5, 6].into_iter().map(created));
    for events in [first, second] {
        let (s, v) = app
            .post_batch(&t.ingest, &batch(events, bindings.clone()))
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["rejected"], json!([]), "{v}");
    }

    let range = |from: chrono::DateTime<Utc>| {
        format!(
            "from={}&to={}",
            from.to_rfc3339().replace('+', "%2B"),
            (now.duration_trunc(Duration::days(1)).unwrap() + Duration::days(1))
                .to_rfc3339()
                .replace('+', "%2B")
        )
    };
    let get = |group: &'static str, gran: &'static str| {
        let (app, t, q) = (&app, &t, range(day0));
        async move {
            let path = format!("/v1/usage?{q}&group_by={group}&granularity={gran}");
            let (s, v) = app.get(&t.read, &path).await;
            assert_eq!(s, StatusCode::OK, "{path}: {v}");
            v
        }
    };
    let totals = |m: &Sums| {
        let mut t = Sums::new();
        for ((_, c, o), s) in m {
            add(&mut t, (0, c.clone(), o.clone()), *s);
        }
        t
    };

    // By day (whole hours from the hourly rollup), in either order of the keys.
    for group in ["colony,user", "user,colony"] {
        let v = get(group, "day").await;
        assert_eq!(read(&v, "user_id", true), by_user, "{group}: {v}");
    }
    let v = get("colony,model", "day").await;
    assert_eq!(read(&v, "model", true), by_model, "{v}");
    // By hour (hour rows), summed; and in total.
    let v = get("model,colony", "hour").await;
    assert_eq!(read(&v, "model", false), totals(&by_model), "{v}");
    let v = get("colony,user", "total").await;
    assert_eq!(read(&v, "user_id", false), totals(&by_user), "{v}");
    // Three keys: summed over the model, the colony and user sums.
    let v = get("user,model,colony", "day").await;
    assert_eq!(read(&v, "user_id", true), by_user, "{v}");
    // A range that starts inside an hour (quarter rows for that hour, hourly rows after it).
    let from = day0 + Duration::minutes(45);
    let path = format!(
        "/v1/usage?{}&group_by=colony,user&granularity=total",
        range(from)
    );
    let (s, v) = app.get(&t.read, &path).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        read(&v, "user_id", false),
        totals(&by_user),
        "no event before {from}: {v}"
    );
    // Tool calls per colony and user, from the tool rollup.
    let v = get("tool,colony,user", "total").await;
    let mut got = Sums::new();
    for ((_, c, u), s) in read(&v, "user_id", false) {
        add(&mut got, (0, c, u), (0, 0, s.2));
    }
    assert_eq!(got, tools, "{v}");

    // Colony-scoped budgets (evaluated together, by the same joins) spend what `/v1/usage` answers for
    // their colony over their period: in UTC (hourly rows) and in a zone whose month starts at 18:30 UTC
    // (its cut hours from quarter rows), in both units.
    // A budget's period is the current one, whatever the clock: turns of each colony inside both
    // zones' current month (between the later of the two months' starts and now), so that every
    // budget has usage to spend even on a month's first days or after 18:30 UTC on its last.
    let utc_month = |t: chrono::DateTime<Utc>| {
        t.date_naive()
            .with_day(1)
            .unwrap()
            .and_hms_opt(0, 0, 0)
            .unwrap()
            .and_utc()
    };
    let kolkata = Duration::minutes(330);
    let latest = utc_month(now).max(utc_month(now + kolkata) - kolkata);
    let at = latest + (now - latest) / 2;
    let turns: Vec<Value> = (0..3)
        .map(|i| {
            let mut e = llm(&format!("w-{i}-0"), at, "m1", 1000 + i as u64, 10, 0.001);
            e["colony_id"] = json!(format!("run-{i}"));
            e["parent_session_id"] = json!(format!("run-{i}"));
            e["agent_role"] = json!("worker");
            e
        })
        .collect();
    let (s, v) = app
        .post_batch(&t.ingest, &batch(turns, bindings.clone()))
        .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["rejected"], json!([]), "{v}");
    let admin = app.token(t.id, &["admin"]).await;
    for tz in ["UTC", "Asia/Kolkata"] {
        for (i, key) in keys.iter().enumerate() {
            let limit = match i % 2 {
                0 => json!({"limit_tokens": 1_000_000_000}),
                _ => json!({"limit_usd": "1000"}),
            };
            let mut body = json!({"period": "month", "tz": tz, "scope": {"colony": key}});
            body.as_object_mut()
                .unwrap()
                .extend(limit.as_object().unwrap().clone());
            let (s, v) = app.post_json(&admin, "/v1/budgets", body).await;
            assert_eq!(s, StatusCode::CREATED, "{v}");
        }
    }
    let (s, list) = app.get(&admin, "/v1/budgets").await;
    assert_eq!(s, StatusCode::OK, "{list}");
    let mut spent_somewhere = 0;
    for b in list["budgets"].as_array().unwrap() {
        let key = b["scope"]["colony"].as_str().unwrap();
        let path = format!(
            "/v1/usage?from={}&to={}&group_by=colony&granularity=total",
            b["period_start"].as_str().unwrap().replace('+', "%2B"),
            b["period_end"].as_str().unwrap().replace('+', "%2B"),
        );
        let (s, v) = app.get(&t.read, &path).await;
        assert_eq!(s, StatusCode::OK, "{path}: {v}");
        let row = v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["colony_id"] == json!(key));
        let want = row.map_or(0, |r| match b["unit"].as_str().unwrap() {
            "tokens" => r["input_tokens"].as_i64().unwrap() + r["output_tokens"].as_i64().unwrap(),
            _ => r["cost_nanos"].as_i64().unwrap(),
        });
        assert_eq!(b["spent"].as_i64().unwrap(), want, "{b}\n{v}");
        spent_somewhere += i64::from(want > 0);
    }
    assert!(
        spent_somewhere >= 4,
        "the colonies' budgets see their usage: {list}"
    );
}

/// Input tokens per (bucket, colony) of a `/v1/usage` answer grouped by colony, rows without tokens left
/// out.
fn tokens_by_colony(v: &Value) -> BTreeMap<(String, String), i64> {
    let mut out = BTreeMap::new();
    for r in v["rows"].as_array().expect("rows") {
        let n = r["input_tokens"].as_i64().unwrap();
        if n != 0 {
            let key = (
                r["bucket"].as_str().unwrap_or("").to_string(),
                r["colony_id"].as_str().unwrap_or("").to_string(),
            );
            *out.entry(key).or_default() += n;
        }
    }
    out
}

/// A session whose `colony.created` arrives after its usage becomes a forked run then, and a run whose
/// own earlier `colony.created` names it without a parent stops being one: the usage already stored moves
/// to the colony's key and back to none, in the days, the months and the total, and the colony rollups
/// stay the hourly rows summed.
#[sqlx::test(migrations = "../migrations")]
async fn usage_stored_before_a_run_is_told_or_changed_moves_to_its_colony(pool: sqlx::PgPool) {
    let app = spawn_app(pool.clone()).await;
    let t = app.tenant("acme").await;
    let key = format!("ck_{}", "a".repeat(32));
    let now = Utc::now();
    let day0 = (now - Duration::days(3))
        .duration_trunc(Duration::days(1))
        .unwrap();
    let at = |h: i64| day0 + Duration::hours(h);
    let bindings = vec![binding("q", "u0"), binding("fa", "u0"), binding("fb", "u0")];
    let forked = |run: &str, at| {
        event(
            "colony.created",
            Some("q"),
            at,
            json!({ "source": "created", "colony_id": run, "queen_session_id": "q",
                    "forked_session_id": run, "colony_key": key }),
        )
    };
    let post = |events: Vec<Value>| {
        let (app, t, body) = (&app, &t, batch(events, bindings.clone()));
        async move {
            let (s, v) = app.post_batch(&t.ingest, &body).await;
            assert_eq!(s, StatusCode::OK, "{v}");
            assert_eq!(v["rejected"], json!([]), "{v}");
        }
    };
    // fb is a forked run before its usage arrives; fa's usage arrives first, on two days.
    let mut first = vec![forked("fb", at(0))];
    for (s, h, n) in [
        ("fa", 1, 100),
        ("fa", 30, 200),
        ("fb", 2, 1000),
        ("fb", 26, 2000),
    ] {
        first.push(llm(s, at(h), "m1", n, 1, 0.0));
    }
    post(first).await;
    let month = |t: chrono::DateTime<Utc>| {
        t.with_day(1)
            .unwrap()
            .duration_trunc(Duration::days(1))
            .unwrap()
    };
    let (from, to) = (month(day0), month(month(now) + Duration::days(32)));
    let read = |gran: &'static str| {
        let (app, t) = (&app, &t);
        let path = format!(
            "/v1/usage?from={}&to={}&group_by=colony&granularity={gran}",
            from.to_rfc3339().replace('+', "%2B"),
            to.to_rfc3339().replace('+', "%2B")
        );
        async move {
            let (s, v) = app.get(&t.read, &path).await;
            assert_eq!(s, StatusCode::OK, "{path}: {v}");
            tokens_by_colony(&v)
        }
    };
    let day = |d: i64| (day0 + Duration::days(d)).to_rfc3339();
    let by_day = |rows: &[(i64, &str, i64)]| -> BTreeMap<(String, String), i64> {
        rows.iter()
            .map(|(d, c, n)| ((day(*d), c.to_string()), *n))
            .collect()
    };
    let totals = |v: BTreeMap<(String, String), i64>| -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        for ((_, c), n) in v {
            *out.entry(c).or_default() += n;
        }
        out
    };
    let check = |days: BTreeMap<(String, String), i64>| {
        let (read, pool) = (&read, &pool);
        async move {
            assert_eq!(read("day").await, days, "by day");
            assert_eq!(
                totals(read("month").await),
                totals(days.clone()),
                "by month"
            );
            assert_eq!(totals(read("total").await), totals(days), "in total");
            crate::exactness::assert_rollups_agree(pool).await;
        }
    };
    check(by_day(&[
        (0, "", 100),
        (1, "", 200),
        (0, &key, 1000),
        (1, &key, 2000),
    ]))
    .await;
    // fa is told now: its stored usage moves to the colony.
    post(vec![forked("fa", at(0))]).await;
    check(by_day(&[(0, &key, 1100), (1, &key, 2200)])).await;
    // An earlier `colony.created` of fb's own session names fb itself: fb is a run without a parent now,
    // so its own usage is no colony's any more.
    post(vec![event(
        "colony.created",
        Some("fb"),
        at(0) - Duration::minutes(1),
        json!({ "source": "created", "colony_id": "fb", "queen_session_id": "fb", "colony_key": key }),
    )])
    .await;
    check(by_day(&[
        (0, &key, 100),
        (1, &key, 200),
        (0, "", 1000),
        (1, "", 2000),
    ]))
    .await;
}
