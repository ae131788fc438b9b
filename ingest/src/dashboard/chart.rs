//! Stacked bar charts as inline SVG, drawn on the server: no charting library, no script. Each bar
//! segment carries a `<title>` (bucket, series, value) that browsers show on hover and screen readers
//! read; the chart as a whole is an `img` with a label, and the page shows the same numbers in a table.
//!
//! ## Colours
//! Colours come from the stylesheet (classes `c0`…`c11`, `cx` for "other"), so they follow the theme:
//! the same class is the same hue in the light and the dark palette. A series' class is decided by its
//! key, not by its rank in a chart, nor by the other keys a view happens to show: the first time a chart
//! draws a key, the key takes the slot its FNV-1a hash names if no key of that dimension holds it yet,
//! else the next such slot ([`assign`]), and the tenant keeps that slot for good
//! ([`crate::store::series_colours`]). So a model has one colour in "Spend" and "Tokens", on every range,
//! granularity and page, whichever models a range shows beside it. Two keys of one page that hold the
//! same slot (only when a dimension has more than twelve keys) are told apart on that page: the one that
//! sorts first keeps it, the other takes the next slot free on the page ([`Colours::resolve`]).

use std::collections::{BTreeMap, BTreeSet};

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

/// Colour slots in the stylesheet (`c0`…`c11`).
pub const SLOTS: usize = 12;

/// The colour slot of every series key a page draws (see the module notes).
#[derive(Debug, Clone, Default)]
pub struct Colours(BTreeMap<String, usize>);

impl Colours {
    /// One slot per key from the keys alone: each key's preferred slot ([`preferred_slot`]) unless a
    /// key sorting before it took that one, then the next free one. What a page shows when the stored
    /// slots cannot be read.
    pub fn of<'a>(keys: impl IntoIterator<Item = &'a str>) -> Colours {
        Colours::resolve(&BTreeMap::new(), keys)
    }

    /// One slot per key of a page: keys with a `stored` slot first (in key order), each keeping its slot
    /// unless a key before it on this page took it; then the others, from their preferred slot; either
    /// moves on to the next slot free on the page. No two keys of a page share a slot while there are at
    /// most [`SLOTS`].
    pub fn resolve<'a>(
        stored: &BTreeMap<String, usize>,
        keys: impl IntoIterator<Item = &'a str>,
    ) -> Colours {
        let keys: BTreeSet<&str> = keys.into_iter().filter(|k| !is_other(k)).collect();
        let (known, new): (Vec<&str>, Vec<&str>) =
            keys.into_iter().partition(|k| stored.contains_key(*k));
        let mut taken = [false; SLOTS];
        let mut map = BTreeMap::new();
        for key in known.into_iter().chain(new) {
            let first = stored
                .get(key)
                .copied()
                .filter(|s| *s < SLOTS)
                .unwrap_or_else(|| preferred_slot(key));
            let slot = (0..SLOTS)
                .map(|step| (first + step) % SLOTS)
                .find(|s| !taken[*s])
                .unwrap_or(first);
            taken[slot] = true;
            map.insert(key.to_string(), slot);
        }
        Colours(map)
    }

    /// The colour class of the series `name` ("other" is always grey; a key the map lacks takes its
    /// preferred slot).
    pub fn class(&self, name: &str) -> String {
        if is_other(name) {
            return "cx".into();
        }
        let slot = self
            .0
            .get(name)
            .copied()
            .unwrap_or_else(|| preferred_slot(name));
        format!("c{slot}")
    }
}

/// Slots for keys a tenant's charts never drew, given how many keys of the dimension hold each slot
/// (`held`): each key, in order, takes its preferred slot if it is among the least held, else the next
/// least-held slot after it — so the first twelve keys of a dimension get twelve different slots.
pub fn assign(held: &BTreeMap<usize, u64>, new_keys: &[&str]) -> Vec<(String, usize)> {
    let mut count = [0u64; SLOTS];
    for (slot, n) in held {
        if let Some(c) = count.get_mut(*slot) {
            *c = *n;
        }
    }
    let mut out = Vec::with_capacity(new_keys.len());
    for key in new_keys.iter().filter(|k| !is_other(k)) {
        let least = count.iter().copied().min().unwrap_or(0);
        let first = preferred_slot(key);
        let slot = (0..SLOTS)
            .map(|step| (first + step) % SLOTS)
            .find(|s| count[*s] == least)
            .unwrap_or(first);
        count[slot] += 1;
        out.push((key.to_string(), slot));
    }
    out
}

/// True for the "other (n)" series [`Stacked::top`] makes.
fn is_other(name: &str) -> bool {
    name.starts_with("other (")
}

/// The slot a key prefers: FNV-1a (64 bits) of its bytes, modulo [`SLOTS`]. Stable across builds,
/// platforms and processes (unlike the standard library's hasher).
pub fn preferred_slot(key: &str) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % SLOTS as u64) as usize
}

/// A coordinate to one decimal (the SVG's precision; full floats would double the page's weight).
fn r1(v: f64) -> String {
    format!("{:.1}", v)
}

/// The chart, labelled `label`, values read through `fmt`, each series in its colour of `colours`.
pub fn stacked_bars(
    id: &str,
    label: &str,
    data: &Stacked,
    colours: &Colours,
    fmt: fn(f64) -> String,
) -> Markup {
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
                    @for (name, values) in &data.series {
                        @let h = y_of(values[i]);
                        @if h > 0.0 {
                            @let y = { base -= h; base };
                            rect class=(colours.class(name)) data-series=(name) x=(r1(x)) y=(r1(y)) width=(r1(bar)) height=(r1(h)) {
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
                        @for (name, _) in &data.series {
                            li data-series=(name) { span class={ "swatch " (colours.class(name)) } aria-hidden="true" {} (name) }
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
        let svg = stacked_bars("c", "Spend", &data, &Colours::default(), |v| format!("{v}"))
            .into_string();
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

    #[test]
    fn a_key_keeps_its_colour_whatever_its_rank_and_no_two_keys_of_a_page_share_one() {
        let models = [
            "claude-sonnet-4-5",
            "claude-haiku-4-5",
            "gpt-5-mini",
            "claude-opus-4-1",
        ];
        let page = Colours::of(models);
        let reversed = Colours::of(models.iter().rev().copied());
        for m in models {
            assert_eq!(
                page.class(m),
                reversed.class(m),
                "{m}: the order of the keys matters"
            );
        }
        let classes: BTreeSet<String> = models.iter().map(|m| page.class(m)).collect();
        assert_eq!(
            classes.len(),
            models.len(),
            "two keys share a colour: {page:?}"
        );
        // A key alone on a page has its preferred slot, and keeps it beside keys that prefer others.
        for m in models {
            assert_eq!(Colours::of([m]).class(m), format!("c{}", preferred_slot(m)));
        }
        assert_eq!(page.class("other (3)"), "cx");
        // Pinned: a change of the hash would repaint every chart users know.
        assert_eq!(preferred_slot(""), (0xcbf2_9ce4_8422_2325u64 % 12) as usize);
        assert_eq!(
            preferred_slot("a"),
            (0xaf63_dc4c_8601_ec8cu64 % 12) as usize
        );
        // As many keys as slots: every slot is used once.
        let many: Vec<String> = (0..SLOTS).map(|i| format!("model-{i}")).collect();
        let all = Colours::of(many.iter().map(String::as_str));
        let used: BTreeSet<String> = many.iter().map(|m| all.class(m)).collect();
        assert_eq!(used.len(), SLOTS);
    }

    #[test]
    fn new_keys_take_free_slots_and_keep_them_whatever_a_page_shows() {
        // Two models that prefer the same slot.
        let (a, b) = ("claude-sonnet-4-5-20250929", "gpt-5-mini");
        assert_eq!(preferred_slot(a), preferred_slot(b), "the premise");
        // b is drawn first, alone: it takes its preferred slot; a, drawn later, the next free one.
        let first = assign(&BTreeMap::new(), &[b]);
        assert_eq!(first, vec![(b.to_string(), preferred_slot(b))]);
        let held: BTreeMap<usize, u64> = first.iter().map(|(_, s)| (*s, 1)).collect();
        let second = assign(&held, &[a]);
        assert_eq!(
            second,
            vec![(a.to_string(), (preferred_slot(a) + 1) % SLOTS)]
        );
        let stored: BTreeMap<String, usize> = first.into_iter().chain(second).collect();
        let both = Colours::resolve(&stored, [a, b]);
        let only_a = Colours::resolve(&stored, [a]);
        let only_b = Colours::resolve(&stored, [b]);
        assert_eq!(both.class(a), only_a.class(a));
        assert_eq!(both.class(b), only_b.class(b));
        assert_ne!(both.class(a), both.class(b));
        // Thirteen keys: twelve different slots, then the least held again.
        let keys: Vec<String> = (0..=SLOTS).map(|i| format!("m-{i}")).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let slots = assign(&BTreeMap::new(), &refs);
        let distinct: BTreeSet<usize> = slots[..SLOTS].iter().map(|(_, s)| *s).collect();
        assert_eq!(distinct.len(), SLOTS);
        // On a page, two keys holding one slot are still told apart.
        let clash: BTreeMap<String, usize> = [("x".to_string(), 3), ("y".to_string(), 3)].into();
        let page = Colours::resolve(&clash, ["x", "y"]);
        assert_eq!(page.class("x"), "c3");
        assert_eq!(page.class("y"), "c4");
    }
}
