//! `GET /metrics` scraped and parsed as OpenMetrics text: every sample belongs to a family declared
//! with HELP and TYPE, values are numbers, the exposition ends with `# EOF`, and the families and values
//! are the ones the outbox and the intake hold.

use std::collections::BTreeMap;

use reqwest::StatusCode;

use crate::http_api::App;
use crate::support;

/// One metric family as scraped: its type and samples (sample name with labels → value).
#[derive(Debug, Default)]
struct Family {
    kind: String,
    help: bool,
    samples: BTreeMap<String, f64>,
}

/// Parses OpenMetrics text strictly enough to catch a malformed exposition.
fn parse(text: &str) -> BTreeMap<String, Family> {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.last(), Some(&"# EOF"), "ends with # EOF:\n{text}");
    for line in &lines[..lines.len() - 1] {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').expect("HELP name text");
            assert!(!help.is_empty(), "{line}");
            families.entry(name.into()).or_default().help = true;
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
            assert!(["gauge", "counter"].contains(&kind), "{line}");
            families.entry(name.into()).or_default().kind = kind.into();
        } else {
            assert!(!line.starts_with('#'), "unknown comment: {line}");
            let (sample, value) = line.rsplit_once(' ').expect("sample value");
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("number: {line}"));
            let name = sample.split('{').next().unwrap();
            let family = families
                .iter_mut()
                .find(|(f, fam)| {
                    name == f.as_str()
                        || (fam.kind == "counter" && name.strip_suffix("_total") == Some(f))
                })
                .unwrap_or_else(|| panic!("sample of an undeclared family: {line}"))
                .1;
            assert!(
                family.samples.insert(sample.into(), value).is_none(),
                "twice: {line}"
            );
        }
    }
    for (name, f) in &families {
        assert!(f.help && !f.kind.is_empty(), "{name} lacks HELP or TYPE");
    }
    families
}

#[tokio::test]
async fn metrics_parse_as_openmetrics_with_the_outbox_and_intake_values() {
    let app = App::spawn(|_| {}).await;
    // One durable event and one chatty (filtered) one, as NDJSON.
    let chatty =
        support::hive_turn("session_p", 2).replace("llm_turn_complete", "context_usage_updated");
    let body = format!("{}\n{chatty}\n", support::hive_turn("session_p", 1));
    let (s, b) = app.post("/v1/events", body).await;
    assert_eq!(s, StatusCode::OK, "{b}");
    let r = app
        .client
        .get(format!("{}/metrics", app.base))
        .bearer_auth(&app.token)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let content_type = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let m = parse(&r.text().await.unwrap());
    let value = |family: &str, sample: &str| m[family].samples[sample];
    let kinds: BTreeMap<&str, &str> = m
        .iter()
        .map(|(n, f)| (n.as_str(), f.kind.as_str()))
        .collect();
    for gauge in [
        "apiary_outbox_pending_events",
        "apiary_outbox_oldest_pending_age_seconds",
        "apiary_outbox_used_bytes",
        "apiary_outbox_max_bytes",
        "apiary_outbox_balanced",
        "apiary_outbox_healthy",
        "apiary_outbox_disk_full",
        "apiary_sync_enabled",
        "apiary_agent_uptime_seconds",
        "apiary_intake_body_bytes_in_flight",
    ] {
        assert_eq!(kinds.get(gauge), Some(&"gauge"), "{gauge}");
    }
    for counter in [
        "apiary_outbox_events",
        "apiary_outbox_filtered",
        "apiary_outbox_refused",
        "apiary_intake_requests",
    ] {
        assert_eq!(kinds.get(counter), Some(&"counter"), "{counter}");
    }
    assert_eq!(
        value(
            "apiary_outbox_pending_events",
            "apiary_outbox_pending_events"
        ),
        1.0
    );
    let events = |o: &str| {
        value(
            "apiary_outbox_events",
            &format!("apiary_outbox_events_total{{outcome=\"{o}\"}}"),
        )
    };
    assert_eq!(events("received"), 2.0);
    assert_eq!(events("filtered"), 1.0);
    let filtered: Vec<f64> = m["apiary_outbox_filtered"]
        .samples
        .values()
        .copied()
        .collect();
    assert_eq!(filtered, [1.0], "one reason, one event");
    assert_eq!(events("delivered"), 0.0);
    assert_eq!(
        value("apiary_outbox_balanced", "apiary_outbox_balanced"),
        1.0
    );
    assert_eq!(value("apiary_outbox_healthy", "apiary_outbox_healthy"), 1.0);
    assert_eq!(
        value("apiary_outbox_disk_full", "apiary_outbox_disk_full"),
        0.0
    );
    assert_eq!(value("apiary_sync_enabled", "apiary_sync_enabled"), 0.0);
    let requests = &m["apiary_intake_requests"].samples;
    assert_eq!(requests.len(), 7, "one sample per result (busy included)");
    assert_eq!(requests.values().sum::<f64>(), 1.0, "{requests:?}");
    assert_eq!(
        value("apiary_outbox_refused", "apiary_outbox_refused_total"),
        0.0
    );
    assert_eq!(
        value(
            "apiary_intake_body_bytes_in_flight",
            "apiary_intake_body_bytes_in_flight"
        ),
        0.0,
        "no request is being read"
    );
    app.stop().await;
}
