//! The device-view call's graph ([`crate::Backend::cluster_events_device`]): one CUDA graph
//! per cached [`Clusterer`] that runs the whole call on the caller's memory, launched once
//! per call.
//!
//! Captured once (and again when the clusterer's plan or buffers change), on the workspace's
//! buffers: `clustering_view_begin` (one block: the batch's sizes and event offsets read
//! from mapped pinned words into the chain's device words, the check's words reset),
//! `clustering_check_runs_gated` (the consecutive-digis check, whose last block empties a
//! flagged batch; its run cells are tagged by the call's epoch, so they need no memset),
//! the clustering chain ([`Clusterer::run`]) and `clustering_view_end` (one thread: four
//! status words into mapped pinned memory): three steps around the chain. Every kernel reads
//! the batch's sizes on the device, so nothing else depends on the batch.
//!
//! Per call, the kernel nodes that read the digis or write the three outputs get the
//! caller's input addresses and the new output buffers' addresses
//! (`cuGraphExecKernelNodeSetParams`, host-side only, and only for the nodes whose addresses
//! changed since the last call): the kernels read the caller's arrays in place and write
//! the outputs the caller keeps, so no device-to-device copy is made in or out. Which
//! parameters are addresses of which array is known per kernel from its parameter struct
//! ([`RELOCATIONS`], by `offset_of!`); at capture every kernel node is checked to hold the
//! workspace's addresses at exactly those places and nowhere else, otherwise the graph is
//! not used (the call copies, as before).

use std::ffi::c_void;
use std::mem::{offset_of, size_of};

use cudarc::driver::{sys, CudaGraph, PinnedHostSlice};
use detkit_gpu::clustering as k;
use detkit_gpu::DevPtr;

use super::clusterer::{Clusterer, GraphKey};
use super::cuda::DeviceDigis;
use super::device_view::CHECK_THREADS;
use super::{ChargeCut, Geometry};
use crate::cuda::{cfg as launch_cfg, DeviceBuffer, GpuContext};
use crate::error::{DriverContext, Result};

/// The arrays a call relocates: the four digi arrays (inputs), the three outputs and (in
/// the default graph) the event offsets the begin kernel reads.
pub(crate) const SLOTS: usize = 8;
const MODULE: usize = 0;
const X: usize = 1;
const Y: usize = 2;
const ADC: usize = 3;
const CLUS: usize = 4;
const CLUS_IN_MODULE: usize = 5;
const MODULE_FIRST: usize = 6;
pub(crate) const OFFSETS: usize = 7;

/// A kernel's parameter struct: its size and where it holds which relocated array.
struct Relocation {
    kernel: &'static str,
    size: usize,
    fields: &'static [(usize, usize)],
}

/// Every kernel the device-view graph launches, with the relocated fields of its parameter
/// struct (byte offset, slot).
const RELOCATIONS: &[Relocation] = &[
    Relocation {
        kernel: k::KERNEL_CHECK_RUNS,
        size: size_of::<k::ClusteringCheckRunsParams>(),
        fields: &[(offset_of!(k::ClusteringCheckRunsParams, module), MODULE)],
    },
    Relocation {
        kernel: k::KERNEL_GATE_RUNS,
        size: size_of::<k::ClusteringGateRunsParams>(),
        fields: &[],
    },
    Relocation {
        kernel: k::KERNEL_VIEW_BEGIN,
        size: size_of::<k::ClusteringViewBeginParams>(),
        fields: &[(offset_of!(k::ClusteringViewBeginParams, offsets), OFFSETS)],
    },
    Relocation {
        kernel: k::KERNEL_CHECK_RUNS_GATED,
        size: size_of::<k::ClusteringCheckRunsGatedParams>(),
        fields: &[(
            offset_of!(k::ClusteringCheckRunsGatedParams, module),
            MODULE,
        )],
    },
    Relocation {
        kernel: k::KERNEL_VIEW_END,
        size: size_of::<k::ClusteringViewEndParams>(),
        fields: &[],
    },
    Relocation {
        kernel: k::KERNEL_COUNT_MODULES,
        size: size_of::<k::ClusteringCountModulesParams>(),
        fields: &[
            (offset_of!(k::ClusteringCountModulesParams, module), MODULE),
            (offset_of!(k::ClusteringCountModulesParams, x), X),
            (offset_of!(k::ClusteringCountModulesParams, y), Y),
            (offset_of!(k::ClusteringCountModulesParams, clus), CLUS),
            (
                offset_of!(k::ClusteringCountModulesParams, clus_in_module),
                CLUS_IN_MODULE,
            ),
            (
                offset_of!(k::ClusteringCountModulesParams, module_first),
                MODULE_FIRST,
            ),
        ],
    },
    Relocation {
        kernel: k::KERNEL_FIND_CLUS_SMALL,
        size: size_of::<k::ClusteringFindClusSmallParams>(),
        fields: SMALL_FIELDS,
    },
    Relocation {
        kernel: k::KERNEL_FIND_CLUS_SMALL_WARP,
        size: size_of::<k::ClusteringFindClusSmallParams>(),
        fields: SMALL_FIELDS,
    },
    Relocation {
        kernel: k::KERNEL_FIND_CLUS,
        size: size_of::<k::ClusteringFindClusParams>(),
        fields: &[
            (offset_of!(k::ClusteringFindClusParams, module), MODULE),
            (offset_of!(k::ClusteringFindClusParams, x), X),
            (offset_of!(k::ClusteringFindClusParams, y), Y),
            (offset_of!(k::ClusteringFindClusParams, clus), CLUS),
            (
                offset_of!(k::ClusteringFindClusParams, clus_in_module),
                CLUS_IN_MODULE,
            ),
            (
                offset_of!(k::ClusteringFindClusParams, module_first),
                MODULE_FIRST,
            ),
        ],
    },
    Relocation {
        kernel: k::KERNEL_FIND_CLUS_FALLBACK,
        size: size_of::<k::ClusteringFindClusFallbackParams>(),
        fields: &[
            (
                offset_of!(k::ClusteringFindClusFallbackParams, module),
                MODULE,
            ),
            (offset_of!(k::ClusteringFindClusFallbackParams, x), X),
            (offset_of!(k::ClusteringFindClusFallbackParams, y), Y),
            (offset_of!(k::ClusteringFindClusFallbackParams, clus), CLUS),
            (
                offset_of!(k::ClusteringFindClusFallbackParams, clus_in_module),
                CLUS_IN_MODULE,
            ),
            (
                offset_of!(k::ClusteringFindClusFallbackParams, module_first),
                MODULE_FIRST,
            ),
        ],
    },
    Relocation {
        kernel: k::KERNEL_CHARGE_CUT,
        size: size_of::<k::ClusteringClusterChargeCutParams>(),
        fields: &[
            (offset_of!(k::ClusteringClusterChargeCutParams, adc), ADC),
            (offset_of!(k::ClusteringClusterChargeCutParams, clus), CLUS),
            (
                offset_of!(k::ClusteringClusterChargeCutParams, clus_in_module),
                CLUS_IN_MODULE,
            ),
        ],
    },
];

const SMALL_FIELDS: &[(usize, usize)] = &[
    (offset_of!(k::ClusteringFindClusSmallParams, module), MODULE),
    (offset_of!(k::ClusteringFindClusSmallParams, x), X),
    (offset_of!(k::ClusteringFindClusSmallParams, y), Y),
    (offset_of!(k::ClusteringFindClusSmallParams, adc), ADC),
    (offset_of!(k::ClusteringFindClusSmallParams, clus), CLUS),
    (
        offset_of!(k::ClusteringFindClusSmallParams, clus_in_module),
        CLUS_IN_MODULE,
    ),
    (
        offset_of!(k::ClusteringFindClusSmallParams, module_first),
        MODULE_FIRST,
    ),
];

/// A kernel node whose parameters hold relocated addresses.
struct Node {
    node: sys::CUgraphNode,
    /// Its launch (function, grid, block, shared memory) as captured.
    launch: sys::CUDA_KERNEL_NODE_PARAMS,
    /// Its parameter struct, as 8-byte words (every struct holds 8-byte addresses).
    words: Vec<u64>,
    /// (word index, slot) of each relocated address.
    relocs: Vec<(usize, usize)>,
}

/// What a [`Clusterer`] keeps of its device-view graph: the graph for `key`, or `None` when
/// its kernel nodes could not be relocated (then every call with this key copies, without
/// capturing again).
pub(crate) struct Slot {
    key: GraphKey,
    graph: Option<DevGraph>,
}

/// The device-view call's graph of one [`Clusterer`] (see the module doc).
pub(crate) struct DevGraph {
    graph: CudaGraph,
    nodes: Vec<Node>,
    /// The addresses the kernel nodes hold now, per slot.
    current: [u64; SLOTS],
    /// `[n, nevents, event offsets…]` (capacity + 3 words), read by the graph's first copies.
    words: PinnedHostSlice<u32>,
    /// The chain's three status words, the check's word and the offsets' flag, written by
    /// the graph's last step (`clustering_view_end`).
    _status: PinnedHostSlice<u32>,
    /// The device address of `words` (mapped).
    words_dev: u64,
    /// The host addresses of `words` and `status` (taken once: cudarc's accessors query
    /// the driver each time).
    words_ptr: *mut u32,
    status_ptr: *const u32,
    /// The consecutive-digis check's `ctl` words (`detkit_gpu::clustering::view`).
    _check: DeviceBuffer<u32>,
}

// SAFETY: the graph, its executable and its node handles are driver handles of the process,
// valid on any thread once the context is current (every use binds it); the stored
// kernel-node records hold no host pointers (`kernelParams` and `extra` are null; `launch`
// sets them on a copy for one driver call); the pinned pointers are of buffers the
// `DevGraph` owns; a `DevGraph` is owned by one `Clusterer` and used through `&mut` only.
unsafe impl Send for DevGraph {}

/// The template addresses of the relocated arrays: the workspace's digi buffers and the
/// clusterer's outputs.
/// `offsets` is the begin kernel's offsets address (the mapped words').
fn template(g: &GpuContext, c: &Clusterer, d: &DeviceDigis, offsets: u64) -> [u64; SLOTS] {
    let [clus, cim, mf] = c.output_addrs();
    [
        g.ptr(&d.module).addr(),
        g.ptr(&d.x).addr(),
        g.ptr(&d.y).addr(),
        g.ptr(&d.adc).addr(),
        clus,
        cim,
        mf,
        offsets,
    ]
}

impl DevGraph {
    /// The graph of `c` on `d` with `cut`, captured unless kept: `None` when its kernel
    /// nodes cannot be relocated (the caller copies instead).
    pub(crate) fn get<'c>(
        c: &'c mut Clusterer,
        d: &mut DeviceDigis,
        geometry: &Geometry,
        cut: Option<ChargeCut>,
    ) -> Result<Option<&'c mut DevGraph>> {
        let key = c.graph_key(d, cut);
        let kept = c.dev_graph_mut().as_ref().is_some_and(|s| s.key == key);
        if !kept {
            *c.dev_graph_mut() = None;
            let graph = Self::capture(c, d, geometry, cut)?;
            *c.dev_graph_mut() = Some(Slot { key, graph });
        }
        Ok(c.dev_graph_mut().as_mut().and_then(|s| s.graph.as_mut()))
    }

    /// The graph: begin, the gated check, the chain, end.
    fn capture(
        c: &mut Clusterer,
        d: &mut DeviceDigis,
        geometry: &Geometry,
        cut: Option<ChargeCut>,
    ) -> Result<Option<Self>> {
        let g = c.context_shared().clone();
        let (cap_n, cap_e) = (d.max_digis, d.max_events);
        let cap_slots = cap_e * geometry.modules as usize;
        let what = "capturing the device-view clustering graph";
        // Both read or written by the GPU through the mapping (not write-combined: the host
        // reads the status, and the device reads the words at the launch).
        let mut words = g.pinned::<u32>(cap_e + 3, false)?;
        let mut status = g.pinned::<u32>(5, false)?;
        let mut ctl = g.zeros::<u32>(k::view::VIEW_RUNS + cap_slots)?;
        let words_ptr = words.as_mut_ptr().ctx(what)?;
        let status_ptr = status.as_mut_ptr().ctx(what)?;
        let words_dev = mapped(words_ptr)?;
        let status_dev = mapped(status_ptr)?;
        let ctl_ptr = g.ptr_mut(&mut ctl);
        let begin = k::ClusteringViewBeginParams {
            words: DevPtr::from_addr(words_dev),
            offsets: DevPtr::from_addr(words_dev + 8),
            dims: g.ptr_mut(&mut d.dims),
            event_offsets: g.ptr_mut(&mut d.event_offsets.slice_mut(0..cap_e + 1)),
            ctl: ctl_ptr,
            runs: cap_slots as u32,
            cap_events: cap_e as u32,
        };
        let check = k::ClusteringCheckRunsGatedParams {
            module: g.ptr(&d.module),
            event_offsets: g.ptr_mut(&mut d.event_offsets.slice_mut(0..cap_e + 1)),
            dims: g.ptr_mut(&mut d.dims),
            ctl: ctl_ptr,
            nmodules: geometry.modules,
            _pad0: 0,
        };
        let [head, larger, fallback] = c.status_addrs().map(DevPtr::from_addr);
        let end = k::ClusteringViewEndParams {
            head,
            larger,
            fallback,
            ctl: ctl_ptr,
            status: DevPtr::from_addr(status_dev),
        };
        let check_blocks = cap_n
            .div_ceil(CHECK_THREADS as usize)
            .clamp(1, 16 * g.sm_count() as usize);
        let graph = c.capture_chain(
            d,
            cut,
            |g, _| {
                // SAFETY: `words` maps `cap_e + 3` pinned words (the call writes `[n, ne]`
                // before each launch, `ne <= cap_e`, and the offsets there, or relocates
                // `offsets` to the caller's array of `ne + 1` words); `dims` two words and
                // `event_offsets` `cap_e + 1`; `ctl` `VIEW_RUNS + cap_slots` words; one block.
                unsafe {
                    g.launch(
                        k::KERNEL_VIEW_BEGIN,
                        launch_cfg(1, CHECK_THREADS, 0),
                        &begin,
                    )?
                };
                // SAFETY: `dims` holds `[n, ne]` and `event_offsets` `ne + 1` checked
                // offsets (begin, before in stream order); `module` (relocated to the
                // caller's array at each launch) `n` digis; `ctl` reset by begin, its run
                // cells `ne * modules <= cap_slots`; grid-stride over the digis.
                unsafe {
                    g.launch(
                        k::KERNEL_CHECK_RUNS_GATED,
                        launch_cfg(check_blocks as u64, CHECK_THREADS, 0),
                        &check,
                    )
                }
            },
            |c| {
                // SAFETY: the chain's status words, final in stream order; `status` maps four
                // pinned words, read by the host only after the call's wait.
                unsafe {
                    c.context_shared()
                        .launch(k::KERNEL_VIEW_END, launch_cfg(1, 32, 0), &end)
                }
            },
        )?;
        let template = template(&g, c, d, words_dev + 8);
        let Some(nodes) = relocations(&g, &graph, &template)? else {
            return Ok(None);
        };
        Ok(Some(Self {
            graph,
            nodes,
            current: template,
            words,
            _status: status,
            words_dev,
            words_ptr,
            status_ptr,
            _check: ctl,
        }))
    }

    /// The pinned words the next launch uploads: `[n, nevents, event offsets…]`, the
    /// capacity's events + 3 words. Written only while no launch runs (every call waits
    /// for its launch before it returns).
    pub(crate) fn words(&mut self) -> &mut [u32] {
        // SAFETY: `words_ptr` is `words`' memory (`words.len()` elements), alive as long as
        // `self`, borrowed mutably through `&mut self`.
        unsafe { std::slice::from_raw_parts_mut(self.words_ptr, self.words.len()) }
    }

    /// The address the begin kernel reads the event offsets from when the call writes them
    /// into [`DevGraph::words`].
    pub(crate) fn host_offsets_addr(&self) -> u64 {
        self.words_dev + 8
    }

    /// The five status words of the last launch (read after the stream has finished it):
    /// the chain's bad digi, medium and fallback counts, the check's flag, the offsets' flag.
    pub(crate) fn status(&self) -> [u32; 5] {
        // SAFETY: `status_ptr` is `status`' memory, four words, alive as long as `self`;
        // the copies or the kernel that write it have finished (the caller waited);
        // volatile: the device wrote it through the mapping.
        unsafe { std::ptr::read_volatile(self.status_ptr as *const [u32; 5]) }
    }

    /// Points the kernel nodes at `addrs` (module, x, y, adc, clus, clus_in_module,
    /// module_first, the event offsets the begin kernel reads) and launches the graph on the
    /// clusterer's stream.
    ///
    /// # Safety
    /// The four inputs hold at least the batch's digis (as the pinned words the launch
    /// uploads say), the offsets (default graph) `nevents + 1` words, and none is written
    /// until the stream has finished the launch; the three
    /// outputs hold at least the batch's digis (`clus`) and `nevents × modules` words, and
    /// stay allocated until then.
    pub(crate) unsafe fn launch(&mut self, addrs: [u64; SLOTS]) -> Result<()> {
        let what = "updating the device-view clustering graph";
        let exec = self.graph.cu_graph_exec();
        for n in &mut self.nodes {
            if n.relocs.iter().all(|&(_, s)| self.current[s] == addrs[s]) {
                continue;
            }
            for &(w, s) in &n.relocs {
                n.words[w] = addrs[s];
            }
            let mut arg = n.words.as_mut_ptr() as *mut c_void;
            let mut launch = n.launch;
            launch.kernelParams = &mut arg;
            launch.extra = std::ptr::null_mut();
            // SAFETY: `node` is a kernel node of the graph `exec` was instantiated from; the
            // launch is the node's own (function, grid, block, shared memory) and its one
            // parameter the node's struct with addresses replaced by arrays of the same
            // role and sizes (the caller's contract); the driver copies the parameters.
            unsafe { sys::cuGraphExecKernelNodeSetParams_v2(exec, n.node, &launch) }
                .result()
                .ctx(what)?;
        }
        self.current = addrs;
        self.graph
            .launch()
            .ctx("launching the device-view clustering graph")
    }
}

/// The device address of mapped pinned host memory at `host` (with unified addressing, the
/// host address itself; asked of the driver).
fn mapped(host: *mut u32) -> Result<u64> {
    let mut dev: sys::CUdeviceptr = 0;
    // SAFETY: `host` is the start of a live `cuMemHostAlloc` allocation (a
    // `PinnedHostSlice`); the driver writes one address.
    unsafe { sys::cuMemHostGetDevicePointer_v2(&mut dev, host as *mut c_void, 0) }
        .result()
        .ctx("mapping pinned host memory for the device")?;
    Ok(dev)
}

/// The kernel nodes of `graph` that hold any of the `template` addresses, with where they
/// hold them; `None` when a node holds one where its kernel's [`RELOCATIONS`] entry does not
/// say (or is a kernel it does not list).
fn relocations(g: &GpuContext, graph: &CudaGraph, template: &[u64]) -> Result<Option<Vec<Node>>> {
    let what = "reading the device-view clustering graph";
    let funcs = RELOCATIONS
        .iter()
        .map(|r| Ok((g.kernel(r.kernel)?.cu_function(), r)))
        .collect::<Result<Vec<_>>>()?;
    let mut count = 0usize;
    // SAFETY: a live graph; a null array asks for the count.
    unsafe { sys::cuGraphGetNodes(graph.cu_graph(), std::ptr::null_mut(), &mut count) }
        .result()
        .ctx(what)?;
    let mut handles: Vec<sys::CUgraphNode> = vec![std::ptr::null_mut(); count];
    // SAFETY: `handles` holds `count` entries.
    unsafe { sys::cuGraphGetNodes(graph.cu_graph(), handles.as_mut_ptr(), &mut count) }
        .result()
        .ctx(what)?;
    handles.truncate(count);
    let mut nodes = Vec::new();
    for node in handles {
        let mut ty = sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_EMPTY;
        // SAFETY: a node of the live graph.
        unsafe { sys::cuGraphNodeGetType(node, &mut ty) }
            .result()
            .ctx(what)?;
        if ty != sys::CUgraphNodeType::CU_GRAPH_NODE_TYPE_KERNEL {
            continue;
        }
        // SAFETY: all-zero is a valid value of this plain C struct (null pointers, zeros).
        let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
        // SAFETY: a kernel node of the live graph; `p` receives its parameters.
        unsafe { sys::cuGraphKernelNodeGetParams_v2(node, &mut p) }
            .result()
            .ctx(what)?;
        let Some(&(_, r)) = funcs.iter().find(|(f, _)| *f == p.func && !f.is_null()) else {
            return Ok(None);
        };
        if p.kernelParams.is_null() || r.size % 8 != 0 {
            return Ok(None);
        }
        let mut words = vec![0u64; r.size / 8];
        // SAFETY: the node's first (only) parameter is the kernel's struct of `r.size` bytes
        // (the kernel was launched with that one struct, `GpuContext::launch`), owned by the
        // graph, which lives; copied into `words` of the same size.
        unsafe {
            let src = *p.kernelParams as *const u8;
            std::ptr::copy_nonoverlapping(src, words.as_mut_ptr() as *mut u8, r.size);
        }
        let mut relocs = Vec::new();
        for &(off, slot) in r.fields {
            if off % 8 != 0 || slot >= template.len() || words[off / 8] != template[slot] {
                return Ok(None);
            }
            relocs.push((off / 8, slot));
        }
        // No template address anywhere else in the struct.
        for (i, w) in words.iter().enumerate() {
            if template.contains(w) && !relocs.iter().any(|&(j, _)| j == i) {
                return Ok(None);
            }
        }
        if relocs.is_empty() {
            continue;
        }
        p.kernelParams = std::ptr::null_mut();
        p.extra = std::ptr::null_mut();
        nodes.push(Node {
            node,
            launch: p,
            words,
            relocs,
        });
    }
    Ok(Some(nodes))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every relocated field is a whole 8-byte word inside its struct, named once, of a
    /// known slot, and each kernel is listed once: a parameter layout the relocation
    /// cannot patch would make every device-view call fall back to the copies.
    #[test]
    fn relocations_are_whole_words() {
        for (i, r) in RELOCATIONS.iter().enumerate() {
            assert_eq!(r.size % 8, 0, "{}: size {}", r.kernel, r.size);
            for (j, &(off, slot)) in r.fields.iter().enumerate() {
                assert!(
                    off % 8 == 0 && off + 8 <= r.size,
                    "{}: offset {off}",
                    r.kernel
                );
                assert!(slot < SLOTS, "{}: slot {slot}", r.kernel);
                assert!(
                    r.fields[..j].iter().all(|&(o, _)| o != off),
                    "{}: offset {off} twice",
                    r.kernel
                );
            }
            assert!(
                RELOCATIONS[..i].iter().all(|q| q.kernel != r.kernel),
                "{} listed twice",
                r.kernel
            );
        }
    }
}
