//! Bucket container (CMS `HistoContainer` / `OneToManyAssoc` style): launchers and the
//! backend-neutral API. See `detkit_gpu::bucket` for the algorithm and the order rules.

use detkit_gpu::bucket as k;
use detkit_gpu::histogram::decode_first_index;

use crate::cuda::{cfg, DeviceBuffer, GpuContext};
use crate::error::{invalid, DriverContext, Error, Result};
use crate::histogram::HistogramStrategy;
use crate::{cpu, Backend, ScanKind};

/// Value the bucket outputs are filled with before the kernels run; an element still holding
/// it afterwards was never written (tests look for it).
pub const POISON: u32 = 0xDEAD_BEEF;

/// Order of the items inside a bin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BucketOrder {
    /// Increasing item index: deterministic, equal to the oracle element for element.
    Stable,
    /// Whatever order the atomic cursors give (faster; only the set per bin is fixed).
    Unordered,
}

/// Items grouped by key: bin `b` holds `content[offsets[b]..offsets[b + 1]]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Buckets {
    /// `nbins + 1` offsets; `offsets[nbins]` is the number of items.
    pub offsets: Vec<u32>,
    /// Item indices grouped by bin.
    pub content: Vec<u32>,
}

impl Buckets {
    /// The items of bin `b`.
    pub fn bin(&self, b: usize) -> &[u32] {
        &self.content[self.offsets[b] as usize..self.offsets[b + 1] as usize]
    }
}

/// One container per segment of consecutive items (block-level version).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockBuckets {
    /// Bins per segment.
    pub nbins: u32,
    /// `nsegs * (nbins + 1)` offsets, relative to each segment's start.
    pub offsets: Vec<u32>,
    /// Global item indices; segment `s`'s container occupies its own index range.
    pub content: Vec<u32>,
    /// Number of segments larger than the shared-memory capacity, built by the fallback path.
    pub fallbacks: u32,
}

impl BlockBuckets {
    /// The items of bin `b` of segment `s`, where `segments` are the launch's segment offsets.
    pub fn bin(&self, segments: &[u32], s: usize, b: usize) -> &[u32] {
        let row = &self.offsets[s * (self.nbins as usize + 1)..];
        let base = segments[s] as usize;
        &self.content[base + row[b] as usize..base + row[b + 1] as usize]
    }
}

fn check_keys(keys: &[u32], nbins: u32) -> Result<()> {
    if nbins == 0 {
        return Err(invalid("nbins", "must be at least 1"));
    }
    if keys.len() as u64 > u32::MAX as u64 {
        return Err(invalid(
            "bucket keys",
            format!("{} keys; at most 2^32 - 1 are supported", keys.len()),
        ));
    }
    Ok(())
}

fn out_of_range(first: usize, key: u32, nbins: u32) -> Error {
    invalid(
        "bucket keys",
        format!("key {key} at index {first} is not below nbins = {nbins}"),
    )
}

fn check_segments(segments: &[u32], n: usize) -> Result<()> {
    if segments.is_empty() || segments[0] != 0 || *segments.last().expect("non-empty") as usize != n
    {
        return Err(invalid(
            "segments",
            format!("must start at 0 and end at the number of keys ({n})"),
        ));
    }
    if let Some(s) = segments.windows(2).position(|w| w[1] < w[0]) {
        return Err(invalid(
            "segments",
            format!(
                "offset {} at index {} is below the previous one {}",
                segments[s + 1],
                s + 1,
                segments[s]
            ),
        ));
    }
    Ok(())
}

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
    /// fallback, counted in [`BlockBuckets::fallbacks`].
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

/// Shared memory a block may use after the opt-in (Volta: 96 KiB; the smallest detkit supports).
pub const MAX_BLOCK_SMEM: usize = 96 * 1024;

/// Default capacity of the block-level container: what fits in 48 KiB with `nbins` bins.
pub const fn default_block_capacity(nbins: u32) -> u32 {
    let words = (48 * 1024 / 4) as u32;
    let h = k::block_bucket_header_words(nbins);
    words.saturating_sub(h)
}

impl Backend {
    /// Groups the indices of `keys` by key (`keys[i] < nbins`, else a typed error naming the
    /// first offending index).
    pub fn bucket(&self, keys: &[u32], nbins: u32, order: BucketOrder) -> Result<Buckets> {
        check_keys(keys, nbins)?;
        match self.gpu() {
            None => {
                if let Some(first) = keys.iter().position(|&x| x >= nbins) {
                    return Err(out_of_range(first, keys[first], nbins));
                }
                Ok(cpu::bucket::bucket(keys, nbins))
            }
            Some(gpu) => {
                if keys.is_empty() {
                    return Ok(cpu::bucket::bucket(keys, nbins));
                }
                let d = gpu.upload(keys)?;
                let (o, c) = gpu.bucket_device(&d, keys.len(), nbins, order)?;
                Ok(Buckets {
                    offsets: gpu.download(&o)?,
                    content: gpu.download(&c)?[..keys.len()].to_vec(),
                })
            }
        }
    }

    /// One container per segment `segments[s]..segments[s + 1]` of consecutive items
    /// (`segments` starts at 0, ends at `keys.len()`, never decreases). `capacity` bounds the
    /// items a segment may keep in shared memory (default [`default_block_capacity`]); larger
    /// segments take the fallback path.
    pub fn block_bucket(
        &self,
        keys: &[u32],
        segments: &[u32],
        nbins: u32,
        order: BucketOrder,
        capacity: Option<u32>,
    ) -> Result<BlockBuckets> {
        check_keys(keys, nbins)?;
        check_segments(segments, keys.len())?;
        let capacity = capacity.unwrap_or(default_block_capacity(nbins));
        match self.gpu() {
            None => {
                if let Some(first) = keys.iter().position(|&x| x >= nbins) {
                    return Err(out_of_range(first, keys[first], nbins));
                }
                let mut r = cpu::bucket::block_bucket(keys, segments, nbins);
                r.fallbacks = segments
                    .windows(2)
                    .filter(|w| w[1] - w[0] > capacity)
                    .count() as u32;
                Ok(r)
            }
            Some(gpu) => {
                if keys.is_empty() {
                    return Ok(cpu::bucket::block_bucket(keys, segments, nbins));
                }
                let d_keys = gpu.upload(keys)?;
                let d_seg = gpu.upload(segments)?;
                let nsegs = segments.len() - 1;
                let (o, c, fallbacks) =
                    gpu.block_bucket_device(&d_keys, &d_seg, nsegs, nbins, order, 256, capacity)?;
                let mut offsets = gpu.download(&o)?;
                offsets.truncate(nsegs * (nbins as usize + 1));
                let mut content = gpu.download(&c)?;
                content.truncate(keys.len());
                Ok(BlockBuckets {
                    nbins,
                    offsets,
                    content,
                    fallbacks,
                })
            }
        }
    }
}
