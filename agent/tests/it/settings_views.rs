//! The settings page's views of local data, in process on port 0: usage today and this month (the sums
//! of the events written, in the configured zone), "what was sent" (only acked events, redacted, as
//! they left: the running agent pushes to a fake ingest), and the air-gapped "export bundle" button
//! (a bundle the shared reader verifies, as `apiary-ingest import` does; refusals; the `Origin` check).

use crate::settings_page::Page;
use crate::support;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use apiary_agent::config::Mode;
use apiary_agent::outbox::{read_bundle, ClaimLimits, Delivery, SENT_KEPT};
use apiary_schema::{Batch, BatchResponse};
use chrono::{DateTime, Datelike, Utc};
use reqwest::StatusCode;
use serde_json::json;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

/// A secret planted in the prompt of every event: the prompt never leaves the device.
const SECRET: &str = "sk-ant-api03-PLANTEDSECRETPLANTEDSECRET";

/// A Hive `llm_turn_complete` line at `at` (naive, read as UTC: the tests' `zone`) with `input` input
/// tokens, 100 output tokens, a cost of 0.01 USD, and a prompt holding [`SECRET`].
fn turn_at(session: &str, seq: u64, at: DateTime<Utc>, input: u64) -> String {
    let data = json!({"stop_reason": "end_turn", "model": "claude-sonnet-4-5-20250929",
        "input_tokens": input, "output_tokens": 100, "cached_tokens": 0, "cache_creation_tokens": 0,
        "cost_usd": 0.01, "prompt": format!("deploy with {SECRET}"), "iteration": 1});
    tests::events::hive("llm_turn_complete", session, at, seq, data).to_string()
}

/// The text of `dd[data-field=FIELD]` (or any element with that hook).
fn field<'a>(html: &'a str, field: &str) -> &'a str {
    let hook = format!(r#"data-field="{field}">"#);
    let start = html
        .find(&hook)
        .unwrap_or_else(|| panic!("no {field}: {html}"))
        + hook.len();
    &html[start..start + html[start..].find('<').unwrap()]
}

#[tokio::test]
async fn usage_today_and_this_month_are_the_sums_of_the_events_written_then() {
    let p = Page::spawn(Mode::Online).await;
    let now = Utc::now();
    let yesterday = now - chrono::Duration::days(1);
    let last_month = now - chrono::Duration::days(40);
    for (seq, at, input) in [
        (1, now, 1_000),
        (2, now, 2_500),
        (3, yesterday, 40_000),
        (4, last_month, 700_000),
    ] {
        let (s, v) = p
            .app
            .post("/v1/events", turn_at("session_u", seq, at, input))
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
    }
    let html = p.html(&p.cookie().await).await;
    // Today: 1,000 + 2,500 input and 2 × 100 output tokens, 2 × 0.01 USD.
    assert_eq!(field(&html, "usage_today_tokens"), "3,700 tokens");
    assert_eq!(field(&html, "usage_today_cost"), "$0.02");
    // This month adds yesterday's event unless today is the 1st; never the one 40 days ago.
    let (tokens, cost) = if yesterday.month() == now.month() {
        ("43,800 tokens", "$0.03")
    } else {
        ("3,700 tokens", "$0.02")
    };
    assert_eq!(field(&html, "usage_month_tokens"), tokens);
    assert_eq!(field(&html, "usage_month_cost"), cost);
    assert_eq!(field(&html, "usage_zone"), "UTC");
    // The all-time session usage still counts all four.
    let (_, u) = p.app.get("/v1/usage/sessions/session_u").await;
    assert_eq!(u["totals"]["input_tokens"], 743_500, "{u}");
    p.app.stop().await;
}

/// A fake ingest that accepts every batch.
async fn accepting_ingest() -> MockServer {
    let ingest = MockServer::start().await;
    support::answer_whoami(&ingest).await;
    Mock::given(method("POST"))
        .and(path("/v1/batches"))
        .respond_with(|req: &Request| {
            let mut text = String::new();
            flate2::read::GzDecoder::new(&req.body[..])
                .read_to_string(&mut text)
                .unwrap();
            let batch: Batch = serde_json::from_str(&text).unwrap();
            ResponseTemplate::new(200).set_body_json(BatchResponse {
                accepted: batch.events.len() as u64,
                duplicates: 0,
                rejected: vec![],
                quota: None,
                push_interval_ms: None,
            })
        })
        .mount(&ingest)
        .await;
    ingest
}

#[tokio::test]
async fn the_sent_view_shows_only_sent_events_redacted_as_they_left() {
    let ingest = accepting_ingest().await;
    let p = Page::spawn(Mode::Online).await;
    let cookie = p.cookie().await;
    let now = Utc::now();
    // Recorded while sharing is off and not released: it stays here.
    p.app
        .post("/v1/events", turn_at("session_kept_here", 1, now, 10))
        .await;
    assert!(p
        .html(&cookie)
        .await
        .contains("Nothing has been sent from this device yet."));
    let uri = ingest.uri();
    let on = [
        ("enabled", "true"),
        ("endpoint", uri.as_str()),
        ("token_file", p.app.token_file.as_str()),
    ];
    let r = p
        .post("/settings/sync", &on, Some(&cookie), Some(&p.origin))
        .await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    for seq in [1, 2] {
        p.app
            .post("/v1/events", turn_at("session_sent", seq, now, 20 + seq))
            .await;
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, st) = p.app.get("/v1/status").await;
        if st["counters"]["delivered"].as_u64() >= Some(2) {
            break;
        }
        assert!(Instant::now() < deadline, "not delivered: {st}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let html = p.html(&cookie).await;
    let sent = &html[html.find(r#"id="sent""#).unwrap()..];
    let sent = &sent[..sent.find("</section>").unwrap()];
    assert_eq!(sent.matches("data-sent=").count(), 2, "{sent}");
    assert!(sent.contains("session_sent"), "{sent}");
    assert!(
        !html.contains("session_kept_here"),
        "an unsent event shows: {sent}"
    );
    assert!(
        !html.contains("PLANTEDSECRET") && !html.contains("deploy with"),
        "{sent}"
    );
    assert!(!sent.contains("prompt"), "{sent}");
    // Each body is the policy-shaped canonical event, byte for byte as the ingest received it.
    let bodies: Vec<String> = sent
        .split(r#"<pre data-field="sent_body">"#)
        .skip(1)
        .map(|b| unescape(&b[..b.find("</pre>").unwrap()]))
        .collect();
    let mut received = Vec::new();
    for r in ingest.received_requests().await.unwrap() {
        if r.method.as_str() != "POST" {
            continue; // the whoami asked when sharing was turned on
        }
        let mut text = String::new();
        flate2::read::GzDecoder::new(&r.body[..])
            .read_to_string(&mut text)
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        for e in v["events"].as_array().unwrap() {
            received.push(e.clone());
        }
    }
    assert_eq!(bodies.len(), 2);
    for body in &bodies {
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["type"], "llm.turn", "{v}");
        assert_eq!(v["session_id"], "session_sent", "{v}");
        assert!(v["data"]["input_tokens"].is_u64(), "{v}");
        assert!(v["data"].get("prompt").is_none(), "{v}");
        assert!(received.contains(&v), "not what the ingest got: {v}");
    }
    p.app.stop().await;
}

/// Undoes maud's escaping of a `<pre>` text.
fn unescape(s: &str) -> String {
    s.replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

#[tokio::test]
async fn the_sent_ring_keeps_the_last_acked_events_and_never_a_rejected_one() {
    let dir = tempfile::tempdir().unwrap();
    let outbox = support::open_syncing(dir.path(), 70).await;
    let limits = ClaimLimits {
        max_events: 1000,
        max_bytes: 1 << 20,
    };
    let claimed = outbox.claim(limits).await.unwrap();
    let ids = claimed.ids();
    assert_eq!(ids.len(), 70);
    outbox
        .reject(vec![(ids[69], "refused".into())])
        .await
        .unwrap();
    let mut acks: Vec<(uuid::Uuid, Delivery)> = ids[..69]
        .iter()
        .map(|i| (*i, Delivery::Delivered))
        .collect();
    acks[68].1 = Delivery::Duplicate;
    outbox.ack(acks).await.unwrap();
    let sent = outbox.sent_events(1000).await.unwrap();
    assert_eq!(sent.len(), SENT_KEPT);
    assert_eq!(sent[0].event_id, ids[68], "newest first");
    assert!(sent[0].duplicate && !sent[1].duplicate);
    assert_eq!(sent[SENT_KEPT - 1].event_id, ids[69 - SENT_KEPT]);
    assert!(
        sent.iter().all(|e| e.event_id != ids[69]),
        "the rejected one"
    );
    let claimed_body = &claimed.events[68].body;
    assert_eq!(&sent[0].body, claimed_body, "the body as claimed and sent");
    // Acking again (already settled) keeps nothing more.
    outbox
        .ack(vec![(ids[0], Delivery::Delivered)])
        .await
        .unwrap();
    assert_eq!(outbox.sent_events(1000).await.unwrap()[0].event_id, ids[68]);
    outbox.close().await;
}

/// The files in the page's export directory.
fn exported_files(outbox_db: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(outbox_db.parent().unwrap().join("exports")) {
        Ok(d) => d.map(|e| e.unwrap().path()).collect(),
        Err(_) => vec![],
    }
}

#[tokio::test]
async fn the_export_button_writes_a_bundle_the_importer_accepts_and_refuses_cleanly() {
    let p = Page::spawn(Mode::Airgapped).await;
    let cookie = p.cookie().await;
    let html = p.html(&cookie).await;
    assert!(
        html.contains(r#"id="export-button" type="submit" disabled"#),
        "{html}"
    );
    let now = Utc::now();
    for seq in 1..=3 {
        p.app
            .post("/v1/events", turn_at("session_x", seq, now, 5))
            .await;
    }
    let db = p.app.outbox.path().to_path_buf();
    // Without the page's CSRF proof (its own Origin), or from another site: 403, nothing written.
    for origin in [None, Some("http://evil.example")] {
        let r = p.post("/settings/export", &[], Some(&cookie), origin).await;
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "Origin {origin:?}");
        assert!(exported_files(&db).is_empty());
    }
    // Not signed in: to the sign-in form, nothing written.
    let r = p.post("/settings/export", &[], None, Some(&p.origin)).await;
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert!(exported_files(&db).is_empty());

    let r = p
        .post("/settings/export", &[], Some(&cookie), Some(&p.origin))
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let html = r.text().await.unwrap();
    assert_eq!(field(&html, "export_events"), "3 events");
    let file = PathBuf::from(field(&html, "export_path"));
    assert_eq!(exported_files(&db), vec![file.clone()]);
    let (manifest, lines) = read_bundle(&file).unwrap();
    assert_eq!(manifest.counts.events, 3);
    assert_eq!(lines.len(), 3);
    assert!(lines.iter().all(|l| !l.contains("PLANTEDSECRET")));
    let (_, st) = p.app.get("/v1/status").await;
    assert_eq!(st["counters"]["exported"], 3, "{st}");
    assert_eq!(st["pending_events"], 0);

    // Nothing left: refused, no second file.
    let r = p
        .post("/settings/export", &[], Some(&cookie), Some(&p.origin))
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert!(r.text().await.unwrap().contains("nothing to export"));
    assert_eq!(exported_files(&db).len(), 1);
    p.app.stop().await;
}

#[tokio::test]
async fn online_the_export_button_is_not_offered_and_its_post_is_refused() {
    let p = Page::spawn(Mode::Online).await;
    let cookie = p.cookie().await;
    p.app
        .post("/v1/events", turn_at("session_o", 1, Utc::now(), 5))
        .await;
    assert!(!p.html(&cookie).await.contains("export-button"));
    let r = p
        .post("/settings/export", &[], Some(&cookie), Some(&p.origin))
        .await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert!(r.text().await.unwrap().contains("air-gapped"));
    assert!(exported_files(p.app.outbox.path()).is_empty());
    let (_, st) = p.app.get("/v1/status").await;
    assert_eq!(st["pending_events"], 1);
    p.app.stop().await;
}
