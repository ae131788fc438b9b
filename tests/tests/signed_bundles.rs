//! Air-gapped bundles that prove where they came from, with the real `apiary-agent` and `apiary-ingest`:
//! - `export` seals the bundle with the device key (`identity show` prints it); `import` refuses it until
//!   an admin registers that key (`device register`), then binds every event to the key's user and
//!   device; the same bundle again is all duplicates;
//! - a byte changed anywhere in the file is refused with the reason, nothing stored;
//! - a bundle sealed by bob's device holding events of alice's session has those events refused one by
//!   one, as bob's token would online;
//! - key rotation: once a new key replaces the old (`device register --replace` revokes it), bundles of
//!   the old key are refused whatever their date, unless the admin vouches for one explicitly
//!   (`--trust-unsigned --as-user --device`);
//! - an online agent whose token is bound to its device registers its key itself, so its exports import
//!   without an admin.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use tests::agent::Agent;
use tests::isolation::{self, body, turn, verdicts};
use tests::procs::{last_line, wait_for};
use tests::stack::{ingest_cli, Api, Cloud};

/// Runs blocking CLI work off the async workers.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> anyhow::Result<T> + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap().unwrap()
}

/// `apiary-ingest ARGS` on the cloud's database: Ok(stdout) or Err(its output, stderr included).
async fn ingest(cloud: &Cloud, args: &[&str]) -> Result<String, String> {
    let url = cloud.db.url.clone();
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        ingest_cli(&url, &args).map_err(|e| format!("{e:#}"))
    })
    .await
    .unwrap()
}

/// `import FILE --tenant T [extra]` → the JSON summary, or the refusal's text.
async fn import(cloud: &Cloud, file: &Path, extra: &[&str]) -> Result<Value, String> {
    let f = file.to_string_lossy().into_owned();
    let mut args = vec!["import", f.as_str(), "--tenant", cloud.tenant.id.as_str()];
    args.extend_from_slice(extra);
    let out = ingest(cloud, &args).await?;
    Ok(serde_json::from_str(&last_line(&out)).expect("a JSON summary"))
}

/// An air-gapped agent of `user` whose device is `device`.
async fn airgapped(cloud: &Cloud, name: &str, user: &str, device: &str) -> Agent {
    let env = [
        ("APIARY_MODE", "airgapped"),
        ("APIARY_IDENTITY_USER_ID", user),
        ("APIARY_IDENTITY_DEVICE_ID", device),
    ];
    Agent::start_with(&cloud.dir.path().join(name), None, &env)
        .await
        .unwrap()
}

/// Posts canonical events to the agent and waits until they are pending.
async fn feed(agent: &Agent, events: &[Value]) {
    let before = agent.counters().await.unwrap().pending;
    let body: String = events.iter().map(|e| format!("{e}\n")).collect();
    let (s, v) = agent.post_events(body.into_bytes()).await.unwrap();
    assert!(s == 200 || s == 202, "{s} {v}");
    let want = before + events.len() as u64;
    agent
        .wait_counters(Duration::from_secs(30), "events pending", |c| {
            c.pending == want
        })
        .await
        .unwrap();
}

/// `export --out DIR/NAME`.
fn export(agent: &Agent, name: &str) -> PathBuf {
    let out = agent.data_dir.parent().unwrap().join(name);
    agent
        .cli(&["export", "--out", &out.to_string_lossy()])
        .unwrap();
    out
}

/// `identity show --json` of the agent's data directory.
fn identity(agent: &Agent) -> Value {
    serde_json::from_str(&agent.cli(&["identity", "show", "--json"]).unwrap()).unwrap()
}

/// `device register` of the agent's key for `user` and `device` (plus `extra` flags).
async fn register(
    cloud: &Cloud,
    agent: &Agent,
    user: &str,
    device: &str,
    extra: &[&str],
) -> Result<String, String> {
    let key = identity(agent)["public_key"].as_str().unwrap().to_string();
    let mut args = vec![
        "device",
        "register",
        "--tenant",
        cloud.tenant.id.as_str(),
        "--user",
        user,
        "--device",
        device,
        "--public-key",
        key.as_str(),
    ];
    args.extend_from_slice(extra);
    ingest(cloud, &args).await.map(|out| last_line(&out))
}

/// Stored events of the cloud.
async fn stored_events(cloud: &Cloud) -> i64 {
    let pool = sqlx::PgPool::connect(&cloud.db.url).await.unwrap();
    let n = sqlx::query_scalar("SELECT count(*) FROM events")
        .fetch_one(&pool)
        .await
        .unwrap();
    pool.close().await;
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sealed_export_imports_as_its_registered_device_once_and_a_changed_byte_is_refused() {
    let cloud = Cloud::start().await.unwrap();
    let agent = airgapped(&cloud, "air", "alice", "alice-air").await;
    let shown = identity(&agent);
    assert!(
        shown["public_key"]
            .as_str()
            .unwrap()
            .starts_with("ed25519:"),
        "{shown}"
    );
    assert!(
        shown["fingerprint"]
            .as_str()
            .unwrap()
            .starts_with("SHA256:"),
        "{shown}"
    );
    assert_eq!(shown["device_id"], "alice-air");
    feed(
        &agent,
        &[turn("s-air", 100), turn("s-air", 200), turn("s-air", 300)],
    )
    .await;
    let bundle = export(&agent, "air.ndjson.gz");

    // Not registered yet: refused, with what to do.
    let err = import(&cloud, &bundle, &[]).await.unwrap_err();
    assert!(err.contains("not registered in this tenant"), "{err}");
    assert!(err.contains("apiary-ingest device register"), "{err}");
    assert_eq!(stored_events(&cloud).await, 0);

    let fingerprint = register(&cloud, &agent, "alice", "alice-air", &[])
        .await
        .unwrap();
    assert_eq!(fingerprint, shown["fingerprint"].as_str().unwrap());

    // Every byte class of the file changed: header, compressed data, trailer — refused, nothing stored.
    let bytes = std::fs::read(&bundle).unwrap();
    let n = bytes.len();
    let positions = [
        0,
        1,
        3,
        4,
        8,
        9,
        10,
        11,
        n / 4,
        n / 2,
        3 * n / 4,
        n - 9,
        n - 5,
        n - 1,
    ];
    let mut reasons = std::collections::BTreeSet::new();
    for i in positions {
        let mut changed = bytes.clone();
        changed[i] ^= 0xff;
        let path = cloud.dir.path().join(format!("changed-{i}.gz"));
        std::fs::write(&path, &changed).unwrap();
        let err = import(&cloud, &path, &[])
            .await
            .expect_err(&format!("byte {i} of {n} changed was imported"));
        let reason = err
            .split_once("apiary-ingest: ")
            .map(|(_, r)| r.trim().replace(&path.display().to_string(), "FILE"))
            .unwrap_or_default();
        assert!(!reason.is_empty(), "byte {i}: no reason in {err}");
        reasons.insert(reason);
    }
    assert!(
        reasons.iter().any(|r| r.starts_with("signature refused")),
        "the header's bytes fail on the seal: {reasons:#?}"
    );
    assert_eq!(stored_events(&cloud).await, 0);

    let first = import(&cloud, &bundle, &[]).await.unwrap();
    assert_eq!(
        (first["accepted"].as_u64(), first["duplicates"].as_u64()),
        (Some(3), Some(0)),
        "{first}"
    );
    assert_eq!(first["signed_by"], shown["fingerprint"]);
    assert_eq!(
        (first["user_id"].as_str(), first["device_id"].as_str()),
        (Some("alice"), Some("alice-air"))
    );
    let again = import(&cloud, &bundle, &[]).await.unwrap();
    assert_eq!(
        (again["accepted"].as_u64(), again["duplicates"].as_u64()),
        (Some(0), Some(3)),
        "{again}"
    );
    let s = cloud.admin_api().session("s-air").await.unwrap();
    assert_eq!(
        (s["user_id"].as_str(), s["device_id"].as_str()),
        (Some("alice"), Some("alice-air"))
    );
    assert_eq!(s["totals"]["input_tokens"], 600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_from_bobs_device_naming_alices_session_has_those_events_refused_one_by_one() {
    let cloud = Cloud::start().await.unwrap();
    let url = cloud.ingest.url();
    // Alice's session exists online first, from her device.
    let alice_token = {
        let (u, t) = (cloud.db.url.clone(), cloud.tenant.id.clone());
        blocking(move || isolation::token(&u, &t, "ingest", Some("alice"), Some("alice-desk")))
            .await
    };
    let alice = Api::new(&url, &alice_token);
    let (s, v) = alice
        .post_batch(&body(&[turn("s-alice", 10)], &[], "alice-desk"))
        .await
        .unwrap();
    assert_eq!((s, verdicts(&v).0), (200, 1), "{v}");
    // Bob's air-gapped device writes into alice's session and into his own.
    let agent = airgapped(&cloud, "bob", "bob", "bob-air").await;
    feed(
        &agent,
        &[
            turn("s-alice", 5000),
            turn("s-alice", 6000),
            turn("s-bob", 7),
        ],
    )
    .await;
    let bundle = export(&agent, "bob.ndjson.gz");
    register(&cloud, &agent, "bob", "bob-air", &[])
        .await
        .unwrap();
    let r = import(&cloud, &bundle, &[]).await.unwrap();
    assert_eq!(r["accepted"].as_u64(), Some(1), "{r}");
    let reasons: Vec<&str> = r["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["reason"].as_str().unwrap())
        .collect();
    assert_eq!(reasons.len(), 2, "{r}");
    assert!(
        reasons
            .iter()
            .all(|why| why.contains("\"s-alice\" belongs to another user than this token's")),
        "{reasons:?}"
    );
    let admin = cloud.admin_api();
    assert_eq!(
        admin.session("s-alice").await.unwrap()["totals"]["input_tokens"],
        10
    );
    let bob = admin.session("s-bob").await.unwrap();
    assert_eq!(
        (bob["user_id"].as_str(), bob["device_id"].as_str()),
        (Some("bob"), Some("bob-air"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_key_rotation_the_old_keys_bundles_are_refused_unless_the_admin_vouches() {
    let cloud = Cloud::start().await.unwrap();
    let mut agent = airgapped(&cloud, "rot", "alice", "alice-air").await;
    let old = identity(&agent);
    register(&cloud, &agent, "alice", "alice-air", &[])
        .await
        .unwrap();
    feed(&agent, &[turn("s-old", 1)]).await;
    let old_bundle = export(&agent, "old.ndjson.gz");

    // The device gets a new key (its old one retired: the file removed, the agent restarted).
    std::fs::remove_file(agent.data_dir.join("device.key")).unwrap();
    agent.restart().await.unwrap();
    let new = identity(&agent);
    assert_ne!(new["fingerprint"], old["fingerprint"]);
    feed(&agent, &[turn("s-new", 2)]).await;
    let new_bundle = export(&agent, "new.ndjson.gz");

    // A second key for the device needs --replace, which revokes the first.
    let err = register(&cloud, &agent, "alice", "alice-air", &[])
        .await
        .unwrap_err();
    assert!(err.contains("already has key"), "{err}");
    register(&cloud, &agent, "alice", "alice-air", &["--replace"])
        .await
        .unwrap();
    let keys: Value = serde_json::from_str(
        &ingest(&cloud, &["device", "keys", "--tenant", &cloud.tenant.id])
            .await
            .unwrap(),
    )
    .unwrap();
    let revoked: Vec<&Value> = keys["keys"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| !k["revoked_at"].is_null())
        .collect();
    assert_eq!(revoked.len(), 1, "{keys}");
    assert_eq!(revoked[0]["fingerprint"], old["fingerprint"]);

    let err = import(&cloud, &old_bundle, &[]).await.unwrap_err();
    assert!(err.contains("revoked at"), "{err}");
    assert!(err.contains("whatever their date"), "{err}");
    assert_eq!(
        import(&cloud, &new_bundle, &[]).await.unwrap()["accepted"],
        1
    );
    // The admin may vouch for the old bundle explicitly; it is bound as they say.
    let vouched = import(
        &cloud,
        &old_bundle,
        &[
            "--trust-unsigned",
            "--as-user",
            "alice",
            "--device",
            "alice-air",
        ],
    )
    .await
    .unwrap();
    assert_eq!(vouched["accepted"], 1, "{vouched}");
    assert_eq!(vouched["trusted_unsigned"], true);
    // A revoked key is never registered again.
    let err = ingest(
        &cloud,
        &[
            "device",
            "register",
            "--tenant",
            &cloud.tenant.id,
            "--user",
            "alice",
            "--device",
            "alice-air",
            "--public-key",
            old["public_key"].as_str().unwrap(),
            "--replace",
        ],
    )
    .await
    .unwrap_err();
    assert!(err.contains("never accepted again"), "{err}");
    // Revoking the current key refuses its bundles too.
    ingest(
        &cloud,
        &[
            "device",
            "revoke",
            "--tenant",
            &cloud.tenant.id,
            "--device",
            "alice-air",
        ],
    )
    .await
    .unwrap();
    let err = import(&cloud, &new_bundle, &[]).await.unwrap_err();
    assert!(err.contains("revoked at"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_online_agent_registers_its_key_itself_and_its_exports_need_no_admin() {
    let cloud = Cloud::start().await.unwrap();
    let token = {
        let (u, t) = (cloud.db.url.clone(), cloud.tenant.id.clone());
        blocking(move || isolation::token(&u, &t, "ingest", Some("alice"), Some("alice-laptop")))
            .await
    };
    let token_file = cloud.dir.path().join("alice.token");
    tests::stack::write_private(&token_file, &token).unwrap();
    let agent = Agent::start(&cloud.dir.path().join("online"), None)
        .await
        .unwrap();
    agent
        .sync_enable(&cloud.ingest.url(), &token_file, false)
        .unwrap();
    let shown = identity(&agent);
    let registered = wait_for(Duration::from_secs(60), || async {
        let keys: Value = serde_json::from_str(
            &ingest(&cloud, &["device", "keys", "--tenant", &cloud.tenant.id])
                .await
                .ok()?,
        )
        .ok()?;
        keys["keys"].as_array()?.first().cloned()
    })
    .await
    .unwrap_or_else(|| {
        panic!(
            "the agent did not register its key; log:\n{}",
            agent.output()
        )
    });
    assert_eq!(registered["fingerprint"], shown["fingerprint"]);
    assert_eq!(
        (
            registered["user_id"].as_str(),
            registered["device_id"].as_str()
        ),
        (Some("alice"), Some("alice-laptop"))
    );
    assert_eq!(registered["registered_by"], "device");
    // Events it exports instead of pushing import as its device, with no admin step.
    agent.cli(&["sync", "disable"]).unwrap();
    feed(&agent, &[turn("s-laptop", 42)]).await;
    let bundle = export(&agent, "laptop.ndjson.gz");
    let r = import(&cloud, &bundle, &[]).await.unwrap();
    assert_eq!(r["accepted"], 1, "{r}");
    assert_eq!(r["signed_by"], shown["fingerprint"]);
    assert_eq!(r["device_id"], "alice-laptop");
}
