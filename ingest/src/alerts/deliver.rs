//! The notification outbox's sender: claims due notifications (`FOR UPDATE SKIP LOCKED`, with a lease),
//! checks and resolves the destination, sends, and records the outcome only while it still holds the
//! claim (the attempt number fences a replica whose lease lapsed).
//!
//! Routes: direct, pinned to the addresses checked at send time, whatever proxy the process
//! environment names; or, when the operator sets `alerts.egress_proxy`, through that proxy only (it
//! then resolves the names, and it is the proxy that must refuse non-public addresses: see
//! `deploy/config/ingest.toml`). Errors recorded for a notification never carry its URL.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use apiary_plumbing::backoff::{parse_retry_after, BackoffPolicy};
use apiary_schema::alert::{AlertNotification, AlertState};
use chrono::Utc;
use hmac::{Hmac, Mac};
use reqwest::Url;
use secrecy::ExposeSecret;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::Sha256;
use sqlx::PgPool;

use super::destination::{self, Kind, ResolveError};
use crate::config::AlertSettings;
use crate::store::notifications::{self as store, Settled};

/// Notifications claimed per round.
const CLAIM: i64 = 16;
/// How often the outbox is polled when it had nothing due.
const POLL: Duration = Duration::from_millis(500);

pub use crate::store::notifications::Claimed;

/// What a delivery attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Delivered,
    /// Try again after at least this long (`Retry-After`), with the error.
    Retry(Option<Duration>, String),
    /// Never going to work (a 4xx other than 408/425/429, a destination refused): dead now.
    Permanent(String),
}

/// The signature header's value for `body` at `t`: `t=<unix>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`.
pub fn signature(secret: &str, t: i64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// Slack's incoming-webhook message for a notification.
pub fn slack_message(n: &AlertNotification) -> Value {
    let state = match n.event {
        AlertState::Firing => "FIRING",
        AlertState::Resolved => "RESOLVED",
    };
    let alert = &n.alert;
    json!({
        "text": format!(
            "[Apiary] {state}: {}\n(rule {}, alert {}, key {})",
            alert.summary,
            alert.rule_name.as_deref().unwrap_or(&alert.rule_id),
            alert.alert_id,
            n.idempotency_key,
        )
    })
}

/// How a delivery reaches its destination.
enum Route {
    /// Straight to these checked addresses (the request is pinned to them).
    Pinned(Vec<SocketAddr>),
    /// Through the operator's egress proxy (`alerts.egress_proxy`), which resolves and checks.
    Proxy(Box<reqwest::Proxy>),
}

/// Sends one notification: check the URL again, resolve and check the host now and pin the request
/// to the checked addresses — or hand it to the configured egress proxy — and never follow a redirect.
/// Never through a proxy of the environment (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`): such a
/// proxy resolves the name itself, which undoes the check, and reaches whatever it can reach.
pub async fn send(c: &Claimed, settings: &AlertSettings) -> Outcome {
    let Some(kind) = Kind::parse(&c.kind) else {
        return Outcome::Permanent(format!("unknown destination kind {:?}", c.kind));
    };
    let url = match destination::check_url(kind, &c.url, settings.allow_private_destinations) {
        Ok(u) => u,
        Err(e) => return Outcome::Permanent(e),
    };
    let notification = match AlertNotification::deserialize(&c.payload) {
        Ok(n) => n,
        Err(e) => return Outcome::Permanent(format!("not an alert notification: {e}")),
    };
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::CONTENT_TYPE,
        reqwest::header::HeaderValue::from_static("application/json"),
    );
    if let Ok(v) = reqwest::header::HeaderValue::from_str(&notification.idempotency_key) {
        headers.insert("idempotency-key", v);
    }
    // A webhook gets the stored payload's bytes, the same at every retry.
    let body = match kind {
        Kind::Webhook => serde_json::to_vec(&c.payload),
        Kind::Slack => serde_json::to_vec(&slack_message(&notification)),
    }
    .expect("JSON values serialise");
    if let (Kind::Webhook, Some(secret)) = (kind, &c.secret) {
        if let Ok(v) = reqwest::header::HeaderValue::from_str(&signature(
            secret,
            Utc::now().timestamp(),
            &body,
        )) {
            headers.insert("x-apiary-signature", v);
        }
    }
    post_checked(&url, settings, headers, body).await
}

/// POSTs `body` with `headers` to a URL already checked ([`destination::check_url`]) the way every
/// outbound request of the ingest goes (the notifications, the usage exports): the host resolved and
/// checked now and the request pinned to those addresses, or the configured egress proxy; no redirect
/// followed, no proxy of the environment. The outcome's errors never carry the URL.
pub async fn post_checked(
    url: &Url,
    settings: &AlertSettings,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
) -> Outcome {
    let route = match route(url, settings).await {
        Ok(r) => r,
        Err(outcome) => return outcome,
    };
    let client = match client(url.host_str().unwrap_or_default(), route, settings) {
        Ok(c) => c,
        Err(e) => {
            return Outcome::Retry(None, format!("client: {}", error_chain(&e.without_url())))
        }
    };
    match client
        .post(url.clone())
        .headers(headers)
        .body(body)
        .send()
        .await
    {
        Ok(resp) => answered(&resp),
        Err(e) if e.is_timeout() => Outcome::Retry(None, "timed out".into()),
        // Without the URL: a Slack webhook's URL is its secret, and this error is shown in
        // `GET /v1/alerts`, on the dashboard and in the logs.
        Err(e) => Outcome::Retry(
            None,
            format!("request failed: {}", error_chain(&e.without_url())),
        ),
    }
}

/// The route to `url`: the configured egress proxy, or the host's addresses resolved and checked now.
async fn route(url: &Url, settings: &AlertSettings) -> Result<Route, Outcome> {
    if let Some(proxy) = &settings.egress_proxy {
        return reqwest::Proxy::all(proxy.expose_secret())
            .map(|p| Route::Proxy(Box::new(p)))
            .map_err(|e| {
                Outcome::Retry(
                    None,
                    format!("alerts.egress_proxy: {}", error_chain(&e.without_url())),
                )
            });
    }
    match destination::resolve(url, settings.allow_private_destinations).await {
        Ok(addrs) => Ok(Route::Pinned(addrs)),
        Err(e @ ResolveError::NotPublic { .. }) => Err(Outcome::Permanent(e.to_string())),
        Err(e) => Err(Outcome::Retry(None, e.to_string())),
    }
}

/// A client for one delivery: no redirects, the delivery timeout, and only the route given — the
/// environment's proxy settings are never read.
fn client(host: &str, route: Route, settings: &AlertSettings) -> reqwest::Result<reqwest::Client> {
    let timeout = Duration::from_secs(settings.delivery_timeout_secs);
    let builder = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .connect_timeout(timeout)
        .user_agent(concat!("apiary-ingest/", env!("CARGO_PKG_VERSION")));
    match route {
        Route::Pinned(addrs) => builder.resolve_to_addrs(host, &addrs),
        Route::Proxy(proxy) => builder.proxy(*proxy),
    }
    .build()
}

/// What the destination's answer comes to.
fn answered(resp: &reqwest::Response) -> Outcome {
    let status = resp.status();
    if status.is_success() {
        return Outcome::Delivered;
    }
    let retry_after = resp
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_retry_after);
    let what = format!("the destination answered {status}");
    match status.as_u16() {
        408 | 425 | 429 | 500..=599 => Outcome::Retry(retry_after, what),
        _ => Outcome::Permanent(what),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Claims up to [`CLAIM`] due notifications for `lease`: the tenants with the longest-due ones first,
/// each tenant's in a statement of its own (a `FOR UPDATE` over every tenant is a multi-shard query
/// Citus refuses; one tenant's rows live on one worker).
pub async fn claim(pool: &PgPool, lease: Duration) -> Result<Vec<Claimed>, sqlx::Error> {
    let tenants = store::due_tenants(pool, CLAIM).await?;
    let mut out = Vec::new();
    for tenant in tenants {
        let room = CLAIM - out.len() as i64;
        if room <= 0 {
            break;
        }
        out.extend(store::claim_tenant(pool, tenant, room, lease).await?);
    }
    Ok(out)
}

/// Records an attempt's outcome, if the claim is still ours (same attempt number).
pub async fn record(
    pool: &PgPool,
    c: &Claimed,
    outcome: &Outcome,
    settings: &AlertSettings,
) -> Result<(), sqlx::Error> {
    let policy = BackoffPolicy {
        base: Duration::from_millis(settings.retry_base_ms),
        cap: Duration::from_secs(settings.retry_cap_secs),
    };
    let (state, delay, error) = match outcome {
        Outcome::Delivered => (Settled::Delivered, Duration::ZERO, None),
        Outcome::Permanent(e) => (Settled::Dead, Duration::ZERO, Some(e.as_str())),
        Outcome::Retry(_, e) if c.attempts >= settings.max_attempts as i32 => {
            (Settled::Dead, Duration::ZERO, Some(e.as_str()))
        }
        Outcome::Retry(after, e) => (
            Settled::Pending,
            policy.delay(c.attempts.max(1) as u32, *after),
            Some(e.as_str()),
        ),
    };
    store::settle(pool, c, state, error, delay).await?;
    match state {
        Settled::Delivered => {
            tracing::info!(tenant_id = %c.tenant_id, notification_id = %c.notification_id, attempts = c.attempts, "notification delivered")
        }
        Settled::Dead => {
            tracing::warn!(tenant_id = %c.tenant_id, notification_id = %c.notification_id, attempts = c.attempts, error = ?error, "notification dead")
        }
        Settled::Pending => {
            tracing::info!(tenant_id = %c.tenant_id, notification_id = %c.notification_id, attempts = c.attempts, error = ?error, retry_in_ms = delay.as_millis() as u64, "notification delivery failed; will retry")
        }
    }
    Ok(())
}

/// How long a replica holds the notifications it claimed: long enough for the slowest send (DNS +
/// connect + `delivery_timeout_secs`) and the write after it. A replica that dies mid-send lets them go
/// after it; one still sending when it lapses may be joined by a second sender.
fn lease(settings: &AlertSettings) -> Duration {
    Duration::from_secs(settings.delivery_timeout_secs * 2 + 10)
}

/// Claims, sends and records until the process stops; the sends of one round run concurrently.
pub async fn run(pool: PgPool, settings: Arc<AlertSettings>) {
    let lease = lease(&settings);
    loop {
        let claimed = match claim(&pool, lease).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "could not claim notifications");
                tokio::time::sleep(POLL * 4).await;
                continue;
            }
        };
        if claimed.is_empty() {
            tokio::time::sleep(POLL).await;
            continue;
        }
        let sends = claimed.iter().map(|c| {
            let (pool, settings) = (&pool, &settings);
            async move {
                let outcome = send(c, settings).await;
                if let Err(e) = record(pool, c, &outcome, settings).await {
                    tracing::warn!(error = %e, notification_id = %c.notification_id, "could not record a delivery; it will be sent again after its lease");
                }
            }
        });
        futures::future::join_all(sends).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    #[test]
    fn signatures_are_hmac_sha256_over_time_and_body() {
        // Reference: python3 -c 'import hmac,hashlib;print(hmac.new(b"s3cret",b"1700000000.{}",hashlib.sha256).hexdigest())'
        assert_eq!(
            signature("s3cret", 1_700_000_000, b"{}"),
            "t=1700000000,v1=97926816e98fbb41ccb1673225ff29a2f35369099990e1b1561651e7bd097ebf"
        );
    }

    /// A direct delivery connects to the addresses checked before it, not to what its host resolves to
    /// when the request is made (DNS rebinding): here the name resolves to nothing at all (`.invalid`
    /// never does), and the request still reaches the checked address.
    #[tokio::test]
    async fn a_pinned_delivery_connects_to_the_checked_addresses_not_a_fresh_lookup() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let _ = s.read(&mut buf).await;
            let answer =
                "HTTP/1.1 204 No Content\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
            s.write_all(answer.as_bytes()).await.unwrap();
        });
        let host = "hook.apiary.invalid";
        let c = client(host, Route::Pinned(vec![addr]), &AlertSettings::default()).unwrap();
        let r = c
            .post(format!("http://{host}:{}/hook", addr.port()))
            .send()
            .await
            .map_err(|e| error_chain(&e))
            .unwrap();
        assert_eq!(r.status(), 204);
    }

    #[test]
    fn slack_messages_say_what_fired() {
        let alert = apiary_schema::alert::AlertBody {
            alert_id: "al_1".into(),
            rule_id: "ar_1".into(),
            rule_name: None,
            kind: apiary_schema::alert::RuleKind::Budget,
            state: AlertState::Firing,
            subject: "bu_1".into(),
            summary: "Budget \"team\" reached 80%".into(),
            details: apiary_schema::alert::AlertDetails::Budget(
                apiary_schema::alert::BudgetDetails {
                    budget_id: "bu_1".into(),
                    budget_name: Some("team".into()),
                    threshold_percent: 80,
                    unit: "usd".into(),
                    spent: 80,
                    limit: 100,
                    period: "month".into(),
                    period_start: Utc::now(),
                    period_end: Utc::now(),
                    crossed_at: Utc::now(),
                },
            ),
            fired_at: Utc::now(),
            resolved_at: None,
        };
        let n = AlertNotification::new(Uuid::nil(), alert, AlertState::Firing);
        let m = slack_message(&n);
        let text = m["text"].as_str().unwrap();
        assert!(
            text.starts_with("[Apiary] FIRING: Budget \"team\" reached 80%"),
            "{text}"
        );
        assert!(text.contains("al_1:firing"));
    }

    /// Deliveries to a receiver on the loopback address, given up after a second.
    fn local() -> AlertSettings {
        AlertSettings {
            allow_private_destinations: true,
            delivery_timeout_secs: 1,
            ..AlertSettings::default()
        }
    }

    #[test]
    fn answers_are_delivered_retried_or_given_up_by_their_status() {
        let answer = |status: u16, retry_after: Option<&str>| {
            let mut b = axum::http::Response::builder().status(status);
            if let Some(v) = retry_after {
                b = b.header("retry-after", v);
            }
            answered(&reqwest::Response::from(b.body(Vec::<u8>::new()).unwrap()))
        };
        assert_eq!(answer(204, None), Outcome::Delivered);
        for s in [408, 425, 429, 500, 503, 599] {
            assert!(matches!(answer(s, None), Outcome::Retry(None, _)), "{s}");
        }
        assert_eq!(
            answer(429, Some("7")),
            Outcome::Retry(
                Some(Duration::from_secs(7)),
                "the destination answered 429 Too Many Requests".into()
            )
        );
        for s in [302, 400, 401, 404, 410] {
            assert!(matches!(answer(s, None), Outcome::Permanent(_)), "{s}");
        }
    }

    #[tokio::test]
    async fn a_destination_that_does_not_answer_in_time_is_retried_as_timed_out() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Takes every connection and never answers.
        tokio::spawn(async move {
            let mut held = vec![];
            while let Ok((s, _)) = listener.accept().await {
                held.push(s);
            }
        });
        let url = Url::parse(&format!("http://{addr}/hook")).unwrap();
        let outcome = post_checked(&url, &local(), Default::default(), b"{}".to_vec()).await;
        assert_eq!(outcome, Outcome::Retry(None, "timed out".into()));
    }

    /// Two timeouts and ten seconds: the tests' one-second timeout holds a claim 12 s, the default
    /// (10 s) 30 s.
    #[test]
    fn a_claim_is_held_for_two_delivery_timeouts_and_ten_seconds() {
        let held = |secs| {
            lease(&AlertSettings {
                delivery_timeout_secs: secs,
                ..AlertSettings::default()
            })
        };
        assert_eq!(held(1), Duration::from_secs(12));
        assert_eq!(held(10), Duration::from_secs(30));
        assert_eq!(held(60), Duration::from_secs(130));
    }

    /// While the database refuses the claim, the deliverer tries again after a pause of two seconds
    /// (four polls), not in a tight loop: here the "database" takes each connection and closes it at
    /// once, and the attempts are counted for two and a half seconds.
    #[tokio::test]
    async fn a_refused_claim_is_tried_again_only_after_a_pause() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tries = Arc::new(AtomicUsize::new(0));
        let counted = tries.clone();
        tokio::spawn(async move {
            while let Ok((refused, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                drop(refused);
            }
        });
        let pool = sqlx::postgres::PgPoolOptions::new()
            .acquire_timeout(Duration::from_secs(1))
            .connect_lazy(&format!("postgres://apiary@{addr}/apiary?sslmode=disable"))
            .unwrap();
        let watched = Duration::from_millis(2500);
        let ended = tokio::time::timeout(watched, run(pool, Arc::new(local()))).await;
        assert!(ended.is_err(), "the deliverer runs until the process stops");
        let n = tries.load(Ordering::SeqCst);
        assert!(
            (1..=2).contains(&n),
            "{n} claims tried in {watched:?}: one at once, one after the pause"
        );
    }

    #[tokio::test]
    async fn a_refused_connection_is_retried_with_the_causes_of_its_error() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = closed.local_addr().unwrap();
        drop(closed);
        let url = Url::parse(&format!("http://{addr}/hook")).unwrap();
        match post_checked(&url, &local(), Default::default(), b"{}".to_vec()).await {
            Outcome::Retry(None, e) => {
                assert!(e.starts_with("request failed: "), "{e}");
                // The innermost cause, the system's, is named.
                assert!(e.contains("Connection refused"), "{e}");
                assert!(!e.contains("/hook"), "the URL is never in the error: {e}");
            }
            other => panic!("{other:?}"),
        }
    }
}
