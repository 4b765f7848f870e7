//! Launchers of the `detkit_gpu::pet` kernels on [`GpuContext`], device-resident buffers,
//! and the GPU side of the streamed chain.

use cudarc::driver::{CudaEvent, CudaSlice};
use detkit_gpu::pet::{self as k, Coincidence, Single};

use super::cpu::{CoincideConfig, ConvertStats};
use super::*;
use crate::cuda::{cfg, GpuContext};
use crate::error::{invalid, DriverContext, Error, Result};
use crate::sort::SortOptions;

// GPU launchers
// ---------------------------------------------------------------------------------------

/// Singles on the device: two `u64` words per single (cudarc needs a `DeviceRepr` element).
pub type SinglesBuffer = CudaSlice<u64>;

/// Reusable buffers of [`GpuContext::pet_sort_radix_device`] (grown on demand).
#[derive(Default)]
struct PetRadixTemp {
    keys: Option<CudaSlice<u64>>,
    sorted: Option<CudaSlice<u64>>,
    index: Option<CudaSlice<u32>>,
    /// The two words the time-keys kernel reduces into (min, max), reset before each use.
    minmax: Option<CudaSlice<u64>>,
}

/// A scanner's parameters and tables on the device.
pub struct DeviceScanner {
    params: CudaSlice<u32>,
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
    if a.len() < 2 * (off + n) || b.len() < 2 * (off + n) {
        return Err(invalid("sort buffers", "shorter than off + n singles"));
    }
    Ok(n > 1)
}

pub(crate) fn pod_vec<T: bytemuck::Pod>(bytes: &[u8]) -> Vec<T> {
    let mut v = vec![T::zeroed(); bytes.len() / std::mem::size_of::<T>()];
    bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(bytes);
    v
}

pub(crate) fn download_view(
    g: &GpuContext,
    v: &cudarc::driver::CudaView<'_, u64>,
) -> Result<Vec<u64>> {
    g.stream().clone_dtoh(v).ctx("copying from the device")
}

pub(crate) fn singles_of(words: &[u64]) -> Vec<Single> {
    bytemuck::cast_slice::<u64, Single>(words).to_vec()
}

impl GpuContext {
    /// Uploads a scanner.
    pub fn pet_scanner(&self, s: &Scanner) -> Result<DeviceScanner> {
        let words: &[u32] = bytemuck::cast_slice(std::slice::from_ref(&s.params));
        Ok(DeviceScanner {
            params: self.upload(words)?,
            position: self.upload(&s.position)?,
            energy: self.upload(&s.energy)?,
            host: s.params,
        })
    }

    /// Converts `n` frames (`frames`: `16 n` bytes) into `out[..]` (accepted singles, input
    /// order) and `stats` (`STAT_WORDS` words). Asynchronous; read `stats` afterwards.
    pub fn pet_convert_device(
        &self,
        frames: &CudaSlice<u8>,
        n: usize,
        scanner: &DeviceScanner,
        out: &mut SinglesBuffer,
        out_offset: usize,
        stats: &mut CudaSlice<u32>,
    ) -> Result<()> {
        check_u32_len("frames", n)?;
        if frames.len() < 16 * n || out.len() < 2 * (out_offset + n) || stats.len() < k::STAT_WORDS
        {
            return Err(invalid("convert buffers", "shorter than the frame count"));
        }
        let mut init = [0u32; k::STAT_WORDS];
        init[k::STAT_FIRST_BAD] = u32::MAX;
        self.stream()
            .memcpy_htod(&init, stats)
            .ctx("initialising conversion statistics")?;
        if n == 0 {
            return Ok(());
        }
        let tiles = (n as u64).div_ceil(k::CONVERT_TILE);
        let mut lb = self.take_lookback::<u32>(tiles)?;
        let n64 = n as u64;
        let mut outv = out.slice_mut(2 * out_offset..);
        let params = k::PetConvertFramesParams {
            frames: self.ptr(frames).cast(),
            n: n64,
            params: self.ptr(&scanner.params).cast(),
            position: self.ptr(&scanner.position),
            correction: self.ptr(&scanner.energy),
            out: self.ptr_mut(&mut outv).cast(),
            stats: self.ptr_mut(&mut *stats),
            flags: self.ptr_mut(&mut lb.flags),
            aggregates: self.ptr_mut(&mut lb.agg),
            inclusive: self.ptr_mut(&mut lb.inc),
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

    /// One merge pass from `src[off..off+n]` to `dst[off..off+n]`: runs of `width` (if > 0;
    /// `runs` unused) or the explicit boundaries `runs` (relative to `off`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn pet_merge_pass(
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
        let srcv = src.slice(2 * off..2 * (off + n));
        let mut dstv = dst.slice_mut(2 * off..2 * (off + n));
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
    pub fn pet_sort_device(
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
            let av = a.slice(2 * off..2 * (off + n));
            let mut bv = b.slice_mut(2 * off..2 * (off + n));
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
                self.pet_merge_pass(b, a, off, n, width, &unused, 0)?;
            } else {
                self.pet_merge_pass(a, b, off, n, width, &unused, 0)?;
            }
            in_b = !in_b;
            width *= 2;
        }
        Ok(in_b)
    }

    /// Stable sort by time of the singles `a[off..off+n]` into `b[off..off+n]` on the radix
    /// sort: one kernel writes an order-preserving `u64` key per time ([`k::time_key`]) and
    /// the smallest and largest key, which are read back (one round trip) so that only the
    /// bits below their highest differing bit are sorted (every key lies between them, so
    /// shares the bits above); an argsort of the keys (`ceil(bits / 8)` onesweep passes)
    /// and one gather of the 16-byte singles follow. Returns `true` when the result is in
    /// `b`, `false` when it is in `a` (all times equal, or `n <= 1`). Times must be finite.
    pub fn pet_sort_radix_device(
        &self,
        a: &mut SinglesBuffer,
        b: &mut SinglesBuffer,
        off: usize,
        n: usize,
    ) -> Result<bool> {
        if !sort_needed(a, b, off, n)? {
            return Ok(false);
        }
        // The buffers leave the scratch map while the sort (which keeps its own) runs.
        let mut t = self.with_scratch(std::mem::take::<PetRadixTemp>);
        let r = self.pet_sort_radix_in(&mut t, a, b, off, n);
        self.with_scratch(|s: &mut PetRadixTemp| *s = t);
        r
    }

    fn pet_sort_radix_in(
        &self,
        t: &mut PetRadixTemp,
        a: &SinglesBuffer,
        b: &mut SinglesBuffer,
        off: usize,
        n: usize,
    ) -> Result<bool> {
        if t.keys.as_ref().is_none_or(|x| x.len() < n) {
            t.keys = Some(self.zeros(n)?);
            t.sorted = Some(self.zeros(n)?);
            t.index = Some(self.zeros(n)?);
        }
        let (Some(keys), Some(sorted), Some(index)) =
            (t.keys.as_mut(), t.sorted.as_mut(), t.index.as_mut())
        else {
            unreachable!("allocated above");
        };
        if t.minmax.is_none() {
            t.minmax = Some(self.zeros(2)?);
        }
        let Some(minmax) = t.minmax.as_mut() else {
            unreachable!("allocated above");
        };
        self.stream()
            .memcpy_htod(&[u64::MAX, 0u64], minmax)
            .ctx("resetting the time range")?;
        let av = a.slice(2 * off..2 * (off + n));
        let blocks = (n as u64)
            .div_ceil(k::KEYS_THREADS as u64)
            .clamp(1, self.sm_count() as u64 * 8);
        let params = k::PetTimeKeysParams {
            singles: self.ptr(&av).cast(),
            keys: self.ptr_mut(keys),
            minmax: self.ptr_mut(minmax),
            n: n as u64,
        };
        // SAFETY: KEYS_THREADS threads, grid-stride; av holds n singles, keys n words,
        // minmax two words set to [u64::MAX, 0].
        unsafe {
            self.launch(
                k::KERNEL_TIME_KEYS,
                cfg(blocks, k::KEYS_THREADS, 0),
                &params,
            )?
        };
        let mm = self.download(minmax)?;
        let bits = 64 - (mm[0] ^ mm[1]).leading_zeros();
        if bits == 0 {
            // Every time equal: the stable order is the input order.
            return Ok(false);
        }
        self.sort_index_device(keys, sorted, index, n, SortOptions::bits(0, bits))?;
        let mut bv = b.slice_mut(2 * off..2 * (off + n));
        let params = k::PetGatherSinglesParams {
            input: self.ptr(&av).cast(),
            index: self.ptr(index),
            output: self.ptr_mut(&mut bv).cast(),
            n: n as u64,
        };
        // SAFETY: KEYS_THREADS threads, grid-stride; av and bv hold n singles in distinct
        // allocations; index is the argsort's permutation of 0..n.
        unsafe { self.launch(k::KERNEL_GATHER, cfg(blocks, k::KEYS_THREADS, 0), &params)? };
        Ok(true)
    }

    /// Merges the presorted runs `a[off + starts[r] .. off + starts[r + 1]]` (each sorted by
    /// time; ties: earlier run first, so the result is the stable sort) with `b` as scratch.
    /// `starts` begins with 0 and ends with `n`. Returns `true` when the result is in `b`.
    pub fn pet_merge_runs_device(
        &self,
        a: &mut SinglesBuffer,
        b: &mut SinglesBuffer,
        off: usize,
        n: usize,
        starts: &[u32],
    ) -> Result<bool> {
        // The multiway merge (`merge.rs`): one pass over the singles; more than
        // `MW_MAX_RUNS` runs go to the radix sort.
        self.pet_merge_runs_multiway(a, b, off, n, starts)
    }

    /// Coincidences of the sorted singles `s[off..off+n]` whose windows are complete for
    /// `watermark` (`f64::INFINITY`: all). Returns the pairs (time order) and the index
    /// (relative to `off`) of the first incomplete opener. Unsorted or NaN input is a typed
    /// error naming the first offending single.
    pub fn pet_coincide_device(
        &self,
        s: &SinglesBuffer,
        off: usize,
        n: usize,
        c: &CoincideConfig,
        watermark: f64,
    ) -> Result<(Vec<Coincidence>, usize)> {
        let mut scratch = CoincideScratch::default();
        self.pet_coincide_device_with(&mut scratch, s, off, n, c, watermark)
    }

    /// [`GpuContext::pet_coincide_device`] with reusable scratch buffers (grown on demand),
    /// so that repeated calls (chunks of a stream, timed runs) allocate nothing.
    pub fn pet_coincide_device_with(
        &self,
        scratch: &mut CoincideScratch,
        s: &SinglesBuffer,
        off: usize,
        n: usize,
        c: &CoincideConfig,
        watermark: f64,
    ) -> Result<(Vec<Coincidence>, usize)> {
        let (total, resume) = self.pet_coincide_resident(scratch, s, off, n, c, watermark)?;
        let mut out = vec![<Coincidence as bytemuck::Zeroable>::zeroed(); total];
        self.pet_download_pairs(scratch, &mut out)?;
        Ok((out, resume))
    }

    /// Copies the first `out.len()` pairs of the last [`GpuContext::pet_coincide_resident`]
    /// into `out` (a caller's reusable buffer, e.g. in pinned host memory): no allocation.
    pub fn pet_download_pairs(
        &self,
        scratch: &CoincideScratch,
        out: &mut [Coincidence],
    ) -> Result<()> {
        if out.is_empty() {
            return Ok(());
        }
        let pairs = scratch
            .pairs
            .as_ref()
            .filter(|p| p.len() >= 4 * out.len())
            .ok_or_else(|| invalid("pairs", "more pairs asked for than the last call made"))?;
        self.stream()
            .memcpy_dtoh(
                &pairs.slice(0..4 * out.len()),
                bytemuck::cast_slice_mut::<Coincidence, u64>(out),
            )
            .ctx("copying the pairs")?;
        self.synchronize()
    }

    /// The coincidences of [`GpuContext::pet_coincide_device_with`], left on the device: the
    /// first `total` pairs of [`CoincideScratch::pairs`] (32 bytes each, time order).
    /// Returns `(total, resume)`; two small status words are read back (sortedness, totals).
    pub fn pet_coincide_resident(
        &self,
        scratch: &mut CoincideScratch,
        s: &SinglesBuffer,
        off: usize,
        n: usize,
        c: &CoincideConfig,
        watermark: f64,
    ) -> Result<(usize, usize)> {
        c.validate()?;
        check_u32_len("singles to pair", n)?;
        if s.len() < 2 * (off + n) {
            return Err(invalid(
                "coincidence buffers",
                "shorter than off + n singles",
            ));
        }
        if n == 0 {
            return Ok((0, 0));
        }
        let sv = s.slice(2 * off..2 * (off + n));
        let n64 = n as u64;
        let blocks = n64.div_ceil(k::COINCIDE_THREADS as u64);
        let delayed = c.delay.is_some() as u32;
        let reach = c.reach();
        let delay = c.delay.unwrap_or(0.0);
        let policy = c.policy as u32;
        scratch.grow(self, n)?;
        let CoincideScratch {
            next,
            lo,
            opener,
            counts,
            offsets,
            pairs,
            status,
        } = scratch;
        let (next, lo, opener, counts, offsets, status) = (
            next.as_mut().expect("grown"),
            lo.as_mut().expect("grown"),
            opener.as_mut().expect("grown"),
            counts.as_mut().expect("grown"),
            offsets.as_mut().expect("grown"),
            status.as_mut().expect("grown"),
        );
        {
            let mut w = [0u32; k::CO_WORDS];
            w[k::CO_FIRST_UNSORTED] = u32::MAX;
            w[k::CO_RESUME] = u32::MAX;
            self.stream()
                .memcpy_htod(&w, status)
                .ctx("initialising coincidence status")?;
            let mut ov = opener.slice_mut(0..n);
            self.stream()
                .memset_zeros(&mut ov)
                .ctx("zeroing opener flags")?;
        }
        let launch_cfg = cfg(blocks, k::COINCIDE_THREADS, 0);
        {
            let params = k::PetCoincideNextParams {
                singles: self.ptr(&sv).cast(),
                n: n64,
                reach,
                delay,
                delayed,
                next: self.ptr_mut(&mut *next),
                lo: self.ptr_mut(&mut *lo),
                status: self.ptr_mut(&mut *status),
                ..bytemuck::Zeroable::zeroed()
            };
            // SAFETY: one thread per single; next holds n words, lo n words when delayed,
            // status CO_WORDS words.
            let r = unsafe { self.launch(k::KERNEL_COINCIDE_NEXT, launch_cfg, &params) };
            r?;
        }
        let st = self.download(status)?;
        let bad = st[k::CO_FIRST_UNSORTED];
        if bad != u32::MAX {
            let i = bad as usize;
            let around = download_view(
                self,
                &s.slice(2 * (off + i.saturating_sub(1))..2 * (off + i + 1)),
            )?;
            let around = singles_of(&around);
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
        if delayed == 0 {
            let window = c.window;
            let params = k::PetCoincideWalkParams {
                singles: self.ptr(&sv).cast(),
                n: n64,
                window,
                next: self.ptr(&*next),
                opener: self.ptr_mut(&mut *opener),
            };
            // SAFETY: one thread per single; next computed above; opener n zeroed bytes.
            let r = unsafe { self.launch(k::KERNEL_COINCIDE_WALK, launch_cfg, &params) };
            r?;
        }
        {
            let params = k::PetCoincideCountParams {
                singles: self.ptr(&sv).cast(),
                n: n64,
                reach,
                watermark,
                delayed,
                policy,
                next: self.ptr(&*next),
                lo: self.ptr(&*lo),
                opener: self.ptr(&*opener),
                counts: self.ptr_mut(&mut *counts),
                status: self.ptr_mut(&mut *status),
            };
            // SAFETY: as above; counts n words.
            let r = unsafe { self.launch(k::KERNEL_COINCIDE_COUNT, launch_cfg, &params) };
            r?;
        }
        let st = self.download(status)?;
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
        let resume = if st[k::CO_RESUME] == u32::MAX {
            n
        } else {
            st[k::CO_RESUME] as usize
        };
        if total == 0 {
            return Ok((0, resume));
        }
        self.scan_device(counts, offsets, n, crate::ScanKind::Exclusive)?;
        if pairs.as_ref().is_none_or(|p| p.len() < 4 * total as usize) {
            *pairs = Some(self.zeros::<u64>(4 * total as usize)?);
        }
        let pairs = pairs.as_mut().expect("allocated");
        {
            let params = k::PetCoincideFillParams {
                singles: self.ptr(&sv).cast(),
                n: n64,
                reach,
                watermark,
                delayed,
                policy,
                next: self.ptr(&*next),
                lo: self.ptr(&*lo),
                opener: self.ptr(&*opener),
                offsets: self.ptr(&*offsets),
                pairs: self.ptr_mut(&mut *pairs).cast(),
            };
            // SAFETY: as above; offsets is the exclusive scan of the counts written by the
            // count kernel with the same arguments, so every write is below `total`.
            let r = unsafe { self.launch(k::KERNEL_COINCIDE_FILL, launch_cfg, &params) };
            r?;
        }
        Ok((total as usize, resume))
    }

    pub(crate) fn upload_singles(&self, singles: &[Single]) -> Result<SinglesBuffer> {
        if singles.is_empty() {
            return self.zeros(2);
        }
        self.upload(bytemuck::cast_slice::<Single, u64>(singles))
    }
}

/// Reusable device buffers of the coincidence kernels.
#[derive(Default)]
pub struct CoincideScratch {
    next: Option<CudaSlice<u32>>,
    lo: Option<CudaSlice<u32>>,
    opener: Option<CudaSlice<u8>>,
    counts: Option<CudaSlice<u32>>,
    offsets: Option<CudaSlice<u32>>,
    pairs: Option<CudaSlice<u64>>,
    status: Option<CudaSlice<u32>>,
}

impl CoincideScratch {
    /// The pairs of the last [`GpuContext::pet_coincide_resident`] call on this scratch (its
    /// first `4 × total` words; `None` before any pair was made).
    pub fn pairs(&self) -> Option<&CudaSlice<u64>> {
        self.pairs.as_ref()
    }

    fn grow(&mut self, g: &GpuContext, n: usize) -> Result<()> {
        fn ensure<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
            g: &GpuContext,
            slot: &mut Option<CudaSlice<T>>,
            n: usize,
        ) -> Result<()> {
            if slot.as_ref().is_none_or(|b| b.len() < n) {
                *slot = Some(g.zeros(n.max(1))?);
            }
            Ok(())
        }
        ensure(g, &mut self.next, n)?;
        ensure(g, &mut self.lo, n)?;
        ensure(g, &mut self.opener, n)?;
        ensure(g, &mut self.counts, n)?;
        ensure(g, &mut self.offsets, n)?;
        ensure(g, &mut self.status, k::CO_WORDS)
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

impl GpuContext {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn pet_run_stream_gpu(
        &self,
        input: &mut impl Read,
        scanner: &Scanner,
        c: &CoincideConfig,
        sc: &StreamConfig,
        wm: &mut Watermark,
        stats: &mut StreamStats,
        sink: &mut impl FnMut(&[Coincidence]) -> Result<()>,
        progress: &mut impl FnMut(&StreamStats),
    ) -> Result<StreamStats> {
        let ds = self.pet_scanner(scanner)?;
        let cap = sc.chunk_frames + sc.pending_capacity;
        let copy = self
            .context()
            .new_stream()
            .ctx("creating the copy stream")?;
        let fbytes = 16 * sc.chunk_frames;
        // SAFETY: pinned buffers are written by `read_chunk` before any copy reads them
        // (flags 0: cached host memory, since the host also reads the frames).
        let mut pinned = [
            unsafe { self.context().alloc_pinned_with_flags::<u8>(fbytes, 0) }
                .ctx("allocating pinned memory")?,
            unsafe { self.context().alloc_pinned_with_flags::<u8>(fbytes, 0) }
                .ctx("allocating pinned memory")?,
        ];
        for pb in pinned.iter_mut() {
            let ptr = pb.as_mut_ptr().ctx("mapping pinned memory")?;
            // SAFETY: `ptr` addresses `fbytes` bytes of this allocation; zeroing them through
            // the raw pointer initialises the memory before any slice of it is made.
            unsafe { std::ptr::write_bytes(ptr, 0, fbytes) };
        }
        let mut dframes = [
            copy.alloc_zeros::<u8>(fbytes)
                .ctx("allocating frame buffers")?,
            copy.alloc_zeros::<u8>(fbytes)
                .ctx("allocating frame buffers")?,
        ];
        let mut a = self.zeros::<u64>(2 * cap)?;
        let mut b = self.zeros::<u64>(2 * cap)?;
        let mut d_stats = self.zeros::<u32>(k::STAT_WORDS)?;
        let mut np = 0usize;
        let mut offset = 0u64;
        // Chunk k sits in slot k % 2; its frame count, whether it is the last, and the
        // watermark after it are computed when it is read (the host reads chunk k + 1 while
        // the GPU works on chunk k).
        let mut counts = [0usize; 2];
        let mut lasts = [false; 2];
        let mut marks = [f64::NEG_INFINITY; 2];
        let mut read_offset = 0u64;
        // Cross-stream order, explicit (the context does not track buffers across streams):
        // `copied[s]` is recorded on the copy stream after the copy into slot s, and the
        // compute stream waits for it before converting; `consumed[s]` is recorded on the
        // compute stream after the conversion read slot s, and the copy stream waits for it
        // before copying into slot s again.
        let mut copied: [Option<CudaEvent>; 2] = [None, None];
        let mut consumed: [Option<CudaEvent>; 2] = [None, None];
        let mut fill = |slot: usize,
                        pinned: &mut [cudarc::driver::PinnedHostSlice<u8>; 2],
                        dframes: &mut [CudaSlice<u8>; 2],
                        copied: &mut [Option<CudaEvent>; 2],
                        consumed: &[Option<CudaEvent>; 2]|
         -> Result<(usize, bool, f64)> {
            let buf = pinned[slot].as_mut_slice().ctx("mapping pinned memory")?;
            let nf = read_chunk(input, buf)?;
            wm.update(&buf[..16 * nf], read_offset)?;
            read_offset += nf as u64;
            if nf > 0 {
                // Asynchronous copy from pinned memory on the copy stream: overlaps the
                // compute stream's kernels (the whole buffer; bytes past the chunk unused).
                if let Some(e) = &consumed[slot] {
                    copy.wait(e).ctx("ordering the frame copy")?;
                }
                copy.memcpy_htod(&pinned[slot], &mut dframes[slot])
                    .ctx("copying frames to the device")?;
                copied[slot] = Some(copy.record_event(None).ctx("recording the frame copy")?);
            }
            let last = nf < sc.chunk_frames;
            Ok((nf, last, if last { f64::INFINITY } else { wm.value() }))
        };
        (counts[0], lasts[0], marks[0]) =
            fill(0, &mut pinned, &mut dframes, &mut copied, &consumed)?;
        let mut scratch = CoincideScratch::default();
        let mut slot = 0;
        loop {
            let nf = counts[slot];
            let last = lasts[slot];
            let w = marks[slot];
            // Convert into a[np..np + nf], after the copy into this slot.
            if let Some(e) = &copied[slot] {
                self.stream().wait(e).ctx("waiting for the frame copy")?;
            }
            self.pet_convert_device(&dframes[slot], nf, &ds, &mut a, np, &mut d_stats)?;
            consumed[slot] = Some(
                self.stream()
                    .record_event(None)
                    .ctx("recording the conversion")?,
            );
            // Start the next chunk's read and copy while the kernels run.
            if !last {
                (counts[1 - slot], lasts[1 - slot], marks[1 - slot]) =
                    fill(1 - slot, &mut pinned, &mut dframes, &mut copied, &consumed)?;
            }
            let st = self.download(&d_stats)?;
            let cst = stats_from_words(&st, nf);
            stats.convert.add(&cst, offset);
            offset += nf as u64;
            let nc = cst.accepted as usize;
            // Sort the chunk's singles in place (scratch: b), then merge with the pending run.
            if self.pet_sort_radix_device(&mut a, &mut b, np, nc)? {
                let src = b.slice(2 * np..2 * (np + nc));
                let mut dst = a.slice_mut(2 * np..2 * (np + nc));
                self.stream()
                    .memcpy_dtod(&src, &mut dst)
                    .ctx("copying sorted singles")?;
            }
            let total = np + nc;
            let merged_in_b = if np > 0 && nc > 0 {
                self.pet_merge_runs_device(&mut a, &mut b, 0, total, &[0, np as u32, total as u32])?
            } else {
                false
            };
            let (merged, other) = if merged_in_b {
                (&mut b, &mut a)
            } else {
                (&mut a, &mut b)
            };
            let (pairs, resume) =
                self.pet_coincide_device_with(&mut scratch, merged, 0, total, c, w)?;
            let rest = total - resume;
            if rest > sc.pending_capacity {
                return Err(pending_overflow(rest, sc.pending_capacity));
            }
            if rest > 0 {
                let src = merged.slice(2 * resume..2 * total);
                let mut dst = other.slice_mut(0..2 * rest);
                self.stream()
                    .memcpy_dtod(&src, &mut dst)
                    .ctx("carrying pending singles")?;
                if merged_in_b {
                    // pending now in a (other == a)
                } else {
                    std::mem::swap(&mut a, &mut b);
                }
            }
            np = rest;
            stats.max_pending = stats.max_pending.max(rest as u64);
            stats.pairs += pairs.len() as u64;
            stats.chunks += 1;
            sink(&pairs)?;
            progress(stats);
            if last {
                return Ok(*stats);
            }
            slot = 1 - slot;
        }
    }
}
