use super::*;

fn t(s: &str) -> DateTime<Utc> {
    parse_instant(s).unwrap()
}

fn spec(models: &[&str], from: &str, input: &str, output: &str) -> PriceSpec {
    PriceSpec {
        id: None,
        models: models.iter().map(|m| m.to_string()).collect(),
        from: from.into(),
        until: None,
        input: input.into(),
        output: output.into(),
        cache_read: None,
        cache_write_5m: None,
        cache_write_1h: None,
        tiers: vec![],
        source: None,
        as_of: None,
        note: None,
    }
}

fn entry(id: &str, models: &[&str], from: &str, input: &str) -> PriceEntry {
    spec(models, from, input, "0").check(id).unwrap()
}

fn tokens(input: u64, output: u64) -> TurnTokens {
    TurnTokens {
        input,
        output,
        ..TurnTokens::default()
    }
}

#[test]
fn rates_are_exact_decimals_in_nanos_per_million() {
    assert_eq!(parse_rate("3.00"), Ok(3_000_000_000));
    assert_eq!(parse_rate("0.025"), Ok(25_000_000));
    assert_eq!(parse_rate("15"), Ok(15_000_000_000));
    assert_eq!(parse_rate("0.000000001"), Ok(1));
    assert_eq!(parse_rate("1000000"), Ok(MAX_RATE_NANOS));
    for bad in [
        "",
        "-1",
        "1e3",
        "1.",
        ".5",
        "3,00",
        "abc",
        " ",
        "0.0000000001",
        "1000000.01",
    ] {
        assert!(parse_rate(bad).is_err(), "{bad:?}");
    }
    assert_eq!(format_rate(3_000_000_000), "3.00");
    assert_eq!(format_rate(25_000_000), "0.025");
    assert_eq!(format_rate(22_500_000_000), "22.50");
    assert_eq!(format_rate(0), "0.00");
    for s in ["3.00", "0.025", "22.50", "0.000000001", "1000000.00"] {
        assert_eq!(format_rate(parse_rate(s).unwrap()), s);
    }
}

#[test]
fn the_shipped_catalog_parses_and_every_entry_names_its_source_and_date() {
    let all = parse_catalog(CATALOG_TOML).unwrap();
    assert!(all.len() >= 15, "{}", all.len());
    let file: CatalogFile = toml::from_str(CATALOG_TOML).unwrap();
    for p in &file.price {
        let id = p.id.as_deref().unwrap();
        let source = p
            .source
            .as_deref()
            .unwrap_or_else(|| panic!("{id}: source"));
        assert!(source.starts_with("https://"), "{id}: {source}");
        let as_of = p.as_of.as_deref().unwrap_or_else(|| panic!("{id}: as_of"));
        assert!(
            NaiveDate::parse_from_str(as_of, "%Y-%m-%d").is_ok(),
            "{id}: {as_of}"
        );
    }
    assert_eq!(shipped().len(), all.len());
}

/// The models the code base, the fixtures and the demo use, and the three providers' flagships, are
/// priced by exactly the entry meant for them (no pattern of another entry takes them).
#[test]
fn the_shipped_catalog_prices_the_models_in_use_with_the_right_entry() {
    let at = t("2026-11-03");
    let cases = [
        ("claude-sonnet-4-5-20250929", "anthropic/claude-sonnet-4-5"),
        ("claude-sonnet-4-5", "anthropic/claude-sonnet-4-5"),
        ("claude-haiku-4-5-20251001", "anthropic/claude-haiku-4-5"),
        ("claude-haiku-4-5", "anthropic/claude-haiku-4-5"),
        ("claude-opus-4-1-20250805", "anthropic/claude-opus-4-1"),
        ("claude-opus-4-20250514", "anthropic/claude-opus-4"),
        ("claude-sonnet-4-20250514", "anthropic/claude-sonnet-4"),
        ("claude-opus-4-5-20251101", "anthropic/claude-opus-4-5"),
        ("claude-opus-4-6", "anthropic/claude-opus-4-6"),
        ("claude-sonnet-4-6", "anthropic/claude-sonnet-4-6"),
        ("gpt-5-mini", "openai/gpt-5-mini"),
        ("gpt-5-mini-2025-08-07", "openai/gpt-5-mini"),
        ("gpt-5", "openai/gpt-5"),
        ("gpt-5-2025-08-07", "openai/gpt-5"),
        ("gpt-5-nano", "openai/gpt-5-nano"),
        ("gpt-5.1", "openai/gpt-5.1"),
        ("gpt-5.2", "openai/gpt-5.2"),
        ("gpt-4o", "openai/gpt-4o"),
        ("gpt-4o-mini", "openai/gpt-4o-mini"),
        ("gemini-2.5-pro", "google/gemini-2.5-pro"),
        ("gemini-2.5-flash", "google/gemini-2.5-flash"),
        ("gemini-3-pro-preview", "google/gemini-3-pro-preview"),
        ("Claude-Sonnet-4-5", "anthropic/claude-sonnet-4-5"),
    ];
    for (model, id) in cases {
        let hits: Vec<&str> = shipped()
            .iter()
            .filter(|e| e.applies(&model.to_ascii_lowercase(), at).is_some())
            .map(|e| e.id.as_str())
            .collect();
        assert_eq!(hits, vec![id], "{model}");
        assert_eq!(find(&[], shipped(), model, at).unwrap().id, id, "{model}");
    }
    for unknown in [
        "n",
        "m",
        "gpt-5-minimal",
        "claude",
        "gemini-2.5-flash-lite",
        "gpt-4",
    ] {
        assert_eq!(
            find(&[], shipped(), unknown, at).map(|e| &e.id),
            None,
            "{unknown}"
        );
    }
    assert_eq!(find(&[], shipped(), "", at), None);
}

/// The fixture generator's prices (tests/fixtures/hive/hivelog.py `PRICES`, `cost_of`) agree with the
/// catalog: its reported costs are what the catalog estimates (it rounds to 6 decimals).
#[test]
fn the_catalog_reproduces_the_fixture_generators_costs() {
    let at = t("2026-11-03T10:15:09Z");
    // (model, input, cached, cache creation, output, the fixture's cost_usd in micro-USD)
    let fixture_cost_micros = |inp: i128, cached: i128, cc: i128, out: i128, p: [i128; 4]| {
        // p in micro-USD per MTok; the fixture's Decimal arithmetic, rounded half-even at 6 decimals:
        // compare in nanos to within the rounding.
        ((inp - cached - cc) * p[0] + cached * p[2] + cc * p[3] + out * p[1]) / 1_000_000
    };
    type Case = (&'static str, u64, u64, u64, u64, [i128; 4]);
    let cases: [Case; 3] = [
        (
            "claude-sonnet-4-5-20250929",
            18250,
            12000,
            0,
            412,
            [3_000_000, 15_000_000, 300_000, 3_750_000],
        ),
        (
            "claude-haiku-4-5-20251001",
            12313,
            9680,
            2502,
            200,
            [1_000_000, 5_000_000, 100_000, 1_250_000],
        ),
        (
            "gpt-5-mini",
            15103,
            0,
            0,
            640,
            [250_000, 2_000_000, 25_000, 0],
        ),
    ];
    for (model, inp, cached, cc, out, p) in cases {
        let tokens = TurnTokens {
            input: inp,
            output: out,
            cache_read: cached,
            cache_write_5m: cc,
            cache_write_1h: 0,
        };
        let est = estimate(&[], shipped(), model, at, &tokens).unwrap();
        let micro = fixture_cost_micros(inp.into(), cached.into(), cc.into(), out.into(), p);
        // The fixture's micro-USD value times 1000 is within a micro-USD of the nano estimate.
        assert!(
            (i128::from(est) - micro * 1000).abs() < 1000,
            "{model}: {est} vs {micro}"
        );
    }
    // A typical Hive turn of a worker: 6250 uncached + 12000 cache reads + 412 output of Sonnet 4.5.
    let sonnet = TurnTokens {
        input: 18250,
        output: 412,
        cache_read: 12000,
        ..TurnTokens::default()
    };
    assert_eq!(
        estimate(&[], shipped(), "claude-sonnet-4-5-20250929", at, &sonnet),
        Some(6250 * 3000 + 12000 * 300 + 412 * 15000)
    );
}

#[test]
fn cache_reads_and_writes_are_inside_input_and_priced_at_their_own_rates() {
    let mut s = spec(&["m"], "2026-01-01", "3.00", "15.00");
    s.cache_read = Some("0.30".into());
    s.cache_write_5m = Some("3.75".into());
    s.cache_write_1h = Some("6.00".into());
    let e = s.check("e").unwrap();
    let turn = TurnTokens {
        input: 1_000_000,
        output: 1_000_000,
        cache_read: 500_000,
        cache_write_5m: 200_000,
        cache_write_1h: 100_000,
    };
    // 200k uncached × 3 + 500k × 0.30 + 200k × 3.75 + 100k × 6 + 1M × 15 (USD per million)
    assert_eq!(
        e.cost(&turn),
        Some(600_000_000 + 150_000_000 + 750_000_000 + 600_000_000 + 15_000_000_000)
    );
    // More cache than input (a producer bug): nothing uncached, never negative.
    let odd = TurnTokens {
        input: 10,
        cache_read: 100,
        ..TurnTokens::default()
    };
    assert_eq!(e.cost(&odd), Some(30_000)); // 100 × 300 nano
}

#[test]
fn missing_cache_rates_fall_back_to_input_and_the_5_minute_write() {
    let mut s = spec(&["m"], "2026-01-01", "2.00", "0");
    let turn = TurnTokens {
        input: 3_000_000,
        cache_read: 1_000_000,
        cache_write_5m: 1_000_000,
        cache_write_1h: 1_000_000,
        ..TurnTokens::default()
    };
    assert_eq!(s.check("e").unwrap().cost(&turn), Some(6_000_000_000));
    s.cache_write_5m = Some("4.00".into());
    // 1M read at input (2) + 1M 5m at 4 + 1M 1h at the 5m rate (4)
    assert_eq!(s.check("e").unwrap().cost(&turn), Some(10_000_000_000));
}

#[test]
fn costs_round_half_up_to_a_whole_nano_once_per_turn() {
    let e = spec(&["m"], "2026-01-01", "0.0000005", "0")
        .check("e")
        .unwrap();
    // 0.0000005 USD per MTok = 500 nano per MTok = 0.0005 nano per token.
    assert_eq!(e.cost(&tokens(999, 0)), Some(0));
    assert_eq!(e.cost(&tokens(1000, 0)), Some(1)); // exactly 0.5 → 1
    assert_eq!(e.cost(&tokens(2999, 0)), Some(1));
    assert_eq!(e.cost(&tokens(3000, 0)), Some(2));
}

#[test]
fn a_huge_estimate_is_no_estimate() {
    let e = spec(&["m"], "2026-01-01", "1000000", "1000000")
        .check("e")
        .unwrap();
    assert_eq!(e.cost(&tokens(1_000_000, 0)), Some(MAX_ESTIMATE_NANOS));
    assert_eq!(e.cost(&tokens(1_000_001, 0)), None);
    assert_eq!(e.cost(&tokens(u64::MAX, u64::MAX)), None);
}

#[test]
fn tiers_apply_strictly_above_their_input_size_and_the_highest_wins() {
    let mut s = spec(&["m"], "2026-01-01", "3.00", "15.00");
    let tier = |above: u64, input: &str, output: &str| TierSpec {
        above_input_tokens: above,
        input: input.into(),
        output: output.into(),
        cache_read: None,
        cache_write_5m: None,
        cache_write_1h: None,
    };
    // Written out of order: sorted when checked.
    s.tiers = vec![
        tier(500_000, "9.00", "30.00"),
        tier(200_000, "6.00", "22.50"),
    ];
    let e = s.check("e").unwrap();
    assert_eq!(
        e.cost(&tokens(200_000, 1000)),
        Some(200_000 * 3000 + 1000 * 15_000)
    );
    assert_eq!(
        e.cost(&tokens(200_001, 1000)),
        Some(200_001 * 6000 + 1000 * 22_500)
    );
    assert_eq!(e.cost(&tokens(500_000, 0)), Some(500_000 * 6000));
    assert_eq!(e.cost(&tokens(500_001, 0)), Some(500_001 * 9000));
    // The tier counts the whole prompt, cache included (Anthropic's rule).
    let cached = TurnTokens {
        input: 250_000,
        cache_read: 240_000,
        ..TurnTokens::default()
    };
    assert_eq!(e.rates_for(cached.input).input, 6_000_000_000);
    s.tiers.push(tier(200_000, "1", "1"));
    assert!(s.check("e").is_err(), "two tiers at one size");
    // The shipped Sonnet 4.5 long-context tier.
    let sonnet = find(&[], shipped(), "claude-sonnet-4-5", t("2026-11-03")).unwrap();
    assert_eq!(sonnet.rates_for(200_001).output, 22_500_000_000);
    assert_eq!(sonnet.rates_for(200_000).output, 15_000_000_000);
}

#[test]
fn effective_dates_bound_an_entry_from_included_until_excluded() {
    let mut s = spec(&["m"], "2026-11-15", "1", "0");
    s.until = Some("2026-12-01T00:00:00Z".into());
    let e = s.check("e").unwrap();
    let at = |x: &str| find(std::slice::from_ref(&e), &[], "m", t(x)).is_some();
    assert!(!at("2026-11-14T23:59:59.999Z"));
    assert!(at("2026-11-15T00:00:00Z"));
    assert!(at("2026-11-30T23:59:59Z"));
    assert!(!at("2026-12-01T00:00:00Z"));
    s.until = Some("2026-11-15".into());
    assert!(s.check("e").is_err(), "until must be after from");
}

#[test]
fn a_price_change_mid_month_splits_the_month() {
    let old = entry("old", &["m"], "2026-01-01", "2.00");
    let new = entry("new", &["m"], "2026-11-15T12:00:00+01:00", "3.00");
    let both = [new.clone(), old.clone()];
    let one_m = tokens(1_000_000, 0);
    let cost = |at: &str| estimate(&[], &both, "m", t(at), &one_m);
    assert_eq!(cost("2026-11-01"), Some(2_000_000_000));
    assert_eq!(cost("2026-11-15T10:59:59Z"), Some(2_000_000_000));
    assert_eq!(cost("2026-11-15T11:00:00Z"), Some(3_000_000_000));
    assert_eq!(cost("2026-11-30"), Some(3_000_000_000));
    // The order the entries are given in does not matter.
    let reversed = [old, new];
    assert_eq!(
        estimate(&[], &reversed, "m", t("2026-11-20"), &one_m),
        Some(3_000_000_000)
    );
}

#[test]
fn tenant_entries_win_over_shipped_ones_even_when_older() {
    let shipped_new = entry("s", &["m*"], "2026-06-01", "5.00");
    let tenant_old = entry("t", &["m"], "2026-01-01", "1.00");
    let at = t("2026-11-03");
    let tenant = std::slice::from_ref(&tenant_old);
    let shipped = std::slice::from_ref(&shipped_new);
    assert_eq!(find(tenant, shipped, "m", at).unwrap().id, "t");
    // Where the tenant's entry does not apply (another model, or before it starts), the shipped one does.
    assert_eq!(find(tenant, shipped, "m2", at).unwrap().id, "s");
    assert_eq!(find(tenant, shipped, "m", t("2025-12-31")), None);
    assert_eq!(
        find(tenant, shipped, "m", t("2026-07-01")).unwrap().id,
        "t",
        "the tenant's applies from January"
    );
}

#[test]
fn among_one_owners_entries_the_newest_start_then_the_longest_pattern_then_the_id_wins() {
    let at = t("2026-11-03");
    let a = entry("a", &["claude-*"], "2026-03-01", "1");
    let b = entry("b", &["claude-sonnet-*"], "2026-01-01", "2");
    let c = entry("c", &["claude-sonnet-4-5*"], "2026-01-01", "3");
    let d = entry("d", &["claude-sonnet-4-5*"], "2026-01-01", "4");
    let all = [d.clone(), c.clone(), b.clone(), a.clone()];
    assert_eq!(
        find(&all, &[], "claude-sonnet-4-5", at).unwrap().id,
        "a",
        "newest start"
    );
    let older = [d, c, b];
    assert_eq!(
        find(&older, &[], "claude-sonnet-4-5", at).unwrap().id,
        "c",
        "longest, then id"
    );
    assert_eq!(find(&older, &[], "claude-sonnet-3", at).unwrap().id, "b");
}

#[test]
fn patterns_match_whole_names_case_insensitively() {
    assert!(pattern_matches(
        "claude-sonnet-4-5*",
        "claude-sonnet-4-5-20250929"
    ));
    assert!(pattern_matches("claude-sonnet-4-5*", "Claude-Sonnet-4-5"));
    assert!(!pattern_matches(
        "claude-sonnet-4-5",
        "claude-sonnet-4-5-20250929"
    ));
    assert!(!pattern_matches("gpt-5", "gpt-5-mini"));
    assert!(pattern_matches(
        "*sonnet*",
        "us.anthropic.claude-sonnet-4-5-v1:0"
    ));
    assert!(pattern_matches("a*b*c", "aXbYbZc"));
    assert!(!pattern_matches("a*b*c", "aXbYbZ"));
    assert!(pattern_matches("a**", "a"));
    assert!(!pattern_matches("", "a"));
    // No exponential blow-up on a pathological pattern.
    let model = "a".repeat(10_000);
    assert!(!pattern_matches(&format!("{}b", "a*".repeat(50)), &model));
}

#[test]
fn bad_entries_are_refused_with_the_field_named() {
    let ok = spec(&["m"], "2026-01-01", "1", "2");
    assert!(ok.check("x").is_ok());
    let why = |f: &dyn Fn(&mut PriceSpec)| {
        let mut s = ok.clone();
        f(&mut s);
        s.check("x").unwrap_err().to_string()
    };
    assert!(why(&|s| s.models.clear()).starts_with("models:"));
    assert!(why(&|s| s.models = vec!["*".into()]).starts_with("models:"));
    assert!(why(&|s| s.models = vec![" ".into()]).starts_with("models:"));
    assert!(why(&|s| s.from = "yesterday".into()).starts_with("from:"));
    assert!(why(&|s| s.until = Some("2025-01-01".into())).starts_with("until:"));
    assert!(why(&|s| s.input = "1.5e3".into()).starts_with("input:"));
    assert!(why(&|s| s.cache_read = Some("-1".into())).starts_with("cache_read:"));
    let e = why(&|s| {
        s.tiers = vec![TierSpec {
            above_input_tokens: 1,
            input: "1".into(),
            output: "x".into(),
            cache_read: None,
            cache_write_5m: None,
            cache_write_1h: None,
        }]
    });
    assert!(e.starts_with("tiers[0].output:"), "{e}");
    // Unknown fields are refused, not ignored (a typo would silently price at the input rate).
    let typo =
        r#"{"models":["m"],"from":"2026-01-01","input":"1","output":"2","cache_reed":"0.1"}"#;
    assert!(serde_json::from_str::<PriceSpec>(typo).is_err());
    // Floats are refused: rates are decimal strings.
    let float = r#"{"models":["m"],"from":"2026-01-01","input":3.0,"output":"2"}"#;
    assert!(serde_json::from_str::<PriceSpec>(float).is_err());
}
