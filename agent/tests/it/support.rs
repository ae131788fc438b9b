//! Helpers shared by the agent's integration tests (outbox, HTTP, crash).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use apiary_agent::identity::IdentityDefaults;
use apiary_agent::outbox::{
    Delivery, Item, Outbox, OutboxSettings, PreparedEvent, SettleReport, SyncChange,
};
use apiary_schema::Policy;
use tests::events;
use uuid::Uuid;

/// Opens an outbox in `dir` with the default policy.
pub fn open(dir: &Path, settings: OutboxSettings) -> Outbox {
    let identity = IdentityDefaults {
        user_id: Some("alice".into()),
        tenant_id: Some("acme".into()),
        device_id: Some("laptop-1".into()),
    };
    Outbox::open(
        &dir.join("outbox.db"),
        settings,
        identity,
        &Policy::default_policy(),
    )
    .unwrap()
}

/// Consent as the desktop toggle gives it (towards a placeholder endpoint).
pub fn enable(include_backlog: bool) -> SyncChange {
    SyncChange::Enable {
        endpoint: "https://ingest.example".into(),
        token_file: "/dev/null".into(),
        include_backlog,
    }
}

/// An outbox in `dir` with sync enabled (no backlog) and events `0..n` submitted.
pub async fn open_syncing(dir: &Path, n: u128) -> Outbox {
    let outbox = open(dir, OutboxSettings::default());
    outbox.set_sync(enable(false)).await.unwrap();
    outbox.submit((0..n).map(event).collect()).await.unwrap();
    outbox
}

/// Acknowledges `ids` as delivered.
pub async fn deliver(outbox: &Outbox, ids: Vec<Uuid>) -> SettleReport {
    outbox
        .ack(ids.into_iter().map(|i| (i, Delivery::Delivered)).collect())
        .await
        .unwrap()
}

/// A synthetic kept event with a predictable id.
pub fn event(n: u128) -> Item {
    let id = Uuid::from_u128(n + 1);
    let body = format!(
        r#"{{"schema_version":1,"event_id":"{id}","type":"llm.turn","occurred_at":"2026-11-03T10:00:00Z","runtime":"hive","session_id":"s{}","agent_role":"queen","native_type":"llm_turn_complete","data":{{"input_tokens":10}}}}"#,
        n % 3
    );
    Item::Kept(PreparedEvent {
        event_id: id,
        kind: apiary_schema::EventKind::LlmTurn,
        session_id: Some(format!("s{}", n % 3)),
        parent_session_id: None,
        occurred_at_ms: 1_793_000_000_000,
        body,
        usage: None,
        status: None,
        work: None,
        tool: None,
    })
}

pub fn id(n: u128) -> Uuid {
    Uuid::from_u128(n + 1)
}

/// A realistic Hive-native `llm_turn_complete` line for session `s`, sequence `seq`.
pub fn hive_turn(session: &str, seq: u64) -> String {
    let data = serde_json::json!({"stop_reason": "tool_use", "model": "claude-sonnet-4-5-20250929",
        "input_tokens": 18250, "output_tokens": 412, "cached_tokens": 12000, "cache_creation_tokens": 0,
        "cost_usd": 0.02958, "iteration": 2});
    events::hive("llm_turn_complete", session, events::hive_day(), seq, data).to_string()
}

/// The `apiary-agent` binary under test.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_apiary-agent"))
}

/// A running agent process on an ephemeral port.
pub struct Agent {
    pub child: Child,
    pub addr: String,
    pub token: String,
}

impl Agent {
    /// Starts `apiary-agent run` in `dir` with extra env vars and waits until it listens.
    #[allow(clippy::zombie_processes)] // the child is waited for by `Agent`'s Drop, or before the panic
    pub fn start(dir: &Path, env: &[(&str, &str)]) -> Agent {
        let _ = std::fs::remove_file(dir.join("agent.addr"));
        let mut cmd = Command::new(bin());
        cmd.args(["run", "--data-dir"])
            .arg(dir)
            .args(["--listen", "127.0.0.1:0"])
            .env("RUST_LOG", "warn")
            .env("APIARY_ZONE", "UTC")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn apiary-agent");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(addr) = std::fs::read_to_string(dir.join("agent.addr")) {
                if !addr.trim().is_empty() {
                    let token = std::fs::read_to_string(dir.join("agent.token")).unwrap();
                    return Agent {
                        child,
                        addr: addr.trim().to_string(),
                        token: token.trim().to_string(),
                    };
                }
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("agent did not start");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// SIGKILL.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A clean stop: SIGTERM, then wait up to `timeout` for the exit (`None` if it had to be killed).
    pub fn terminate(mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        // unsafe_code is denied workspace-wide, so signal through the kill command rather than libc::kill.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Makes a fake ingest answer `GET /v1/whoami` as a real one does for an unbound `ingest` token (the
/// agent asks it when sharing is turned on, and adopts the answer).
pub async fn answer_whoami(ingest: &wiremock::MockServer) {
    use wiremock::matchers::{method, path};
    wiremock::Mock::given(method("GET"))
        .and(path("/v1/whoami"))
        .respond_with(
            wiremock::ResponseTemplate::new(200).set_body_json(serde_json::json!({
                "tenant_id": "acme", "scopes": ["ingest"], "user_id": null, "device_id": null
            })),
        )
        .mount(ingest)
        .await;
}
