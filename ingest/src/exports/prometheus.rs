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
        let ints = Family::<Labels, Counter>::default();
        let floats = Family::<Labels, Counter<f64, AtomicU64>>::default();
        let mut float = false;
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
                match (o.value)(&r.usage) {
                    Num::Int(v) => {
                        ints.get_or_create(&set)
                            .inc_by(u64::try_from(v.max(0)).unwrap_or(u64::MAX));
                    }
                    Num::Float(v) => {
                        float = true;
                        floats.get_or_create(&set).inc_by(v);
                    }
                }
            }
        }
        let (name, unit) = split_unit(c.prometheus);
        match (float, unit) {
            (true, Some(u)) => registry.register_with_unit(name, c.help, u, floats),
            (true, None) => registry.register(name, c.help, floats),
            (false, Some(u)) => registry.register_with_unit(name, c.help, u, ints),
            (false, None) => registry.register(name, c.help, ints),
        }
    }
    let mut out = String::new();
    encode(&mut out, &registry).expect("writing to a String cannot fail");
    out
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
