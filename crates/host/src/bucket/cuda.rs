//! Bucket-container launchers on [`GpuContext`].

use detkit_gpu::bucket as k;
use detkit_gpu::histogram::decode_first_index;

use super::{out_of_range, BucketOrder, MAX_BLOCK_SMEM, POISON};
use crate::cuda::{cfg, DeviceBuffer, GpuContext};
use crate::error::{DriverContext, Error, Result};
use crate::histogram::HistogramStrategy;
use crate::ScanKind;

impl GpuContext {
    /// Device-wide container of `keys` (all `< nbins`, else a typed error naming the first
    /// offending index). Returns `(offsets, content)` on the device.
    pub fn bucket_device(
        &self,
        keys: &DeviceBuffer<u32>,
        n: usize,
        nbins: u32,
        order: BucketOrder,
    ) -> Result<(DeviceBuffer<u32>, DeviceBuffer<u32>)> {
        // Poisoned: every element must be written by the kernels.
        let mut offsets = self.filled_u32(nbins as usize + 1, POISON)?;
        let mut content = self.filled_u32(n.max(1), POISON)?;
        if n == 0 {
            self.memset_zero(&mut offsets)?;
            return Ok((offsets, content));
        }
        let n64 = n as u64;
        match order {
            BucketOrder::Unordered => {
                // count (histogram) → finalize (exclusive scan of nbins + 1 counts) → fill
                let mut h = self.histogram_outputs(nbins + 1)?;
                self.histogram_device(keys, n, nbins, HistogramStrategy::Auto, false, &mut h)?;
                self.check_keys_on_device(&h.out_of_range, keys, nbins)?;
                self.scan_device(
                    &h.counts,
                    &mut offsets,
                    nbins as usize + 1,
                    ScanKind::Exclusive,
                )?;
                let mut cursor = self.zeros::<u32>(nbins as usize + 1)?;
                self.stream()
                    .memcpy_dtod(&offsets, &mut cursor)
                    .ctx("copying bucket offsets")?;
                let blocks = n64
                    .div_ceil(k::BUCKET_THREADS as u64 * 4)
                    .clamp(1, self.sm_count() as u64 * 8);
                let params = k::BucketFillParams {
                    keys: self.ptr(keys),
                    n: n64,
                    nbins,
                    cursor: self.ptr_mut(&mut cursor),
                    content: self.ptr_mut(&mut content),
                    ..bytemuck::Zeroable::zeroed()
                };
                // SAFETY: keys hold n < 2^32 aligned elements, all < nbins (checked above);
                // cursor is a copy of the offsets; content holds n elements.
                let r = unsafe {
                    self.launch(
                        k::KERNEL_BUCKET_FILL,
                        cfg(blocks, k::BUCKET_THREADS, 0),
                        &params,
                    )
                };
                r?;
            }
            BucketOrder::Stable => {
                let (tiles, per) = k::bucket_stable_tiling(n64, nbins);
                let cells = tiles as u64 * nbins as u64;
                if cells > k::BUCKET_STABLE_MATRIX_MAX {
                    return Err(Error::CapacityExceeded {
                        what: "stable bucket (bin, tile) matrix",
                        needed: cells,
                        capacity: k::BUCKET_STABLE_MATRIX_MAX,
                    });
                }
                let mut matrix = self.zeros::<u32>(cells as usize)?;
                let mut scanned = self.zeros::<u32>(cells as usize)?;
                let mut oor = self.zeros::<u32>(2)?;
                let warps_per_block = (k::BUCKET_THREADS / 32) as u64;
                let blocks = (tiles as u64).div_ceil(warps_per_block);
                {
                    let (c, f) = oor.split_at_mut(1);
                    let (mut c, mut f) = (c, f);
                    let params = k::BucketCountStableParams {
                        keys: self.ptr(keys),
                        n: n64,
                        nbins,
                        tiles,
                        per,
                        matrix: self.ptr_mut(&mut matrix),
                        out_of_range: self.ptr_mut(&mut c),
                        first_out_of_range: self.ptr_mut(&mut f),
                        ..bytemuck::Zeroable::zeroed()
                    };
                    // SAFETY: (tiles, per) from `bucket_stable_tiling`; one warp per tile;
                    // matrix holds nbins * tiles zeroed words; counters zeroed.
                    let r = unsafe {
                        self.launch(
                            k::KERNEL_BUCKET_COUNT_STABLE,
                            cfg(blocks, k::BUCKET_THREADS, 0),
                            &params,
                        )
                    };
                    r?;
                }
                self.check_keys_on_device(&oor, keys, nbins)?;
                self.scan_device(&matrix, &mut scanned, cells as usize, ScanKind::Exclusive)?;
                let total = n as u32;
                let params = k::BucketStableOffsetsParams {
                    scanned: self.ptr(&scanned),
                    tiles,
                    nbins,
                    total,
                    offsets: self.ptr_mut(&mut offsets),
                    ..bytemuck::Zeroable::zeroed()
                };
                // SAFETY: scanned holds nbins * tiles words, offsets nbins + 1.
                let r = unsafe {
                    self.launch(
                        k::KERNEL_BUCKET_STABLE_OFFSETS,
                        cfg((nbins as u64 + 1).div_ceil(256), 256, 0),
                        &params,
                    )
                };
                r?;
                let params = k::BucketFillStableParams {
                    keys: self.ptr(keys),
                    n: n64,
                    nbins,
                    tiles,
                    per,
                    matrix: self.ptr_mut(&mut scanned),
                    content: self.ptr_mut(&mut content),
                    ..bytemuck::Zeroable::zeroed()
                };
                // SAFETY: as for the count; scanned holds the exclusive scan of the counts;
                // all keys < nbins (checked); content holds n elements.
                let r = unsafe {
                    self.launch(
                        k::KERNEL_BUCKET_FILL_STABLE,
                        cfg(blocks, k::BUCKET_THREADS, 0),
                        &params,
                    )
                };
                r?;
            }
        }
        Ok((offsets, content))
    }

    /// Turns the `[count, encoded first index]` pair of a counting pass into a typed error
    /// naming the first key `>= nbins`.
    fn check_keys_on_device(
        &self,
        oor: &DeviceBuffer<u32>,
        keys: &DeviceBuffer<u32>,
        nbins: u32,
    ) -> Result<()> {
        let v = self.download(oor)?;
        self.reject_bad_key(decode_first_index(v[1]).filter(|_| v[0] > 0), keys, nbins)
    }

    /// When a kernel recorded an out-of-range key at index `first`, reads that key back and
    /// returns the typed error naming it.
    fn reject_bad_key(
        &self,
        first: Option<u32>,
        keys: &DeviceBuffer<u32>,
        nbins: u32,
    ) -> Result<()> {
        let Some(first) = first else {
            return Ok(());
        };
        let first = first as usize;
        let key = self
            .stream()
            .clone_dtoh(&keys.slice(first..first + 1))
            .ctx("reading the offending key")?;
        Err(out_of_range(first, key[0], nbins))
    }

    /// Block-level containers, one per segment `segments[s]..segments[s + 1]` (which must
    /// start at 0, end at `n` and not decrease). Segments of more than `capacity` items
    /// (default: what fits in 48 KiB of shared memory) are built by the global-memory
    /// fallback, counted in [`super::BlockBuckets::fallbacks`].
    #[allow(clippy::too_many_arguments)]
    pub fn block_bucket_device(
        &self,
        keys: &DeviceBuffer<u32>,
        segments: &DeviceBuffer<u32>,
        nsegs: usize,
        nbins: u32,
        order: BucketOrder,
        threads: u32,
        capacity: u32,
    ) -> Result<(DeviceBuffer<u32>, DeviceBuffer<u32>, u32)> {
        crate::scan::check_block_size(threads)?;
        let n = keys.len();
        let smem = k::block_bucket_smem_bytes(nbins, capacity);
        if smem > MAX_BLOCK_SMEM {
            return Err(Error::CapacityExceeded {
                what: "block bucket shared memory (bytes)",
                needed: smem as u64,
                capacity: MAX_BLOCK_SMEM as u64,
            });
        }
        let mut offsets = self.filled_u32((nsegs * (nbins as usize + 1)).max(1), POISON)?;
        let mut content = self.filled_u32(n.max(1), POISON)?;
        let mut counters = self.zeros::<u32>(2)?;
        if nsegs == 0 {
            return Ok((offsets, content, 0));
        }
        self.allow_smem(k::KERNEL_BUCKET_BLOCK_FILL, smem)?;
        let (nsegs32, stable) = (nsegs as u32, (order == BucketOrder::Stable) as u32);
        let blocks = (nsegs as u64).min(crate::cuda::MAX_GRID);
        {
            let (fb, first) = counters.split_at_mut(1);
            let (mut fb, mut first) = (fb, first);
            let params = k::BucketBlockFillParams {
                keys: self.ptr(keys),
                seg_offsets: self.ptr(segments),
                nsegs: nsegs32,
                nbins,
                capacity,
                stable,
                out_offsets: self.ptr_mut(&mut offsets),
                out_content: self.ptr_mut(&mut content),
                fallbacks: self.ptr_mut(&mut fb),
                first_out_of_range: self.ptr_mut(&mut first),
            };
            // SAFETY: `threads` a multiple of 32 up to 1024 (checked); shared memory is
            // `block_bucket_smem_bytes(nbins, capacity)` (limit raised above 48 KiB); segments
            // validated by the caller (start 0, end n, non-decreasing); buffers sized here.
            let r = unsafe {
                self.launch(
                    k::KERNEL_BUCKET_BLOCK_FILL,
                    cfg(blocks, threads, smem),
                    &params,
                )
            };
            r?;
        }
        let c = self.download(&counters)?;
        self.reject_bad_key(decode_first_index(c[1]), keys, nbins)?;
        Ok((offsets, content, c[0]))
    }
}
