//! Racing solves of one instance on several threads: the first decisive answer ends the
//! race and interrupts every solve still running.
//!
//! Each solve runs in its own z3 context (created for it and dropped after it), registered
//! here only while its `check` runs, so an interrupt can only ever reach a context that is
//! alive and solving this race, never a later solve on the same thread.

use std::sync::Mutex;

/// Shared state of one race.
#[derive(Default)]
pub struct Race {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    finished: bool,
    /// Raw z3 contexts currently inside `check`, as addresses.
    running: Vec<usize>,
}

impl Race {
    /// A race nobody has won yet.
    pub fn new() -> Race {
        Race::default()
    }

    /// Whether some solve has already ended the race.
    pub fn is_finished(&self) -> bool {
        self.state.lock().unwrap().finished
    }

    /// Runs `check` (a solve in the current thread's z3 context) so that [`Race::finish`]
    /// can interrupt it. Returns `None` without running it when the race is already over.
    pub fn guarded<R>(&self, check: impl FnOnce() -> R) -> Option<R> {
        let context = z3::Context::thread_local().get_z3_context().as_ptr() as usize;
        {
            let mut state = self.state.lock().unwrap();
            if state.finished {
                return None;
            }
            state.running.push(context);
        }
        let result = check();
        let mut state = self.state.lock().unwrap();
        if let Some(i) = state.running.iter().position(|&c| c == context) {
            state.running.swap_remove(i);
        }
        Some(result)
    }

    /// Ends the race and interrupts every solve still inside `check`.
    pub fn finish(&self) {
        let mut state = self.state.lock().unwrap();
        state.finished = true;
        for &context in &state.running {
            // SAFETY: a context is listed only while its owner is inside `guarded`, which
            // removes it (under this same lock) before returning, and the owner keeps the
            // context alive for at least that long. Z3_interrupt is z3's thread-safe way to
            // stop a running check from another thread.
            if let Some(ptr) = std::ptr::NonNull::new(context as *mut z3_sys::_Z3_context) {
                unsafe { z3_sys::Z3_interrupt(ptr) };
            }
        }
    }
}
