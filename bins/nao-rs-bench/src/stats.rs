//! Order statistics of one figure's samples (pure).

/// Median, p99 and maximum of a figure's samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// The median (nearest rank, the lower middle for an even count).
    pub median: u64,
    /// The 99th percentile (nearest rank: the smallest sample with at least
    /// 99 % of the samples at or below it).
    pub p99: u64,
    /// The largest sample.
    pub max: u64,
}

/// The nearest-rank percentile `pct` (0..=100) of `sorted` (ascending, not
/// empty).
fn nearest_rank(sorted: &[u64], pct: u64) -> u64 {
    let n = sorted.len() as u64;
    // rank = ceil(pct/100 * n), at least 1.
    let rank = (pct * n).div_ceil(100).max(1);
    sorted[(rank - 1) as usize]
}

/// The summary of `samples`, `None` when there are none.
pub fn summarize(samples: &[u64]) -> Option<Summary> {
    if samples.is_empty() {
        return None;
    }
    let mut s = samples.to_vec();
    s.sort_unstable();
    Some(Summary {
        n: s.len(),
        median: nearest_rank(&s, 50),
        p99: nearest_rank(&s, 99),
        max: s[s.len() - 1],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_uses_nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=100).rev().collect();
        let s = summarize(&v).unwrap();
        assert_eq!((s.n, s.median, s.p99, s.max), (100, 50, 99, 100));
        let s = summarize(&[7]).unwrap();
        assert_eq!((s.median, s.p99, s.max), (7, 7, 7));
        let s = summarize(&[1, 2, 3, 1000]).unwrap();
        assert_eq!((s.median, s.p99, s.max), (2, 1000, 1000));
        assert_eq!(summarize(&[]), None);
    }
}
