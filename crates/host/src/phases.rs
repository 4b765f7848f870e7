//! Where the host time of a [`crate::Backend`] call goes: wall time by phase, for
//! `bench-host --phases` (nsys is not available on every machine that runs the benchmark).
//!
//! Off by default; a door then pays one relaxed atomic load per mark. When on, every mark
//! adds the wall time since the previous mark of the calling thread to its phase, in a
//! thread-local table that [`take`] reads and clears. In *synchronising* mode the marks
//! after GPU work ([`Phase::Upload`], [`Phase::Kernels`]) first wait for the stream, so the
//! time of the DMA and of the kernels is attributed to them rather than to the final wait;
//! the overlap of copies and kernels is then lost, so the sum is larger than the call.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use crate::cuda::GpuContext;

/// A phase of a host call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Argument checks, workspace and plan look-up, growing buffers.
    Prepare = 0,
    /// Validation of the input, with its copy into pinned staging where the two are fused.
    Validate,
    /// Host copies into pinned staging (not fused with validation) and issuing the DMA.
    Stage,
    /// The upload DMA (synchronising mode only; else it overlaps and lands in `Wait`).
    Upload,
    /// Launching the kernels or the graph (synchronising mode: and running them).
    Kernels,
    /// Waiting for the stream: the DMA back and whatever of the above was still running.
    Wait,
    /// Host copies out of pinned staging into the caller's buffers.
    CopyOut,
    /// Turning results into the caller's types (splitting by event, status words).
    Unpack,
}

/// Number of phases.
pub const COUNT: usize = 8;

/// The phases' names, in the order of their values.
pub const NAMES: [&str; COUNT] = [
    "prepare", "validate", "stage", "upload", "kernels", "wait", "copy-out", "unpack",
];

/// 0: off, 1: on, 2: on and synchronising.
static MODE: AtomicU8 = AtomicU8::new(0);

/// Whether the marks also keep a timeline ([`trace`]).
static TRACE: AtomicBool = AtomicBool::new(false);

thread_local! {
    static TOTALS: Cell<[u64; COUNT]> = const { Cell::new([0; COUNT]) };
    static LAST: Cell<Option<Instant>> = const { Cell::new(None) };
    /// The timeline: each mark's phase, start and end.
    static STEPS: RefCell<Vec<(Phase, Instant, Instant)>> = const { RefCell::new(Vec::new()) };
}

/// While the timers are on ([`enable`]), also keep every mark of the calling thread in order
/// (its phase, start and end) for [`take_trace`]: the timeline of a call.
pub fn trace(on: bool) {
    TRACE.store(on, Ordering::Relaxed);
}

/// The calling thread's marks since the last `take_trace` (see [`trace`]), cleared: phase
/// name, start and length, the starts counted from the first mark's start.
pub fn take_trace() -> Vec<(&'static str, Duration, Duration)> {
    let steps = STEPS.with(|s| std::mem::take(&mut *s.borrow_mut()));
    let origin = steps.first().map(|s| s.1);
    steps
        .into_iter()
        .map(|(p, t0, t1)| {
            (
                NAMES[p as usize],
                t0.duration_since(origin.unwrap_or(t0)),
                t1.duration_since(t0),
            )
        })
        .collect()
}

/// Turns the timers on or off for every thread; `sync`: the synchronising mode.
pub fn enable(on: bool, sync: bool) {
    MODE.store(
        match (on, sync) {
            (false, _) => 0,
            (true, false) => 1,
            (true, true) => 2,
        },
        Ordering::Relaxed,
    );
}

/// The measuring variant of the doors (`bench-host --variants`): 0, the default, is the
/// library's own path.
static VARIANT: AtomicU32 = AtomicU32::new(0);

/// Selects a measuring variant of the doors (`bench-host --variants N`,
/// `bench_host.py --variants`): a hook for A/B runs of an alternative path inside one
/// process. No variant is defined now (the earlier ones were removed in session 12 once
/// measured, see docs/benchmarks.md, "Measuring variants removed"): every value runs the
/// library's path. To measure an alternative, branch on [`variant`] at its site for one
/// experiment, record the result in docs/benchmarks.md, and remove the branch and its
/// losing side once measured. Results must be the same in every variant; only their speed
/// may differ.
#[doc(hidden)]
pub fn set_variant(v: u32) {
    VARIANT.store(v, Ordering::Relaxed);
}

/// The variant set by [`set_variant`] (0 unless a benchmark set one); see there.
#[doc(hidden)]
pub fn variant() -> u32 {
    VARIANT.load(Ordering::Relaxed)
}

fn mode() -> u8 {
    MODE.load(Ordering::Relaxed)
}

/// The calling thread's totals per phase since the last `take`, cleared.
pub fn take() -> [Duration; COUNT] {
    TOTALS.with(|t| t.replace([0; COUNT]).map(Duration::from_nanos))
}

/// Starts a call's timing on this thread.
pub(crate) fn begin() {
    if mode() != 0 {
        LAST.with(|l| l.set(Some(Instant::now())));
    }
}

/// Adds the time since the last mark (or `begin`) to `phase`.
pub(crate) fn mark(phase: Phase) {
    if mode() == 0 {
        return;
    }
    let now = Instant::now();
    if let Some(t0) = LAST.with(|l| l.replace(Some(now))) {
        let ns = now.duration_since(t0).as_nanos() as u64;
        TOTALS.with(|t| {
            let mut v = t.get();
            v[phase as usize] += ns;
            t.set(v);
        });
        if TRACE.load(Ordering::Relaxed) {
            STEPS.with(|s| s.borrow_mut().push((phase, t0, now)));
        }
    }
}

/// [`mark`] after GPU work issued on `gpu`'s stream: in synchronising mode the stream is
/// waited for first (an error there shows up again at the call's own wait).
pub(crate) fn mark_gpu(phase: Phase, gpu: &GpuContext) {
    match mode() {
        0 => {}
        1 => mark(phase),
        _ => {
            let _ = gpu.synchronize();
            mark(phase);
        }
    }
}

/// What [`stamp`] recorded: `(wall time, thread, label, part)`, across threads.
static TIMELINE: std::sync::Mutex<Vec<(Instant, std::thread::ThreadId, &'static str, usize)>> =
    std::sync::Mutex::new(Vec::new());

/// Records that `label` happened now for `part` of a call (while the timers are on): the
/// timeline of a pipelined call's parts on their threads ([`take_timeline`]).
pub(crate) fn stamp(label: &'static str, part: usize) {
    if mode() == 0 {
        return;
    }
    let now = Instant::now();
    let id = std::thread::current().id();
    TIMELINE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((now, id, label, part));
}

/// The stamps since the last call, cleared: `(ms since the first stamp, thread number in
/// order of first appearance, label, part)`.
pub fn take_timeline() -> Vec<(f64, usize, &'static str, usize)> {
    let v = std::mem::take(&mut *TIMELINE.lock().unwrap_or_else(|e| e.into_inner()));
    let Some(t0) = v.iter().map(|x| x.0).min() else {
        return Vec::new();
    };
    let mut threads = Vec::new();
    v.into_iter()
        .map(|(t, id, label, part)| {
            let k = threads.iter().position(|&x| x == id).unwrap_or_else(|| {
                threads.push(id);
                threads.len() - 1
            });
            (t.duration_since(t0).as_secs_f64() * 1e3, k, label, part)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Marks add to their phase only while the timers are on; `take` clears.
    #[test]
    fn marks_add_up_only_when_on() {
        enable(true, false);
        take();
        begin();
        std::thread::sleep(Duration::from_millis(2));
        mark(Phase::Validate);
        mark(Phase::Wait);
        let t = take();
        assert!(t[Phase::Validate as usize] >= Duration::from_millis(2));
        assert!(t[Phase::Wait as usize] < Duration::from_millis(2));
        assert!(take().iter().all(|d| d.is_zero()));
        enable(false, false);
        begin();
        mark(Phase::Validate);
        assert!(take().iter().all(|d| d.is_zero()));
    }
}
