//! Messages and progress on stderr: quiet and verbose levels, progress bars only on a
//! terminal, and the closing summary line.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A progress bar or spinner that clears itself when dropped, so that an error message
/// that follows starts on a clean line.
pub struct Bar(ProgressBar);

impl std::ops::Deref for Bar {
    type Target = ProgressBar;
    fn deref(&self) -> &ProgressBar {
        &self.0
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// What the user asked to see.
pub struct Ui {
    quiet: bool,
    verbose: bool,
    bars: bool,
}

impl Ui {
    /// `bars` only when stderr is a terminal and not quiet.
    pub fn new(quiet: bool, verbose: bool) -> Self {
        Self {
            quiet,
            verbose,
            bars: !quiet && std::io::stderr().is_terminal(),
        }
    }

    /// Whether `-q` was given (nothing but errors).
    pub fn is_quiet(&self) -> bool {
        self.quiet
    }

    /// A line on stderr unless quiet.
    pub fn info(&self, msg: impl AsRef<str>) {
        if !self.quiet {
            eprintln!("{}", msg.as_ref());
        }
    }

    /// A line on stderr with `-v` only.
    pub fn verbose(&self, msg: impl AsRef<str>) {
        if self.verbose {
            eprintln!("{}", msg.as_ref());
        }
    }

    /// A progress bar of `len` units (hidden unless stderr is a terminal).
    pub fn bar(&self, len: u64, unit: &str) -> Bar {
        if !self.bars {
            return Bar(ProgressBar::hidden());
        }
        let pb = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
        pb.set_style(
            ProgressStyle::with_template(&format!(
                "{{spinner}} [{{bar:30}}] {{percent:>3}}% {{human_pos}}/{{human_len}} {unit} {{msg}} ({{elapsed}}, eta {{eta}})"
            ))
            .expect("a valid template")
            .progress_chars("#>."),
        );
        Bar(pb)
    }

    /// A spinner with a message for a step of unknown length (hidden unless a terminal).
    pub fn spinner(&self, msg: &str) -> Bar {
        if !self.bars {
            return Bar(ProgressBar::hidden());
        }
        let pb = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        pb.set_style(
            ProgressStyle::with_template("{spinner} {msg} ({elapsed})").expect("a valid template"),
        );
        pb.set_message(msg.to_string());
        pb.enable_steady_tick(Duration::from_millis(100));
        Bar(pb)
    }

    /// The closing line: what was done, how many items, in how long, at what rate.
    pub fn summary(&self, what: &str, items: u64, unit: &str, start: Instant) {
        let secs = start.elapsed().as_secs_f64();
        self.info(format!(
            "{what}: {items} {unit} in {}, {}",
            human_secs(secs),
            rate(items as f64, secs, unit)
        ));
    }
}

/// `12.3 ms`, `4.56 s`.
pub fn human_secs(secs: f64) -> String {
    if secs < 1e-3 {
        format!("{:.1} µs", secs * 1e6)
    } else if secs < 1.0 {
        format!("{:.1} ms", secs * 1e3)
    } else {
        format!("{secs:.2} s")
    }
}

/// `items / secs` with an SI prefix: `3.2 M singles/s`, `850 digis/s`.
pub fn rate(items: f64, secs: f64, unit: &str) -> String {
    if secs <= 0.0 {
        return format!("- {unit}/s");
    }
    let r = items / secs;
    let (v, p) = if r >= 1e9 {
        (r / 1e9, "G ")
    } else if r >= 1e6 {
        (r / 1e6, "M ")
    } else if r >= 1e3 {
        (r / 1e3, "k ")
    } else {
        (r, "")
    };
    format!("{v:.3} {p}{unit}/s")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_times_read_well() {
        assert_eq!(rate(3.2e6, 1.0, "singles"), "3.200 M singles/s");
        assert_eq!(rate(850.0, 1.0, "digis"), "850.000 digis/s");
        assert_eq!(rate(1.0, 0.0, "x"), "- x/s");
        assert_eq!(human_secs(0.0123), "12.3 ms");
        assert_eq!(human_secs(4.561), "4.56 s");
    }
}
