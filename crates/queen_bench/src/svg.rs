//! Hand-written SVG line charts: linear or log axes, one polyline per series, a legend.

use std::fmt::Write;

/// One line of a chart.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Dashed stroke (used to tell batch sizes apart within one colour).
    pub dashed: bool,
    /// Colour index; series with the same index share a colour.
    pub color: usize,
}

pub struct LineChart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    pub log_x: bool,
    pub log_y: bool,
    pub series: Vec<Series>,
}

const COLORS: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];
const W: f64 = 760.0;
const H: f64 = 440.0;
const L: f64 = 80.0; // left margin
const R: f64 = 220.0; // right margin (legend)
const T: f64 = 40.0;
const B: f64 = 60.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Axis ticks: decades on a log axis, about five round steps on a linear one.
fn ticks(lo: f64, hi: f64, log: bool) -> Vec<f64> {
    if log {
        let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
        return (a..=b).map(|e| 10f64.powi(e)).collect();
    }
    let span = (hi - lo).max(f64::MIN_POSITIVE);
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let mut v = Vec::new();
    let mut t = (lo / step).floor() * step;
    while t <= hi + step * 1e-9 {
        v.push(t);
        t += step;
    }
    if v.last().is_some_and(|l| *l < hi - step * 1e-9) {
        v.push(t);
    }
    v
}

fn label(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.3}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_string()
}

impl LineChart<'_> {
    pub fn render(&self) -> String {
        let pts: Vec<(f64, f64)> = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().copied())
            .filter(|(x, y)| {
                x.is_finite()
                    && y.is_finite()
                    && (!self.log_x || *x > 0.0)
                    && (!self.log_y || *y > 0.0)
            })
            .collect();
        let mut svg = String::new();
        let _ = writeln!(
            svg,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
        );
        let _ = writeln!(svg, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
            (L + W - R) / 2.0,
            esc(self.title)
        );
        if pts.is_empty() {
            let _ = writeln!(
                svg,
                r#"<text x="{}" y="{}">no data</text></svg>"#,
                W / 2.0,
                H / 2.0
            );
            return svg;
        }
        let f = |v: f64, log: bool| if log { v.log10() } else { v };
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for (x, y) in &pts {
            x0 = x0.min(*x);
            x1 = x1.max(*x);
            y0 = y0.min(*y);
            y1 = y1.max(*y);
        }
        if !self.log_y {
            y0 = y0.min(0.0);
        }
        let xt = ticks(x0, x1, self.log_x);
        let yt = ticks(y0, if y1 > y0 { y1 } else { y0 + 1.0 }, self.log_y);
        let (xa, xb) = (
            f(xt[0].min(x0), self.log_x),
            f(xt[xt.len() - 1].max(x1), self.log_x),
        );
        let (ya, yb) = (
            f(yt[0].min(y0), self.log_y),
            f(yt[yt.len() - 1].max(y1), self.log_y),
        );
        let xb = if xb > xa { xb } else { xa + 1.0 };
        let yb = if yb > ya { yb } else { ya + 1.0 };
        let px = |x: f64| L + (f(x, self.log_x) - xa) / (xb - xa) * (W - L - R);
        let py = |y: f64| H - B - (f(y, self.log_y) - ya) / (yb - ya) * (H - T - B);
        // grid and ticks
        for t in &xt {
            let x = px(*t);
            let _ = writeln!(
                svg,
                r##"<line x1="{x:.1}" y1="{T}" x2="{x:.1}" y2="{}" stroke="#ddd"/><text x="{x:.1}" y="{}" text-anchor="middle">{}</text>"##,
                H - B,
                H - B + 16.0,
                label(*t)
            );
        }
        for t in &yt {
            let y = py(*t);
            let _ = writeln!(
                svg,
                r##"<line x1="{L}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                W - R,
                L - 6.0,
                y + 4.0,
                label(*t)
            );
        }
        let _ = writeln!(
            svg,
            r##"<rect x="{L}" y="{T}" width="{}" height="{}" fill="none" stroke="#333"/>"##,
            W - L - R,
            H - T - B
        );
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle">{}{}</text>"#,
            (L + W - R) / 2.0,
            H - 16.0,
            esc(self.x_label),
            if self.log_x { " (log)" } else { "" }
        );
        let _ = writeln!(
            svg,
            r#"<text transform="translate(18,{}) rotate(-90)" text-anchor="middle">{}{}</text>"#,
            (T + H - B) / 2.0,
            esc(self.y_label),
            if self.log_y { " (log)" } else { "" }
        );
        for (i, s) in self.series.iter().enumerate() {
            let color = COLORS[s.color % COLORS.len()];
            let mut p: Vec<(f64, f64)> = s
                .points
                .iter()
                .copied()
                .filter(|(x, y)| {
                    x.is_finite()
                        && y.is_finite()
                        && (!self.log_x || *x > 0.0)
                        && (!self.log_y || *y > 0.0)
                })
                .collect();
            p.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal));
            let dash = if s.dashed {
                r#" stroke-dasharray="6,4""#
            } else {
                ""
            };
            if p.len() > 1 {
                let path: Vec<String> = p
                    .iter()
                    .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
                    .collect();
                let _ = writeln!(
                    svg,
                    r#"<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{}"/>"#,
                    path.join(" ")
                );
            }
            for (x, y) in &p {
                let _ = writeln!(
                    svg,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{color}"><title>{}: {} → {}</title></circle>"#,
                    px(*x),
                    py(*y),
                    esc(&s.name),
                    trim(*x),
                    trim(*y)
                );
            }
            let ly = T + 10.0 + i as f64 * 18.0;
            let lx = W - R + 14.0;
            let _ = writeln!(
                svg,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
                lx + 24.0,
                lx + 30.0,
                ly + 4.0,
                esc(&s.name)
            );
        }
        svg.push_str("</svg>\n");
        svg
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_log_and_linear() {
        let c = LineChart {
            title: "t <x>",
            x_label: "x",
            y_label: "y",
            log_x: true,
            log_y: false,
            series: vec![Series {
                name: "a".into(),
                points: vec![(1.0, 2.0), (100.0, 5.0)],
                dashed: false,
                color: 0,
            }],
        }
        .render();
        assert!(c.starts_with("<svg"));
        assert!(c.contains("polyline"));
        assert!(c.contains("t &lt;x&gt;"));
        assert!(c.trim_end().ends_with("</svg>"));
        assert_eq!(ticks(1.0, 1000.0, true), vec![1.0, 10.0, 100.0, 1000.0]);
        assert_eq!(ticks(0.0, 10.0, false), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(
            ticks(0.0, 10.3, false),
            vec![0.0, 2.5, 5.0, 7.5, 10.0, 12.5]
        );
    }
}
