//! The dashboard read with the demo's day, in a real browser: `deploy/local/workload.py` writes the
//! team's day into three Hive homes, three real agents (device-bound tokens, sharing on, as
//! `deploy/local/demo.sh` sets them up) tail them and push to the real ingest, Claude Code's exports of
//! the same day go to two agents' OTLP receivers (`claude_code.py post`), and the colonies are labelled
//! as the demo labels them (`demo_util.py label-colonies`: each agent lists its colonies with their
//! keys, an admin labels each key). The generator's `expected.json` is the oracle.
//!
//! Asserted, with headless Chromium (`scripts/browser.sh` installs it):
//! - a model has one colour in "Spend" and "Tokens", at day and hour granularity, light and dark;
//! - a queen's "Spend (with everything below)" is its tree's total (the tree API's, and the generator's
//!   sum over the queen and her workers), its own spend beside it;
//! - "Usage by model (this session)" has no "(none)" row of zeros;
//! - a worker's page shows its queen and its colony (by its label) above it, the worker marked;
//! - the sessions list shows "1 stalled, 1 needs attention below" on the ETL queen, and the runtime of
//!   every session (`hive`, `claude_code`);
//! - the colonies page shows the labels; a device's settings page lists its colonies with the keys the
//!   dashboard shows;
//! - after an admin sets `colony_names` to `names` (`apiary-ingest tenant set`), a new device's settings
//!   page shows it before sharing is turned on, and once its user agreed, a colony's name reaches the
//!   dashboard.
//!
//! Screenshots go to `APIARY_SCREENSHOT_DIR` (default `target/tmp/demo-day-screenshots`). Without
//! chromium and chromedriver on `PATH` the test says so and passes, unless `APIARY_REQUIRE_BROWSER` is
//! set (CI sets it): then it fails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use tests::agent::{agent_cli, Agent};
use tests::procs::{run, wait_for};
use tests::stack::{write_private, Api, Cloud};
use tests::webdriver::{browser_tools, start_headless, Browser, Driver, ENTER};

const USERS: [&str; 3] = ["alice", "bob", "carol"];
/// The device that joins after the tenant chose `names`.
const NEWCOMER: &str = "erin";

fn shots() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("demo-day-screenshots")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// Runs `deploy/local/SCRIPT ARGS` with python3 (zone UTC, like the agents), to completion.
fn python(script: &str, args: &[&str]) -> anyhow::Result<String> {
    let mut cmd = Command::new("python3");
    cmd.arg(repo().join("deploy/local").join(script))
        .args(args)
        .env("TZ", "UTC");
    run(&mut cmd)
}

/// The day on the stack: a cloud, three agents that delivered everything, colonies labelled.
struct Day {
    cloud: Cloud,
    agents: BTreeMap<&'static str, Agent>,
    expected: Value,
    dir: tempfile::TempDir,
}

async fn the_day() -> anyhow::Result<Day> {
    let cloud = Cloud::start().await?;
    let dir = tempfile::tempdir()?;
    let hive = dir.path().join("hive");
    let db = cloud.db.url.clone();
    let tenant = cloud.tenant.id.clone();
    let mut agents = BTreeMap::new();
    for user in USERS {
        let data = dir.path().join(user).join("agent");
        std::fs::create_dir_all(&data)?;
        let home = hive.join(user);
        std::fs::create_dir_all(&home)?;
        let device = format!("{user}-laptop");
        let token = tests::isolation::token(&db, &tenant, "ingest", Some(user), Some(&device))?;
        let token_file = dir.path().join(user).join("ingest.token");
        write_private(&token_file, &format!("{token}\n"))?;
        let tf = token_file.display().to_string();
        let url = cloud.ingest.url();
        let args = ["sync", "enable", "--endpoint", &url, "--token-file", &tf];
        agent_cli(&data, &args, &[])?;
        let agent = Agent::start_with(
            &data,
            Some(&home),
            &[("APIARY_PUSH_HEARTBEAT_INTERVAL_SECS", "2")],
        )
        .await?;
        agents.insert(user, agent);
    }
    let out = hive.display().to_string();
    python(
        "workload.py",
        &[
            "--out",
            &out,
            "--users",
            "alice,bob,carol",
            "--seed",
            "7",
            "--quiet",
        ],
    )?;
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(hive.join("expected.json"))?)?;
    let cc = hive.join("claude_code").display().to_string();
    let dirs: BTreeMap<&str, String> = agents
        .iter()
        .map(|(u, a)| (*u, a.data_dir.display().to_string()))
        .collect();
    python(
        "claude_code.py",
        &[
            "post",
            "--dir",
            &cc,
            &format!("alice={}", dirs["alice"]),
            &format!("carol={}", dirs["carol"]),
        ],
    )?;
    let mut drained = vec![
        "wait-drained".to_string(),
        "--expected".into(),
        hive.join("expected.json").display().to_string(),
        "--timeout".into(),
        "240".into(),
    ];
    for (u, a) in &agents {
        drained.push(format!("{u}={}:{}", a.data_dir.display(), a.pid()));
    }
    let drained: Vec<&str> = drained.iter().map(String::as_str).collect();
    python("demo_util.py", &drained)?;
    let admin_file = dir.path().join("admin.token");
    write_private(&admin_file, &format!("{}\n", cloud.tenant.admin_token))?;
    let admin = admin_file.display().to_string();
    let url = cloud.ingest.url();
    let mut label = vec![
        "label-colonies",
        "--url",
        &url,
        "--admin-token-file",
        &admin,
    ];
    let specs: Vec<String> = dirs.iter().map(|(u, d)| format!("{u}={d}")).collect();
    label.extend(specs.iter().map(String::as_str));
    python("demo_util.py", &label)?;
    Ok(Day {
        cloud,
        agents,
        expected,
        dir,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_s_day_reads_right_on_the_dashboard() -> anyhow::Result<()> {
    let Some((chromium, driver)) = browser_tools("dashboard (demo day)") else {
        return Ok(());
    };
    let day = the_day().await?;
    let driver = Driver::start(&driver, day.dir.path()).await?;
    let profile = tempfile::tempdir()?;
    let c = start_headless(&chromium, &driver, profile.path()).await?;
    let result = drive(&c, &day).await;
    let _ = c.quit().await;
    result.map_err(|e| {
        let logs: Vec<String> = day
            .agents
            .iter()
            .map(|(u, a)| format!("{u}:\n{}", tests::agent::tail(&a.output(), 15)))
            .collect();
        anyhow::anyhow!("{e:#}\nagent logs:\n{}", logs.join("\n"))
    })
}

async fn drive(c: &Browser, day: &Day) -> anyhow::Result<()> {
    let base = day.cloud.ingest.url();
    let read = day.cloud.read_api();
    c.goto(&format!("{base}/")).await?;
    c.type_into(&c.find("#token").await?, &day.cloud.tenant.read_token)
        .await?;
    c.press(ENTER).await?;
    h1(c, "Overview").await?;

    colours(c, day).await?;
    queens(c, day, &read).await?;
    worker(c, day).await?;
    sessions_list(c, day).await?;
    let keys = colonies(c, day, &read).await?;
    device_colonies(c, day, &keys).await?;
    colony_names(c, day).await?;
    Ok(())
}

/// The models of the day (those the overview charts: tokens and spend).
fn models(day: &Day) -> Vec<String> {
    day.expected["by_model"]
        .as_object()
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default()
}

/// The colour class of every series in the chart under `title_id`, rects and legend swatches alike
/// (one class per series, else an error).
async fn chart_classes(c: &Browser, title_id: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let script = format!(
        "var s = document.getElementById('{title_id}').parentNode; var out = {{}};
         s.querySelectorAll('rect[data-series]').forEach(function (r) {{
           var k = r.getAttribute('data-series'); (out[k] = out[k] || {{}})[r.getAttribute('class')] = 1; }});
         s.querySelectorAll('li[data-series] .swatch').forEach(function (w) {{
           var k = w.parentNode.getAttribute('data-series');
           (out[k] = out[k] || {{}})[w.getAttribute('class').replace('swatch ', '')] = 1; }});
         return out;"
    );
    let v = c.execute(&script).await?;
    let mut out = BTreeMap::new();
    for (series, classes) in v.as_object().cloned().unwrap_or_default() {
        let classes: Vec<&String> = classes
            .as_object()
            .map(|o| o.keys().collect())
            .unwrap_or_default();
        anyhow::ensure!(
            classes.len() == 1,
            "{title_id}: {series} has classes {classes:?}"
        );
        out.insert(series, classes[0].clone());
    }
    Ok(out)
}

/// The computed colour of each series' legend swatch in the chart under `title_id`.
async fn swatch_colours(c: &Browser, title_id: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let script = format!(
        "var out = {{}}; document.getElementById('{title_id}').parentNode
           .querySelectorAll('li[data-series] .swatch').forEach(function (w) {{
             out[w.parentNode.getAttribute('data-series')] = getComputedStyle(w).backgroundColor; }});
         return out;"
    );
    let v = c.execute(&script).await?;
    Ok(v.as_object()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.as_str().unwrap_or("").to_string()))
        .collect())
}

async fn colours(c: &Browser, day: &Day) -> anyhow::Result<()> {
    let base = day.cloud.ingest.url();
    let mut seen: Option<BTreeMap<String, String>> = None;
    for view in ["/", "/?granularity=hour"] {
        c.goto(&format!("{base}{view}")).await?;
        h1(c, "Overview").await?;
        let spend = chart_classes(c, "spend-title").await?;
        let tokens = chart_classes(c, "tokens-title").await?;
        for model in models(day) {
            let (s, t) = (spend.get(&model), tokens.get(&model));
            anyhow::ensure!(
                t.is_some(),
                "{view}: {model} is not in the tokens chart: {tokens:?}"
            );
            if let Some(s) = s {
                anyhow::ensure!(
                    Some(s) == t,
                    "{view}: {model} is {s} in Spend, {t:?} in Tokens"
                );
            }
            if let Some(before) = &seen {
                anyhow::ensure!(
                    before.get(&model) == t,
                    "{model}: {:?} on the day view, {t:?} on {view}",
                    before.get(&model)
                );
            }
        }
        let distinct: std::collections::BTreeSet<&String> = tokens.values().collect();
        anyhow::ensure!(
            distinct.len() == tokens.len(),
            "two series share a colour: {tokens:?}"
        );
        seen = Some(tokens);
    }
    c.goto(&format!("{base}/")).await?;
    c.save_screenshot(&shots(), "overview").await?;
    let light = swatch_colours(c, "tokens-title").await?;
    for (model, colour) in swatch_colours(c, "spend-title").await? {
        anyhow::ensure!(
            light.get(&model) == Some(&colour),
            "light: {model} is {colour} in Spend, {:?} in Tokens",
            light.get(&model)
        );
    }
    let dark = json!({ "features": [{ "name": "prefers-color-scheme", "value": "dark" }] });
    c.cdp("Emulation.setEmulatedMedia", dark).await?;
    c.goto(&format!("{base}/")).await?;
    let dark_tokens = swatch_colours(c, "tokens-title").await?;
    let dark_spend = swatch_colours(c, "spend-title").await?;
    for (model, colour) in &dark_spend {
        anyhow::ensure!(
            dark_tokens.get(model) == Some(colour),
            "dark: {model} is {colour} in Spend, {:?} in Tokens",
            dark_tokens.get(model)
        );
        anyhow::ensure!(
            light.get(model) != Some(colour),
            "{model}: the dark theme kept the light colour"
        );
    }
    c.save_screenshot(&shots(), "overview-dark").await?;
    let light = json!({ "features": [{ "name": "prefers-color-scheme", "value": "light" }] });
    c.cdp("Emulation.setEmulatedMedia", light).await?;
    Ok(())
}

/// The queens whose colonies ran (colony id = the queen's session) with their workers.
fn colony_queens(day: &Day) -> Vec<(String, String, Vec<String>)> {
    day.expected["colonies"]
        .as_object()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|(queen, col)| {
            let workers = col["workers"]
                .as_array()
                .map(|w| {
                    w.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            (
                queen,
                col["colony_name"].as_str().unwrap_or("").to_string(),
                workers,
            )
        })
        .collect()
}

fn expected_usage(day: &Day, session: &str, field: &str) -> i64 {
    day.expected["sessions"][session]["usage"][field]
        .as_i64()
        .unwrap_or(0)
}

async fn data_value(c: &Browser, field: &str) -> anyhow::Result<i64> {
    let e = c.find(&format!("dd[data-field='{field}']")).await?;
    let v = c.attr(&e, "data-value").await?.unwrap_or_default();
    Ok(v.parse()?)
}

async fn queens(c: &Browser, day: &Day, read: &Api) -> anyhow::Result<()> {
    let base = day.cloud.ingest.url();
    for (queen, name, workers) in colony_queens(day) {
        let tree = read.get_ok(&format!("/v1/sessions/{queen}/tree")).await?;
        // The oracle: the queen's and her workers' reported costs and tokens, summed.
        let family: Vec<&str> = std::iter::once(queen.as_str())
            .chain(workers.iter().map(String::as_str))
            .collect();
        let sum = |f: &str| {
            family
                .iter()
                .map(|s| expected_usage(day, s, f))
                .sum::<i64>()
        };
        anyhow::ensure!(
            tree["totals"]["cost_reported_nanos"].as_i64() == Some(sum("cost_nanos")),
            "{name}: tree {} reported, the day {}",
            tree["totals"]["cost_reported_nanos"],
            sum("cost_nanos")
        );
        anyhow::ensure!(tree["totals"]["input_tokens"].as_i64() == Some(sum("input_tokens")));
        c.goto(&format!("{base}/sessions/{queen}")).await?;
        h1(c, &queen).await?;
        let all = data_value(c, "cost_nanos_with_below").await?;
        let own = data_value(c, "cost_nanos").await?;
        anyhow::ensure!(
            Some(all) == tree["totals"]["cost_nanos"].as_i64(),
            "{name}: the page says {all} with everything below, the tree {}",
            tree["totals"]["cost_nanos"]
        );
        anyhow::ensure!(
            Some(own) == tree["usage"]["cost_nanos"].as_i64(),
            "{name}: own {own}"
        );
        anyhow::ensure!(
            all > own,
            "{name}: the workers' spend is not in {all} (own {own})"
        );
        let models = c
            .text(&c.find("section[aria-labelledby='models-title']").await?)
            .await?;
        anyhow::ensure!(!models.contains("(none)"), "{name}: {models}");
        anyhow::ensure!(
            models.contains("claude-") || models.contains("gpt-"),
            "{name}: {models}"
        );
        c.save_screenshot(&shots(), &format!("queen-{name}"))
            .await?;
    }
    Ok(())
}

/// The session of `user` whose expected status is `status` and role `role`.
fn session_where(day: &Day, role: &str, status: &str) -> anyhow::Result<String> {
    day.expected["sessions"]
        .as_object()
        .and_then(|s| {
            s.iter()
                .find(|(_, m)| m["role"] == role && m["status"] == status)
                .map(|(k, _)| k.clone())
        })
        .ok_or_else(|| anyhow::anyhow!("no {role} {status} in the day"))
}

async fn worker(c: &Browser, day: &Day) -> anyhow::Result<()> {
    let base = day.cloud.ingest.url();
    let stalled = session_where(day, "worker", "stalled")?;
    let queen = day.expected["sessions"][&stalled]["parent"]
        .as_str()
        .unwrap_or("")
        .to_string();
    c.goto(&format!("{base}/sessions/{stalled}")).await?;
    h1(c, &stalled).await?;
    let tree = c.text(&c.find("ul.tree").await?).await?;
    let (at_queen, at_colony, at_worker) = (
        tree.find(&queen),
        tree.find("Etl backfill"),
        tree.find(&stalled),
    );
    anyhow::ensure!(
        at_queen.is_some() && at_colony.is_some() && at_queen < at_colony && at_colony < at_worker,
        "the queen, then the colony by its label, then the worker: {tree}"
    );
    let here = c.find("ul.tree a[aria-current='page']").await?;
    let href = c.attr(&here, "href").await?.unwrap_or_default();
    anyhow::ensure!(href.ends_with(&stalled), "marked: {href}");
    c.save_screenshot(&shots(), "worker").await?;
    Ok(())
}

async fn sessions_list(c: &Browser, day: &Day) -> anyhow::Result<()> {
    let base = day.cloud.ingest.url();
    let etl = colony_queens(day)
        .into_iter()
        .find(|(_, name, _)| name == "etl_backfill")
        .map(|(q, _, _)| q)
        .ok_or_else(|| anyhow::anyhow!("no ETL colony in the day"))?;
    c.goto(&format!("{base}/sessions")).await?;
    h1(c, "Sessions").await?;
    let row = format!("tr[data-session='{etl}']");
    let badge = c.text(&c.find(&format!("{row} .badge")).await?).await?;
    anyhow::ensure!(badge == "completed", "the ETL queen reads {badge}");
    let below = c.find(&format!("{row} .below")).await?;
    let text = c.text(&below).await?;
    anyhow::ensure!(text == "1 stalled, 1 needs attention below", "{text}");
    let worst = c.attr(&below, "data-worst-below").await?;
    anyhow::ensure!(worst.as_deref() == Some("stalled"), "{worst:?}");
    let sessions = day.expected["sessions"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for (sid, meta) in &sessions {
        let cell = c
            .find(&format!(
                "tr[data-session='{sid}'] td[data-field='runtime']"
            ))
            .await?;
        let runtime = c.text(&cell).await?;
        anyhow::ensure!(
            meta["runtime"] == json!(runtime),
            "{sid}: {runtime}, the day says {}",
            meta["runtime"]
        );
    }
    c.save_screenshot(&shots(), "sessions").await?;
    Ok(())
}

/// Checks the colonies page shows every colony's label; returns label → key as the dashboard shows.
async fn colonies(c: &Browser, day: &Day, read: &Api) -> anyhow::Result<BTreeMap<String, String>> {
    let base = day.cloud.ingest.url();
    c.goto(&format!("{base}/colonies")).await?;
    h1(c, "Colonies").await?;
    let table = c.text(&c.find("table").await?).await?;
    let api = read.get_ok("/v1/colonies").await?;
    let mut keys = BTreeMap::new();
    for col in api["colonies"].as_array().cloned().unwrap_or_default() {
        let label = col["label"].as_str().unwrap_or("").to_string();
        keys.insert(label, col["colony_key"].as_str().unwrap_or("").to_string());
    }
    for (_, name, _) in colony_queens(day) {
        let label = label_of(&name);
        anyhow::ensure!(
            table.contains(&label),
            "{label} is not on the colonies page: {table}"
        );
        anyhow::ensure!(keys.contains_key(&label), "{label} is not labelled: {api}");
    }
    c.save_screenshot(&shots(), "colonies").await?;
    Ok(keys)
}

/// The label the demo gives a colony: billing_refactor → Billing refactor.
fn label_of(name: &str) -> String {
    let words = name.replace('_', " ");
    let mut chars = words.chars();
    chars
        .next()
        .map(|f| f.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// Signs in to the settings page of `agent`.
async fn settings_sign_in(c: &Browser, agent: &Agent) -> anyhow::Result<String> {
    let base = format!("http://{}", agent.addr);
    let token = std::fs::read_to_string(agent.data_dir.join("settings.token"))?;
    c.goto(&format!("{base}/settings")).await?;
    c.type_into(&c.find("#token").await?, token.trim()).await?;
    c.press(ENTER).await?;
    h1(c, "Telemetry sharing").await?;
    Ok(base)
}

async fn device_colonies(
    c: &Browser,
    day: &Day,
    keys: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    for (queen, name, _) in colony_queens(day) {
        let user = day.expected["sessions"][&queen]["user"]
            .as_str()
            .unwrap_or("");
        let agent = day
            .agents
            .get(user)
            .ok_or_else(|| anyhow::anyhow!("no agent for {user}"))?;
        settings_sign_in(c, agent).await?;
        let cell = c
            .find(&format!(
                "tr[data-colony-name='{name}'] td[data-field='colony_key']"
            ))
            .await?;
        let key = c.text(&cell).await?;
        let shown = keys.get(&label_of(&name));
        anyhow::ensure!(
            shown == Some(&key),
            "{user}'s {name}: {key} here, {shown:?} on the dashboard"
        );
        c.save_screenshot(&shots(), &format!("settings-{user}"))
            .await?;
    }
    Ok(())
}

/// An admin chooses `names`; a newcomer's settings page shows it before sharing is turned on; once
/// agreed, a colony's name reaches the dashboard.
async fn colony_names(c: &Browser, day: &Day) -> anyhow::Result<()> {
    let cloud = &day.cloud;
    let set = tests::stack::ingest_cli(
        &cloud.db.url,
        &[
            "tenant",
            "set",
            "--tenant",
            &cloud.tenant.id,
            "--colony-names",
            "names",
        ],
    )?;
    anyhow::ensure!(set.contains("\"names\""), "{set}");
    let home = day.dir.path().join("hive").join(NEWCOMER);
    std::fs::create_dir_all(home.join("colonies").join("release_train"))?;
    // Bound to the user only: this device's id is its own (adopting a device-bound token's identity at
    // the moment sharing is turned on is another test's subject).
    let token = tests::isolation::token(
        &cloud.db.url,
        &cloud.tenant.id,
        "ingest",
        Some(NEWCOMER),
        None,
    )?;
    let token_file = day.dir.path().join("erin.token");
    write_private(&token_file, &format!("{token}\n"))?;
    let agent = Agent::start_with(
        &day.dir.path().join(NEWCOMER).join("agent"),
        Some(&home),
        &[("APIARY_PUSH_HEARTBEAT_INTERVAL_SECS", "1")],
    )
    .await?;
    let result = share_names(c, day, &agent, &home, &token_file).await;
    result.map_err(|e| {
        anyhow::anyhow!(
            "{e:#}\n{NEWCOMER}'s agent log:\n{}",
            tests::agent::tail(&agent.output(), 30)
        )
    })
}

/// On the newcomer's settings page: sharing turned on after seeing the tenant's choice; then a colony
/// created on that device reaches the dashboard by name.
async fn share_names(
    c: &Browser,
    day: &Day,
    agent: &Agent,
    home: &Path,
    token_file: &Path,
) -> anyhow::Result<()> {
    let cloud = &day.cloud;
    let base = settings_sign_in(c, agent).await?;
    c.wait_text("dd[data-field='sync']", "Off").await?;
    c.type_into(&c.find("#endpoint").await?, &cloud.ingest.url())
        .await?;
    c.type_into(
        &c.find("#token_file").await?,
        &token_file.display().to_string(),
    )
    .await?;
    c.click(&c.find("#sync-button").await?).await?;
    // Before anything is switched: the tenant's choice and the person's own.
    c.wait_text("#notice", "Your organisation shares colony names")
        .await?;
    let names = c.find("#colony-names").await?;
    anyhow::ensure!(c.attr(&names, "data-tenant").await?.as_deref() == Some("names"));
    c.wait_text("dd[data-field='sync']", "Off").await?;
    c.find("#share_colony_names:checked").await?;
    c.save_screenshot(&shots(), "settings-colony-names").await?;
    c.click(&c.find("#sync-button").await?).await?;
    c.wait_text("dd[data-field='sync']", "On").await?;
    // The tenant's keys in force (within a heartbeat), names shared: then a colony is created.
    let local = wait_for(Duration::from_secs(30), || {
        let get = agent_colonies(agent);
        async move {
            let v = get.await.ok()?;
            (v["key_scope"] == "tenant" && v["colony_names"]["shared"] == true).then_some(v)
        }
    })
    .await
    .ok_or_else(|| anyhow::anyhow!("erin's agent never shared names"))?;
    let key = local["colonies"][0]["key"]
        .as_str()
        .unwrap_or("")
        .to_string();
    write_colony_day(home)?;
    let read = cloud.read_api();
    // The agent pushes at the cadence the ingest sets: up to 30 s when the ingest is loaded.
    let named = wait_for(Duration::from_secs(75), || {
        let (read, key) = (read.clone(), key.clone());
        async move {
            let v = read.get_ok("/v1/colonies").await.ok()?;
            v["colonies"]
                .as_array()?
                .iter()
                .find(|c| c["colony_key"] == json!(key))
                .filter(|c| c["name"] == "release_train")
                .cloned()
        }
    })
    .await;
    anyhow::ensure!(
        named.is_some(),
        "release_train never reached the dashboard by name"
    );
    c.goto(&format!("{}/colonies", cloud.ingest.url())).await?;
    h1(c, "Colonies").await?;
    c.wait_text("table", "name: release_train").await?;
    c.save_screenshot(&shots(), "colonies-named").await?;
    c.goto(&format!("{base}/settings")).await?;
    c.wait_text("#colony-names", "you agreed").await?;
    Ok(())
}

async fn agent_colonies(agent: &Agent) -> anyhow::Result<Value> {
    let r = tests::stack::client()
        .get(format!("http://{}/v1/colonies", agent.addr))
        .bearer_auth(&agent.token)
        .send()
        .await?;
    Ok(r.json().await?)
}

/// A queen session in `home` that creates colony `release_train` (as Hive writes it).
fn write_colony_day(home: &Path) -> anyhow::Result<()> {
    let sid = "session_20261128_120000_e1e1e1e1";
    let dir = home.join("queens/default/sessions").join(sid);
    std::fs::create_dir_all(&dir)?;
    let now = chrono::Utc::now().naive_utc();
    let at = |s: i64| {
        (now - chrono::TimeDelta::seconds(s))
            .format("%Y-%m-%dT%H:%M:%S%.6f")
            .to_string()
    };
    let lines = [
        json!({"type": "execution_started", "stream_id": "queen", "node_id": null, "execution_id": sid,
               "data": {"input": {"user_message": "ship the release"}}, "timestamp": at(30),
               "correlation_id": null, "colony_id": null, "seq": 1}),
        json!({"type": "colony_created", "stream_id": "queen", "node_id": null, "execution_id": sid,
               "data": {"colony_name": "release_train", "colony_path": "/home/erin/.hive/colonies/release_train",
                        "queen_session_id": sid, "is_new": true}, "timestamp": at(20),
               "correlation_id": null, "colony_id": null, "seq": 2}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(dir.join("events.jsonl"), text)?;
    Ok(())
}

/// Waits until the page's `h1` contains `want`.
async fn h1(c: &Browser, want: &str) -> anyhow::Result<()> {
    c.wait_text("h1", want).await
}
