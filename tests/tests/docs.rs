//! The documentation, run: every runnable command block of `README.md` and the pages of `docs/` (in the
//! order of `docs/README.md`) runs against the real binaries and a real PostgreSQL, starting with the
//! README's manual quickstart on a fresh database; each page's checks (`# → …`, see [`tests::docs`]) must
//! hold, and the quickstart's event must show on the dashboard. Also checked without running anything:
//! every shell block is marked, relative links and anchors resolve, the README stays short, CI still runs
//! the README's test command, and no page, source file or script carries development history.
//!
//! The count of blocks that ran and of blocks marked as not runnable here is printed on stderr.
//! `APIARY_TEST_DOCS_KEEP=1` keeps the run's directory (scripts, output, `HOME`) when it passes too; a failed
//! run always keeps it.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tests::docs::{self, Block, Check, Mark, Substitutions};

/// The session the README's quickstart posts its event to.
const QUICKSTART_SESSION: &str = "session_20261103_101433_51be07d2";

/// The wording of a figure tied to one machine, spelled in two parts so that this file does not hold it.
const ONE_MACHINE: &str = concat!("this", " machine");

/// Upstream source pins that may follow "commit": Hive's `class EventType` was read at this commit
/// (`shared-schema/src/hive/types.rs`). A pin names where a fact was read, not a baseline of ours.
const UPSTREAM_PINS: &[&str] = &["54fd8db4"];

/// Whether `lower` (a lower-cased line) names a commit hash as a baseline: a word such as "commit" or
/// "against" followed by 7 to 40 hex digits (with a digit and a letter among them, so that words and
/// plain numbers pass), other than an [`UPSTREAM_PINS`] entry.
fn names_a_commit_baseline(lower: &str) -> bool {
    const WORDS: [&str; 7] = [
        "commit ",
        "commits ",
        "against ",
        "baseline ",
        "since ",
        "compared with ",
        "relative to ",
    ];
    WORDS.iter().any(|word| {
        lower.match_indices(word).any(|(at, _)| {
            let rest = lower[at + word.len()..].trim_start_matches(['`', '@']);
            let hex: String = rest.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
            let ends = rest[hex.len()..]
                .chars()
                .next()
                .is_none_or(|c| !c.is_ascii_alphanumeric());
            (7..=40).contains(&hex.len())
                && ends
                && hex.chars().any(|c| c.is_ascii_digit())
                && hex.chars().any(|c| c.is_ascii_alphabetic())
                && !UPSTREAM_PINS.contains(&hex.as_str())
        })
    })
}

/// Longest a page's script may run.
const PAGE_TIMEOUT: Duration = Duration::from_secs(300);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

fn read(rel: &Path) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{}: {e}", rel.display()))
}

/// Writes to the test process's stderr directly, past the test harness's capture, so the counts show in
/// `./scripts/test.sh`'s output.
fn say(text: &str) {
    let _ = std::io::stderr().write_all(text.as_bytes());
}

#[test]
fn every_shell_block_is_marked_and_every_link_resolves() {
    let root = root();
    let pages = docs::book(&root).unwrap();
    let mut problems = Vec::new();
    for page in pages.iter().chain([&PathBuf::from("CHANGELOG.md")]) {
        if let Err(e) = docs::shell_blocks(&page.display().to_string(), &read(page)) {
            problems.push(e);
        }
        problems.extend(docs::broken_links(&root, page));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_readme_is_short_and_ci_runs_its_test_command() {
    let readme = read(Path::new("README.md"));
    let lines = readme.lines().count();
    assert!(lines <= 250, "README.md has {lines} lines (at most 250)");
    let blocks = docs::shell_blocks("README.md", &readme).unwrap();
    let quick = blocks
        .iter()
        .find(|b| b.text.iter().any(|l| l.starts_with("./scripts/test.sh")))
        .expect("the README's quickstart names ./scripts/test.sh");
    assert!(
        quick
            .text
            .iter()
            .any(|l| l.starts_with("./deploy/local/demo.sh")),
        "the quickstart names the demo"
    );
    let ci = read(Path::new(".ci/run"));
    assert!(
        ci.lines()
            .any(|l| !l.trim_start().starts_with('#') && l.contains("./scripts/test.sh")),
        ".ci/run no longer runs ./scripts/test.sh, the README's test command"
    );
    for script in ["scripts/test.sh", "deploy/local/demo.sh"] {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(root().join(script))
            .unwrap()
            .permissions()
            .mode();
        assert!(mode & 0o100 != 0, "{script} is not executable");
    }
}

/// Files that speak to users and maintainers: no "issue N" or "session N" (history belongs in commit
/// messages), no commit hash as a baseline ([`names_a_commit_baseline`]), and no figures tied to the one
/// machine they came from (the phrase [`ONE_MACHINE`]). Landed migrations stay byte-identical, so
/// `migrations/` is left out.
#[test]
fn no_page_source_or_script_carries_development_history() {
    // The hash detector itself: baselines are found, the Hive pin, words and numbers are not.
    for line in [
        format!("about 6% faster than commit {}", "d57f4cb"),
        format!("measured against `{}`", "c7d4e4e2a1"),
        format!("p99 relative to {}.", "e507d6d0"),
    ] {
        assert!(names_a_commit_baseline(&line), "{line}");
    }
    for line in [
        "class eventtype at hive commit 54fd8db4",
        "compared with deadbeef and with 20261103",
        "since 1234567 events",
        "commit 3f786850e387550fdab836ed7e6dc881de23001bff (longer than a hash)",
    ] {
        assert!(!names_a_commit_baseline(line), "{line}");
    }
    let root = root();
    let mut found = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            let rel = path.strip_prefix(&root).unwrap().to_path_buf();
            let name = rel.to_string_lossy().to_string();
            if path.is_dir() {
                let skip = ["target", ".git", "migrations", "mutants.out", ".apiary"];
                if !skip
                    .iter()
                    .any(|s| name == *s || name.ends_with(&format!("/{s}")))
                {
                    stack.push(path);
                }
                continue;
            }
            let checked = [".rs", ".md", ".sh", ".py", ".toml", ".yaml", ".service"]
                .iter()
                .any(|e| name.ends_with(e))
                || name == ".ci/run"
                || name.starts_with("deploy/docker/Dockerfile");
            if !checked {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            for (i, line) in text.lines().enumerate() {
                let lower = line.to_lowercase();
                let numbered = |word: &str| {
                    lower.match_indices(word).any(|(at, _)| {
                        lower[at + word.len()..]
                            .chars()
                            .next()
                            .is_some_and(|c| c.is_ascii_digit())
                    })
                };
                if numbered("issue ")
                    || numbered("session ")
                    || lower.contains(ONE_MACHINE)
                    || names_a_commit_baseline(&lower)
                {
                    found.push(format!("{name}:{}: {}", i + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "development history (say it in the commit message instead):\n{}",
        found.join("\n")
    );
}

/// The server of `DATABASE_URL`, split into what the pages' literals need.
struct Server {
    /// `postgres://user[:password]@host:port`
    base: String,
    host: String,
    port: u16,
    user: String,
    password: Option<String>,
}

impl Server {
    fn from_env() -> Server {
        let url = std::env::var("DATABASE_URL")
            .expect("DATABASE_URL is not set: run the tests with ./scripts/test.sh");
        let rest = url.split_once("://").map_or(url.as_str(), |(_, r)| r);
        let (auth, hostpart) = rest.rsplit_once('@').unwrap_or(("postgres", rest));
        let hostport = hostpart
            .split(['/', '?'])
            .next()
            .unwrap_or("127.0.0.1:5432");
        let (host, port) = hostport.rsplit_once(':').unwrap_or((hostport, "5432"));
        let (user, password) = match auth.split_once(':') {
            Some((u, p)) => (u.to_string(), Some(p.to_string())),
            None => (auth.to_string(), None),
        };
        Server {
            base: format!("postgres://{auth}@{host}:{port}"),
            host: host.to_string(),
            port: port.parse().expect("DATABASE_URL's port"),
            user,
            password,
        }
    }
}

/// What the run started, undone when dropped (also when the test fails): the pages' process groups
/// (each page's shell and what it left running) get SIGTERM, then SIGKILL; the fresh database is dropped.
struct Cleanup {
    groups: Vec<u32>,
    admin_url: String,
    database: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for signal in ["-TERM", "-KILL"] {
            for pgid in &self.groups {
                let _ = Command::new("kill")
                    .args([signal, "--", &format!("-{pgid}")])
                    .stderr(Stdio::null())
                    .status();
            }
            std::thread::sleep(Duration::from_millis(500));
        }
        let (admin, name) = (self.admin_url.clone(), self.database.clone());
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                use sqlx::Connection as _;
                let mut conn = sqlx::PgConnection::connect(&admin).await.ok()?;
                sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                    .execute(&mut conn)
                    .await
                    .ok()
            })
        })
        .join();
    }
}

/// Runs one page's script to its end (or the timeout); returns its exit status.
fn run_page(
    script: &Path,
    work: &Path,
    env: &[(String, String)],
    log: &Path,
    cleanup: &mut Cleanup,
) -> Option<i32> {
    use std::os::unix::process::CommandExt as _;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    let mut child = Command::new("bash")
        .arg(script)
        .current_dir(work)
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .process_group(0)
        .spawn()
        .expect("start bash");
    cleanup.groups.push(child.id());
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        if started.elapsed() > PAGE_TIMEOUT {
            let _ = child.kill();
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The variables a page's script left (`declare -p` of plain and exported ones), by name.
fn state_vars(state: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(state).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let rest = l
                .strip_prefix("declare -- ")
                .or_else(|| l.strip_prefix("declare -x "))?;
            let (name, value) = rest.split_once('=')?;
            Some((name.to_string(), value.trim_matches('"').to_string()))
        })
        .collect()
}

/// Signs in to the dashboard with the read token and finds the quickstart's session on its sessions page.
fn dashboard_shows_the_session(base: &str, read_token: &str) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = reqwest::Client::builder()
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap();
        let signed = client
            .post(format!("{base}/sign-in"))
            .header("Origin", base)
            .form(&[("token", read_token)])
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let cookie = signed
            .headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .and_then(|c| c.split(';').next())
            .ok_or_else(|| format!("sign-in answered {} without a cookie", signed.status()))?
            .to_string();
        let page = client
            .get(format!("{base}/sessions"))
            .header("Cookie", cookie)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = page.status();
        let html = page.text().await.map_err(|e| e.to_string())?;
        if status != 200 || !html.contains(QUICKSTART_SESSION) {
            return Err(format!(
                "the dashboard's sessions page ({status}) does not show {QUICKSTART_SESSION}"
            ));
        }
        Ok(())
    })
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[test]
fn the_documented_commands_run_against_a_real_stack() {
    let root = root();
    let pages = docs::book(&root).unwrap();
    let mut all: Vec<(PathBuf, Vec<Block>)> = Vec::new();
    for page in &pages {
        let blocks = docs::shell_blocks(&page.display().to_string(), &read(page)).unwrap();
        all.push((page.clone(), blocks));
    }
    let readme = read(Path::new("README.md"));
    assert!(
        readme.contains(QUICKSTART_SESSION),
        "the README's quickstart posts its event to {QUICKSTART_SESSION}"
    );

    let server = Server::from_env();
    let database = format!("apiary_docs_{}", uuid::Uuid::new_v4().simple());
    let mut subs = Substitutions {
        literal: vec![
            (
                "postgres://postgres@127.0.0.1:5432/apiary".into(),
                format!("{}/{database}", server.base),
            ),
            (
                "createdb -h 127.0.0.1 -U postgres apiary".into(),
                format!(
                    "createdb -h {} -p {} -U {} {database}",
                    server.host, server.port, server.user
                ),
            ),
            (
                "127.0.0.1:5432".into(),
                format!("{}:{}", server.host, server.port),
            ),
        ],
        keep_port: server.port,
        ..Default::default()
    };
    let flat: Vec<Block> = all.iter().flat_map(|(_, b)| b.clone()).collect();
    for (from, _) in &subs.literal {
        assert!(
            flat.iter()
                .filter(|b| b.mark == Mark::Run)
                .any(|b| b.text.iter().any(|l| l.contains(from.as_str()))),
            "no runnable block uses {from:?} any more: update the substitutions of this test"
        );
    }
    let mut ports = subs.collect_ports(&flat);
    ports.extend([4318, 4319]);
    subs.ports = ports.into_iter().map(|p| (p, tests::free_port())).collect();

    let tmp = tempfile::tempdir().unwrap();
    let (home, work, checks_dir) = (
        tmp.path().join("home"),
        tmp.path().join("work"),
        tmp.path().join("checks"),
    );
    for d in [&home, &work, &checks_dir] {
        std::fs::create_dir_all(d).unwrap();
    }
    let bin_dir = tests::bins::path("apiary-agent")
        .parent()
        .unwrap()
        .to_path_buf();
    let _ = tests::bins::path("apiary-ingest");
    let mut env: Vec<(String, String)> = vec![
        (
            "PATH".into(),
            format!(
                "{}:{}",
                bin_dir.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        ),
        ("HOME".into(), home.display().to_string()),
        ("LANG".into(), "C.UTF-8".into()),
        (
            "USER".into(),
            std::env::var("USER").unwrap_or_else(|_| "apiary".into()),
        ),
        // The agent's default addresses, moved to the free ports the pages' literals map to.
        (
            "APIARY_LISTEN".into(),
            format!("127.0.0.1:{}", subs.ports[&4319]),
        ),
        (
            "APIARY_OTLP_LISTEN".into(),
            format!("127.0.0.1:{}", subs.ports[&4318]),
        ),
        ("RUST_LOG".into(), "warn".into()),
    ];
    if let Some(p) = &server.password {
        env.push(("PGPASSWORD".into(), p.clone()));
    }
    let mut cleanup = Cleanup {
        groups: Vec::new(),
        admin_url: format!("{}/postgres", server.base),
        database,
    };

    let log = tmp.path().join("docs.log");
    let state = tmp.path().join("state.sh");
    let mut next_id = 0;
    let mut ran = 0usize;
    let mut commands_checked = 0usize;
    let mut not_run: BTreeMap<String, usize> = BTreeMap::new();
    let mut failure: Option<String> = None;
    for (page, blocks) in &all {
        for b in blocks {
            if let Mark::NotRun(reason) = &b.mark {
                *not_run.entry(reason.clone()).or_default() += 1;
            }
        }
        if failure.is_some() || !blocks.iter().any(|b| b.mark == Mark::Run) {
            continue;
        }
        let (body, checks): (String, Vec<Check>) =
            docs::script_for(blocks, &subs, &mut next_id).unwrap();
        let script = format!(
            "{}[ -f {st} ] && . {st}\n{body}\n{{ declare -p | grep -E '^declare -[-x] [A-Za-z][A-Za-z0-9_]*=' | grep -vE '^declare -[-x] (PWD|OLDPWD|SHLVL|_)=' || true; }} > {st}\n",
            docs::prelude(&checks_dir),
            st = docs::sh_quote(&state.display().to_string())
        );
        let file = tmp.path().join(format!("page-{next_id}.sh"));
        std::fs::write(&file, &script).unwrap();
        let code = run_page(&file, &work, &env, &log, &mut cleanup);
        let mut problems = docs::check_keys(&checks_dir, &checks);
        if code != Some(0) {
            let current = std::fs::read_to_string(checks_dir.join("current")).unwrap_or_default();
            problems.insert(
                0,
                format!(
                    "{} failed at the command on {} ({})",
                    page.display(),
                    current.trim(),
                    code.map_or("timed out".to_string(), |c| format!("exit status {c}"))
                ),
            );
        }
        if page == Path::new("README.md") && problems.is_empty() {
            let vars = state_vars(&state);
            let read_token = vars.get("READ").cloned().unwrap_or_default();
            let base = format!("http://127.0.0.1:{}", subs.ports[&8080]);
            if let Err(e) = dashboard_shows_the_session(&base, &read_token) {
                problems.push(format!("README.md's quickstart: {e}"));
            }
        }
        ran += blocks.iter().filter(|b| b.mark == Mark::Run).count();
        commands_checked += checks.len();
        if !problems.is_empty() {
            failure = Some(format!(
                "{}\n--- the last lines of the run ({}):\n{}",
                problems.join("\n"),
                log.display(),
                tail(&log, 40)
            ));
        }
    }
    let marked: usize = not_run.values().sum();
    let mut summary = format!(
        "docs: {ran} runnable blocks ran ({commands_checked} commands with a checked answer); {marked} blocks are marked as not runnable here:\n"
    );
    for (reason, n) in &not_run {
        let _ = std::fmt::Write::write_fmt(&mut summary, format_args!("  {n} × {reason}\n"));
    }
    say(&summary);
    if failure.is_none() && std::env::var_os("APIARY_TEST_DOCS_KEEP").is_some() {
        say(&format!(
            "docs: the run's files are kept in {}\n",
            tmp.keep().display()
        ));
        return;
    }
    if let Some(f) = failure {
        drop(cleanup);
        let kept = tmp.keep();
        panic!("{f}\n(the run's files are kept in {})", kept.display());
    }
}
