//! Charts as inline SVG, drawn on the server (no script, no chart library): a sparkline
//! for a table cell and a line chart of one or two series over time.

use maud::{html, Markup, PreEscaped};

/// The points of `values` scaled into a `w` × `h` box (0 at the bottom), as SVG's
/// `points` attribute.
pub fn points(values: &[f64], w: f64, h: f64) -> String {
    let max = values.iter().copied().fold(0.0_f64, f64::max);
    scaled(values, max, w, h)
}

/// A 120 × 24 sparkline; an empty series draws a flat line.
pub fn sparkline(values: &[f64]) -> Markup {
    let pts = if values.is_empty() {
        "0,23 120,23".to_string()
    } else {
        points(values, 120.0, 22.0)
    };
    html! {
        svg class="spark" width="120" height="24" viewBox="0 0 120 24" role="img"
            aria-label=(format!("{} points", values.len())) {
            polyline fill="none" stroke="currentColor" stroke-width="1.5" points=(pts) {}
        }
    }
}

/// A line chart of named series sharing one x axis (`labels`), 720 × 200, with the
/// maximum written on the y axis.
pub fn lines(labels: &[String], series: &[(&str, &str, Vec<f64>)]) -> Markup {
    let (w, h) = (720.0, 180.0);
    let max = series
        .iter()
        .flat_map(|(_, _, v)| v.iter().copied())
        .fold(0.0_f64, f64::max);
    html! {
        figure class="chart" {
            svg width="760" height="220" viewBox="0 0 760 220" role="img" aria-label="chart" {
                g transform="translate(36,10)" {
                    line x1="0" y1=(h) x2=(w) y2=(h) stroke="#999" {}
                    text x="-4" y="8" text-anchor="end" font-size="10" { (format!("{max:.0}")) }
                    text x="-4" y=(h) text-anchor="end" font-size="10" { "0" }
                    @for (_, color, v) in series {
                        @if !v.is_empty() {
                            polyline fill="none" stroke=(color) stroke-width="1.5"
                                points=(scaled(v, max, w, h)) {}
                        }
                    }
                    @if let (Some(a), Some(b)) = (labels.first(), labels.last()) {
                        text x="0" y=(h + 14.0) font-size="10" { (a) }
                        text x=(w) y=(h + 14.0) font-size="10" text-anchor="end" { (b) }
                    }
                }
            }
            figcaption {
                @for (name, color, _) in series {
                    span class="key" style=(PreEscaped(format!("color:{color}"))) { "■ " } (name) " "
                }
            }
        }
    }
}

/// Like [`points`] against a shared maximum.
fn scaled(values: &[f64], max: f64, w: f64, h: f64) -> String {
    let n = values.len();
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let x = if n > 1 {
                i as f64 * w / (n - 1) as f64
            } else {
                w / 2.0
            };
            let y = if max > 0.0 { h - v / max * h } else { h };
            format!("{x:.1},{y:.1}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_scale_to_the_box_with_zero_at_the_bottom() {
        assert_eq!(
            points(&[0.0, 5.0, 10.0], 100.0, 20.0),
            "0.0,20.0 50.0,10.0 100.0,0.0"
        );
        assert_eq!(points(&[0.0, 0.0], 100.0, 20.0), "0.0,20.0 100.0,20.0");
        assert_eq!(points(&[3.0], 100.0, 20.0), "50.0,0.0");
    }

    #[test]
    fn a_sparkline_is_one_polyline() {
        let s = sparkline(&[1.0, 2.0]).into_string();
        assert!(s.starts_with("<svg"), "{s}");
        assert!(s.contains("points=\"0.0,11.0 120.0,0.0\""), "{s}");
    }
}
