//! The settings page's forms change nothing for a request that is not signed in, even one that comes
//! from the page's own origin (a local process, another page on the same port): `POST /settings/sync`
//! and `POST /settings/export` with no cookie, with a forged session cookie of the right shape, and with
//! the cookie of a session that signed out are refused — sharing stays off, no bundle is written, no
//! event is marked exported. The same requests with a signed-in cookie do what they ask, so the forms
//! sent here are ones that would work.

use std::time::Duration;

use tests::agent::Agent;
use tests::fixture::synthetic_turns;
use tests::stack::Cloud;

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

fn settings_token(agent: &Agent) -> String {
    std::fs::read_to_string(agent.data_dir.join("settings.token"))
        .unwrap()
        .trim()
        .to_string()
}

/// Signs in to `agent`'s settings page: the session cookie (`name=value`).
async fn sign_in(agent: &Agent) -> String {
    let base = format!("http://{}", agent.addr);
    let r = http()
        .post(format!("{base}/settings/sign-in"))
        .header("Origin", &base)
        .form(&[("token", settings_token(agent))])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 303);
    let cookie = r.headers()["set-cookie"].to_str().unwrap();
    cookie.split(';').next().unwrap().to_string()
}

/// The cookies a request that is not signed in may carry: none, a forged session id of the right
/// shape under the right name, and a session that signed out.
async fn not_signed_in(agent: &Agent) -> Vec<(&'static str, Option<String>)> {
    let base = format!("http://{}", agent.addr);
    let name = format!("apiary_settings_{}", agent.addr.port());
    let forged = format!("{name}={}", "ab".repeat(32));
    let old = sign_in(agent).await;
    let r = http()
        .post(format!("{base}/settings/sign-out"))
        .header("Origin", &base)
        .header("Cookie", &old)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_redirection(), "sign-out: {}", r.status());
    vec![
        ("no cookie", None),
        ("a forged cookie", Some(forged)),
        ("a signed-out cookie", Some(old)),
    ]
}

/// `POST path` from the page's own origin with `form` and `cookie` → (status, Location, body).
async fn post_form(
    agent: &Agent,
    path: &str,
    cookie: Option<&str>,
    form: &[(&str, &str)],
) -> (u16, String, String) {
    let base = format!("http://{}", agent.addr);
    let mut req = http()
        .post(format!("{base}{path}"))
        .header("Origin", &base)
        .form(form);
    if let Some(c) = cookie {
        req = req.header("Cookie", c);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let location = r
        .headers()
        .get("location")
        .map(|l| l.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, location, r.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sharing_toggle_refuses_a_same_origin_request_that_is_not_signed_in() {
    let cloud = Cloud::start().await.unwrap();
    let agent = Agent::start_with(&cloud.dir.path().join("agent"), None, &[])
        .await
        .unwrap();
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path()).unwrap();
    let (endpoint, tf) = (cloud.ingest.url(), token_file.display().to_string());
    let form = [
        ("enabled", "true"),
        ("endpoint", endpoint.as_str()),
        ("token_file", tf.as_str()),
    ];
    let config = std::fs::read_dir(&agent.data_dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect::<Vec<_>>();
    for (how, cookie) in not_signed_in(&agent).await {
        let (status, location, body) =
            post_form(&agent, "/settings/sync", cookie.as_deref(), &form).await;
        assert!(
            status == 303 && location == "/settings/sign-in",
            "{how}: POST /settings/sync answered {status} {location} {body:.300}"
        );
        let s = agent.status().await.unwrap();
        assert_eq!(s["sync"]["enabled"], false, "{how}: sharing turned on: {s}");
    }
    let now = std::fs::read_dir(&agent.data_dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect::<Vec<_>>();
    assert_eq!(config, now, "a refused toggle wrote a file");
    // Signed in, the same form turns sharing on.
    let cookie = sign_in(&agent).await;
    let (status, location, body) = post_form(&agent, "/settings/sync", Some(&cookie), &form).await;
    assert!(
        status == 303 && location.starts_with("/settings?done=on"),
        "{status} {location} {body:.300}"
    );
    assert_eq!(agent.status().await.unwrap()["sync"]["enabled"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_export_button_refuses_a_same_origin_request_that_is_not_signed_in() {
    let dir = tempfile::tempdir().unwrap();
    let agent = Agent::start_with(
        &dir.path().join("agent"),
        None,
        &[("APIARY_MODE", "airgapped")],
    )
    .await
    .unwrap();
    let (s, v) = agent
        .post_events(synthetic_turns("session_export_forms", 1, 20))
        .await
        .unwrap();
    assert_eq!(s, 200, "{v}");
    agent
        .wait_counters(Duration::from_secs(30), "events pending", |c| {
            c.pending == 20
        })
        .await
        .unwrap();
    let exports = agent.data_dir.join("exports");
    let bundles = || std::fs::read_dir(&exports).map(|d| d.count()).unwrap_or(0);
    for (how, cookie) in not_signed_in(&agent).await {
        let (status, location, body) =
            post_form(&agent, "/settings/export", cookie.as_deref(), &[]).await;
        assert!(
            status == 303 && location == "/settings/sign-in",
            "{how}: POST /settings/export answered {status} {location} {body:.300}"
        );
        assert_eq!(bundles(), 0, "{how}: a bundle was written");
        let c = agent.counters().await.unwrap();
        assert_eq!(c.pending, 20, "{how}: events were marked exported: {c:?}");
    }
    // Signed in, the same button writes the bundle.
    let cookie = sign_in(&agent).await;
    let (status, _, body) = post_form(&agent, "/settings/export", Some(&cookie), &[]).await;
    assert_eq!(status, 200, "{body:.300}");
    assert!(body.contains("export_events"), "{body:.300}");
    assert_eq!(bundles(), 1);
}
