//! The seeding workspace a [`crate::Backend`] keeps between calls: the device buffers of the
//! chain ([`SeedingWorkspace`]) and pinned staging, on a stream of its own.

use std::sync::Arc;

use super::cuda::{Events, SeedStaging, SeedingWorkspace};
use super::{SeedingConfig, SeedingOutput};
use crate::cuda::GpuContext;
use crate::error::Result;
use crate::staging::HostCopies;

/// The seeding workspace of one stream.
pub(crate) struct SeedWorkspace {
    pub(crate) gpu: Arc<GpuContext>,
    pub(crate) ws: SeedingWorkspace,
    stage: SeedStaging,
    /// The device-view calls' column table, event offsets and status word.
    pub(crate) views: super::device_view::ViewBuffers,
}

impl SeedWorkspace {
    pub(crate) fn new(gpu: &GpuContext) -> Result<Self> {
        Ok(Self {
            gpu: crate::workspace::fork(gpu)?,
            ws: SeedingWorkspace::new(),
            stage: SeedStaging::default(),
            views: Default::default(),
        })
    }

    /// Seeds events into `out` (spacepoint slices validated by the caller; columns checked
    /// as they are gathered).
    pub(crate) fn seed_events(
        &mut self,
        events: Events<'_>,
        cfg: &SeedingConfig,
        copies: HostCopies,
        out: &mut Vec<SeedingOutput>,
    ) -> Result<()> {
        let stage = match copies {
            HostCopies::Pinned => Some(&mut self.stage),
            HostCopies::Pageable => None,
        };
        self.gpu
            .seed_events_host(&mut self.ws, events, cfg, stage, out)
    }
}
