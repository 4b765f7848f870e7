//! Kernel shape variants for A/B timing (issue 28). `detkit-bench --variants` picks one
//! shape per primitive, times it beside the default and CUB, and checks each result against
//! the oracle first. The choice is process-wide; the default (index 0) is what every other
//! caller gets, and the tables live beside the kernels (`detkit_gpu::*::*_VARIANTS`).
//!
//! The environment can choose too, for test runs of a whole process on a shape:
//! `DETKIT_TUNED=SortOnesweep=4` (entries `Name=index`, comma-separated, names as
//! [`Tuned`]'s variants), read once before the first choice or launch; an entry that names
//! no primitive or shape is reported on stderr and ignored.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

use crate::error::{invalid, Result};

/// A primitive with kernel shape variants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tuned {
    /// The `u32` device scan: `detkit_gpu::scan::SCAN_U32_VARIANTS`.
    ScanU32,
    /// The range select: `detkit_gpu::compact::SELECT_RANGE_VARIANTS`.
    SelectRange,
    /// The shared-memory histogram: `detkit_gpu::histogram::HISTOGRAM_SHARED_VARIANTS`.
    HistogramShared,
    /// The device scans' look-back sleep: `detkit_gpu::scan::LOOKBACK_NS_VARIANTS`.
    LookbackNs,
    /// The radix sort's onesweep launches: `detkit_gpu::sort::SORT_ONESWEEP_VARIANTS`.
    SortOnesweep,
}

static CHOSEN: [AtomicUsize; 5] = [
    AtomicUsize::new(0),
    AtomicUsize::new(0),
    AtomicUsize::new(0),
    AtomicUsize::new(0),
    AtomicUsize::new(0),
];

/// Every primitive with shapes.
const ALL: [Tuned; 5] = [
    Tuned::ScanU32,
    Tuned::SelectRange,
    Tuned::HistogramShared,
    Tuned::LookbackNs,
    Tuned::SortOnesweep,
];

/// The entries of a `DETKIT_TUNED` value: each `Name=index` as the choice it names, or the
/// entry itself where it names no primitive or shape.
fn parse_tuned(spec: &str) -> Vec<std::result::Result<(Tuned, usize), &str>> {
    spec.split(',')
        .filter(|e| !e.trim().is_empty())
        .map(|entry| {
            entry
                .split_once('=')
                .and_then(|(name, index)| {
                    let t = *ALL.iter().find(|t| format!("{t:?}") == name.trim())?;
                    let index: usize = index.trim().parse().ok()?;
                    (index < t.shapes().len()).then_some((t, index))
                })
                .ok_or(entry)
        })
        .collect()
}

/// Applies `DETKIT_TUNED` once (module docs).
fn from_env() {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        let Ok(spec) = std::env::var("DETKIT_TUNED") else {
            return;
        };
        for choice in parse_tuned(&spec) {
            match choice {
                Ok((t, index)) => t.slot().store(index, Ordering::Relaxed),
                Err(entry) => eprintln!(
                    "detkit: DETKIT_TUNED entry `{entry}` ignored (no such primitive or shape)"
                ),
            }
        }
    });
}

impl Tuned {
    /// The shapes `(kernel, first parameter, second parameter)`: threads and items per
    /// thread for the scan and the select, loads in flight and blocks per multiprocessor for
    /// the histogram, nanoseconds (and 0) for the look-back sleep, the split launch (0 or 1)
    /// and the look-back batch for the sort.
    pub fn shapes(self) -> &'static [(&'static str, u32, u32)] {
        match self {
            Tuned::ScanU32 => detkit_gpu::scan::SCAN_U32_VARIANTS,
            Tuned::SelectRange => detkit_gpu::compact::SELECT_RANGE_VARIANTS,
            Tuned::HistogramShared => detkit_gpu::histogram::HISTOGRAM_SHARED_VARIANTS,
            Tuned::LookbackNs => detkit_gpu::scan::LOOKBACK_NS_VARIANTS,
            Tuned::SortOnesweep => detkit_gpu::sort::SORT_ONESWEEP_VARIANTS,
        }
    }

    fn slot(self) -> &'static AtomicUsize {
        &CHOSEN[self as usize]
    }

    /// Makes every later launch of this primitive (in this process) use shape `index`.
    pub fn choose(self, index: usize) -> Result<()> {
        from_env();
        if index >= self.shapes().len() {
            return Err(invalid(
                "kernel variant",
                format!("{self:?} has {} shapes, not {index}", self.shapes().len()),
            ));
        }
        self.slot().store(index, Ordering::Relaxed);
        Ok(())
    }

    /// The shape launches use now.
    pub fn current(self) -> (&'static str, u32, u32) {
        from_env();
        self.shapes()[self.slot().load(Ordering::Relaxed)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_the_first_shape_and_out_of_range_is_refused() {
        for t in ALL {
            assert_eq!(t.current(), t.shapes()[0]);
            assert!(t.choose(t.shapes().len()).is_err());
            assert_eq!(t.current(), t.shapes()[0]);
        }
    }

    #[test]
    fn environment_entries_parse_or_are_reported() {
        let got = parse_tuned("SortOnesweep=3, ScanU32=0,,Nope=1,SortOnesweep=99,LookbackNs");
        assert_eq!(
            got,
            vec![
                Ok((Tuned::SortOnesweep, 3)),
                Ok((Tuned::ScanU32, 0)),
                Err("Nope=1"),
                Err("SortOnesweep=99"),
                Err("LookbackNs"),
            ]
        );
    }
}
