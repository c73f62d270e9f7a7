//! The SVG plots (plotters' SVG backend).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

fn err<E: std::fmt::Debug>(path: &Path) -> impl Fn(E) -> String + '_ {
    move |e| format!("cannot draw {}: {e:?}", path.display())
}

/// The chart both plots draw on `root`: the title above, room for the axis
/// labels.
fn chart_on<'a, 'b, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    title: &str,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(root);
    b.caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(60);
    b
}

/// A histogram of several sample sets (ns) with bins of `bin_ns`, counts on
/// a log scale, drawn into the SVG file `path`.
pub fn histogram(
    path: &Path,
    title: &str,
    x_desc: &str,
    series: &[(&str, &[u64])],
    bin_ns: u64,
) -> Result<(), String> {
    let bin_ns = bin_ns.max(1);
    let max_v = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .max()
        .unwrap_or(0);
    let bins = (max_v / bin_ns + 1) as usize;
    let counts: Vec<Vec<u64>> = series
        .iter()
        .map(|(_, v)| {
            let mut c = vec![0u64; bins];
            for x in v.iter() {
                c[(x / bin_ns) as usize] += 1;
            }
            c
        })
        .collect();
    let top = counts.iter().flatten().copied().max().unwrap_or(1).max(1) as f64;
    let bin_ms = bin_ns as f64 / 1e6;
    let x_max = bins as f64 * bin_ms;
    let root = SVGBackend::new(path, (900, 450)).into_drawing_area();
    root.fill(&WHITE).map_err(err(path))?;
    let mut chart = chart_on(&root, title)
        .build_cartesian_2d(0f64..x_max, (0.8f64..top * 2.0).log_scale())
        .map_err(err(path))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("cycles (log scale)")
        .draw()
        .map_err(err(path))?;
    let colors = [BLUE.mix(0.5), RED.mix(0.5), GREEN.mix(0.5)];
    for (i, ((name, _), c)) in series.iter().zip(&counts).enumerate() {
        let color = colors[i % colors.len()];
        chart
            .draw_series(c.iter().enumerate().filter(|(_, &n)| n > 0).map(|(b, &n)| {
                let x0 = b as f64 * bin_ms;
                Rectangle::new([(x0, 0.8), (x0 + bin_ms, n as f64)], color.filled())
            }))
            .map_err(err(path))?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(err(path))?;
    root.present().map_err(err(path))
}

/// One line of a stiffness plot: its name and its (ms, per mille) points.
pub struct PlotLine<'a> {
    /// The legend.
    pub name: &'a str,
    /// (time in ms relative to the event, max stiffness per mille).
    pub points: Vec<(f64, f64)>,
}

/// Stiffness against time, with vertical marks at (ms, label), drawn into
/// the SVG file `path`.
pub fn stiffness(
    path: &Path,
    title: &str,
    lines: &[PlotLine<'_>],
    marks: &[(f64, &str)],
) -> Result<(), String> {
    let xs = lines.iter().flat_map(|l| l.points.iter().map(|p| p.0));
    let (mut x0, mut x1) = (f64::MAX, f64::MIN);
    for x in xs {
        x0 = x0.min(x);
        x1 = x1.max(x);
    }
    if x0 >= x1 {
        x0 = -1.0;
        x1 = 1.0;
    }
    let root = SVGBackend::new(path, (900, 450)).into_drawing_area();
    root.fill(&WHITE).map_err(err(path))?;
    let mut chart = chart_on(&root, title)
        .build_cartesian_2d(x0..x1, 0f64..1050f64)
        .map_err(err(path))?;
    chart
        .configure_mesh()
        .x_desc("time (ms)")
        .y_desc("largest stiffness on the wire (per mille)")
        .draw()
        .map_err(err(path))?;
    let colors = [BLUE, RED, GREEN, MAGENTA];
    for (i, l) in lines.iter().enumerate() {
        let color = colors[i % colors.len()];
        chart
            .draw_series(
                l.points
                    .iter()
                    .map(|&(x, y)| Circle::new((x, y), 2, color.filled())),
            )
            .map_err(err(path))?
            .label(l.name)
            .legend(move |(x, y)| Circle::new((x + 7, y), 3, color.filled()));
        chart
            .draw_series(LineSeries::new(l.points.iter().copied(), color.mix(0.6)))
            .map_err(err(path))?;
    }
    for (x, label) in marks {
        chart
            .draw_series(LineSeries::new([(*x, 0.0), (*x, 1050.0)], BLACK.mix(0.5)))
            .map_err(err(path))?
            .label(*label)
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 15, y)], BLACK.mix(0.5)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()
        .map_err(err(path))?;
    root.present().map_err(err(path))
}
