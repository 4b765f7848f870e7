//! The device-view call's steps around the clustering chain (issue 27), as three kernels
//! instead of nine graph nodes:
//!
//! - [`KERNEL_VIEW_BEGIN`] (one block): the batch's sizes from mapped pinned host memory
//!   and its event offsets (from the same words, or from the caller's CUDA array, checked:
//!   a bad list is flagged and the batch made empty) into the chain's device words, and the
//!   reset of the check's words;
//! - [`KERNEL_CHECK_RUNS_GATED`]: the consecutive-digis check, whose last block gates a
//!   flagged batch (what `clustering_check_runs` and `clustering_gate_runs` do in two
//!   launches, with no memset before: the run cells are tagged by the call, see below);
//! - [`KERNEL_VIEW_END`] (one thread): the five status words into mapped pinned host memory.
//!
//! The check's words (`ctl`): [`VIEW_BAD`], [`VIEW_DONE`], [`VIEW_EPOCH`], then one run cell
//! per event and module from [`VIEW_RUNS`]. A run start of module `m` in event `e` exchanges
//! the call's epoch into its cell: the old value equals the epoch exactly when another run
//! of the same module and event started before in this call (a second run), so no cell
//! needs a reset between calls. The epoch counts calls from 1; when it wraps, the begin
//! kernel clears every cell (once in 2^32 calls).

use crate::params::DevPtr;

/// Kernel: sizes and offsets in, check words reset (one block).
pub const KERNEL_VIEW_BEGIN: &str = "clustering_view_begin";
/// Kernel: the consecutive-digis check with the gate in its last block.
pub const KERNEL_CHECK_RUNS_GATED: &str = "clustering_check_runs_gated";
/// Kernel: the status words out (one thread).
pub const KERNEL_VIEW_END: &str = "clustering_view_end";

/// `ctl` word: the check's flag ([`crate::histogram::encode_first_index`] of a digi that
/// starts a second run of its module in its event; zero = none).
pub const VIEW_BAD: usize = 0;
/// `ctl` word: blocks of the check finished (its last block gates).
pub const VIEW_DONE: usize = 1;
/// `ctl` word: the call's epoch (1, 2, …).
pub const VIEW_EPOCH: usize = 2;
/// `ctl` word: non-zero when the event offsets are not `0 = o[0] <= … <= o[nevents] = n`.
pub const VIEW_OFFSETS_BAD: usize = 3;
/// First run cell in `ctl` (`ctl[VIEW_RUNS + e * nmodules + m]`).
pub const VIEW_RUNS: usize = 4;

/// Parameters of [`KERNEL_VIEW_BEGIN`].
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ClusteringViewBeginParams {
    /// `[n, nevents, …]`: mapped pinned host memory.
    pub words: DevPtr<u32>,
    /// The `nevents + 1` event offsets: `words + 2` (host offsets) or the caller's CUDA
    /// array (checked here).
    pub offsets: DevPtr<u32>,
    /// `[n, nevents]` of the chain (device).
    pub dims: DevPtr<u32>,
    /// `cap_events + 1` event offsets of the chain (device).
    pub event_offsets: DevPtr<u32>,
    /// The check's words: [`VIEW_RUNS`] + `runs` words.
    pub ctl: DevPtr<u32>,
    /// Run cells in `ctl`.
    pub runs: u32,
    /// Events the buffers hold (`nevents` is clamped to it).
    pub cap_events: u32,
}
crate::kernel_params!(ClusteringViewBeginParams, 48, ["clustering_view_begin"]);

/// Parameters of [`KERNEL_CHECK_RUNS_GATED`].
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ClusteringCheckRunsGatedParams {
    pub module: DevPtr<u16>,
    /// `nevents + 1` non-decreasing offsets from 0 to `n`: zeroed when the batch fails.
    pub event_offsets: DevPtr<u32>,
    /// `[n, nevents]`: `n` zeroed when the batch fails.
    pub dims: DevPtr<u32>,
    /// The check's words (see the module doc), reset by [`KERNEL_VIEW_BEGIN`].
    pub ctl: DevPtr<u32>,
    pub nmodules: u32,
    pub _pad0: u32,
}
crate::kernel_params!(
    ClusteringCheckRunsGatedParams,
    40,
    ["clustering_check_runs_gated"]
);

/// Parameters of [`KERNEL_VIEW_END`].
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct ClusteringViewEndParams {
    /// The chain's three status words (one word each): bad digi, medium and fallback
    /// module counts.
    pub head: DevPtr<u32>,
    pub larger: DevPtr<u32>,
    pub fallback: DevPtr<u32>,
    /// The check's words ([`VIEW_BAD`] is read).
    pub ctl: DevPtr<u32>,
    /// Five words of mapped pinned host memory: head, larger, fallback, the check's flag,
    /// the offsets' flag.
    pub status: DevPtr<u32>,
}
crate::kernel_params!(ClusteringViewEndParams, 40, ["clustering_view_end"]);

/// Whether the run-start exchange of the check flags a second run: the cell held the
/// call's epoch already. (Host model: `detkit`'s unit test of the device-view check.)
#[inline(always)]
pub fn second_run(old: u32, epoch: u32) -> bool {
    old == epoch
}

#[cfg(target_arch = "nvptx64")]
mod device {
    use super::super::common::event_bounds;
    use super::super::{starts_run, INVALID_MODULE};
    use super::*;
    use crate::intrinsics as i;

    /// One block: `dims = [n, min(nevents, cap_events)]` and the `nevents + 1` event offsets
    /// into the chain's device words; the check's flag and block count zeroed and its epoch
    /// advanced (every run cell cleared when the epoch wraps). Offsets that do not rise from
    /// 0 to `n` set [`VIEW_OFFSETS_BAD`] and are written as zeros, with `dims[0] = 0` (an
    /// empty batch for the kernels after this one).
    ///
    /// # Safety
    /// `words` valid for reads of two words (mapped pinned memory written before the
    /// launch); `offsets` for `min(nevents, cap_events) + 1` words; `dims` two words;
    /// `event_offsets` `cap_events + 1` words; `ctl` [`VIEW_RUNS`] + `runs` words; one block.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn clustering_view_begin(p: ClusteringViewBeginParams) {
        let (words, ctl) = (p.words.ptr(), p.ctl.ptr_mut());
        let t = i::thread_idx_x() as usize;
        let bd = i::block_dim_x() as usize;
        // SAFETY: the first two host words (contract); read once per thread (volatile: host
        // memory written before the launch, never cached across launches).
        let (n, ne) = unsafe { (words.read_volatile(), words.add(1).read_volatile()) };
        let ne = ne.min(p.cap_events);
        let mut wrapped = false;
        if t == 0 {
            // SAFETY: two dims words and the first ctl words (contract); only this thread
            // writes them in this launch, and no other kernel runs meanwhile.
            unsafe {
                p.dims.ptr_mut().write(n);
                p.dims.ptr_mut().add(1).write(ne);
                ctl.add(VIEW_BAD).write(0);
                ctl.add(VIEW_DONE).write(0);
                ctl.add(VIEW_OFFSETS_BAD).write(0);
                let mut epoch = ctl.add(VIEW_EPOCH).read().wrapping_add(1);
                if epoch == 0 {
                    epoch = 1;
                    wrapped = true;
                }
                ctl.add(VIEW_EPOCH).write(epoch);
            }
        }
        let (src, dst) = (p.offsets.ptr(), p.event_offsets.ptr_mut());
        let mut bad = false;
        let mut k = t;
        while k <= ne as usize {
            // SAFETY: k <= ne <= cap_events: inside both arrays (contract); the next word
            // read only when k < ne.
            unsafe {
                let v = src.add(k).read_volatile();
                let next = if k < ne as usize {
                    src.add(k + 1).read_volatile()
                } else {
                    v
                };
                bad |= (k == 0 && v != 0) || (k == ne as usize && v != n) || v > next;
                dst.add(k).write(v);
            }
            k += bd;
        }
        if i::sync_threads_or(bad) {
            let mut k = t;
            while k <= ne as usize {
                // SAFETY: as above.
                unsafe { dst.add(k).write(0) };
                k += bd;
            }
            if t == 0 {
                // SAFETY: as above; this thread alone writes them.
                unsafe {
                    p.dims.ptr_mut().write(0);
                    ctl.add(VIEW_OFFSETS_BAD).write(1);
                }
            }
        }
        if i::sync_threads_or(wrapped) {
            let mut k = t;
            while k < p.runs as usize {
                // SAFETY: k < runs: a run cell (contract).
                unsafe { ctl.add(VIEW_RUNS + k).write(0) };
                k += bd;
            }
        }
    }

    /// One thread per digi (grid-stride), as `clustering_check_runs` with epoch-tagged run
    /// cells (module doc); then the grid's last block to finish (a block count in
    /// `ctl[VIEW_DONE]`, reset for the next call) makes a flagged batch empty for the
    /// kernels after it (`dims[0] = 0`, every event offset 0), as `clustering_gate_runs`.
    ///
    /// # Safety
    /// `dims = [n, nevents]`, `nevents >= 1`; `module` valid for `n`; `event_offsets` for
    /// `nevents + 1` non-decreasing entries from 0 to `n`; `ctl` [`VIEW_RUNS`] +
    /// `nevents * nmodules` words, its flag and count zero and its epoch non-zero and held
    /// by no run cell unless written in this launch ([`clustering_view_begin`] before, in
    /// stream order); nothing else reads or writes these words meanwhile.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn clustering_check_runs_gated(
        p: ClusteringCheckRunsGatedParams,
    ) {
        let (module, event_offsets, ctl, nmodules) = (
            p.module.ptr(),
            p.event_offsets.ptr(),
            p.ctl.ptr_mut(),
            p.nmodules,
        );
        // SAFETY: two words, and the epoch word (contract).
        let (n, nevents, epoch) = unsafe {
            (
                p.dims.ptr().read(),
                p.dims.ptr().add(1).read(),
                ctl.add(VIEW_EPOCH).read(),
            )
        };
        let stride = i::grid_threads();
        let mut idx = i::global_thread_idx();
        while idx < n as u64 {
            let k = idx as u32;
            // SAFETY: k < n; every index read by `starts_run` lies in `start..=k`; ev <
            // nevents and m < nmodules, so the run cell is in bounds.
            unsafe {
                let m = module.add(k as usize).read();
                if m != INVALID_MODULE && (m as u32) < nmodules {
                    let (ev, start, _) = event_bounds(event_offsets, nevents, k);
                    if starts_run(|j| module.add(j as usize).read(), start, k) {
                        let cell = ctl.add(VIEW_RUNS + (ev * nmodules + m as u32) as usize);
                        if second_run(i::atomic_exch_u32(cell, epoch), epoch) {
                            i::atomic_max_u32(
                                ctl.add(VIEW_BAD),
                                crate::histogram::encode_first_index(k),
                            );
                        }
                    }
                }
            }
            idx += stride;
        }
        // The last block: every other block's flag is visible after its fence and count.
        let mut last = false;
        if i::thread_idx_x() == 0 {
            i::threadfence();
            // SAFETY: the count word (contract).
            let done = unsafe { i::atomic_add_u32(ctl.add(VIEW_DONE), 1) };
            last = done == i::grid_dim_x() - 1;
        }
        if !i::sync_threads_or(last) {
            return;
        }
        i::threadfence();
        // SAFETY: the flag word; an atomic read at the device's coherence point.
        let bad = unsafe { i::atomic_or_u32(ctl.add(VIEW_BAD), 0) };
        if i::thread_idx_x() == 0 {
            // SAFETY: the count word; no block of this launch counts any more.
            unsafe { ctl.add(VIEW_DONE).write(0) };
        }
        if bad == 0 {
            return;
        }
        let t = i::thread_idx_x();
        if t == 0 {
            // SAFETY: `dims[0]`, one word (contract); no thread reads it any more.
            unsafe { p.dims.ptr_mut().write(0) };
        }
        let mut k = t;
        while k <= nevents {
            // SAFETY: k <= nevents: inside the `nevents + 1` offsets (contract); every
            // block that read them has finished its digis (the count above).
            unsafe { p.event_offsets.ptr_mut().add(k as usize).write(0) };
            k += i::block_dim_x();
        }
    }

    /// One thread: the chain's three status words and the check's flag into the mapped
    /// pinned host words `status[0..5]` (and the offsets' flag).
    ///
    /// # Safety
    /// `head`, `larger`, `fallback` one word each, final (the chain ran before, in stream
    /// order); `ctl` at least [`VIEW_RUNS`] words; `status` five words of mapped pinned host
    /// memory that the host does not read until the stream has finished this launch.
    #[unsafe(no_mangle)]
    pub unsafe extern "ptx-kernel" fn clustering_view_end(p: ClusteringViewEndParams) {
        if i::global_thread_idx() != 0 {
            return;
        }
        // SAFETY: one word each (contract).
        unsafe {
            let s = p.status.ptr_mut();
            s.write_volatile(p.head.ptr().read());
            s.add(1).write_volatile(p.larger.ptr().read());
            s.add(2).write_volatile(p.fallback.ptr().read());
            s.add(3).write_volatile(p.ctl.ptr().add(VIEW_BAD).read());
            s.add(4)
                .write_volatile(p.ctl.ptr().add(VIEW_OFFSETS_BAD).read());
        }
        i::threadfence_system();
    }
}

#[cfg(target_arch = "nvptx64")]
pub use device::*;
