//! Sort launchers on [`GpuContext`] and the temporary storage they reuse. See
//! `detkit_gpu::sort` for the kernels and `docs/sort.md` for the design.

use cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use detkit_gpu::sort::{self as k, SortHistogramParams, SortOnesweepParams, SortSingleTileParams};
use detkit_gpu::DevPtr;

use super::{check, check_value_bytes, SortKey, SortOptions};
use crate::cuda::{cfg, DeviceBuffer, GpuContext};
use crate::error::{invalid, DriverContext, Result};

/// Reusable temporary storage of the device sort, kept in the context's scratch between
/// calls (grown on demand, never shrunk) so that a timed call allocates nothing and clears
/// nothing: the histogram kernel leaves its counters zeroed, and the look-back status words
/// are told apart by epoch (`detkit_gpu::sort` module docs).
#[derive(Default)]
pub struct SortTemp {
    /// `MAX_PASSES × RADIX` digit counters, zero between calls.
    bins: Option<DeviceBuffer<u32>>,
    /// `MAX_PASSES × RADIX` digit starts of the current call.
    offsets: Option<DeviceBuffer<u32>>,
    /// The histogram ticket and the per-pass tile counters, zero between calls.
    counters: Option<DeviceBuffer<u32>>,
    /// `tiles × RADIX` look-back status words.
    status: Option<DeviceBuffer<u64>>,
    /// The ping-pong partner of the keys.
    keys_alt: Option<DeviceBuffer<u8>>,
    /// The ping-pong partner of the values.
    values_alt: Option<DeviceBuffer<u8>>,
    /// The last epoch given to a pass.
    epoch: u32,
    /// A call stopped between its launches: clear everything before the next.
    dirty: bool,
    /// Kernel launches made so far ([`GpuContext::sort_launches`]).
    pub(crate) launches: u64,
}

fn grow<T: DeviceRepr + ValidAsZeroBits>(
    gpu: &GpuContext,
    slot: &mut Option<DeviceBuffer<T>>,
    n: usize,
) -> Result<()> {
    if slot.as_ref().is_none_or(|b| b.len() < n) {
        *slot = Some(gpu.zeros(n.max(1))?);
    }
    Ok(())
}

/// The device address of the first element of a scratch buffer (grown before).
fn addr<T>(gpu: &GpuContext, slot: &Option<DeviceBuffer<T>>) -> DevPtr<T> {
    match slot {
        Some(b) => gpu.ptr(b),
        None => DevPtr::NULL,
    }
}

/// One sort's device addresses, as words.
#[derive(Clone, Copy)]
struct Operands {
    keys_in: DevPtr<u32>,
    keys_out: DevPtr<u32>,
    values_in: DevPtr<u32>,
    values_out: DevPtr<u32>,
    value_bytes: usize,
}

impl GpuContext {
    /// Stable sort of `keys_in[..n]` into `keys_out[..n]` by the bits `opts` names.
    /// `keys_in` is not written; one temporary buffer of `n` keys is kept in the context.
    /// Launches `1 + passes` kernels (one up to `SINGLE_TILE` keys), no host round trip.
    pub fn sort_keys_device<K: SortKey>(
        &self,
        keys_in: &DeviceBuffer<K>,
        keys_out: &mut DeviceBuffer<K>,
        n: usize,
        opts: SortOptions,
    ) -> Result<()> {
        check::<K>(n, 0, &opts)?;
        if keys_in.len() < n || keys_out.len() < n {
            return Err(invalid("sort buffers", "shorter than n"));
        }
        let (begin, end) = opts.range::<K>()?;
        if n == 0 {
            return Ok(());
        }
        if begin == end {
            return self
                .stream()
                .memcpy_dtod(&keys_in.slice(..n), &mut keys_out.slice_mut(..n))
                .ctx("copying keys");
        }
        let ops = Operands {
            keys_in: self.ptr(keys_in).cast(),
            keys_out: self.ptr_mut(keys_out).cast(),
            values_in: DevPtr::NULL,
            values_out: DevPtr::NULL,
            value_bytes: 0,
        };
        self.sort_raw::<K>(ops, n, begin, end, opts.descending)
    }

    /// Stable sort of `keys_in[..n]` and `values_in[..n]` into `keys_out` and `values_out`
    /// (values of 4, 8, 12 or 16 bytes). The inputs are not written.
    pub fn sort_pairs_device<K: SortKey, V: DeviceRepr>(
        &self,
        keys_in: &DeviceBuffer<K>,
        keys_out: &mut DeviceBuffer<K>,
        values_in: &DeviceBuffer<V>,
        values_out: &mut DeviceBuffer<V>,
        n: usize,
        opts: SortOptions,
    ) -> Result<()> {
        let vb = std::mem::size_of::<V>();
        self.sort_pairs_checked(keys_in, keys_out, values_in, values_out, vb, n, opts)
    }

    /// Stable argsort: sorts `keys_in[..n]` into `keys_out` and writes each sorted key's input
    /// index into `index_out` (the pairs sort with the indices as values, except that no index
    /// array is read: the first pass makes them). `keys_in` is not written.
    pub fn sort_index_device<K: SortKey>(
        &self,
        keys_in: &DeviceBuffer<K>,
        keys_out: &mut DeviceBuffer<K>,
        index_out: &mut DeviceBuffer<u32>,
        n: usize,
        opts: SortOptions,
    ) -> Result<()> {
        check::<K>(n, 4, &opts)?;
        if keys_in.len() < n || keys_out.len() < n || index_out.len() < n {
            return Err(invalid("sort buffers", "shorter than n"));
        }
        let (begin, end) = opts.range::<K>()?;
        if n == 0 {
            return Ok(());
        }
        if begin == end {
            // Sorted by nothing: the keys as they are, the identity permutation.
            self.stream()
                .memcpy_dtod(&keys_in.slice(..n), &mut keys_out.slice_mut(..n))
                .ctx("copying keys")?;
            let iota: Vec<u32> = (0..n as u32).collect();
            return self
                .stream()
                .memcpy_htod(&iota, &mut index_out.slice_mut(..n))
                .ctx("uploading the identity permutation");
        }
        let ops = Operands {
            keys_in: self.ptr(keys_in).cast(),
            keys_out: self.ptr_mut(keys_out).cast(),
            values_in: DevPtr::NULL,
            values_out: self.ptr_mut(index_out),
            value_bytes: 4,
        };
        self.sort_raw::<K>(ops, n, begin, end, opts.descending)
    }

    /// As [`GpuContext::sort_pairs_device`] with the values as raw bytes, `value_bytes` (4, 8,
    /// 12 or 16) per value: for payloads that are not a cudarc `DeviceRepr` type.
    #[allow(clippy::too_many_arguments)]
    pub fn sort_pairs_bytes_device<K: SortKey>(
        &self,
        keys_in: &DeviceBuffer<K>,
        keys_out: &mut DeviceBuffer<K>,
        values_in: &DeviceBuffer<u8>,
        values_out: &mut DeviceBuffer<u8>,
        value_bytes: usize,
        n: usize,
        opts: SortOptions,
    ) -> Result<()> {
        self.sort_pairs_checked(
            keys_in,
            keys_out,
            values_in,
            values_out,
            value_bytes,
            n,
            opts,
        )
    }

    /// The one body of both pairs sorts: values of `value_bytes` bytes stored as elements of
    /// `V` (`V` the value type itself, or `u8`), checked, copied as they are for an empty bit
    /// range, sorted otherwise.
    #[allow(clippy::too_many_arguments)]
    fn sort_pairs_checked<K: SortKey, V: DeviceRepr>(
        &self,
        keys_in: &DeviceBuffer<K>,
        keys_out: &mut DeviceBuffer<K>,
        values_in: &DeviceBuffer<V>,
        values_out: &mut DeviceBuffer<V>,
        value_bytes: usize,
        n: usize,
        opts: SortOptions,
    ) -> Result<()> {
        check::<K>(n, value_bytes, &opts)?;
        if value_bytes == 0 {
            return Err(invalid("sort values", "values of 0 bytes"));
        }
        // Elements of `V` that hold n values.
        let nv = n * value_bytes / std::mem::size_of::<V>().max(1);
        if keys_in.len() < n || keys_out.len() < n || values_in.len() < nv || values_out.len() < nv
        {
            return Err(invalid("sort buffers", "shorter than n"));
        }
        let (begin, end) = opts.range::<K>()?;
        if n == 0 {
            return Ok(());
        }
        if begin == end {
            self.stream()
                .memcpy_dtod(&keys_in.slice(..n), &mut keys_out.slice_mut(..n))
                .ctx("copying keys")?;
            return self
                .stream()
                .memcpy_dtod(&values_in.slice(..nv), &mut values_out.slice_mut(..nv))
                .ctx("copying values");
        }
        let ops = Operands {
            keys_in: self.ptr(keys_in).cast(),
            keys_out: self.ptr_mut(keys_out).cast(),
            values_in: self.ptr(values_in).cast(),
            values_out: self.ptr_mut(values_out).cast(),
            value_bytes,
        };
        self.sort_raw::<K>(ops, n, begin, end, opts.descending)
    }

    /// Raises the last pass epoch the sort used to `epoch` (never lowers it: a lower epoch
    /// could meet status words of earlier passes). For tests of the epoch's wrap.
    #[doc(hidden)]
    pub fn sort_set_epoch(&self, epoch: u32) {
        self.with_scratch(|t: &mut SortTemp| t.epoch = t.epoch.max(epoch.min(k::MAX_EPOCH)));
    }

    /// The launches of one sort (`1 <= n < 2^32`, `begin < end <= K::BITS`, buffers of `n`
    /// elements checked by the callers, inputs and outputs distinct allocations).
    fn sort_raw<K: SortKey>(
        &self,
        ops: Operands,
        n: usize,
        begin: u32,
        end: u32,
        descending: bool,
    ) -> Result<()> {
        check_value_bytes(ops.value_bytes)?;
        let kb = std::mem::size_of::<K>();
        let vb = ops.value_bytes;
        let passes = k::passes(begin, end);
        let desc = descending as u32;
        self.with_scratch(|t: &mut SortTemp| -> Result<()> {
            if n <= k::SINGLE_TILE as usize {
                let params = SortSingleTileParams {
                    keys_in: ops.keys_in,
                    keys_out: ops.keys_out,
                    values_in: ops.values_in,
                    values_out: ops.values_out,
                    n: n as u64,
                    begin_bit: begin,
                    end_bit: end,
                    descending: desc,
                    value_words: (vb / 4) as u32,
                };
                let kernel = if kb == 4 {
                    k::KERNEL_SORT_SINGLE_U32
                } else {
                    k::KERNEL_SORT_SINGLE_U64
                };
                t.launches += 1;
                // SAFETY: one block of SINGLE_THREADS with `single_smem_bytes(kb)` bytes;
                // 1 <= n <= SINGLE_TILE; keys and values (value_words = vb / 4 <= 4 words)
                // valid for n elements in distinct allocations (callers); begin < end <= key
                // bits (callers).
                return unsafe {
                    self.launch(
                        kernel,
                        cfg(1, k::SINGLE_THREADS, k::single_smem_bytes(kb)),
                        &params,
                    )
                };
            }
            let tiles = k::onesweep_tiles(n as u64, kb, vb);
            grow(self, &mut t.bins, (k::MAX_PASSES * k::RADIX) as usize)?;
            grow(self, &mut t.offsets, (k::MAX_PASSES * k::RADIX) as usize)?;
            grow(self, &mut t.counters, k::COUNTER_WORDS)?;
            grow(self, &mut t.status, tiles as usize * k::RADIX as usize)?;
            if passes >= 2 {
                grow(self, &mut t.keys_alt, n * kb)?;
                if vb > 0 {
                    grow(self, &mut t.values_alt, n * vb)?;
                }
            }
            if t.dirty {
                // A call failed between its launches: counters may be left non-zero.
                for b in [&mut t.bins, &mut t.counters].into_iter().flatten() {
                    self.memset_zero(b)?;
                }
                if let Some(s) = t.status.as_mut() {
                    self.memset_zero(s)?;
                }
                t.epoch = 0;
            }
            if t.epoch as u64 + passes as u64 > k::MAX_EPOCH as u64 {
                if let Some(s) = t.status.as_mut() {
                    self.memset_zero(s)?;
                }
                t.epoch = 0;
            }
            t.dirty = true;
            let bins = addr(self, &t.bins);
            let offsets = addr(self, &t.offsets);
            let counters = addr(self, &t.counters);
            let status = addr(self, &t.status);
            let keys_alt: DevPtr<u32> = addr(self, &t.keys_alt).cast();
            let values_alt: DevPtr<u32> = addr(self, &t.values_alt).cast();

            let hist = SortHistogramParams {
                keys: ops.keys_in,
                bins,
                offsets,
                counters,
                n: n as u64,
                begin_bit: begin,
                end_bit: end,
                descending: desc,
                _pad: 0,
            };
            let hist_blocks = (n as u64)
                .div_ceil((k::HISTOGRAM_THREADS * k::HISTOGRAM_ITEMS) as u64)
                .clamp(1, (self.sm_count() * k::HISTOGRAM_BLOCKS_PER_SM) as u64);
            let hist_kernel = if kb == 4 {
                k::KERNEL_SORT_HISTOGRAM_U32
            } else {
                k::KERNEL_SORT_HISTOGRAM_U64
            };
            t.launches += 1;
            // SAFETY: HISTOGRAM_THREADS threads, `histogram_smem_bytes(kb)` bytes; 1 <= n <
            // 2^32 keys in a 256-byte aligned allocation (callers); begin < end <= key bits;
            // bins (MAX_PASSES × RADIX) and counters are zero: allocated zeroed, cleared
            // above after a failed call, and left zero by every histogram launch; offsets
            // holds MAX_PASSES × RADIX words.
            unsafe {
                self.launch(
                    hist_kernel,
                    cfg(
                        hist_blocks,
                        k::HISTOGRAM_THREADS,
                        k::histogram_smem_bytes(kb),
                    ),
                    &hist,
                )?
            };
            // The onesweep shape (`detkit::tuning`): the staged kernel and the look-back batch.
            let (_, staged, batch) = crate::tuning::Tuned::SortOnesweep.current();
            let resident = self.sm_count() as u64 * k::onesweep_min_blocks(vb) as u64;
            let (staged, lookback_batch) =
                k::onesweep_shape(kb, vb, tiles, resident, staged, batch);
            let (kernel, smem) = match k::onesweep_staged_kernel(kb, vb) {
                Some(s) if staged => (s, k::onesweep_staged_smem_bytes(kb, vb)),
                _ => (
                    k::onesweep_kernel(kb, vb)
                        .ok_or_else(|| invalid("sort values", format!("{vb} bytes")))?,
                    k::onesweep_smem_bytes(kb, vb),
                ),
            };
            let (mut k_src, mut v_src) = (ops.keys_in, ops.values_in);
            for pass in 0..passes {
                // The last pass writes the caller's output: count back from it.
                let to_out = (passes - 1 - pass).is_multiple_of(2);
                let (k_dst, v_dst) = if to_out {
                    (ops.keys_out, ops.values_out)
                } else {
                    (keys_alt, values_alt)
                };
                let (shift, bits) = k::pass_bits(begin, end, pass);
                t.epoch += 1;
                let params = SortOnesweepParams {
                    keys_in: k_src,
                    keys_out: k_dst,
                    values_in: v_src,
                    values_out: v_dst,
                    offsets: offsets.offset((pass * k::RADIX) as u64),
                    status,
                    tile_counter: counters.offset(1 + pass as u64),
                    n: n as u64,
                    shift,
                    bits,
                    descending: desc,
                    epoch: t.epoch,
                    lookback_batch,
                    _pad: 0,
                };
                t.launches += 1;
                // SAFETY: ONESWEEP_THREADS threads, `tiles` blocks, the kernel's shared memory
                // (`onesweep_smem_bytes`, or `onesweep_staged_smem_bytes` for a staged one);
                // source and destination are distinct allocations of n keys (and values):
                // the caller's input or output and the scratch partner, alternating (the
                // input is only ever read); offsets of this pass come from the histogram
                // launched before on this stream over the same keys and digits; status holds
                // tiles × RADIX words and no word carries this new epoch; the tile counter
                // was zeroed by the histogram's last block.
                unsafe { self.launch(kernel, cfg(tiles, k::ONESWEEP_THREADS, smem), &params)? };
                k_src = k_dst;
                v_src = v_dst;
            }
            t.dirty = false;
            Ok(())
        })
    }
}
