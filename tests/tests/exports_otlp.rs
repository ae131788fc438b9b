//! OTLP metrics export, black box: an export made with `POST /v1/exports` (admin token) to a real
//! OTLP/HTTP receiver written here (axum, decoding every gzipped `ExportMetricsServiceRequest` with the
//! `opentelemetry-proto` types), two `apiary-ingest serve` replicas on one database.
//!
//! Asserted: the receiver gets the export's headers, protobuf and gzip; the resource names the service
//! and the tenant; every cumulative point of every counter equals `/v1/usage` over all time with the same
//! dimensions, exactly (integers as integers, the USD cost as the API's float); after a replica is
//! restarted, the same batch sent again and new turns arrive, the points equal the new usage (no double
//! count across replicas) with the same start time as before; a failing receiver shows in the listing
//! as `failing` with its error, and the export recovers; the listing never shows the headers; a deleted
//! export sends no more.

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point, AggregationTemporality};
use prost::Message;
use serde_json::{json, Value};
use tests::fixture;
use tests::stack::{migrate, Cloud, Ingest, Tenant};

/// One request as the receiver decoded it.
#[derive(Debug, Clone)]
struct Got {
    headers: HeaderMap,
    request: ExportMetricsServiceRequest,
    at: Instant,
}

/// An OTLP/HTTP metrics receiver on loopback that answers with `status` (503 with `Retry-After: 1`
/// when not 200).
#[derive(Clone)]
struct Collector {
    url: String,
    status: Arc<AtomicU16>,
    got: Arc<Mutex<Vec<Got>>>,
}

impl Collector {
    async fn start() -> Collector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = Collector {
            url: format!("http://{}/v1/metrics", listener.local_addr().unwrap()),
            status: Arc::new(AtomicU16::new(200)),
            got: Arc::default(),
        };
        let (status, got) = (c.status.clone(), c.got.clone());
        let app = axum::Router::new().route(
            "/v1/metrics",
            axum::routing::post(move |headers: HeaderMap, body: Bytes| {
                let (status, got) = (status.clone(), got.clone());
                async move {
                    let mut raw = vec![];
                    flate2::read::GzDecoder::new(&body[..])
                        .read_to_end(&mut raw)
                        .expect("a gzip body");
                    let request = ExportMetricsServiceRequest::decode(&raw[..]).expect("OTLP");
                    got.lock().unwrap().push(Got {
                        headers,
                        request,
                        at: Instant::now(),
                    });
                    match status.load(Ordering::SeqCst) {
                        200 => (StatusCode::OK, [("retry-after", "0")], Vec::new()),
                        s => (
                            StatusCode::from_u16(s).unwrap(),
                            [("retry-after", "1")],
                            Vec::new(),
                        ),
                    }
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        c
    }

    fn received(&self) -> Vec<Got> {
        self.got.lock().unwrap().clone()
    }
}

fn env() -> Vec<(&'static str, &'static str)> {
    vec![
        // The receiver is on loopback, over http: allowed here only.
        ("APIARY_ALERTS_ALLOW_PRIVATE_DESTINATIONS", "true"),
        ("APIARY_ALERTS_RETRY_BASE_MS", "200"),
        ("APIARY_ALERTS_RETRY_CAP_SECS", "1"),
        ("APIARY_ALERTS_DELIVERY_TIMEOUT_SECS", "5"),
    ]
}

async fn wait_for<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn text(kv: &[KeyValue], key: &str) -> Option<String> {
    kv.iter()
        .find(|a| a.key == key)
        .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
            any_value::Value::StringValue(s) => Some(s.clone()),
            _ => None,
        })
}

/// A point's value, integers as integers.
#[derive(Debug, Clone, Copy, PartialEq)]
enum V {
    I(i64),
    F(f64),
}

/// Every point of a request: (metric, sorted attributes) → (value, start time).
type Points = BTreeMap<(String, Vec<(String, String)>), (V, u64)>;

fn points(r: &ExportMetricsServiceRequest) -> Points {
    let mut out = Points::new();
    for rm in &r.resource_metrics {
        for sm in &rm.scope_metrics {
            for m in &sm.metrics {
                // The histogram and the gauges: see `others`.
                let Some(metric::Data::Sum(sum)) = &m.data else {
                    continue;
                };
                assert!(sum.is_monotonic, "{}", m.name);
                assert_eq!(
                    sum.aggregation_temporality,
                    AggregationTemporality::Cumulative as i32,
                    "{}",
                    m.name
                );
                for p in &sum.data_points {
                    let mut attrs: Vec<(String, String)> = p
                        .attributes
                        .iter()
                        .map(|a| {
                            (
                                a.key.clone(),
                                text(std::slice::from_ref(a), &a.key).unwrap(),
                            )
                        })
                        .collect();
                    attrs.sort();
                    let v = match p.value {
                        Some(number_data_point::Value::AsInt(i)) => V::I(i),
                        Some(number_data_point::Value::AsDouble(f)) => V::F(f),
                        None => panic!("{}: no value", m.name),
                    };
                    let fresh = out.insert((m.name.clone(), attrs), (v, p.start_time_unix_nano));
                    assert!(fresh.is_none(), "{}: one point per attribute set", m.name);
                }
            }
        }
    }
    out
}

fn attrs(kv: &[KeyValue]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = kv
        .iter()
        .map(|a| {
            (
                a.key.clone(),
                text(std::slice::from_ref(a), &a.key).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

/// The points of the histogram and the gauges: (metric, sorted attributes) → value (a histogram's
/// count and sum in milliseconds, as "count/ms"), with the checks of their form.
fn others(r: &ExportMetricsServiceRequest) -> BTreeMap<(String, Vec<(String, String)>), String> {
    let mut out = BTreeMap::new();
    for m in r
        .resource_metrics
        .iter()
        .flat_map(|rm| &rm.scope_metrics)
        .flat_map(|sm| &sm.metrics)
    {
        match &m.data {
            Some(metric::Data::Histogram(h)) => {
                assert_eq!(m.name, "apiary.tool.call.duration");
                assert_eq!(m.unit, "s");
                assert_eq!(
                    h.aggregation_temporality,
                    AggregationTemporality::Cumulative as i32
                );
                for p in &h.data_points {
                    assert_eq!(p.explicit_bounds.len(), 27, "{p:?}");
                    assert_eq!(p.bucket_counts.len(), 28, "{p:?}");
                    assert_eq!(p.bucket_counts.iter().sum::<u64>(), p.count, "{p:?}");
                    assert!(p.start_time_unix_nano > 0);
                    let ms = (p.sum.unwrap() * 1000.0).round() as i64;
                    out.insert(
                        (m.name.clone(), attrs(&p.attributes)),
                        format!("{}/{ms}", p.count),
                    );
                }
            }
            Some(metric::Data::Gauge(g)) => {
                for p in &g.data_points {
                    let Some(number_data_point::Value::AsInt(v)) = p.value else {
                        panic!("{}: an integer gauge", m.name)
                    };
                    out.insert((m.name.clone(), attrs(&p.attributes)), v.to_string());
                }
            }
            _ => {}
        }
    }
    out
}

/// What the API serves for the pushed histogram and gauges (grouped by user, as the export is), in the
/// form of [`others`]; the gauges' zero points are left out of both.
async fn others_from_api(
    read: &tests::stack::Api,
) -> BTreeMap<(String, Vec<(String, String)>), String> {
    let mut out = BTreeMap::new();
    let user = |v: &Value| -> Vec<(String, String)> {
        v["user_id"]
            .as_str()
            .filter(|u| !u.is_empty())
            .map(|u| ("user.id".to_string(), u.to_string()))
            .into_iter()
            .collect()
    };
    let tools = read
        .get_ok("/v1/usage?from=2026-11-01&group_by=tool,user")
        .await
        .unwrap();
    for row in tools["rows"].as_array().unwrap() {
        let mut a = user(row);
        a.push((
            "gen_ai.tool.name".to_string(),
            row["tool_name"].as_str().unwrap().to_string(),
        ));
        a.sort();
        let v = format!("{}/{}", row["tool_calls_timed"], row["tool_duration_ms"]);
        out.insert(("apiary.tool.call.duration".to_string(), a), v);
    }
    let sessions = read.get_ok("/v1/sessions?limit=1000").await.unwrap();
    assert!(sessions["next_cursor"].is_null(), "one page");
    let mut counts: BTreeMap<Vec<(String, String)>, i64> = BTreeMap::new();
    for s in sessions["sessions"].as_array().unwrap() {
        let mut a = user(s);
        a.push((
            "apiary.session.status".to_string(),
            s["status"].as_str().unwrap().to_string(),
        ));
        a.sort();
        *counts.entry(a).or_default() += 1;
    }
    for (a, n) in counts {
        out.insert(("apiary.sessions".to_string(), a), n.to_string());
    }
    let devices = read.get_ok("/v1/devices").await.unwrap();
    let mut online: BTreeMap<Vec<(String, String)>, i64> = BTreeMap::new();
    for d in devices["devices"].as_array().unwrap() {
        *online.entry(user(d)).or_default() += i64::from(d["online"] == true);
    }
    for (a, n) in online.into_iter().filter(|(_, n)| *n > 0) {
        out.insert(("apiary.devices.online".to_string(), a), n.to_string());
    }
    out
}

/// [`others`] without the gauges' zero points.
fn others_nonzero(
    r: &ExportMetricsServiceRequest,
) -> BTreeMap<(String, Vec<(String, String)>), String> {
    others(r)
        .into_iter()
        .filter(|((name, _), v)| name == "apiary.tool.call.duration" || v != "0")
        .collect()
}

/// The (metric, token type, JSON field) of every integer counter.
const INT_COUNTERS: [(&str, Option<&str>, &str); 9] = [
    ("apiary.token.usage", Some("input"), "input_tokens"),
    ("apiary.token.usage", Some("output"), "output_tokens"),
    ("apiary.token.usage", Some("cached"), "cached_tokens"),
    (
        "apiary.token.usage",
        Some("cache_creation"),
        "cache_creation_tokens",
    ),
    ("apiary.cost.nanos", None, "cost_nanos"),
    ("apiary.llm.calls", None, "llm_calls"),
    ("apiary.tool.calls", None, "tool_calls"),
    ("apiary.tool.errors", None, "tool_errors"),
    ("apiary.events", None, "events"),
];

/// Whether `got` holds exactly the usage rows of `usage` (grouped by model and user), each counter.
fn mismatch(got: &Points, usage: &Value) -> Option<String> {
    let rows = usage["rows"].as_array().unwrap();
    let mut expected = Points::new();
    for row in rows {
        let mut base = vec![];
        if let Some(m) = row["model"].as_str() {
            base.push(("gen_ai.request.model".to_string(), m.to_string()));
        }
        if let Some(u) = row["user_id"].as_str() {
            base.push(("user.id".to_string(), u.to_string()));
        }
        let mut put = |name: &str, token: Option<&str>, v: V| {
            let mut attrs = base.clone();
            if let Some(t) = token {
                attrs.push(("gen_ai.token.type".into(), t.into()));
            }
            attrs.sort();
            expected.insert((name.to_string(), attrs), (v, 0));
        };
        for (name, token, field) in INT_COUNTERS {
            put(name, token, V::I(row[field].as_i64().unwrap()));
        }
        put("apiary.cost", None, V::F(row["cost_usd"].as_f64().unwrap()));
        let secs = row["tool_duration_ms"].as_i64().unwrap() as f64 / 1000.0;
        put("apiary.tool.duration", None, V::F(secs));
    }
    let got: BTreeMap<_, _> = got.iter().map(|(k, (v, _))| (k.clone(), *v)).collect();
    let want: BTreeMap<_, _> = expected.iter().map(|(k, (v, _))| (k.clone(), *v)).collect();
    (got != want).then(|| format!("exported {got:?}\nusage {want:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exported_cumulative_counters_equal_usage_across_restarts_replicas_and_late_events() {
    let collector = Collector::start().await;
    let db = tests::db::TestDb::create().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = db.url.clone();
    let tenant = tokio::task::spawn_blocking(move || -> anyhow::Result<Tenant> {
        migrate(&url)?;
        Tenant::create(&url, "acme")
    })
    .await
    .unwrap()
    .unwrap();
    let env = env();
    let ingest = Ingest::start_with(&db.url, dir.path(), &env).await.unwrap();
    let mut cloud = Cloud {
        ingest,
        tenant,
        dir,
        db,
    };
    let mut replica = Ingest::start_with(&cloud.db.url, cloud.dir.path(), &env)
        .await
        .unwrap();
    let post = async |cloud: &Cloud, events: &[apiary_schema::CanonicalEvent]| {
        let (code, v) = cloud
            .ingest_api()
            .post_batch(&fixture::batch_body(events, "dev-otlp"))
            .await
            .unwrap();
        assert_eq!(code, 200, "{v}");
    };
    post(&cloud, &fixture::canonical_events()).await;

    // Bad input names its field and stores nothing.
    let http = tests::stack::client();
    let admin = cloud.admin_api();
    let create = async |body: Value| {
        let r = http
            .post(format!("{}/v1/exports", admin.base))
            .bearer_auth(&admin.token)
            .json(&body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    };
    for (body, field) in [
        (json!({"url": "ftp://x.example.com/"}), "url"),
        (
            json!({"url": collector.url, "interval_secs": 1}),
            "interval_secs",
        ),
        (
            json!({"url": collector.url, "dimensions": ["session"]}),
            "dimensions",
        ),
        (
            json!({"url": collector.url, "headers": {"content-type": "x"}}),
            "headers",
        ),
    ] {
        let (code, v) = create(body).await;
        assert_eq!(code, 400, "{v}");
        assert!(
            v["error"]["message"].as_str().unwrap().starts_with(field),
            "{v}"
        );
    }
    let (code, v) = http
        .post(format!("{}/v1/exports", admin.base))
        .bearer_auth(&cloud.tenant.read_token)
        .json(&json!({"url": collector.url}))
        .send()
        .await
        .map(|r| (r.status().as_u16(), ()))
        .unwrap();
    assert_eq!(code, 403, "a read token may not: {v:?}");

    let (code, created) = create(json!({
        "url": collector.url,
        "headers": {"x-api-key": "k-secret-123"},
        "interval_secs": 5,
        "dimensions": ["model", "user"],
    }))
    .await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(
        created["headers"]["x-api-key"], "k-secret-123",
        "shown once"
    );
    let id = created["export_id"].as_str().unwrap().to_string();
    let start_time = created["start_time"].as_str().unwrap().to_string();

    let read = cloud.read_api();
    let usage = async || {
        read.get_ok("/v1/usage?from=2026-11-01&group_by=model,user")
            .await
            .unwrap()
    };
    let first = wait_for("a first export", async || {
        collector.received().into_iter().next()
    })
    .await;
    assert_eq!(first.headers["x-api-key"], "k-secret-123");
    assert_eq!(first.headers["content-type"], "application/x-protobuf");
    assert_eq!(first.headers["content-encoding"], "gzip");
    let resource = first.request.resource_metrics[0].resource.clone().unwrap();
    assert_eq!(
        text(&resource.attributes, "service.name").as_deref(),
        Some("apiary")
    );
    assert_eq!(
        text(&resource.attributes, "apiary.tenant.id"),
        Some(cloud.tenant.id.clone())
    );
    let start = points(&first.request).values().next().unwrap().1;
    assert!(start > 0);
    let u = usage().await;
    assert_eq!(mismatch(&points(&first.request), &u), None);
    assert!(u["rows"].as_array().unwrap().len() >= 3, "{u}");
    // The histogram and the gauges equal what the API serves (the fixture day's statuses are settled).
    let pushed = others_nonzero(&first.request);
    assert_eq!(pushed, others_from_api(&read).await);
    assert!(
        pushed.keys().any(|(n, _)| n == "apiary.sessions")
            && pushed.keys().any(|(n, _)| n == "apiary.tool.call.duration"),
        "{pushed:?}"
    );
    let sessions_points = others(&first.request)
        .keys()
        .filter(|(n, _)| n == "apiary.sessions")
        .count();
    assert_eq!(sessions_points % 10, 0, "every status of every user");

    // The listing: status, never the headers.
    let listed = admin.get_ok("/v1/exports").await.unwrap();
    assert!(!listed.to_string().contains("k-secret-123"), "{listed}");
    assert_eq!(listed["exports"][0]["export_id"], id.as_str());
    assert_eq!(listed["exports"][0]["status"], "ok", "{listed}");
    assert_eq!(listed["exports"][0]["start_time"], start_time.as_str());

    // A restart, the same batch again and three new turns: the exported sums follow usage exactly, from
    // the same start time, whichever replica sends.
    cloud.ingest.restart().await.unwrap();
    post(&cloud, &fixture::canonical_events()).await;
    post(&cloud, &fixture::synthetic_canonical("late-otlp", 0, 3)).await;
    let after = Instant::now();
    let u = usage().await;
    let calls: i64 = u["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["llm_calls"].as_i64().unwrap())
        .sum();
    let fixture_calls: i64 = 27;
    assert_eq!(calls, fixture_calls + 3, "{u}");
    let latest = wait_for("an export with the new turns", async || {
        collector
            .received()
            .into_iter()
            .rev()
            .find(|g| g.at > after)
            .filter(|g| mismatch(&points(&g.request), &u).is_none())
    })
    .await;
    assert!(
        points(&latest.request).values().all(|(_, s)| *s == start),
        "same start time"
    );

    // A failing collector shows in the listing, and the export recovers.
    collector.status.store(503, Ordering::SeqCst);
    let failing = wait_for("a failing status", async || {
        let l = admin.get_ok("/v1/exports").await.unwrap();
        (l["exports"][0]["status"] == "failing").then_some(l)
    })
    .await;
    let error = failing["exports"][0]["last_error"].as_str().unwrap();
    assert!(error.contains("503"), "{failing}");
    assert!(!error.contains("127.0.0.1"), "no URL in the error: {error}");
    collector.status.store(200, Ordering::SeqCst);
    wait_for("recovery", async || {
        let l = admin.get_ok("/v1/exports").await.unwrap();
        (l["exports"][0]["status"] == "ok").then_some(())
    })
    .await;
    let last = collector.received().pop().unwrap();
    assert_eq!(mismatch(&points(&last.request), &u), None);

    // Deleted: nothing more is sent.
    let r = http
        .delete(format!("{}/v1/exports/{id}", admin.base))
        .bearer_auth(&admin.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 204);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let sent = collector.received().len();
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert_eq!(
        collector.received().len(),
        sent,
        "no sends after the delete"
    );
    assert_eq!(
        admin.get_ok("/v1/exports").await.unwrap()["exports"],
        json!([])
    );
    replica.kill();
}

/// `apiary-ingest exports …` with `DATABASE_URL` → (exit success, stdout, stderr).
fn exports_cli(db_url: &str, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(tests::bins::path("apiary-ingest"))
        .arg("exports")
        .args(args)
        .env("DATABASE_URL", db_url)
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_line_creates_lists_and_deletes_exports_as_the_api_does() {
    let cloud = Cloud::start().await.unwrap();
    let url = cloud.db.url.clone();
    let tenant = cloud.tenant.id.clone();
    let endpoint = "https://otlp.example.com:4318/v1/metrics";

    // Created: the headers shown once, on stderr, the id alone on stdout's last line.
    let (ok, out, err) = exports_cli(
        &url,
        &[
            "create",
            "--tenant",
            &tenant,
            "--url",
            endpoint,
            "--header",
            "api-key=k-cli-secret-9",
            "--interval-secs",
            "30",
            "--dimensions",
            "user,model",
        ],
    );
    assert!(ok, "{out}{err}");
    let id = tests::procs::last_line(&out);
    assert!(id.starts_with("ex_"), "{out}");
    assert!(
        err.contains("k-cli-secret-9"),
        "the header is shown once: {err}"
    );
    assert!(!out.contains("k-cli-secret-9"), "{out}");

    // Listed by the command line and by the API alike: host and status, never the header.
    let (ok, out, err) = exports_cli(&url, &["list", "--tenant", &tenant]);
    assert!(ok, "{err}");
    assert!(!out.contains("k-cli-secret-9"), "{out}");
    let listed: Value = serde_json::from_str(&out).unwrap();
    let api = cloud.admin_api().get_ok("/v1/exports").await.unwrap();
    assert_eq!(listed, api);
    let e = &api["exports"][0];
    assert_eq!(e["export_id"], id.as_str());
    assert_eq!(e["host"], "otlp.example.com:4318");
    assert_eq!(e["interval_secs"], 30);
    assert_eq!(e["dimensions"], json!(["user", "model"]));
    // The server may have tried it already (the example's host does not resolve here).
    assert!(
        ["pending", "failing"].contains(&e["status"].as_str().unwrap()),
        "{e}"
    );

    // Refused like the API refuses, naming the field; a header without a value is refused first.
    let (ok, _, err) = exports_cli(
        &url,
        &[
            "create",
            "--tenant",
            &tenant,
            "--url",
            "http://10.0.0.1/v1/metrics",
        ],
    );
    assert!(!ok && err.contains("url:"), "{err}");
    let (ok, _, err) = exports_cli(
        &url,
        &[
            "create", "--tenant", &tenant, "--url", endpoint, "--header", "api-key",
        ],
    );
    assert!(!ok && err.contains("NAME=VALUE"), "{err}");
    let (ok, _, err) = exports_cli(
        &url,
        &[
            "create",
            "--tenant",
            &tenant,
            "--url",
            endpoint,
            "--dimensions",
            "session",
        ],
    );
    assert!(!ok && err.contains("dimensions"), "{err}");

    // Deleted: gone from the API's listing; a second delete fails.
    let (ok, out, err) = exports_cli(&url, &["delete", "--tenant", &tenant, &id]);
    assert!(ok, "{err}");
    assert_eq!(tests::procs::last_line(&out), format!("deleted {id}"));
    assert_eq!(
        cloud.admin_api().get_ok("/v1/exports").await.unwrap()["exports"],
        json!([])
    );
    let (ok, _, err) = exports_cli(&url, &["delete", "--tenant", &tenant, &id]);
    assert!(!ok && err.contains("not found"), "{err}");
}
