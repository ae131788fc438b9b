//! A tenant's usage as a Prometheus scrape: each [`COUNTERS`] entry per label set (one usage row of the
//! chosen dimensions, over all time), in the OpenMetrics text format `prometheus-client` encodes.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

use super::series::{label_name, Num, COUNTERS};
use crate::query::usage::{Dim, UsageRow};

type Labels = Vec<(String, String)>;

/// The scrape text of `rows` (usage rows grouped by dimensions whose label names are `labels`, in
/// order).
pub fn render(labels: &[&'static str], rows: &[UsageRow]) -> String {
    let mut registry = Registry::default();
    let mut done: Vec<&'static str> = vec![];
    for c in COUNTERS {
        if done.contains(&c.prometheus) {
            continue;
        }
        done.push(c.prometheus);
        // The token counter's types share one family: every point of every counter of this name.
        let mut points: Vec<(Labels, Num)> = vec![];
        for o in COUNTERS.iter().filter(|o| o.prometheus == c.prometheus) {
            for r in rows {
                let mut set: Labels = labels
                    .iter()
                    .zip(&r.keys)
                    .map(|(l, k)| (l.to_string(), k.clone()))
                    .collect();
                if let Some((name, value)) = o.attribute {
                    set.push((label_name(name), value.to_string()));
                }
                points.push((set, (o.value)(&r.usage)));
            }
        }
        let (name, unit) = split_unit(c.prometheus);
        let unit = unit.unwrap_or(Unit::Other(String::new()));
        let float = points.iter().any(|(_, v)| matches!(v, Num::Float(_)));
        // Without labels, a plain counter (`name_total 3`, not `name_total{} 3`).
        let plain = points.len() == 1 && points[0].0.is_empty();
        match (plain, float) {
            (true, true) => {
                let m = Counter::<f64, AtomicU64>::default();
                m.inc_by(as_f64(points[0].1));
                register(&mut registry, name, c.help, unit, m);
            }
            (true, false) => {
                let m = Counter::<u64>::default();
                m.inc_by(as_u64(points[0].1));
                register(&mut registry, name, c.help, unit, m);
            }
            (false, true) => {
                let f = Family::<Labels, Counter<f64, AtomicU64>>::default();
                for (set, v) in &points {
                    f.get_or_create(set).inc_by(as_f64(*v));
                }
                register(&mut registry, name, c.help, unit, f);
            }
            (false, false) => {
                let f = Family::<Labels, Counter>::default();
                for (set, v) in &points {
                    f.get_or_create(set).inc_by(as_u64(*v));
                }
                register(&mut registry, name, c.help, unit, f);
            }
        }
    }
    let mut out = String::new();
    encode(&mut out, &registry).expect("writing to a String cannot fail");
    out
}

fn register(
    registry: &mut Registry,
    name: &str,
    help: &str,
    unit: Unit,
    metric: impl prometheus_client::registry::Metric,
) {
    match unit {
        Unit::Other(u) if u.is_empty() => registry.register(name, help, metric),
        u => registry.register_with_unit(name, help, u, metric),
    }
}

/// An integer sum as a counter's value (sums are never negative; beyond 2^64 it saturates).
fn as_u64(v: Num) -> u64 {
    match v {
        Num::Int(i) => u64::try_from(i.max(0)).unwrap_or(u64::MAX),
        Num::Float(f) => f.max(0.0) as u64,
    }
}

fn as_f64(v: Num) -> f64 {
    match v {
        Num::Int(i) => i as f64,
        Num::Float(f) => f,
    }
}

/// A Prometheus name and its unit suffix, which the encoder appends again (and announces in `# UNIT`).
fn split_unit(name: &'static str) -> (&'static str, Option<Unit>) {
    for (suffix, unit) in [
        ("_seconds", Unit::Seconds),
        ("_tokens", Unit::Other("tokens".into())),
        ("_usd", Unit::Other("usd".into())),
        ("_nanodollars", Unit::Other("nanodollars".into())),
    ] {
        if let Some(base) = name.strip_suffix(suffix) {
            return (base, Some(unit));
        }
    }
    (name, None)
}

/// The label name of each dimension of `dims`.
pub fn label_names(dims: &[Dim]) -> Vec<&'static str> {
    dims.iter().filter_map(|d| super::label_of(*d)).collect()
}
