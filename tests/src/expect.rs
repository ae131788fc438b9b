//! What `/v1/usage` must answer for the fixture day, from `expected_totals.json` (computed by the fixture
//! generator, independently of Apiary's code), and the comparison of an answer against it.
//!
//! Per group_by over the fixture day (one tenant, one user, one device):
//! - `tenant`, `user`, `device`: one row, equal to the overall totals;
//! - `model`: one row per model (`by_model`), plus the model-less row holding the tool calls;
//! - `session`: one row per session (`by_session`);
//! - `colony`: a colony's row is the sum of its workers (sessions whose parent is that queen session);
//!   the colony-less row is the sum of the queen sessions.
//!
//! Compared exactly: tokens, `llm_calls`, `unpriced_turns`, `tool_calls`, `tool_errors`, cost in
//! nano-dollars; and the `events` of all rows together = the durable event count.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::fixture;

/// The sums one usage row carries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sums {
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
    pub cache_creation_tokens: i64,
    pub cost_nanos: i64,
    pub llm_calls: i64,
    pub unpriced_turns: i64,
    pub tool_calls: i64,
    pub tool_errors: i64,
}

impl Sums {
    fn add(&mut self, o: &Sums) {
        self.input_tokens += o.input_tokens;
        self.output_tokens += o.output_tokens;
        self.cached_tokens += o.cached_tokens;
        self.cache_creation_tokens += o.cache_creation_tokens;
        self.cost_nanos += o.cost_nanos;
        self.llm_calls += o.llm_calls;
        self.unpriced_turns += o.unpriced_turns;
        self.tool_calls += o.tool_calls;
        self.tool_errors += o.tool_errors;
    }

    /// From a fixture totals object (`llm_turns`, `tool_calls_completed`, `cost_usd`…).
    fn from_fixture(v: &Value) -> Sums {
        let n = |k: &str| v[k].as_i64().unwrap_or(0);
        Sums {
            input_tokens: n("input_tokens"),
            output_tokens: n("output_tokens"),
            cached_tokens: n("cached_tokens"),
            cache_creation_tokens: n("cache_creation_tokens"),
            cost_nanos: (v["cost_usd"].as_f64().unwrap_or(0.0) * 1e9).round() as i64,
            llm_calls: n("llm_turns"),
            unpriced_turns: n("unpriced_turns"),
            tool_calls: n("tool_calls_completed"),
            tool_errors: n("tool_errors"),
        }
    }

    /// From a `/v1/usage` row or its `totals`. The fixture's costs are the reported ones and its unpriced
    /// turns those without a reported cost, so the ingest's `cost_reported_nanos` and its estimated plus
    /// unpriced turns are compared (the ingest estimates the fixture's unreported turns: its models are
    /// in the price catalog). An answer without them (the agent's local usage) has only reported costs.
    pub fn from_usage(v: &Value) -> Sums {
        let n = |k: &str| v[k].as_i64().unwrap_or(0);
        let cost_nanos = v["cost_reported_nanos"]
            .as_i64()
            .or_else(|| v["cost_nanos"].as_i64())
            .unwrap_or_else(|| (v["cost_usd"].as_f64().unwrap_or(0.0) * 1e9).round() as i64);
        Sums {
            input_tokens: n("input_tokens"),
            output_tokens: n("output_tokens"),
            cached_tokens: n("cached_tokens"),
            cache_creation_tokens: n("cache_creation_tokens"),
            cost_nanos,
            llm_calls: n("llm_calls"),
            unpriced_turns: n("unpriced_turns") + n("estimated_turns"),
            tool_calls: n("tool_calls"),
            tool_errors: n("tool_errors"),
        }
    }
}

/// `expected_totals.json`.
pub struct Expected {
    json: Value,
}

/// Rows keyed by the group value (`None` = the row without that key).
pub type Rows = BTreeMap<Option<String>, Sums>;

impl Expected {
    pub fn load() -> Expected {
        let text = std::fs::read_to_string(fixture::root().join("expected_totals.json"))
            .expect("expected_totals.json");
        Expected {
            json: serde_json::from_str(&text).expect("valid JSON"),
        }
    }

    pub fn durable_event_count(&self) -> i64 {
        self.json["durable_event_count"].as_i64().expect("count")
    }

    pub fn overall(&self) -> Sums {
        Sums::from_fixture(&self.json["usage"]["overall"])
    }

    pub fn sessions(&self) -> Vec<String> {
        self.by_session().keys().cloned().collect()
    }

    fn by_session(&self) -> &serde_json::Map<String, Value> {
        self.json["usage"]["by_session"]
            .as_object()
            .expect("by_session")
    }

    /// The rows `group_by=<dim>` must return; `single` is the key of the one row of tenant/user/device.
    pub fn rows(&self, dim: &str, single: &str) -> Rows {
        let mut rows = Rows::new();
        match dim {
            "tenant" | "user" | "device" => {
                rows.insert(Some(single.to_string()), self.overall());
            }
            "model" => {
                let all = self.overall();
                for (model, v) in self.json["usage"]["by_model"]
                    .as_object()
                    .expect("by_model")
                {
                    rows.insert(Some(model.clone()), Sums::from_fixture(v));
                }
                // Tool calls carry no model.
                let tools = Sums {
                    tool_calls: all.tool_calls,
                    tool_errors: all.tool_errors,
                    ..Sums::default()
                };
                rows.insert(None, tools);
            }
            "session" => {
                for (s, v) in self.by_session() {
                    rows.insert(Some(s.clone()), Sums::from_fixture(&v["totals"]));
                }
            }
            "colony" => {
                for v in self.by_session().values() {
                    let key = v["parent_session_id"].as_str().map(String::from);
                    rows.entry(key)
                        .or_default()
                        .add(&Sums::from_fixture(&v["totals"]));
                }
            }
            other => panic!("unknown dimension {other}"),
        }
        rows
    }
}

/// The JSON field of a dimension in a usage row.
pub fn field(dim: &str) -> String {
    format!("{dim}_id").replace("model_id", "model")
}

/// Folds a `/v1/usage` answer into rows by the `dim` key (summing buckets); also returns the events sum.
pub fn actual_rows(answer: &Value, dim: &str) -> (Rows, i64) {
    let mut rows = Rows::new();
    let mut events = 0;
    for r in answer["rows"].as_array().expect("rows") {
        let key = r[field(dim)].as_str().map(String::from);
        rows.entry(key).or_default().add(&Sums::from_usage(r));
        events += r["events"].as_i64().unwrap_or(0);
    }
    (rows, events)
}

/// Asserts that a usage answer grouped by `dim` equals the fixture's totals.
pub fn assert_usage(expected: &Expected, answer: &Value, dim: &str, single: &str, events: i64) {
    let (rows, got_events) = actual_rows(answer, dim);
    let want = expected.rows(dim, single);
    for (k, w) in &want {
        let got = rows.get(k).copied().unwrap_or_default();
        assert_eq!(&got, w, "group_by={dim} row {k:?}: got {got:?}, want {w:?}");
    }
    for (k, got) in &rows {
        if !want.contains_key(k) {
            assert_eq!(
                got,
                &Sums::default(),
                "group_by={dim}: unexpected row {k:?} with usage"
            );
        }
    }
    assert_eq!(got_events, events, "group_by={dim}: events over all rows");
    let totals = Sums::from_usage(&answer["totals"]);
    assert_eq!(totals, expected.overall(), "group_by={dim}: totals");
}

/// `group_by=colony` answers a colony's key where the agent keyed the colony's name (`GET /v1/colonies`);
/// the fixture knows colonies by the queen session their workers name. Each key of the day has one run,
/// that queen session: the rows are put back under it.
async fn unkey_colonies(read: &crate::stack::Api, answer: &mut Value) -> anyhow::Result<()> {
    let list = read.get_ok("/v1/colonies").await?;
    let mut run_of = std::collections::HashMap::new();
    for c in list["colonies"].as_array().into_iter().flatten() {
        let runs = c["runs"].as_array().map(Vec::as_slice).unwrap_or_default();
        anyhow::ensure!(
            runs.len() == 1,
            "a colony of the day with {} runs: {c}",
            runs.len()
        );
        let key = c["colony_key"].as_str().unwrap_or_default().to_string();
        run_of.insert(key, runs[0]["session_id"].clone());
    }
    for row in answer["rows"].as_array_mut().into_iter().flatten() {
        let run = row["colony_id"]
            .as_str()
            .and_then(|k| run_of.get(k))
            .cloned();
        if let Some(run) = run {
            row["colony_id"] = run;
        }
    }
    Ok(())
}

/// `group_by=tool` over the fixture day equals the fixture's tool calls by name: calls and errors, and with
/// `timed` the timed calls and the durations the agent computed on the device (pairing each completion with
/// its start by session and `tool_use_id`, floored to milliseconds), summed exactly. Events that reach the
/// ingest without passing through an agent (a test's own batches) carry no durations: `timed` false.
pub fn assert_tools(expected: &Expected, answer: &Value, timed: bool) {
    let mut got = serde_json::Map::new();
    for row in answer["rows"].as_array().expect("rows") {
        let name = row["tool_name"]
            .as_str()
            .expect("a tool row names its tool");
        let mut sums = serde_json::Map::new();
        for key in tool_keys(timed) {
            sums.insert((*key).into(), row[*key].clone());
        }
        got.insert(name.into(), Value::Object(sums));
    }
    let mut want = serde_json::Map::new();
    for (name, sums) in expected.json["usage"]["by_tool"]
        .as_object()
        .expect("by_tool")
    {
        let sums = tool_keys(timed)
            .iter()
            .map(|k| ((*k).to_string(), sums[*k].clone()))
            .collect();
        want.insert(name.clone(), Value::Object(sums));
    }
    assert_eq!(
        Value::Object(got),
        Value::Object(want),
        "group_by=tool: got {answer}"
    );
}

fn tool_keys(timed: bool) -> &'static [&'static str] {
    if timed {
        &[
            "tool_calls",
            "tool_errors",
            "tool_calls_timed",
            "tool_duration_ms",
        ]
    } else {
        &["tool_calls", "tool_errors"]
    }
}

/// The fixture day's tool calls by tool, durations included: for a day that went through an agent, which
/// times each call on the device.
pub async fn assert_fixture_tool_durations(read: &crate::stack::Api) -> anyhow::Result<()> {
    let answer = read
        .usage("tool", "total", fixture::FROM, fixture::TO)
        .await?;
    assert_tools(&Expected::load(), &answer, true);
    Ok(())
}

/// Asserts `/v1/usage` over the fixture day equals the fixture's totals for every group_by (tenant with
/// the admin token) at granularity `total`, and that hour and day buckets add up to the same totals.
pub async fn assert_fixture_usage(
    read: &crate::stack::Api,
    admin: &crate::stack::Api,
    tenant_id: &str,
    device_id: &str,
    events: i64,
) -> anyhow::Result<()> {
    let expected = Expected::load();
    let (from, to) = (fixture::FROM, fixture::TO);
    for dim in ["user", "model", "colony", "session", "device"] {
        let mut answer = read.usage(dim, "total", from, to).await?;
        if dim == "colony" {
            unkey_colonies(read, &mut answer).await?;
        }
        let single = if dim == "user" {
            crate::stack::USER
        } else {
            device_id
        };
        assert_usage(&expected, &answer, dim, single, events);
    }
    let answer = read.usage("tool", "total", from, to).await?;
    assert_tools(&expected, &answer, false);
    let answer = admin.usage("tenant", "total", from, to).await?;
    assert_usage(&expected, &answer, "tenant", tenant_id, events);
    for gran in ["hour", "day"] {
        let answer = read.usage("session", gran, from, to).await?;
        assert_usage(&expected, &answer, "session", device_id, events);
    }
    Ok(())
}

/// The agent's `GET /v1/usage/sessions/{queen}` totals (the queen and her workers, from local data) equal
/// the fixture's per-queen-tree totals, for every queen session of the day.
pub async fn assert_local_usage(agent: &crate::agent::Agent) -> anyhow::Result<()> {
    let expected = Expected::load();
    let trees = expected.json["usage"]["by_queen_tree"]
        .as_object()
        .expect("by_queen_tree");
    let http = crate::stack::client();
    for (queen, want) in trees {
        let url = format!("http://{}/v1/usage/sessions/{queen}", agent.addr);
        let v: Value = http
            .get(&url)
            .bearer_auth(&agent.token)
            .send()
            .await?
            .json()
            .await?;
        let got = Sums::from_usage(&v["totals"]);
        anyhow::ensure!(
            got == Sums::from_fixture(want),
            "agent local usage of {queen}: got {got:?}, want {:?}",
            Sums::from_fixture(want)
        );
    }
    Ok(())
}

/// Lines of the day (both logs).
pub fn day_line_count() -> u64 {
    fixture::day_files()
        .iter()
        .map(|f| f.lines.len() as u64)
        .sum()
}

/// Durable events of the debug log that name no session (no `execution_id`, no `data.session_id`): a
/// producer posting what the runtime emits cannot attribute them (only a per-session log's directory can).
pub fn durable_debug_events_without_session() -> i64 {
    let expected = Expected::load();
    let durable: Vec<&str> = expected.json["durable_types"]
        .as_array()
        .expect("durable_types")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let files = fixture::day_files();
    files[0]
        .lines
        .iter()
        .filter_map(|l| serde_json::from_slice::<Value>(l).ok())
        .filter(|v| durable.contains(&v["type"].as_str().unwrap_or("")))
        .filter(|v| v["execution_id"].is_null() && v["data"]["session_id"].is_null())
        .count() as i64
}
