//! Hand-written SVG charts for the benchmark report: grouped bars and
//! cumulative distributions. No dependencies.

use std::fmt::Write as _;

const W: f64 = 720.0;
const H: f64 = 360.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 7] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#7f7f7f",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn header(title: &str) -> String {
    format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" \
         viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" font-size=\"14\" text-anchor=\"middle\">{}</text>\n",
        (W - RIGHT + LEFT) / 2.0,
        esc(title)
    )
}

fn legend(s: &mut String, names: &[&str]) {
    for (i, n) in names.iter().enumerate() {
        let y = TOP + 10.0 + 18.0 * i as f64;
        let x = W - RIGHT + 12.0;
        let _ = writeln!(
            s,
            "<rect x=\"{x}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/>\
             <text x=\"{}\" y=\"{}\">{}</text>",
            y - 10.0,
            COLORS[i % COLORS.len()],
            x + 16.0,
            y,
            esc(n)
        );
    }
}

/// A "nice" upper bound for an axis.
fn nice_max(v: f64) -> f64 {
    if v <= 0.0 || !v.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    for m in [1.0, 2.0, 2.5, 5.0, 10.0] {
        if v <= m * p {
            return m * p;
        }
    }
    10.0 * p
}

/// Grouped bars: one group per category, one bar per series (NaN: no bar).
pub fn bars(
    title: &str,
    y_label: &str,
    categories: &[String],
    series: &[(&str, Vec<f64>)],
) -> String {
    let mut s = header(title);
    let max = nice_max(
        series
            .iter()
            .flat_map(|(_, v)| v.iter().copied())
            .filter(|v| v.is_finite())
            .fold(0.0, f64::max),
    );
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let y = |v: f64| TOP + ph * (1.0 - v / max);
    for k in 0..=5 {
        let v = max * k as f64 / 5.0;
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT}\" x2=\"{x2}\" y1=\"{yy}\" y2=\"{yy}\" stroke=\"#ddd\"/>\
             <text x=\"{tx}\" y=\"{ty}\" text-anchor=\"end\">{label}</text>",
            x2 = LEFT + pw,
            yy = y(v),
            tx = LEFT - 6.0,
            ty = y(v) + 4.0,
            label = fmt_num(v)
        );
    }
    let _ = writeln!(
        s,
        "<text transform=\"translate(16 {}) rotate(-90)\" text-anchor=\"middle\">{}</text>",
        TOP + ph / 2.0,
        esc(y_label)
    );
    let groups = categories.len().max(1) as f64;
    let gw = pw / groups;
    let bw = gw * 0.8 / series.len().max(1) as f64;
    for (g, cat) in categories.iter().enumerate() {
        let gx = LEFT + gw * g as f64 + gw * 0.1;
        for (i, (_, vals)) in series.iter().enumerate() {
            let v = vals.get(g).copied().unwrap_or(f64::NAN);
            if !v.is_finite() {
                continue;
            }
            let _ = writeln!(
                s,
                "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{}</title></rect>",
                gx + bw * i as f64,
                y(v),
                bw * 0.95,
                TOP + ph - y(v),
                COLORS[i % COLORS.len()],
                fmt_num(v)
            );
        }
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            gx + gw * 0.4,
            TOP + ph + 16.0,
            esc(cat)
        );
    }
    let _ = writeln!(
        s,
        "<line x1=\"{LEFT}\" x2=\"{x2}\" y1=\"{yy}\" y2=\"{yy}\" stroke=\"black\"/>",
        x2 = LEFT + pw,
        yy = TOP + ph
    );
    let names: Vec<&str> = series.iter().map(|(n, _)| *n).collect();
    legend(&mut s, &names);
    s.push_str("</svg>\n");
    s
}

/// Cumulative distributions of sorted samples, on a logarithmic x axis.
pub fn cdf(title: &str, x_label: &str, series: &[(&str, &[f64])]) -> String {
    let mut s = header(title);
    let all = series.iter().flat_map(|(_, v)| v.iter().copied());
    let lo = all
        .clone()
        .filter(|v| *v > 0.0)
        .fold(f64::INFINITY, f64::min);
    let hi = all.fold(0.0, f64::max);
    let (lo, hi) = (
        10f64.powf(lo.max(1e-9).log10().floor()),
        10f64.powf(hi.max(1e-9).log10().ceil()),
    );
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let x =
        |v: f64| LEFT + pw * (v.max(lo).log10() - lo.log10()) / (hi.log10() - lo.log10()).max(1e-9);
    let y = |q: f64| TOP + ph * (1.0 - q);
    let mut d = lo;
    while d <= hi * 1.0001 {
        let _ = writeln!(
            s,
            "<line x1=\"{0:.1}\" x2=\"{0:.1}\" y1=\"{TOP}\" y2=\"{1}\" stroke=\"#ddd\"/>\
             <text x=\"{0:.1}\" y=\"{2}\" text-anchor=\"middle\">{3}</text>",
            x(d),
            TOP + ph,
            TOP + ph + 16.0,
            fmt_num(d)
        );
        d *= 10.0;
    }
    for k in 0..=4 {
        let q = k as f64 / 4.0;
        let _ = writeln!(
            s,
            "<line x1=\"{LEFT}\" x2=\"{x2}\" y1=\"{yy}\" y2=\"{yy}\" stroke=\"#ddd\"/>\
             <text x=\"{tx}\" y=\"{ty}\" text-anchor=\"end\">{q}</text>",
            x2 = LEFT + pw,
            yy = y(q),
            tx = LEFT - 6.0,
            ty = y(q) + 4.0
        );
    }
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\
         <text transform=\"translate(16 {}) rotate(-90)\" text-anchor=\"middle\">fraction of faults</text>",
        LEFT + pw / 2.0,
        H - 14.0,
        esc(x_label),
        TOP + ph / 2.0
    );
    for (i, (_, v)) in series.iter().enumerate() {
        let n = v.len().max(1) as f64;
        let step = (v.len() / 400).max(1);
        let mut pts = String::new();
        for (k, &val) in v.iter().enumerate().step_by(step) {
            let _ = write!(pts, "{:.1},{:.1} ", x(val), y((k + 1) as f64 / n));
        }
        if let Some(&last) = v.last() {
            let _ = write!(pts, "{:.1},{:.1}", x(last), y(1.0));
        }
        let _ = writeln!(
            s,
            "<polyline fill=\"none\" stroke-width=\"2\" stroke=\"{}\" points=\"{}\"/>",
            COLORS[i % COLORS.len()],
            pts
        );
    }
    let names: Vec<&str> = series.iter().map(|(n, _)| *n).collect();
    legend(&mut s, &names);
    s.push_str("</svg>\n");
    s
}

/// A number for an axis or a tooltip.
pub fn fmt_num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}
