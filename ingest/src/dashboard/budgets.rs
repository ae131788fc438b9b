//! Budgets (`/budgets`): each budget the token may see with its current period — scope, period and
//! zone, a progress bar, spent / limit, percent, the forecast to the period's end and the thresholds
//! crossed. The answer of `list_budgets` (`GET /v1/budgets`), so the visibility rule is the API's (a
//! `read` token bound to a user sees only the budgets scoped to that user) and every number is the
//! API's: each budget's exact integers and percent are also in `data-*` attributes of its `article`.
//!
//! The bar is a native `<meter>` (no inline style: the CSP has no `unsafe-inline`), on a percent scale:
//! full at 100 % (the text says when spend is beyond), amber from the highest threshold below 100 %,
//! red at the limit.

use apiary_schema::quota::BudgetScope;
use axum::extract::State;
use axum::response::Response;
use axum::Json;
use chrono::{DateTime, Utc};
use maud::{html, Markup};

use super::format;
use super::layout::{self, Nav};
use super::Viewer;
use crate::budgets::Unit;
use crate::routes::budgets::BudgetBody;
use crate::state::AppState;

/// `GET /budgets`.
pub async fn page(State(state): State<AppState>, viewer: Viewer) -> Response {
    let list =
        match crate::routes::budgets::list_budgets(State(state), viewer.principal.clone()).await {
            Ok(Json(l)) => l,
            Err(e) => return layout::error_page(e),
        };
    let body = html! {
        h1 { "Budgets" }
        @if list.budgets.is_empty() {
            p.empty { "No budgets to show. An admin token creates them (" code { "POST /v1/budgets" }
                " or " code { "apiary-ingest budget create" } ")." }
        } @else {
            div.budgets { @for b in &list.budgets { (budget(b)) } }
        }
    };
    layout::page("Budgets", Nav::Budgets, &viewer, body)
}

/// An amount of the budget's unit as people read it (USD rounded, exact in the `title`).
fn amount(unit: Unit, n: i64) -> Markup {
    match unit {
        Unit::Usd => {
            html! { span title=(format::money_exact(n.into())) { (format::money(n.into())) } }
        }
        Unit::Tokens => html! { span { (format::count(n.into())) " tokens" } },
    }
}

/// A budget's scope in words.
fn scope(s: &BudgetScope) -> Markup {
    if s.user.is_none() && s.model.is_none() && s.colony.is_none() {
        return html! { "the whole tenant" };
    }
    let user = s.user.as_ref().map(|u| html! { "user " code { (u) } });
    let model = s.model.as_ref().map(|m| html! { "model " code { (m) } });
    let colony = s.colony.as_ref().map(|c| {
        html! { "colony " a href={ "/sessions?colony=" (c) } { code { (c) } } }
    });
    let parts: Vec<Markup> = [user, model, colony].into_iter().flatten().collect();
    html! {
        @for (i, p) in parts.iter().enumerate() { @if i > 0 { ", " } (p) }
    }
}

/// An RFC 3339 time of the answer, shown in the budget's zone (as written when it does not parse).
fn local(t: &str, tz: &str) -> Markup {
    let Ok(at) = DateTime::parse_from_rfc3339(t) else {
        return html! { (t) };
    };
    let at = at.with_timezone(&Utc);
    let shown = match tz.parse::<chrono_tz::Tz>() {
        Ok(z) => at.with_timezone(&z).format("%Y-%m-%d %H:%M %Z").to_string(),
        Err(_) => format::time(at),
    };
    html! { time datetime=(t) title=(format::time(at)) { (shown) } }
}

/// One line of a budget for the overview: name, bar, percent, spent of limit, forecast (same data
/// attributes as the budgets page).
pub(super) fn summary(b: &BudgetBody) -> Markup {
    let title = b.name.clone().unwrap_or_else(|| b.budget_id.clone());
    html! {
        span.budget-line data-budget=(b.budget_id) data-spent=(b.spent) data-limit=(b.limit)
            data-percent=(b.percent) data-forecast=(b.forecast) {
            a href={ "/budgets#" (b.budget_id) } { (title) } " "
            meter min="0" max="100" value=(b.percent.min(100.0)) low="80" high="99.99" optimum="0"
                aria-label={ (title) ": " (b.percent) "% of the limit" } { (b.percent) "%" }
            " " (b.percent) "% · " (amount(b.unit, b.spent)) " of " (amount(b.unit, b.limit))
            " this " (b.period.as_str()) " · forecast " (amount(b.unit, b.forecast))
            @if b.forecast > b.limit { " " span.badge.s-failed { "over the limit" } }
        }
    }
}

fn budget(b: &BudgetBody) -> Markup {
    let title = b.name.clone().unwrap_or_else(|| b.budget_id.clone());
    let heading = format!("h-{}", b.budget_id);
    // Amber from the highest threshold below 100 %, red from the limit on.
    let low = b
        .thresholds
        .iter()
        .copied()
        .filter(|t| *t < 100)
        .max()
        .unwrap_or(80);
    let over = b.forecast > b.limit;
    html! {
        article.budget id=(b.budget_id) aria-labelledby=(heading)
            data-budget=(b.budget_id) data-unit=(b.unit.as_str()) data-limit=(b.limit)
            data-spent=(b.spent) data-remaining=(b.remaining) data-percent=(b.percent)
            data-forecast=(b.forecast) {
            h2 id=(heading) { (title) }
            p.scope {
                "Scope: " (scope(&b.scope)) " · per " (b.period.as_str()) " in " (b.tz)
                " · this period " (local(&b.period_start, &b.tz)) " to " (local(&b.period_end, &b.tz))
            }
            div.progress {
                meter min="0" max="100" value=(b.percent.min(100.0)) low=(low) high="99.99" optimum="0"
                    aria-label={ "Spent " (b.percent) "% of the limit" } {
                    (b.percent) "%"
                }
                span.percent { (b.percent) "%" @if b.percent > 100.0 { " (over the limit)" } }
            }
            dl.facts {
                div { dt { "Spent" } dd { (amount(b.unit, b.spent)) } }
                div { dt { "Limit" } dd { (amount(b.unit, b.limit)) } }
                div { dt { "Remaining" } dd { (amount(b.unit, b.remaining)) } }
                div {
                    dt { "Forecast at the period's end" }
                    dd { (amount(b.unit, b.forecast)) @if over { " " span.badge.s-failed { "over the limit" } } }
                }
            }
            p.thresholds {
                "Thresholds: "
                @for (i, t) in b.thresholds.iter().enumerate() {
                    @if i > 0 { ", " }
                    (t) "%"
                }
                @if b.crossed.is_empty() {
                    " · none crossed this period."
                }
            }
            @if !b.crossed.is_empty() {
                ul.crossed aria-label="Thresholds crossed this period" {
                    @for c in &b.crossed {
                        li data-threshold=(c.threshold) {
                            span.badge.s-needs_attention { (c.threshold) "%" }
                            " crossed at " (local(&c.crossed_at, &b.tz))
                        }
                    }
                }
            }
        }
    }
}
