//! The seeding workspace a [`crate::Backend`] keeps between calls: the device buffers of the
//! chain ([`SeedingWorkspace`]) and pinned staging, on a stream of its own.

use std::sync::Arc;

use super::cuda::{SeedStaging, SeedingWorkspace};
use super::{SeedingConfig, SeedingOutput, SpacePoint};
use crate::cuda::GpuContext;
use crate::error::Result;
use crate::staging::HostCopies;

/// The seeding workspace of one stream.
pub(crate) struct SeedWorkspace {
    gpu: Arc<GpuContext>,
    ws: SeedingWorkspace,
    stage: SeedStaging,
}

impl SeedWorkspace {
    pub(crate) fn new(gpu: &GpuContext) -> Result<Self> {
        Ok(Self {
            gpu: crate::workspace::fork(gpu)?,
            ws: SeedingWorkspace::new(),
            stage: SeedStaging::default(),
        })
    }

    /// Seeds validated events into `out`.
    pub(crate) fn seed_events(
        &mut self,
        events: &[&[SpacePoint]],
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
