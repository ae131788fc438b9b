//! The dashboard in a real browser: headless Chromium driven over WebDriver (Debian's
//! `chromium` and `chromium-driver`, `scripts/browser.sh` installs them) against the real
//! `apiary-ingest` binary on a fresh database holding a queen session with a worker.
//!
//! Asserted: a page without a sign-in lands on the sign-in form; signing in with the read token shows
//! the overview, whose totals equal `/v1/usage` for the very range, zone and grouping its pickers show;
//! the cookie is out of reach of scripts (`document.cookie` is empty); Tab from the top reaches the skip
//! link first and then the navigation, every picker, the submit and sign-out buttons, and Enter on the
//! "Sessions" link opens the list; the queen going stalled and a new session, then the queen failing,
//! show in the list within 2 s each without a reload (the live stream); the session's link opens its detail with the worker in its tree; the
//! device shows on the devices page; the budgets page shows a meter and `/v1/budgets`' numbers, the
//! alerts and prices pages open; at a phone's width the overview and the budgets do not scroll sideways; the
//! theme follows `prefers-color-scheme` (light, and dark when the system asks for it).
//! Screenshots of each page are saved (`APIARY_SCREENSHOT_DIR`, default
//! `target/tmp/dashboard-screenshots`).
//!
//! Without chromium and chromedriver on `PATH` the test says so and passes, unless
//! `APIARY_REQUIRE_BROWSER` is set (CI sets it): then it fails.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{json, Value};
use tests::isolation::{binding, body, failed, stalled, turn, worker_turn};
use tests::stack::{Api, Cloud};
use tests::webdriver::{browser_tools, start_headless, Browser, Driver, ENTER, TAB};

/// Where the test's screenshots go (unless `APIARY_SCREENSHOT_DIR` says otherwise).
fn shots() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots")
}
const QUEEN: &str = "q-browser-1";
const WORKER: &str = "w-browser-1";
const DEVICE: &str = "dev-browser-1";
const NEW: &str = "q-browser-2";
/// The colony the queen runs (a key as the agent derives it).
const COLONY: &str = "ck_0123456789abcdef0123456789abcdef";

/// A batch the live list must show: its events, its session bindings, then (session, badge) pairs.
type LiveStep = (Vec<Value>, Vec<Value>, Vec<(&'static str, &'static str)>);

/// The queen's `colony.created`: its session runs colony [`COLONY`].
fn colony_created(queen: &str) -> Value {
    json!({
        "schema_version": 1, "event_id": uuid::Uuid::new_v4(), "type": "colony.created",
        "occurred_at": chrono::Utc::now() - chrono::TimeDelta::minutes(3), "runtime": "hive",
        "native_type": "colony_created", "session_id": queen, "agent_role": "queen",
        "data": { "source": "created", "colony_id": queen, "queen_session_id": queen,
                  "colony_key": COLONY },
    })
}

/// Waits until the page's `h1` reads `want` (a click that navigates returns before the new page is
/// there: the old page's heading may still be found, or go stale while read).
async fn h1(c: &Browser, want: &str) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut last = String::new();
    while std::time::Instant::now() < deadline {
        if let Ok(e) = c.find("h1").await {
            if let Ok(text) = c.text(&e).await {
                if text.contains(want) {
                    return Ok(());
                }
                last = text;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("the heading never read {want:?} (last: {last:?})")
}

async fn value_of(c: &Browser, css: &str, what: &str) -> anyhow::Result<String> {
    let e = c.find(css).await?;
    c.attr(&e, what)
        .await?
        .ok_or_else(|| anyhow::anyhow!("{css} has no {what}"))
}

async fn input_value(c: &Browser, css: &str) -> anyhow::Result<String> {
    let e = c.find(css).await?;
    Ok(c.prop(&e, "value").await?.unwrap_or_default())
}

#[tokio::test]
async fn the_dashboard_works_in_a_real_browser() -> anyhow::Result<()> {
    let Some((chromium, driver)) = browser_tools("dashboard") else {
        return Ok(());
    };
    let cloud = Cloud::start().await?;
    let events = [
        turn(QUEEN, 1_200),
        turn(QUEEN, 800),
        worker_turn(WORKER, QUEEN, 300),
        colony_created(QUEEN),
    ];
    let sessions = [binding(QUEEN, 5), binding(WORKER, 4)];
    let ingest = Api::new(&cloud.ingest.url(), &cloud.tenant.ingest_token);
    let (status, v) = ingest.post_batch(&body(&events, &sessions, DEVICE)).await?;
    anyhow::ensure!(status == 200, "batch: {status} {v}");
    let budget = json!({"name": "team", "period": "month", "limit_usd": "5"});
    let r = tests::stack::client()
        .post(format!("{}/v1/budgets", cloud.ingest.url()))
        .bearer_auth(&cloud.tenant.admin_token)
        .header("content-type", "application/json")
        .body(budget.to_string())
        .send()
        .await?;
    anyhow::ensure!(r.status() == 201, "budget: {}", r.text().await?);

    let driver = Driver::start(&driver, cloud.dir.path()).await?;
    let profile = tempfile::tempdir()?;
    let c = start_headless(&chromium, &driver, profile.path()).await?;
    let result = drive(&c, &cloud, &ingest).await;
    let _ = c.quit().await;
    result
}

async fn drive(c: &Browser, cloud: &Cloud, ingest: &Api) -> anyhow::Result<()> {
    let base = cloud.ingest.url();
    let read = cloud.read_api();

    // Not signed in: the sign-in form.
    c.goto(&format!("{base}/")).await?;
    anyhow::ensure!(c.path().await? == "/sign-in", "{}", c.path().await?);
    c.save_screenshot(&shots(), "sign-in").await?;
    let token = c.find("#token").await?;
    c.type_into(&token, &cloud.tenant.read_token).await?;
    c.click(&c.find("form[action='/sign-in'] button").await?)
        .await?;
    h1(c, "Overview").await?;
    anyhow::ensure!(c.path().await? == "/");
    let cookie = c.execute("return document.cookie").await?;
    anyhow::ensure!(cookie == json!(""), "scripts can read the cookie: {cookie}");
    anyhow::ensure!(!c.source().await?.contains(&cloud.tenant.read_token));

    // The totals are /v1/usage's for the range, zone and grouping the pickers show.
    let from = input_value(c, "#from").await?;
    let to = input_value(c, "#to").await?;
    let tz = input_value(c, "#tz").await?;
    let api = read
        .get_ok(&format!(
            "/v1/usage?from={from}&to={to}&tz={tz}&granularity=day&group_by=model"
        ))
        .await?;
    for field in ["input_tokens", "output_tokens", "cost_nanos", "llm_calls"] {
        let shown = value_of(c, &format!("dd[data-field='{field}']"), "data-value").await?;
        let want = api["totals"][field].to_string();
        anyhow::ensure!(shown == want, "{field}: page {shown}, /v1/usage {want}");
    }
    anyhow::ensure!(api["totals"]["input_tokens"] == 2_300, "{api}");
    c.save_screenshot(&shots(), "overview").await?;

    // The keyboard: Tab from the top reaches the skip link first, then every control.
    c.goto(&format!("{base}/")).await?;
    let mut order = vec![];
    for _ in 0..30 {
        c.press(TAB).await?;
        order.push(c.focused().await?);
    }
    anyhow::ensure!(order[0] == "a:Skip to content", "first stop: {order:?}");
    for want in [
        "a:Sessions",
        "a:Devices",
        "button:Sign out",
        "#from",
        "#to",
        "#granularity",
        "#group_by",
        "#tz",
        "button:Show",
    ] {
        anyhow::ensure!(
            order.iter().any(|o| o == want),
            "Tab never reaches {want}: {order:?}"
        );
    }
    c.goto(&format!("{base}/")).await?;
    for _ in 0..10 {
        c.press(TAB).await?;
        if c.focused().await? == "a:Sessions" {
            break;
        }
    }
    c.press(ENTER).await?;
    h1(c, "Sessions").await?;

    // Live: the queen going stalled, and a new session, show in the list within 2 s, without a
    // reload; then the queen failing.
    c.wait_text("#live-note", "Live:").await?;
    c.execute("window.apiaryMarker = 42; return true").await?;
    // (events, session bindings, the badges they must show)
    let steps: [LiveStep; 2] = [
        (
            vec![stalled(QUEEN), turn(NEW, 10)],
            vec![binding(NEW, 1)],
            vec![(QUEEN, "stalled"), (NEW, "active")],
        ),
        (vec![failed(QUEEN)], vec![], vec![(QUEEN, "failed")]),
    ];
    for (events, sessions, expect) in steps {
        let (status, v) = ingest.post_batch(&body(&events, &sessions, DEVICE)).await?;
        anyhow::ensure!(status == 200, "batch: {status} {v}");
        let posted = std::time::Instant::now();
        for (session, badge) in expect {
            c.wait_text(&format!("tr[data-session='{session}'] .badge"), badge)
                .await?;
        }
        let took = posted.elapsed();
        anyhow::ensure!(
            took <= Duration::from_secs(2),
            "the live list took {took:?}"
        );
    }
    let marker = c.execute("return window.apiaryMarker").await?;
    anyhow::ensure!(marker == json!(42), "the page was reloaded");
    c.save_screenshot(&shots(), "sessions").await?;

    // The list links to the session; its detail shows the tree with the worker.
    c.click(&c.find(&format!("a[href='/sessions/{QUEEN}']")).await?)
        .await?;
    h1(c, &format!("Session {QUEEN}")).await?;
    let tree = c.text(&c.find("ul.tree").await?).await?;
    anyhow::ensure!(tree.contains(WORKER), "tree: {tree}");
    c.save_screenshot(&shots(), "session").await?;

    c.goto(&format!("{base}/devices")).await?;
    h1(c, "Devices").await?;
    let devices = c.text(&c.find("table").await?).await?;
    anyhow::ensure!(devices.contains(DEVICE), "devices: {devices}");
    c.save_screenshot(&shots(), "devices").await?;
    // Colonies with the page's default range (the last 30 local days, today included): the queen's
    // colony with its worker, linked to its sessions.
    c.goto(&format!("{base}/colonies")).await?;
    h1(c, "Colonies").await?;
    let row = c.text(&c.find("table tbody tr").await?).await?;
    anyhow::ensure!(row.contains(COLONY), "colonies: {row}");
    let workers = c
        .text(&c.find("table tbody tr td:nth-of-type(3)").await?)
        .await?;
    anyhow::ensure!(workers == "1", "workers: {workers} in {row}");
    c.find(&format!("a[href='/sessions?colony={COLONY}']"))
        .await?;
    c.save_screenshot(&shots(), "colonies").await?;

    // Budgets: a meter per budget, with `/v1/budgets`' numbers for the same token.
    c.goto(&format!("{base}/budgets")).await?;
    h1(c, "Budgets").await?;
    let api = read.get_ok("/v1/budgets").await?;
    for field in ["spent", "limit", "percent"] {
        let shown = value_of(c, "article.budget", &format!("data-{field}")).await?;
        let want = &api["budgets"][0][field];
        anyhow::ensure!(
            shown.parse::<f64>()? == want.as_f64().unwrap_or(f64::NAN),
            "{field}: page {shown}, /v1/budgets {want}"
        );
    }
    c.find("article.budget meter").await?;
    c.save_screenshot(&shots(), "budgets").await?;
    c.goto(&format!("{base}/alerts")).await?;
    h1(c, "Alerts").await?;
    c.save_screenshot(&shots(), "alerts").await?;
    c.goto(&format!("{base}/prices")).await?;
    h1(c, "Prices").await?;
    c.find("table.prices[data-owner='shipped']").await?;
    c.save_screenshot(&shots(), "prices").await?;

    // A phone's width: the page itself never scrolls sideways (wide tables scroll in their box).
    c.set_window_size(390, 844).await?;
    c.goto(&format!("{base}/")).await?;
    let fits = c
        .execute("return document.documentElement.scrollWidth <= window.innerWidth + 1")
        .await?;
    anyhow::ensure!(
        fits == json!(true),
        "the overview overflows a phone's width"
    );
    c.save_screenshot(&shots(), "overview-phone").await?;
    c.goto(&format!("{base}/budgets")).await?;
    let fits = c
        .execute("return document.documentElement.scrollWidth <= window.innerWidth + 1")
        .await?;
    anyhow::ensure!(fits == json!(true), "the budgets overflow a phone's width");
    c.save_screenshot(&shots(), "budgets-phone").await?;

    // The theme follows the system setting (prefers-color-scheme).
    c.set_window_size(1280, 900).await?;
    let background = "return getComputedStyle(document.body).backgroundColor";
    let light = c.execute(background).await?;
    anyhow::ensure!(light == json!("rgb(255, 255, 255)"), "light: {light}");
    let dark = json!({ "features": [{ "name": "prefers-color-scheme", "value": "dark" }] });
    c.cdp("Emulation.setEmulatedMedia", dark).await?;
    c.goto(&format!("{base}/")).await?;
    let dark = c.execute(background).await?;
    anyhow::ensure!(dark == json!("rgb(15, 20, 25)"), "dark: {dark}");
    c.save_screenshot(&shots(), "overview-dark").await?;
    Ok(())
}
