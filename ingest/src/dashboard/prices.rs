//! Prices (`/prices`): the tenant's own entries (newest start first; they win over the shipped catalog
//! for the turns they match), then the catalog shipped with Apiary. Rates in USD per million tokens,
//! exactly as `GET /v1/prices` writes them, with the effective dates and the source.
//!
//! The answer of `get_prices`, so any read token of the tenant may view (as the API allows); adding an
//! entry stays an admin's API call (`POST /v1/prices`), the page only reads.

use axum::extract::State;
use axum::response::Response;
use axum::Json;
use maud::{html, Markup};

use super::format;
use super::layout::{self, Nav};
use super::Viewer;
use crate::routes::prices::{PriceItem, PriceOwner};
use crate::state::AppState;

/// `GET /prices`.
pub async fn page(State(state): State<AppState>, viewer: Viewer) -> Response {
    let list = match crate::routes::prices::get_prices(State(state), viewer.principal.clone()).await
    {
        Ok(Json(l)) => l,
        Err(e) => return layout::error_page(e),
    };
    let (tenant, shipped): (Vec<&PriceItem>, Vec<&PriceItem>) = list
        .prices
        .iter()
        .partition(|p| p.owner == PriceOwner::Tenant);
    let body = html! {
        h1 { "Prices" }
        p.note { "Rates in USD per million tokens. Cache reads and writes are inside a turn's input tokens; "
            "a missing cache rate is priced as input (a missing 1-hour write as the 5-minute one)." }
        section aria-labelledby="tenant-title" {
            h2 #tenant-title { "This tenant's entries" }
            @if tenant.is_empty() {
                p.empty { "None: the shipped catalog prices every turn. An admin token adds an entry with "
                    code { "POST /v1/prices" } "." }
            } @else {
                (table("tenant", "This tenant's price entries, newest start first", &tenant))
            }
        }
        section aria-labelledby="shipped-title" {
            h2 #shipped-title { "Shipped catalog" }
            (table("shipped", "The price catalog shipped with Apiary", &shipped))
        }
    };
    layout::page("Prices", Nav::Prices, &viewer, body)
}

/// A rate, or a dash.
fn rate(r: &Option<String>) -> Markup {
    html! { @if let Some(r) = r { "$" (r) } @else { span.none { "–" } } }
}

/// The date part of an RFC 3339 time (the time too when it is not midnight).
fn date(t: &str) -> &str {
    match t.strip_suffix("T00:00:00Z") {
        Some(d) => d,
        None => t,
    }
}

fn table(owner: &str, caption: &str, items: &[&PriceItem]) -> Markup {
    html! {
        div.scroll { table.prices data-owner=(owner) {
            caption.visually-hidden { (caption) }
            thead { tr {
                th scope="col" { "Models" } th scope="col" { "Effective" }
                th.num scope="col" { "Input" } th.num scope="col" { "Output" }
                th.num scope="col" { "Cache read" } th.num scope="col" { "Cache write 5m" }
                th.num scope="col" { "Cache write 1h" } th scope="col" { "Source" }
                th scope="col" { "Long-context tiers" }
            } }
            tbody { @for p in items {
                tr data-price=(p.price_id) {
                    th scope="row" {
                        @for (i, m) in p.models.iter().enumerate() { @if i > 0 { br; } code { (m) } }
                    }
                    td {
                        time datetime=(p.from) { (date(&p.from)) } " → "
                        @if let Some(u) = &p.until { time datetime=(u) { (date(u)) } } @else { "open" }
                    }
                    td.num data-rate="input" { "$" (p.input) }
                    td.num data-rate="output" { "$" (p.output) }
                    td.num { (rate(&p.cache_read)) }
                    td.num { (rate(&p.cache_write_5m)) }
                    td.num { (rate(&p.cache_write_1h)) }
                    td.source {
                        @if let Some(s) = &p.source {
                            @if s.starts_with("https://") { a href=(s) rel="noreferrer" { (s) } } @else { (s) }
                        } @else { span.none { "–" } }
                        @if let Some(a) = &p.as_of { br; span.note { "as of " (a) } }
                        @if let Some(n) = &p.note { br; span.note { (n) } }
                    }
                    td {
                        @if p.tiers.is_empty() { span.none { "–" } }
                        @for (i, t) in p.tiers.iter().enumerate() {
                            @if i > 0 { br; }
                            "above " (format::count(t.above_input_tokens.into())) " input tokens: $"
                            (t.input) " in, $" (t.output) " out"
                            @if let Some(c) = &t.cache_read { ", $" (c) " cache read" }
                        }
                    }
                }
            } }
        } }
    }
}
