//! The "Budgets" section: the budgets that apply to this device's user, as the ingest last reported
//! them (`quota` of the outbox's [`Status`], what `GET /v1/quota` answers), each with a meter and its
//! figures in plain words ([`crate::quota`]), and the reminder that they are advisory.
//!
//! Hooks: `section#budgets`, `[data-field=budgets]` (the list, or the sentence saying there is none),
//! `li[data-budget=<budget_id>]`, `#advisory`. No inline style (the page's CSP allows none): the bar is
//! a native `<meter>`.

use apiary_schema::quota::BudgetState;
use maud::{html, Markup};

use crate::outbox::Status;
use crate::quota::{amount, budget_name, percent, period_words, thresholds_words, ADVISORY};

/// The section.
pub(super) fn budgets_section(s: &Status) -> Markup {
    let view = &s.stored.quota;
    let when = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M UTC").to_string();
    html! {
        section #budgets aria-labelledby="budgets-title" {
            h2 #budgets-title { "Budgets" }
            @match &view.quota {
                None => p.none data-field="budgets" { "No budget reported yet: while sharing is on, the \
                    server reports the budgets that apply to you with its answers." },
                Some(q) if q.budgets.is_empty() => p data-field="budgets" {
                    "No budget applies to you (as of " (when(q.as_of)) ")." },
                Some(q) => {
                    ul.budgets data-field="budgets" { @for b in &q.budgets { (budget_item(b)) } }
                    p.note { "As reported by the server at " (when(q.as_of)) "." }
                },
            }
            p.note #advisory { (capitalised(ADVISORY)) ". A budget that is spent stops nothing here: \
                your events are still recorded and sent. Your tools may read the budgets and choose to stop." }
        }
    }
}

/// One budget: name and period, a meter, the figures, the thresholds.
fn budget_item(b: &BudgetState) -> Markup {
    let shown = percent(b.percent);
    let value = if b.percent.is_finite() {
        b.percent.clamp(0.0, 100.0)
    } else {
        0.0
    };
    let (low, high) = meter_bands(&b.thresholds);
    html! {
        li data-budget=(b.budget_id) {
            div.budget-head { strong { (budget_name(b)) } " " span.note { (period_words(b)) } }
            meter min="0" max="100" low=(low) high=(high) optimum="0" value=(value)
                aria-label={ (budget_name(b)) ": " (shown) " used" } { (shown) }
            div.budget-figures { (shown) " of " (amount(&b.unit, b.limit)) " — "
                (amount(&b.unit, b.spent)) " spent" }
            div.note { (thresholds_words(b)) }
        }
    }
}

/// The meter's `low` and `high` (where it turns amber and red): the budget's lowest and highest
/// thresholds under 100%, else 50 and 80.
fn meter_bands(thresholds: &[u32]) -> (u32, u32) {
    let under: Vec<u32> = thresholds.iter().copied().filter(|t| *t < 100).collect();
    match (under.iter().min(), under.iter().max()) {
        (Some(&lo), Some(&hi)) if lo < hi => (lo, hi),
        (Some(&t), _) => (t.min(50), t),
        _ => (50, 80),
    }
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_meter_turns_at_the_budgets_own_thresholds() {
        assert_eq!(meter_bands(&[50, 80, 100]), (50, 80));
        assert_eq!(meter_bands(&[90]), (50, 90));
        assert_eq!(meter_bands(&[30]), (30, 30));
        assert_eq!(meter_bands(&[100]), (50, 80));
        assert_eq!(
            capitalised(ADVISORY),
            "Advisory: the agent never stops on its own"
        );
    }
}
