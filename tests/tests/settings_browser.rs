//! The desktop settings page in a real browser: headless Chromium over
//! WebDriver against the real `apiary-agent` binary, with a real `apiary-ingest` to push to.
//!
//! Asserted: the page without a sign-in lands on the sign-in form; signing in with the settings token
//! (typed, then Enter) shows the page with sync off, what is shared and what never leaves the device;
//! the cookie is out of reach of scripts and the token is nowhere in the page; with the keyboard only
//! (Tab, typing, Space, Enter) sharing is turned on towards the ingest with the backlog included —
//! `GET /v1/status` says enabled and the event recorded before consent reaches the ingest (the next
//! push happens) — and off again, which `GET /v1/status` follows; a form posted by another site's page
//! in the same browser is refused and changes nothing; a narrow window does not scroll sideways; the
//! theme follows `prefers-color-scheme`; the settings token is in no line of the agent's log.
//! Screenshots are saved (`APIARY_SCREENSHOT_DIR`, default `target/tmp/settings-screenshots`).
//!
//! Without chromium and chromedriver on `PATH` the test says so and passes, unless
//! `APIARY_REQUIRE_BROWSER` is set (CI sets it): then it fails.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;
use tests::agent::Agent;
use tests::events;
use tests::procs::wait_for;
use tests::stack::Cloud;
use tests::webdriver::{browser_tools, start_headless, Browser, Driver, ENTER, TAB};

/// Where the test's screenshots go (unless `APIARY_SCREENSHOT_DIR` says otherwise).
fn shots() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("settings-screenshots")
}
const SESSION: &str = "session_20261103_101433_5e77b0b1";

/// A Hive `llm_turn_complete` line of [`SESSION`].
fn hive_turn() -> Vec<u8> {
    let data = json!({"stop_reason": "tool_use", "model": "claude-sonnet-4-5-20250929",
        "input_tokens": 1200, "output_tokens": 40, "cost_usd": 0.004, "iteration": 1});
    let turn = events::hive("llm_turn_complete", SESSION, events::hive_day(), 1, data);
    serde_json::to_vec(&turn).unwrap()
}

/// Presses Tab until `want` has the focus (at most 40 times).
async fn tab_to(c: &Browser, want: &str) -> anyhow::Result<()> {
    let mut seen = vec![];
    for _ in 0..40 {
        c.press(TAB).await?;
        let now = c.focused().await?;
        if now == want {
            return Ok(());
        }
        seen.push(now);
    }
    anyhow::bail!("Tab never reaches {want}: {seen:?}")
}

#[tokio::test]
async fn the_settings_page_works_in_a_real_browser() -> anyhow::Result<()> {
    let Some((chromium, driver)) = browser_tools("settings") else {
        return Ok(());
    };
    let cloud = Cloud::start().await?;
    let token_file = cloud.tenant.write_ingest_token(cloud.dir.path())?;
    let agent = Agent::start(&cloud.dir.path().join("agent"), None).await?;
    let (status, v) = agent.post_events(hive_turn()).await?;
    anyhow::ensure!(status == 200, "events: {status} {v}");

    let driver = Driver::start(&driver, cloud.dir.path()).await?;
    let profile = tempfile::tempdir()?;
    let c = start_headless(&chromium, &driver, profile.path()).await?;
    let result = drive(&c, &cloud, &agent, &token_file).await;
    let _ = c.quit().await;
    result.map_err(|e| {
        anyhow::anyhow!(
            "{e:#}\nagent log tail:\n{}",
            tests::agent::tail(&agent.output(), 30)
        )
    })
}

async fn drive(c: &Browser, cloud: &Cloud, agent: &Agent, token_file: &Path) -> anyhow::Result<()> {
    let base = format!("http://{}", agent.addr);
    let settings_token = std::fs::read_to_string(agent.data_dir.join("settings.token"))?;
    let settings_token = settings_token.trim();

    // Not signed in: the sign-in form. The token typed, then Enter.
    c.goto(&format!("{base}/settings")).await?;
    anyhow::ensure!(
        c.path().await? == "/settings/sign-in",
        "{}",
        c.path().await?
    );
    c.save_screenshot(&shots(), "sign-in").await?;
    c.type_into(&c.find("#token").await?, settings_token)
        .await?;
    c.press(ENTER).await?;
    c.wait_text("h1", "Telemetry sharing").await?;
    anyhow::ensure!(c.path().await? == "/settings");
    let cookie = c.execute("return document.cookie").await?;
    anyhow::ensure!(cookie == json!(""), "scripts can read the cookie: {cookie}");
    let source = c.source().await?;
    anyhow::ensure!(!source.contains(settings_token) && !source.contains(&agent.token));
    c.wait_text("dd[data-field='sync']", "Off").await?;
    c.wait_text("#never-sent", "tool arguments").await?;
    c.wait_text("dd[data-field='held_events']", "1").await?;
    c.save_screenshot(&shots(), "settings-off").await?;

    // On, by keyboard: the server, the token file, the backlog box (Space), the button (Enter).
    c.goto(&format!("{base}/settings")).await?;
    tab_to(c, "#endpoint").await?;
    c.type_into(&c.find("#endpoint").await?, &cloud.ingest.url())
        .await?;
    tab_to(c, "#token_file").await?;
    c.type_into(
        &c.find("#token_file").await?,
        &token_file.display().to_string(),
    )
    .await?;
    tab_to(c, "#include_backlog").await?;
    c.press(" ").await?;
    tab_to(c, "#sync-button").await?;
    c.press(ENTER).await?;
    c.wait_text("dd[data-field='sync']", "On").await?;
    c.wait_text("[role='status']", "Sharing is on").await?;
    let status = agent.status().await?;
    anyhow::ensure!(status["sync"]["enabled"] == json!(true), "{status}");
    anyhow::ensure!(
        status["sync"]["endpoint"] == json!(cloud.ingest.url()),
        "{status}"
    );
    // The next push happens: the event recorded before consent reaches the ingest.
    let read = cloud.read_api();
    let arrived = wait_for(Duration::from_secs(30), || {
        let read = read.clone();
        async move {
            let (s, v) = read.get(&format!("/v1/sessions/{SESSION}")).await.ok()?;
            (s == 200).then_some(v)
        }
    })
    .await;
    anyhow::ensure!(arrived.is_some(), "the event never reached the ingest");
    c.goto(&format!("{base}/settings")).await?;
    c.wait_text("dd[data-field='last_push']", "Sent").await?;
    c.save_screenshot(&shots(), "settings-on").await?;

    // Another site's page posting to the agent in this very browser: refused, nothing changes.
    let port = agent.addr.port();
    let evil = format!(
        "data:text/html,<form method=post action='http://127.0.0.1:{port}/settings/sync'>\
         <input name=enabled value=false></form>"
    );
    c.goto(&evil).await?;
    c.execute("document.forms[0].submit(); return true").await?;
    c.wait_text("[role='alert']", "Origin check").await?;
    let status = agent.status().await?;
    anyhow::ensure!(
        status["sync"]["enabled"] == json!(true),
        "a foreign page changed consent: {status}"
    );

    // Off, by keyboard.
    c.goto(&format!("{base}/settings")).await?;
    tab_to(c, "#sync-button").await?;
    c.press(ENTER).await?;
    c.wait_text("dd[data-field='sync']", "Off").await?;
    let status = agent.status().await?;
    anyhow::ensure!(status["sync"]["enabled"] == json!(false), "{status}");

    // A narrow window (a phone, a small webview): the page never scrolls sideways.
    c.set_window_size(390, 844).await?;
    c.goto(&format!("{base}/settings")).await?;
    let fits = c
        .execute("return document.documentElement.scrollWidth <= window.innerWidth + 1")
        .await?;
    anyhow::ensure!(fits == json!(true), "the page overflows a narrow window");
    c.save_screenshot(&shots(), "settings-narrow").await?;
    c.set_window_size(1280, 900).await?;

    // The theme follows the system setting.
    let background = "return getComputedStyle(document.body).backgroundColor";
    let light = c.execute(background).await?;
    anyhow::ensure!(light == json!("rgb(255, 255, 255)"), "light: {light}");
    let dark = json!({ "features": [{ "name": "prefers-color-scheme", "value": "dark" }] });
    c.cdp("Emulation.setEmulatedMedia", dark).await?;
    c.goto(&format!("{base}/settings")).await?;
    let dark = c.execute(background).await?;
    anyhow::ensure!(dark == json!("rgb(15, 20, 25)"), "dark: {dark}");
    c.save_screenshot(&shots(), "settings-dark").await?;

    // The token is in no log line of the agent (it ran with RUST_LOG=info).
    let log = agent.output();
    anyhow::ensure!(
        log.contains("settings page: signed in"),
        "no sign-in logged"
    );
    anyhow::ensure!(
        !log.contains(settings_token),
        "the settings token is in the agent's log"
    );
    Ok(())
}
