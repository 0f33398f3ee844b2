//! Progress on stderr for long computations (searches, single solves, bounds, lowering and
//! simulation of large fabrics): one status line that appears only after a second, with the
//! elapsed time, a bar of the time limit used and the time left, the current phase, the best
//! result so far and the lower bound. It is drawn only when stderr is a terminal; the state
//! is kept either way, so callers and tests can read it ([`Progress::snapshot`]).

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the status line shows, besides the times.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// The current phase (`solving steps=3 rounds=7 chunks=6`, `packing trees`, ...).
    pub phase: String,
    /// The best result so far (`(3, 7, 6) R/C 7/6`), if any.
    pub best: Option<String>,
    /// The lower bound (`2 steps, R/C >= 7/6`), once known.
    pub bound: Option<String>,
}

impl Status {
    /// The status as one line: `phase | best ... | bound ...`.
    pub fn line(&self) -> String {
        let mut parts = vec![self.phase.clone()];
        if let Some(b) = &self.best {
            parts.push(format!("best {b}"));
        }
        if let Some(b) = &self.bound {
            parts.push(format!("bound {b}"));
        }
        parts.retain(|p| !p.is_empty());
        parts.join(" | ")
    }
}

/// `m:ss` (or `h:mm:ss`) of a duration.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 3600 {
        format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
    } else {
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// The time part of the status line: `[#####.....] 1:23 left of 5:00` for a time limit,
/// nothing without one.
pub fn time_bar(elapsed: Duration, limit: Option<Duration>) -> String {
    let Some(limit) = limit.filter(|l| !l.is_zero()) else {
        return String::new();
    };
    const WIDTH: usize = 20;
    let used = (elapsed.as_secs_f64() / limit.as_secs_f64()).clamp(0.0, 1.0);
    let full = (used * WIDTH as f64).round() as usize;
    format!(
        "[{}{}] {} left of {}",
        "#".repeat(full),
        ".".repeat(WIDTH - full),
        clock(limit.saturating_sub(elapsed)),
        clock(Duration::from_secs_f64(limit.as_secs_f64().round()))
    )
}

/// A lazily shown status line (hidden for work under a second, when disabled, and when stderr
/// is not a terminal).
pub struct Progress {
    bar: Option<ProgressBar>,
    state: Mutex<Status>,
    deadline: Arc<Mutex<Option<Instant>>>,
    /// When `SYNTH_TRACE` is set: the start, to print every phase with its time on stderr
    /// (where the time of a long run goes, without a profiler).
    trace: Option<Instant>,
}

impl Progress {
    /// A status line on stderr if `enabled` (and stderr is a terminal).
    pub fn new(enabled: bool) -> Progress {
        let start = Instant::now();
        let deadline: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
        let bar = enabled.then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden());
            let limit = deadline.clone();
            let style = ProgressStyle::with_template("{spinner} [{elapsed}] {time} {msg}")
                .expect("valid template")
                .with_key(
                    "time",
                    move |_: &ProgressState, w: &mut dyn std::fmt::Write| {
                        let limit = limit
                            .lock()
                            .unwrap()
                            .map(|d| d.saturating_duration_since(start));
                        let _ = w.write_str(&time_bar(start.elapsed(), limit));
                    },
                );
            bar.set_style(style);
            // The line appears after a second even when nothing updates it (one long solve).
            let shown = bar.clone();
            std::thread::spawn(move || {
                while start.elapsed() < Duration::from_secs(1) {
                    if shown.is_finished() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                if !shown.is_finished() {
                    shown.set_draw_target(ProgressDrawTarget::stderr());
                    shown.enable_steady_tick(Duration::from_millis(120));
                }
            });
            bar
        });
        Progress {
            bar,
            state: Mutex::new(Status::default()),
            deadline,
            trace: (enabled && std::env::var_os("SYNTH_TRACE").is_some()).then_some(start),
        }
    }

    /// A status line that never shows (its state is still kept).
    pub fn hidden() -> Progress {
        Progress::new(false)
    }

    /// Sets the time limit the bar counts down to.
    pub fn deadline(&self, deadline: Instant) {
        *self.deadline.lock().unwrap() = Some(deadline);
    }

    /// Updates the phase; shows the line once the work has run for a second. With
    /// `SYNTH_TRACE` set, also prints the phase and the seconds since the start on stderr.
    pub fn message(&self, text: &str) {
        if let Some(start) = self.trace {
            eprintln!("[{:8.2} s] {text}", start.elapsed().as_secs_f64());
        }
        self.update(|s| s.phase = text.to_string());
    }

    /// Records the best result so far.
    pub fn best(&self, text: &str) {
        self.update(|s| s.best = Some(text.to_string()));
    }

    /// Records an algorithm as the best so far: `(S, R, C) R/C x`.
    pub fn found(&self, a: &crate::algorithm::Algorithm) {
        self.best(&format!(
            "({}, {}, {}) R/C {}",
            a.num_steps(),
            a.rounds(),
            a.chunks(),
            a.rounds_per_chunk()
        ));
    }

    /// Records the lower bound.
    pub fn bound(&self, text: &str) {
        self.update(|s| s.bound = Some(text.to_string()));
    }

    /// The phase, best and bound shown now.
    pub fn snapshot(&self) -> Status {
        self.state.lock().unwrap().clone()
    }

    fn update(&self, change: impl FnOnce(&mut Status)) {
        let mut state = self.state.lock().unwrap();
        change(&mut state);
        if let Some(bar) = &self.bar {
            bar.set_message(state.line());
        }
    }

    /// Removes the line.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    /// An error that returns early still clears the line.
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_shows_phase_best_bound_and_time_left() {
        let p = Progress::hidden();
        p.message("solving steps=3 rounds=7 chunks=6");
        p.best("(2, 3, 2) R/C 3/2");
        p.bound("2 steps, R/C >= 7/6");
        assert_eq!(
            p.snapshot().line(),
            "solving steps=3 rounds=7 chunks=6 | best (2, 3, 2) R/C 3/2 | bound 2 steps, R/C >= 7/6"
        );
        let bar = time_bar(Duration::from_secs(75), Some(Duration::from_secs(300)));
        assert_eq!(bar, "[#####...............] 3:45 left of 5:00");
        assert_eq!(
            time_bar(Duration::from_secs(400), Some(Duration::from_secs(300))),
            "[####################] 0:00 left of 5:00"
        );
        assert_eq!(time_bar(Duration::from_secs(1), None), "");
    }
}
