//! The [`PetLauncher`]'s conversion, sorts and coincidences (the merges are in `merge.rs`),
//! device-resident buffers, and the GPU side of the streamed chain.

use cudarc::driver::{CudaEvent, CudaSlice};
use detkit_gpu::pet::{self as k, Coincidence, Single};
use std::sync::Arc;

use super::cpu::{CoincideConfig, ConvertStats};
use super::launch::PetLauncher;
use super::*;
use crate::cuda::{cfg, DeviceVec, GpuContext, Record};
use crate::error::{invalid, DriverContext, Error, Result};
use crate::sort::SortOptions;

// GPU launchers
// ---------------------------------------------------------------------------------------

/// Singles on the device (a typed device vector: see [`Record`]).
pub type SinglesBuffer = DeviceVec<Single>;

/// Coincidence pairs on the device (a typed device vector).
pub type PairsBuffer = DeviceVec<Coincidence>;

/// Coincidence pairs in pinned host memory (the elements of a [`PairsBuffer`]).
type PinnedPairs = cudarc::driver::PinnedHostSlice<Record<Coincidence>>;

/// Reusable buffers of [`PetLauncher::sort_radix`] (grown on demand).
#[derive(Default)]
pub(crate) struct PetRadixTemp {
    keys: Option<CudaSlice<u64>>,
    sorted: Option<CudaSlice<u64>>,
    index: Option<CudaSlice<u32>>,
    /// `u32` keys (integer times spanning less than 2^32) and their sorted copy.
    keys32: Option<CudaSlice<u32>>,
    sorted32: Option<CudaSlice<u32>>,
    /// The `RANGE_WORDS` words the time-range kernel reduces into, reset before each use.
    range: Option<CudaSlice<u64>>,
}

/// Which keys the radix path sorts, from the time range's words: `(mode, base, bits)`, or
/// `None` when every time is equal (nothing to sort). Integral times (every converted
/// single: ticks) are sorted by their offset from the smallest, as `u32` when they span less
/// than 2^32 (4 passes of 8 bits instead of up to 8 over the `f64` bits), else as `u64` when
/// that needs fewer bits than the float keys.
pub(crate) fn radix_plan(w: &[u64]) -> Option<(u32, u64, u32)> {
    let bits_f = 64 - (w[0] ^ w[1]).leading_zeros();
    if bits_f == 0 {
        return None;
    }
    if w[4] == 0 && w[2] <= w[3] {
        let (lo, hi) = ((w[2] ^ 1 << 63) as i64, (w[3] ^ 1 << 63) as i64);
        let span = hi.wrapping_sub(lo) as u64;
        let bits_i = 64 - span.leading_zeros();
        if bits_i <= 32 {
            return Some((k::KEYS_INT32, lo as u64, bits_i));
        }
        if bits_i < bits_f {
            return Some((k::KEYS_INT64, lo as u64, bits_i));
        }
    }
    Some((k::KEYS_FLOAT, 0, bits_f))
}

/// Whether the time range's smallest and largest keys (words 0 and 1) are finite times:
/// every time is then finite (a NaN's key lies beyond the infinities').
pub(crate) fn range_finite(w: &[u64]) -> bool {
    let time = |key: u64| {
        let bits = if key >> 63 == 1 { key ^ 1 << 63 } else { !key };
        f64::from_bits(bits)
    };
    time(w[0]).is_finite() && time(w[1]).is_finite()
}

/// A scanner's parameters and tables on the device.
pub struct DeviceScanner {
    position: CudaSlice<u8>,
    energy: CudaSlice<f32>,
    /// The parameters, on the host.
    pub host: ScannerParams,
}

pub(crate) fn check_u32_len(what: &'static str, n: usize) -> Result<()> {
    if n as u64 >= u32::MAX as u64 {
        return Err(invalid(
            what,
            format!("{n} items; at most 2^32 - 2 per launch"),
        ));
    }
    Ok(())
}

/// Copies bytes into a vector of `T` (any alignment of `bytes`; whole elements only).
/// The checks of the two device sorts: `n < 2^32 - 1` singles past `off` in both buffers.
/// `Ok(false)` when there is nothing to sort (`n <= 1`).
fn sort_needed(a: &SinglesBuffer, b: &SinglesBuffer, off: usize, n: usize) -> Result<bool> {
    check_u32_len("singles to sort", n)?;
    if a.len() < off + n || b.len() < off + n {
        return Err(invalid("sort buffers", "shorter than off + n singles"));
    }
    Ok(n > 1)
}

/// Grows `slot` to hold at least `n` elements (at least one), reallocating zeroed when short.
pub(crate) fn ensure_len<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
    g: &GpuContext,
    slot: &mut Option<CudaSlice<T>>,
    n: usize,
) -> Result<()> {
    if slot.as_ref().is_none_or(|b| b.len() < n) {
        *slot = Some(g.zeros(n.max(1))?);
    }
    Ok(())
}

pub(crate) fn pod_vec<T: bytemuck::Pod>(bytes: &[u8]) -> Vec<T> {
    let mut v = vec![T::zeroed(); bytes.len() / std::mem::size_of::<T>()];
    bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(bytes);
    v
}

impl PetLauncher<'_> {
    /// Uploads a scanner.
    pub fn load_scanner(&self, s: &Scanner) -> Result<DeviceScanner> {
        Ok(DeviceScanner {
            position: self.upload(&s.position)?,
            energy: self.upload(&s.energy)?,
            host: s.params,
        })
    }

    /// Converts `n` frames (`frames`: `16 n` bytes) into `out[..]` (accepted singles, input
    /// order) and `stats` (`STAT_WORDS` words). Asynchronous; read `stats` afterwards.
    pub fn convert(
        &self,
        frames: &CudaSlice<u8>,
        n: usize,
        scanner: &DeviceScanner,
        out: &mut SinglesBuffer,
        out_offset: usize,
        stats: &mut CudaSlice<u32>,
    ) -> Result<()> {
        check_u32_len("frames", n)?;
        if frames.len() < 16 * n || out.len() < out_offset + n || stats.len() < k::STAT_WORDS {
            return Err(invalid("convert buffers", "shorter than the frame count"));
        }
        // Statistics by device memsets (no host copy): zero, the first bad frame at
        // u32::MAX, the order check's watermark (a minimum by atomics) at u64::MAX.
        self.fill_u32(stats, k::STAT_WORDS, 0)?;
        self.fill_u32_range(stats, k::STAT_FIRST_BAD..k::STAT_FIRST_BAD + 1, u32::MAX)?;
        self.fill_u32_range(stats, k::STAT_MARK_LO..k::STAT_MARK_LO + 2, u32::MAX)?;
        if n == 0 {
            return Ok(());
        }
        let tiles = (n as u64).div_ceil(k::CONVERT_TILE);
        let mut lb = self.take_lookback::<u32>(tiles)?;
        let n64 = n as u64;
        let mut outv = out.slice_mut(out_offset..);
        let params = k::PetConvertFramesParams {
            frames: self.ptr(frames).cast(),
            n: n64,
            position: self.ptr(&scanner.position),
            correction: self.ptr(&scanner.energy),
            out: self.ptr_mut(&mut outv).cast(),
            stats: self.ptr_mut(&mut *stats),
            flags: self.ptr_mut(&mut lb.flags),
            aggregates: self.ptr_mut(&mut lb.agg),
            inclusive: self.ptr_mut(&mut lb.inc),
            consts: k::ConvertConsts::new(&scanner.host),
        };
        // SAFETY: CONVERT_THREADS threads, one block per tile, `convert_smem_bytes`; n < 2^32;
        // frames hold 16 n bytes (256-byte aligned cudarc allocation); the tables were
        // uploaded from a validated `Scanner` (sizes match its parameters); `out` holds n
        // singles past the offset (checked); stats initialised above; look-back zeroed.
        let r = unsafe {
            self.launch(
                k::KERNEL_CONVERT,
                cfg(tiles, k::CONVERT_THREADS, k::convert_smem_bytes()),
                &params,
            )
        };
        self.put_lookback(lb);
        r
    }

    /// Checks that every BDM's times in `n` frames (after the BDMs' latest times in
    /// `order`'s state) never go down, keeps the latest times for the next chunk and writes
    /// the verdict and the watermark into `stats` (after the conversion initialised them:
    /// read with [`order_verdict`]). Asynchronous, on the compute stream; `n == 0` launches
    /// nothing.
    pub(crate) fn order_check(
        &self,
        frames: &CudaSlice<u8>,
        n: usize,
        bdms: u32,
        order: &mut OrderCheck,
        stats: &mut CudaSlice<u32>,
    ) -> Result<()> {
        let blocks = (n as u64).div_ceil(k::ORDER_BLOCK_FRAMES) as usize;
        if blocks > order.blocks || frames.len() < 16 * n || stats.len() < k::STAT_WORDS {
            return Err(invalid(
                "order check buffers",
                "shorter than the frame count",
            ));
        }
        if n == 0 {
            return Ok(());
        }
        let (cur, next) = order.state.split_at_mut(1);
        let (state_in, state_out) = if order.cur == 0 {
            (&cur[0], &mut next[0])
        } else {
            (&next[0], &mut cur[0])
        };
        let pb = k::PetOrderBlocksParams {
            frames: self.ptr(frames).cast(),
            n: n as u64,
            first: self.ptr_mut(&mut order.first),
            last: self.ptr_mut(&mut order.last),
            seen: self.ptr_mut(&mut order.seen),
            stats: self.ptr_mut(&mut *stats),
            bdms,
            _pad: 0,
        };
        // SAFETY: ORDER_THREADS threads, one block per ORDER_BLOCK_FRAMES frames (at most
        // `order.blocks`: checked), `order_smem_bytes`; frames hold 16 n bytes (256-byte
        // aligned cudarc allocation); the summaries hold `order.blocks` blocks; stats
        // STAT_WORDS words (checked).
        unsafe {
            self.launch(
                k::KERNEL_ORDER_BLOCKS,
                cfg(blocks as u64, k::ORDER_THREADS, k::order_smem_bytes()),
                &pb,
            )?;
        }
        let pj = k::PetOrderJoinParams {
            first: self.ptr(&order.first),
            last: self.ptr(&order.last),
            seen: self.ptr(&order.seen),
            state_in: self.ptr(state_in),
            state_out: self.ptr_mut(state_out),
            stats: self.ptr_mut(&mut *stats),
            blocks: blocks as u32,
            bdms,
        };
        // SAFETY: one block of ORDER_JOIN_THREADS, `order_join_smem_bytes`; the summaries of
        // `blocks` blocks written by the launch above (same stream); the two states are
        // distinct allocations of ORDER_STATE_WORDS words; stats as above.
        unsafe {
            self.launch(
                k::KERNEL_ORDER_JOIN,
                cfg(1, k::ORDER_JOIN_THREADS, k::order_join_smem_bytes()),
                &pj,
            )?;
        }
        order.cur = 1 - order.cur;
        Ok(())
    }

    /// One merge pass from `src[off..off+n]` to `dst[off..off+n]`: runs of `width` (if > 0;
    /// `runs` unused) or the explicit boundaries `runs` (relative to `off`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn merge_pass(
        &self,
        src: &SinglesBuffer,
        dst: &mut SinglesBuffer,
        off: usize,
        n: usize,
        width: u64,
        runs: &CudaSlice<u32>,
        nruns: u64,
    ) -> Result<()> {
        let tiles = (n as u64).div_ceil(k::SORT_TILE as u64);
        let srcv = src.slice(off..off + n);
        let mut dstv = dst.slice_mut(off..off + n);
        let n64 = n as u64;
        let params = k::PetMergeSortPassParams {
            input: self.ptr(&srcv).cast(),
            output: self.ptr_mut(&mut dstv).cast(),
            n: n64,
            width,
            runs: self.ptr(runs),
            nruns,
        };
        // SAFETY: SORT_THREADS threads, one block per output tile, `sort_smem_bytes`; source
        // and destination are distinct buffers holding n singles; with width == 0, `runs`
        // holds nruns + 1 boundaries (the caller built them).
        unsafe {
            self.launch(
                k::KERNEL_SORT_PASS,
                cfg(tiles, k::SORT_THREADS, k::sort_smem_bytes()),
                &params,
            )
        }
    }

    /// Stable sort by time of the singles `a[off..off+n]`, with `b[off..off+n]` as scratch.
    /// Returns `true` when the result is in `b`, `false` when it is in `a`. Times must be
    /// finite (the host API checks; the kernels stay in bounds whatever the data).
    pub fn sort_merge(
        &self,
        a: &mut SinglesBuffer,
        b: &mut SinglesBuffer,
        off: usize,
        n: usize,
    ) -> Result<bool> {
        if !sort_needed(a, b, off, n)? {
            return Ok(false);
        }
        let tiles = (n as u64).div_ceil(k::SORT_TILE as u64);
        {
            let av = a.slice(off..off + n);
            let mut bv = b.slice_mut(off..off + n);
            let n64 = n as u64;
            let params = k::PetMergeSortBlockParams {
                input: self.ptr(&av).cast(),
                output: self.ptr_mut(&mut bv).cast(),
                n: n64,
            };
            // SAFETY: SORT_THREADS threads, one block per tile, `sort_smem_bytes`; a and b
            // are distinct and hold n singles past `off`.
            let r = unsafe {
                self.launch(
                    k::KERNEL_SORT_BLOCK,
                    cfg(tiles, k::SORT_THREADS, k::sort_smem_bytes()),
                    &params,
                )
            };
            r?;
        }
        let mut in_b = true;
        let mut width = k::SORT_TILE as u64;
        let unused = self.zeros::<u32>(1)?;
        while width < n as u64 {
            if in_b {
                self.merge_pass(b, a, off, n, width, &unused, 0)?;
            } else {
                self.merge_pass(a, b, off, n, width, &unused, 0)?;
            }
            in_b = !in_b;
            width *= 2;
        }
        Ok(in_b)
    }

    /// Stable sort by time of the singles `a[off..off+n]` into `b[off..off+n]` on the radix
    /// sort: one kernel reduces the times' range (order-preserving `u64` keys of the `f64`s,
    /// and the smallest and largest integer when every time is an integer, as converted
    /// singles' ticks are), which is read back (one round trip) to pick the keys
    /// ([`radix_plan`]): integer offsets from the smallest time, as `u32` when they span
    /// less than 2^32, or the float keys' bits below their highest differing bit (every key
    /// lies between the smallest and largest, so shares the bits above). A second kernel
    /// writes the keys; an argsort of them (`ceil(bits / 8)` onesweep passes) and one gather
    /// of the 16-byte singles follow. Returns `true` when the result is in `b`, `false` when
    /// it is in `a` (all times equal, or `n <= 1`). Times must be finite.
    pub fn sort_radix(
        &self,
        a: &mut SinglesBuffer,
        b: &mut SinglesBuffer,
        off: usize,
        n: usize,
    ) -> Result<bool> {
        if !sort_needed(a, b, off, n)? {
            return Ok(false);
        }
        Ok(self
            .sort_radix_checked(a, b, off, n, false)?
            .unwrap_or(false))
    }

    /// [`PetLauncher::sort_radix`] that, with `check`, returns `None` (nothing sorted) when a
    /// time is not finite (the smallest or largest key of the range is not a finite time):
    /// the device-view calls' check, which then names the single on the host.
    pub(crate) fn sort_radix_checked(
        &self,
        a: &SinglesBuffer,
        b: &mut SinglesBuffer,
        off: usize,
        n: usize,
        check: bool,
    ) -> Result<Option<bool>> {
        // The buffers leave the scratch map while the sort (which keeps its own) runs.
        let mut t = self.with_scratch(std::mem::take::<PetRadixTemp>);
        let r = self.sort_radix_in(&mut t, a, b, off, n, check);
        self.with_scratch(|s: &mut PetRadixTemp| *s = t);
        r
    }

    /// Whether every time of `a[off..off + n]` is finite: the time-range kernel and one
    /// read-back (the device-view coincidence call's check).
    pub(crate) fn times_finite(&self, a: &SinglesBuffer, off: usize, n: usize) -> Result<bool> {
        if n == 0 {
            return Ok(true);
        }
        let mut t = self.with_scratch(std::mem::take::<PetRadixTemp>);
        let r = self.time_range(&mut t, a, off, n);
        self.with_scratch(|s: &mut PetRadixTemp| *s = t);
        Ok(range_finite(&r?))
    }

    /// The time-range words of `a[off..off + n]` (`n >= 1`; one kernel, one read-back).
    fn time_range(
        &self,
        t: &mut PetRadixTemp,
        a: &SinglesBuffer,
        off: usize,
        n: usize,
    ) -> Result<Vec<u64>> {
        ensure_len(self, &mut t.range, k::RANGE_WORDS)?;
        let range = t.range.as_mut().expect("grown");
        self.stream()
            .memcpy_htod(&k::RANGE_INIT, range)
            .ctx("resetting the time range")?;
        let av = a.slice(off..off + n);
        let blocks = (n as u64)
            .div_ceil(k::KEYS_THREADS as u64)
            .clamp(1, self.sm_count() as u64 * 8);
        let params = k::PetTimeRangeParams {
            singles: self.ptr(&av).cast(),
            range: self.ptr_mut(range),
            n: n as u64,
        };
        // SAFETY: KEYS_THREADS threads, grid-stride; av holds n singles, range RANGE_WORDS
        // words set to RANGE_INIT.
        unsafe {
            self.launch(
                k::KERNEL_TIME_RANGE,
                cfg(blocks, k::KEYS_THREADS, 0),
                &params,
            )?
        };
        self.download(range)
    }

    fn sort_radix_in(
        &self,
        t: &mut PetRadixTemp,
        a: &SinglesBuffer,
        b: &mut SinglesBuffer,
        off: usize,
        n: usize,
        check: bool,
    ) -> Result<Option<bool>> {
        let w = self.time_range(t, a, off, n)?;
        if check && !range_finite(&w) {
            return Ok(None);
        }
        ensure_len(self, &mut t.index, n)?;
        let av = a.slice(off..off + n);
        let blocks = (n as u64)
            .div_ceil(k::KEYS_THREADS as u64)
            .clamp(1, self.sm_count() as u64 * 8);
        let Some((mode, base, bits)) = radix_plan(&w) else {
            // Every time equal: the stable order is the input order.
            return Ok(Some(false));
        };
        let index = t.index.as_mut().expect("grown");
        let keys_ptr = if mode == k::KEYS_INT32 {
            ensure_len(self, &mut t.keys32, n)?;
            ensure_len(self, &mut t.sorted32, n)?;
            self.ptr_mut(t.keys32.as_mut().expect("grown")).cast()
        } else {
            ensure_len(self, &mut t.keys, n)?;
            ensure_len(self, &mut t.sorted, n)?;
            self.ptr_mut(t.keys.as_mut().expect("grown"))
        };
        let params = k::PetTimeKeysParams {
            singles: self.ptr(&av).cast(),
            keys: keys_ptr,
            n: n as u64,
            base,
            mode,
            _pad: 0,
        };
        // SAFETY: KEYS_THREADS threads, grid-stride; av holds n singles; keys holds n keys of
        // the mode's width (u32 buffers in mode KEYS_INT32, u64 otherwise, grown above).
        unsafe {
            self.launch(
                k::KERNEL_TIME_KEYS,
                cfg(blocks, k::KEYS_THREADS, 0),
                &params,
            )?
        };
        let opts = SortOptions::bits(0, bits);
        if mode == k::KEYS_INT32 {
            let (Some(keys), Some(sorted)) = (t.keys32.as_ref(), t.sorted32.as_mut()) else {
                unreachable!("grown above");
            };
            self.sort_index_device(keys, sorted, index, n, opts)?;
        } else {
            let (Some(keys), Some(sorted)) = (t.keys.as_ref(), t.sorted.as_mut()) else {
                unreachable!("grown above");
            };
            self.sort_index_device(keys, sorted, index, n, opts)?;
        }
        let mut bv = b.slice_mut(off..off + n);
        let params = k::PetGatherSinglesParams {
            input: self.ptr(&av).cast(),
            index: self.ptr(index),
            output: self.ptr_mut(&mut bv).cast(),
            n: n as u64,
        };
        // SAFETY: KEYS_THREADS threads, grid-stride; av and bv hold n singles in distinct
        // allocations; index is the argsort's permutation of 0..n.
        unsafe { self.launch(k::KERNEL_GATHER, cfg(blocks, k::KEYS_THREADS, 0), &params)? };
        Ok(Some(true))
    }

    /// Coincidences of the sorted singles `s[off..off+n]` whose windows are complete for
    /// `watermark` (`f64::INFINITY`: all). Returns the pairs (time order) and the index
    /// (relative to `off`) of the first incomplete opener. Unsorted or NaN input is a typed
    /// error naming the first offending single.
    pub fn coincide(
        &self,
        s: &SinglesBuffer,
        off: usize,
        n: usize,
        c: &CoincideConfig,
        watermark: f64,
    ) -> Result<(Vec<Coincidence>, usize)> {
        let mut scratch = CoincideScratch::default();
        self.coincide_with(&mut scratch, s, off, n, c, watermark)
    }

    /// [`PetLauncher::coincide`] with reusable scratch buffers (grown on demand),
    /// so that repeated calls (chunks of a stream, timed runs) allocate nothing.
    pub fn coincide_with(
        &self,
        scratch: &mut CoincideScratch,
        s: &SinglesBuffer,
        off: usize,
        n: usize,
        c: &CoincideConfig,
        watermark: f64,
    ) -> Result<(Vec<Coincidence>, usize)> {
        let (total, resume) = self.coincide_resident(scratch, s, off, n, c, watermark)?;
        let mut out = vec![<Coincidence as bytemuck::Zeroable>::zeroed(); total];
        self.download_pairs(scratch, &mut out)?;
        Ok((out, resume))
    }

    /// Copies the first `out.len()` pairs of the last [`PetLauncher::coincide_resident`]
    /// into `out` (a caller's reusable buffer, e.g. in pinned host memory): no allocation.
    pub fn download_pairs(&self, scratch: &CoincideScratch, out: &mut [Coincidence]) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        let pairs = scratch
            .pairs
            .as_ref()
            .filter(|p| p.len() >= out.len())
            .ok_or_else(|| invalid("pairs", "more pairs asked for than the last call made"))?;
        self.stream()
            .memcpy_dtoh(&pairs.slice(0..out.len()), Record::slice_mut(out))
            .ctx("copying the pairs")?;
        self.synchronize()
    }

    /// The coincidences of [`PetLauncher::coincide_with`], left on the device: the
    /// first `total` pairs of [`CoincideScratch::pairs`] (32 bytes each, time order).
    /// Returns `(total, resume)`. One kernel (`pet_coincide_tiles`: windows, counts, their
    /// scan by decoupled look-back, pairs) and one read-back of the status words; for
    /// `TakeAllGoods`, whose pairs have no bound known before, a launch that finds more pairs
    /// than the buffer holds is repeated once with a buffer of the size it reported.
    pub fn coincide_resident(
        &self,
        scratch: &mut CoincideScratch,
        s: &SinglesBuffer,
        off: usize,
        n: usize,
        c: &CoincideConfig,
        watermark: f64,
    ) -> Result<(usize, usize)> {
        let launch = self.coincide_enqueue(scratch, s, off, n, c, watermark)?;
        self.coincide_finish(scratch, s, launch)
    }

    /// The first half of [`PetLauncher::coincide_resident`]: checks the arguments and
    /// enqueues the coincidence kernel on the context's stream (the status words and the
    /// look-back flags are set by device memsets), without waiting for it. The pairs and the
    /// status stay in `scratch` until [`PetLauncher::coincide_finish`] reads the status,
    /// so the host can prepare the next chunk meanwhile. The singles must stay unchanged
    /// until then.
    pub fn coincide_enqueue(
        &self,
        scratch: &mut CoincideScratch,
        s: &SinglesBuffer,
        off: usize,
        n: usize,
        c: &CoincideConfig,
        watermark: f64,
    ) -> Result<CoincideLaunch> {
        c.validate()?;
        check_u32_len("singles to pair", n)?;
        if s.len() < off + n {
            return Err(invalid(
                "coincidence buffers",
                "shorter than off + n singles",
            ));
        }
        let bounded = k::policy_bounded(c.policy);
        let delayed = c.delay.is_some();
        // A one-pair-per-window policy yields at most n / 2 prompt pairs (disjoint windows
        // of two or more singles) or n delayed ones; TakeAllGoods starts from n (or the
        // buffer it has) and grows to what a launch reports.
        let capacity = match (bounded, delayed) {
            (true, true) => n,
            (true, false) => n / 2 + 1,
            (false, _) => n.max(scratch.pairs.as_ref().map_or(0, |p| p.len() / 4)),
        };
        static NEXT_LAUNCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let launch = CoincideLaunch {
            off,
            n,
            config: *c,
            watermark,
            capacity,
            id: NEXT_LAUNCH.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        };
        self.coincide_launch(scratch, s, &launch)?;
        Ok(launch)
    }

    /// Waits for a launch of [`PetLauncher::coincide_enqueue`] and reads its status (one
    /// read-back): typed errors for singles out of order or a window over the policies'
    /// limit; for `TakeAllGoods`, whose pairs have no bound known before, a launch that found
    /// more pairs than its buffer holds is repeated once with a buffer of the size it
    /// reported. Returns `(total, resume)` as [`PetLauncher::coincide_resident`] does.
    pub fn coincide_finish(
        &self,
        scratch: &mut CoincideScratch,
        s: &SinglesBuffer,
        mut launch: CoincideLaunch,
    ) -> Result<(usize, usize)> {
        if launch.id != scratch.launch_id {
            return Err(invalid(
                "coincidence launch",
                "finished with a scratch whose last launch is another one",
            ));
        }
        if launch.n == 0 {
            return Ok((0, 0));
        }
        loop {
            let status = scratch
                .status
                .as_ref()
                .ok_or_else(|| invalid("coincidence status", "no launch was enqueued"))?;
            let mut st = self.download(status)?;
            if !k::policy_bounded(launch.config.policy) {
                // The 64-bit sum (atomics) is the total; the scan's u32 total wraps past 2^32.
                st[k::CO_TOTAL_LO] = st[k::CO_SUM64_LO];
                st[k::CO_TOTAL_LO + 1] = st[k::CO_SUM64_LO + 1];
            }
            self.coincide_status_errors(s, launch.off, &st)?;
            let total =
                (st[k::CO_TOTAL_LO] as u64 | (st[k::CO_TOTAL_LO + 1] as u64) << 32) as usize;
            if total > launch.capacity {
                // Only TakeAllGoods (bounded policies cannot exceed their bound on sorted
                // input, and unsorted input is an error above): again, with room for all.
                launch.capacity = total;
                self.coincide_launch(scratch, s, &launch)?;
                continue;
            }
            return Ok((total, resume_of(&st, launch.n)));
        }
    }

    /// Enqueues one launch of the coincidence kernel for `launch` (nothing for no singles).
    fn coincide_launch(
        &self,
        scratch: &mut CoincideScratch,
        s: &SinglesBuffer,
        launch: &CoincideLaunch,
    ) -> Result<()> {
        let (off, n, c, capacity) = (launch.off, launch.n, &launch.config, launch.capacity);
        scratch.launch_id = launch.id;
        if n == 0 {
            return Ok(());
        }
        let sv = s.slice(off..off + n);
        let tiles = (n as u64).div_ceil(k::COINCIDE_TILE);
        ensure_len(self, &mut scratch.status, k::CO_WORDS)?;
        ensure_len(self, &mut scratch.pairs, capacity)?;
        let (pairs, status) = (
            scratch.pairs.as_mut().expect("grown"),
            scratch.status.as_mut().expect("grown"),
        );
        // Status: the first unsorted index and the first incomplete opener start at u32::MAX,
        // the rest at 0 (device memsets: no host copy, no wait).
        self.fill_u32(status, k::CO_WORDS, 0)?;
        self.fill_u32_range(status, k::CO_FIRST_UNSORTED..k::CO_RESUME + 1, u32::MAX)?;
        let mut lb = self.take_lookback::<u32>(tiles)?;
        let params = k::PetCoincideTilesParams {
            singles: self.ptr(&sv).cast(),
            n: n as u64,
            reach: c.reach(),
            delay: c.delay.unwrap_or(0.0),
            watermark: launch.watermark,
            pairs: self.ptr_mut(&mut *pairs).cast(),
            capacity: capacity as u64,
            status: self.ptr_mut(&mut *status),
            flags: self.ptr_mut(&mut lb.flags),
            aggregates: self.ptr_mut(&mut lb.agg),
            inclusive: self.ptr_mut(&mut lb.inc),
            delayed: c.delay.is_some() as u32,
            policy: c.policy as u32,
        };
        // Prompt killAll (the seed's rule) has its own build of the kernel, without the other
        // policies' code: fewer registers, more blocks per multiprocessor.
        let kernel = if c.delay.is_none() && c.policy == Policy::KillAll {
            k::KERNEL_COINCIDE_KILLALL
        } else {
            k::KERNEL_COINCIDE_TILES
        };
        // SAFETY: COINCIDE_THREADS threads, one block per tile, the kernels' shared memory (the
        // same for both builds); n < 2^32 (checked by the enqueue); the singles hold n (checked
        // there); pairs hold 4 capacity words and the kernel writes none at or past the
        // capacity; status set above (stream order); look-back arrays for `tiles` tiles with
        // zeroed flags.
        let r = unsafe {
            self.launch(
                kernel,
                cfg(tiles, k::COINCIDE_THREADS, k::coincide_smem_bytes()),
                &params,
            )
        };
        self.put_lookback(lb);
        r
    }

    /// The typed errors a coincidence status reports: a single out of order (or NaN), a
    /// window over the policies' limit, more pairs than one launch can index.
    fn coincide_status_errors(&self, s: &SinglesBuffer, off: usize, st: &[u32]) -> Result<()> {
        let bad = st[k::CO_FIRST_UNSORTED];
        if bad != u32::MAX {
            let i = bad as usize;
            let around = self
                .stream()
                .clone_dtoh(&s.slice(off + i.saturating_sub(1)..off + i + 1))
                .map(Record::unwrap_vec)
                .ctx("copying singles from the device")?;
            let detail = if around.last().is_some_and(|x| x.time.is_nan()) {
                format!("single {i} has time NaN")
            } else {
                format!(
                    "not sorted by time: single {i} (time {}) comes after single {} (time {})",
                    around[around.len() - 1].time,
                    i - 1,
                    around[0].time
                )
            };
            return Err(invalid("singles to pair", detail));
        }
        if st[k::CO_OVERSIZE] != 0 {
            return Err(Error::CapacityExceeded {
                what: "singles in one coincidence window (policies other than killAll)",
                needed: st[k::CO_OVERSIZE] as u64,
                capacity: k::MAX_MULTIPLE as u64,
            });
        }
        let total = st[k::CO_TOTAL_LO] as u64 | (st[k::CO_TOTAL_LO + 1] as u64) << 32;
        if total > u32::MAX as u64 {
            return Err(Error::CapacityExceeded {
                what: "coincidences of one launch",
                needed: total,
                capacity: u32::MAX as u64,
            });
        }
        Ok(())
    }

    pub(crate) fn upload_singles(&self, singles: &[Single]) -> Result<SinglesBuffer> {
        if singles.is_empty() {
            return self.zeros(1);
        }
        self.upload_records(singles)
    }
}

/// The first incomplete opener of a coincidence status (`n`: every window complete).
fn resume_of(st: &[u32], n: usize) -> usize {
    if st[k::CO_RESUME] == u32::MAX {
        n
    } else {
        st[k::CO_RESUME] as usize
    }
}

/// A coincidence launch enqueued by [`PetLauncher::coincide_enqueue`], to be finished by
/// [`PetLauncher::coincide_finish`] with the same scratch and singles.
#[derive(Debug, Clone, Copy)]
#[must_use = "a launch is finished by coincide_finish, which reads its status"]
pub struct CoincideLaunch {
    off: usize,
    n: usize,
    config: CoincideConfig,
    watermark: f64,
    capacity: usize,
    id: u64,
}

/// Reusable device buffers of the coincidence kernels.
#[derive(Default)]
pub struct CoincideScratch {
    pairs: Option<PairsBuffer>,
    status: Option<CudaSlice<u32>>,
    /// A number unique to the last launch enqueued on this scratch (0: none yet), so that a
    /// finish with another scratch's launch is an error, not another launch's status.
    launch_id: u64,
}

impl CoincideScratch {
    /// The pairs of the last [`PetLauncher::coincide_resident`] call on this scratch (its
    /// first `total`; `None` before any pair was made).
    pub fn pairs(&self) -> Option<&PairsBuffer> {
        self.pairs.as_ref()
    }
}

// ---------------------------------------------------------------------------------------

pub(crate) fn stats_from_words(st: &[u32], n: usize) -> ConvertStats {
    ConvertStats {
        frames: n as u64,
        accepted: st[k::STAT_ACCEPTED] as u64,
        rejected_energy: st[k::STAT_REJECTED_ENERGY] as u64,
        clamped: st[k::STAT_CLAMPED] as u64,
        bad_address: st[k::STAT_BAD_ADDRESS] as u64,
        first_bad_address: (st[k::STAT_FIRST_BAD] != u32::MAX)
            .then_some(st[k::STAT_FIRST_BAD] as u64),
    }
}

// ---------------------------------------------------------------------------------------

/// Synchronises a stream when dropped (errors ignored: a failed stream reports elsewhere).
struct FinishCopies(std::sync::Arc<cudarc::driver::CudaStream>);

impl Drop for FinishCopies {
    fn drop(&mut self) {
        let _ = self.0.synchronize();
    }
}

/// Host memory made readable by the device's copy engines for a while
/// ([`GpuContext::page_lock`]); unregistered when dropped.
pub struct PageLock<'a> {
    ptr: *mut std::ffi::c_void,
    registered: bool,
    _bytes: std::marker::PhantomData<&'a [u8]>,
}

impl Drop for PageLock<'_> {
    fn drop(&mut self) {
        if self.registered {
            // SAFETY: `ptr` was registered by `page_lock` and not unregistered since; every
            // copy reading it finished (the streamed chain synchronises its copy stream).
            let _ = unsafe { cudarc::driver::sys::cuMemHostUnregister(self.ptr) };
        }
    }
}

impl GpuContext {
    /// Whether `bytes` lie in page-locked memory (a pinned allocation, or memory registered
    /// with [`GpuContext::page_lock`]), which the copy engines read directly. A Rust slice
    /// lies inside one allocation, so its start tells for all of it.
    pub fn is_page_locked(&self, bytes: &[u8]) -> bool {
        use cudarc::driver::sys;
        if bytes.is_empty() || self.context().bind_to_thread().is_err() {
            return false;
        }
        let mut mem_type = 0u32;
        let mut attr = [sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE];
        let mut data = [(&mut mem_type as *mut u32).cast::<std::ffi::c_void>()];
        // SAFETY: one attribute, one `unsigned int` written into `mem_type`; the pointer is
        // only looked up, never accessed. Unlike `cuPointerGetAttribute`, this call answers
        // 0 (not an error) for memory the driver does not know (pageable memory).
        let r = unsafe {
            sys::cuPointerGetAttributes(
                1,
                attr.as_mut_ptr(),
                data.as_mut_ptr(),
                bytes.as_ptr() as sys::CUdeviceptr,
            )
        };
        r == sys::CUresult::CUDA_SUCCESS && mem_type == sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32
    }

    /// Page-locks `bytes` (read-only registration) so that asynchronous copies read them
    /// directly: `Some` when registered now or already page-locked (pinned allocations),
    /// `None` when the driver refuses (the caller then copies through its own buffers).
    /// Registering costs time proportional to the size (about 15 GB/s on the H200 host,
    /// `bench-pet`): worth it for a buffer used by several runs, not for one.
    pub fn page_lock<'a>(&self, bytes: &'a [u8]) -> Option<PageLock<'a>> {
        use cudarc::driver::sys;
        if bytes.is_empty() || self.context().bind_to_thread().is_err() {
            return None;
        }
        let ptr = bytes.as_ptr() as *mut std::ffi::c_void;
        if self.is_page_locked(bytes) {
            return Some(PageLock {
                ptr,
                registered: false,
                _bytes: std::marker::PhantomData,
            });
        }
        // SAFETY: `bytes` is valid for its length; a read-only registration lets the device
        // read it and never write it; the lock is undone before the borrow ends.
        let r = unsafe {
            sys::cuMemHostRegister_v2(ptr, bytes.len(), sys::CU_MEMHOSTREGISTER_READ_ONLY)
        };
        match r {
            sys::CUresult::CUDA_SUCCESS => Some(PageLock {
                ptr,
                registered: true,
                _bytes: std::marker::PhantomData,
            }),
            sys::CUresult::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED => Some(PageLock {
                ptr,
                registered: false,
                _bytes: std::marker::PhantomData,
            }),
            _ => None,
        }
    }
}

/// Buffers of the streamed chain, kept in the context between calls (pinned host memory is
/// slow to allocate: about 40 ms for the two 32 MiB frame buffers of 2^21-frame chunks).
#[derive(Default)]
pub(crate) struct PetStreamBuffers {
    /// Frame bytes per chunk that `pinned` and `dframes` hold.
    fbytes: usize,
    /// Singles that `a` and `b` hold (chunk + pending capacity).
    cap: usize,
    pinned: Vec<cudarc::driver::PinnedHostSlice<u8>>,
    dframes: Vec<CudaSlice<u8>>,
    a: Option<SinglesBuffer>,
    b: Option<SinglesBuffer>,
    stats: Option<CudaSlice<u32>>,
    /// Pairs copied out of the device (4 words each), pinned, grown on demand: two, so
    /// that the sink reads one chunk's pairs while the next chunk's are copied into the
    /// other.
    pairs: [Option<PinnedPairs>; 2],
    /// The boundaries of the merge of the pending run with a chunk's (three words).
    bounds: Option<CudaSlice<u32>>,
    copy: Option<std::sync::Arc<cudarc::driver::CudaStream>>,
    scratch: CoincideScratch,
    /// The last run's scanner and its tables on the device.
    scanner: Option<(Scanner, Arc<DeviceScanner>)>,
    /// The order check's block summaries and per-BDM state.
    order: Option<OrderCheck>,
}

/// Device buffers of the streamed chain's order check (`pet_order_blocks`,
/// `pet_order_join`): per-block summaries for one chunk, and the per-BDM state (latest time,
/// seen bit) before and after the chunk, swapped after each chunk.
pub(crate) struct OrderCheck {
    blocks: usize,
    first: CudaSlice<u64>,
    last: CudaSlice<u64>,
    seen: CudaSlice<u32>,
    state: [CudaSlice<u64>; 2],
    /// Which `state` holds the state before the next chunk.
    cur: usize,
}

impl OrderCheck {
    /// Buffers for chunks of up to `frames` frames; no BDM seen yet.
    pub(crate) fn new(g: &GpuContext, frames: usize) -> Result<Self> {
        let blocks = (frames as u64).div_ceil(k::ORDER_BLOCK_FRAMES).max(1) as usize;
        Ok(Self {
            blocks,
            first: g.zeros::<u64>(blocks * k::ORDER_BDMS)?,
            last: g.zeros::<u64>(blocks * k::ORDER_BDMS)?,
            seen: g.zeros::<u32>(blocks * k::ORDER_SEEN_WORDS)?,
            state: [
                g.zeros::<u64>(k::ORDER_STATE_WORDS)?,
                g.zeros::<u64>(k::ORDER_STATE_WORDS)?,
            ],
            cur: 0,
        })
    }

    /// Forgets every BDM's latest time (a new stream). Asynchronous, on the compute stream.
    pub(crate) fn reset(&mut self, g: &GpuContext) -> Result<()> {
        self.cur = 0;
        g.stream()
            .memset_zeros(&mut self.state[0])
            .ctx("resetting the order check")
    }

    /// The per-BDM latest times before the last checked chunk (a read-back, for the error
    /// of a chunk the device flagged).
    fn state_before_last(&self, g: &GpuContext) -> Result<Vec<Option<u64>>> {
        let w = g.download(&self.state[1 - self.cur])?;
        let seen: &[u32] = bytemuck::cast_slice(&w[k::ORDER_BDMS..]);
        Ok((0..k::ORDER_BDMS)
            .map(|b| (seen[b / 32] >> (b % 32) & 1 != 0).then_some(w[b]))
            .collect())
    }
}

/// What the order check of a chunk found (from the statistics words).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum OrderVerdict {
    /// Every BDM's times are in order; the watermark after the chunk.
    Ordered(f64),
    /// A BDM's time went down in the chunk (or against an earlier chunk).
    Disorder,
}

pub(crate) fn order_verdict(st: &[u32]) -> OrderVerdict {
    let flags = st[k::STAT_ORDER];
    if flags & k::STAT_ORDER_DISORDER != 0 {
        OrderVerdict::Disorder
    } else if flags & k::STAT_ORDER_MISSING != 0 {
        OrderVerdict::Ordered(f64::NEG_INFINITY)
    } else {
        let m = st[k::STAT_MARK_LO] as u64 | (st[k::STAT_MARK_LO + 1] as u64) << 32;
        OrderVerdict::Ordered(m as f64)
    }
}

/// Whether two scanners are equal (parameters, window, tables): tables that are the same
/// allocation (a clone of the scanner, or the same scanner again) are equal at once, others
/// are compared by several threads.
pub(crate) fn same_scanner(a: &Scanner, b: &Scanner) -> bool {
    use rayon::prelude::*;
    let same = |x: &[u8], y: &[u8]| {
        std::ptr::eq(x, y)
            || x.len() == y.len()
                && x.par_chunks(1 << 20)
                    .zip(y.par_chunks(1 << 20))
                    .all(|(p, q)| p == q)
    };
    bytemuck::bytes_of(&a.params) == bytemuck::bytes_of(&b.params)
        && a.time_window.to_bits() == b.time_window.to_bits()
        && same(&a.position, &b.position)
        && same(
            bytemuck::cast_slice(&a.energy),
            bytemuck::cast_slice(&b.energy),
        )
}

impl PetStreamBuffers {
    fn fit(&mut self, g: &GpuContext, fbytes: usize, cap: usize) -> Result<()> {
        if self.copy.is_none() {
            self.copy = Some(g.context().new_stream().ctx("creating the copy stream")?);
        }
        if self.fbytes != fbytes || self.pinned.len() != 2 {
            self.pinned.clear();
            self.dframes.clear();
            for _ in 0..2 {
                // Flags 0: cached host memory, since the host also reads the frames.
                let pb = crate::cuda::zeroed_pinned::<u8>(g.context(), fbytes, 0)?;
                self.pinned.push(pb);
                self.dframes.push(g.zeros::<u8>(fbytes)?);
            }
            // The frame buffers are zeroed on the compute stream but written by the copy
            // stream, and the context tracks no events across streams: the zeroing must be
            // done before the first copy (a race that compute-sanitizer's slower kernels
            // exposed: chunk 0's frames zeroed after their copy).
            g.synchronize()?;
            self.fbytes = fbytes;
        }
        if self.cap != cap || self.a.is_none() || self.b.is_none() {
            self.a = Some(g.zeros(cap)?);
            self.b = Some(g.zeros(cap)?);
            self.cap = cap;
        }
        if self.stats.is_none() {
            self.stats = Some(g.zeros::<u32>(k::STAT_WORDS)?);
        }
        if self.bounds.is_none() {
            self.bounds = Some(g.zeros::<u32>(3)?);
        }
        Ok(())
    }
}

/// The first `total` pairs of the last resident coincidence call on `scratch`, copied into
/// the pinned pairs buffer `slot` (grown by half again when short) and returned as a slice
/// of it.
fn download_pairs_pinned<'p>(
    g: &GpuContext,
    scratch: &CoincideScratch,
    slot: &'p mut Option<PinnedPairs>,
    total: usize,
) -> Result<&'p [Coincidence]> {
    if total == 0 {
        return Ok(&[]);
    }
    let words = total;
    if slot.as_ref().is_none_or(|p| p.len() < words) {
        let len = words.max(slot.as_ref().map_or(0, |p| p.len() * 3 / 2));
        let p: PinnedPairs = crate::cuda::zeroed_pinned(g.context(), len, 0)?;
        *slot = Some(p);
    }
    let src = scratch
        .pairs()
        .filter(|p| p.len() >= words)
        .ok_or_else(|| invalid("pairs", "more pairs asked for than the last call made"))?;
    let host = slot.as_mut().expect("allocated above");
    let dst = &mut host.as_mut_slice().ctx("mapping pinned memory")?[..words];
    // The destination is pinned, so this copy is asynchronous: the synchronisation below
    // completes it before the slice is read.
    g.stream()
        .memcpy_dtoh(&src.slice(0..words), dst)
        .ctx("copying the pairs")?;
    g.synchronize()?;
    let all = host.as_slice().ctx("mapping pinned memory")?;
    Ok(Record::unwrap_slice(&all[..words]))
}

impl PetLauncher<'_> {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run_stream(
        &self,
        bufs: &mut PetStreamBuffers,
        preloaded: Option<&Arc<DeviceScanner>>,
        input: &mut impl FrameSource,
        scanner: &Scanner,
        c: &CoincideConfig,
        sc: &StreamConfig,
        stats: &mut StreamStats,
        sink: &mut impl FnMut(&[Coincidence]) -> Result<()>,
        progress: &mut impl FnMut(&StreamStats),
    ) -> Result<StreamStats> {
        let t0 = std::time::Instant::now();
        let cap = sc.chunk_frames + sc.pending_capacity;
        let fbytes = 16 * sc.chunk_frames;
        // On an error the buffers are dropped (the next run allocates them again).
        let r = self.run_stream_in(
            bufs, preloaded, input, scanner, c, sc, stats, sink, progress, t0, fbytes, cap,
        );
        if r.is_err() {
            *bufs = PetStreamBuffers::default();
        }
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn run_stream_in(
        &self,
        bufs: &mut PetStreamBuffers,
        preloaded: Option<&Arc<DeviceScanner>>,
        input: &mut impl FrameSource,
        scanner: &Scanner,
        c: &CoincideConfig,
        sc: &StreamConfig,
        stats: &mut StreamStats,
        sink: &mut impl FnMut(&[Coincidence]) -> Result<()>,
        progress: &mut impl FnMut(&StreamStats),
        t0: std::time::Instant,
        fbytes: usize,
        cap: usize,
    ) -> Result<StreamStats> {
        bufs.fit(self, fbytes, cap)?;
        // A scanner handle's tables are on the device already. Otherwise the tables on the
        // device are reused when the scanner equals the last run's (compared in parallel:
        // about 1 ms for a 37 MB energy table, against 5 ms to upload it from pageable
        // memory). The comparison runs on another thread while the first chunk is read and
        // copied; the loop asks for the tables after that.
        let cached = match preloaded {
            Some(ds) => {
                bufs.scanner = None;
                Some((scanner.clone(), ds.clone()))
            }
            None => bufs.scanner.take(),
        };
        let known = preloaded.is_some();
        let (r, pair) = std::thread::scope(|scope| {
            let compared = cached.map(|pair| {
                scope.spawn(move || (known || same_scanner(&pair.0, scanner)).then_some(pair))
            });
            let resolve = move || -> Result<(Scanner, Arc<DeviceScanner>)> {
                let same = compared.and_then(|h| h.join().ok().flatten());
                let pair = match same {
                    Some(pair) => pair,
                    None => (scanner.clone(), Arc::new(self.load_scanner(scanner)?)),
                };
                if std::env::var_os("DETKIT_PET_PROFILE").is_some() {
                    eprintln!(
                        "pet stream setup (ms): buffers, chunk 0 read, scanner compared or \
                         uploaded {:.2}",
                        t0.elapsed().as_secs_f64() * 1e3
                    );
                }
                Ok(pair)
            };
            let mut pair = None;
            let r = self.stream_loop(
                bufs, input, resolve, &mut pair, c, sc, stats, sink, progress,
            );
            (r, pair)
        });
        if r.is_ok() && !known {
            bufs.scanner = pair;
        }
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn stream_loop(
        &self,
        bufs: &mut PetStreamBuffers,
        input: &mut impl FrameSource,
        scanner: impl FnOnce() -> Result<(Scanner, Arc<DeviceScanner>)>,
        pair: &mut Option<(Scanner, Arc<DeviceScanner>)>,
        c: &CoincideConfig,
        sc: &StreamConfig,
        stats: &mut StreamStats,
        sink: &mut impl FnMut(&[Coincidence]) -> Result<()>,
        progress: &mut impl FnMut(&StreamStats),
    ) -> Result<StreamStats> {
        let copy = bufs.copy.clone().expect("fitted");
        // Whatever way the loop ends, the copies out of host memory (the pinned buffers, or
        // the caller's page-locked frames) finish before this function returns.
        let _finish = FinishCopies(copy.clone());
        let (mut a, mut b) = (
            bufs.a.take().expect("fitted"),
            bufs.b.take().expect("fitted"),
        );
        let mut d_stats = bufs.stats.take().expect("fitted");
        let mut pinned = std::mem::take(&mut bufs.pinned);
        let mut dframes = std::mem::take(&mut bufs.dframes);
        let mut order = match bufs.order.take() {
            Some(o) if o.blocks * k::ORDER_BLOCK_FRAMES as usize >= sc.chunk_frames => o,
            _ => OrderCheck::new(self, sc.chunk_frames)?,
        };
        order.reset(self)?;
        let mut np = 0usize;
        let mut offset = 0u64;
        // Chunk k sits in slot k % 2. Its frames are read and their copy launched while the
        // GPU converts and checks chunk k - 1. The check of each BDM's time order (and the
        // watermark) runs on the GPU after the conversion and comes back with the
        // conversion's statistics: the host never reads the frames.
        let mut counts = [0usize; 2];
        // Cross-stream order, explicit (the context does not track buffers across streams):
        // `copied[s]` is recorded on the copy stream after the copy into slot s, and the
        // compute stream waits for it before converting; `consumed[s]` is recorded on the
        // compute stream after the conversion and the order check read slot s, and the copy
        // stream waits for it before copying into slot s again.
        let mut copied: [Option<CudaEvent>; 2] = [None, None];
        let mut consumed: [Option<CudaEvent>; 2] = [None, None];
        let [p0, p1] = &mut pinned[..] else {
            unreachable!("two pinned buffers (fitted)");
        };
        let [d0, d1] = &mut dframes[..] else {
            unreachable!("two frame buffers (fitted)");
        };
        let mut slots = [(p0, d0), (p1, d1)];
        // DETKIT_PET_PROFILE=1: host time per phase of the loop, printed to stderr at the end
        // (a GPU wait shows in the phase that reads back).
        let profile = std::env::var_os("DETKIT_PET_PROFILE").is_some();
        let mut phases = [0f64; 6];
        let mut clock = std::time::Instant::now();
        let mut lap = |phases: &mut [f64; 6], i: usize| {
            if profile {
                phases[i] += clock.elapsed().as_secs_f64() * 1e3;
                clock = std::time::Instant::now();
            }
        };
        // Chunk 0: read and copy.
        {
            let (pb, db) = &mut slots[0];
            let chunk = start_chunk(input, pb, db, &copy, &mut copied[0], &None)?;
            counts[0] = chunk.len() / 16;
        }
        let ds: &DeviceScanner = &pair.insert(scanner()?).1;
        let bdms = ds.host.bdm_count();
        let mut slot = 0;
        let mut bounds = bufs.bounds.take().expect("fitted");
        let mut pairs_bufs = std::mem::take(&mut bufs.pairs);
        // The pairs of chunk k go to `pairs_bufs[k % 2]`; the sink (and `progress`) get them
        // on this thread while the next chunk's kernels and read-backs run on another, so
        // writing the pairs overlaps the next chunk's work. `waiting`: the slot, pair count
        // and totals of a chunk whose pairs are still to be sunk.
        let mut waiting: Option<(usize, usize, StreamStats)> = None;
        let mut chunk_no = 0usize;
        let result = loop {
            let nf = counts[slot];
            let last = nf < sc.chunk_frames;
            // Convert into a[np..np + nf] and check the order, after the copy into this slot.
            if let Some(e) = &copied[slot] {
                self.stream().wait(e).ctx("waiting for the frame copy")?;
            }
            self.convert(slots[slot].1, nf, ds, &mut a, np, &mut d_stats)?;
            self.order_check(slots[slot].1, nf, bdms, &mut order, &mut d_stats)?;
            consumed[slot] = Some(
                self.stream()
                    .record_event(None)
                    .ctx("recording the conversion")?,
            );
            lap(&mut phases, 0);
            // The next chunk is read (and its copy launched) on a second thread, and this
            // chunk's kernels and read-backs run on a third, while this thread hands the
            // previous chunk's pairs to the sink.
            let (lo, hi) = slots.split_at_mut(1);
            let (cur, other) = if slot == 0 {
                (&lo[0], &mut hi[0])
            } else {
                (&hi[0], &mut lo[0])
            };
            let (c_lo, c_hi) = copied.split_at_mut(1);
            let copied_other = if slot == 0 {
                &mut c_hi[0]
            } else {
                &mut c_lo[0]
            };
            let consumed_other = &consumed[1 - slot];
            let frames_cur: &CudaSlice<u8> = cur.1;
            let pslot = chunk_no % 2;
            let (p_lo, p_hi) = pairs_bufs.split_at_mut(1);
            let (pairs_cur, pairs_prev) = if pslot == 0 {
                (&mut p_lo[0], &p_hi[0])
            } else {
                (&mut p_hi[0], &p_lo[0])
            };
            let (gpu, next, sunk) = std::thread::scope(|scope| {
                let copy = &copy;
                let input = &mut *input;
                let reader = (!last).then(|| {
                    scope.spawn(move || -> Result<usize> {
                        let (pb, db) = other;
                        let chunk = start_chunk(input, pb, db, copy, copied_other, consumed_other)?;
                        Ok(chunk.len() / 16)
                    })
                });
                let (a, b, d_stats, order) = (&mut a, &mut b, &mut d_stats, &mut order);
                let (scratch, bounds, lap, phases) =
                    (&mut bufs.scratch, &mut bounds, &mut lap, &mut phases);
                let (stats, offset, np) = (&mut *stats, &mut offset, &mut np);
                let worker = scope.spawn(move || -> Result<(bool, usize, StreamStats)> {
                    // Raw driver calls (launches, the pinned pairs' allocation) need the
                    // context current on this thread.
                    self.context()
                        .bind_to_thread()
                        .ctx("binding the context to the chunk's thread")?;
                    let st = self.download(d_stats)?;
                    lap(phases, 1);
                    let w = match order_verdict(&st) {
                        _ if nf == 0 => f64::INFINITY,
                        OrderVerdict::Disorder => {
                            return Err(self.order_error(order, frames_cur, nf, *offset, bdms))
                        }
                        OrderVerdict::Ordered(_) if last => f64::INFINITY,
                        OrderVerdict::Ordered(m) => m,
                    };
                    let cst = stats_from_words(&st, nf);
                    stats.convert.add(&cst, *offset);
                    *offset += nf as u64;
                    let nc = cst.accepted as usize;
                    let n0 = *np;
                    // Sort the chunk's singles in place (scratch: b), then merge with the
                    // pending run.
                    if self.sort_radix(a, b, n0, nc)? {
                        let src = b.slice(n0..n0 + nc);
                        let mut dst = a.slice_mut(n0..n0 + nc);
                        self.stream()
                            .memcpy_dtod(&src, &mut dst)
                            .ctx("copying sorted singles")?;
                    }
                    lap(phases, 2);
                    let total = n0 + nc;
                    // Two runs: one merge-path pass (the multiway merge's sampling levels do
                    // not pay for two runs), its boundaries in a reused buffer.
                    let merged_in_b = self.merge_two_runs(a, b, 0, total, n0, bounds)?;
                    let (merged, other) = if merged_in_b {
                        (&mut *b, &mut *a)
                    } else {
                        (&mut *a, &mut *b)
                    };
                    lap(phases, 3);
                    let (npairs, resume) =
                        self.coincide_resident(scratch, merged, 0, total, c, w)?;
                    let rest = total - resume;
                    if rest > sc.pending_capacity {
                        return Err(pending_overflow(rest, sc.pending_capacity));
                    }
                    if rest > 0 {
                        let src = merged.slice(resume..total);
                        let mut dst = other.slice_mut(0..rest);
                        self.stream()
                            .memcpy_dtod(&src, &mut dst)
                            .ctx("carrying pending singles")?;
                        if !merged_in_b {
                            std::mem::swap(a, b);
                        }
                    }
                    download_pairs_pinned(self, scratch, pairs_cur, npairs)?;
                    lap(phases, 4);
                    *np = rest;
                    stats.max_pending = stats.max_pending.max(rest as u64);
                    stats.pairs += npairs as u64;
                    stats.chunks += 1;
                    Ok((last, npairs, *stats))
                });
                // The previous chunk's pairs, on this thread (the sink need not be `Send`).
                let sunk = match waiting.take() {
                    Some((ps, npairs, snapshot)) => {
                        debug_assert_eq!(ps, 1 - pslot);
                        sink_pairs(pairs_prev, npairs, &snapshot, sink, progress)
                    }
                    None => Ok(()),
                };
                let gpu = worker
                    .join()
                    .unwrap_or_else(|_| Err(invalid("frame stream", "the chunk's thread failed")));
                let next = reader.map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(invalid("frame stream", "the reading thread failed"))
                    })
                });
                (gpu, next, sunk)
            });
            lap(&mut phases, 5);
            // A sink's error comes from an earlier chunk than the chunk's thread's.
            if let Err(e) = sunk {
                break Err(e);
            }
            let (done, npairs, snapshot) = match gpu {
                Ok(g) => g,
                Err(e) => break Err(e),
            };
            waiting = Some((pslot, npairs, snapshot));
            chunk_no += 1;
            if done {
                let (ps, npairs, snapshot) = waiting.take().expect("set above");
                if let Err(e) = sink_pairs(&pairs_bufs[ps], npairs, &snapshot, sink, progress) {
                    break Err(e);
                }
            }
            if done {
                if profile {
                    eprintln!(
                        "pet stream profile (ms, the chunk's thread): convert+order launch \
                         {:.2}, stats read (waits for the conversion) {:.2}, sort {:.2}, merge \
                         {:.2}, coincide+download {:.2}; waiting for the chunk, the reader and \
                         the sink {:.2}",
                        phases[0], phases[1], phases[2], phases[3], phases[4], phases[5],
                    );
                }
                break Ok(*stats);
            }
            match next {
                Some(Ok(nf)) => {
                    counts[1 - slot] = nf;
                    slot = 1 - slot;
                }
                Some(Err(e)) => break Err(e),
                None => unreachable!("a chunk follows every chunk but the last"),
            }
        };
        bufs.bounds = Some(bounds);
        bufs.pairs = pairs_bufs;
        // Every copy from the pinned buffers has finished before they go back to the cache.
        copy.synchronize().ctx("finishing the frame copies")?;
        bufs.a = Some(a);
        bufs.b = Some(b);
        bufs.stats = Some(d_stats);
        bufs.pinned = pinned;
        bufs.dframes = dframes;
        bufs.order = Some(order);
        result
    }

    /// The error of a chunk whose order check failed on the device: the chunk's frames and
    /// the BDMs' latest times before it are read back and checked on the host, which names
    /// the first frame out of order exactly as the CPU path does.
    fn order_error(
        &self,
        order: &OrderCheck,
        frames: &CudaSlice<u8>,
        nf: usize,
        offset: u64,
        bdms: u32,
    ) -> Error {
        let check = || -> Result<()> {
            let mut state = order.state_before_last(self)?;
            state.truncate(bdms as usize);
            let bytes = self
                .stream()
                .clone_dtoh(&frames.slice(0..16 * nf))
                .ctx("copying frames back")?;
            Watermark::from_latest(state).update(&bytes, offset)?;
            Err(invalid(
                "frame stream",
                "the device's order check flagged a chunk that the host finds in order",
            ))
        };
        check().expect_err("the check above never returns Ok")
    }
}

/// Hands the first `npairs` pairs of a pinned pairs buffer to the sink, then the totals
/// after their chunk to `progress`.
fn sink_pairs(
    buf: &Option<PinnedPairs>,
    npairs: usize,
    stats: &StreamStats,
    sink: &mut impl FnMut(&[Coincidence]) -> Result<()>,
    progress: &mut impl FnMut(&StreamStats),
) -> Result<()> {
    let pairs: &[Coincidence] = match buf {
        Some(p) if npairs > 0 => {
            let all = p.as_slice().ctx("mapping pinned memory")?;
            Record::unwrap_slice(&all[..npairs])
        }
        _ => &[],
    };
    sink(pairs)?;
    progress(stats);
    Ok(())
}

/// Reads the next chunk into `pinned` (or takes it in place from page-locked source memory)
/// and launches its copy into `dframes` on the copy stream (after `consumed`: the last
/// conversion that read this slot), recorded in `copied`. Returns the chunk's bytes.
fn start_chunk<'b>(
    input: &'b mut impl FrameSource,
    pinned: &'b mut cudarc::driver::PinnedHostSlice<u8>,
    dframes: &mut CudaSlice<u8>,
    copy: &std::sync::Arc<cudarc::driver::CudaStream>,
    copied: &mut Option<CudaEvent>,
    consumed: &Option<CudaEvent>,
) -> Result<&'b [u8]> {
    // The host must not overwrite a pinned buffer an earlier copy still reads.
    if let Some(e) = copied.as_ref() {
        e.synchronize().ctx("waiting for the frame copy")?;
    }
    let buf = pinned.as_mut_slice().ctx("mapping pinned memory")?;
    let chunk = input.next_chunk(buf)?;
    let nf = chunk.len() / 16;
    if nf > 0 {
        // Asynchronous copy of the chunk's bytes (page-locked) on the copy stream: overlaps
        // the compute stream's kernels and the order check.
        if let Some(e) = consumed {
            copy.wait(e).ctx("ordering the frame copy")?;
        }
        copy.memcpy_htod(chunk, &mut dframes.slice_mut(0..16 * nf))
            .ctx("copying frames to the device")?;
        *copied = Some(copy.record_event(None).ctx("recording the frame copy")?);
    }
    Ok(chunk)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The range words of `pet_time_range`, computed plainly on the host.
    fn range_words(times: &[f64]) -> [u64; k::RANGE_WORDS] {
        let mut w = k::RANGE_INIT;
        for &t in times {
            w[0] = w[0].min(k::time_key(t));
            w[1] = w[1].max(k::time_key(t));
            match k::time_integer(t) {
                Some(v) => {
                    w[2] = w[2].min(k::int_key(v));
                    w[3] = w[3].max(k::int_key(v));
                }
                None => w[4] = 1,
            }
        }
        w
    }

    /// The key `pet_time_keys` writes, cut to the sorted bits.
    fn key(mode: u32, base: u64, bits: u32, t: f64) -> u64 {
        let full = match mode {
            k::KEYS_FLOAT => k::time_key(t),
            _ => (t as i64).wrapping_sub(base as i64) as u64,
        };
        let full = if mode == k::KEYS_INT32 {
            full as u32 as u64
        } else {
            full
        };
        if bits == 64 {
            full
        } else {
            full & ((1u64 << bits) - 1)
        }
    }

    /// The scanner cache's equality: the same tables (a clone) at once, equal tables in other
    /// allocations by content, any changed entry or parameter not equal.
    #[test]
    fn same_scanner_compares_contents() {
        let s = crate::pet::gen::tiny_scanner(3);
        assert!(same_scanner(&s, &s.clone()));
        let copy = Scanner::new(
            s.params,
            s.time_window,
            s.position.to_vec(),
            s.energy.to_vec(),
        )
        .unwrap();
        assert!(!std::ptr::eq(&*copy.energy, &*s.energy));
        assert!(same_scanner(&s, &copy));
        let mut energy = s.energy.to_vec();
        let last = energy.len() - 1;
        energy[last] *= 1.5;
        let other = Scanner::new(s.params, s.time_window, s.position.clone(), energy).unwrap();
        assert!(!same_scanner(&s, &other));
        let mut position = s.position.to_vec();
        position[0] ^= 1;
        let other = Scanner::new(s.params, s.time_window, position, s.energy.clone()).unwrap();
        assert!(!same_scanner(&s, &other));
        let mut wider = s.clone();
        wider.time_window += 1.0;
        assert!(!same_scanner(&s, &wider));
    }

    fn time() -> impl Strategy<Value = f64> {
        prop_oneof![
            (0u64..1 << 40).prop_map(|v| v as f64),
            (-(1i64 << 31)..1 << 31).prop_map(|v| v as f64),
            Just(-0.0),
            Just(0.0),
            Just(k::TIME_INT_LIMIT),
            Just(-k::TIME_INT_LIMIT),
            Just(k::TIME_INT_LIMIT * 4.0),
            (-1e6f64..1e6),
            any::<f64>().prop_filter("finite", |t| t.is_finite()),
        ]
    }

    proptest! {
        /// Whatever plan the range gives, the cut keys order the times exactly as `f64`
        /// comparison does (equal keys iff equal times), which is what makes the LSD radix
        /// argsort the stable sort by time.
        #[test]
        fn radix_plan_keys_preserve_order(times in prop::collection::vec(time(), 1..40)) {
            let w = range_words(&times);
            match radix_plan(&w) {
                None => prop_assert!(times.iter().all(|&t| t == times[0])),
                Some((mode, base, bits)) => {
                    prop_assert!((1..=64).contains(&bits));
                    if mode == k::KEYS_INT32 {
                        prop_assert!(bits <= 32);
                    }
                    if mode != k::KEYS_FLOAT {
                        prop_assert!(times.iter().all(|&t| k::time_integer(t).is_some()));
                    }
                    for &a in &times {
                        for &b in &times {
                            let (ka, kb) = (key(mode, base, bits, a), key(mode, base, bits, b));
                            prop_assert_eq!(ka.cmp(&kb), a.partial_cmp(&b).expect("finite"));
                        }
                    }
                }
            }
        }

        /// The device-view check: the range's smallest and largest keys are finite times
        /// exactly when every time is finite (NaNs of either sign, infinities included).
        #[test]
        fn range_finite_iff_every_time_is(
            mut times in prop::collection::vec(time(), 1..30),
            bad in prop::sample::select(vec![f64::NAN, -f64::NAN, f64::INFINITY, f64::NEG_INFINITY]),
            at in 0usize..30,
            put in any::<bool>(),
        ) {
            if put {
                let i = at % times.len();
                times[i] = bad;
            }
            let want = times.iter().all(|t| t.is_finite());
            prop_assert_eq!(range_finite(&range_words(&times)), want);
        }

        /// Integer times spanning under 2^32 always get the u32 keys.
        #[test]
        fn small_integer_span_uses_u32(lo in -(1i64 << 50)..1 << 50, d in prop::collection::vec(0u32..u32::MAX, 2..20)) {
            let mut times: Vec<f64> = d.iter().map(|&x| (lo + x as i64) as f64).collect();
            times.push(lo as f64 + 1.0);
            times.push(lo as f64);
            let plan = radix_plan(&range_words(&times)).expect("not all equal");
            prop_assert_eq!(plan.0, k::KEYS_INT32);
        }
    }
}
