//! Bucket-container launchers on [`GpuContext`].

use detkit_gpu::bucket as k;
use detkit_gpu::histogram::decode_first_index;

use super::{out_of_range, BucketOrder, MAX_BLOCK_SMEM, POISON};
use crate::cuda::{cfg, DeviceBuffer, GpuContext};
use crate::error::{invalid, DriverContext, Error, Result};
use crate::sort::SortOptions;

/// Reusable temporary storage of the device-wide container: the sorted keys and the
/// out-of-range word, kept in the context's scratch (grown on demand) so that a call with
/// caller-provided outputs allocates nothing.
#[derive(Default)]
pub(crate) struct BucketTemp {
    sorted_keys: Option<DeviceBuffer<u32>>,
    first_bad: Option<DeviceBuffer<u32>>,
}

/// Bits of a bin index for `nbins` bins (at least 1, so that the sort runs one pass).
pub(crate) fn bin_bits(nbins: u32) -> u32 {
    (32 - (nbins.max(2) - 1).leading_zeros()).max(1)
}

impl GpuContext {
    /// Device-wide container of `keys` (all `< nbins`, else a typed error naming the first
    /// offending index). Returns `(offsets, content)` on the device, newly allocated; see
    /// [`GpuContext::bucket_device_into`].
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
        self.bucket_device_into(keys, n, nbins, order, &mut offsets, &mut content)?;
        Ok((offsets, content))
    }

    /// Device-wide container of `keys[..n]` into caller-provided `offsets` (`nbins + 1`
    /// words) and `content` (`n` words). A counting sort on the radix sort: the keys are
    /// sorted by their low `ceil(log2(nbins))` bits with their indices (one onesweep pass
    /// per 8 bits, `detkit_gpu::bucket` module docs), then one kernel writes the offsets.
    /// Both orders give the stable content (`Unordered` only promises the set per bin).
    /// One word is read back to report keys out of range (a typed error naming the first).
    pub fn bucket_device_into(
        &self,
        keys: &DeviceBuffer<u32>,
        n: usize,
        nbins: u32,
        order: BucketOrder,
        offsets: &mut DeviceBuffer<u32>,
        content: &mut DeviceBuffer<u32>,
    ) -> Result<()> {
        let _ = order;
        if nbins == 0 {
            return Err(invalid("nbins", "must be at least 1"));
        }
        if keys.len() < n || content.len() < n || offsets.len() < nbins as usize + 1 {
            return Err(invalid("bucket buffers", "shorter than n (or nbins + 1)"));
        }
        if n == 0 {
            return self.fill_u32(offsets, nbins as usize + 1, 0);
        }
        let bits = bin_bits(nbins);
        // The buffers leave the scratch map while the sort (which keeps its own scratch) runs.
        let (mut sorted, mut bad) =
            self.with_scratch(|t: &mut BucketTemp| (t.sorted_keys.take(), t.first_bad.take()));
        if sorted.as_ref().is_none_or(|b| b.len() < n) {
            sorted = Some(self.zeros(n)?);
        }
        if bad.is_none() {
            bad = Some(self.zeros(1)?);
        }
        let (Some(sorted_buf), Some(bad_buf)) = (sorted.as_mut(), bad.as_mut()) else {
            unreachable!("allocated above");
        };
        let first_bad =
            self.bucket_sorted(keys, n, nbins, bits, sorted_buf, bad_buf, offsets, content);
        self.with_scratch(|t: &mut BucketTemp| {
            t.sorted_keys = sorted;
            t.first_bad = bad;
        });
        self.reject_bad_key(first_bad?, keys, nbins)
    }

    /// The launches of [`GpuContext::bucket_device_into`] and the read-back of the smallest
    /// index of a key out of range.
    #[allow(clippy::too_many_arguments)]
    fn bucket_sorted(
        &self,
        keys: &DeviceBuffer<u32>,
        n: usize,
        nbins: u32,
        bits: u32,
        sorted: &mut DeviceBuffer<u32>,
        bad: &mut DeviceBuffer<u32>,
        offsets: &mut DeviceBuffer<u32>,
        content: &mut DeviceBuffer<u32>,
    ) -> Result<Option<u32>> {
        self.bucket_launch(keys, n, nbins, bits, sorted, bad, offsets, content)?;
        let v = self.download(bad)?;
        Ok((v[0] != u32::MAX).then_some(v[0]))
    }

    /// The launches of the device-wide container only (radix sort by the low `bits` bits,
    /// then the offsets kernel), with no host synchronisation: `bad[0]` receives the smallest
    /// index of a key `>= nbins` (`u32::MAX` when none), for callers whose keys are in range
    /// by construction or that read it later. Requires `1 <= n`, `keys`, `sorted`, `content`
    /// of at least `n` words and `offsets` of `nbins + 1`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn bucket_launch(
        &self,
        keys: &DeviceBuffer<u32>,
        n: usize,
        nbins: u32,
        bits: u32,
        sorted: &mut DeviceBuffer<u32>,
        bad: &mut DeviceBuffer<u32>,
        offsets: &mut DeviceBuffer<u32>,
        content: &mut DeviceBuffer<u32>,
    ) -> Result<()> {
        if n == 0
            || keys.len() < n
            || sorted.len() < n
            || content.len() < n
            || bad.is_empty()
            || offsets.len() < nbins as usize + 1
        {
            return Err(invalid(
                "bucket buffers",
                "n = 0 or buffers shorter than n (or nbins + 1)",
            ));
        }
        self.sort_index_device(keys, sorted, content, n, SortOptions::bits(0, bits))?;
        self.fill_u32(bad, 1, u32::MAX)?;
        let params = k::BucketOffsetsSortedParams {
            keys: self.ptr(sorted),
            index: self.ptr(content),
            offsets: self.ptr_mut(offsets),
            first_bad: self.ptr_mut(bad),
            n: n as u64,
            nbins,
            mask: if bits == 32 {
                u32::MAX
            } else {
                (1 << bits) - 1
            },
        };
        let blocks = (n as u64 + 1)
            .div_ceil(k::BUCKET_OFFSETS_THREADS as u64)
            .clamp(1, self.sm_count() as u64 * 16);
        // SAFETY: `sorted` and `content` hold the n keys sorted by their low `bits` bits and
        // their input indices (the sort above, same stream); offsets holds nbins + 1 words,
        // bad one word set to u32::MAX (all checked above).
        unsafe {
            self.launch(
                k::KERNEL_BUCKET_OFFSETS_SORTED,
                cfg(blocks, k::BUCKET_OFFSETS_THREADS, 0),
                &params,
            )
        }
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
        crate::cuda::check_block_size(threads)?;
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

#[cfg(test)]
mod tests {
    use super::bin_bits;

    #[test]
    fn bin_bits_cover_every_bin_and_no_more() {
        for (nbins, bits) in [(1, 1), (2, 1), (3, 2), (256, 8), (257, 9), (1024, 10)] {
            assert_eq!(bin_bits(nbins), bits, "nbins {nbins}");
        }
        assert_eq!(bin_bits(u32::MAX), 32);
        for nbins in (2u32..5000).chain([1 << 31, (1 << 31) + 1]) {
            let b = bin_bits(nbins);
            assert!(
                b == 32 || (nbins - 1) >> b == 0,
                "nbins {nbins}: {b} bits too few"
            );
            assert!(
                (nbins - 1) >> (b - 1) == 1,
                "nbins {nbins}: {b} bits too many"
            );
        }
    }
}
