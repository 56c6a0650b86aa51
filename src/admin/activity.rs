//! The boot activity view of the admin page: the last hour of boots per minute, failures
//! highlighted, drawn on the server as an SVG (the page needs no JavaScript). It renders what
//! `bootvol_runtime::metrics` counted ([`Minute`]); it knows nothing of how those counts are kept.

use std::fmt::Write;

use bootvol_runtime::metrics::Minute;

const WIDTH: u32 = 600;
const HEIGHT: u32 = 120;
/// The bars' area: below the top line of labels, above the bottom one.
const TOP: u32 = 16;
const BARS: u32 = 88;
const GREEN: &str = "#3a7d44";
const RED: &str = "#c0392b";

/// `HH:MM` (UTC) of a Unix time.
fn hour_minute(unix: i64) -> String {
    let text = bootvol_core::timefmt::format_unix(unix.max(0) as u64);
    text.get(11..16).unwrap_or("--:--").to_owned()
}

/// A sentence for the page and for screen readers.
pub(super) fn summary(minutes: &[Minute]) -> String {
    let boots: u64 = minutes.iter().map(|m| m.boots).sum();
    let failures: u64 = minutes.iter().map(|m| m.failures).sum();
    let peak = minutes.iter().map(|m| m.boots).max().unwrap_or(0);
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    format!(
        "{} and {} in the last hour; busiest minute {}",
        plural(boots, "boot", "boots"),
        plural(failures, "failure", "failures"),
        plural(peak, "boot", "boots"),
    )
}

/// The SVG: one bar per minute, oldest on the left, boots in green with the minute's failures
/// stacked on top in red; each bar's tooltip gives its minute and counts.
pub(super) fn svg(minutes: &[Minute]) -> String {
    let slots = minutes.len().max(1) as u32;
    let slot = WIDTH / slots;
    let peak = minutes.iter().map(|m| m.boots + m.failures).max().unwrap_or(0).max(1);
    let scale = |n: u64| -> u32 {
        // At least one pixel for any count, so a single boot shows.
        if n == 0 { 0 } else { ((n * u64::from(BARS)).div_ceil(peak) as u32).max(1) }
    };
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{}">"#,
        summary(minutes)
    );
    let _ = write!(
        out,
        r##"<rect x="0" y="{TOP}" width="{WIDTH}" height="{BARS}" fill="#f7f7f7"/><text x="2" y="11" font-size="10" fill="#555">{peak} per minute</text>"##
    );
    for (i, m) in minutes.iter().enumerate() {
        let x = i as u32 * slot;
        let (boots, failures) = (scale(m.boots), scale(m.failures));
        let base = TOP + BARS;
        let class = if m.failures > 0 { "minute failed" } else { "minute" };
        let _ = write!(
            out,
            r#"<g class="{class}"><title>{} UTC: {} boot(s), {} failure(s)</title><rect x="{x}" y="{TOP}" width="{slot}" height="{BARS}" fill-opacity="0"/>"#,
            hour_minute(m.start),
            m.boots,
            m.failures
        );
        if boots > 0 {
            let _ = write!(
                out,
                r#"<rect x="{x}" y="{}" width="{}" height="{boots}" fill="{GREEN}"/>"#,
                base - boots,
                slot.saturating_sub(2).max(1)
            );
        }
        if failures > 0 {
            let _ = write!(
                out,
                r#"<rect class="failures" x="{x}" y="{}" width="{}" height="{failures}" fill="{RED}"/>"#,
                base - boots - failures,
                slot.saturating_sub(2).max(1)
            );
        }
        out.push_str("</g>");
    }
    if let (Some(first), Some(last)) = (minutes.first(), minutes.last()) {
        let y = HEIGHT - 4;
        let _ = write!(
            out,
            r##"<text x="2" y="{y}" font-size="10" fill="#555">{} UTC</text><text x="{}" y="{y}" font-size="10" fill="#555" text-anchor="end">{} UTC (now)</text>"##,
            hour_minute(first.start),
            WIDTH - 2,
            hour_minute(last.start)
        );
    }
    out.push_str("</svg>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hour(counts: &[(u64, u64)]) -> Vec<Minute> {
        let start = 1_700_000_040 - 60 * (counts.len() as i64 - 1);
        counts
            .iter()
            .enumerate()
            .map(|(i, &(boots, failures))| Minute { start: start + 60 * i as i64, boots, failures })
            .collect()
    }

    #[test]
    fn one_bar_per_minute_with_failures_in_red_on_top() {
        let mut counts = vec![(0, 0); 60];
        counts[10] = (40, 0);
        counts[59] = (10, 10);
        let minutes = hour(&counts);
        let svg = svg(&minutes);
        assert!(svg.starts_with("<svg ") && svg.ends_with("</svg>"));
        assert_eq!(svg.matches("<g class=\"minute").count(), 60);
        assert_eq!(svg.matches("class=\"minute failed\"").count(), 1);
        assert_eq!(svg.matches("class=\"failures\"").count(), 1);
        // The busiest minute (40) fills the bars' height; the last stacks 22 + 22 pixels.
        assert!(svg.contains(&format!("height=\"{BARS}\" fill=\"{GREEN}\"")), "{svg}");
        assert!(
            svg.contains(&format!(
                "y=\"{}\" width=\"8\" height=\"22\" fill=\"{RED}\"",
                TOP + BARS - 44
            )),
            "{svg}"
        );
        assert!(svg.contains("<title>22:14 UTC: 10 boot(s), 10 failure(s)</title>"), "{svg}");
        assert!(svg.contains(
            "aria-label=\"50 boots and 10 failures in the last hour; busiest minute 40 boots\""
        ));
    }

    #[test]
    fn a_quiet_hour_draws_no_bars() {
        let svg = svg(&hour(&[(0, 0); 60]));
        assert!(!svg.contains(GREEN) && !svg.contains(RED));
        assert_eq!(
            summary(&hour(&[(1, 1)])),
            "1 boot and 1 failure in the last hour; busiest minute 1 boot"
        );
    }
}
