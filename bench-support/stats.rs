//! The statistics every benchmark of the workspace prints, defined once so that figures from different
//! benchmarks mean the same thing:
//! - [`median`]: the middle value of the figures, the mean of the two middle ones for an even count;
//! - [`percentile`]: the nearest-rank percentile of sorted values — the smallest value with at least a
//!   fraction `p` of the values at or below it (so `percentile(v, 0.5)` of an even count is the lower
//!   middle, and `percentile(v, 1.0)` the largest).
//!
//! Benchmarks are not a crate of their own: each includes this file by path
//! (`#[path = "…/bench-support/stats.rs"] mod stats;`), and uses what it needs of it.
#![allow(dead_code)]

/// The median of `figures` (NaN when there are none).
pub fn median(figures: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = figures.into_iter().collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The nearest-rank `p` percentile (`0.0 < p <= 1.0`) of `sorted` (ascending, not empty).
pub fn percentile<T: Copy>(sorted: &[T], p: f64) -> T {
    assert!(!sorted.is_empty(), "a percentile of no values");
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    // A benchmark built without the test harness compiles this module but runs none of it; the tests
    // run where the file is part of a binary with the harness (`tests/src/bin/bench-e2e.rs`).
    #[allow(unused_imports)]
    use super::*;

    #[test]
    fn the_median_and_percentiles_are_the_textbook_ones() {
        assert_eq!(median([3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median([4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(Vec::new()).is_nan());
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.5), 50);
        assert_eq!(percentile(&v, 0.95), 95);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&v, 1.0), 100);
        assert_eq!(percentile(&v, 0.0), 1);
        assert_eq!(percentile(&[7], 0.99), 7);
    }
}
