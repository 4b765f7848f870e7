//! Multiway merge of presorted runs on the GPU (issue 12): element splitters from samples,
//! one shared-memory merge per segment, one read and one write of the singles.
//!
//! For runs `r` (each sorted by time) the total order (time, run, position) is the stable
//! sort. A level of the merge:
//! 1. `pet_multiway_sample`: every `step`-th single of every run becomes a sample record
//!    (its run and position kept), runs back to back: presorted runs again, `~n / step`.
//! 2. The samples are sorted by the same merge, one level down (recursively, until one tile
//!    holds a level: that level is a single segment).
//! 3. `pet_multiway_split`: sorted sample `k * every` is splitter `k`; one block per
//!    splitter, one thread per run, finds each run's split through the run's samples
//!    ([`k::mw_split_sampled`], equal to [`k::mw_split`]): row `k`.
//! 4. `pet_multiway_merge`: one block per segment (rows `k`..`k + 1`), at most
//!    `every * step + runs * (step - 1) <= tile` singles ([`k::mw_sampling`]: a deterministic
//!    bound, whatever the times), sorts the slices in shared memory (buckets by the top
//!    bits of the keys' span, each key ranked by counting inside its bucket:
//!    [`k::mw_bucket_plan`]; or a block radix sort of the keys' differing bits when a
//!    bucket overflows or the span is wider; or merge rounds when the radix passes would
//!    outnumber them: [`k::mw_radix_plan`]) and writes them at the segment's offset (the
//!    sum of row `k`).
//!
//! Everything is asynchronous on the stream (no read-back). More than [`k::MW_MAX_RUNS`]
//! runs: the radix sort instead.

use cudarc::driver::CudaSlice;
use detkit_gpu::pet as k;
use detkit_gpu::DevPtr;

use super::cuda::{check_u32_len, SinglesBuffer};
use super::launch::PetLauncher;
use super::{check_run_starts, check_runs_sorted, Single};
use crate::cuda::{cfg, DeviceVec};
use crate::error::{invalid, DriverContext, Error, Result};
use crate::Backend;

/// One level of the merge plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MergeLevel {
    /// Run starts (`runs + 1`, from 0 to the level's element count; runs non-empty).
    pub starts: Vec<u32>,
    /// Sampling step (0 on the last level, a single segment).
    pub step: u32,
    /// Samples per segment.
    pub every: u32,
    /// Number of splitters (segments - 1).
    pub nsplit: u32,
}

impl MergeLevel {
    /// Elements of the level.
    pub fn len(&self) -> u32 {
        *self.starts.last().unwrap_or(&0)
    }
    /// Whether the level has no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Number of runs.
    pub fn runs(&self) -> u32 {
        self.starts.len() as u32 - 1
    }
}

/// The levels of a merge of the (non-empty) runs `starts` with segments of at most `tile`
/// elements: level 0 the input, level `l + 1` the samples of level `l`; the last level fits
/// one tile. `runs` in `1..=MW_MAX_RUNS`, `tile >= 6 * MW_MAX_RUNS` (so `step >= 2`
/// and every level is smaller than the one before).
pub fn merge_plan(starts: &[u32], tile: u32) -> Vec<MergeLevel> {
    merge_plan_div(starts, tile, 3)
}

/// [`merge_plan`] with the first level's `div` of [`k::mw_sampling`] (`>= 2`; the levels
/// of samples use 2).
pub fn merge_plan_div(starts: &[u32], tile: u32, div0: u32) -> Vec<MergeLevel> {
    let mut levels = Vec::new();
    let mut s = starts.to_vec();
    loop {
        let n = *s.last().unwrap_or(&0);
        let runs = s.len() as u32 - 1;
        if n <= tile {
            levels.push(MergeLevel {
                starts: s,
                step: 0,
                every: 0,
                nsplit: 0,
            });
            return levels;
        }
        let div = if levels.is_empty() { div0.max(2) } else { 2 };
        let (step, every) = k::mw_sampling(runs, tile, div);
        debug_assert!(step >= 2, "tile below 6 * MW_MAX_RUNS");
        let mut next = Vec::with_capacity(s.len());
        next.push(0u32);
        for w in s.windows(2) {
            let c = (w[1] - w[0]).div_ceil(step);
            next.push(next.last().copied().unwrap_or(0) + c);
        }
        let ns = *next.last().unwrap_or(&0);
        levels.push(MergeLevel {
            starts: s,
            step,
            every,
            nsplit: ns.div_ceil(every) - 1,
        });
        s = next;
    }
}

/// What a multiway merge does with run boundaries `starts`: nothing (at most one non-empty
/// run), the radix sort (more than [`k::MW_MAX_RUNS`] non-empty runs), or the merge of the
/// distinct boundaries.
enum MultiwayPath {
    Nothing,
    Radix,
    Merge(Vec<u32>),
}

fn multiway_path(starts: &[u32]) -> MultiwayPath {
    let mut s = starts.to_vec();
    s.dedup();
    if s.len() <= 2 {
        MultiwayPath::Nothing
    } else if s.len() - 1 > k::MW_MAX_RUNS as usize {
        MultiwayPath::Radix
    } else {
        MultiwayPath::Merge(s)
    }
}

/// The CPU mirror of the GPU merge (same plan, samples, splits and segments; a segment
/// sorted as the block sorts it: by LSD radix over [`k::mw_radix_plan`]'s bits of its keys
/// loaded in run order, or when the plan says merge rounds, by a stable sort): the host
/// tests compare it with the oracle and check every segment against the tile.
/// `CapacityExceeded` if a segment were larger than `tile`. `radix_bits` as in
/// [`PetTuning::radix_bits`](super::PetTuning::radix_bits).
pub fn merge_runs_emulated(
    singles: &[Single],
    starts: &[u32],
    tile: u32,
    radix_bits: u32,
) -> Result<Vec<Single>> {
    if tile < 6 * k::MW_MAX_RUNS {
        return Err(invalid(
            "multiway tile",
            format!("{tile} < 6 * MW_MAX_RUNS"),
        ));
    }
    check_run_starts(starts, singles.len())?;
    check_runs_sorted(singles, starts)?;
    let s = match multiway_path(starts) {
        MultiwayPath::Nothing => return Ok(singles.to_vec()),
        MultiwayPath::Radix => return crate::pet::cpu::sort(singles),
        MultiwayPath::Merge(s) => s,
    };
    let plan = merge_plan(&s, tile);
    emulate_level(singles, &plan, 0, tile, radix_bits)
}

/// A segment (in run order) sorted as a merge block sorts it: `Some` when
/// [`k::mw_radix_plan`] chose the radix path (LSD passes of 8 bits over `(key - min) >>
/// shift`, each a stable counting sort), `None` for the merge rounds.
pub fn segment_radix_emulated(seg: &[Single], runs: u32, radix_bits: u32) -> Option<Vec<Single>> {
    let keys: Vec<u64> = seg.iter().map(|x| k::time_key(x.time)).collect();
    let (min, max, and, or) = keys
        .iter()
        .fold((u64::MAX, 0u64, u64::MAX, 0u64), |(a, b, c, d), &x| {
            (a.min(x), b.max(x), c & x, d | x)
        });
    let (shift, bits) = k::mw_radix_plan(min, max, and, or, runs, radix_bits)?;
    let mut order: Vec<(u64, usize)> = keys
        .iter()
        .enumerate()
        .map(|(q, &x)| ((x - min) >> shift, q))
        .collect();
    let mut lo = 0;
    while lo < bits {
        let b = (bits - lo).min(8);
        let digit = |x: u64| ((x >> lo) & ((1 << b) - 1)) as usize;
        let mut start = [0usize; 257];
        for &(x, _) in &order {
            start[digit(x) + 1] += 1;
        }
        for d in 0..256 {
            start[d + 1] += start[d];
        }
        let mut next = vec![(0u64, 0usize); order.len()];
        for &(x, q) in &order {
            next[start[digit(x)]] = (x, q);
            start[digit(x)] += 1;
        }
        order = next;
        lo += b;
    }
    Some(order.iter().map(|&(_, q)| seg[q]).collect())
}

/// A segment (in run order, at most `2^MW_BUCKET_IDX_BITS` singles) sorted as a merge
/// block with `2^bucket_bits` buckets ([`k::mw_bucket_bits`]) sorts it on its bucket path
/// ([`k::mw_bucket_plan`]): `None` when the block would not
/// take it (merge rounds, a span over the bucket path's bits, `bucket_max` 0, or a bucket
/// over `bucket_max`). As on the GPU, the keys take the slots of their bucket in an order
/// that is not the input's (here the reverse), and each key's position is its bucket's
/// start plus the number of smaller slot words ([`k::mw_bucket_item`]) in its bucket (their
/// low 32 bits when `s2 + MW_BUCKET_IDX_BITS <= 32`, as the kernel compares them).
pub fn segment_bucket_emulated(
    seg: &[Single],
    runs: u32,
    radix_bits: u32,
    bucket_max: u32,
    bucket_bits: u32,
) -> Option<Vec<Single>> {
    let keys: Vec<u64> = seg.iter().map(|x| k::time_key(x.time)).collect();
    let (min, max, and, or) = keys
        .iter()
        .fold((u64::MAX, 0u64, u64::MAX, 0u64), |(a, b, c, d), &x| {
            (a.min(x), b.max(x), c & x, d | x)
        });
    let (shift, bits) = k::mw_radix_plan(min, max, and, or, runs, radix_bits)?;
    let s2 = k::mw_bucket_plan(bits, bucket_max, bucket_bits)?;
    let nb = 1usize << bucket_bits;
    let items: Vec<(u32, u64)> = keys
        .iter()
        .enumerate()
        .map(|(q, &x)| k::mw_bucket_item((x - min) >> shift, s2, q as u32))
        .collect();
    let mut start = vec![0u32; nb + 1];
    for &(d, _) in &items {
        start[d as usize + 1] += 1;
    }
    if start.iter().any(|&c| c > bucket_max) {
        return None;
    }
    for d in 0..nb {
        start[d + 1] += start[d];
    }
    let mut next = start.clone();
    let mut slots = vec![(0u32, 0u64); seg.len()];
    for &(d, pk) in items.iter().rev() {
        slots[next[d as usize] as usize] = (d, pk);
        next[d as usize] += 1;
    }
    let mut out = vec![seg[0]; seg.len()];
    for &(d, pk) in &slots {
        let bucket = &slots[start[d as usize] as usize..start[d as usize + 1] as usize];
        let less = if s2 + k::MW_BUCKET_IDX_BITS <= 32 {
            bucket
                .iter()
                .filter(|&&(_, x)| (x as u32) < pk as u32)
                .count() as u32
        } else {
            bucket.iter().filter(|&&(_, x)| x < pk).count() as u32
        };
        let q = pk & ((1 << k::MW_BUCKET_IDX_BITS) - 1);
        out[(start[d as usize] + less) as usize] = seg[q as usize];
    }
    Some(out)
}

fn emulate_level(
    v: &[Single],
    plan: &[MergeLevel],
    l: usize,
    tile: u32,
    radix_bits: u32,
) -> Result<Vec<Single>> {
    let lv = &plan[l];
    let s = &lv.starts;
    let runs = lv.runs() as usize;
    let rows: Vec<Vec<u32>> = if lv.step == 0 {
        vec![vec![0; runs], s.windows(2).map(|w| w[1] - w[0]).collect()]
    } else {
        // Samples as records, sorted by the same merge one level down.
        let mut samples = Vec::new();
        let mut run_samples = Vec::with_capacity(runs);
        for r in 0..runs {
            run_samples.push(samples.len());
            let mut p = 0;
            while p < s[r + 1] - s[r] {
                samples.push(Single {
                    crystal: r as u32,
                    energy: f32::from_bits(p),
                    time: v[(s[r] + p) as usize].time,
                });
                p += lv.step;
            }
        }
        let sorted = emulate_level(&samples, plan, l + 1, tile, radix_bits)?;
        let mut rows = vec![vec![0; runs]];
        for j in 1..=lv.nsplit {
            let sp = sorted[(j * lv.every) as usize];
            let key = k::time_key(sp.time);
            rows.push(
                (0..runs)
                    .map(|r| {
                        let run = &v[s[r] as usize..s[r + 1] as usize];
                        let s0 = run_samples[r];
                        k::mw_split_sampled(
                            r as u32,
                            run.len() as u32,
                            sp.crystal,
                            sp.energy.to_bits(),
                            key,
                            lv.step,
                            |j| samples[s0 + j as usize].time,
                            |q| run[q as usize].time,
                        )
                    })
                    .collect(),
            );
        }
        rows.push(s.windows(2).map(|w| w[1] - w[0]).collect());
        rows
    };
    let mut out = Vec::with_capacity(v.len());
    for w in rows.windows(2) {
        let mut seg = Vec::new();
        for r in 0..runs {
            if w[1][r] < w[0][r] {
                return Err(invalid("multiway merge", "split rows decrease"));
            }
            seg.extend_from_slice(&v[(s[r] + w[0][r]) as usize..(s[r] + w[1][r]) as usize]);
        }
        if seg.len() > tile as usize {
            return Err(Error::CapacityExceeded {
                what: "singles in one multiway-merge segment",
                needed: seg.len() as u64,
                capacity: tile as u64,
            });
        }
        if out.len() != w[0].iter().map(|&x| x as usize).sum::<usize>() {
            return Err(invalid("multiway merge", "segment offset differs"));
        }
        match segment_radix_emulated(&seg, runs as u32, radix_bits) {
            Some(sorted) => out.extend(sorted),
            None => {
                seg.sort_by_key(|a| k::time_key(a.time));
                out.extend(seg);
            }
        }
    }
    Ok(out)
}

/// How [`PetLauncher::sort_auto`] sorted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PetSortPath {
    /// The input was already in time order (one natural run, or `n <= 1`): nothing done.
    Sorted,
    /// Multiway merge of this many natural runs.
    Merge {
        /// Natural runs found.
        runs: usize,
    },
    /// More runs than the merge takes: the radix sort.
    Radix,
}

impl std::fmt::Display for PetSortPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PetSortPath::Sorted => write!(f, "already sorted"),
            PetSortPath::Merge { runs } => write!(f, "multiway merge of {runs} presorted runs"),
            PetSortPath::Radix => write!(f, "radix sort"),
        }
    }
}

/// Reusable device buffers of the merge (grown on demand).
#[derive(Default)]
pub(crate) struct MergeTemp {
    /// Status word, radix-segment count, bucket-segment count, every level's starts, then every level's rows.
    words: Option<CudaSlice<u32>>,
    /// Every level's sample records (input, then merged output).
    recs: Option<DeviceVec<Single>>,
    /// Natural-run detection: count and positions.
    detect: Option<CudaSlice<u32>>,
}

use super::cuda::ensure_len as ensure;

/// The checks of both merges: `n < 2^32 - 1`, run boundaries from 0 to `n`, non-decreasing,
/// and both buffers holding `off + n` singles.
fn check_merge(
    a: &SinglesBuffer,
    b: &SinglesBuffer,
    off: usize,
    n: usize,
    starts: &[u32],
) -> Result<()> {
    check_u32_len("singles to merge", n)?;
    check_run_starts(starts, n)?;
    if a.len() < off + n || b.len() < off + n {
        return Err(invalid("merge buffers", "shorter than off + n singles"));
    }
    Ok(())
}

impl PetLauncher<'_> {
    /// Multiway merge of the presorted runs `a[off + starts[r] .. off + starts[r + 1]]`
    /// (each sorted by time; ties: earlier run first, so the stable sort) into
    /// `b[off..off + n]`, with the launcher's [`MergePlan`](super::MergePlan): one read and one write of the
    /// singles plus the samples (about `n / 12` of them for 256 runs, merged the same way).
    /// Returns `true` when the result is in `b`, `false` when it is in `a` (at most one
    /// non-empty run). More than [`k::MW_MAX_RUNS`] non-empty runs:
    /// [`PetLauncher::sort_radix`]. Asynchronous; times must be finite and runs sorted (the
    /// `Backend` API checks; the kernels stay in bounds whatever the data). After it (and
    /// before the next merge on this context), [`PetLauncher::merge_radix_segments`] and
    /// [`PetLauncher::merge_bucket_segments`] tell how the segments were sorted.
    pub fn merge_runs(
        &self,
        a: &mut SinglesBuffer,
        b: &mut SinglesBuffer,
        off: usize,
        n: usize,
        starts: &[u32],
    ) -> Result<bool> {
        check_merge(a, b, off, n, starts)?;
        let s = match multiway_path(starts) {
            MultiwayPath::Nothing => return Ok(false),
            MultiwayPath::Radix => return self.sort_radix(a, b, off, n),
            MultiwayPath::Merge(s) => s,
        };
        let mut t = self.with_scratch(std::mem::take::<MergeTemp>);
        let r = self.merge_in(&mut t, a, b, off, n, &s);
        self.with_scratch(|x: &mut MergeTemp| *x = t);
        r.map(|()| true)
    }

    /// [`PetLauncher::merge_runs`] followed by a read of the merge's status word:
    /// `Err` if a segment overflowed its tile or split rows decreased (runs not sorted).
    pub fn merge_runs_checked(
        &self,
        a: &mut SinglesBuffer,
        b: &mut SinglesBuffer,
        off: usize,
        n: usize,
        starts: &[u32],
    ) -> Result<bool> {
        let in_b = self.merge_runs(a, b, off, n, starts)?;
        if !matches!(multiway_path(starts), MultiwayPath::Merge(_)) {
            return Ok(in_b);
        }
        let bad = self.with_scratch(|x: &mut MergeTemp| -> Result<u32> {
            match x.words.as_ref() {
                Some(w) => Ok(self
                    .stream()
                    .clone_dtoh(&w.slice(0..1))
                    .ctx("reading the merge status")?[0]),
                None => Ok(0),
            }
        })?;
        if bad != 0 {
            return Err(invalid(
                "singles to merge",
                "a run is not sorted by time (multiway merge status)",
            ));
        }
        Ok(in_b)
    }

    /// The number of segments (of every level) that the last multiway merge on this context
    /// that ran its kernels sorted by radix (the radix passes or the bucket path) rather
    /// than by merge rounds. Synchronises.
    pub fn merge_radix_segments(&self) -> Result<u32> {
        self.merge_status_word(1)
    }

    /// The number of segments (of every level) that the last multiway merge on this context
    /// that ran its kernels sorted by the bucket path ([`k::mw_bucket_plan`]). Synchronises.
    pub fn merge_bucket_segments(&self) -> Result<u32> {
        self.merge_status_word(2)
    }

    fn merge_status_word(&self, i: usize) -> Result<u32> {
        self.with_scratch(|x: &mut MergeTemp| -> Result<u32> {
            match x.words.as_ref() {
                Some(w) => Ok(self
                    .stream()
                    .clone_dtoh(&w.slice(i..i + 1))
                    .ctx("reading the merge's status words")?[0]),
                None => Ok(0),
            }
        })
    }

    fn merge_in(
        &self,
        t: &mut MergeTemp,
        a: &SinglesBuffer,
        b: &mut SinglesBuffer,
        off: usize,
        n: usize,
        s: &[u32],
    ) -> Result<()> {
        let mp = *self.plan();
        let (tile, threads, kernel) = (mp.tile, mp.threads, mp.kernel);
        let (radix_bits, bucket_max) = (mp.radix_bits, mp.bucket_max);
        let plan = merge_plan_div(s, tile, mp.first_div);
        // Word layout: status, radix count, bucket count, starts of every level, rows of
        // every level.
        let mut header = vec![0u32, 0, 0];
        let mut starts_at = Vec::new();
        for lv in &plan {
            starts_at.push(header.len());
            header.extend_from_slice(&lv.starts);
        }
        let mut rows_at = Vec::new();
        let mut words = header.len();
        for lv in &plan {
            rows_at.push(words);
            words += (lv.nsplit as usize + 2) * lv.runs() as usize;
        }
        // Record layout: level l >= 1 has its input then its output, 2 words per record.
        let mut recs_at = vec![(0usize, 0usize)];
        let mut recs = 0usize;
        for lv in &plan[1..] {
            let m = lv.len() as usize;
            recs_at.push((recs, recs + m));
            recs += 2 * m;
        }
        ensure(self, &mut t.words, words)?;
        ensure(self, &mut t.recs, recs.max(1))?;
        let (Some(wbuf), Some(rbuf)) = (t.words.as_mut(), t.recs.as_mut()) else {
            unreachable!("allocated above");
        };
        self.stream()
            .memcpy_htod(&header, &mut wbuf.slice_mut(0..header.len()))
            .ctx("uploading run starts")?;
        let w0 = self.ptr_mut(wbuf).addr();
        let r0 = self.ptr_mut(rbuf).addr();
        let av = a.slice(off..off + n);
        let mut bv = b.slice_mut(off..off + n);
        let a0 = self.ptr(&av).addr();
        let b0 = self.ptr_mut(&mut bv).addr();
        let input = |l: usize| {
            if l == 0 {
                a0
            } else {
                r0 + 16 * recs_at[l].0 as u64
            }
        };
        let output = |l: usize| {
            if l == 0 {
                b0
            } else {
                r0 + 16 * recs_at[l].1 as u64
            }
        };
        let word = |i: usize| DevPtr::<u32>::from_addr(w0 + 4 * i as u64);
        let last = plan.len() - 1;
        // Samples, level by level down.
        for l in 0..last {
            let lv = &plan[l];
            let ns = plan[l + 1].len() as u64;
            let blocks = ns
                .div_ceil(k::MW_SAMPLE_THREADS as u64)
                .clamp(1, self.sm_count() as u64 * 16);
            let p = k::PetMwSampleParams {
                input: DevPtr::from_addr(input(l)),
                samples: DevPtr::from_addr(input(l + 1)),
                starts: word(starts_at[l]),
                sstarts: word(starts_at[l + 1]),
                nsamples: ns,
                nruns: lv.runs(),
                step: lv.step,
            };
            // SAFETY: MW_SAMPLE_THREADS threads; starts and sstarts are the plan's (uploaded
            // above, sstarts[r + 1] - sstarts[r] = ceil(len_r / step)); input holds the
            // level's elements (b's view or the record buffer), samples `ns` records.
            unsafe {
                self.launch(
                    k::KERNEL_MW_SAMPLE,
                    cfg(blocks, k::MW_SAMPLE_THREADS, 0),
                    &p,
                )?
            };
        }
        // Splits and merges, level by level up (the last level's samples need no sort).
        for l in (0..=last).rev() {
            let lv = &plan[l];
            let sorted = if l < last { output(l + 1) } else { input(l) };
            // The last level has no splitter: its samples are never read.
            let (samples, sstarts) = if l < last {
                (input(l + 1), starts_at[l + 1])
            } else {
                (input(l), starts_at[l])
            };
            let p = k::PetMwSplitParams {
                input: DevPtr::from_addr(input(l)),
                starts: word(starts_at[l]),
                sorted: DevPtr::from_addr(sorted),
                rows: word(rows_at[l]),
                samples: DevPtr::from_addr(samples),
                sstarts: word(sstarts),
                nruns: lv.runs(),
                every: lv.every,
                nsplit: lv.nsplit,
                step: lv.step.max(1),
            };
            // SAFETY: MW_SPLIT_THREADS >= runs threads, nsplit + 2 blocks; the sorted samples
            // (written by the merge of level l + 1 above) hold nsplit * every + 1 records at
            // least (nsplit = ceil(ns / every) - 1); rows (nsplit + 2) * runs words; the
            // unsorted samples (level l + 1's input, written by the sample kernel above) with
            // their starts, ceil(len_r / step) per run.
            unsafe {
                self.launch(
                    k::KERNEL_MW_SPLIT,
                    cfg(lv.nsplit as u64 + 2, k::MW_SPLIT_THREADS, 0),
                    &p,
                )?
            };
            let p = k::PetMwMergeParams {
                input: DevPtr::from_addr(input(l)),
                output: DevPtr::from_addr(output(l)),
                starts: word(starts_at[l]),
                rows: word(rows_at[l]),
                status: word(0),
                nruns: lv.runs(),
                radix_bits,
                bucket_max,
                pad: 0,
            };
            if l == last {
                // All the shared memory for the merge: two narrow blocks per multiprocessor.
                self.kernel(kernel)?
                    .set_attribute(
                        cudarc::driver::sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT,
                        100,
                    )
                    .ctx("setting the shared-memory carveout of the merge")?;
            }
            // SAFETY: `threads` threads with the matching kernel and tile, `mw_smem_bytes`;
            // rows written by the split kernel just before (nsplit + 2 rows, each word at
            // most its run's length); input and output distinct buffers of the level's
            // length; status three words.
            unsafe { self.launch(kernel, cfg(lv.nsplit as u64 + 1, threads, mp.smem), &p)? };
        }
        Ok(())
    }

    /// The merge of presorted runs before issue 12's multiway merge, kept as the baseline:
    /// `ceil(log2(runs))` pairwise merge-path passes (`pet_merge_sort_pass` with explicit
    /// boundaries), ping-ponging between `a` and `b`. Returns `true` when the result is in
    /// `b`.
    pub fn merge_runs_pairwise(
        &self,
        a: &mut SinglesBuffer,
        b: &mut SinglesBuffer,
        off: usize,
        n: usize,
        starts: &[u32],
    ) -> Result<bool> {
        check_merge(a, b, off, n, starts)?;
        let mut bounds: Vec<u32> = starts.to_vec();
        let mut in_b = false;
        while bounds.len() > 2 {
            let nruns = (bounds.len() - 1) as u64;
            let d = self.upload(&bounds)?;
            if in_b {
                self.merge_pass(b, a, off, n, 0, &d, nruns)?;
            } else {
                self.merge_pass(a, b, off, n, 0, &d, nruns)?;
            }
            in_b = !in_b;
            let mut next: Vec<u32> = bounds.iter().step_by(2).copied().collect();
            if next.last() != Some(&(n as u32)) {
                next.push(n as u32);
            }
            bounds = next;
        }
        Ok(in_b)
    }

    /// The merge of two sorted runs, `a[off..off + split]` and `a[off + split..off + n]`,
    /// into `b` (ties: the first run first), with the boundaries written into `bounds` (at
    /// least three words, the caller's, reused between calls: no allocation). The same
    /// result as [`PetLauncher::merge_runs_pairwise`] with `[0, split, n]`: one
    /// merge-path pass. Returns `true` when the result is in `b` (`false`: nothing to merge,
    /// one run empty, the singles stay in `a`).
    pub(crate) fn merge_two_runs(
        &self,
        a: &mut SinglesBuffer,
        b: &mut SinglesBuffer,
        off: usize,
        n: usize,
        split: usize,
        bounds: &mut CudaSlice<u32>,
    ) -> Result<bool> {
        let starts = [0, split as u32, n as u32];
        check_merge(a, b, off, n, &starts)?;
        if split == 0 || split == n {
            return Ok(false);
        }
        if bounds.len() < 3 {
            return Err(invalid(
                "merge boundaries",
                "a buffer of fewer than 3 words",
            ));
        }
        // A copy of 12 bytes from the stack: the driver stages pageable memory before the
        // call returns, so the array may go when it does.
        self.stream()
            .memcpy_htod(&starts, &mut bounds.slice_mut(0..3))
            .ctx("writing the merge boundaries")?;
        self.merge_pass(a, b, off, n, 0, bounds, 2)?;
        Ok(true)
    }

    /// The natural runs of `a[off..off + n]` (starts of maximal non-decreasing stretches
    /// of time, from 0 to `n`), if there are at most [`k::MW_MAX_RUNS`] of them; `None` if
    /// there are more. One kernel and one read-back of 257 words.
    pub fn detect_runs(&self, a: &SinglesBuffer, off: usize, n: usize) -> Result<Option<Vec<u32>>> {
        check_u32_len("singles", n)?;
        if a.len() < off + n {
            return Err(invalid("singles buffer", "shorter than off + n singles"));
        }
        if n <= 1 {
            return Ok(Some(vec![0, n as u32]));
        }
        let cap = k::MW_MAX_RUNS;
        let mut t = self.with_scratch(std::mem::take::<MergeTemp>);
        let r = (|| -> Result<Vec<u32>> {
            ensure(self, &mut t.detect, 1 + cap as usize)?;
            let Some(d) = t.detect.as_mut() else {
                unreachable!("allocated above");
            };
            self.fill_u32(d, 1, 0)?;
            let av = a.slice(off..off + n);
            let blocks = (n as u64)
                .div_ceil(k::MW_SAMPLE_THREADS as u64)
                .clamp(1, self.sm_count() as u64 * 16);
            let p = k::PetDetectRunsParams {
                singles: self.ptr(&av).cast(),
                out: self.ptr_mut(d),
                n: n as u64,
                cap,
                _pad: 0,
            };
            // SAFETY: MW_SAMPLE_THREADS threads, grid-stride; av holds n singles; d holds
            // 1 + cap words, word 0 zeroed above.
            unsafe {
                self.launch(
                    k::KERNEL_DETECT_RUNS,
                    cfg(blocks, k::MW_SAMPLE_THREADS, 0),
                    &p,
                )?
            };
            self.download(d)
        })();
        self.with_scratch(|x: &mut MergeTemp| *x = t);
        let words = r?;
        let c = words[0] as usize;
        if c >= cap as usize {
            return Ok(None);
        }
        let mut starts = Vec::with_capacity(c + 2);
        starts.push(0);
        starts.extend_from_slice(&words[1..1 + c]);
        starts[1..].sort_unstable();
        starts.push(n as u32);
        Ok(Some(starts))
    }

    /// Stable sort by time of `a[off..off + n]` that finds the natural runs first: one run
    /// → nothing to do; up to [`k::MW_MAX_RUNS`] runs → the multiway merge into `b`; more →
    /// the radix sort into `b`. Returns whether the result is in `b` and the path taken.
    /// Times must be finite.
    pub fn sort_auto(
        &self,
        a: &mut SinglesBuffer,
        b: &mut SinglesBuffer,
        off: usize,
        n: usize,
    ) -> Result<(bool, PetSortPath)> {
        match self.detect_runs(a, off, n)? {
            Some(s) if s.len() <= 2 => Ok((false, PetSortPath::Sorted)),
            Some(s) => {
                let in_b = self.merge_runs(a, b, off, n, &s)?;
                Ok((in_b, PetSortPath::Merge { runs: s.len() - 1 }))
            }
            None => Ok((self.sort_radix(a, b, off, n)?, PetSortPath::Radix)),
        }
    }
}

impl Backend {
    /// Stable sort by time that takes advantage of presorted input: on the GPU,
    /// [`PetLauncher::sort_auto`] (natural runs found on the device; merged when
    /// at most 256, else the radix sort), returning the path taken; the CPU backend runs
    /// the oracle (path `Sorted` when the input was in order, else `Radix`, for the
    /// record only). Non-finite times are a typed error.
    pub fn pet_sort_auto(&self, singles: &[Single]) -> Result<(Vec<Single>, PetSortPath)> {
        crate::pet::cpu::check_times(singles, "singles to sort")?;
        check_u32_len("singles to sort", singles.len())?;
        match self.gpu() {
            None => {
                let sorted = singles.windows(2).all(|w| w[0].time <= w[1].time);
                Ok((
                    crate::pet::cpu::sort(singles)?,
                    if sorted {
                        PetSortPath::Sorted
                    } else {
                        PetSortPath::Radix
                    },
                ))
            }
            Some(g) => self
                .pet_launcher(g)
                .round_trip(singles, |p, a, b, n| p.sort_auto(a, b, 0, n)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn runs_of(times: &[Vec<u32>]) -> (Vec<Single>, Vec<u32>) {
        let mut v = Vec::new();
        let mut s = vec![0u32];
        for (r, ts) in times.iter().enumerate() {
            let mut ts = ts.clone();
            ts.sort_unstable();
            for (i, &t) in ts.iter().enumerate() {
                v.push(Single {
                    crystal: (r * 100_000 + i) as u32,
                    energy: 0.0,
                    time: t as f64,
                });
            }
            s.push(v.len() as u32);
        }
        (v, s)
    }

    #[test]
    fn sampling_bound_fits_the_tiles() {
        for tile in [k::MW_TILE, k::MW_WIDE_TILE, 1024] {
            for runs in 1..=k::MW_MAX_RUNS {
                for div in [2, 3] {
                    let (step, every) = k::mw_sampling(runs, tile, div);
                    assert!(step >= 1 && every >= 1, "runs {runs} tile {tile}");
                    assert!(
                        every * step + runs * (step - 1) <= tile,
                        "runs {runs} tile {tile}"
                    );
                }
            }
        }
        assert_eq!(k::mw_sampling(256, k::MW_TILE, 2), (9, 284));
        assert_eq!(k::mw_sampling(256, k::MW_TILE, 3), (6, 554));
        assert_eq!(k::mw_sampling(2, k::MW_TILE, 2), (1152, 2));
    }

    #[test]
    fn radix_plan_bits_and_limit() {
        let plan = |ts: &[f64], runs, limit| {
            let ks: Vec<u64> = ts.iter().map(|&t| k::time_key(t)).collect();
            let (a, b, c, d) = ks
                .iter()
                .fold((u64::MAX, 0, u64::MAX, 0), |(a, b, c, d), &x| {
                    (x.min(a), x.max(b), c & x, d | x)
                });
            k::mw_radix_plan(a, b, c, d, runs, limit)
        };
        let t0 = 2f64.powi(52);
        // Integers of one binade above 2^52: unit steps, span exactly 20 and 21 bits.
        let at = [t0, t0 + 1.0, t0 + ((1 << 20) - 1) as f64];
        let over = [t0, t0 + 1.0, t0 + (1 << 20) as f64];
        assert_eq!(plan(&at, 256, 20), Some((0, 20)));
        assert_eq!(plan(&over, 256, 20), None);
        assert_eq!(plan(&over, 256, 21), Some((0, 21)));
        // Integral times in ps of one binade (2^39..2^40): 13 common low bits.
        let ps = [6e11, 6e11 + 1.0, 6e11 + 3.2e8];
        assert_eq!(plan(&ps, 256, 64), Some((13, 29)));
        // All equal, or no key: no pass.
        assert_eq!(plan(&[3.5; 4], 2, 1), Some((0, 0)));
        assert_eq!(plan(&[], 2, 1), Some((0, 0)));
        // Limit 0: the merge rounds only.
        assert_eq!(plan(&[3.5; 4], 2, 0), None);
        // More passes than merge rounds: rounds (two runs merge in one round).
        assert_eq!(plan(&at, 2, 64), None);
        assert_eq!(plan(&[t0, t0 + 255.0], 2, 64), Some((0, 8)));
        assert_eq!(plan(&[-f64::MAX, f64::MAX], 256, 64), Some((0, 64)));
        assert_eq!(plan(&[-f64::MAX, f64::MAX], 128, 64), None);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// The split found through the samples equals the plain search.
        #[test]
        fn sampled_split_equals_the_search(
            mut run in prop::collection::vec(0u32..40, 0..200),
            step in 1u32..20,
            t in 0u32..45,
            srun in 0u32..3,
            pos in 0u32..210,
        ) {
            run.sort_unstable();
            let len = run.len() as u32;
            let key = k::time_key(t as f64);
            let samples: Vec<u32> = run.iter().copied().step_by(step as usize).collect();
            let want = k::mw_split(1, len, srun, pos, key, |q| run[q as usize] as f64);
            let got = k::mw_split_sampled(
                1,
                len,
                srun,
                pos,
                key,
                step,
                |j| samples[j as usize] as f64,
                |q| run[q as usize] as f64,
            );
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn plan_shrinks_to_one_tile() {
        let s: Vec<u32> = (0..=256).map(|r| r * 65_536).collect();
        let plan = merge_plan(&s, k::MW_TILE);
        assert!(plan.len() >= 2 && plan.len() <= 6, "{}", plan.len());
        assert!(plan.last().unwrap().len() <= k::MW_TILE);
        for w in plan.windows(2) {
            assert!(w[1].len() < w[0].len());
            assert_eq!(w[1].runs(), w[0].runs());
        }
    }

    #[test]
    fn adversarial_segments_fit() {
        let tile = 1600;
        // All times equal, 256 runs.
        let (v, s) = runs_of(&vec![vec![7; 40]; 256]);
        assert_eq!(
            merge_runs_emulated(&v, &s, tile, k::MW_RADIX_BITS).unwrap(),
            crate::pet::cpu::sort(&v).unwrap()
        );
        // Identical sequences in every run (each run's S - 1 hidden singles in one segment).
        let (v, s) = runs_of(&vec![(0..300).collect(); 200]);
        assert_eq!(
            merge_runs_emulated(&v, &s, tile, k::MW_RADIX_BITS).unwrap(),
            crate::pet::cpu::sort(&v).unwrap()
        );
        // One huge run and 255 tiny ones packed just after one of its times.
        let mut t = vec![(0..20_000).map(|x| 2 * x).collect::<Vec<u32>>()];
        t.extend((0..255).map(|r| vec![10_001 + (r % 3); 3]));
        let (v, s) = runs_of(&t);
        assert_eq!(
            merge_runs_emulated(&v, &s, tile, k::MW_RADIX_BITS).unwrap(),
            crate::pet::cpu::sort(&v).unwrap()
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn emulated_merge_equals_the_stable_sort(
            times in prop::collection::vec(prop::collection::vec(0u32..50, 0..40), 1..300),
            tile in 1536u32..3000,
        ) {
            let (v, s) = runs_of(&times);
            for bits in [0, 3, k::MW_RADIX_BITS] {
                let got = merge_runs_emulated(&v, &s, tile, bits).unwrap();
                prop_assert_eq!(got, crate::pet::cpu::sort(&v).unwrap());
            }
        }

        /// The radix path of a segment equals the stable sort, for times of every kind
        /// (integral ones of one binade share low bits: `shift > 0`).
        #[test]
        fn segment_radix_equals_the_stable_sort(
            raw in prop::collection::vec((0u64..1 << 40, 0u8..4), 1..300),
            base in prop::sample::select(vec![0.0f64, 1e12, -3.5e9, 2f64.powi(52)]),
            runs in 2u32..=256,
        ) {
            let seg: Vec<Single> = raw
                .iter()
                .enumerate()
                .map(|(i, &(x, kind))| Single {
                    crystal: i as u32,
                    energy: 0.0,
                    time: match kind {
                        0 => base + (x % 1000) as f64,
                        1 => base + x as f64,
                        2 => base + x as f64 * 0.125,
                        _ => f64::from_bits(x),
                    },
                })
                .collect();
            let mut want = seg.clone();
            want.sort_by(|a, b| a.time.partial_cmp(&b.time).unwrap());
            if let Some(got) = segment_radix_emulated(&seg, runs, 64) {
                prop_assert_eq!(got, want);
            }
        }

        /// The bucket path of a segment equals the stable sort: spans from a few bits to
        /// 50 (slot words compared in 32 or 64 bits), ties, small and large bucket bounds.
        #[test]
        fn segment_bucket_equals_the_stable_sort(
            raw in prop::collection::vec(0u64..1 << 50, 1..2000),
            kind in 0u8..5,
            wide in prop::bool::ANY,
            bucket_max in prop::sample::select(vec![1u32, 4, 64, 10_000]),
        ) {
            let t0 = 2f64.powi(52);
            let seg: Vec<Single> = raw
                .iter()
                .enumerate()
                .map(|(i, &x)| Single {
                    crystal: i as u32,
                    energy: 0.0,
                    time: match kind {
                        0 => t0 + (x % 1000) as f64,
                        1 => t0 + (x >> 21) as f64,
                        2 => t0 + (x % 50) as f64,
                        3 => 6e11 + (x >> 21) as f64,
                        _ => t0 + x as f64,
                    },
                })
                .collect();
            let mut want = seg.clone();
            want.sort_by(|a, b| a.time.partial_cmp(&b.time).unwrap());
            let bb = k::mw_bucket_bits(if wide { k::MW_WIDE_THREADS } else { k::MW_THREADS });
            let got = segment_bucket_emulated(&seg, 256, 64, bucket_max, bb);
            // Only an overflowing bucket sends it back (spans of at most 50 bits).
            prop_assert!(got.is_some() || bucket_max < 10_000);
            if let Some(got) = got {
                prop_assert_eq!(got, want);
            }
        }
    }

    #[test]
    fn bucket_plan_bits_and_items() {
        // 4096 buckets narrow, 8192 wide.
        assert_eq!(k::mw_bucket_bits(k::MW_THREADS), 12);
        assert_eq!(k::mw_bucket_bits(k::MW_WIDE_THREADS), 13);
        // Spans up to 50 bits (a key and a 14-bit local index in a u64).
        assert_eq!(k::mw_bucket_plan(50, 64, 13), Some(37));
        assert_eq!(k::mw_bucket_plan(51, 64, 13), None);
        assert_eq!(k::mw_bucket_plan(31, 64, 13), Some(18));
        assert_eq!(k::mw_bucket_plan(14, 64, 13), Some(1));
        assert_eq!(k::mw_bucket_plan(13, 64, 13), Some(0));
        assert_eq!(k::mw_bucket_plan(0, 64, 13), Some(0));
        assert_eq!(k::mw_bucket_plan(20, 0, 13), None);
        // Bucket = top bits, slot word = key then the local index.
        assert_eq!(
            k::mw_bucket_item(0b101_1101, 4, 9),
            (0b101, (0b101_1101 << 14) | 9)
        );
        assert_eq!(k::mw_bucket_item(8191, 0, 3), (8191, (8191 << 14) | 3));
        let x = (1u64 << 50) - 1;
        assert_eq!(k::mw_bucket_item(x, 37, (1 << 14) - 1), (8191, u64::MAX));
        // The bench's segments: times in ps of one binade, span 29 bits: the bucket path.
        let keys = [6e11, 6e11 + 1.0, 6e11 + 3.2e8].map(k::time_key);
        let (shift, bits) = k::mw_radix_plan(
            keys[0],
            keys[2],
            keys.iter().fold(u64::MAX, |a, &b| a & b),
            keys.iter().fold(0, |a, &b| a | b),
            256,
            64,
        )
        .unwrap();
        assert_eq!((shift, bits), (13, 29));
        assert_eq!(k::mw_bucket_plan(bits, k::MW_BUCKET_MAX, 13), Some(16));
    }

    #[test]
    fn segment_bucket_overflow_and_all_equal() {
        // All equal: one bucket of every key, over any bound below the segment.
        let seg: Vec<Single> = (0..100)
            .map(|i| Single {
                crystal: i,
                energy: 0.0,
                time: 3.5,
            })
            .collect();
        assert!(segment_bucket_emulated(&seg, 256, 64, 64, 13).is_none());
        assert_eq!(
            segment_bucket_emulated(&seg, 256, 64, 100, 13).unwrap(),
            seg
        );
        // Exactly the bound in one bucket, then one over (integers above 2^52: unit steps,
        // span 20 bits, buckets of 256 or 128: the keys t0 + 512 m at most 2 per bucket).
        let t0 = 2f64.powi(52);
        let mk = |k: usize| -> Vec<Single> {
            let mut v: Vec<Single> = (0..1000u32)
                .map(|j| Single {
                    crystal: j,
                    energy: 0.0,
                    time: t0 + (512 * (j % 2047)) as f64,
                })
                .collect();
            v.extend((0..k as u32).map(|j| Single {
                crystal: 5000 + j,
                energy: 0.0,
                time: t0 + (512 * 2047 + 5) as f64,
            }));
            v
        };
        let seg = mk(64);
        let mut want = seg.clone();
        want.sort_by(|a, b| a.time.partial_cmp(&b.time).unwrap());
        for bb in [12, 13] {
            assert_eq!(
                segment_bucket_emulated(&seg, 256, 64, 64, bb).unwrap(),
                want
            );
            assert!(segment_bucket_emulated(&mk(65), 256, 64, 64, bb).is_none());
        }
    }
}
