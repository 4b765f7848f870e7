//! The clustering workspace a [`crate::Backend`] keeps between calls: device digis, one
//! cached [`Clusterer`] per geometry and call shape, and pinned staging; the host-path call
//! that uses them.

use std::sync::Arc;

use detkit_gpu::clustering as k;

use super::cuda::{ClusterStaging, Clusterer, DeviceDigis, MAX_EVENTS_PER_LAUNCH};
use super::{validate_digis, validate_shape, ChargeCut, Clusters, DigisRef, Geometry};
use crate::cuda::GpuContext;
use crate::error::Result;
use crate::staging::HostCopies;

/// Most clusterers kept (geometries × call shapes); the oldest goes first.
const MAX_CLUSTERERS: usize = 4;

/// The clustering workspace of one stream.
pub(crate) struct ClusterWorkspace {
    gpu: Arc<GpuContext>,
    digis: Option<DeviceDigis>,
    /// Most recently used last.
    clusterers: Vec<Clusterer<'static>>,
    stage: ClusterStaging,
}

/// Whether a batch of `events` events takes the latency settings (a `Clusterer` sized for
/// at most [`k::FEW_EVENTS_PER_LAUNCH`] events chooses them).
fn few(events: usize) -> bool {
    events <= k::FEW_EVENTS_PER_LAUNCH as usize
}

/// A capacity grown to hold `need`: at least half again the old one, so that slowly growing
/// batches reallocate rarely.
fn grown(need: usize, old: usize) -> usize {
    need.max(old + old / 2)
}

impl ClusterWorkspace {
    pub(crate) fn new(gpu: &GpuContext) -> Result<Self> {
        Ok(Self {
            gpu: crate::workspace::fork(gpu)?,
            digis: None,
            clusterers: Vec::new(),
            stage: ClusterStaging::default(),
        })
    }

    /// Validates and clusters a batch into `out`. Allocates only when the batch is larger than
    /// any before it (or a new geometry or call shape comes).
    pub(crate) fn cluster(
        &mut self,
        digis: DigisRef<'_>,
        event_offsets: &[u32],
        geometry: &Geometry,
        cut: Option<ChargeCut>,
        copies: HostCopies,
        out: &mut Clusters,
    ) -> Result<()> {
        validate_shape(digis, event_offsets, geometry)?;
        let (n, ne) = (digis.len(), event_offsets.len() - 1);
        if ne > MAX_EVENTS_PER_LAUNCH {
            return Err(crate::Error::CapacityExceeded {
                what: "events per launch",
                needed: ne as u64,
                capacity: MAX_EVENTS_PER_LAUNCH as u64,
            });
        }
        let g = &self.gpu;
        // Device digis: one set for every clusterer of the workspace.
        let fits = |d: &DeviceDigis| {
            let (cn, ce) = d.capacity();
            n <= cn && ne <= ce
        };
        if !self.digis.as_ref().is_some_and(fits) {
            let (cn, ce) = self.digis.as_ref().map_or((0, 0), |d| d.capacity());
            self.digis = None;
            self.digis = Some(DeviceDigis::with_capacity(
                g,
                grown(n, cn),
                grown(ne, ce).min(MAX_EVENTS_PER_LAUNCH),
            )?);
        }
        let d = self.digis.as_mut().expect("made above");
        // The clusterer of this geometry and call shape, grown when the batch is larger.
        let shape = few(ne);
        let found = self
            .clusterers
            .iter()
            .position(|c| c.geometry() == geometry && few(c.capacity().1) == shape);
        let mut c = match found {
            Some(i) => {
                let c = self.clusterers.remove(i);
                let (cn, ce) = c.capacity();
                if n <= cn && ne <= ce {
                    c
                } else {
                    drop(c);
                    let events = if shape {
                        k::FEW_EVENTS_PER_LAUNCH as usize
                    } else {
                        grown(ne, ce).min(MAX_EVENTS_PER_LAUNCH)
                    };
                    Clusterer::shared(g.clone(), geometry, grown(n, cn), events.max(ne))?
                }
            }
            None => {
                if self.clusterers.len() >= MAX_CLUSTERERS {
                    self.clusterers.remove(0);
                }
                let events = if shape {
                    k::FEW_EVENTS_PER_LAUNCH as usize
                } else {
                    ne
                };
                Clusterer::shared(g.clone(), geometry, n, events)?
            }
        };
        let stage = match copies {
            HostCopies::Pinned => Some(&mut self.stage),
            HostCopies::Pageable => None,
        };
        let r = (|| match stage {
            Some(st) => {
                // The validation's threads fill the pinned buffer as they check.
                let pin = st.digis_buffer(g, n)?;
                validate_digis(digis, event_offsets, geometry, Some(pin))?;
                d.copy_in(g, digis, event_offsets, Some(&mut *st), true)?;
                c.run_graph(d, cut)?;
                c.download_results(d, out, Some(st))
            }
            None => {
                validate_digis(digis, event_offsets, geometry, None)?;
                d.copy_in(g, digis, event_offsets, None, false)?;
                c.run_graph(d, cut)?;
                c.download_results(d, out, None)
            }
        })();
        self.clusterers.push(c);
        r
    }
}
