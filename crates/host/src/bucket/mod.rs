//! Bucket container (CMS `HistoContainer` / `OneToManyAssoc` style): item indices grouped
//! by key, device-wide and per segment (block level). Kernels: `detkit_gpu::bucket`;
//! launchers: [`cuda`]; oracle (also the CPU backend): [`cpu`].
//!
//! ```
//! use detkit::{Backend, BucketOrder};
//! let b = Backend::cpu().bucket(&[2, 0, 2, 1, 0], 3, BucketOrder::Stable).unwrap();
//! assert_eq!(b.offsets, [0, 2, 3, 5]);
//! assert_eq!(b.content, [1, 4, 3, 0, 2]);
//! ```

pub mod cpu;
pub mod cuda;

use detkit_gpu::bucket as k;

use crate::error::{invalid, Error, Result};
use crate::Backend;

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

pub use crate::cuda::MAX_BLOCK_SMEM;

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
                Ok(crate::bucket::cpu::bucket(keys, nbins))
            }
            Some(gpu) => {
                if keys.is_empty() {
                    return Ok(crate::bucket::cpu::bucket(keys, nbins));
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
                let mut r = crate::bucket::cpu::block_bucket(keys, segments, nbins);
                r.fallbacks = segments
                    .windows(2)
                    .filter(|w| w[1] - w[0] > capacity)
                    .count() as u32;
                Ok(r)
            }
            Some(gpu) => {
                if keys.is_empty() {
                    return Ok(crate::bucket::cpu::block_bucket(keys, segments, nbins));
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
