//! Hostile use of the ingest's resources, against the real binary: compression bombs of tiny values
//! (memory), usage sums past the bigint range (wrapping, permanent 500s), NUL bytes in query and path
//! values, connections that never finish their headers (slowloris), and floods of bad tokens.
//!
//! Memory is read from `/proc/PID/status` (`VmHWM`, the peak resident set), so the bomb test measures only
//! on Linux.

use std::time::{Duration, Instant};

use apiary_schema::CanonicalEvent;
use serde_json::Value;
use tests::fixture;
use tests::hostile::{gzip_bomb, raw_http, reset_peak, status_kib};
use tests::stack::{client, Api, Cloud, Ingest};

const DEVICE: &str = "dev-hostile";
const MIB: u64 = 1024 * 1024;

/// A batch envelope around `events` (a JSON array text), as bytes.
fn envelope_head() -> String {
    format!(
        r#"{{"schema_version":1,"batch_id":"{}","sent_at":"{}","agent":{{"device_id":"{DEVICE}","agent_version":"0.1.0"}},"sessions":[],"events":["#,
        uuid::Uuid::new_v4(),
        chrono::Utc::now().to_rfc3339()
    )
}

async fn post_gzip(api: &Api, body: Vec<u8>) -> (u16, String) {
    let r = client()
        .post(format!("{}/v1/batches", api.base))
        .bearer_auth(&api.token)
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .timeout(Duration::from_secs(300))
        .body(body)
        .send()
        .await
        .expect("send");
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

/// The peak resident growth (MiB) of `ingest` while `n` copies of `body` are posted at once.
async fn peak_growth_mib(ingest: &Ingest, api: &Api, body: &[u8], n: usize) -> (u64, Vec<u16>) {
    let pid = ingest.pid().expect("running");
    assert!(reset_peak(pid), "cannot reset VmHWM of {pid}");
    let before = status_kib(pid, "VmHWM").expect("VmHWM");
    let sends = (0..n).map(|_| {
        let (api, body) = (api.clone(), body.to_vec());
        tokio::spawn(async move { post_gzip(&api, body).await })
    });
    let mut statuses = vec![];
    for s in sends.collect::<Vec<_>>() {
        let (status, text) = s.await.unwrap();
        assert!(text.len() < 4096, "answer: {text}");
        statuses.push(status);
    }
    let after = status_kib(pid, "VmHWM").expect("VmHWM");
    (after.saturating_sub(before) / 1024, statuses)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gzip_bomb_of_tiny_values_is_refused_within_a_few_times_the_size_limit() {
    if status_kib(std::process::id(), "VmHWM").is_none() {
        eprintln!("no /proc/PID/status here: memory is not measured");
        return;
    }
    let limit = 16 * MIB;
    let cloud = Cloud::start().await.unwrap();
    let ingest = Ingest::start_with(
        &cloud.db.url,
        cloud.dir.path(),
        &[("APIARY_MAX_DECOMPRESSED_BYTES", &limit.to_string())],
    )
    .await
    .unwrap();
    let api = Api::new(&ingest.url(), &cloud.tenant.ingest_token);
    // 16 MiB of `0,` inside `events`: 8 million values, from a body of about 16 KiB.
    let bomb = gzip_bomb(&envelope_head(), "0,", "0]}", limit as usize - 64);
    assert!(bomb.len() < 64 * 1024, "bomb is {} bytes", bomb.len());

    let (single, statuses) = peak_growth_mib(&ingest, &api, &bomb, 1).await;
    eprintln!(
        "one bomb ({} bytes gzip → {} MiB): peak RSS +{single} MiB, {statuses:?}",
        bomb.len(),
        limit / MIB
    );
    assert_eq!(statuses, vec![413]);
    assert!(
        single <= 3 * limit / MIB,
        "one bomb raised the peak by {single} MiB (limit {} MiB)",
        limit / MIB
    );

    let (four, statuses) = peak_growth_mib(&ingest, &api, &bomb, 4).await;
    eprintln!("four bombs at once: peak RSS +{four} MiB, {statuses:?}");
    assert_eq!(statuses, vec![413; 4]);
    assert!(
        four <= 4 * 3 * limit / MIB,
        "four bombs raised the peak by {four} MiB"
    );

    // Still serving, and a normal batch still passes.
    let events = fixture::synthetic_canonical("session_after_bomb", 1, 20);
    let (status, v) = api
        .post_batch(&fixture::batch_body(&events, DEVICE))
        .await
        .unwrap();
    assert_eq!((status, v["accepted"].as_u64()), (200, Some(20)), "{v}");
}

/// `n` llm turns of the per-event maximum cost (10^6 USD) in `session`, all at `at` + k ms.
fn costly_turns(session: &str, n: u64, at: chrono::DateTime<chrono::Utc>) -> Vec<CanonicalEvent> {
    let mut events = fixture::synthetic_canonical(session, 1, n);
    for (k, e) in events.iter_mut().enumerate() {
        e.data.insert("cost_usd".into(), Value::from(1_000_000.0));
        e.occurred_at = at + chrono::Duration::milliseconds(k as i64);
    }
    events
}

fn rejected_reasons(v: &Value) -> Vec<String> {
    v["rejected"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| r["reason"].as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_sums_past_the_bigint_range_are_refused_per_event_and_reads_stay_exact() {
    let cloud = Cloud::start().await.unwrap();
    let api = cloud.ingest_api();
    let now = chrono::Utc::now();
    // Two quarter-hours of the previous hour: every event of a session lands in one rollup row.
    let hour = now - chrono::Duration::hours(1);
    let hour = hour
        - chrono::Duration::seconds(i64::from(
            chrono::Timelike::num_seconds_from_midnight(&hour) % 3600,
        ));
    let max_nanos: i128 = 1_000_000_000_000_000;

    // 9300 × 10^15 nano-dollars do not fit a bigint (9.22e18): 9223 fit, the rest are refused.
    let body = fixture::batch_body(&costly_turns("session_big_a", 9300, hour), DEVICE);
    let (status, v) = api.post_batch(&body).await.unwrap();
    assert_eq!(status, 200, "the overflowing batch: {v}");
    assert_eq!(v["accepted"].as_u64(), Some(9223), "{}", v["accepted"]);
    let reasons = rejected_reasons(&v);
    assert_eq!(reasons.len(), 77);
    assert!(reasons[0].contains("supported range"), "{}", reasons[0]);

    // The stored row is full: more for it is refused (found by the database, not the batch alone).
    let body = fixture::batch_body(
        &costly_turns("session_big_a", 10, hour + chrono::Duration::seconds(30)),
        DEVICE,
    );
    let (status, v) = api.post_batch(&body).await.unwrap();
    assert_eq!(status, 200, "a batch for the full row: {v}");
    assert_eq!(
        (v["accepted"].as_u64(), rejected_reasons(&v).len()),
        (Some(0), 10),
        "{v}"
    );

    // Another session of the same user, device and model in that hour: its own 15-minute and hourly
    // rows are empty, but the hourly row of that user, device and model (`usage_rollups_narrow`) holds
    // session_big_a's sum.
    let body = fixture::batch_body(
        &costly_turns("session_big_c", 5, hour + chrono::Duration::minutes(40)),
        DEVICE,
    );
    let (status, v) = api.post_batch(&body).await.unwrap();
    assert_eq!(
        (status, v["accepted"].as_u64(), rejected_reasons(&v).len()),
        (200, Some(0), 5),
        "{v}"
    );

    // Another model in the same hour: every row of it is fine on its own, but the tenant's sum now
    // exceeds a bigint.
    let mut other_model = costly_turns("session_big_b", 9000, hour + chrono::Duration::minutes(20));
    for e in &mut other_model {
        e.data
            .insert("model".into(), Value::from("synthetic-other-model"));
    }
    let body = fixture::batch_body(&other_model, DEVICE);
    let (status, v) = api.post_batch(&body).await.unwrap();
    assert_eq!((status, v["accepted"].as_u64()), (200, Some(9000)), "{v}");

    let read = cloud.read_api();
    let from =
        (hour - chrono::Duration::hours(1)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let to = (hour + chrono::Duration::hours(2)).to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let path = format!("/v1/usage?granularity=total&from={from}&to={to}&tz=UTC");
    let (status, usage) = read.get(&path).await.unwrap();
    assert_eq!(status, 200, "{usage}");
    let expected = (9223 + 9000) * max_nanos;
    assert_eq!(
        usage["totals"]["cost_nanos"].as_u64().map(i128::from),
        Some(expected),
        "{usage}"
    );
    let (status, usage) = read.get(&format!("{path}&group_by=session")).await.unwrap();
    assert_eq!(status, 200, "{usage}");
    let (status, s) = read.get("/v1/sessions/session_big_a").await.unwrap();
    assert_eq!(status, 200, "{s}");
    assert_eq!(
        s["totals"]["cost_nanos"].as_u64().map(i128::from),
        Some(9223 * max_nanos)
    );
    assert!(s["totals"]["cost_usd"].as_f64().unwrap() > 0.0, "{s}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_byte_in_a_query_or_path_value_is_a_400_with_a_json_body() {
    let cloud = Cloud::start().await.unwrap();
    let read = cloud.read_api();
    for path in [
        "/v1/sessions/abc%00def",
        "/v1/sessions/abc%00def/usage",
        "/v1/sessions/abc%00def/tree",
        "/v1/colonies/abc%00def/usage",
        "/v1/sessions?user=al%00ice",
        "/v1/sessions?device=d%00",
        "/v1/usage?tz=UTC%00",
    ] {
        let (status, v) = read.get(path).await.unwrap();
        assert_eq!(status, 400, "{path}: {v}");
        assert!(v["error"]["code"].is_string(), "{path}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_byte_in_the_batch_envelope_is_a_422_not_a_500() {
    let cloud = Cloud::start().await.unwrap();
    let events = fixture::synthetic_canonical("session_nul", 1, 2);
    let mut batch: Value = serde_json::from_slice(&fixture::batch_body(&events, DEVICE)).unwrap();
    batch["agent"]["agent_version"] = Value::from("0.1.0\u{0}");
    let (status, v) = cloud
        .ingest_api()
        .post_batch(&serde_json::to_vec(&batch).unwrap())
        .await
        .unwrap();
    assert_eq!(status, 422, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("agent_version"),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_that_do_not_finish_their_headers_are_closed() {
    let cloud = Cloud::start().await.unwrap();
    let ingest = Ingest::start_with(
        &cloud.db.url,
        cloud.dir.path(),
        &[("APIARY_HEADER_READ_TIMEOUT_SECS", "2")],
    )
    .await
    .unwrap();
    let started = Instant::now();
    let (half, silent) = tokio::join!(
        raw_http(
            ingest.addr(),
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: 1\r\n",
            Duration::from_secs(15)
        ),
        raw_http(ingest.addr(), b"", Duration::from_secs(15)),
    );
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "connections still open after {took:?} (read {half:?}, {silent:?})"
    );
    // A complete request on a fresh connection is still served.
    let answer = raw_http(
        ingest.addr(),
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        Duration::from_secs(10),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_bad_tokens_is_throttled_per_address_before_the_database() {
    let cloud = Cloud::start().await.unwrap();
    let http = client();
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    let mut retry_after = None;
    for i in 0..300 {
        let r = http
            .get(format!("{}/v1/devices", cloud.ingest.url()))
            .bearer_auth(format!("apy_{:064x}", i))
            .send()
            .await
            .unwrap();
        if r.status().as_u16() == 429 {
            retry_after = r.headers().get("retry-after").cloned();
        }
        *statuses.entry(r.status().as_u16()).or_default() += 1;
    }
    eprintln!("300 bad tokens from one address: {statuses:?}");
    let unauthorized = statuses.get(&401).copied().unwrap_or(0);
    assert!(
        unauthorized <= 40,
        "{unauthorized} bad tokens were looked up: {statuses:?}"
    );
    assert_eq!(
        unauthorized + statuses.get(&429).copied().unwrap_or(0),
        300,
        "{statuses:?}"
    );
    assert!(retry_after.is_some(), "429 without Retry-After");
    // The same bad token again is answered from the negative cache or the throttle, never a 500.
    let (status, _) = Api::new(&cloud.ingest.url(), &format!("apy_{:064x}", 1))
        .get("/v1/devices")
        .await
        .unwrap();
    assert!(matches!(status, 401 | 429), "{status}");
}
