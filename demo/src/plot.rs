//! The picture: the run's case in one sentence, then frame time by percentile, the bytes
//! each run holds and the process RSS after every frame across the spikes, and heap
//! allocations per frame (the demo's own code's and Bevy's). The axes are logarithmic, so
//! that a value ten or a thousand times another still shows, and labelled in their units.

use std::path::Path;

use plotters::coord::Shift;
use plotters::coord::combinators::WithKeyPoints;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::report::Summary;
use crate::runs::{FrameRecord, RunRecord};
use crate::workload::AFTER;

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const KIB: f64 = 1024.0;
const MIB: f64 = KIB * KIB;
const GIB: f64 = KIB * MIB;

/// The runs drawn, in drawing order: the three compared last, so that they lie on top
/// (arena, the subject, topmost). "heap untracked" is left out: it is the heap run again,
/// there to measure the tracking allocator's cost, which the text report gives.
const DRAWN: [(&str, RGBColor, u32); 4] = [
    ("heap+mimalloc", RGBColor(0xcc, 0x79, 0xa7), 1),
    ("heap", RGBColor(0xd5, 0x5e, 0x00), 3),
    ("local-vec", RGBColor(0x00, 0x9e, 0x73), 3),
    ("arena", RGBColor(0x00, 0x72, 0xb2), 3),
];
/// Spike bands: neutral, so that they don't read as a run, and dark enough to see.
const SPIKE: RGBColor = RGBColor(0xb4, 0xb4, 0xb4);
/// Bevy's allocation bars: one colour for every run, as they are the same work.
const BEVY: RGBColor = RGBColor(0x99, 0x99, 0x99);
const GREY_TEXT: RGBColor = RGBColor(0x55, 0x55, 0x55);

pub fn plot(path: &Path, runs: &[RunRecord], sums: &[Summary]) -> Result<()> {
    let root = SVGBackend::new(path, (1100, 1500)).into_drawing_area();
    root.fill(&WHITE)?;
    let (head, rest) = root.split_vertically(130);
    let (time, rest) = rest.split_vertically(420);
    let (held, rest) = rest.split_vertically(320);
    let (rss, allocs) = rest.split_vertically(320);
    header(&head, runs, sums)?;
    percentiles(&time, runs)?;
    over_frames(
        &held,
        runs,
        "bytes held by each run's temporaries after each frame (under 1 KiB drawn at 1 KiB)",
        |f| f.held as f64,
    )?;
    over_frames(&rss, runs, "process RSS after each frame", |f| f.rss as f64)?;
    allocations(&allocs, runs, sums)?;
    root.present()?;
    Ok(())
}

/// How `name` is drawn; `None` when it is not.
fn style(name: &str) -> Option<ShapeStyle> {
    let (_, colour, width) = DRAWN.iter().find(|d| d.0 == name)?;
    Some(colour.stroke_width(*width))
}

/// The runs drawn, in drawing order, with their style.
fn drawn(runs: &[RunRecord]) -> Vec<(&RunRecord, ShapeStyle)> {
    DRAWN
        .iter()
        .filter_map(|(name, colour, width)| {
            let run = runs.iter().find(|r| r.run.name == *name)?;
            Some((run, colour.stroke_width(*width)))
        })
        .collect()
}

fn font(size: u32) -> TextStyle<'static> {
    TextStyle::from(("sans-serif", size).into_font())
}

/// The sentence on top, what the picture leaves out, and the key every panel shares.
fn header(area: &Area<'_>, runs: &[RunRecord], sums: &[Summary]) -> Result<()> {
    let centre = Pos::new(HPos::Center, VPos::Top);
    let x = area.dim_in_pixel().0 as i32 / 2;
    let bold = TextStyle::from(("sans-serif", 18, FontStyle::Bold).into_font()).pos(centre);
    for (i, line) in headline(runs, sums).iter().enumerate() {
        area.draw_text(line, &bold, (x, 10 + 26 * i as i32))?;
    }
    let note = font(14).color(&GREY_TEXT).pos(centre);
    area.draw_text(&setup(runs), &note, (x, 64))?;
    key(area, runs, 108)
}

/// The run's case in one sentence (two lines), from its figures as the report's "in one
/// line": the arenas against Local<Vec> (frame time, memory after a spike) and against a
/// fresh Vec each time (frame time, allocations).
fn headline(runs: &[RunRecord], sums: &[Summary]) -> [String; 2] {
    let find = |name: &str| {
        runs.iter()
            .position(|r| r.run.name == name)
            .map(|i| &sums[i])
    };
    let (Some(a), Some(h), Some(l)) = (find("arena"), find("heap"), find("local-vec")) else {
        return [
            "frame time, memory and heap allocations by run".into(),
            String::new(),
        ];
    };
    let r = |x: f64, y: f64| x / y.max(f64::MIN_POSITIVE);
    [
        format!(
            "Against Bevy's Local<Vec>, the arenas took {:.0}% of its mean frame time and held \
             {:.2}x its bytes {AFTER} frames after a spike;",
            100.0 * r(a.mean, l.mean),
            r(a.held[2] as f64, l.held[2] as f64)
        ),
        format!(
            "against a fresh Vec each time, {:.0}% of its mean frame time and {} of its {} heap \
             allocations a frame (Bevy's {} aside).",
            100.0 * r(a.mean, h.mean),
            count(a.own_per_frame),
            count(h.own_per_frame),
            count(h.bevy_per_frame)
        ),
    ]
}

/// The frames behind the picture and what it leaves out.
fn setup(runs: &[RunRecord]) -> String {
    let frames = runs.first().map_or(&[][..], |r| &r.frames[..]);
    let spikes = frames.iter().filter(|f| f.spike).count();
    let left_out = if runs.iter().any(|r| style(r.run.name).is_none()) {
        " Not drawn: \"heap untracked\" (the heap run without the tracking allocator, for the \
         tracking's cost: see the text report)."
    } else {
        ""
    };
    format!(
        "{} frames a run, {spikes} of them spike frames.{left_out}",
        frames.len()
    )
}

/// One row: each drawn run's line, then the two spike marks.
fn key(area: &Area<'_>, runs: &[RunRecord], y: i32) -> Result<()> {
    enum Swatch {
        Line(ShapeStyle),
        Band,
        Ring,
    }
    let lines = runs
        .iter()
        .filter_map(|r| Some((Swatch::Line(style(r.run.name)?), r.run.name)));
    let marks = [
        (Swatch::Band, "spike frame"),
        (Swatch::Ring, "spike frame (by percentile)"),
    ];
    let text = font(15).pos(Pos::new(HPos::Left, VPos::Center));
    let mut x = 80;
    for (swatch, name) in lines.chain(marks) {
        match swatch {
            Swatch::Line(s) => area.draw(&PathElement::new(vec![(x, y), (x + 28, y)], s))?,
            Swatch::Band => area.draw(&Rectangle::new(
                [(x + 10, y - 9), (x + 18, y + 9)],
                SPIKE.filled(),
            ))?,
            Swatch::Ring => area.draw(&Circle::new((x + 14, y), 5, BLACK.stroke_width(2)))?,
        }
        area.draw_text(name, &text, (x + 34, y))?;
        x += 34 + area.estimate_text_size(name, &text)?.0 as i32 + 30;
    }
    Ok(())
}

/// Where fraction `q` of the frames lies on the percentile axis: `-log10(1 - q)`, so that
/// 90%, 99% and 99.9% are equally spaced and the slow tail gets room.
fn tail_x(q: f64, frames: usize) -> f64 {
    -(1.0 - q).max(1.0 / frames as f64).log10()
}

/// A run's frames, slowest last: (place on the percentile axis, ms, spike frame).
fn by_time(run: &RunRecord, frames: usize) -> Vec<(f64, f64, bool)> {
    let mut t: Vec<(f64, bool)> = run
        .frames
        .iter()
        .map(|f| (f.micros / 1e3, f.spike))
        .collect();
    t.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n = t.len() as f64;
    t.into_iter()
        .enumerate()
        .map(|(i, (ms, spike))| (tail_x(i as f64 / n, frames), ms, spike))
        .collect()
}

/// Frame time at each percentile, per run, the spike frames ringed.
fn percentiles(area: &Area<'_>, runs: &[RunRecord]) -> Result<()> {
    let frames = runs
        .iter()
        .map(|r| r.frames.len())
        .max()
        .unwrap_or(1)
        .max(2);
    let drawn = drawn(runs);
    let curves: Vec<Vec<(f64, f64, bool)>> =
        drawn.iter().map(|(r, _)| by_time(r, frames)).collect();
    let units = [1e-3, 1.0, 1e3];
    let (lo, hi) = bounds(curves.iter().flatten().map(|p| p.1), &units);
    let right = tail_x(1.0, frames);
    let mut chart = ChartBuilder::on(area)
        .caption(
            "frame time by percentile (lower is better)",
            ("sans-serif", 20),
        )
        .margin(12)
        .margin_right(30)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..right, log_axis(lo, hi, &units))?;
    chart
        .configure_mesh()
        .label_style(font(14))
        .axis_desc_style(font(14))
        .x_desc("percentile of frames (the slowest at the right)")
        .y_desc("frame time (log scale)")
        .x_labels(7)
        .x_label_formatter(&|&x| {
            // Labels at 0%, 90%, 99%, 99.9%... only.
            if (x - x.round()).abs() > 1e-6 {
                return String::new();
            }
            format!("{}%", short(100.0 * (1.0 - 10f64.powf(-x.round()))))
        })
        .y_label_formatter(&|&v| in_units(v, &[(1e-3, "µs"), (1.0, "ms"), (1e3, "s")]))
        .draw()?;
    for ((_, style), curve) in drawn.iter().zip(&curves) {
        chart.draw_series(LineSeries::new(curve.iter().map(|p| (p.0, p.1)), *style))?;
    }
    let spikes = curves.iter().flatten().filter(|p| p.2);
    chart.draw_series(spikes.map(|p| Circle::new((p.0, p.1), 5, BLACK.stroke_width(2))))?;
    Ok(())
}

/// `figure` of every drawn run after each frame, in bytes, the spike frames banded.
fn over_frames(
    area: &Area<'_>,
    runs: &[RunRecord],
    caption: &str,
    figure: impl Fn(&FrameRecord) -> f64,
) -> Result<()> {
    let drawn = drawn(runs);
    let frames = runs.iter().map(|r| r.frames.len()).max().unwrap_or(1);
    // A log axis has no 0 (the heap run holds about nothing above its level after warm-up).
    let value = |f: &FrameRecord| figure(f).max(KIB);
    let units = [KIB, MIB, GIB];
    let (lo, hi) = bounds(
        drawn.iter().flat_map(|(r, _)| r.frames.iter().map(value)),
        &units,
    );
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .margin_right(30)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0..frames, log_axis(lo, hi, &units))?;
    chart
        .configure_mesh()
        .label_style(font(14))
        .axis_desc_style(font(14))
        .x_desc("frame")
        .y_desc("log scale")
        .y_label_formatter(&|&v| in_units(v, &[(KIB, "KiB"), (MIB, "MiB"), (GIB, "GiB")]))
        .draw()?;
    if let Some(first) = runs.first() {
        chart.draw_series(spike_bands(first, frames, lo, hi))?;
    }
    for (r, style) in &drawn {
        let points = r.frames.iter().enumerate().map(|(i, f)| (i, value(f)));
        chart.draw_series(LineSeries::new(points, *style))?;
    }
    Ok(())
}

/// A band over each spike frame of `run` (the same frames in every run), a few frames wide
/// so that it shows at any number of frames.
fn spike_bands(
    run: &RunRecord,
    frames: usize,
    lo: f64,
    hi: f64,
) -> impl Iterator<Item = Rectangle<(usize, f64)>> {
    let half = (frames / 400).max(1);
    let spikes = run.frames.iter().enumerate().filter(|(_, f)| f.spike);
    spikes.map(move |(i, _)| {
        Rectangle::new(
            [(i.saturating_sub(half), lo), (i + half + 1, hi)],
            SPIKE.filled(),
        )
    })
}

/// Mean heap allocations a frame of each drawn run, the demo's own code's and Bevy's, one
/// bar each, on a log scale so that Bevy's tens show beside a fresh Vec's thousands.
fn allocations(area: &Area<'_>, runs: &[RunRecord], sums: &[Summary]) -> Result<()> {
    let rows: Vec<(String, f64, RGBColor)> = runs
        .iter()
        .zip(sums)
        .filter_map(|(r, s)| {
            let (_, colour, _) = DRAWN.iter().find(|d| d.0 == r.run.name)?;
            let name = r.run.name;
            Some([
                (format!("{name}: own code"), s.own_per_frame, *colour),
                (format!("{name}: Bevy"), s.bevy_per_frame, BEVY),
            ])
        })
        .flatten()
        .collect();
    let n = rows.len() as i32;
    // Rows are 10 apart, the first at the top: a bar 6 thick leaves a gap to the next.
    let centre = |i: usize| 10 * (n - i as i32) - 5;
    let row = |y: i32| (n - (y + 5) / 10) as usize;
    let units = [1e-3, 1.0, 1e3, 1e6];
    let (lo, hi) = bounds(rows.iter().map(|r| r.1).filter(|&v| v > 0.0), &units);
    // Room at the right for the longest bar's figure.
    let hi = hi * 10.0;
    let mut chart = ChartBuilder::on(area)
        .caption(
            "heap allocations a frame (mean): the demo's own code and Bevy's",
            ("sans-serif", 20),
        )
        .margin(12)
        .margin_right(30)
        .x_label_area_size(40)
        .y_label_area_size(190)
        .build_cartesian_2d(
            log_axis(lo, hi, &units),
            (0..10 * n).with_key_points((0..rows.len()).map(centre).collect()),
        )?;
    chart
        .configure_mesh()
        .label_style(font(14))
        .axis_desc_style(font(14))
        .disable_y_mesh()
        .x_desc("allocations a frame (log scale)")
        .x_label_formatter(&|&v| count(v))
        .y_label_formatter(&|&y| rows.get(row(y)).map_or(String::new(), |r| r.0.clone()))
        .draw()?;
    for (i, (_, value, colour)) in rows.iter().enumerate() {
        let y = centre(i);
        if *value >= lo {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(lo, y - 3), (*value, y + 3)],
                colour.filled(),
            )))?;
        }
        chart.draw_series(std::iter::once(Text::new(
            count(*value),
            (value.max(lo) * 1.15, y),
            font(14).pos(Pos::new(HPos::Left, VPos::Center)),
        )))?;
    }
    Ok(())
}

/// Bounds of a log axis of `units` around `values` (positive): the round numbers (1, 2, 5)
/// below and above them, so that a label marks each end.
fn bounds(values: impl Iterator<Item = f64>, units: &[f64]) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::MAX, f64::MIN_POSITIVE), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    let (lo, hi) = (lo.min(hi) * 0.9, hi * 1.1);
    let round = round_numbers(lo / 10.0, hi * 10.0, units, &[1.0, 2.0, 5.0]);
    (
        round
            .iter()
            .rev()
            .find(|&&r| r <= lo)
            .copied()
            .unwrap_or(lo),
        round.iter().find(|&&r| r >= hi).copied().unwrap_or(hi),
    )
}

/// A log axis over `lo..hi`, labelled at round numbers of `units` (1, 2, 3, 5 of each
/// decade when it spans under 2.5 decades, 1, 2, 5 under 3.5, else 1: labels must not
/// crowd), a light line at every other whole multiple.
fn log_axis(lo: f64, hi: f64, units: &[f64]) -> WithKeyPoints<LogCoord<f64>> {
    let decades = (hi / lo).log10();
    let labelled: &[f64] = match decades {
        d if d < 2.5 => &[1.0, 2.0, 3.0, 5.0],
        d if d < 3.5 => &[1.0, 2.0, 5.0],
        _ => &[1.0],
    };
    let whole = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
    (lo..hi)
        .log_scale()
        .with_key_points(round_numbers(lo, hi, units, labelled))
        .with_light_points(round_numbers(lo, hi, units, &whole))
}

/// `m` x 1, 10 and 100 of each of `units` in `lo..=hi`, for each `m` of `mantissas`
/// (under 1000 of a unit: the next unit takes over there).
fn round_numbers(lo: f64, hi: f64, units: &[f64], mantissas: &[f64]) -> Vec<f64> {
    let per_unit = [1.0, 10.0, 100.0]
        .iter()
        .flat_map(|d| mantissas.iter().map(move |m| m * d));
    units
        .iter()
        .flat_map(|u| per_unit.clone().map(move |x| x * u))
        .filter(|v| (lo..=hi).contains(v))
        .collect()
}

/// `v` in the largest of `units` it reaches: "2 MiB", "500 µs".
fn in_units(v: f64, units: &[(f64, &str)]) -> String {
    let (unit, name) = units
        .iter()
        .rev()
        .find(|(u, _)| v >= u * 0.999)
        .unwrap_or(&units[0]);
    format!("{} {name}", short(v / unit))
}

/// At most two decimals, no trailing zeros.
fn short(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// A count as read aloud: "0", "0.04", "39.6", "14,884".
fn count(v: f64) -> String {
    match v {
        v if v > 0.0 && v < 0.005 => "under 0.01".into(),
        v if v < 10.0 => short(v),
        v if v < 100.0 => format!("{v:.1}").trim_end_matches(".0").into(),
        v => thousands(v),
    }
}

/// `v` rounded, its thousands apart: "14,884".
fn thousands(v: f64) -> String {
    let digits = format!("{v:.0}");
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
