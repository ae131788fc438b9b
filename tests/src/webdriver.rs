//! A small W3C WebDriver client over the workspace's `reqwest`, enough to drive a real browser in the
//! dashboard's browser test: sessions, navigation, elements (find, text, attribute, property, click,
//! type), scripts, key actions, window size and screenshots. `chromedriver` (Debian's `chromium-driver`)
//! is started as a child process on a free port ([`Driver::start`]).
//!
//! Why not fantoccini or thirtyfour: fantoccini needs the `webdriver` crate, licensed MPL-2.0, which
//! `deny.toml` does not allow; thirtyfour brings a second major version of `reqwest`. The protocol is
//! JSON over HTTP (<https://www.w3.org/TR/webdriver2/>), so this is the whole of what the test uses.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Context as _;
use base64::Engine as _;
use serde_json::{json, Value};

use crate::procs::{wait_for, Proc};

/// The key that names an element reference in the protocol.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// Special keys of the protocol's key actions.
pub const TAB: &str = "\u{E004}";
pub const ENTER: &str = "\u{E007}";

/// A running `chromedriver`.
pub struct Driver {
    /// Killed on drop.
    _proc: Proc,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
}

impl Driver {
    /// Starts `chromedriver` on a free port (log in `dir/chromedriver.log`) and waits until it is ready.
    pub async fn start(chromedriver: &Path, dir: &Path) -> anyhow::Result<Driver> {
        let port = crate::free_port();
        let mut cmd = Command::new(chromedriver);
        cmd.arg(format!("--port={port}"));
        let proc = Proc::spawn("chromedriver", cmd, &dir.join("chromedriver.log"))?;
        let url = format!("http://127.0.0.1:{port}");
        let http = crate::stack::client();
        let ready = wait_for(Duration::from_secs(20), || {
            let (http, status) = (http.clone(), format!("{url}/status"));
            async move {
                let v: Value = http.get(status).send().await.ok()?.json().await.ok()?;
                v["value"]["ready"].as_bool().filter(|r| *r)
            }
        })
        .await;
        anyhow::ensure!(ready.is_some(), "chromedriver not ready: {}", proc.output());
        Ok(Driver { _proc: proc, url })
    }
}

/// A browser session.
pub struct Browser {
    http: reqwest::Client,
    /// `DRIVER/session/ID`.
    base: String,
}

/// An element of the current page.
#[derive(Debug, Clone)]
pub struct Element(String);

impl Browser {
    /// A new session with the given capabilities (`alwaysMatch`).
    pub async fn new(driver: &Driver, capabilities: Value) -> anyhow::Result<Browser> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(60))
            .build()?;
        let v = send(
            &http,
            reqwest::Method::POST,
            &format!("{}/session", driver.url),
            Some(json!({ "capabilities": { "alwaysMatch": capabilities } })),
        )
        .await
        .context("new WebDriver session")?;
        let id = v["sessionId"]
            .as_str()
            .context("no sessionId in the answer")?;
        Ok(Browser {
            http,
            base: format!("{}/session/{id}", driver.url),
        })
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        send(&self.http, method, &format!("{}{path}", self.base), body).await
    }

    async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.call(reqwest::Method::GET, path, None).await
    }

    pub async fn goto(&self, url: &str) -> anyhow::Result<()> {
        self.post("/url", json!({ "url": url })).await.map(drop)
    }

    /// The current URL's path.
    pub async fn path(&self) -> anyhow::Result<String> {
        let url = self.get("/url").await?;
        let url = url.as_str().context("url is not a string")?;
        let after_host = url.splitn(4, '/').nth(3).unwrap_or("");
        let path = after_host.split(['?', '#']).next().unwrap_or("");
        Ok(format!("/{path}"))
    }

    pub async fn source(&self) -> anyhow::Result<String> {
        Ok(self
            .get("/source")
            .await?
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// The first element matching the CSS selector.
    pub async fn find(&self, css: &str) -> anyhow::Result<Element> {
        let v = self
            .post("/element", json!({ "using": "css selector", "value": css }))
            .await
            .with_context(|| format!("find {css}"))?;
        let id = v[ELEMENT].as_str().context("no element reference")?;
        Ok(Element(id.to_string()))
    }

    pub async fn text(&self, e: &Element) -> anyhow::Result<String> {
        let v = self.get(&format!("/element/{}/text", e.0)).await?;
        Ok(v.as_str().unwrap_or_default().to_string())
    }

    /// Waits (up to 10 s) until the element `css` exists and its text contains `want`; the error names
    /// the text it last read.
    pub async fn wait_text(&self, css: &str, want: &str) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut last = String::new();
        while std::time::Instant::now() < deadline {
            if let Ok(e) = self.find(css).await {
                if let Ok(text) = self.text(&e).await {
                    if text.contains(want) {
                        return Ok(());
                    }
                    last = text;
                }
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        anyhow::bail!("{css} never read {want:?} (last: {last:?})")
    }

    /// An attribute as written in the HTML.
    pub async fn attr(&self, e: &Element, name: &str) -> anyhow::Result<Option<String>> {
        let v = self
            .get(&format!("/element/{}/attribute/{name}", e.0))
            .await?;
        Ok(v.as_str().map(str::to_string))
    }

    /// A DOM property (e.g. an input's current `value`).
    pub async fn prop(&self, e: &Element, name: &str) -> anyhow::Result<Option<String>> {
        let v = self
            .get(&format!("/element/{}/property/{name}", e.0))
            .await?;
        Ok(v.as_str().map(str::to_string))
    }

    pub async fn click(&self, e: &Element) -> anyhow::Result<()> {
        self.post(&format!("/element/{}/click", e.0), json!({}))
            .await
            .map(drop)
    }

    pub async fn type_into(&self, e: &Element, text: &str) -> anyhow::Result<()> {
        self.post(&format!("/element/{}/value", e.0), json!({ "text": text }))
            .await
            .map(drop)
    }

    /// Runs `script` (a function body) in the page and returns its value.
    pub async fn execute(&self, script: &str) -> anyhow::Result<Value> {
        self.post("/execute/sync", json!({ "script": script, "args": [] }))
            .await
    }

    /// Presses and releases `key` (a character or one of [`TAB`], [`ENTER`]) on the keyboard.
    pub async fn press(&self, key: &str) -> anyhow::Result<()> {
        let actions = json!({ "actions": [{ "type": "key", "id": "keyboard", "actions": [
            { "type": "keyDown", "value": key }, { "type": "keyUp", "value": key } ] }] });
        self.post("/actions", actions).await.map(drop)
    }

    pub async fn set_window_size(&self, width: u32, height: u32) -> anyhow::Result<()> {
        self.post("/window/rect", json!({ "width": width, "height": height }))
            .await
            .map(drop)
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> anyhow::Result<Vec<u8>> {
        let v = self.get("/screenshot").await?;
        let b64 = v.as_str().context("screenshot is not a string")?;
        Ok(base64::engine::general_purpose::STANDARD.decode(b64)?)
    }

    /// A Chrome DevTools Protocol command through chromedriver (e.g. `Emulation.setEmulatedMedia`).
    /// Saves a screenshot as `<dir>/<name>.png`, where `<dir>` is `APIARY_SCREENSHOT_DIR` or else
    /// `<default_dir>` (the test's own folder under the target directory).
    pub async fn save_screenshot(&self, default_dir: &Path, name: &str) -> anyhow::Result<()> {
        let dir = std::env::var_os("APIARY_SCREENSHOT_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| default_dir.to_path_buf());
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(format!("{name}.png")), self.screenshot().await?)?;
        Ok(())
    }

    /// The focused element, as `#id`, or else its tag and text (`a:Sessions`).
    pub async fn focused(&self) -> anyhow::Result<String> {
        let v = self
            .execute(
                "const e = document.activeElement; \
                 return e.id ? '#' + e.id : e.tagName.toLowerCase() + ':' + e.textContent.trim();",
            )
            .await?;
        Ok(v.as_str().unwrap_or_default().to_string())
    }

    pub async fn cdp(&self, cmd: &str, params: Value) -> anyhow::Result<Value> {
        self.post("/goog/cdp/execute", json!({ "cmd": cmd, "params": params }))
            .await
    }

    /// Ends the session (closes the browser).
    pub async fn quit(self) -> anyhow::Result<()> {
        self.call(reqwest::Method::DELETE, "", None).await.map(drop)
    }
}

/// The first executable `name` on `PATH`.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Chromium and chromedriver, or None (after saying why, naming the `what` browser test) when either
/// is missing and the browser is not required: with `APIARY_REQUIRE_BROWSER` set (CI sets it) a
/// missing one fails the test.
pub fn browser_tools(what: &str) -> Option<(PathBuf, PathBuf)> {
    let chromium = std::env::var_os("APIARY_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| on_path("chromium"))
        .or_else(|| on_path("chromium-browser"));
    let driver = on_path("chromedriver");
    match (chromium, driver) {
        (Some(c), Some(d)) => Some((c, d)),
        (c, d) => {
            let missing = [("chromium", c.is_none()), ("chromedriver", d.is_none())]
                .iter()
                .filter(|(_, m)| *m)
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(" and ");
            assert!(
                std::env::var_os("APIARY_REQUIRE_BROWSER").is_none(),
                "APIARY_REQUIRE_BROWSER is set but not on PATH: {missing} (run scripts/browser.sh)"
            );
            // Straight to stderr: the test harness captures `eprintln!`, and a skip must be seen.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {what} browser test: not on PATH: {missing} (run scripts/browser.sh; \
                 set APIARY_REQUIRE_BROWSER=1 to make this a failure)"
            );
            None
        }
    }
}

/// A headless Chromium session (1280×900) with a fresh profile.
pub async fn start_headless(
    chromium: &Path,
    driver: &Driver,
    profile: &Path,
) -> anyhow::Result<Browser> {
    let args = [
        "--headless".to_string(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-dev-shm-usage".into(),
        "--no-first-run".into(),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        "--disable-sync".into(),
        "--window-size=1280,900".into(),
        format!("--user-data-dir={}", profile.display()),
    ];
    let caps = json!({ "browserName": "chrome", "goog:chromeOptions": { "binary": chromium, "args": args } });
    Browser::new(driver, caps).await
}

/// One command: the answer's `value`, or its `error` and `message` as an error.
async fn send(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    body: Option<Value>,
) -> anyhow::Result<Value> {
    let mut req = http.request(method.clone(), url);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req
        .send()
        .await
        .with_context(|| format!("{method} {url}"))?;
    let status = resp.status();
    let v: Value = resp
        .json()
        .await
        .with_context(|| format!("{method} {url}: not JSON"))?;
    let value = v.get("value").cloned().unwrap_or(Value::Null);
    if !status.is_success() || value.get("error").is_some() {
        anyhow::bail!(
            "WebDriver {method} {url}: {} {}: {}",
            status.as_u16(),
            value["error"].as_str().unwrap_or("error"),
            value["message"].as_str().unwrap_or("")
        );
    }
    Ok(value)
}
