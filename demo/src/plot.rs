//! The picture: frame-time percentiles per run, bytes held over time across the spikes,
//! and heap allocations per frame (the demo's own and Bevy's).

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::report::Summary;
use crate::runs::RunRecord;

const COLOURS: [RGBColor; 4] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0x99, 0x66, 0xcc),
];

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

pub fn plot(path: &Path, runs: &[RunRecord], sums: &[Summary]) -> Result<()> {
    let root = SVGBackend::new(path, (1000, 1150)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, rest) = root.split_vertically(420);
    let (middle, bottom) = rest.split_vertically(420);
    percentiles(&top, runs)?;
    held(&middle, runs)?;
    allocations(&bottom, runs, sums)?;
    root.present()?;
    Ok(())
}

/// Where fraction `q` of the frames lies on the percentile axis: `-log10(1 - q)`, so that
/// 90%, 99% and 99.9% are equally spaced and the slow tail gets room.
fn tail_x(q: f64, frames: usize) -> f64 {
    -(1.0 - q).max(1.0 / frames as f64).log10()
}

/// Frame time at each percentile, per run (both axes stretched towards the slow tail: the
/// spike frames are the last 0.4%).
fn percentiles(area: &Area<'_>, runs: &[RunRecord]) -> Result<()> {
    let frames = runs
        .iter()
        .map(|r| r.frames.len())
        .max()
        .unwrap_or(1)
        .max(2);
    let curves: Vec<Vec<(f64, f64)>> = runs
        .iter()
        .map(|r| {
            let mut t: Vec<f64> = r.frames.iter().map(|f| f.micros / 1e3).collect();
            t.sort_by(f64::total_cmp);
            let n = t.len() as f64;
            t.iter()
                .enumerate()
                .map(|(i, &ms)| (tail_x(i as f64 / n, frames), ms))
                .collect()
        })
        .collect();
    let all = curves.iter().flatten().map(|p| p.1);
    let lo = all.clone().fold(f64::MAX, f64::min) * 0.8;
    let hi = all.fold(0.0, f64::max) * 1.3;
    let right = tail_x(1.0, frames);
    let mut chart = ChartBuilder::on(area)
        .caption(
            "frame time by percentile (lower is better)",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..right, (lo..hi).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("percentile of frames (the slowest at the right)")
        .y_desc("ms (log)")
        .y_labels(12)
        .x_labels(7)
        .x_label_formatter(&|x| {
            // Labels at 0%, 90%, 99%, 99.9% only.
            if (x - x.round()).abs() > 1e-6 {
                return String::new();
            }
            let p = format!("{:.1}", 100.0 - 100.0 * 10f64.powf(-x.round()));
            format!("{}%", p.trim_end_matches(".0"))
        })
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    for ((r, curve), colour) in runs.iter().zip(&curves).zip(COLOURS) {
        chart
            .draw_series(LineSeries::new(
                curve.iter().copied(),
                colour.stroke_width(2),
            ))?
            .label(r.run.name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
    }
    legend(&mut chart)
}

fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<()>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Bytes each run's way of allocating holds after each frame, spikes marked.
fn held(area: &Area<'_>, runs: &[RunRecord]) -> Result<()> {
    let frames = runs.iter().map(|r| r.frames.len()).max().unwrap_or(1);
    let kib = |b: i64| (b.max(1) as f64 / 1024.0).max(1.0);
    let hi = runs
        .iter()
        .flat_map(|r| r.frames.iter().map(|f| kib(f.held)))
        .fold(1.0, f64::max)
        * 2.0;
    let mut chart = ChartBuilder::on(area)
        .caption(
            "bytes held by each run's temporaries after each frame (spike frames: grey)",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0..frames, (1.0..hi).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("frame")
        .y_desc("KiB (log)")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()?;
    let spikes = runs[0]
        .frames
        .iter()
        .enumerate()
        .filter(|(_, f)| f.spike)
        .map(|(i, _)| i);
    chart
        .draw_series(spikes.map(|i| PathElement::new(vec![(i, 1.0), (i, hi)], BLACK.mix(0.25))))?;
    for (r, colour) in runs.iter().zip(COLOURS) {
        chart
            .draw_series(LineSeries::new(
                r.frames.iter().enumerate().map(|(i, f)| (i, kib(f.held))),
                colour.stroke_width(2),
            ))?
            .label(r.run.name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
    }
    legend(&mut chart)
}

/// Mean heap allocations per frame: the demo's own code and Bevy's, per run.
fn allocations(area: &Area<'_>, runs: &[RunRecord], sums: &[Summary]) -> Result<()> {
    let hi = sums
        .iter()
        .map(|s| s.own_per_frame.max(s.bevy_per_frame))
        .fold(1.0, f64::max)
        * 1.25;
    let n = runs.len();
    let mut chart = ChartBuilder::on(area)
        .caption(
            "heap allocations per frame (mean): own code (solid), Bevy (light)",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..n as f64, 0.0..hi)?;
    let names: Vec<&str> = runs.iter().map(|r| r.run.name).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(2 * n + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.01 && i < names.len() {
                names[i].to_string()
            } else {
                String::new()
            }
        })
        .y_desc("allocations")
        .draw()?;
    for (i, (s, colour)) in sums.iter().zip(COLOURS).enumerate() {
        let x = i as f64;
        for (offset, value, style) in [
            (0.15, s.own_per_frame, colour.filled()),
            (0.5, s.bevy_per_frame, colour.mix(0.35).filled()),
        ] {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(x + offset, 0.0), (x + offset + 0.33, value)],
                style,
            )))?;
            chart.draw_series(std::iter::once(Text::new(
                format!("{value:.0}"),
                (x + offset + 0.05, value + hi * 0.02),
                ("sans-serif", 16),
            )))?;
        }
    }
    Ok(())
}
