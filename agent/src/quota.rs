//! # Quota visibility on the device
//!
//! The budgets that apply to this device's user, as the ingest last reported them, shown where the user
//! and the runtimes look:
//!
//! ```text
//! push (every batch and heartbeat: X-Apiary-Quota: 1) ──answer.quota──▶ outbox (memory + `quota` table)
//!     ──▶ GET /v1/quota (either local token), GET /v1/status `quota`, `apiary-agent status [--json]`,
//!         the settings page's "Budgets"
//! ```
//!
//! All of them serve one shape, [`crate::outbox::QuotaView`]. Which answer is kept
//! ([`crate::outbox::Outbox::keep_quota`]): the latest reading; an answer without `quota` (an older
//! ingest) keeps the known one, an answer with `budgets: []` replaces it.
//!
//! **Advisory.** The agent never stops, slows or drops anything on its own because a budget is spent:
//! the events already happened, and losing them would make every later number wrong. A runtime or the
//! desktop reads `GET /v1/quota` and may choose to stop.
//!
//! This module holds the plain words: amounts are exact integers from the ingest (nano-USD for `usd`,
//! tokens for `tokens`) and are only rounded here, for display.

use apiary_schema::quota::BudgetState;

use crate::outbox::QuotaView;

/// What the agent says about itself next to every budget display.
pub const ADVISORY: &str = "advisory: the agent never stops on its own";

/// `status`'s budget lines: a heading line, then one line per budget.
pub fn status_lines(view: &QuotaView) -> String {
    let Some(q) = &view.quota else {
        return "budgets:   none reported yet (the ingest reports them in its answers while sync is on)\n"
            .into();
    };
    let when = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%d %H:%M:%S UTC").to_string();
    let received = view
        .received_at
        .map_or(String::new(), |t| format!(", received {}", when(t)));
    let mut out = if q.budgets.is_empty() {
        format!(
            "budgets:   none applies to this device's user (as of {}{received})\n",
            when(q.as_of)
        )
    } else {
        format!("budgets:   as of {}{received}; {ADVISORY}\n", when(q.as_of))
    };
    for b in &q.budgets {
        out += &format!("  {}\n", budget_line(b));
    }
    out
}

/// `budget "team monthly" (month, Europe/Berlin): 82.4% of $100.00 — $82.40 spent, thresholds crossed
/// 50%, 80%`.
pub fn budget_line(b: &BudgetState) -> String {
    format!(
        "budget {} ({}): {} of {} — {} spent, {}",
        budget_name(b),
        period_words(b),
        percent(b.percent),
        amount(&b.unit, b.limit),
        amount(&b.unit, b.spent),
        thresholds_words(b)
    )
}

/// The budget's name in quotes, else its id.
pub fn budget_name(b: &BudgetState) -> String {
    match &b.name {
        Some(n) if !n.trim().is_empty() => format!("{n:?}"),
        _ => b.budget_id.clone(),
    }
}

/// `month, Europe/Berlin`, then what the scope narrows it to (`model m`, `user u`, `colony c`).
pub fn period_words(b: &BudgetState) -> String {
    let mut words = vec![b.period.clone(), b.tz.clone()];
    let s = &b.scope;
    for (what, v) in [
        ("user", &s.user),
        ("model", &s.model),
        ("colony", &s.colony),
    ] {
        if let Some(v) = v {
            words.push(format!("{what} {v}"));
        }
    }
    words.join(", ")
}

/// `thresholds crossed 50%, 80%`, or `no threshold crossed yet (50%, 80%, 100%)`.
pub fn thresholds_words(b: &BudgetState) -> String {
    let list = |t: &[u32]| {
        t.iter()
            .map(|p| format!("{p}%"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match (b.crossed.as_slice(), b.thresholds.as_slice()) {
        ([], []) => "no thresholds".into(),
        ([], all) => format!("no threshold crossed yet ({})", list(all)),
        (crossed, _) => format!("thresholds crossed {}", list(crossed)),
    }
}

/// `82.4%`.
pub fn percent(p: f64) -> String {
    if p.is_finite() {
        format!("{p:.1}%")
    } else {
        "-%".into()
    }
}

/// An amount in the budget's unit: `$1,234.56` for `usd` (nano-USD, rounded to cents; `<$0.01` for a
/// little more than nothing), `1,234,567 tokens` for `tokens`, else the number and the unit.
pub fn amount(unit: &str, value: i64) -> String {
    match unit {
        "usd" => usd(value),
        "tokens" => format!("{} tokens", grouped(i128::from(value))),
        other => format!("{} {other}", grouped(i128::from(value))),
    }
}

fn usd(nanos: i64) -> String {
    let sign = if nanos < 0 { "-" } else { "" };
    let abs = i128::from(nanos).abs();
    let cents = (abs + 5_000_000) / 10_000_000;
    if cents == 0 && abs > 0 {
        return format!("{sign}<$0.01");
    }
    format!("{sign}${}.{:02}", grouped(cents / 100), cents % 100)
}

/// `1234567` → `1,234,567`.
fn grouped(n: i128) -> String {
    let digits = n.abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_schema::quota::BudgetScope;

    fn budget(unit: &str, limit: i64, spent: i64) -> BudgetState {
        BudgetState {
            budget_id: "b_1".into(),
            name: Some("team monthly".into()),
            scope: BudgetScope::default(),
            period: "month".into(),
            tz: "Europe/Berlin".into(),
            period_start: "2026-10-31T23:00:00Z".parse().unwrap(),
            period_end: "2026-11-30T23:00:00Z".parse().unwrap(),
            unit: unit.into(),
            limit,
            spent,
            percent: spent as f64 * 100.0 / limit as f64,
            thresholds: vec![50, 80, 100],
            crossed: vec![50, 80],
        }
    }

    #[test]
    fn a_usd_budget_reads_in_dollars_and_cents() {
        let b = budget("usd", 100_000_000_000, 82_400_000_000);
        assert_eq!(
            budget_line(&b),
            "budget \"team monthly\" (month, Europe/Berlin): 82.4% of $100.00 — $82.40 spent, \
             thresholds crossed 50%, 80%"
        );
    }

    #[test]
    fn a_tokens_budget_reads_in_tokens_with_its_scope() {
        let mut b = budget("tokens", 2_000_000, 250_000);
        b.name = None;
        b.crossed = vec![];
        b.scope.model = Some("claude-sonnet-4-5".into());
        assert_eq!(
            budget_line(&b),
            "budget b_1 (month, Europe/Berlin, model claude-sonnet-4-5): 12.5% of 2,000,000 tokens \
             — 250,000 tokens spent, no threshold crossed yet (50%, 80%, 100%)"
        );
    }

    #[test]
    fn status_says_when_nothing_is_known_none_applies_or_lists_each_budget() {
        assert!(status_lines(&QuotaView::default()).contains("none reported yet"));
        let mut q = apiary_schema::quota::Quota {
            as_of: "2026-11-03T10:00:00Z".parse().unwrap(),
            budgets: vec![],
        };
        let view = |q: &apiary_schema::quota::Quota| QuotaView {
            quota: Some(q.clone()),
            received_at: Some("2026-11-03T10:00:02Z".parse().unwrap()),
            advisory: true,
        };
        assert!(status_lines(&view(&q)).contains("none applies"));
        q.budgets = vec![
            budget("usd", 100_000_000_000, 82_400_000_000),
            budget("tokens", 1_000, 10),
        ];
        let text = status_lines(&view(&q));
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(text.starts_with("budgets:   as of 2026-11-03 10:00:00 UTC, received 2026-11-03 10:00:02 UTC; advisory"), "{text}");
        assert!(
            text.contains("\n  budget \"team monthly\" (month, Europe/Berlin): 82.4% of $100.00"),
            "{text}"
        );
        assert!(
            text.contains("1.0% of 1,000 tokens — 10 tokens spent"),
            "{text}"
        );
    }

    #[test]
    fn amounts_round_to_cents_exactly() {
        assert_eq!(amount("usd", 0), "$0.00");
        assert_eq!(amount("usd", 4_999_999), "<$0.01");
        assert_eq!(amount("usd", 5_000_000), "$0.01");
        assert_eq!(amount("usd", 1_234_567_890_000), "$1,234.57");
        assert_eq!(amount("usd", -1_500_000_000), "-$1.50");
        assert_eq!(amount("tokens", 999), "999 tokens");
        assert_eq!(amount("tokens", 1_000), "1,000 tokens");
        assert_eq!(grouped(-1_234_567), "-1,234,567");
    }
}
