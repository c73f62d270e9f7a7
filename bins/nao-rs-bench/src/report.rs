//! The figures, the Markdown table and the CSV of raw samples (pure
//! formatting).

use std::fmt::Write as _;

use super::stats::{summarize, Summary};

/// How a figure's samples are stored and printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Samples in ns, printed in ms with 3 decimals.
    Ms,
    /// Samples in kB, printed in MiB with 1 decimal.
    MiB,
    /// Samples in cycles a second, printed as integers.
    PerSecond,
    /// A plain count, printed as an integer.
    Count,
    /// Samples in thousandths of a percent (of one core), printed in %
    /// with 3 decimals.
    Percent,
    /// Things a wall second (the world's schedules, simulated seconds),
    /// printed as integers.
    Rate,
}

impl Unit {
    /// The unit's name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Ms => "ms",
            Unit::MiB => "MiB",
            Unit::PerSecond => "cycles/s",
            Unit::Count => "count",
            Unit::Percent => "% of one core",
            Unit::Rate => "per s",
        }
    }

    /// The unit of the raw samples in the CSV.
    pub fn raw_name(self) -> &'static str {
        match self {
            Unit::Ms => "ns",
            Unit::MiB => "kB",
            Unit::PerSecond => "cycles/s",
            Unit::Count => "count",
            Unit::Percent => "0.001%",
            Unit::Rate => "per s",
        }
    }

    /// A raw sample as printed.
    pub fn show(self, v: u64) -> String {
        match self {
            Unit::Ms => {
                let us = v.saturating_add(500) / 1000;
                format!("{}.{:03}", us / 1000, us % 1000)
            }
            Unit::MiB => format!("{:.1}", v as f64 / 1024.0),
            Unit::Percent => format!("{}.{:03}", v / 1000, v % 1000),
            Unit::PerSecond | Unit::Count | Unit::Rate => format!("{v}"),
        }
    }
}

/// What a figure is checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bound {
    /// Passes when the maximum is at most this raw value.
    MaxAtMost(u64, String),
    /// Only a reference (a goal or a value measured on the robot); no pass or fail.
    Reference(String),
}

/// One row of the table with its samples.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Figure {
    /// A short stable key (CSV, tests).
    pub key: &'static str,
    /// What it measures, in words.
    pub name: String,
    /// The samples' unit.
    pub unit: Unit,
    /// The raw samples.
    pub samples: Vec<u64>,
    /// The bound or the reference value.
    pub bound: Bound,
    /// Why a figure has no samples, or a remark.
    pub note: String,
}

impl Figure {
    /// A figure without samples yet.
    pub fn new(key: &'static str, name: &str, unit: Unit, bound: Bound) -> Figure {
        Figure {
            key,
            name: name.to_string(),
            unit,
            samples: Vec::new(),
            bound,
            note: String::new(),
        }
    }

    /// The summary of the samples.
    pub fn summary(&self) -> Option<Summary> {
        summarize(&self.samples)
    }

    /// `Some(true)` pass, `Some(false)` fail, `None`: no bound or no samples.
    pub fn verdict(&self) -> Option<bool> {
        let s = self.summary()?;
        match &self.bound {
            Bound::MaxAtMost(b, _) => Some(s.max <= *b),
            Bound::Reference(_) => None,
        }
    }

    fn bound_text(&self) -> String {
        match &self.bound {
            Bound::MaxAtMost(b, why) => {
                format!("max <= {} {} ({why})", self.unit.show(*b), self.unit.name())
            }
            Bound::Reference(r) => r.clone(),
        }
    }
}

/// The Markdown table of `figures`.
pub fn table(figures: &[Figure]) -> String {
    let mut s = String::new();
    s.push_str("| figure | n | median | p99 | max | unit | bound or reference | result |\n");
    s.push_str("|---|---:|---:|---:|---:|---|---|---|\n");
    for f in figures {
        let (n, med, p99, max) = match f.summary() {
            Some(x) => (
                x.n.to_string(),
                f.unit.show(x.median),
                f.unit.show(x.p99),
                f.unit.show(x.max),
            ),
            None => ("0".into(), "-".into(), "-".into(), "-".into()),
        };
        let result = match (f.verdict(), f.samples.is_empty()) {
            (_, true) => format!("not measured: {}", f.note),
            (Some(true), _) => "pass".to_string(),
            (Some(false), _) => "FAIL".to_string(),
            (None, _) => "-".to_string(),
        };
        let _ = writeln!(
            s,
            "| {} | {n} | {med} | {p99} | {max} | {} | {} | {result} |",
            f.name,
            f.unit.name(),
            f.bound_text()
        );
    }
    s
}

/// The raw samples of every figure as one long CSV:
/// `figure,unit,index,value`.
pub fn csv(figures: &[Figure]) -> String {
    let mut s = String::from("figure,unit,index,value\n");
    for f in figures {
        for (i, v) in f.samples.iter().enumerate() {
            let _ = writeln!(s, "{},{},{i},{v}", f.key, f.unit.raw_name());
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_print_in_ms_with_three_decimals() {
        assert_eq!(Unit::Ms.show(12_345_678), "12.346");
        assert_eq!(Unit::Ms.show(999_999), "1.000");
        assert_eq!(Unit::Ms.show(45_400), "0.045");
        assert_eq!(Unit::Ms.show(0), "0.000");
        assert_eq!(Unit::MiB.show(2048), "2.0");
        assert_eq!(Unit::Percent.show(100), "0.100");
        assert_eq!(Unit::Percent.show(1_000), "1.000");
        assert_eq!(Unit::Percent.show(12_345), "12.345");
    }

    #[test]
    fn table_rows_pass_or_fail_against_the_bound_on_the_maximum() {
        let mut a = Figure::new(
            "a",
            "stop",
            Unit::Ms,
            Bound::MaxAtMost(12_000_000, "one cycle".into()),
        );
        a.samples = vec![1_000_000, 11_000_000];
        let mut b = a.clone();
        b.key = "b";
        b.samples.push(13_000_000);
        let mut c = Figure::new(
            "c",
            "alloc",
            Unit::PerSecond,
            Bound::Reference("goal 0".into()),
        );
        c.note = "not exposed".into();
        let t = table(&[a.clone(), b.clone(), c]);
        let rows: Vec<&str> = t.lines().collect();
        assert_eq!(rows.len(), 5);
        assert!(rows[2].ends_with("| pass |"), "{}", rows[2]);
        assert!(rows[3].ends_with("| FAIL |"), "{}", rows[3]);
        assert!(rows[4].contains("not measured: not exposed"), "{}", rows[4]);
        let c = csv(&[a, b]);
        assert_eq!(c.lines().count(), 1 + 2 + 3);
        assert!(c.contains("b,ns,2,13000000"));
    }
}
