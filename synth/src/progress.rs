//! Progress on stderr for long searches: a spinner that appears only after one second.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A lazily shown spinner (hidden for searches under a second, and when disabled).
pub struct Progress {
    bar: Option<ProgressBar>,
    start: Instant,
    shown: Mutex<bool>,
}

impl Progress {
    /// A spinner on stderr if `enabled`.
    pub fn new(enabled: bool) -> Progress {
        let bar = enabled.then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
            bar.set_style(
                ProgressStyle::with_template("{spinner} [{elapsed}] {msg}")
                    .expect("valid template"),
            );
            bar
        });
        Progress {
            bar,
            start: Instant::now(),
            shown: Mutex::new(false),
        }
    }

    /// A spinner that never shows.
    pub fn hidden() -> Progress {
        Progress::new(false)
    }

    /// Updates the message; shows the spinner once the work has run for a second.
    pub fn message(&self, text: &str) {
        let Some(bar) = &self.bar else { return };
        if self.start.elapsed() > Duration::from_secs(1) {
            let mut shown = self.shown.lock().unwrap();
            if !*shown {
                bar.set_draw_target(ProgressDrawTarget::stderr());
                bar.enable_steady_tick(Duration::from_millis(120));
                *shown = true;
            }
        }
        bar.set_message(text.to_string());
    }

    /// Removes the spinner.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}
