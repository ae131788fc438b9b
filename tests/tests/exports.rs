//! Getting the numbers out, black box: the fixture Hive day and a few synthetic sessions posted to the real
//! ingest, then read back the ways teams consume them.
//!
//! - CSV: `/v1/usage` (and a session's usage) with `format=csv` or `Accept: text/csv`, read with the `csv`
//!   crate and compared cell by cell with the JSON answer to the same query; the cost columns summed as
//!   exact decimals equal the JSON's `totals` to the nano-dollar; a model named like a formula (`=`, `+`,
//!   `-`, `@`) is written as text (a leading `'`, quoted), as OWASP advises.
//! - Prometheus: `GET /v1/metrics` with a read token, parsed with the `prometheus-parse` crate: every
//!   counter of every label set equals `/v1/usage` over all time with the same `group_by`; the same
//!   batch sent again changes nothing, new events add exactly theirs; a user-bound read token scrapes its
//!   user's usage only; a session label (unbounded) and a scrape without a token are refused.
//! - The scrape's other series against the API that serves each: the tool duration histogram (a
//!   duration on every completed tool call of the day) against `/v1/usage?group_by=tool,user` (count,
//!   sum, the API's p50/p95 inside the bucket their rank falls in), sessions by status against every
//!   page of `/v1/sessions`, devices online against `/v1/devices`; all scoped to a user-bound token.

use std::collections::BTreeMap;

use chrono::DateTime;

use apiary_schema::CanonicalEvent;
use serde_json::Value;
use tests::fixture;
use tests::stack::{client, ingest_cli, Api, Cloud, USER};

/// Covers the fixture day and the synthetic sessions (stamped now) alike.
const SINCE: &str = "from=2026-11-01";

/// Models a spreadsheet would evaluate, each the model of one synthetic session.
const HOSTILE: [&str; 4] = ["=HYPERLINK(\"http://x\",\"y\")", "+1+2", "-3,4", "@SUM(A1)"];

/// One synthetic turn of session `session` whose model is `model`.
fn turn_of_model(session: &str, model: &str) -> CanonicalEvent {
    let ev = fixture::synthetic_canonical(session, 0, 1).remove(0);
    let text = serde_json::to_string(&ev).unwrap();
    let model = serde_json::to_string(model).unwrap();
    let text = text.replace("\"claude-sonnet-4-5-20250929\"", &model);
    serde_json::from_str(&text).unwrap()
}

async fn post(cloud: &Cloud, events: &[CanonicalEvent]) {
    let (code, v) = cloud
        .ingest_api()
        .post_batch(&fixture::batch_body(events, "dev-exports"))
        .await
        .unwrap();
    assert_eq!(code, 200, "{v}");
}

/// The fixture day, and with `hostile` one turn per formula-like model.
async fn seeded(hostile: bool) -> Cloud {
    let cloud = Cloud::start().await.unwrap();
    post(&cloud, &fixture::canonical_events()).await;
    if !hostile {
        return cloud;
    }
    let hostile: Vec<CanonicalEvent> = HOSTILE
        .iter()
        .enumerate()
        .map(|(i, m)| turn_of_model(&format!("hostile-{i}"), m))
        .collect();
    post(&cloud, &hostile).await;
    cloud
}

/// GET with the read token and an optional `Accept` → (status, content type, body text).
async fn get_text(api: &Api, path: &str, accept: Option<&str>) -> (u16, String, String) {
    let mut req = client()
        .get(format!("{}{path}", api.base))
        .bearer_auth(&api.token);
    if let Some(a) = accept {
        req = req.header("accept", a);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, ct, r.text().await.unwrap())
}

/// Nano-dollars from an exact decimal of dollars (`0.000001234` → 1234), refusing anything inexact.
fn nanos_of_decimal(s: &str) -> i128 {
    let (whole, frac) = s.split_once('.').unwrap_or_else(|| panic!("{s}"));
    assert_eq!(frac.len(), 9, "nine decimals: {s}");
    let sign = if whole.starts_with('-') { -1 } else { 1 };
    let whole: i128 = whole.trim_start_matches('-').parse().unwrap();
    sign * (whole * 1_000_000_000 + frac.parse::<i128>().unwrap())
}

/// A JSON value as the CSV cell it must be: a null key is empty, a formula-like key gets its `'`.
fn expected_cell(v: &Value, is_key: bool) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) if is_key && s.starts_with(['=', '+', '-', '@']) => format!("'{s}"),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Reads `text` back as CSV and checks it against the JSON answer `json` cell by cell; returns the
/// summed cost columns (nanos, and the decimal dollars as nanos).
fn check_csv_against_json(text: &str, json: &Value, what: &str) -> (i128, i128) {
    assert!(text.ends_with("\r\n"), "{what}: CRLF line ends");
    let mut reader = csv::ReaderBuilder::new().from_reader(text.as_bytes());
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    let keys: Vec<String> = json["group_by"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    assert_eq!(header[0], "bucket", "{what}");
    assert_eq!(
        header[1..=keys.len()],
        keys[..],
        "{what}: the dimensions follow the bucket"
    );
    let rows = json["rows"].as_array().unwrap();
    let records: Vec<csv::StringRecord> = reader.records().map(|r| r.unwrap()).collect();
    assert_eq!(records.len(), rows.len(), "{what}: one line per row");
    let (mut cost, mut cost_usd) = (0i128, 0i128);
    for (rec, row) in records.iter().zip(rows) {
        for (name, cell) in header.iter().zip(rec.iter()) {
            if let Some(dollars) = name.strip_suffix("_usd") {
                let nanos = row[format!("{dollars}_nanos")].as_i64().unwrap();
                assert_eq!(
                    nanos_of_decimal(cell),
                    i128::from(nanos),
                    "{what}: {name} of {row}"
                );
            } else if let Some(f) = row[name.as_str()]
                .as_f64()
                .filter(|_| row[name.as_str()].is_f64())
            {
                assert_eq!(cell.parse::<f64>().unwrap(), f, "{what}: {name} of {row}");
            } else {
                let want = expected_cell(&row[name.as_str()], keys.contains(name));
                assert_eq!(cell, want, "{what}: {name} of {row}");
            }
        }
        let at = |n: &str| header.iter().position(|h| h == n).unwrap();
        cost += rec[at("cost_nanos")].parse::<i128>().unwrap();
        cost_usd += nanos_of_decimal(&rec[at("cost_usd")]);
    }
    (cost, cost_usd)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_as_csv_reads_back_equal_to_the_json_and_neutralises_formulas() {
    let cloud = seeded(true).await;
    let api = cloud.read_api();
    for query in [
        format!("{SINCE}&group_by=model,user&granularity=day&tz=Asia/Kolkata"),
        format!("{SINCE}&group_by=session,runtime,colony&granularity=hour"),
        format!("{SINCE}&group_by=tool"),
        SINCE.to_string(),
    ] {
        let json = api.get_ok(&format!("/v1/usage?{query}")).await.unwrap();
        let (code, ct, text) = get_text(&api, &format!("/v1/usage?{query}&format=csv"), None).await;
        assert_eq!(code, 200, "{query}: {text}");
        assert!(ct.starts_with("text/csv"), "{ct}");
        let (code, _, by_accept) =
            get_text(&api, &format!("/v1/usage?{query}"), Some("text/csv")).await;
        assert_eq!(
            (code, &by_accept),
            (200, &text),
            "{query}: Accept asks for the same CSV"
        );
        let (cost, cost_usd) = check_csv_against_json(&text, &json, &query);
        if !query.contains("tool") {
            let total = i128::from(json["totals"]["cost_nanos"].as_i64().unwrap());
            assert!(total > 0, "{json}");
            assert_eq!(
                (cost, cost_usd),
                (total, total),
                "{query}: the sheet's sums are the totals"
            );
        }
    }

    // A browser's Accept (`*/*`) and an explicit `format=json` keep the JSON.
    let (_, ct, _) = get_text(&api, &format!("/v1/usage?{SINCE}"), Some("*/*")).await;
    assert!(ct.starts_with("application/json"), "{ct}");
    let (_, ct, _) = get_text(
        &api,
        &format!("/v1/usage?{SINCE}&format=json"),
        Some("text/csv"),
    )
    .await;
    assert!(ct.starts_with("application/json"), "{ct}");
    let (code, _, body) = get_text(&api, "/v1/usage?format=xml", None).await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("`format`"), "the parameter is named: {body}");

    // The formula-like models: text, not formulas, in the raw file as a spreadsheet opens it.
    let (_, _, text) = get_text(
        &api,
        &format!("/v1/usage?{SINCE}&group_by=model&format=csv"),
        None,
    )
    .await;
    for raw in [
        "\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\",",
        "\"'+1+2\",",
        "\"'-3,4\",",
        "\"'@SUM(A1)\",",
    ] {
        assert!(text.contains(raw), "{raw} in:\n{text}");
    }
    for line in text.lines().skip(1) {
        assert!(!line.starts_with(['=', '+', '-', '@']), "{line}");
        let model_cell = line.split(',').nth(1).unwrap();
        assert!(!model_cell.starts_with(['=', '+', '-', '@']), "{line}");
    }

    // A session's usage answers CSV the same way.
    let json = api.get_ok("/v1/sessions/hostile-2/usage").await.unwrap();
    let (code, _, text) = get_text(&api, "/v1/sessions/hostile-2/usage?format=csv", None).await;
    assert_eq!(code, 200, "{text}");
    check_csv_against_json(&text, &json, "session usage");
    assert!(text.contains("\"'-3,4\""), "{text}");
}

/// The scrape's samples: metric name → (sorted labels → value).
type Samples = BTreeMap<String, BTreeMap<Vec<(String, String)>, f64>>;

async fn scrape(api: &Api, query: &str) -> Samples {
    let (code, ct, text) = get_text(api, &format!("/v1/metrics{query}"), None).await;
    assert_eq!(code, 200, "{text}");
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    assert!(text.ends_with("# EOF\n"), "{text}");
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let parsed = prometheus_parse::Scrape::parse(lines).unwrap();
    let mut out = Samples::new();
    for s in parsed.samples {
        let labels: Vec<(String, String)> = s
            .labels
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<BTreeMap<_, _>>()
            .into_iter()
            .collect();
        let value = match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            // A histogram's buckets as samples of `NAME_bucket` labelled `le`, as the text says them.
            prometheus_parse::Value::Histogram(buckets) => {
                let series = out.entry(format!("{}_bucket", s.metric)).or_default();
                for b in buckets {
                    let mut set = labels.clone();
                    set.push(("le".into(), b.less_than.to_string()));
                    set.sort();
                    series.insert(set, b.count);
                }
                continue;
            }
            other => panic!("{}: {other:?}", s.metric),
        };
        out.entry(s.metric).or_default().insert(labels, value);
    }
    out
}

/// The (name, extra label, JSON field) of every integer counter, and of the float ones.
const INT_COUNTERS: [(&str, Option<&str>, &str); 9] = [
    (
        "apiary_token_usage_tokens_total",
        Some("input"),
        "input_tokens",
    ),
    (
        "apiary_token_usage_tokens_total",
        Some("output"),
        "output_tokens",
    ),
    (
        "apiary_token_usage_tokens_total",
        Some("cached"),
        "cached_tokens",
    ),
    (
        "apiary_token_usage_tokens_total",
        Some("cache_creation"),
        "cache_creation_tokens",
    ),
    ("apiary_cost_nanodollars_total", None, "cost_nanos"),
    ("apiary_llm_calls_total", None, "llm_calls"),
    ("apiary_tool_calls_total", None, "tool_calls"),
    ("apiary_tool_errors_total", None, "tool_errors"),
    ("apiary_events_total", None, "events"),
];

/// Checks every counter of `samples` (labelled by `labels`, the JSON fields `fields`) against the usage
/// rows of the same grouping; returns how many label sets there were.
fn check_scrape_against_usage(samples: &Samples, usage: &Value, labels: &[(&str, &str)]) -> usize {
    let rows = usage["rows"].as_array().unwrap();
    for row in rows {
        let mut set: Vec<(String, String)> = labels
            .iter()
            .map(|(l, f)| (l.to_string(), row[*f].as_str().unwrap_or("").to_string()))
            .collect();
        set.sort();
        let point = |name: &str, token_type: Option<&str>| -> f64 {
            let mut s = set.clone();
            if let Some(t) = token_type {
                s.push(("gen_ai_token_type".into(), t.into()));
                s.sort();
            }
            // Prometheus drops empty labels: a "none" key is an absent label.
            s.retain(|(_, v)| !v.is_empty());
            *samples
                .get(name)
                .and_then(|m| m.get(&s))
                .unwrap_or_else(|| panic!("{name} {s:?} in {samples:?}"))
        };
        for (name, token_type, field) in INT_COUNTERS {
            let want = row[field].as_i64().unwrap();
            assert_eq!(
                point(name, token_type),
                want as f64,
                "{name} {token_type:?}: {row}"
            );
        }
        assert_eq!(
            point("apiary_cost_usd_total", None),
            row["cost_usd"].as_f64().unwrap(),
            "{row}"
        );
        let seconds = row["tool_duration_ms"].as_i64().unwrap() as f64 / 1000.0;
        assert_eq!(
            point("apiary_tool_duration_seconds_total", None),
            seconds,
            "{row}"
        );
    }
    let sets = samples["apiary_llm_calls_total"].len();
    assert_eq!(sets, rows.len(), "one label set per usage row");
    rows.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_scrape_equals_usage_over_all_time_and_is_scoped_like_every_read() {
    // The fixture's models and users only: `prometheus-parse` reads label values naively (no commas,
    // quotes or `=` in them).
    let cloud = seeded(false).await;
    let api = cloud.read_api();
    let by = [("model", "model"), ("user", "user_id")];
    let usage = api
        .get_ok(&format!("/v1/usage?{SINCE}&group_by=model,user"))
        .await
        .unwrap();
    let samples = scrape(&api, "?group_by=model,user").await;
    assert!(
        check_scrape_against_usage(&samples, &usage, &by) >= 4,
        "{usage}"
    );

    // No labels: one series per counter, the totals.
    let totals = api.get_ok(&format!("/v1/usage?{SINCE}")).await.unwrap();
    check_scrape_against_usage(&scrape(&api, "").await, &totals, &[]);
    let before = totals["rows"][0].clone();

    // The same batch again changes nothing; new turns add exactly theirs.
    post(&cloud, &fixture::canonical_events()).await;
    post(&cloud, &fixture::synthetic_canonical("late-arrivals", 0, 3)).await;
    let totals = api.get_ok(&format!("/v1/usage?{SINCE}")).await.unwrap();
    let after = &totals["rows"][0];
    assert_eq!(
        after["llm_calls"].as_i64().unwrap() - before["llm_calls"].as_i64().unwrap(),
        3,
        "{before} → {after}"
    );
    assert_eq!(
        after["cost_nanos"].as_i64().unwrap() - before["cost_nanos"].as_i64().unwrap(),
        3_000_000,
        "three turns of 0.001 USD"
    );
    check_scrape_against_usage(&scrape(&api, "").await, &totals, &[]);
    let usage = api
        .get_ok(&format!("/v1/usage?{SINCE}&group_by=model,user"))
        .await
        .unwrap();
    check_scrape_against_usage(&scrape(&api, "?group_by=user,model").await, &usage, &by);

    // A read token bound to another user scrapes that user's usage: none of alice's.
    let bob = ingest_cli(
        &cloud.db.url,
        &[
            "token",
            "create",
            "--tenant",
            &cloud.tenant.id,
            "--scope",
            "read",
            "--user",
            "bob",
        ],
    )
    .unwrap();
    let bob = Api::new(&cloud.ingest.url(), tests::procs::last_line(&bob).as_str());
    let theirs = scrape(&bob, "?group_by=user").await;
    assert!(
        theirs.values().all(|m| m.is_empty()),
        "bob sees no series: {theirs:?}"
    );
    let alice = scrape(&api, "?group_by=user").await;
    assert!(alice["apiary_llm_calls_total"]
        .keys()
        .any(|l| l.contains(&("user".to_string(), USER.to_string()))));

    // Unbounded labels and anonymous scrapes are refused.
    let (code, _, body) = get_text(&api, "/v1/metrics?group_by=session", None).await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("`group_by`"), "{body}");
    let anonymous = client()
        .get(format!("{}/v1/metrics", cloud.ingest.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
}

/// The fixture day with a duration on every completed tool call (cycling through [`DURATIONS_MS`]:
/// both ends of buckets, and past a minute).
fn timed_fixture() -> Vec<CanonicalEvent> {
    let mut i = 0;
    fixture::canonical_events()
        .into_iter()
        .map(|ev| {
            let mut v = serde_json::to_value(&ev).unwrap();
            if v["type"] == "tool.call" && v["data"]["status"] == "completed" {
                v["data"]["duration_ms"] = DURATIONS_MS[i % DURATIONS_MS.len()].into();
                i += 1;
            }
            serde_json::from_value(v).unwrap()
        })
        .collect()
}

const DURATIONS_MS: [i64; 8] = [0, 1, 2, 3, 4, 700, 1024, 90_000];

/// Every session of every page of `/v1/sessions` counted by its user and status, labelled as the
/// scrape labels them.
async fn listed_statuses(api: &Api) -> BTreeMap<Vec<(String, String)>, f64> {
    let mut out = BTreeMap::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/sessions?limit=1000&cursor={c}"),
            None => "/v1/sessions?limit=1000".to_string(),
        };
        let page = api.get_ok(&path).await.unwrap();
        for s in page["sessions"].as_array().unwrap() {
            let status = s["status"].as_str().unwrap().to_string();
            let mut set = vec![("apiary_session_status".to_string(), status)];
            if let Some(u) = s["user_id"].as_str().filter(|u| !u.is_empty()) {
                set.push(("user".into(), u.into()));
            }
            set.sort();
            *out.entry(set).or_insert(0.0) += 1.0;
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => return out,
        }
    }
}

/// `/v1/devices` counted as online per user (users with only offline devices at 0).
async fn listed_online(api: &Api) -> BTreeMap<Vec<(String, String)>, f64> {
    let devices = api.get_ok("/v1/devices").await.unwrap();
    let mut out = BTreeMap::new();
    for d in devices["devices"].as_array().unwrap() {
        let set: Vec<(String, String)> = d["user_id"]
            .as_str()
            .map(|u| ("user".to_string(), u.to_string()))
            .into_iter()
            .collect();
        *out.entry(set).or_insert(0.0) += if d["online"] == true { 1.0 } else { 0.0 };
    }
    out
}

/// Checks the scrape's tool duration histograms against `/v1/usage?group_by=tool,user`: the count is
/// the timed calls, the sum their summed duration, the +Inf bucket the count, buckets never fall, and
/// the API's p50 and p95 lie in the bucket where the cumulative count first reaches their rank.
/// Returns the timed calls seen.
fn check_histograms(samples: &Samples, tools: &Value) -> f64 {
    let name = "apiary_tool_call_duration_seconds";
    let mut timed_total = 0.0;
    let rows = tools["rows"].as_array().unwrap();
    for row in rows {
        let mut set = vec![(
            "gen_ai_tool_name".to_string(),
            row["tool_name"].as_str().unwrap().to_string(),
        )];
        if let Some(u) = row["user_id"].as_str() {
            set.push(("user".into(), u.into()));
        }
        set.sort();
        let get = |metric: &str| samples[metric].get(&set).copied();
        let timed = row["tool_calls_timed"].as_f64().unwrap();
        timed_total += timed;
        assert_eq!(get(&format!("{name}_count")), Some(timed), "{row}");
        let seconds = row["tool_duration_ms"].as_f64().unwrap() / 1000.0;
        assert_eq!(get(&format!("{name}_sum")), Some(seconds), "{row}");
        let mut buckets: Vec<(f64, f64)> = samples[&format!("{name}_bucket")]
            .iter()
            .filter(|(l, _)| l.iter().filter(|(k, _)| k != "le").eq(set.iter()))
            .map(|(l, v)| {
                let le = &l.iter().find(|(k, _)| k == "le").unwrap().1;
                (le.parse::<f64>().unwrap(), *v)
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert_eq!(buckets.len(), 28, "27 bounds and +Inf: {buckets:?}");
        assert_eq!(buckets.last().unwrap(), &(f64::INFINITY, timed), "{row}");
        assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{buckets:?}");
        for (p, field) in [
            (0.5, "tool_duration_p50_ms"),
            (0.95, "tool_duration_p95_ms"),
        ] {
            let Some(ms) = row[field].as_f64() else {
                assert_eq!(timed, 0.0, "{row}");
                continue;
            };
            let rank = (p * timed).ceil().max(1.0);
            let at = buckets.iter().position(|(_, c)| *c >= rank).unwrap();
            let low = if at == 0 { -1.0 } else { buckets[at - 1].0 };
            let s = ms / 1000.0;
            assert!(
                low < s && s <= buckets[at].0,
                "{field} {ms} ms in bucket {at}: {buckets:?}"
            );
        }
    }
    assert_eq!(
        samples.get(&format!("{name}_count")).map_or(0, |m| m.len()),
        rows.len(),
        "one histogram per tool row"
    );
    timed_total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scrape_gauges_and_duration_histogram_equal_what_the_api_serves() {
    let cloud = Cloud::start().await.unwrap();
    post(&cloud, &timed_fixture()).await;
    let api = cloud.read_api();

    // The histogram: per tool and user (model is not a tool call's dimension, so it is left out).
    let tools = api
        .get_ok(&format!("/v1/usage?{SINCE}&group_by=tool,user"))
        .await
        .unwrap();
    let samples = scrape(&api, "?group_by=model,user").await;
    let timed = check_histograms(&samples, &tools);
    assert!(timed >= DURATIONS_MS.len() as f64, "{tools}");

    // The gauges equal the listings read around the scrape (statuses can move with time: retried
    // until the listing reads the same before and after).
    let mut agreed = false;
    for _ in 0..5 {
        let (statuses, online) = (listed_statuses(&api).await, listed_online(&api).await);
        let samples = scrape(&api, "?group_by=user").await;
        if (statuses.clone(), online.clone())
            != (listed_statuses(&api).await, listed_online(&api).await)
        {
            continue;
        }
        let sessions = &samples["apiary_sessions"];
        let nonzero: BTreeMap<_, _> = sessions
            .iter()
            .filter(|(_, v)| **v > 0.0)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        assert_eq!(nonzero, statuses);
        assert_eq!(
            sessions.len() % 10,
            0,
            "every status of every user: {sessions:?}"
        );
        assert!(statuses.values().sum::<f64>() >= 3.0, "{statuses:?}");
        assert_eq!(samples["apiary_devices_online"], online);
        assert!(!online.is_empty());
        agreed = true;
        break;
    }
    assert!(agreed, "the listings kept moving");

    // Scoped like every read: a token bound to another user scrapes no session, device or tool of
    // alice's.
    let bob = ingest_cli(
        &cloud.db.url,
        &[
            "token",
            "create",
            "--tenant",
            &cloud.tenant.id,
            "--scope",
            "read",
            "--user",
            "bob",
        ],
    )
    .unwrap();
    let bob = Api::new(&cloud.ingest.url(), tests::procs::last_line(&bob).as_str());
    let theirs = scrape(&bob, "?group_by=user").await;
    assert!(theirs.values().all(|m| m.is_empty()), "{theirs:?}");
    assert!(samples["apiary_tool_call_duration_seconds_count"]
        .keys()
        .all(|l| l.contains(&("user".to_string(), USER.to_string()))));
}

/// A session's runtime and a colony label a spreadsheet would evaluate (ids cannot begin so: an id
/// starts with a letter or digit).
const HOSTILE_RUNTIME: &str = "-hostile";
const HOSTILE_LABEL: &str = "=HYPERLINK(\"http://x\",\"y\")";

/// The value at a CSV column's JSON path (`totals.cost_nanos` → `v["totals"]["cost_nanos"]`).
fn at_path<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(v, |v, k| &v[k])
}

/// Seconds that grow with the time of the read (a session still open): the CSV, read after the JSON,
/// may say a little more.
fn grows_with_now(column: &str) -> bool {
    column.starts_with("time_in_state.") || column.starts_with("durations.")
}

/// Reads a listing's CSV back and checks every cell against the JSON item at the same position, the
/// column naming the item's JSON path; `offset` is the zone the CSV's times must be in (None: as the
/// JSON). Returns the CSV's lines as maps.
fn check_listing(text: &str, items: &[Value], offset: Option<&str>, what: &str) {
    assert!(text.ends_with("\r\n"), "{what}: CRLF line ends");
    let mut reader = csv::ReaderBuilder::new().from_reader(text.as_bytes());
    let header: Vec<String> = reader.headers().unwrap().iter().map(String::from).collect();
    let records: Vec<csv::StringRecord> = reader.records().map(|r| r.unwrap()).collect();
    assert_eq!(records.len(), items.len(), "{what}: one line per item");
    for (rec, item) in records.iter().zip(items) {
        assert_eq!(rec.len(), header.len(), "{what}");
        for (name, cell) in header.iter().zip(rec.iter()) {
            let v = at_path(item, name);
            if let Some(dollars) = name.strip_suffix("_usd") {
                let nanos = at_path(item, &format!("{dollars}_nanos")).as_i64().unwrap();
                assert_eq!(nanos_of_decimal(cell), i128::from(nanos), "{what}: {name}");
                continue;
            }
            match v {
                Value::Array(a) => assert_eq!(cell, a.len().to_string(), "{what}: {name}"),
                Value::Number(n) if n.is_f64() || grows_with_now(name) => {
                    let (c, j) = (cell.parse::<f64>().unwrap(), n.as_f64().unwrap());
                    if grows_with_now(name) {
                        assert!((0.0..60.0).contains(&(c - j)), "{what}: {name} {c} vs {j}");
                    } else {
                        assert_eq!(c, j, "{what}: {name}");
                    }
                }
                Value::String(s) => match DateTime::parse_from_rfc3339(s) {
                    Ok(t) => {
                        let c = DateTime::parse_from_rfc3339(cell)
                            .unwrap_or_else(|e| panic!("{what}: {name} {cell:?}: {e}"));
                        assert_eq!(c, t, "{what}: {name} is the same instant");
                        if let Some(o) = offset {
                            assert!(
                                cell.ends_with(o),
                                "{what}: {name} {cell} in the query's zone"
                            );
                        } else {
                            assert_eq!(cell, s, "{what}: {name}");
                        }
                    }
                    Err(_) => assert_eq!(cell, expected_cell(v, true), "{what}: {name}"),
                },
                other => assert_eq!(cell, expected_cell(other, false), "{what}: {name}"),
            }
        }
    }
}

/// The header `name` of a GET with the read token, and the body.
async fn get_with_header(api: &Api, path: &str, name: &str) -> (u16, Option<String>, String) {
    let r = client()
        .get(format!("{}{path}", api.base))
        .bearer_auth(&api.token)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let h = r
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string());
    (status, h, r.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_listing_as_csv_pages_like_the_json_and_reads_back_equal() {
    let cloud = seeded(true).await;
    let hostile: Vec<CanonicalEvent> = fixture::synthetic_canonical("hostile-runtime", 0, 2)
        .into_iter()
        .map(|ev| {
            let mut v = serde_json::to_value(&ev).unwrap();
            v["runtime"] = Value::from(HOSTILE_RUNTIME);
            serde_json::from_value(v).unwrap()
        })
        .collect();
    post(&cloud, &hostile).await;
    let api = cloud.read_api();

    // Page by page, following the JSON's cursor and the CSV's X-Next-Cursor side by side.
    let (mut json_cursor, mut pages, mut seen) = (None::<String>, 0, vec![]);
    loop {
        let q = match &json_cursor {
            None => "/v1/sessions?limit=3".to_string(),
            Some(c) => format!("/v1/sessions?limit=3&cursor={c}"),
        };
        let json = api.get_ok(&q).await.unwrap();
        let (code, csv_cursor, text) =
            get_with_header(&api, &format!("{q}&format=csv"), "x-next-cursor").await;
        assert_eq!(code, 200, "{q}: {text}");
        let items = json["sessions"].as_array().unwrap();
        check_listing(&text, items, None, &q);
        seen.extend(items.iter().map(|s| s["session_id"].clone()));
        assert_eq!(
            csv_cursor.as_deref(),
            json["next_cursor"].as_str(),
            "{q}: the CSV's cursor is the JSON's"
        );
        pages += 1;
        json_cursor = json["next_cursor"].as_str().map(String::from);
        if json_cursor.is_none() {
            break;
        }
    }
    assert!(pages > 1, "{pages} pages");
    assert!(seen.contains(&Value::from("hostile-runtime")), "{seen:?}");

    // The formula-like runtime is text in the raw file; Accept asks for CSV too; filters apply.
    let (_, ct, text) = get_text(&api, "/v1/sessions?limit=1000", Some("text/csv")).await;
    assert!(ct.starts_with("text/csv"), "{ct}");
    assert!(text.contains(",\"'-hostile\","), "{text}");
    assert!(text.starts_with("session_id,user_id,"), "{text}");
    let json = api.get_ok("/v1/sessions?status=completed").await.unwrap();
    let (_, _, text) = get_text(&api, "/v1/sessions?status=completed&format=csv", None).await;
    check_listing(
        &text,
        json["sessions"].as_array().unwrap(),
        None,
        "completed",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_colony_listing_as_csv_reads_back_equal_with_times_in_the_zone() {
    // The fixture day with its colonies keyed as an agent that knows the tenant's secret keys them.
    let cloud = Cloud::start().await.unwrap();
    let keyed: Vec<CanonicalEvent> = fixture::canonical_events()
        .into_iter()
        .enumerate()
        .map(|(i, ev)| {
            let mut v = serde_json::to_value(&ev).unwrap();
            if v["type"] == "colony.created" {
                v["data"]["colony_key"] = Value::from(format!("ck_{:032x}", i % 2));
            }
            serde_json::from_value(v).unwrap()
        })
        .collect();
    post(&cloud, &keyed).await;
    let api = cloud.read_api();
    let query = format!("{SINCE}&tz=Asia/Kolkata");
    let json = api.get_ok(&format!("/v1/colonies?{query}")).await.unwrap();
    let colonies = json["colonies"].as_array().unwrap();
    assert!(!colonies.is_empty(), "{json}");
    let key = colonies[0]["colony_key"].as_str().unwrap().to_string();
    let r = client()
        .put(format!(
            "{}/v1/colonies/{key}/label",
            cloud.admin_api().base
        ))
        .bearer_auth(&cloud.admin_api().token)
        .json(&serde_json::json!({ "label": HOSTILE_LABEL }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);

    let json = api.get_ok(&format!("/v1/colonies?{query}")).await.unwrap();
    let (code, ct, text) = get_text(&api, &format!("/v1/colonies?{query}&format=csv"), None).await;
    assert_eq!(code, 200, "{text}");
    assert!(ct.starts_with("text/csv"), "{ct}");
    let colonies = json["colonies"].as_array().unwrap();
    check_listing(&text, colonies, Some("+05:30"), "colonies");
    assert!(
        text.contains(",\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\","),
        "the label is text:\n{text}"
    );
    let total: i64 = colonies
        .iter()
        .map(|c| c["totals"]["cost_nanos"].as_i64().unwrap())
        .sum();
    assert!(total > 0, "{json}");

    let (_, _, by_accept) =
        get_text(&api, &format!("/v1/colonies?{query}"), Some("text/csv")).await;
    assert_eq!(by_accept, text, "Accept asks for the same CSV");
}
