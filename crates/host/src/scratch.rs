//! The temporary device state each family keeps on a [`GpuContext`](crate::cuda::GpuContext):
//! one named, typed field per family (the scan's look-back flags, the radix sort's passes,
//! the bucket container, the PET radix sort and merge, the seeding workspace), created
//! empty with the context and grown on demand by the family that owns it.
//!
//! The context itself knows none of these types; it holds one [`Scratch`] behind a lock and
//! hands a family its own field through [`ScratchSlot`] (see `GpuContext::with_scratch`).

use crate::bucket::cuda::BucketTemp;
use crate::pet::cuda::PetRadixTemp;
use crate::pet::merge::MergeTemp;
use crate::scan::cuda::ScanTemp;
use crate::seeding::cuda::SeedingWorkspace;
use crate::sort::cuda::SortTemp;

/// Every family's reusable device buffers on one context (or fork).
#[derive(Default)]
pub(crate) struct Scratch {
    scan: ScanTemp,
    sort: SortTemp,
    bucket: BucketTemp,
    pet_radix: PetRadixTemp,
    pet_merge: MergeTemp,
    seeding: Option<SeedingWorkspace>,
}

/// A type that has its own field in [`Scratch`].
pub(crate) trait ScratchSlot: Sized {
    /// This type's field of `s`.
    fn slot(s: &mut Scratch) -> &mut Self;
}

macro_rules! slots {
    ($($ty:ty => $field:ident),* $(,)?) => {
        $(impl ScratchSlot for $ty {
            fn slot(s: &mut Scratch) -> &mut Self {
                &mut s.$field
            }
        })*
    };
}

slots! {
    ScanTemp => scan,
    SortTemp => sort,
    BucketTemp => bucket,
    PetRadixTemp => pet_radix,
    MergeTemp => pet_merge,
    Option<SeedingWorkspace> => seeding,
}
