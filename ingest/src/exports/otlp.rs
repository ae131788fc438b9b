//! A tenant's usage as an OTLP metrics request (`ExportMetricsServiceRequest`): every [`COUNTERS`] entry
//! as a cumulative, monotonic Sum with one data point per usage row of the chosen dimensions, all from
//! the same start time (the export's creation: stable across restarts and replicas, so a backend sees
//! one uninterrupted series however often or by whom it is sent); the tool call durations as a
//! cumulative explicit-bucket Histogram per tool row from that start too (bounds in seconds,
//! [`super::series::bucket_bounds_ms`]); sessions by status and devices online as Gauges of now.
//!
//! The resource names the service (`service.name = apiary`) and the tenant (`apiary.tenant.id`); the
//! scope is `apiary-ingest` at its version. Integer sums are `as_int` (exact), the USD cost and the
//! durations `as_double`.

use chrono::{DateTime, Utc};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Gauge, Histogram, HistogramDataPoint,
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use uuid::Uuid;

use super::series::{
    self, bucket_bounds_ms, bucket_counts, Num, COUNTERS, DEVICES_ONLINE, SESSIONS,
    STATUS_ATTRIBUTE, TOOL_DURATION,
};
use super::snapshot::{Grouped, Snapshot};
use crate::query::gauges::Count;
use crate::query::usage::{Dim, UsageRow};

/// The OpenTelemetry attribute a dimension's key is exported as.
pub fn attribute_of(d: Dim) -> &'static str {
    match d {
        Dim::User => "user.id",
        Dim::Model => "gen_ai.request.model",
        Dim::Colony => "apiary.colony.id",
        Dim::Runtime => "apiary.runtime",
        Dim::Device => "apiary.device.id",
        Dim::Tenant => "apiary.tenant.id",
        Dim::Session => "session.id",
        Dim::Tool => "gen_ai.tool.name",
    }
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.to_string())),
        }),
        ..Default::default()
    }
}

fn nanos(t: DateTime<Utc>) -> u64 {
    t.timestamp_nanos_opt().unwrap_or_default().max(0) as u64
}

/// The attributes of a row's `keys` (of `dims`), without the empty ones.
fn attributes(dims: &[Dim], keys: &[String]) -> Vec<KeyValue> {
    dims.iter()
        .zip(keys)
        .filter(|(_, k)| !k.is_empty())
        .map(|(d, k)| kv(attribute_of(*d), k))
        .collect()
}

/// The request for everything in `s`: the counters and the histogram cumulative from `start`, the
/// gauges as of `now`.
pub fn request(
    tenant_id: Uuid,
    start: DateTime<Utc>,
    now: DateTime<Utc>,
    s: &Snapshot,
) -> ExportMetricsServiceRequest {
    let mut metrics = counters(start, now, &s.usage);
    metrics.push(histogram(start, now, &s.tools));
    metrics.push(gauge(now, SESSIONS, &s.sessions));
    metrics.push(gauge(now, DEVICES_ONLINE, &s.devices));
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", "apiary"),
                    kv("apiary.tenant.id", &tenant_id.to_string()),
                ],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "apiary-ingest".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// A gauge of now: one point per count (the status as an attribute, for sessions).
fn gauge(now: DateTime<Utc>, g: series::Gauge, counts: &Grouped<Count>) -> Metric {
    let data_points = counts
        .rows
        .iter()
        .map(|c| {
            let mut attributes = attributes(&counts.dims, &c.keys);
            if let Some(status) = c.status {
                attributes.push(kv(STATUS_ATTRIBUTE, status.as_str()));
            }
            NumberDataPoint {
                attributes,
                time_unix_nano: nanos(now),
                value: Some(number_data_point::Value::AsInt(c.value)),
                ..Default::default()
            }
        })
        .collect();
    Metric {
        name: g.otel.to_string(),
        description: g.help.to_string(),
        unit: g.unit.to_string(),
        data: Some(metric::Data::Gauge(Gauge { data_points })),
        ..Default::default()
    }
}

/// The tool durations: a cumulative explicit-bucket histogram per tool row, in seconds.
fn histogram(start: DateTime<Utc>, now: DateTime<Utc>, tools: &Grouped<UsageRow>) -> Metric {
    let explicit_bounds: Vec<f64> = bucket_bounds_ms()
        .into_iter()
        .map(|ms| ms as f64 / 1000.0)
        .collect();
    let data_points = tools
        .rows
        .iter()
        .filter_map(|r| {
            let t = r.tool.as_ref()?;
            let bucket_counts = bucket_counts(&t.hist);
            Some(HistogramDataPoint {
                attributes: attributes(&tools.dims, &r.keys),
                start_time_unix_nano: nanos(start),
                time_unix_nano: nanos(now),
                count: bucket_counts.iter().sum(),
                sum: Some(t.duration_ms as f64 / 1000.0),
                bucket_counts,
                explicit_bounds: explicit_bounds.clone(),
                ..Default::default()
            })
        })
        .collect();
    Metric {
        name: TOOL_DURATION.otel.to_string(),
        description: TOOL_DURATION.help.to_string(),
        unit: TOOL_DURATION.unit.to_string(),
        data: Some(metric::Data::Histogram(Histogram {
            data_points,
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        })),
        ..Default::default()
    }
}

/// Every counter: one cumulative, monotonic Sum per name, a point per usage row.
fn counters(start: DateTime<Utc>, now: DateTime<Utc>, usage: &Grouped<UsageRow>) -> Vec<Metric> {
    let (dims, rows) = (&usage.dims, &usage.rows);
    let mut metrics: Vec<Metric> = vec![];
    for c in COUNTERS {
        let points = rows.iter().map(|r| {
            let mut attributes = attributes(dims, &r.keys);
            if let Some((name, value)) = c.attribute {
                attributes.push(kv(name, value));
            }
            let value = match (c.value)(&r.usage) {
                Num::Int(v) => {
                    number_data_point::Value::AsInt(i64::try_from(v).unwrap_or(if v < 0 {
                        i64::MIN
                    } else {
                        i64::MAX
                    }))
                }
                Num::Float(v) => number_data_point::Value::AsDouble(v),
            };
            NumberDataPoint {
                attributes,
                start_time_unix_nano: nanos(start),
                time_unix_nano: nanos(now),
                value: Some(value),
                ..Default::default()
            }
        });
        // The token types are points of one metric.
        match metrics.iter_mut().find(|m| m.name == c.otel) {
            Some(Metric {
                data: Some(metric::Data::Sum(s)),
                ..
            }) => s.data_points.extend(points),
            _ => metrics.push(Metric {
                name: c.otel.to_string(),
                description: c.help.to_string(),
                unit: c.unit.to_string(),
                data: Some(metric::Data::Sum(Sum {
                    data_points: points.collect(),
                    aggregation_temporality: AggregationTemporality::Cumulative as i32,
                    is_monotonic: true,
                })),
                ..Default::default()
            }),
        }
    }
    metrics
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollups::Usage;

    #[test]
    fn every_counter_is_one_cumulative_sum_with_a_point_per_row() {
        let t = |s: &str| s.parse::<DateTime<Utc>>().unwrap();
        let rows = [
            UsageRow {
                bucket: None,
                keys: vec!["m".into()],
                usage: Usage {
                    input_tokens: 7,
                    cost_nanos: 1_500_000_001,
                    ..Usage::default()
                },
                tool: None,
            },
            UsageRow {
                bucket: None,
                keys: vec![String::new()],
                usage: Usage::default(),
                tool: None,
            },
        ];
        let snapshot = Snapshot {
            usage: Grouped {
                dims: vec![Dim::Model],
                rows: rows.to_vec(),
            },
            ..Snapshot::default()
        };
        let r = request(
            Uuid::nil(),
            t("2026-11-01T00:00:00Z"),
            t("2026-11-02T00:00:00Z"),
            &snapshot,
        );
        let metrics = &r.resource_metrics[0].scope_metrics[0].metrics;
        let tokens = metrics
            .iter()
            .find(|m| m.name == "apiary.token.usage")
            .unwrap();
        let Some(metric::Data::Sum(s)) = &tokens.data else {
            panic!("{tokens:?}")
        };
        assert!(s.is_monotonic);
        assert_eq!(
            s.aggregation_temporality,
            AggregationTemporality::Cumulative as i32
        );
        assert_eq!(s.data_points.len(), 8, "four token types × two rows");
        let first = &s.data_points[0];
        assert_eq!(first.value, Some(number_data_point::Value::AsInt(7)));
        assert_eq!(first.attributes[0].key, "gen_ai.request.model");
        assert_eq!(first.attributes[1].key, "gen_ai.token.type");
        assert_eq!(
            s.data_points[1].attributes.len(),
            1,
            "no attribute for none"
        );
        let cost = metrics
            .iter()
            .find(|m| m.name == "apiary.cost.nanos")
            .unwrap();
        let Some(metric::Data::Sum(s)) = &cost.data else {
            panic!()
        };
        assert_eq!(
            s.data_points[0].value,
            Some(number_data_point::Value::AsInt(1_500_000_001))
        );
        assert_eq!(
            s.data_points[0].start_time_unix_nano,
            1_793_491_200_000_000_000
        );
    }
}
