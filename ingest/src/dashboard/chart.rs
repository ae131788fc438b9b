//! Stacked bar charts as inline SVG, drawn on the server: no charting library, no script. Each bar
//! segment carries a `<title>` (bucket, series, value) that browsers show on hover and screen readers
//! read; the chart as a whole is an `img` with a label, and the page shows the same numbers in a table.
//! Colours come from the stylesheet (classes `c0`…`c7`, `cx` for "other"), so they follow the theme.

use maud::{html, Markup};

/// Series kept by name; the smaller rest is summed into "other".
pub const MAX_SERIES: usize = 7;

/// Most bars one chart draws (see [`Stacked::coarsen`]).
pub const MAX_BARS: usize = 120;

/// The data of one chart: bucket labels, and per series its value in each bucket.
#[derive(Debug, Clone, Default)]
pub struct Stacked {
    pub buckets: Vec<String>,
    /// (series name, one value per bucket), largest total first once [`Stacked::top`] ran.
    pub series: Vec<(String, Vec<f64>)>,
}

impl Stacked {
    /// Keeps the [`MAX_SERIES`] largest series by total and sums the rest into "other".
    pub fn top(mut self) -> Stacked {
        let total = |v: &Vec<f64>| v.iter().sum::<f64>();
        self.series.retain(|(_, v)| v.iter().any(|x| *x != 0.0));
        self.series
            .sort_by(|a, b| total(&b.1).total_cmp(&total(&a.1)).then(a.0.cmp(&b.0)));
        if self.series.len() > MAX_SERIES {
            let rest = self.series.split_off(MAX_SERIES - 1);
            let mut other = vec![0.0; self.buckets.len()];
            for (_, v) in &rest {
                for (o, x) in other.iter_mut().zip(v) {
                    *o += x;
                }
            }
            self.series.push((format!("other ({})", rest.len()), other));
        }
        self
    }

    /// At most `max` bars: when there are more buckets, each bar sums `k` consecutive ones (labelled by
    /// the first), so a long range at a fine granularity stays a page of reasonable weight. Returns `k`.
    pub fn coarsen(&mut self, max: usize) -> usize {
        let n = self.buckets.len();
        if n <= max || max == 0 {
            return 1;
        }
        let k = n.div_ceil(max);
        self.buckets = self.buckets.iter().step_by(k).cloned().collect();
        for (_, values) in &mut self.series {
            *values = values.chunks(k).map(|c| c.iter().sum()).collect();
        }
        k
    }

    fn max_stack(&self) -> f64 {
        (0..self.buckets.len())
            .map(|i| self.series.iter().map(|(_, v)| v[i]).sum::<f64>())
            .fold(0.0, f64::max)
    }
}

const W: f64 = 800.0;
const H: f64 = 240.0;
const LEFT: f64 = 70.0;
const BOTTOM: f64 = 24.0;
const TOP: f64 = 8.0;

/// The colour class of the `i`-th series ("other" is always grey).
pub fn colour(i: usize, name: &str) -> String {
    if name.starts_with("other (") {
        "cx".into()
    } else {
        format!("c{}", i % 8)
    }
}

/// A coordinate to one decimal (the SVG's precision; full floats would double the page's weight).
fn r1(v: f64) -> String {
    format!("{:.1}", v)
}

/// The chart, labelled `label`, values read through `fmt`.
pub fn stacked_bars(id: &str, label: &str, data: &Stacked, fmt: fn(f64) -> String) -> Markup {
    let max = data.max_stack();
    let plot_w = W - LEFT;
    let plot_h = H - TOP - BOTTOM;
    let n = data.buckets.len().max(1) as f64;
    let band = plot_w / n;
    let bar = (band * 0.8).max(1.0);
    let y_of = |v: f64| if max > 0.0 { v / max * plot_h } else { 0.0 };
    let ticks = [0.0, max / 2.0, max];
    let label_at = label_indices(data.buckets.len());
    html! {
        figure.chart {
            svg viewBox={ "0 0 " (W) " " (H) } role="img" aria-labelledby={ (id) "-t" } {
                title id={ (id) "-t" } { (label) }
                @for t in ticks {
                    @let y = TOP + plot_h - y_of(t);
                    line.grid x1=(LEFT) x2=(W) y1=(r1(y)) y2=(r1(y)) {}
                    text.axis x=(LEFT - 6.0) y=(r1(y + 4.0)) text-anchor="end" { (fmt(t)) }
                }
                @for (i, bucket) in data.buckets.iter().enumerate() {
                    @let x = LEFT + i as f64 * band + (band - bar) / 2.0;
                    @let mut base = TOP + plot_h;
                    @for (s, (name, values)) in data.series.iter().enumerate() {
                        @let h = y_of(values[i]);
                        @if h > 0.0 {
                            @let y = { base -= h; base };
                            rect class=(colour(s, name)) x=(r1(x)) y=(r1(y)) width=(r1(bar)) height=(r1(h)) {
                                title { (short(bucket)) " · " (name) ": " (fmt(values[i])) }
                            }
                        }
                    }
                    @if label_at.contains(&i) {
                        @let anchor = anchor(i, data.buckets.len());
                        text.axis x=(r1(x + bar / 2.0)) y=(H - 6.0) text-anchor=(anchor) { (short(bucket)) }
                    }
                }
            }
            @if !data.series.is_empty() {
                figcaption {
                    ul.legend {
                        @for (s, (name, _)) in data.series.iter().enumerate() {
                            li { span class={ "swatch " (colour(s, name)) } aria-hidden="true" {} (name) }
                        }
                    }
                }
            }
        }
    }
}

/// Which bucket labels to draw: first, middle and last (all of them when few).
fn label_indices(n: usize) -> Vec<usize> {
    match n {
        0 => vec![],
        1..=6 => (0..n).collect(),
        _ => vec![0, n / 2, n - 1],
    }
}

/// Where the label of bucket `i` of `n` hangs: the first from its start, the last from its end (so
/// neither leaves the chart), the others centred.
fn anchor(i: usize, n: usize) -> &'static str {
    if n > 1 && i == 0 {
        "start"
    } else if n > 1 && i == n - 1 {
        "end"
    } else {
        "middle"
    }
}

/// A bucket's RFC 3339 start, shortened for an axis: the date, or the date and hour.
fn short(bucket: &str) -> &str {
    if bucket.get(11..19) == Some("00:00:00") {
        bucket.get(..10).unwrap_or(bucket)
    } else {
        bucket.get(..16).unwrap_or(bucket)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rest_past_the_largest_series_is_summed_into_other() {
        let data = Stacked {
            buckets: vec!["a".into(), "b".into()],
            series: (0..10)
                .map(|i| (format!("s{i}"), vec![i as f64, 1.0]))
                .collect(),
        }
        .top();
        assert_eq!(data.series.len(), MAX_SERIES);
        assert_eq!(data.series[0].0, "s9");
        let other = data.series.last().unwrap();
        assert_eq!(other.0, "other (4)");
        assert_eq!(other.1, vec![0.0 + 1.0 + 2.0 + 3.0, 4.0]);
        let empty = Stacked {
            buckets: vec!["a".into()],
            series: vec![("zero".into(), vec![0.0]), ("one".into(), vec![1.0])],
        }
        .top();
        assert_eq!(empty.series.len(), 1, "a series of zeros is no series");
        assert_eq!(data.max_stack(), 45.0);
    }

    #[test]
    fn every_value_is_in_a_title_and_labels_are_escaped() {
        let data = Stacked {
            buckets: vec!["2026-11-01T00:00:00+00:00".into()],
            series: vec![("<script>x</script>".into(), vec![2.0])],
        };
        let svg = stacked_bars("c", "Spend", &data, |v| format!("{v}")).into_string();
        assert!(svg.contains("&lt;script&gt;x&lt;/script&gt;: 2"), "{svg}");
        assert!(!svg.contains("<script>"));
        assert!(svg.contains(">2026-11-01<"));
    }

    #[test]
    fn many_buckets_are_summed_into_at_most_max_bars() {
        let mut data = Stacked {
            buckets: (0..720).map(|i| format!("b{i}")).collect(),
            series: vec![
                ("a".into(), vec![1.0; 720]),
                ("b".into(), (0..720).map(f64::from).collect()),
            ],
        };
        let k = data.coarsen(MAX_BARS);
        assert_eq!((k, data.buckets.len()), (6, 120));
        assert_eq!(data.buckets[1], "b6");
        assert_eq!(data.series[0].1[0], 6.0);
        let sum: f64 = data.series[1].1.iter().sum();
        assert_eq!(sum, (0..720).map(f64::from).sum::<f64>(), "nothing lost");
        let mut few = Stacked {
            buckets: vec!["x".into()],
            series: vec![("a".into(), vec![1.0])],
        };
        assert_eq!(few.coarsen(MAX_BARS), 1);
    }
}
