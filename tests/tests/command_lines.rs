//! Both command lines behave like Unix tools, black box with the real binaries: no command panics when
//! the reader of its output goes away (`| head -1`), the `text` log format writes no colour codes into a
//! file or pipe (and colours a terminal unless `NO_COLOR`), `token create` gives a script the id that
//! `token revoke` takes, `alert destination create` reads the ingest's configuration like `serve`, and the
//! agent without `--data-dir` uses the XDG data directory and writes `run --log-file` privately.

use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::json;
use tests::agent::Agent;
use tests::bins;
use tests::pipes::{closed_stdout, through_head, Ended};
use tests::procs::last_line;
use tests::stack::{ingest_cli, migrate, Api, Cloud, Ingest, Tenant};

/// Longest one command may take here.
const LIMIT: Duration = Duration::from_secs(60);

/// A Postgres URL nothing answers on (port 1).
const NOWHERE: &str = "postgres://postgres@127.0.0.1:1/none";

fn command(bin: &str, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(bins::path(bin));
    cmd.args(args)
        .env("RUST_LOG", "warn")
        .env("APIARY_ZONE", "UTC")
        .envs(env.iter().copied());
    cmd
}

/// One command line to run three ways.
struct Case {
    bin: &'static str,
    args: Vec<String>,
    env: Vec<(&'static str, String)>,
    /// Its output never ends by itself (`follow`): no complete run to compare with.
    endless: bool,
    /// Its first line differs from run to run after this many characters (a new id each time).
    stable_prefix: Option<usize>,
}

impl Case {
    fn command(&self) -> Command {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = self.env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        command(self.bin, &args, &env)
    }

    fn name(&self) -> String {
        format!("{} {}", self.bin, self.args.join(" "))
    }

    /// Runs it with its reader gone from the start, and through `head -1`; checks neither complains,
    /// both end as a complete run does (the same exit status), and `head` got the first line.
    fn check(&self) {
        let name = self.name();
        let (first, status) = if self.endless {
            (None, Some(0))
        } else {
            let out = self.command().stdin(Stdio::null()).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            assert!(
                text.lines().count() > 1,
                "{name}: prints a single line; the check needs more:\n{text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            (text.lines().next().map(str::to_string), out.status.code())
        };
        let closed = closed_stdout(self.command(), LIMIT).unwrap();
        assert_quiet(&name, "with its stdout closed", &closed, status);
        let (got, ended) = through_head(self.command(), LIMIT).unwrap();
        assert_quiet(&name, "piped to head -1", &ended, status);
        let cut = |l: &str| l[..self.stable_prefix.unwrap_or(l.len()).min(l.len())].to_string();
        match first {
            Some(line) => assert_eq!(cut(got.trim_end()), cut(&line), "{name} | head -1"),
            None => assert_eq!(got.lines().count(), 1, "{name} | head -1: {got}"),
        }
    }
}

fn assert_quiet(name: &str, how: &str, ended: &Ended, status: Option<i32>) {
    assert!(
        !ended.complained(),
        "{name} {how} complained:\n{}",
        ended.stderr
    );
    assert_eq!(
        ended.status.map(|s| s.code()),
        Some(status),
        "{name} {how}: not the exit status of a complete run (None: still running after {LIMIT:?}); \
         stderr:\n{}",
        ended.stderr
    );
}

/// Every listing of both binaries (and a command that prints a secret once) read by `head -1`, or by
/// a reader that is already gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_command_panics_when_the_reader_of_its_output_goes_away() {
    let cloud = Cloud::start().await.unwrap();
    let (db, tenant) = (cloud.db.url.clone(), cloud.tenant.id.clone());
    let admin = cloud.admin_api();
    for (body, path) in [
        (
            json!({"period": "month", "limit_usd": "10", "name": "team"}),
            "/v1/budgets",
        ),
        (
            json!({"period": "day", "limit_tokens": 1000, "scope": {"user": "alice"}}),
            "/v1/budgets",
        ),
        (
            json!({"kind": "slack", "url": "https://hooks.slack.com/services/T0/B0/x"}),
            "/v1/alerts/destinations",
        ),
    ] {
        post(&admin, path, &body).await;
    }
    let (_, dests) = admin.get("/v1/alerts/destinations").await.unwrap();
    let dest = dests["destinations"][0]["destination_id"].as_str().unwrap();
    post(
        &admin,
        "/v1/alerts/rules",
        &json!({"kind": "silence", "destination_id": dest}),
    )
    .await;
    // A device with events in its outbox (status, follow), and a Hive log to explain.
    let data = cloud.dir.path().join("agent");
    let agent = Agent::start(&data, None).await.unwrap();
    let turns = tests::fixture::synthetic_turns("s-pipe", 0, 30);
    let (code, _) = agent.post_events(turns.clone()).await.unwrap();
    assert_eq!(code, 200);
    let log = cloud.dir.path().join("events.jsonl");
    std::fs::write(&log, &turns).unwrap();

    let data = data.to_string_lossy().into_owned();
    let log = log.to_string_lossy().into_owned();
    let ingest = |args: &[&str]| Case {
        bin: "apiary-ingest",
        args: args.iter().map(|a| a.to_string()).collect(),
        env: vec![
            ("DATABASE_URL", db.clone()),
            ("APIARY_LISTEN", "127.0.0.1:0".into()),
        ],
        endless: false,
        stable_prefix: None,
    };
    let agent_case = |args: &[&str], endless: bool| Case {
        bin: "apiary-agent",
        args: args.iter().map(|a| a.to_string()).collect(),
        env: vec![],
        endless,
        stable_prefix: None,
    };
    let cases = [
        ingest(&["price", "list", "--tenant", &tenant]),
        ingest(&["budget", "list", "--tenant", &tenant]),
        ingest(&["alert", "destination", "list", "--tenant", &tenant]),
        ingest(&["alert", "rule", "list", "--tenant", &tenant]),
        ingest(&["doctor"]),
        Case {
            stable_prefix: Some("token_id: ".len()),
            ..ingest(&["token", "create", "--tenant", &tenant, "--scope", "read"])
        },
        ingest(&["--help"]),
        agent_case(&["status", "--data-dir", &data], false),
        agent_case(&["status", "--json", "--data-dir", &data], false),
        agent_case(&["doctor", "--data-dir", &data], false),
        agent_case(&["policy", "explain", &log, "--zone", "UTC"], false),
        agent_case(&["follow", "--data-dir", &data], true),
        agent_case(&["--help"], false),
    ];
    // New events keep arriving, so `follow` writes again after `head` has gone (as `tail -f | head -1`,
    // it can only notice then).
    let ticker = {
        let (addr, token) = (agent.addr, agent.token.clone());
        tokio::spawn(async move {
            let http = tests::stack::client();
            for seq in 1000.. {
                let _ = http
                    .post(format!("http://{addr}/v1/events"))
                    .bearer_auth(&token)
                    .header("content-type", "application/x-ndjson")
                    .body(tests::fixture::synthetic_turns("s-tick", seq, 1))
                    .send()
                    .await;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };
    tokio::task::block_in_place(|| {
        for case in &cases {
            case.check();
        }
    });
    ticker.abort();
}

async fn post(api: &Api, path: &str, body: &serde_json::Value) {
    let r = tests::stack::client()
        .post(format!("{}{path}", api.base))
        .bearer_auth(&api.token)
        .json(body)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{path}: {}", r.status());
}

/// Whether `text` holds an ANSI escape sequence.
fn coloured(text: &str) -> bool {
    text.contains('\u{1b}')
}

/// `apiary-ingest migrate` against a database nobody serves, with a variable it does not know: one
/// `WARN` log line (the variable), then its error. Run on a terminal (`script` gives it one) when
/// `on_terminal`.
fn warning_run(on_terminal: bool, no_color: Option<&str>) -> String {
    let bin = bins::path("apiary-ingest");
    let mut cmd = if on_terminal {
        let mut c = Command::new("script");
        c.args(["-qec", &format!("'{}' migrate", bin.display()), "/dev/null"]);
        c
    } else {
        let mut c = Command::new(&bin);
        c.arg("migrate");
        c
    };
    cmd.env("DATABASE_URL", NOWHERE)
        .env("APIARY_LOG_FORMAT", "text")
        .env("APIARY_QQQQQQQQQQQQQQQQ", "1")
        .env("RUST_LOG", "warn")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null());
    if let Some(v) = no_color {
        cmd.env("NO_COLOR", v);
    }
    let out = cmd.output().expect("run");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("APIARY_QQQQQQQQQQQQQQQQ"),
        "no warning logged:\n{text}"
    );
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_are_coloured_only_on_a_terminal_without_no_color() {
    // Into a file: the agent's log of a run, the ingest's warning.
    let dir = tempfile::tempdir().unwrap();
    let mut agent = Agent::start_with(dir.path(), None, &[("APIARY_LOG_FORMAT", "text")])
        .await
        .unwrap();
    agent.terminate(Duration::from_secs(10));
    let log = agent.output();
    assert!(log.contains("INFO"), "{log}");
    assert!(
        !coloured(&log),
        "the agent's log file holds colour codes:\n{log:?}"
    );
    let file = dir.path().join("ingest.log");
    let status = command("apiary-ingest", &["migrate"], &[])
        .env("DATABASE_URL", NOWHERE)
        .env("APIARY_LOG_FORMAT", "text")
        .env("APIARY_QQQQQQQQQQQQQQQQ", "1")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&file).unwrap())
        .status()
        .unwrap();
    assert!(!status.success());
    let log = std::fs::read_to_string(&file).unwrap();
    assert!(log.contains("WARN"), "{log}");
    assert!(
        !coloured(&log),
        "the ingest's log file holds colour codes:\n{log:?}"
    );
    // Into a pipe.
    assert!(!coloured(&warning_run(false, None)));
    // On a terminal: coloured, unless NO_COLOR says otherwise (an empty one does not).
    assert!(
        coloured(&warning_run(true, None)),
        "no colour on a terminal"
    );
    assert!(coloured(&warning_run(true, Some(""))), "an empty NO_COLOR");
    let plain = warning_run(true, Some("1"));
    assert!(!coloured(&plain), "NO_COLOR=1 on a terminal: {plain:?}");
}

/// The documented way to script `token create`: the id from its `token_id:` line, the token from the
/// last line; `token revoke --token-id` with that id revokes that very token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_reads_the_token_and_its_id_from_token_create() {
    let cloud = Cloud::start().await.unwrap();
    let script = r#"
set -eu
out=$("$INGEST" token create --tenant "$TENANT" --scope read 2>/dev/null)
id=$(printf '%s\n' "$out" | sed -n 's/^token_id: //p')
token=$(printf '%s\n' "$out" | tail -n 1)
test -n "$id"
"$INGEST" token revoke --token-id "$id"
printf 'out<%s>\nid<%s>\ntoken<%s>\n' "$out" "$id" "$token"
"#;
    let out = Command::new("sh")
        .args(["-c", script])
        .env("INGEST", bins::path("apiary-ingest"))
        .env("TENANT", &cloud.tenant.id)
        .env("DATABASE_URL", &cloud.db.url)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let between = |tag: &str| -> String {
        let start = text.find(&format!("{tag}<")).unwrap() + tag.len() + 1;
        let end = start + text[start..].find('>').unwrap();
        text[start..end].to_string()
    };
    let (stdout, id, token) = (between("out"), between("id"), between("token"));
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "{text}");
    assert!(token.starts_with("apy_"), "{text}");
    // Two lines: the id, then the token alone.
    assert_eq!(stdout, format!("token_id: {id}\n{token}"));
    assert!(text.contains(&format!("revoked {id}")), "{text}");
    let (status, _) = Api::new(&cloud.ingest.url(), &token)
        .get("/v1/whoami")
        .await
        .unwrap();
    assert_eq!(status, 401, "the revoked id was not this token's");
}

/// `alerts.allow_private_destinations` from the same places as `serve` takes it: the config file
/// (`--config` or `APIARY_CONFIG`) and the environment; refused without it, with the way to give it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_destination_create_reads_the_ingest_configuration() {
    let db = tests::db::TestDb::create().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let url = db.url.clone();
    let tenant = tokio::task::spawn_blocking(move || {
        migrate(&url)?;
        Tenant::create(&url, "acme")
    })
    .await
    .unwrap()
    .unwrap();
    let config = dir.path().join("ingest.toml");
    std::fs::write(&config, "[alerts]\nallow_private_destinations = true\n").unwrap();
    let config = config.to_string_lossy().into_owned();
    let hook = "http://127.0.0.1:9/hook";
    let create = |extra: &[&str], env: &[(&str, &str)]| {
        let mut args = vec![
            "alert",
            "destination",
            "create",
            "--tenant",
            &tenant.id,
            "--kind",
            "webhook",
            "--url",
            hook,
        ];
        args.extend(extra);
        let out = command("apiary-ingest", &args, env)
            .env("DATABASE_URL", &db.url)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    tokio::task::block_in_place(|| {
        let (code, _, err) = create(&[], &[]);
        assert_eq!(code, Some(1), "{err}");
        for way in [
            "alerts.allow_private_destinations",
            "--config FILE",
            "APIARY_CONFIG=FILE",
            "APIARY_ALERTS_ALLOW_PRIVATE_DESTINATIONS=true",
        ] {
            assert!(err.contains(way), "the refusal does not say {way:?}: {err}");
        }
        for (extra, env) in [
            (vec!["--config", config.as_str()], vec![]),
            (vec![], vec![("APIARY_CONFIG", config.as_str())]),
            (
                vec![],
                vec![("APIARY_ALERTS_ALLOW_PRIVATE_DESTINATIONS", "true")],
            ),
        ] {
            let (code, out, err) = create(&extra, &env);
            assert_eq!(code, Some(0), "{extra:?} {env:?}: {err}");
            assert!(last_line(&out).starts_with("ad_"), "{out}");
        }
        // A refusal the setting would not lift names no setting.
        let out = ingest_cli(
            &db.url,
            &[
                "alert",
                "destination",
                "create",
                "--tenant",
                &tenant.id,
                "--kind",
                "webhook",
                "--url",
                "ftp://hooks.example.com/x",
            ],
        );
        let err = format!("{:#}", out.unwrap_err());
        assert!(!err.contains("APIARY_CONFIG"), "{err}");
    });
    // `serve` given the same file takes the same destination over the API.
    let ingest = Ingest::start_with(&db.url, dir.path(), &[("APIARY_CONFIG", &config)])
        .await
        .unwrap();
    let r = tests::stack::client()
        .post(format!("{}/v1/alerts/destinations", ingest.url()))
        .bearer_auth(&tenant.admin_token)
        .json(&json!({"kind": "webhook", "url": hook}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
}

/// Starts `apiary-agent run` with `HOME` = `home` (and `XDG_DATA_HOME` when given), no data directory
/// named; waits for `agent.addr` in `expected_dir`.
async fn run_without_data_dir(
    home: &std::path::Path,
    xdg: Option<&std::path::Path>,
    expected_dir: &std::path::Path,
    log_file: &std::path::Path,
) -> tests::procs::Proc {
    let mut cmd = command(
        "apiary-agent",
        &[
            "run",
            "--listen",
            "127.0.0.1:0",
            "--otlp-listen",
            "127.0.0.1:0",
        ],
        &[("RUST_LOG", "info")],
    );
    cmd.arg("--log-file")
        .arg(log_file)
        .env("HOME", home)
        .env_remove("APIARY_DATA_DIR")
        .env_remove("XDG_DATA_HOME");
    if let Some(x) = xdg {
        cmd.env("XDG_DATA_HOME", x);
    }
    let out = home.join("run.out");
    let proc = tests::procs::Proc::spawn("apiary-agent", cmd, &out).unwrap();
    let up = tests::procs::wait_for(LIMIT, || async {
        expected_dir.join("agent.addr").exists().then_some(())
    })
    .await;
    assert!(
        up.is_some(),
        "no agent.addr in {}; output:\n{}\nlog:\n{}",
        expected_dir.display(),
        proc.output(),
        std::fs::read_to_string(log_file).unwrap_or_default()
    );
    proc
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_data_dir_the_agent_uses_the_xdg_data_directory_and_logs_privately_to_a_file() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    let default_dir = home.path().join(".local/share/apiary");
    let log = home.path().join("logs/agent.log");
    let mut proc = run_without_data_dir(home.path(), None, &default_dir, &log).await;
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&default_dir), 0o700);
    assert_eq!(mode(&log), 0o600, "the log file is private");
    let written = std::fs::read_to_string(&log).unwrap();
    assert!(written.contains("listening"), "{written}");
    assert!(
        !proc.output().contains("listening"),
        "the log went to the file, not stderr"
    );
    let status = proc.terminate(LIMIT);
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    // `status` finds the same directory without being told.
    let out = command("apiary-agent", &["status", "--json"], &[])
        .env("HOME", home.path())
        .env_remove("APIARY_DATA_DIR")
        .env_remove("XDG_DATA_HOME")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // XDG_DATA_HOME wins over ~/.local/share.
    let xdg = home.path().join("xdg");
    let mut proc = run_without_data_dir(home.path(), Some(&xdg), &xdg.join("apiary"), &log).await;
    let _ = proc.terminate(LIMIT);
}
