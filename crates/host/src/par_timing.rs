//! Where the CPU backend's time goes: wall time and page faults by step of the fast paths
//! (`<family>/par.rs`), and the time the workers spend inside the parallel steps' tasks, for
//! `bench-cpu --phases` (the 16-core host has no `perf`).
//!
//! Off by default: a step then pays one relaxed atomic load per mark. When on, the thread
//! that runs a call marks the end of each step ([`Timer::mark`]: the wall time and the
//! process's minor page faults since the previous mark, added to the step's entry), and the
//! tasks of a parallel step add their own wall time to its *busy* total ([`busy`]); busy /
//! (wall × threads) is then the share of the pool's time the step kept its workers at work
//! (low: idle workers, i.e. imbalance or a serial tail; high with a slow step: the tasks
//! themselves are slower on many cores, i.e. contention for memory, faults or the allocator).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

static ON: AtomicBool = AtomicBool::new(false);

/// One step's totals since the last [`take`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Step {
    /// The step's name (`family: step`).
    pub name: &'static str,
    /// Times the step ran.
    pub calls: u64,
    /// Wall time, seconds.
    pub wall_s: f64,
    /// Minor page faults of the whole process during the step.
    pub faults: u64,
    /// Summed wall time of the step's tasks on all workers, seconds (0: not a parallel
    /// step, or its tasks are not timed).
    pub busy_s: f64,
}

struct Entry {
    name: &'static str,
    calls: u64,
    ns: u64,
    faults: u64,
}

static TABLE: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// The parallel steps whose tasks are timed ([`busy`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Busy {
    ClusterRuns = 0,
    ClusterModules,
    ConvertPieces,
    ConvertGather,
    CoincideWalks,
    CoincideFill,
}

const BUSY: usize = 6;
/// The step of [`TABLE`] each [`Busy`] belongs to.
const BUSY_STEP: [&str; BUSY] = [
    "clustering: runs",
    "clustering: modules",
    "convert: pieces",
    "convert: gather",
    "coincide: walks",
    "coincide: fill",
];
static BUSY_NS: [AtomicU64; BUSY] = [const { AtomicU64::new(0) }; BUSY];

/// Turns the timers on or off (for every thread).
pub fn enable(on: bool) {
    ON.store(on, Ordering::Relaxed);
}

/// Whether the timers are on.
pub fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The steps' totals since the last `take` (in the order they first ran), cleared.
pub fn take() -> Vec<Step> {
    let mut t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
    let mut out: Vec<Step> = t
        .drain(..)
        .map(|e| Step {
            name: e.name,
            calls: e.calls,
            wall_s: e.ns as f64 * 1e-9,
            faults: e.faults,
            busy_s: 0.0,
        })
        .collect();
    for (i, b) in BUSY_NS.iter().enumerate() {
        let ns = b.swap(0, Ordering::Relaxed);
        if let Some(s) = out.iter_mut().find(|s| s.name == BUSY_STEP[i]) {
            s.busy_s = ns as f64 * 1e-9;
        }
    }
    out
}

/// The process's minor page faults so far (0 where unknown).
pub fn minor_faults() -> u64 {
    #[cfg(target_os = "linux")]
    {
        let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: `u` is a valid, writable `rusage`; getrusage only writes it.
        let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()) };
        if r == 0 {
            // SAFETY: getrusage succeeded, so it filled `u` (and zeroed is a valid rusage).
            return unsafe { u.assume_init() }.ru_minflt as u64;
        }
        0
    }
    #[cfg(not(target_os = "linux"))]
    0
}

/// Marks the steps of one call on the calling thread.
pub(crate) struct Timer {
    last: Option<(Instant, u64)>,
}

impl Timer {
    /// Starts timing (nothing when the timers are off).
    pub(crate) fn start() -> Self {
        Self {
            last: enabled().then(|| (Instant::now(), minor_faults())),
        }
    }

    /// Adds the time and faults since the last mark (or the start) to step `name`.
    pub(crate) fn mark(&mut self, name: &'static str) {
        let Some((t0, f0)) = self.last else {
            return;
        };
        let (now, f) = (Instant::now(), minor_faults());
        self.last = Some((now, f));
        let ns = now.duration_since(t0).as_nanos() as u64;
        let mut t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
        match t.iter_mut().find(|e| e.name == name) {
            Some(e) => {
                e.calls += 1;
                e.ns += ns;
                e.faults += f.saturating_sub(f0);
            }
            None => t.push(Entry {
                name,
                calls: 1,
                ns,
                faults: f.saturating_sub(f0),
            }),
        }
    }
}

/// Runs a task of a parallel step, adding its wall time to the step's busy total when the
/// timers are on.
#[inline]
pub(crate) fn busy<R>(step: Busy, f: impl FnOnce() -> R) -> R {
    if !enabled() {
        return f();
    }
    let t0 = Instant::now();
    let r = f();
    BUSY_NS[step as usize].fetch_add(t0.elapsed().as_nanos() as u64, Ordering::Relaxed);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Marks and busy time are recorded only while on; `take` clears. (One test, and a
    /// step name of its own: the table is global and other tests may run par code.)
    #[test]
    fn steps_add_up_only_when_on() {
        const NAME: &str = "par_timing test";
        let busy_ns = || BUSY_NS[Busy::CoincideFill as usize].load(Ordering::Relaxed);
        enable(false);
        let mut t = Timer::start();
        t.mark(NAME);
        let b0 = busy_ns();
        busy(Busy::CoincideFill, || {
            std::thread::sleep(std::time::Duration::from_millis(2))
        });
        assert_eq!(busy_ns(), b0);
        assert!(take().iter().all(|s| s.name != NAME));
        enable(true);
        let mut t = Timer::start();
        let b0 = busy_ns();
        busy(Busy::CoincideFill, || {
            std::thread::sleep(std::time::Duration::from_millis(2))
        });
        assert!(busy_ns() >= b0 + 2_000_000);
        t.mark(NAME);
        t.mark(NAME);
        let v = take();
        enable(false);
        let s = v.iter().find(|s| s.name == NAME).expect("the step");
        assert_eq!(s.calls, 2);
        assert!(s.wall_s >= 0.002, "{v:?}");
        assert!(take().iter().all(|s| s.name != NAME));
    }
}
