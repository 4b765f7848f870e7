//! Host-side timers of the device-array calls (issue 27's profile): wall time per named step
//! of `_detkit.device_cluster`, `device_seed_events`, … and the library's phases
//! ([`detkit::phases`]) inside them, for `bench_host.py --profile`. Off by default: a step
//! then costs one relaxed atomic load.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use pyo3::prelude::*;

static ON: AtomicBool = AtomicBool::new(false);

thread_local! {
    static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
    /// (step, total ns, count), in first-seen order.
    static STEPS: RefCell<Vec<(&'static str, u64, u64)>> = const { RefCell::new(Vec::new()) };
}

/// Starts a call's timing on this thread.
pub fn begin() {
    if ON.load(Ordering::Relaxed) {
        LAST.with(|l| l.set(Some(Instant::now())));
    }
}

/// Adds the wall time since the last step (or [`begin`]) to `name`.
pub fn step(name: &'static str) {
    if !ON.load(Ordering::Relaxed) {
        return;
    }
    let now = Instant::now();
    let Some(t0) = LAST.with(|l| l.replace(Some(now))) else {
        return;
    };
    let ns = now.duration_since(t0).as_nanos() as u64;
    STEPS.with(|s| {
        let mut s = s.borrow_mut();
        match s.iter_mut().find(|(n, _, _)| *n == name) {
            Some(e) => {
                e.1 += ns;
                e.2 += 1;
            }
            None => s.push((name, ns, 1)),
        }
    });
}

/// `device_profile(on)`: turns the timers on or off (`None`: leaves them) and returns what
/// this thread measured since the last call, cleared: `[(step, total µs, count)]`, the
/// library's phases as `lib:<phase>` (count 0).
#[pyfunction]
#[pyo3(signature = (on = None))]
pub fn device_profile(on: Option<bool>) -> Vec<(String, f64, u64)> {
    let mut out: Vec<(String, f64, u64)> = STEPS.with(|s| {
        s.borrow_mut()
            .drain(..)
            .map(|(n, ns, c)| (n.to_string(), ns as f64 / 1e3, c))
            .collect()
    });
    for (name, d) in detkit::phases::NAMES.iter().zip(detkit::phases::take()) {
        if !d.is_zero() {
            out.push((format!("lib:{name}"), d.as_nanos() as f64 / 1e3, 0));
        }
    }
    if let Some(on) = on {
        ON.store(on, Ordering::Relaxed);
        detkit::phases::enable(on, false);
    }
    out
}
