//! Prices and cost provenance, black box: the fixture Hive day (27 turns of three catalogued models, 6
//! of them with no reported cost) posted to the real ingest; a tenant price added with the real
//! `apiary-ingest price add`, listed with `price list` and `GET /v1/prices`, applied to the stored day
//! with `price reprice`.
//!
//! Asserted: the reported costs stay exactly the fixture's (its generator's `cost_usd`, independent of
//! Apiary), the unreported turns are estimated (none left unpriced), a session whose turns all reported
//! a cost reads `reported` and its estimate agrees with the generator's prices to within its rounding
//! (6 decimals per turn), one with none reads `estimated`; bad input on the command line fails with
//! the field named and stores nothing; re-pricing with a doubled price doubles the model's estimates
//! (to within a nano-dollar per turn) and leaves the reported costs alone; running it again changes
//! nothing.

use serde_json::Value;
use tests::bins::run as run_bin;
use tests::fixture;
use tests::stack::Cloud;

const DAY: &str = "from=2026-11-03&to=2026-11-04";

fn n(v: &Value, k: &str) -> i64 {
    v[k].as_i64().unwrap_or_else(|| panic!("{k}: {v}"))
}

fn row<'a>(usage: &'a Value, key: &str, value: &str) -> &'a Value {
    usage["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r[key] == value)
        .unwrap_or_else(|| panic!("{key}={value}: {usage}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fixture_day_is_estimated_where_unreported_and_repriced_from_the_command_line() {
    let cloud = Cloud::start().await.unwrap();
    let events = fixture::canonical_events();
    let (code, v) = cloud
        .ingest_api()
        .post_batch(&fixture::batch_body(&events, "dev-prices"))
        .await
        .unwrap();
    assert_eq!(code, 200, "{v}");
    let text = std::fs::read_to_string(fixture::root().join("expected_totals.json")).unwrap();
    let expected: Value = serde_json::from_str(&text).unwrap();
    let overall = &expected["usage"]["overall"];
    let reported_nanos = (overall["cost_usd"].as_f64().unwrap() * 1e9).round() as i64;

    let api = cloud.read_api();
    let totals = api.get_ok(&format!("/v1/usage?{DAY}")).await.unwrap()["totals"].clone();
    assert_eq!(
        n(&totals, "cost_reported_nanos"),
        reported_nanos,
        "{totals}"
    );
    assert_eq!(n(&totals, "llm_calls"), 27);
    assert_eq!(
        (n(&totals, "estimated_turns"), n(&totals, "unpriced_turns")),
        (overall["unpriced_turns"].as_i64().unwrap(), 0),
        "every unreported turn is of a catalogued model: {totals}"
    );
    assert_eq!(totals["cost_basis"], "mixed");
    assert!(n(&totals, "cost_nanos") > reported_nanos, "{totals}");

    let sessions = api
        .get_ok(&format!("/v1/usage?{DAY}&group_by=session"))
        .await
        .unwrap();
    for (id, s) in expected["usage"]["by_session"].as_object().unwrap() {
        let t = &s["totals"];
        let r = row(&sessions, "session_id", id);
        let turns = t["llm_turns"].as_i64().unwrap();
        let unpriced = t["unpriced_turns"].as_i64().unwrap();
        let basis = match (unpriced, turns) {
            (0, _) => "reported",
            (u, t) if u == t => "estimated",
            _ => "mixed",
        };
        assert_eq!(r["cost_basis"], basis, "{id}: {r}");
        if unpriced == 0 {
            // The generator prices its turns with the catalog's prices and rounds each to 6 decimals.
            let diff = (n(r, "cost_estimated_nanos") - n(r, "cost_reported_nanos")).abs();
            assert!(diff <= 500 * turns, "{id}: {r}");
            assert_eq!(n(r, "cost_nanos"), n(r, "cost_reported_nanos"), "{id}");
        }
    }

    // The command line: a doubled gpt-5-mini price from November on.
    let url = cloud.db.url.clone();
    let env = [("DATABASE_URL", url.as_str())];
    let add = |extra: &[&str]| {
        let mut args = vec![
            "price",
            "add",
            "--tenant",
            "acme",
            "--model",
            "gpt-5-mini*",
            "--from",
            "2026-11-01",
            "--output",
            "4.00",
            "--cache-read",
            "0.05",
        ];
        args.extend_from_slice(extra);
        run_bin("apiary-ingest", &args, &env)
    };
    let (code, out) = add(&["--input", "3,00"]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("input:"), "the field is named: {out}");
    let (code, out) = add(&["--input", "0.50", "--source", "contract"]);
    assert_eq!(code, 0, "{out}");
    let price_id = out
        .lines()
        .find(|l| l.starts_with("tp_"))
        .unwrap_or_else(|| panic!("{out}"))
        .to_string();
    let (code, out) = run_bin(
        "apiary-ingest",
        &["price", "list", "--tenant", "acme"],
        &env,
    );
    assert_eq!(code, 0, "{out}");
    let list: Value = serde_json::from_str(&out).unwrap();
    let mine: Vec<&Value> = list["prices"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["owner"] == "tenant")
        .collect();
    assert_eq!(mine.len(), 1, "the refused entry was not stored: {list}");
    assert_eq!(mine[0]["price_id"], price_id.as_str());
    let listed = cloud.admin_api().get_ok("/v1/prices").await.unwrap();
    assert_eq!(listed["prices"][0]["price_id"], price_id.as_str());

    let models = |v: &Value| row(v, "model", "gpt-5-mini").clone();
    let before = models(
        &api.get_ok(&format!("/v1/usage?{DAY}&group_by=model"))
            .await
            .unwrap(),
    );
    let reprice = || {
        let (code, out) = run_bin(
            "apiary-ingest",
            &[
                "price",
                "reprice",
                "--tenant",
                "acme",
                "--from",
                "2026-11-03",
                "--to",
                "2026-11-04",
            ],
            &env,
        );
        assert_eq!(code, 0, "{out}");
        serde_json::from_str::<Value>(out.lines().find(|l| l.starts_with('{')).unwrap()).unwrap()
    };
    let first = reprice();
    assert_eq!(
        n(&first, "turns_changed"),
        5,
        "the 5 gpt-5-mini turns: {first}"
    );
    let after = models(
        &api.get_ok(&format!("/v1/usage?{DAY}&group_by=model"))
            .await
            .unwrap(),
    );
    let est = |v: &Value| n(v, "cost_estimated_nanos");
    assert!(
        (est(&after) - 2 * est(&before)).abs() <= 5,
        "{before} → {after}"
    );
    assert_eq!(
        n(&after, "cost_reported_nanos"),
        n(&before, "cost_reported_nanos")
    );
    // cost_nanos: the 2 reported turns as reported, the 3 others at the new estimate.
    assert_eq!(
        n(&after, "cost_nanos") - n(&before, "cost_nanos"),
        n(&first, "cost_delta_nanos"),
        "{first}"
    );
    assert!(n(&first, "cost_delta_nanos") > 0);
    let second = reprice();
    assert_eq!(n(&second, "turns_changed"), 0, "{second}");
}
