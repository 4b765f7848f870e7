//! The seeding workspace a [`crate::Backend`] keeps between calls: the device buffers of the
//! chain ([`SeedingWorkspace`]) and pinned staging, on a stream of its own.

use std::sync::{Arc, Condvar, Mutex};

use super::cuda::{Events, SeedStaging, SeedingWorkspace};
use super::{SeedingConfig, SeedingOutput};
use crate::cuda::GpuContext;
use crate::error::{invalid, DriverContext, Error, Result};
use crate::staging::HostCopies;

/// The seeding workspace of one stream.
pub(crate) struct SeedWorkspace {
    pub(crate) gpu: Arc<GpuContext>,
    pub(crate) ws: SeedingWorkspace,
    stage: SeedStaging,
    /// The device-view calls' column table, event offsets and status word.
    pub(crate) views: super::device_view::ViewBuffers,
}

impl SeedWorkspace {
    pub(crate) fn new(gpu: &GpuContext, plan: &super::SeedPlan) -> Result<Self> {
        Ok(Self {
            gpu: crate::workspace::fork(gpu)?,
            ws: SeedingWorkspace::with_plan(*plan),
            stage: SeedStaging::default(),
            views: Default::default(),
        })
    }

    /// Seeds events into `out` (spacepoint slices validated by the caller; columns checked
    /// as they are gathered).
    pub(crate) fn seed_events(
        &mut self,
        events: Events<'_>,
        cfg: &SeedingConfig,
        copies: HostCopies,
        out: &mut Vec<SeedingOutput>,
    ) -> Result<()> {
        let stage = match copies {
            HostCopies::Pinned => Some(&mut self.stage),
            HostCopies::Pageable => None,
        };
        self.gpu
            .seed_events_host(&mut self.ws, events, cfg, stage, out)
    }
}

/// The order of the host copies of a pipelined call's parts: part `k` stages (checks and
/// copies its spacepoints into pinned memory, issues the DMA) only after part `k - 1` has,
/// so the first part's chain starts as early as possible and the host's memory bandwidth
/// goes to one part at a time. A part that fails before its copies are done stops every
/// later part.
pub(crate) struct Turn {
    /// The part whose copies may run; [`Turn::STOPPED`] after a failure.
    next: Mutex<usize>,
    changed: Condvar,
}

impl Turn {
    const STOPPED: usize = usize::MAX;

    fn new() -> Self {
        Self {
            next: Mutex::new(0),
            changed: Condvar::new(),
        }
    }

    /// Waits for part `k`'s turn: a guard that passes it to part `k + 1` when done
    /// ([`TurnGuard::done`]), or stops the call if dropped before; an error once stopped.
    pub(crate) fn take(&self, k: usize) -> Result<TurnGuard<'_>> {
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        while *next != k && *next != Self::STOPPED {
            next = self.changed.wait(next).unwrap_or_else(|e| e.into_inner());
        }
        if *next == Self::STOPPED {
            return Err(invalid(
                "seeding",
                "stopped: an earlier part of the call failed",
            ));
        }
        Ok(TurnGuard { turn: self, k })
    }

    /// Stops the call: every part waiting for its turn, or asking later, gets an error.
    fn stop(&self) {
        *self.next.lock().unwrap_or_else(|e| e.into_inner()) = Self::STOPPED;
        self.changed.notify_all();
    }

    /// Part `k` is done with its copies: part `k + 1`'s turn (unless stopped meanwhile).
    fn pass(&self, k: usize) {
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        if *next == k {
            *next = k + 1;
        }
        drop(next);
        self.changed.notify_all();
    }
}

/// Part `k`'s turn, held while it stages.
pub(crate) struct TurnGuard<'a> {
    turn: &'a Turn,
    k: usize,
}

impl TurnGuard<'_> {
    /// The part's copies are issued: the next part's may run.
    pub(crate) fn done(self) {
        self.turn.pass(self.k);
        std::mem::forget(self);
    }
}

impl Drop for TurnGuard<'_> {
    fn drop(&mut self) {
        self.turn.stop();
    }
}

impl SeedWorkspace {
    /// Part `k` of a pipelined call into `out` (one output per event), with pinned staging.
    fn seed_part(
        &mut self,
        events: Events<'_>,
        cfg: &SeedingConfig,
        turn: (&Turn, usize),
        out: &mut [SeedingOutput],
    ) -> Result<()> {
        self.gpu.seed_events_host_part(
            &mut self.ws,
            events,
            cfg,
            Some(&mut self.stage),
            Some(turn),
            out,
        )
    }
}

/// Ends of the parts (event indices, increasing, the last = `count`): each part ends at the
/// first event where the spacepoints so far reach its share; at least one event per part.
fn part_ends(lens: impl Fn(usize) -> usize, count: usize, weights: &[usize]) -> Vec<usize> {
    let total: usize = (0..count).map(&lens).sum();
    let wsum: usize = weights.iter().sum::<usize>().max(1);
    let mut ends = Vec::with_capacity(weights.len());
    let (mut e, mut acc, mut wacc) = (0usize, 0usize, 0usize);
    for (i, &w) in weights.iter().enumerate() {
        wacc += w;
        let left = weights.len() - i - 1;
        if i + 1 == weights.len() {
            e = count;
        } else {
            // At least one event here, and one left for each later part.
            let start = e;
            while e < count.saturating_sub(left)
                && (e == start || (acc as u128 * wsum as u128) < (total as u128 * wacc as u128))
            {
                acc += lens(e);
                e += 1;
            }
        }
        if ends.last() != Some(&e) {
            ends.push(e);
        }
    }
    ends.retain(|&x| x > 0);
    ends.dedup();
    ends
}

/// Seeds `events` (at least two) with pinned staging as a pipeline: the events split into
/// parts by the tuning's weights ([`super::SeedTuning::pipeline_parts`]: 1 : 4 : 4 : 2 : 1
/// measured fastest of the weights tried, see docs/benchmarks.md, sections "door" and
/// "sdoor"; every part is a chain of its own, and a chain of fewer events costs more GPU
/// time per event, so more parts are not better), parts `0, 2, 4, ..` on one workspace (this thread) and `1, 3,
/// ..` on another (a second thread), each with its own stream. The parts' host copies run
/// one after the other ([`Turn`]), so part `k + 1` is checked and copied while part `k`'s
/// chain runs, and part `k - 1`'s seeds come back meanwhile; the two chains share the GPU.
/// The results are those of one call (the same seeds, in the same order: each event is
/// seeded on its own in either case); the error is the first event's, as a check of every
/// event in order gives (parts check their events as they copy them, in part order, and a
/// failed part stops the later ones).
pub(crate) fn seed_pipelined(
    b: &crate::Backend,
    gpu: &GpuContext,
    events: Events<'_>,
    cfg: &SeedingConfig,
    out: &mut Vec<SeedingOutput>,
) -> Result<()> {
    let count = events.count();
    out.truncate(count);
    out.resize_with(count, SeedingOutput::default);
    let ends = part_ends(|e| events.len(e), count, b.seed_plan.t.pipeline_parts);
    let turn = Turn::new();
    // Each part's events and outputs, dealt to the two lanes.
    let mut lanes: [Vec<(usize, Events<'_>, &mut [SeedingOutput])>; 2] = [Vec::new(), Vec::new()];
    let (mut rest_ev, mut rest_out, mut start) = (events, &mut out[..], 0usize);
    for (k, &end) in ends.iter().enumerate() {
        let (ev, ev_rest) = rest_ev.split_at(end - start);
        let (o, o_rest) = std::mem::take(&mut rest_out).split_at_mut(end - start);
        lanes[k % 2].push((k, ev, o));
        (rest_ev, rest_out, start) = (ev_rest, o_rest, end);
    }
    let run_lane = |w: &mut SeedWorkspace,
                    parts: Vec<(usize, Events<'_>, &mut [SeedingOutput])>| {
        let mut first_err: Option<(usize, Error)> = None;
        // The lane's thread needs the context current for the raw driver calls.
        if let Err(e) = w.gpu.context().bind_to_thread().ctx("binding the context") {
            turn.stop();
            return Some((parts.first().map_or(0, |p| p.0), e));
        }
        for (k, ev, o) in parts {
            if let Err(e) = w.seed_part(ev, cfg, (&turn, k), o) {
                // A part failed: the later parts stop at their turn (or have staged and
                // run on; their results are dropped with the call's).
                turn.stop();
                first_err.get_or_insert((k, e));
            }
        }
        first_err
    };
    let [lane0, lane1] = lanes;
    // Two workspaces in fixed roles (lane 0 always the first): a repeated call allocates
    // nothing once its parts fit them.
    b.ws.seeding.run_two(
        gpu,
        || SeedWorkspace::new(gpu, &b.seed_plan),
        |w0, w1| {
            let (e0, e1) = std::thread::scope(|s| {
                let h = s.spawn(|| run_lane(w1, lane1));
                let e0 = run_lane(w0, lane0);
                let e1 = h
                    .join()
                    .unwrap_or_else(|_| Some((0, invalid("seeding", "a seeding thread panicked"))));
                (e0, e1)
            });
            let errs = [e0, e1].into_iter().flatten();
            // A driver error first (the pool then drops both workspaces, their state
            // unknown); else the first part's error: later parts may only have been
            // stopped by it.
            match errs.min_by_key(|(k, e)| (!matches!(e, Error::Driver { .. }), *k)) {
                Some((_, e)) => Err(e),
                None => Ok(()),
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::part_ends;

    /// Parts cover every event in order, each non-empty, at most one per event, with the
    /// weights' shares of the spacepoints where events allow.
    #[test]
    fn parts_cover_the_events_in_order() {
        let lens = [10usize; 64];
        assert_eq!(
            part_ends(|e| lens[e], 64, &[1, 3, 3, 1]),
            vec![8, 32, 56, 64]
        );
        assert_eq!(part_ends(|e| lens[e], 64, &[1, 1]), vec![32, 64]);
        for count in 1..12 {
            for weights in [&[1usize, 3, 3, 1][..], &[1, 1], &[1, 2, 2, 2, 1], &[5]] {
                let lens: Vec<usize> = (0..count).map(|i| (i * 7919) % 13).collect();
                let ends = part_ends(|e| lens[e], count, weights);
                assert_eq!(*ends.last().unwrap(), count, "{count} {weights:?}");
                assert!(ends.len() <= weights.len().min(count));
                assert!(ends.windows(2).all(|w| w[0] < w[1]), "{ends:?}");
                assert!(ends[0] > 0);
            }
        }
    }
}
