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
    /// CPU time of the whole process (all threads) during the step, user and system,
    /// seconds: (user + sys) / (wall × threads) is the share of the pool's time spent on a
    /// CPU (below the busy share: workers waiting for a CPU, e.g. taken by other work).
    pub user_s: f64,
    /// See `user_s`.
    pub sys_s: f64,
    /// Involuntary context switches of the process during the step (workers preempted).
    pub preempted: u64,
    /// Summed wall time of the step's tasks on all workers, seconds (0: not a parallel
    /// step, or its tasks are not timed).
    pub busy_s: f64,
}

struct Entry {
    name: &'static str,
    calls: u64,
    ns: u64,
    usage: Usage,
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
            faults: e.usage.faults,
            user_s: e.usage.user_ns as f64 * 1e-9,
            sys_s: e.usage.sys_ns as f64 * 1e-9,
            preempted: e.usage.preempted,
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
    Usage::now().faults
}

/// The process's resource use so far (zeros where unknown).
#[derive(Clone, Copy, Debug, Default)]
struct Usage {
    faults: u64,
    user_ns: u64,
    sys_ns: u64,
    preempted: u64,
}

impl Usage {
    fn now() -> Self {
        #[cfg(target_os = "linux")]
        {
            let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
            // SAFETY: `u` is a valid, writable `rusage`; getrusage only writes it.
            let r = unsafe { libc::getrusage(libc::RUSAGE_SELF, u.as_mut_ptr()) };
            if r == 0 {
                // SAFETY: getrusage succeeded, so it filled `u` (and zeroed is a valid
                // rusage anyway).
                let u = unsafe { u.assume_init() };
                let ns =
                    |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
                return Usage {
                    faults: u.ru_minflt as u64,
                    user_ns: ns(u.ru_utime),
                    sys_ns: ns(u.ru_stime),
                    preempted: u.ru_nivcsw as u64,
                };
            }
        }
        Usage::default()
    }

    /// `self - before`, field by field.
    fn since(self, before: Usage) -> Usage {
        Usage {
            faults: self.faults.saturating_sub(before.faults),
            user_ns: self.user_ns.saturating_sub(before.user_ns),
            sys_ns: self.sys_ns.saturating_sub(before.sys_ns),
            preempted: self.preempted.saturating_sub(before.preempted),
        }
    }

    fn add(&mut self, o: Usage) {
        self.faults += o.faults;
        self.user_ns += o.user_ns;
        self.sys_ns += o.sys_ns;
        self.preempted += o.preempted;
    }
}

/// Marks the steps of one call on the calling thread.
pub(crate) struct Timer {
    last: Option<(Instant, Usage)>,
}

impl Timer {
    /// Starts timing (nothing when the timers are off).
    pub(crate) fn start() -> Self {
        Self {
            last: enabled().then(|| (Instant::now(), Usage::now())),
        }
    }

    /// Adds the time and faults since the last mark (or the start) to step `name`.
    pub(crate) fn mark(&mut self, name: &'static str) {
        let Some((t0, u0)) = self.last else {
            return;
        };
        let (now, u) = (Instant::now(), Usage::now());
        self.last = Some((now, u));
        let ns = now.duration_since(t0).as_nanos() as u64;
        let d = u.since(u0);
        let mut t = TABLE.lock().unwrap_or_else(|e| e.into_inner());
        match t.iter_mut().find(|e| e.name == name) {
            Some(e) => {
                e.calls += 1;
                e.ns += ns;
                e.usage.add(d);
            }
            None => t.push(Entry {
                name,
                calls: 1,
                ns,
                usage: d,
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
