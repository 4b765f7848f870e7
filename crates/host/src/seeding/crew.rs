//! A crew of helper threads for the seeding door's short host copies (about 1 MB each way
//! for one ⟨μ⟩ = 200 event), that the calling thread never waits for.
//!
//! A rayon scope (`in_place_scope`, `par_iter`) returns only after every job it spawned has
//! run, so a copy of ~0.1 ms pays for the pool's wake-up twice: the jobs wait for sleeping
//! threads, and the calling thread, done with its own share, sleeps on the scope's latch
//! until the last job has run and wakes it (see docs/benchmarks.md, section "sdoor").
//! A [`Crew`] instead posts the parts of one copy to helpers spawned on rayon's pool: the
//! calling thread starts on the parts at once, helpers take parts as they arrive (each
//! arriving helper calls two more, so the caller pays for one wake-up), and once every part
//! has been handed out the caller waits only for the parts helpers are still copying (a
//! few µs), never for a helper to wake. A helper that arrives after that finds the crew
//! closed and leaves without touching the work. [`Crew::wake`] calls the helpers before the
//! work exists (while the GPU finishes), so that they are awake when the copy starts.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One part of the work: `false` stops the handing out of parts.
type Work = dyn Fn(usize) -> bool + Sync;

/// The state the caller and the helpers share (helpers hold it past the call).
struct Shared {
    /// The work, written once before `posted` is set (its lifetime erased: it is called
    /// only by helpers that entered before `closed`, and the caller waits for them).
    work: UnsafeCell<Option<*const Work>>,
    /// Number of parts (written before `posted`).
    n: AtomicUsize,
    /// The next part to hand out.
    next: AtomicUsize,
    posted: AtomicBool,
    closed: AtomicBool,
    stop: AtomicBool,
    /// Helpers working on the posted work now.
    active: AtomicUsize,
    /// Helpers called so far (at most `max`).
    called: AtomicUsize,
    max: usize,
    /// Until when (ns after `base`) a woken helper waits for work to be posted.
    deadline_ns: AtomicU64,
    base: Instant,
    /// Parts done by helpers; when the first helper started on the work (ns after `base`,
    /// `u64::MAX`: none did).
    by_helpers: AtomicUsize,
    /// Helpers that entered the work.
    entered: AtomicUsize,
    first_in_ns: AtomicU64,
    /// Stamped on the call's timeline when the first helper starts (`phases::stamp`).
    label: &'static str,
    part: usize,
}

// SAFETY: `work` is written by the caller before `posted` is released and only read after
// `posted` is acquired; the pointee is `Sync` and is only called while the caller keeps it
// alive (see `Crew::run`). Every other field is atomic or immutable.
unsafe impl Sync for Shared {}
// SAFETY: as above: helpers on other threads only read `work` under that protocol.
unsafe impl Send for Shared {}

impl Shared {
    /// The next part, while any is left and no part stopped the work.
    fn claim(&self) -> Option<usize> {
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        let k = self.next.fetch_add(1, Ordering::Relaxed);
        (k < self.n.load(Ordering::Relaxed)).then_some(k)
    }

    /// Calls up to `k` more helpers on rayon's pool (none once `max` were called).
    fn call(self: &Arc<Self>, k: usize) {
        for _ in 0..k {
            if self.called.fetch_add(1, Ordering::Relaxed) >= self.max {
                return;
            }
            let sh = Arc::clone(self);
            rayon::spawn(move || helper(sh));
        }
    }
}

/// A helper: calls two more, waits (yielding) for the work until the deadline, then takes
/// parts until none is left.
fn helper(sh: Arc<Shared>) {
    if sh.closed.load(Ordering::Acquire) {
        return;
    }
    sh.call(2);
    loop {
        if sh.closed.load(Ordering::Acquire) {
            return;
        }
        if sh.posted.load(Ordering::Acquire) {
            break;
        }
        if sh.base.elapsed().as_nanos() as u64 >= sh.deadline_ns.load(Ordering::Relaxed) {
            return;
        }
        std::thread::yield_now();
    }
    // Entering: `active` first, then `closed` (both sequentially consistent, as the caller
    // stores `closed` then loads `active`): either the caller sees this helper and waits
    // for it, or this helper sees the crew closed and leaves.
    sh.active.fetch_add(1, Ordering::SeqCst);
    if sh.closed.load(Ordering::SeqCst) {
        sh.active.fetch_sub(1, Ordering::Release);
        return;
    }
    sh.entered.fetch_add(1, Ordering::Relaxed);
    let now = sh.base.elapsed().as_nanos() as u64;
    if sh
        .first_in_ns
        .compare_exchange(u64::MAX, now, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
    {
        crate::phases::stamp(sh.label, sh.part);
    }
    // SAFETY: `posted` was acquired above, so `work` is written; the crew was not closed
    // when this helper entered, so the caller waits (`Crew::run`) until `active` drops
    // back before the work's borrow ends.
    let work = unsafe { &*(*sh.work.get()).expect("posted work") };
    let mut done = 0;
    while let Some(k) = sh.claim() {
        if !work(k) {
            sh.stop.store(true, Ordering::Relaxed);
        }
        done += 1;
    }
    sh.by_helpers.fetch_add(done, Ordering::Relaxed);
    sh.active.fetch_sub(1, Ordering::Release);
}

/// What a [`Crew::run`] did: its parts, those done by helpers, and when the first helper
/// started after the crew was made (`None`: none did).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct CrewStats {
    pub(crate) parts: usize,
    pub(crate) by_helpers: usize,
    /// Helpers that took part.
    pub(crate) helpers: usize,
    pub(crate) first_in: Option<Duration>,
}

/// A timeline label for how many helpers took part in a crew's run (`what`: "up" or "out").
pub(crate) fn helpers_label(what: &'static str, st: CrewStats) -> &'static str {
    const UP: [&str; 17] = [
        "up: 0 helpers",
        "up: 1 helper",
        "up: 2 helpers",
        "up: 3 helpers",
        "up: 4 helpers",
        "up: 5 helpers",
        "up: 6 helpers",
        "up: 7 helpers",
        "up: 8 helpers",
        "up: 9 helpers",
        "up: 10 helpers",
        "up: 11 helpers",
        "up: 12 helpers",
        "up: 13 helpers",
        "up: 14 helpers",
        "up: 15 helpers",
        "up: > 15 helpers",
    ];
    const OUT: [&str; 17] = [
        "out: 0 helpers",
        "out: 1 helper",
        "out: 2 helpers",
        "out: 3 helpers",
        "out: 4 helpers",
        "out: 5 helpers",
        "out: 6 helpers",
        "out: 7 helpers",
        "out: 8 helpers",
        "out: 9 helpers",
        "out: 10 helpers",
        "out: 11 helpers",
        "out: 12 helpers",
        "out: 13 helpers",
        "out: 14 helpers",
        "out: 15 helpers",
        "out: > 15 helpers",
    ];
    let k = st.helpers.min(16);
    if what == "up" {
        UP[k]
    } else {
        OUT[k]
    }
}

/// A timeline label for a crew's run: `what` with the share of its parts that helpers took
/// (none, under a quarter, under half, under three quarters, more).
pub(crate) fn share_label(what: &'static str, st: CrewStats) -> &'static str {
    let q = if st.by_helpers == 0 {
        0
    } else {
        1 + (4 * st.by_helpers / st.parts.max(1)).min(3)
    };
    let labels: [&'static str; 5] = match what {
        "up: staged" => [
            "up: staged, helpers took none",
            "up: staged, helpers took < 1/4",
            "up: staged, helpers took 1/4-1/2",
            "up: staged, helpers took 1/2-3/4",
            "up: staged, helpers took > 3/4",
        ],
        _ => [
            "out: copied, helpers took none",
            "out: copied, helpers took < 1/4",
            "out: copied, helpers took 1/4-1/2",
            "out: copied, helpers took 1/2-3/4",
            "out: copied, helpers took > 3/4",
        ],
    };
    labels[q]
}

/// Helpers for one parallel copy (see the module's doc).
pub(crate) struct Crew {
    sh: Arc<Shared>,
    woken: bool,
}

impl Crew {
    /// A crew of at most `max` helpers (none called yet); `label` and `part` name the first
    /// helper's stamp on the call's timeline.
    pub(crate) fn new(max: usize, label: &'static str, part: usize) -> Self {
        Self {
            sh: Arc::new(Shared {
                work: UnsafeCell::new(None),
                n: AtomicUsize::new(0),
                next: AtomicUsize::new(0),
                posted: AtomicBool::new(false),
                closed: AtomicBool::new(false),
                stop: AtomicBool::new(false),
                active: AtomicUsize::new(0),
                called: AtomicUsize::new(0),
                max,
                deadline_ns: AtomicU64::new(0),
                base: Instant::now(),
                by_helpers: AtomicUsize::new(0),
                entered: AtomicUsize::new(0),
                first_in_ns: AtomicU64::new(u64::MAX),
                label,
                part,
            }),
            woken: false,
        }
    }

    /// The part of the call whose timeline the crew stamps.
    pub(crate) fn part(&self) -> usize {
        self.sh.part
    }

    /// A crew of at most [`max_helpers`] helpers.
    #[cfg(test)]
    pub(crate) fn default_size(label: &'static str, part: usize) -> Self {
        Self::new(max_helpers(), label, part)
    }

    /// Calls the helpers now, before the work is posted: they wait for it, yielding, for
    /// at most `wait` (then leave; a later [`Crew::run`] does not call them again).
    pub(crate) fn wake(&mut self, wait: Duration) {
        if self.woken {
            return;
        }
        self.woken = true;
        let deadline = self.sh.base.elapsed() + wait;
        self.sh
            .deadline_ns
            .store(deadline.as_nanos() as u64, Ordering::Relaxed);
        self.sh.call(FIRST_CALLS);
    }

    /// Runs `work(k)` for the parts `k = 0..n`, handed out in increasing order: the calling
    /// thread starts at once, helpers take parts as they arrive. Returns once every part
    /// handed out is done; a part for which `work` returns `false` stops the handing out.
    /// Helpers are called here unless [`Crew::wake`] called them and they still wait (none
    /// for one part).
    pub(crate) fn run(self, n: usize, work: &(dyn Fn(usize) -> bool + Sync)) -> CrewStats {
        let sh = &self.sh;
        // Closes the crew and waits for the helpers inside, also if `work` panics on
        // this thread (a helper must not call it after this frame is gone).
        struct Close<'a>(&'a Shared);
        impl Drop for Close<'_> {
            fn drop(&mut self) {
                self.0.closed.store(true, Ordering::SeqCst);
                // A helper inside finishes one part (a few µs) unless it was preempted:
                // spin, then yield.
                let mut spins = 0u32;
                while self.0.active.load(Ordering::SeqCst) != 0 {
                    if spins < 4096 {
                        spins += 1;
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
            }
        }
        let close = Close(sh);
        if n > 0 {
            // SAFETY: only the lifetime is erased (same fat pointer): the pointer is called
            // only by helpers that entered before `closed` was set, and `close` (dropped
            // before this function returns, also on unwinding) waits until none is left
            // inside; no helper enters after.
            let erased: *const Work = unsafe {
                std::mem::transmute::<*const (dyn Fn(usize) -> bool + Sync + '_), *const Work>(
                    work as *const _,
                )
            };
            // SAFETY: no helper reads `work` before `posted` is set below (release).
            unsafe { *sh.work.get() = Some(erased) };
            sh.n.store(n, Ordering::Relaxed);
            sh.posted.store(true, Ordering::Release);
            // Helpers are called here unless woken earlier and still waiting (those that
            // gave up are replaced).
            let gave_up = self.woken
                && sh.base.elapsed().as_nanos() as u64 >= sh.deadline_ns.load(Ordering::Relaxed);
            if gave_up {
                sh.called.store(0, Ordering::Relaxed);
            }
            if (!self.woken || gave_up) && n > 1 {
                sh.call(FIRST_CALLS);
            }
            while let Some(k) = sh.claim() {
                if !work(k) {
                    sh.stop.store(true, Ordering::Relaxed);
                }
            }
        }
        drop(close);
        let first = sh.first_in_ns.load(Ordering::Relaxed);
        CrewStats {
            parts: n,
            by_helpers: sh.by_helpers.load(Ordering::Relaxed),
            helpers: sh.entered.load(Ordering::Relaxed),
            first_in: (first != u64::MAX).then(|| Duration::from_nanos(first)),
        }
    }
}

impl Drop for Crew {
    /// Helpers still waiting for work (a crew woken, then dropped without a run) leave.
    fn drop(&mut self) {
        self.sh.closed.store(true, Ordering::SeqCst);
    }
}

/// Helpers the calling thread calls itself: two (each arriving helper calls two more, so
/// the caller pays for one wake-up).
const FIRST_CALLS: usize = 2;

/// Helpers per crew: rayon's threads but one (the caller works too), at most 15.
pub(crate) fn max_helpers() -> usize {
    rayon::current_num_threads().saturating_sub(1).min(15)
}

/// Parts of several segments (arrays, events) of `lens[i]` elements, at most `per`
/// elements a part, numbered over all segments in order: part `k` is `(segment, lo, hi)`.
pub(crate) struct Segments {
    /// First part of each segment, and the total at the end.
    first: Vec<usize>,
    lens: Vec<usize>,
    per: usize,
}

impl Segments {
    pub(crate) fn new(lens: impl IntoIterator<Item = usize>, per: usize) -> Self {
        let per = per.max(1);
        let lens: Vec<usize> = lens.into_iter().collect();
        let mut first = Vec::with_capacity(lens.len() + 1);
        let mut acc = 0;
        first.push(0);
        for &l in &lens {
            acc += l.div_ceil(per);
            first.push(acc);
        }
        Self { first, lens, per }
    }

    /// Number of parts.
    pub(crate) fn parts(&self) -> usize {
        *self.first.last().unwrap_or(&0)
    }

    /// Part `k`: its segment and its element range inside it.
    pub(crate) fn part(&self, k: usize) -> (usize, usize, usize) {
        let s = self.first.partition_point(|&f| f <= k) - 1;
        let lo = (k - self.first[s]) * self.per;
        (s, lo, (lo + self.per).min(self.lens[s]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// Every part runs exactly once, woken early or not, from outside the pool and inside
    /// it; a `false` stops the handing out (no part after the stopping one is started by
    /// the caller once it saw the stop).
    #[test]
    fn every_part_runs_once() {
        for n in [0usize, 1, 2, 7, 64, 1000] {
            for wake in [false, true] {
                let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
                let mut crew = Crew::default_size("test", 0);
                if wake {
                    crew.wake(Duration::from_millis(5));
                }
                let st = crew.run(n, &|k| {
                    hits[k].fetch_add(1, Ordering::Relaxed);
                    // a little work, so that helpers can arrive
                    std::hint::black_box((0..200).sum::<u64>());
                    true
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "{n}");
                assert!(st.by_helpers <= n);
                let mut inside = None;
                rayon::scope(|_| {
                    let hits: Vec<AtomicU32> = (0..n).map(|_| AtomicU32::new(0)).collect();
                    Crew::default_size("test", 0).run(n, &|k| {
                        hits[k].fetch_add(1, Ordering::Relaxed);
                        true
                    });
                    inside = Some(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
                });
                assert_eq!(inside, Some(true));
            }
        }
        let hits: Vec<AtomicU32> = (0..100).map(|_| AtomicU32::new(0)).collect();
        Crew::default_size("test", 0).run(100, &|k| {
            hits[k].fetch_add(1, Ordering::Relaxed);
            k != 10
        });
        assert_eq!(hits[10].load(Ordering::Relaxed), 1);
        assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) <= 1));
        let done = hits
            .iter()
            .filter(|h| h.load(Ordering::Relaxed) == 1)
            .count();
        assert!(done < 100, "the stop stopped nothing");
    }

    /// The share label follows the helpers' share of the parts.
    #[test]
    fn share_labels_by_quarter() {
        let st = |parts, by_helpers| CrewStats {
            parts,
            by_helpers,
            helpers: by_helpers,
            first_in: None,
        };
        assert_eq!(helpers_label("up", st(25, 3)), "up: 3 helpers");
        assert_eq!(helpers_label("out", st(25, 1)), "out: 1 helper");
        assert_eq!(helpers_label("out", st(40, 30)), "out: > 15 helpers");
        assert_eq!(
            share_label("up: staged", st(25, 0)),
            "up: staged, helpers took none"
        );
        assert_eq!(
            share_label("up: staged", st(25, 1)),
            "up: staged, helpers took < 1/4"
        );
        assert_eq!(
            share_label("out: copied", st(8, 4)),
            "out: copied, helpers took 1/2-3/4"
        );
        assert_eq!(
            share_label("out: copied", st(8, 8)),
            "out: copied, helpers took > 3/4"
        );
        assert_eq!(
            share_label("up: staged", st(0, 0)),
            "up: staged, helpers took none"
        );
    }

    /// Parts cover each segment in order, none longer than `per`, empty segments none.
    #[test]
    fn segments_cover_in_order() {
        let s = Segments::new([5usize, 0, 12, 4], 4);
        let got: Vec<_> = (0..s.parts()).map(|k| s.part(k)).collect();
        assert_eq!(
            got,
            vec![
                (0, 0, 4),
                (0, 4, 5),
                (2, 0, 4),
                (2, 4, 8),
                (2, 8, 12),
                (3, 0, 4)
            ]
        );
        assert_eq!(Segments::new([], 4).parts(), 0);
    }
}
