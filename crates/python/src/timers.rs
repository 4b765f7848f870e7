//! Where the host time of the Python layer's calls goes (`bench_host.py --phases`): the
//! library's own phases (`detkit::phases`, the door) and this layer's parts around it, per
//! calling thread, summed until read. Off by default (one relaxed load per part).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use pyo3::prelude::*;

static ON: AtomicBool = AtomicBool::new(false);

/// A part of a call made by this layer.
#[derive(Clone, Copy)]
pub enum Part {
    /// The library call (the door), from Rust.
    Door = 0,
    /// Laying the library's results out into the arrays returned (seeding).
    Fill,
    /// Making the numpy arrays (views) of the results.
    Views,
}

const NAMES: [&str; 3] = ["layer:door", "layer:fill", "layer:views"];

thread_local! {
    static TOTALS: Cell<[u64; 3]> = const { Cell::new([0; 3]) };
}

/// `f`, its wall time added to `part` when the timers are on.
pub fn time<R>(part: Part, f: impl FnOnce() -> R) -> R {
    if !ON.load(Ordering::Relaxed) {
        return f();
    }
    let t0 = Instant::now();
    let r = f();
    let ns = t0.elapsed().as_nanos() as u64;
    TOTALS.with(|t| {
        let mut v = t.get();
        v[part as usize] += ns;
        t.set(v);
    });
    r
}

/// A part timed until the guard is dropped (for code with early returns).
pub struct Guard {
    part: Part,
    t0: Option<Instant>,
}

impl Guard {
    /// Times [`Part::Views`].
    pub fn start() -> Self {
        Self::start_as(Part::Views)
    }

    /// Times `part`.
    pub fn start_as(part: Part) -> Self {
        let t0 = ON.load(Ordering::Relaxed).then(Instant::now);
        Self { part, t0 }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(t0) = self.t0 {
            let ns = t0.elapsed().as_nanos() as u64;
            TOTALS.with(|t| {
                let mut v = t.get();
                v[self.part as usize] += ns;
                t.set(v);
            });
        }
    }
}

/// Turns the timers on or off (`sync`: the library's synchronising mode, see
/// `detkit::phases`).
#[pyfunction]
#[pyo3(signature = (on, sync = false))]
pub fn _timers(on: bool, sync: bool) {
    ON.store(on, Ordering::Relaxed);
    detkit::phases::enable(on, sync);
}

/// The calling thread's seconds per phase since the last read (the library's phases by
/// their names, this layer's as `layer:…`), cleared.
#[pyfunction]
pub fn _timers_take() -> Vec<(String, f64)> {
    let door = detkit::phases::take();
    let mine = TOTALS.with(|t| t.replace([0; 3]));
    detkit::phases::NAMES
        .iter()
        .zip(door)
        .map(|(n, d)| (n.to_string(), d.as_secs_f64()))
        .chain(
            NAMES
                .iter()
                .zip(mine)
                .map(|(n, ns)| (n.to_string(), ns as f64 * 1e-9)),
        )
        .collect()
}
