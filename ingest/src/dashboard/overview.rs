//! The overview (`/`): spend and tokens over time, stacked by model, user or colony, with the range,
//! granularity and time-zone pickers of `/v1/usage`, and the totals.
//!
//! The page's query string is `/v1/usage`'s (`from`, `to`, `tz`, `granularity`, `group_by`; empty
//! fields of the picker form are dropped), with the page's defaults filled in when absent: the last 30
//! local days (`from` = today − 29, `to` = tomorrow, in `tz`), `granularity=day`, `group_by=model`. The
//! answer is `get_usage`'s own, so the totals here are `/v1/usage`'s for the same query string.

use std::collections::{BTreeMap, HashMap};

use axum::extract::{RawQuery, State};
use axum::response::Response;
use chrono::{DateTime, Days, Utc};
use maud::{html, Markup};

use super::chart::{self, Stacked};
use super::format;
use super::layout::{self, Nav};
use super::Viewer;
use crate::access::UsageReader;
use crate::query::buckets::{self, Unit};
use crate::query::sums::Sum;
use crate::query::usage::body::UsageRowBody;
use crate::query::usage::{Dim, Granularity, GroupBy, TimeArg, UsageParams, UsageResponse, Zone};
use crate::routes::extract::{query_params, Query};
use crate::state::AppState;

/// The dimensions the overview stacks by.
const STACK_BY: [(Dim, &str, &str); 3] = [
    (Dim::Model, "model", "Model"),
    (Dim::User, "user", "User"),
    (Dim::Colony, "colony", "Colony"),
];

/// Most buckets drawn with their empty neighbours filled in.
const MAX_FILLED_BUCKETS: i64 = 2_000;

/// `GET /`.
pub async fn page(
    State(state): State<AppState>,
    viewer: Viewer,
    RawQuery(raw): RawQuery,
) -> Response {
    let params = match page_params(raw.as_deref().unwrap_or("")) {
        Ok(p) => p,
        Err(e) => return layout::error_page(e),
    };
    // The page draws its whole range: pages are for `/v1/usage` and the CSV download.
    if params.limit.is_some() || params.cursor.is_some() {
        return layout::error_page(crate::error::ApiError::bad_param(
            "limit",
            "the overview draws the whole range; read pages from /v1/usage or /usage.csv",
        ));
    }
    let dim = params
        .group_by
        .as_ref()
        .and_then(|g| g.0.first().copied())
        .unwrap_or(Dim::Model);
    let reader = UsageReader::Tenant(viewer.reader.clone());
    let usage =
        match crate::routes::usage::usage_json(State(state.reads.clone()), reader, Query(params))
            .await
        {
            Ok(axum::Json(u)) => u,
            Err(e) => return layout::error_page(e),
        };
    // The budgets the token may see, as `GET /v1/budgets` answers them (its visibility rule).
    let budgets = match crate::service::budgets::list(
        &state.pool,
        &state.reads,
        viewer.principal.tenant_id,
        viewer.principal.read_user(),
    )
    .await
    {
        Ok(l) => l.budgets,
        Err(e) => return layout::error_page(e),
    };
    let data = chart_data(&usage, dim);
    let colours = series_colours(
        &state.pool,
        viewer.principal.tenant_id,
        dim,
        &drawn_keys(&data),
    )
    .await;
    let body = html! {
        h1 { "Overview" }
        (pickers(&usage, dim))
        (super::format::csv_link("/usage.csv", raw.as_deref(), "this usage"))
        (totals(&usage.totals))
        @if !budgets.is_empty() {
            section aria-labelledby="budgets-title" {
                h2 #budgets-title { "Budgets" }
                ul.budget-summary {
                    @for b in &budgets { li { (super::budgets::summary(b)) } }
                }
                p { a href="/budgets" { "All budgets, with their thresholds" } }
            }
        }
        (charts(&usage, dim, &data, &colours))
    };
    layout::page("Overview", Nav::Overview, &viewer, body)
}

/// The usage parameters of the page's query string, with the page's defaults.
pub fn page_params(raw: &str) -> Result<UsageParams, crate::error::ApiError> {
    let mut p: UsageParams = query_params(&non_empty(raw))?;
    if p.from.is_none() && p.to.is_none() {
        let (from, to) = last_30_days(p.tz.as_ref());
        (p.from, p.to) = (Some(from), Some(to));
    }
    p.granularity.get_or_insert(Granularity::Day);
    p.group_by.get_or_insert(GroupBy(vec![Dim::Model]));
    Ok(p)
}

/// The pages' default range: the last 30 local days in `tz` (UTC when absent), today included —
/// `from` = today − 29 and `to` = tomorrow, local midnights.
pub fn last_30_days(tz: Option<&Zone>) -> (TimeArg, TimeArg) {
    let tz = tz.map_or(chrono_tz::Tz::UTC, |z| z.0);
    let today = Utc::now().with_timezone(&tz).date_naive();
    let midnight = |d: chrono::NaiveDate| TimeArg::Local(d.and_hms_opt(0, 0, 0).expect("midnight"));
    (
        midnight(today - Days::new(29)),
        midnight(today + Days::new(1)),
    )
}

/// The query string without its empty pairs (an untouched picker sends `name=`).
pub fn non_empty(raw: &str) -> String {
    let pairs = form_urlencoded::parse(raw.as_bytes()).filter(|(_, v)| !v.is_empty());
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

fn pickers(u: &UsageResponse, dim: Dim) -> Markup {
    let date = |s: &str| s.get(..10).unwrap_or(s).to_string();
    html! {
        form.pickers method="get" action="/" aria-label="Usage range and grouping" {
            div {
                label for="from" { "From" }
                input #from type="date" name="from" value=(date(&u.from));
            }
            div {
                label for="to" { "Until (exclusive)" }
                input #to type="date" name="to" value=(date(&u.to));
            }
            div {
                label for="granularity" { "Granularity" }
                select #granularity name="granularity" {
                    @for g in [Granularity::Hour, Granularity::Day, Granularity::Month, Granularity::Total] {
                        @let word = granularity_word(g);
                        option value=(word) selected[u.granularity == g] { (word) }
                    }
                }
            }
            div {
                label for="group_by" { "Stack by" }
                select #group_by name="group_by" {
                    @for (d, word, label) in STACK_BY {
                        option value=(word) selected[d == dim] { (label) }
                    }
                }
            }
            div {
                label for="tz" { "Time zone" }
                input #tz name="tz" value=(u.tz) list="zones" autocomplete="off" spellcheck="false";
                datalist #zones {
                    @for z in chrono_tz::TZ_VARIANTS { option value=(z.name()) {} }
                }
            }
            div { button type="submit" { "Show" } }
        }
    }
}

fn granularity_word(g: Granularity) -> &'static str {
    match g {
        Granularity::Hour => "hour",
        Granularity::Day => "day",
        Granularity::Month => "month",
        Granularity::Total => "total",
    }
}

fn totals(t: &crate::query::usage::UsageSums) -> Markup {
    let n = |label: &str, field: &str, s: Sum| {
        html! {
            div.total {
                dt { (label) }
                dd data-field=(field) data-value=(s.0) { (format::sum(s)) }
            }
        }
    };
    let money = |label: &str, field: &str, s: Sum| {
        html! {
            div.total {
                dt { (label) }
                dd data-field=(field) data-value=(s.0) title=(format::money_exact(s.0)) {
                    (format::money(s.0))
                }
            }
        }
    };
    html! {
        section aria-labelledby="totals-title" {
            h2 #totals-title { "Totals" }
            dl.totals {
                (money("Spend", "cost_nanos", t.cost_nanos))
                (money("Reported by providers", "cost_reported_nanos", t.cost_reported_nanos))
                (money("Estimated from prices", "cost_estimated_nanos", t.cost_estimated_nanos))
                div.total {
                    dt { "Cost basis" }
                    dd data-field="cost_basis" { (basis_label(t.cost_basis)) }
                }
                (n("Input tokens", "input_tokens", t.input_tokens))
                (n("Output tokens", "output_tokens", t.output_tokens))
                (n("Cached tokens", "cached_tokens", t.cached_tokens))
                (n("Cache-creation tokens", "cache_creation_tokens", t.cache_creation_tokens))
                (n("LLM calls", "llm_calls", t.llm_calls))
                (n("Estimated turns", "estimated_turns", t.estimated_turns))
                (n("Unpriced turns", "unpriced_turns", t.unpriced_turns))
                (n("Tool calls", "tool_calls", t.tool_calls))
                (n("Events", "events", t.events))
            }
        }
    }
}

/// Where the spend comes from, in words.
fn basis_label(b: crate::rollups::CostBasis) -> &'static str {
    use crate::rollups::CostBasis;
    match b {
        CostBasis::Reported => "reported by the providers",
        CostBasis::Estimated => "estimated from the price catalog",
        CostBasis::Mixed => "reported where sent, else estimated",
        CostBasis::None => "no priced turns",
    }
}

/// The key of a row in the stacking dimension ("(none)" for none).
fn key_of(row: &UsageRowBody, dim: Dim) -> String {
    let k = match dim {
        Dim::User => &row.user_id,
        Dim::Colony => &row.colony_id,
        _ => &row.model,
    };
    k.clone().flatten().unwrap_or_else(|| "(none)".into())
}

/// Every bucket of the answer in time order (empty ones included when there are not too many), with
/// its RFC 3339 label as the API writes it.
fn bucket_axis(u: &UsageResponse) -> Vec<String> {
    let parse = |s: &str| {
        DateTime::parse_from_rfc3339(s)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    };
    let mut axis: BTreeMap<DateTime<Utc>, String> = BTreeMap::new();
    let unit = match u.granularity {
        Granularity::Hour => Some((Unit::Hour, 1)),
        Granularity::Day => Some((Unit::Day, 24)),
        Granularity::Month => Some((Unit::Month, 24 * 28)),
        Granularity::Total => None,
    };
    if let (Some((unit, hours)), Some(from), Some(to), Ok(tz)) = (
        unit,
        parse(&u.from),
        parse(&u.to),
        u.tz.parse::<chrono_tz::Tz>(),
    ) {
        if (to - from).num_hours() / hours <= MAX_FILLED_BUCKETS {
            for s in buckets::buckets(unit, tz, from, to).starts {
                axis.insert(s, s.with_timezone(&tz).to_rfc3339());
            }
        }
    }
    for r in &u.rows {
        if let Some(t) = parse(&r.bucket) {
            axis.entry(t).or_insert_with(|| r.bucket.clone());
        }
    }
    axis.into_values().collect()
}

fn stacked(u: &UsageResponse, dim: Dim, value: fn(&UsageRowBody) -> f64) -> Stacked {
    let buckets = bucket_axis(u);
    let index: HashMap<&str, usize> = buckets
        .iter()
        .enumerate()
        .map(|(i, b)| (b.as_str(), i))
        .collect();
    let mut series: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for r in &u.rows {
        let Some(&i) = index.get(r.bucket.as_str()) else {
            continue;
        };
        series
            .entry(key_of(r, dim))
            .or_insert_with(|| vec![0.0; buckets.len()])[i] += value(r);
    }
    Stacked {
        series: series.into_iter().collect(),
        buckets,
    }
    .top()
}

/// The two charts' series, coarsened to [`chart::MAX_BARS`] (and how many buckets a bar sums).
fn chart_data(u: &UsageResponse, dim: Dim) -> (Stacked, Stacked, usize) {
    let mut spend = stacked(u, dim, |r| r.sums.cost_nanos.0 as f64);
    let mut tokens = stacked(u, dim, |r| {
        (r.sums.input_tokens.0 + r.sums.output_tokens.0) as f64
    });
    let k = spend.coarsen(chart::MAX_BARS);
    tokens.coarsen(chart::MAX_BARS);
    (spend, tokens, k)
}

/// The series keys the page's charts draw (both charts, "other" left out).
fn drawn_keys((spend, tokens, _): &(Stacked, Stacked, usize)) -> Vec<String> {
    let keys: std::collections::BTreeSet<String> = spend
        .series
        .iter()
        .chain(&tokens.series)
        .map(|(name, _)| name.clone())
        .filter(|name| !name.starts_with("other ("))
        .collect();
    keys.into_iter().collect()
}

/// The colour map of a page drawing `keys` of `dim`: the tenant's stored slots, new keys assigned and
/// stored first (see [`chart`]'s notes). Should the store fail, the page still draws, from the keys alone.
async fn series_colours(
    pool: &sqlx::PgPool,
    tenant_id: uuid::Uuid,
    dim: Dim,
    keys: &[String],
) -> chart::Colours {
    use crate::store::series_colours as store;
    let dimension = dim_word(dim);
    let resolved = async {
        let mut stored = store::stored(pool, tenant_id, dimension, keys).await?;
        let new: Vec<&str> = keys
            .iter()
            .map(String::as_str)
            .filter(|k| !stored.contains_key(*k))
            .collect();
        if !new.is_empty() {
            let held = store::slot_counts(pool, tenant_id, dimension).await?;
            store::insert(pool, tenant_id, dimension, &chart::assign(&held, &new)).await?;
            stored = store::stored(pool, tenant_id, dimension, keys).await?;
        }
        Ok::<_, sqlx::Error>(stored)
    }
    .await;
    match resolved {
        Ok(stored) => chart::Colours::resolve(&stored, keys.iter().map(String::as_str)),
        Err(e) => {
            tracing::warn!(error = %e, "series colours could not be read or stored; colouring by key");
            chart::Colours::of(keys.iter().map(String::as_str))
        }
    }
}

/// The word `series_colours` stores a dimension under (the overview stacks by these three only).
fn dim_word(dim: Dim) -> &'static str {
    match dim {
        Dim::User => "user",
        Dim::Colony => "colony",
        _ => "model",
    }
}

fn charts(
    u: &UsageResponse,
    dim: Dim,
    (spend, tokens, k): &(Stacked, Stacked, usize),
    colours: &chart::Colours,
) -> Markup {
    let k = *k;
    let by = STACK_BY
        .iter()
        .find(|d| d.0 == dim)
        .map_or("model", |d| d.1);
    html! {
        @if k > 1 {
            p.note { "Each bar sums " (k) " " (granularity_word(u.granularity)) "s (the range has more "
                "buckets than a chart shows); the totals and the table are exact." }
        }
        section aria-labelledby="spend-title" {
            h2 #spend-title { "Spend by " (by) }
            (chart::stacked_bars("spend", &format!("Spend per bucket, stacked by {by}"), spend,
                colours, |v| format::money(v as i128)))
        }
        section aria-labelledby="tokens-title" {
            h2 #tokens-title { "Tokens (input + output) by " (by) }
            (chart::stacked_bars("tokens", &format!("Tokens per bucket, stacked by {by}"), tokens,
                colours, |v| format::count(v as i128)))
        }
        section aria-labelledby="rows-title" {
            h2 #rows-title { "By " (by) }
            (breakdown(u, dim, by))
        }
    }
}

/// The answer's rows summed per key over the range, as a table (what the charts show, in numbers).
fn breakdown(u: &UsageResponse, dim: Dim, by: &str) -> Markup {
    let mut per: BTreeMap<String, (i128, i128, i128, i128)> = BTreeMap::new();
    for r in &u.rows {
        let e = per.entry(key_of(r, dim)).or_default();
        e.0 += r.sums.cost_nanos.0;
        e.1 += r.sums.input_tokens.0;
        e.2 += r.sums.output_tokens.0;
        e.3 += r.sums.llm_calls.0;
    }
    // Rows of other sums only (active time, tool calls without a model) show nothing here.
    let mut rows: Vec<_> = per
        .into_iter()
        .filter(|(_, v)| *v != (0, 0, 0, 0))
        .collect();
    rows.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(&b.0)));
    html! {
        @if rows.is_empty() {
            p.empty { "No usage in this range." }
        } @else {
            div.scroll {
                table {
                    thead { tr {
                        th scope="col" { (by) }
                        th.num scope="col" { "Spend" }
                        th.num scope="col" { "Input tokens" }
                        th.num scope="col" { "Output tokens" }
                        th.num scope="col" { "LLM calls" }
                    } }
                    tbody {
                        @for (key, (cost, input, output, calls)) in &rows {
                            tr {
                                th scope="row" { code { (key) } }
                                td.num title=(format::money_exact(*cost)) { (format::money(*cost)) }
                                td.num { (format::count(*input)) }
                                td.num { (format::count(*output)) }
                                td.num { (format::count(*calls)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::query::usage::{UsageQuery, UsageRow};
    use crate::rollups::Usage;

    #[test]
    fn a_month_of_hours_by_twenty_users_stays_within_the_page_weight() {
        let from: DateTime<Utc> = "2026-10-27T00:00:00Z".parse().unwrap();
        let q = UsageQuery {
            from,
            to: from + chrono::TimeDelta::days(30),
            group_by: vec![Dim::User],
            granularity: Granularity::Hour,
            tz: chrono_tz::Tz::UTC,
        };
        let usage = |u: i128| Usage {
            input_tokens: 1000 + u,
            output_tokens: 10,
            cost_nanos: 123_456_789 + u,
            llm_calls: 3,
            events: 5,
            ..Usage::default()
        };
        let rows: Vec<UsageRow> = (0..720)
            .flat_map(|h| {
                (0..20).map(move |u| UsageRow {
                    bucket: Some(from + chrono::TimeDelta::hours(h)),
                    keys: vec![format!("user_{u}")],
                    usage: usage(u),
                    tool: None,
                })
            })
            .collect();
        let u = UsageResponse::new(&q, &rows);
        let page = html! { (pickers(&u, Dim::User)) (totals(&u.totals)) (charts(&u, Dim::User, &chart_data(&u, Dim::User), &chart::Colours::default())) }
            .into_string();
        assert!(page.len() < 300 * 1024, "{} bytes", page.len());
        assert!(
            page.contains("Each bar sums 6 hours"),
            "the coarsening is said"
        );
    }

    #[test]
    fn untouched_pickers_mean_the_page_defaults() {
        assert_eq!(
            non_empty("from=&to=&tz=Europe%2FBerlin&x="),
            "tz=Europe%2FBerlin"
        );
        let p = page_params("from=&to=&granularity=&group_by=&tz=").unwrap();
        assert_eq!(p.granularity, Some(Granularity::Day));
        assert_eq!(p.group_by, Some(GroupBy(vec![Dim::Model])));
        assert!(matches!(
            (p.from, p.to),
            (Some(TimeArg::Local(_)), Some(TimeArg::Local(_)))
        ));
        let p = page_params("from=2026-11-01&group_by=user").unwrap();
        assert!(
            p.to.is_none(),
            "one end given: the API's default for the other"
        );
        assert!(page_params("group_by=prompt").is_err());
    }
}
