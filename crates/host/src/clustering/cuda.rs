//! Clustering on [`GpuContext`], by role: device-resident digis and the pinned staging of
//! host calls (this file), the [`Clusterer`] with its launch plan and launchers
//! (`clusterer.rs`), and the [`ClusterQueue`] of batches in flight (`queue.rs`); all are
//! re-exported here.

use cudarc::driver::CudaEvent;

use super::DigisRef;
use crate::cuda::{DeviceBuffer, GpuContext};
use crate::error::{invalid, Error, Result};
use crate::staging::{upload_into, Pinned};

pub use super::clusterer::{ClusterTuning, Clusterer, DEFAULT_CAPACITY, MAX_EVENTS_PER_LAUNCH};
pub use super::queue::ClusterQueue;

/// Device-resident digis of one or more events, in buffers of a fixed capacity: upload a
/// new batch into the same buffers with [`DeviceDigis::copy_from`] (no allocation). The
/// sizes of the current batch also live on the device (`dims`), so a chain captured as a
/// CUDA graph ([`Clusterer::run_graph`]) serves every batch copied in later.
pub struct DeviceDigis {
    /// Module ids.
    pub module: DeviceBuffer<u16>,
    /// Rows.
    pub x: DeviceBuffer<u16>,
    /// Columns.
    pub y: DeviceBuffer<u16>,
    /// Charges.
    pub adc: DeviceBuffer<u16>,
    /// Event offsets (`nevents + 1` used of `max_events + 1`).
    pub event_offsets: DeviceBuffer<u32>,
    /// `[n, nevents]` of the current batch.
    pub(crate) dims: DeviceBuffer<u32>,
    pub(crate) n: usize,
    pub(crate) nevents: usize,
    pub(crate) max_digis: usize,
    pub(crate) max_events: usize,
}

impl DeviceDigis {
    /// Copies validated digis to new device buffers of exactly their size.
    pub fn upload<'a>(
        gpu: &GpuContext,
        digis: impl Into<DigisRef<'a>>,
        event_offsets: &[u32],
    ) -> Result<Self> {
        let digis = digis.into();
        let nevents = event_offsets.len().saturating_sub(1);
        let mut d = Self::with_capacity(gpu, digis.len(), nevents)?;
        d.copy_from(gpu, digis, event_offsets)?;
        Ok(d)
    }

    /// Empty device buffers for up to `max_digis` digis and `max_events` events.
    pub fn with_capacity(gpu: &GpuContext, max_digis: usize, max_events: usize) -> Result<Self> {
        if max_digis >= 1 << 31 {
            return Err(Error::CapacityExceeded {
                what: "digis per launch",
                needed: max_digis as u64,
                capacity: (1 << 31) - 1,
            });
        }
        let n = max_digis.max(1);
        Ok(Self {
            module: gpu.zeros(n)?,
            x: gpu.zeros(n)?,
            y: gpu.zeros(n)?,
            adc: gpu.zeros(n)?,
            event_offsets: gpu.zeros(max_events.max(1) + 1)?,
            dims: gpu.zeros(2)?,
            n: 0,
            nevents: 0,
            max_digis,
            max_events: max_events.max(1),
        })
    }

    /// Copies a batch (validated digis, `event_offsets` of at least one event) into these
    /// buffers, on `gpu`'s stream (the stream the buffers were made on, or one ordered
    /// after it). The copies are issued in stream order: a chain launched earlier on the
    /// same stream has read the previous batch before they land.
    pub fn copy_from<'a>(
        &mut self,
        gpu: &GpuContext,
        digis: impl Into<DigisRef<'a>>,
        event_offsets: &[u32],
    ) -> Result<()> {
        self.copy_in(gpu, digis.into(), event_offsets, None, false)
    }

    /// [`DeviceDigis::copy_from`], through `stage` when given (copied into its pinned
    /// buffers, then asynchronous DMA; the caller makes sure no earlier copy still reads
    /// them). `staged`: the four arrays were sent already (from the stage's pinned buffer,
    /// [`ClusterStaging::digis_buffer`], by the validation's waves); only the sizes and
    /// event offsets are copied.
    pub(crate) fn copy_in(
        &mut self,
        gpu: &GpuContext,
        digis: DigisRef<'_>,
        event_offsets: &[u32],
        stage: Option<&mut ClusterStaging>,
        staged: bool,
    ) -> Result<()> {
        let n = digis.len();
        if event_offsets.len() < 2 || event_offsets.len() - 1 > self.max_events {
            return Err(Error::CapacityExceeded {
                what: "device digis: events",
                needed: event_offsets.len().saturating_sub(1) as u64,
                capacity: self.max_events as u64,
            });
        }
        if n > self.max_digis {
            return Err(Error::CapacityExceeded {
                what: "device digis: digis",
                needed: n as u64,
                capacity: self.max_digis as u64,
            });
        }
        if [digis.x, digis.y, digis.adc].iter().any(|v| v.len() != n)
            || event_offsets.last().copied() != Some(n as u32)
        {
            return Err(invalid(
                "digis",
                "arrays of different lengths, or event offsets not ending at the digi count",
            ));
        }
        let ne = event_offsets.len() - 1;
        let arrays = [
            (digis.module, &mut self.module),
            (digis.x, &mut self.x),
            (digis.y, &mut self.y),
            (digis.adc, &mut self.adc),
        ];
        match stage {
            Some(st) => {
                let words = st.words.get(gpu, ne + 3)?;
                words[0] = n as u32;
                words[1] = ne as u32;
                words[2..].copy_from_slice(event_offsets);
                upload_into(gpu, &words[..2], &mut self.dims, None)?;
                upload_into(
                    gpu,
                    &words[2..],
                    &mut self.event_offsets.slice_mut(0..ne + 1),
                    None,
                )?;
                if !staged {
                    let pinned = st.digis.get(gpu, 4 * n)?;
                    for ((src, dst), p) in arrays.into_iter().zip(pinned.chunks_mut(n.max(1))) {
                        upload_into(gpu, src, &mut dst.slice_mut(0..n), Some(p))?;
                    }
                }
            }
            None => {
                for (src, dst) in arrays {
                    upload_into(gpu, src, &mut dst.slice_mut(0..n), None)?;
                }
                upload_into(
                    gpu,
                    event_offsets,
                    &mut self.event_offsets.slice_mut(0..ne + 1),
                    None,
                )?;
                upload_into(gpu, &[n as u32, ne as u32], &mut self.dims, None)?;
            }
        }
        self.n = n;
        self.nevents = ne;
        Ok(())
    }

    /// The four digi buffers (module, x, y, adc), for copies into them.
    pub(crate) fn arrays_mut(&mut self) -> [&mut DeviceBuffer<u16>; 4] {
        [&mut self.module, &mut self.x, &mut self.y, &mut self.adc]
    }

    /// Number of digis.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether there is no digi.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Number of events.
    pub fn events(&self) -> usize {
        self.nevents
    }

    /// Capacity: digis and events.
    pub fn capacity(&self) -> (usize, usize) {
        (self.max_digis, self.max_events)
    }
}

/// Pinned host buffers of the clustering calls: digis and event offsets in, results out.
pub(crate) struct ClusterStaging {
    /// The four digi arrays, one after the other.
    pub(crate) digis: Pinned<u16>,
    /// `[n, nevents, event offsets…]`.
    pub(crate) words: Pinned<u32>,
    pub(crate) clus: Pinned<i32>,
    /// Clusters per slot, first digi per slot, then the three status words.
    pub(crate) slots: Pinned<u32>,
    /// Events behind the pieces of the cluster indices' copy back (large batches).
    pub(crate) landed: Vec<CudaEvent>,
}

impl ClusterStaging {
    /// The pinned buffer of the four digi arrays of `n` digis (one after the other), to be
    /// filled before [`DeviceDigis::copy_in`] with `staged`.
    pub(crate) fn digis_buffer(&mut self, gpu: &GpuContext, n: usize) -> Result<&mut [u16]> {
        self.digis.get(gpu, 4 * n)
    }
}

impl Default for ClusterStaging {
    fn default() -> Self {
        Self {
            digis: Pinned::new(true),
            words: Pinned::new(true),
            clus: Pinned::new(false),
            slots: Pinned::new(false),
            landed: Vec::new(),
        }
    }
}
