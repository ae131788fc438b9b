//! A tenant's usage as a Prometheus scrape, in the OpenMetrics text format `prometheus-client` encodes:
//! each [`COUNTERS`] entry per label set (one usage row of the chosen dimensions, over all time), the
//! tool duration histogram per tool row (its `_bucket`s folded from the rollups' slots, exactly, see
//! [`super::series::bucket_bounds_ms`]), and the gauges of now (sessions by status, devices online).

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};
use std::sync::atomic::AtomicU64;

use super::otlp::attribute_of;
use super::series::{
    self, bucket_bounds_ms, bucket_counts, label_name, Num, COUNTERS, DEVICES_ONLINE, SESSIONS,
    STATUS_ATTRIBUTE, TOOL_DURATION,
};
use super::snapshot::{Grouped, Snapshot};
use crate::query::gauges::Count;
use crate::query::usage::{Dim, UsageRow};

type Labels = Vec<(String, String)>;

/// The scrape text of everything in `s`.
pub fn render(s: &Snapshot) -> String {
    let mut registry = Registry::default();
    let labels = label_names(&s.usage.dims);
    counters(&mut registry, &labels, &s.usage.rows);
    histogram(&mut registry, &s.tools);
    gauge(&mut registry, SESSIONS, &s.sessions);
    gauge(&mut registry, DEVICES_ONLINE, &s.devices);
    let mut out = String::new();
    encode(&mut out, &registry).expect("writing to a String cannot fail");
    out
}

/// The label set of a row's `keys` (of `dims`), without the empty ones (Prometheus reads an empty
/// label as an absent one).
fn label_set(dims: &[Dim], keys: &[String]) -> Labels {
    dims.iter()
        .zip(keys)
        .filter(|(_, k)| !k.is_empty())
        .map(|(d, k)| (dim_label(*d), k.clone()))
        .collect()
}

/// A dimension's label: its scrape word (`user`), or its attribute's name (`gen_ai_tool_name`).
fn dim_label(d: Dim) -> String {
    super::label_of(d).map_or_else(|| label_name(attribute_of(d)), str::to_string)
}

/// Every counter of every usage row.
fn counters(registry: &mut Registry, labels: &[&'static str], rows: &[UsageRow]) {
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
                register(registry, name, c.help, unit, m);
            }
            (true, false) => {
                let m = Counter::<u64>::default();
                m.inc_by(as_u64(points[0].1));
                register(registry, name, c.help, unit, m);
            }
            (false, true) => {
                let f = Family::<Labels, Counter<f64, AtomicU64>>::default();
                for (set, v) in &points {
                    f.get_or_create(set).inc_by(as_f64(*v));
                }
                register(registry, name, c.help, unit, f);
            }
            (false, false) => {
                let f = Family::<Labels, Counter>::default();
                for (set, v) in &points {
                    f.get_or_create(set).inc_by(as_u64(*v));
                }
                register(registry, name, c.help, unit, f);
            }
        }
    }
}

/// A gauge per count (with the status as a label, for sessions).
fn gauge(registry: &mut Registry, g: series::Gauge, counts: &Grouped<Count>) {
    let points: Vec<(Labels, i64)> = counts
        .rows
        .iter()
        .map(|c| {
            let mut set = label_set(&counts.dims, &c.keys);
            if let Some(status) = c.status {
                set.push((label_name(STATUS_ATTRIBUTE), status.as_str().to_string()));
            }
            (set, c.value)
        })
        .collect();
    if let [(set, v)] = &points[..] {
        if set.is_empty() {
            let m = Gauge::<i64>::default();
            m.set(*v);
            registry.register(g.prometheus, g.help, m);
            return;
        }
    }
    let f = Family::<Labels, Gauge>::default();
    for (set, v) in &points {
        f.get_or_create(set).set(*v);
    }
    registry.register(g.prometheus, g.help, f);
}

/// One tool row's histogram: its labels, sum (seconds), count, and cumulative buckets (upper bound,
/// count) folded from the rollup slots.
type HistogramPoint = (Labels, f64, u64, Vec<(f64, u64)>);

/// One histogram per tool row.
#[derive(Debug)]
struct Histograms(Vec<HistogramPoint>);

impl EncodeMetric for Histograms {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        for (set, sum, count, buckets) in &self.0 {
            encoder
                .encode_family(set)?
                .encode_histogram::<NoLabelSet>(*sum, *count, buckets, None)?;
        }
        Ok(())
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

fn histogram(registry: &mut Registry, tools: &Grouped<UsageRow>) {
    let bounds: Vec<f64> = bucket_bounds_ms()
        .into_iter()
        .map(|ms| ms as f64 / 1000.0)
        .chain([f64::INFINITY])
        .collect();
    let points = tools
        .rows
        .iter()
        .filter_map(|r| {
            let t = r.tool.as_ref()?;
            let counts = bucket_counts(&t.hist);
            let count: u64 = counts.iter().sum();
            let buckets: Vec<(f64, u64)> = bounds.iter().copied().zip(counts).collect();
            let sum = t.duration_ms as f64 / 1000.0;
            Some((label_set(&tools.dims, &r.keys), sum, count, buckets))
        })
        .collect();
    let (name, unit) = split_unit(TOOL_DURATION.prometheus);
    let unit = unit.unwrap_or(Unit::Other(String::new()));
    register(registry, name, TOOL_DURATION.help, unit, Histograms(points));
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
