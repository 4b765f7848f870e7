//! The CPU backend's PET chain: the oracles' results ([`super::cpu`]: the same singles,
//! statistics, order and pairs, and the same errors) on every core.
//!
//! - **Conversion**: the kernel's word-level steps ([`k::convert_words`]: the frame read as
//!   four little-endian words), with its divisions replaced by two small tables built per
//!   call (per `(BDM, DU)` key and per origin byte: every index and the crystal number are
//!   sums), in blocks of 64 frames without bounds checks (an AVX2 build where the CPU has
//!   it). One thread: in place; several: waves of pieces into a double-buffered scratch,
//!   each wave's job also copying the previous wave's singles to their place.
//!   Scanners that fail [`super::validate_params`] or whose tables are shorter than their
//!   parameters say take the oracle's conversion (its result, its panics).
//! - **Sort**: a parallel stable LSD radix sort on order-preserving `u64` keys of the times
//!   (the integer value when every time is a non-negative integer below 2^53, as frame
//!   counters are; else the float's bits, `-0.0` as `+0.0`: they compare equal, so keep
//!   input order), over the bits that differ only, 11 bits per pass: per pass, per piece
//!   histograms, their offsets, a scatter.
//! - **Coincidence**: the prompt rule is a chain (a window opens where the last one ended),
//!   which the pieces walk speculatively from their own first single in parallel; one
//!   sequential pass then joins them: where the true chain enters a piece at an opener of
//!   that walk, the walk's windows are the true ones from there (the chains have met); else
//!   the true chain is walked until it meets the speculative one. In the generated data
//!   nearly every single opens a window in both walks, so they meet at once. A window's
//!   error (a multiple over [`detkit_gpu::pet::MAX_MULTIPLE`]) is kept with the window and
//!   raised only if the true chain reaches it, first in chain order, as in the oracle.
//!   A walk notes only its first 64 openers; its pairs go to a vector per piece that
//!   the backend keeps between calls. One thread walks the chain alone, into the output.
//!   Delayed windows (one per single) are independent.
//! - **Merge** (the streamed chain's pending singles with a sorted chunk): merge path,
//!   pieces in parallel.

use detkit_gpu::pet::{self as k, Coincidence, ConvertConsts, DataFrameV2, ScannerParams, Single};
use rayon::prelude::*;

use crate::par_timing::{busy, Busy, Timer};

use super::cpu::{self as oracle, policy_pairs, CoincideConfig, ConvertStats};
use crate::error::{Error, Result};

/// Items per parallel piece (conversion, sort passes, coincidence, merge).
pub const PIECE: usize = 1 << 16;

/// Appends the pieces to one vector, each copied to its offset in parallel.
fn concat<T: Copy + Send + Sync>(pieces: &[Vec<T>]) -> Vec<T> {
    let slices: Vec<&[T]> = pieces.iter().map(Vec::as_slice).collect();
    let mut out = Vec::new();
    concat_into(&slices, None, &mut out);
    out
}

/// [`concat`] of slices into `out` (cleared; its allocation reused when large enough, else
/// a new one on huge pages where large, its pages first touched by the copying workers,
/// not by one thread); `busy_step` times the copies.
fn concat_into<T: Copy + Send + Sync>(pieces: &[&[T]], busy_step: Option<Busy>, out: &mut Vec<T>) {
    let total = pieces.iter().map(|p| p.len()).sum();
    out.clear();
    if out.capacity() < total {
        *out = Vec::with_capacity(total);
        crate::mem::huge_pages(out);
    }
    {
        let mut rest = &mut out.spare_capacity_mut()[..total];
        let mut dst = Vec::with_capacity(pieces.len());
        for p in pieces {
            let (d, r) = rest.split_at_mut(p.len());
            dst.push(d);
            rest = r;
        }
        let copy = |(d, p): (&mut [std::mem::MaybeUninit<T>], &&[T])| {
            for (d, s) in d.iter_mut().zip(p.iter()) {
                d.write(*s);
            }
        };
        dst.into_par_iter()
            .zip(pieces)
            .for_each(|x| match busy_step {
                Some(b) => busy(b, || copy(x)),
                None => copy(x),
            });
    }
    // SAFETY: the pieces' lengths sum to `total`, and every one of the first `total` slots
    // was written above (each piece into its own disjoint range).
    unsafe { out.set_len(total) };
}

/// Converts every frame, keeps the accepted singles in input order: [`oracle::convert`]'s
/// result on every core.
pub fn convert(
    frames: &[DataFrameV2],
    p: &ScannerParams,
    position: &[u8],
    energy: &[f32],
) -> (Vec<Single>, ConvertStats) {
    convert_in_pieces(frames, p, position, energy, PIECE)
}

/// [`convert`] in pieces of `piece` frames (tests use small pieces).
#[doc(hidden)]
pub fn convert_in_pieces(
    frames: &[DataFrameV2],
    p: &ScannerParams,
    position: &[u8],
    energy: &[f32],
    piece: usize,
) -> (Vec<Single>, ConvertStats) {
    let mut out = Vec::new();
    let st = convert_into_in_pieces(frames, p, position, energy, piece, &mut out);
    (out, st)
}

/// [`convert`] into `out` (cleared; its allocation reused when large enough: no page
/// faults on repeated calls).
pub fn convert_into(
    frames: &[DataFrameV2],
    p: &ScannerParams,
    position: &[u8],
    energy: &[f32],
    out: &mut Vec<Single>,
) -> ConvertStats {
    convert_into_in_pieces(frames, p, position, energy, PIECE, out)
}

/// The several-thread paths' scratch, kept between calls (a backend keeps one, so its
/// repeated calls write no fresh page of scratch): the conversion's waves (4 MiB per
/// thread) and the coincidence walks' pairs (about the size of the pairs); one of each per
/// call in flight.
#[derive(Default)]
pub(crate) struct Scratch {
    convert: std::sync::Mutex<Vec<Vec<Single>>>,
    /// The coincidence walks' pairs, one vector per piece.
    pairs: std::sync::Mutex<Vec<Vec<Vec<Coincidence>>>>,
}

/// One of the kept values (or a new one when none is free: another call has it).
fn take_kept<T: Default>(m: &std::sync::Mutex<Vec<T>>) -> T {
    m.lock().ok().and_then(|mut v| v.pop()).unwrap_or_default()
}

fn put_kept<T>(m: &std::sync::Mutex<Vec<T>>, v: T) {
    if let Ok(mut p) = m.lock() {
        p.push(v);
    }
}

impl Scratch {
    fn take(&self) -> Vec<Single> {
        take_kept(&self.convert)
    }

    fn put(&self, v: Vec<Single>) {
        put_kept(&self.convert, v)
    }

    fn take_pairs(&self) -> Vec<Vec<Coincidence>> {
        take_kept(&self.pairs)
    }

    fn put_pairs(&self, v: Vec<Vec<Coincidence>>) {
        put_kept(&self.pairs, v)
    }

    /// Frees the kept scratch.
    pub(crate) fn clear(&self) {
        if let Ok(mut p) = self.convert.lock() {
            p.clear();
        }
        if let Ok(mut p) = self.pairs.lock() {
            p.clear();
        }
    }
}

/// [`convert_into`] with the scanner's tables and the scratch kept in `kept` (the CPU
/// backend's `pet_convert_into`).
pub(crate) fn convert_into_kept(
    frames: &[DataFrameV2],
    s: &super::Scanner,
    out: &mut Vec<Single>,
    kept: &Scratch,
) -> ConvertStats {
    let mut scratch = kept.take();
    let st = convert_into_with(
        frames,
        &s.params,
        &s.position,
        &s.energy,
        PIECE,
        out,
        &mut scratch,
    );
    kept.put(scratch);
    st
}

/// [`convert_into`] in pieces of `piece` frames (tests use small pieces).
#[doc(hidden)]
pub fn convert_into_in_pieces(
    frames: &[DataFrameV2],
    p: &ScannerParams,
    position: &[u8],
    energy: &[f32],
    piece: usize,
    out: &mut Vec<Single>,
) -> ConvertStats {
    convert_into_with(frames, p, position, energy, piece, out, &mut Vec::new())
}

/// [`convert_into_in_pieces`] with the several-thread path's scratch in `scratch` (grown
/// when too small, else reused).
fn convert_into_with(
    frames: &[DataFrameV2],
    p: &ScannerParams,
    position: &[u8],
    energy: &[f32],
    piece: usize,
    out: &mut Vec<Single>,
    scratch: &mut Vec<Single>,
) -> ConvertStats {
    let piece = piece.max(1);
    let usable = cfg!(target_endian = "little")
        && super::validate_params(p).is_ok()
        && position.len() as u64 >= p.position_entries()
        && energy.len() as u64 >= p.energy_entries();
    if !usable {
        let (singles, st) = oracle::convert_par(frames, p, position, energy);
        *out = singles;
        return st;
    }
    let t = Tables::new(&ConvertConsts::new(p));
    // Each piece writes its singles at its own frame offset of the output (room for all of
    // its frames), then the pieces are moved down in order: one allocation, no copy of the
    // singles through per-piece vectors.
    let n = frames.len();
    let mut timer = Timer::start();
    out.clear();
    let fresh = out.capacity() < n;
    if fresh {
        *out = Vec::with_capacity(n);
        crate::mem::huge_pages(out);
    }
    timer.mark("convert: alloc");
    if rayon::current_num_threads() == 1 || n <= piece {
        // One thread: one piece, its singles written in place (no move down).
        let (len, st) = convert_piece(frames, &t, position, energy, out.spare_capacity_mut());
        // SAFETY: `convert_piece` wrote the first `len` slots.
        unsafe { out.set_len(len) };
        timer.mark("convert: pieces");
        return st;
    }
    // Several threads: a piece's singles cannot be written straight to their place (its
    // offset is the sum of the earlier pieces' counts), and moving them down afterwards is
    // a serial pass over the whole output (see docs/benchmarks.md, "cpuscale"). So the
    // pieces go in waves of a few per thread: each converts into its slot of a small
    // scratch (cache-sized, reused by every wave), then the wave's singles are copied to
    // their place in parallel, the offsets being known by then.
    let sub = piece.min(WAVE_PIECE);
    let slots = (WAVE_SLOTS * rayon::current_num_threads()).min(n.div_ceil(sub));
    if fresh {
        prefault(out.spare_capacity_mut());
        timer.mark("convert: prefault");
    }
    // Each wave's parallel job converts the wave's pieces into one half of the scratch and,
    // beside them, copies the previous wave's singles (from the other half) to their place:
    // one fork-join per wave, and the copies fill the workers' idle time at the wave's end.
    enum Task<'a> {
        Convert(
            usize,
            &'a mut [std::mem::MaybeUninit<Single>],
            &'a [DataFrameV2],
        ),
        Copy(
            &'a mut [std::mem::MaybeUninit<Single>],
            &'a [std::mem::MaybeUninit<Single>],
        ),
    }
    let half = slots * sub;
    scratch.clear();
    if scratch.capacity() < 2 * half {
        *scratch = Vec::with_capacity(2 * half);
        crate::mem::huge_pages(scratch);
    }
    let waves: Vec<&[DataFrameV2]> = frames.chunks(half).collect();
    let mut st = ConvertStats::default();
    let mut len = 0;
    let mut prev: Vec<usize> = Vec::new();
    for w in 0..=waves.len() {
        let (a, b) = scratch.spare_capacity_mut()[..2 * half].split_at_mut(half);
        let (cur, old) = if w % 2 == 0 { (a, b) } else { (b, a) };
        let mut tasks = Vec::with_capacity(2 * slots);
        if let Some(wave) = waves.get(w) {
            for (i, (d, f)) in cur.chunks_mut(sub).zip(wave.chunks(sub)).enumerate() {
                tasks.push(Task::Convert(i, d, f));
            }
        }
        let mut rest = &mut out.spare_capacity_mut()[len..];
        for (&cnt, src) in prev.iter().zip(old.chunks(sub)) {
            let (d, r) = rest.split_at_mut(cnt);
            tasks.push(Task::Copy(d, &src[..cnt]));
            rest = r;
            len += cnt;
        }
        let done: Vec<Option<(usize, (usize, ConvertStats))>> = tasks
            .into_par_iter()
            .map(|task| match task {
                Task::Convert(i, d, f) => Some((
                    i,
                    busy(Busy::ConvertPieces, || {
                        convert_piece(f, &t, position, energy, d)
                    }),
                )),
                Task::Copy(d, s) => {
                    busy(Busy::ConvertGather, || d.copy_from_slice(s));
                    None
                }
            })
            .collect();
        prev.clear();
        for (i, (cnt, stats)) in done.into_iter().flatten() {
            st.add(&stats, ((w * slots + i) * sub) as u64);
            prev.push(cnt);
        }
        timer.mark("convert: wave");
    }
    // SAFETY: the waves' singles were copied to the first `len` slots, in order, each slot
    // once (the destinations are consecutive disjoint ranges summing to `len`).
    unsafe { out.set_len(len) };
    st
}

/// Frames per piece of a wave of the parallel conversion: the scratch of a piece (16 bytes
/// a frame: 128 KiB) stays in the core's L2 cache until it is copied out.
const WAVE_PIECE: usize = 1 << 13;

/// Pieces per thread in a wave: enough that the wave's last pieces leave few workers idle
/// (the scratch, two halves of `WAVE_SLOTS * WAVE_PIECE * 16` bytes per thread, 2 × 2 MiB,
/// no larger than the input).
const WAVE_SLOTS: usize = 16;

/// Touches every page of a fresh output once, in parallel over separate 2 MiB stretches
/// (the kernel then zeroes them on all cores at once): the waves' copies write small
/// consecutive stretches, whose first-touch faults would otherwise queue on the same few
/// (huge) pages (see docs/benchmarks.md, "cpuscale").
fn prefault<T: Copy + Default + Send>(v: &mut [std::mem::MaybeUninit<T>]) {
    const PAGE: usize = 4096;
    let per_page = (PAGE / std::mem::size_of::<T>().max(1)).max(1);
    let per_task = ((2 << 20) / PAGE) * per_page;
    v.par_chunks_mut(per_task).for_each(|c| {
        for x in c.iter_mut().step_by(per_page) {
            x.write(T::default());
        }
    });
}

/// Frames per block of [`convert_piece`]: a block's position and energy-table indices are
/// computed (and its energy entries prefetched) while the block before it is finished, so
/// that many cache misses of the (tens of MB) energy table are in flight at once.
const BLOCK: usize = 64;

/// The bases of one `(BDM byte, DU nibble)` key of a frame (`bdm << 4 | du`), so that a
/// frame's indices and crystal number are additions instead of the kernel's divisions.
#[derive(Clone, Copy, Default)]
struct DuRow {
    /// `du_index * ps2` (position table).
    pos: u32,
    /// `du_index * cpd * 1000` (energy table).
    energy: u32,
    /// The crystal number's BDM and DU terms.
    crystal: u32,
    /// 1 when `bdm < bdms` and `du < dus`.
    valid: u32,
}

/// The terms of one origin byte of the position table.
#[derive(Clone, Copy, Default)]
struct OriginRow {
    /// `local * 1000` (energy table).
    energy: u32,
    /// The crystal number's local term (`local_y + local_z * cpr`).
    crystal: u32,
    /// 1 when the origin is inside the DU (`origin < cpd`).
    valid: u32,
    _pad: u32,
}

/// The conversion's constants and small tables (built once per call, a few microseconds):
/// every frame's table indices and crystal number are sums of two table entries and the
/// frame's own fields. Equal to the kernel's steps ([`k::words_position`],
/// [`k::words_energy`], [`k::words_single`]) in wrapping `u32` arithmetic: the kernel's
/// `(du_index * cpd + local) * 1000 + bin` is `du_index * cpd * 1000 + local * 1000 + bin`
/// and its crystal `in_ring + ring * cpr` splits the same way modulo 2^32; the divisions of
/// the tables' entries are the kernel's own ([`detkit_gpu::fastdiv::ByteDiv`]).
struct Tables {
    c: ConvertConsts,
    du: Box<[DuRow; 4096]>,
    origin: Box<[OriginRow; 256]>,
}

impl Tables {
    fn new(c: &ConvertConsts) -> Self {
        let mut du = Box::new([DuRow::default(); 4096]);
        for bdm in 0..256u32 {
            for d in 0..16u32 {
                let du_index = bdm.wrapping_mul(c.dus).wrapping_add(d);
                let (bdm_ring, bdm_in_ring) = c.ring_modules.div_rem(bdm);
                let (du_y, du_z) = c.block_z.div_rem(d);
                let in_ring = bdm_in_ring
                    .wrapping_mul(c.by_cy)
                    .wrapping_add(du_y.wrapping_mul(c.cy));
                let ring = bdm_ring
                    .wrapping_mul(c.bz_cz)
                    .wrapping_add(du_z.wrapping_mul(c.cz));
                du[(bdm << 4 | d) as usize] = DuRow {
                    pos: du_index.wrapping_mul(c.ps2),
                    energy: du_index
                        .wrapping_mul(c.cpd)
                        .wrapping_mul(detkit_gpu::pet::ENERGY_BINS),
                    crystal: in_ring.wrapping_add(ring.wrapping_mul(c.cpr)),
                    valid: ((bdm < c.bdms) & (d < c.dus)) as u32,
                };
            }
        }
        let mut origin = Box::new([OriginRow::default(); 256]);
        for (o, row) in origin.iter_mut().enumerate() {
            let o = o as u32;
            let (oy, ox) = c.crystal_z.div_rem(o);
            let local = ox.wrapping_add(c.cy.wrapping_sub(1).wrapping_sub(oy).wrapping_mul(c.cz));
            let (local_y, local_z) = c.crystal_z.div_rem(local & 0xff);
            *row = OriginRow {
                energy: local.wrapping_mul(detkit_gpu::pet::ENERGY_BINS),
                crystal: local_y.wrapping_add(local_z.wrapping_mul(c.cpr)),
                valid: (o < c.cpd) as u32,
                _pad: 0,
            };
        }
        Tables { c: *c, du, origin }
    }
}

/// One block's frames up to their energy-table indices (see [`convert_piece`]).
struct Block {
    /// Energy-table index (0 for a frame that is not ok).
    at: [u32; BLOCK],
    crystal: [u32; BLOCK],
    /// 1 for a frame whose addresses are all inside the tables, else 0.
    ok: [u32; BLOCK],
}

/// A hint to bring the line of `p` into the cache (not an access: any address is fine).
#[inline(always)]
fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint, not a memory access: it cannot fault, whatever `p`.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// The frame as the kernel reads it: four little-endian words (a copy: frames are only
/// byte-aligned).
#[inline(always)]
fn words(f: &DataFrameV2) -> [u32; 4] {
    bytemuck::cast(*f)
}

/// Reads `fs` (at most [`BLOCK`] frames) up to their energy-table indices and asks the cache
/// for the energy entries ([`convert_piece`] reads them a block later).
///
/// The caller guarantees `position.len() >= t.c.position_entries as usize >= 1` and
/// `energy.len() >= 1` (a checked scanner's tables: every count is at least 1).
#[inline(always)]
fn prepare(b: &mut Block, fs: &[DataFrameV2], t: &Tables, position: &[u8], energy: &[f32]) {
    let c = &t.c;
    for (j, f) in fs.iter().enumerate().take(BLOCK) {
        let w = words(f);
        let r = t.du[((w[0] >> 4 & 0xff0) | (w[0] & 0x0f)) as usize];
        let (x, y) = (w[2] >> 16 & 0xff, w[2] >> 24);
        let pat = r.pos.wrapping_add(x).wrapping_add(y.wrapping_mul(c.ps));
        let ok = (r.valid != 0) & (x < c.ps) & (y < c.ps) & (pat < c.position_entries);
        let pat = if ok { pat } else { 0 };
        // SAFETY: `pat` is 0 or below `c.position_entries`, which is at most
        // `position.len()` (`position_entries` saturates at `u32::MAX`, and the table is at
        // least as long as the scanner's entry count), and the table is not empty.
        let origin = unsafe { *position.get_unchecked(pat as usize) };
        let o = t.origin[origin as usize];
        let raw = k::words_energy_raw(&w);
        let bin = (raw / 10).min(detkit_gpu::pet::ENERGY_BINS - 1);
        let eat = r.energy.wrapping_add(o.energy).wrapping_add(bin);
        let ok = ok & (o.valid != 0) & (eat < c.energy_entries);
        b.at[j] = if ok { eat } else { 0 };
        b.ok[j] = ok as u32;
        b.crystal[j] = r.crystal.wrapping_add(o.crystal);
        prefetch(energy.as_ptr().wrapping_add(b.at[j] as usize));
    }
}

/// Converts `frames`, writing the accepted singles to the start of `out` (at least as long
/// as `frames`); returns their number and the statistics. Software-pipelined: the next
/// block's table indices are computed and its energy entries prefetched before this block's
/// are read, so the misses of one block overlap the work of the other.
fn convert_piece(
    frames: &[DataFrameV2],
    t: &Tables,
    position: &[u8],
    energy: &[f32],
    out: &mut [std::mem::MaybeUninit<Single>],
) -> (usize, ConvertStats) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above).
        return unsafe { convert_piece_avx2(frames, t, position, energy, out) };
    }
    convert_piece_body(frames, t, position, energy, out)
}

/// [`convert_piece`] compiled for AVX2 (the same operations: integer and single-precision
/// arithmetic give the same bits whatever the instruction set; no fused multiply-add).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn convert_piece_avx2(
    frames: &[DataFrameV2],
    t: &Tables,
    position: &[u8],
    energy: &[f32],
    out: &mut [std::mem::MaybeUninit<Single>],
) -> (usize, ConvertStats) {
    convert_piece_body(frames, t, position, energy, out)
}

#[inline(always)]
fn convert_piece_body(
    frames: &[DataFrameV2],
    t: &Tables,
    position: &[u8],
    energy: &[f32],
    out: &mut [std::mem::MaybeUninit<Single>],
) -> (usize, ConvertStats) {
    assert!(out.len() >= frames.len() && !position.is_empty() && !energy.is_empty());
    let c = &t.c;
    let mut kept = 0usize;
    let (mut bad, mut clamped, mut accepted) = (0u64, 0u64, 0u64);
    let mut first_bad = None;
    let empty = || Block {
        at: [0; BLOCK],
        crystal: [0; BLOCK],
        ok: [0; BLOCK],
    };
    let (mut cur, mut next) = (empty(), empty());
    let mut blocks = frames.chunks(BLOCK).enumerate().peekable();
    if let Some((_, fs)) = blocks.peek() {
        prepare(&mut cur, fs, t, position, energy);
    }
    while let Some((bi, fs)) = blocks.next() {
        if let Some((_, nfs)) = blocks.peek() {
            prepare(&mut next, nfs, t, position, energy);
        }
        let mut bad_here = 0u32;
        for (j, f) in fs.iter().enumerate().take(BLOCK) {
            let w = words(f);
            let ok = cur.ok[j];
            // SAFETY: `at` is 0 or below `c.energy_entries`, at most `energy.len()` (as the
            // position table in `prepare`), and the table is not empty.
            let factor = unsafe { *energy.get_unchecked(cur.at[j] as usize) };
            let raw = k::words_energy_raw(&w);
            let e = raw as f32 * factor;
            let acc = ((c.energy_lo <= e) & (e <= c.energy_hi)) as u32 & ok;
            // No branch on the outcome (a third of the frames are rejected, at random):
            // every single is written at `kept`, which moves on only when it is accepted.
            // SAFETY: `kept` counts accepted frames before this one, so `kept <= bi * BLOCK
            // + j < frames.len() <= out.len()` (asserted above).
            unsafe { out.get_unchecked_mut(kept) }.write(Single {
                crystal: cur.crystal[j],
                energy: e,
                time: k::words_time(&w) as f64,
            });
            kept += acc as usize;
            accepted += acc as u64;
            clamped += (ok & (raw >= 10 * detkit_gpu::pet::ENERGY_BINS) as u32) as u64;
            bad_here += 1 - ok;
        }
        if bad_here != 0 {
            bad += bad_here as u64;
            if first_bad.is_none() {
                let j = cur.ok[..fs.len()].iter().position(|&o| o == 0);
                first_bad = j.map(|j| (bi * BLOCK + j) as u64);
            }
        }
        std::mem::swap(&mut cur, &mut next);
    }
    let st = ConvertStats {
        frames: frames.len() as u64,
        accepted,
        rejected_energy: frames.len() as u64 - bad - accepted,
        clamped,
        bad_address: bad,
        first_bad_address: first_bad,
    };
    (kept, st)
}

/// [`oracle::check_times`] with the scan on every core (the error, if any, is the oracle's).
pub fn check_times(singles: &[Single], what: &'static str) -> Result<()> {
    if singles
        .par_chunks(PIECE)
        .any(|c| c.iter().any(|s| !s.time.is_finite()))
    {
        return oracle::check_times(singles, what);
    }
    Ok(())
}

/// [`oracle::check_sorted`] with the scan on every core (the error, if any, is the
/// oracle's).
pub fn check_sorted(singles: &[Single]) -> Result<()> {
    // Non-finite times are caught by the first test, so `<` sees only finite ones.
    let bad = singles.par_chunks(PIECE).enumerate().any(|(k, c)| {
        let before = (k > 0).then(|| singles[k * PIECE - 1].time);
        c.iter().any(|s| !s.time.is_finite())
            || before.is_some_and(|t| c[0].time < t)
            || c.windows(2).any(|w| w[1].time < w[0].time)
    });
    if bad {
        return oracle::check_sorted(singles);
    }
    Ok(())
}

/// Order-preserving key of a finite time (`-0.0` and `+0.0` the same key).
#[inline(always)]
fn float_key(t: f64) -> u64 {
    let b = if t == 0.0 { 0 } else { t.to_bits() };
    if b >> 63 == 1 {
        !b
    } else {
        b | 1 << 63
    }
}

/// Largest time sorted by its integer value (every integer up to it is an exact `f64`).
const INT_LIMIT: f64 = (1u64 << 53) as f64;

/// The sort key of a time: its integer value when every time of the input is a
/// non-negative integer below 2^53 (frame counters: fewer key bits differ, fewer passes),
/// else [`float_key`].
#[inline(always)]
fn sort_key(t: f64, integers: bool) -> u64 {
    if integers {
        t as u64
    } else {
        float_key(t)
    }
}

/// Stable sort by time: [`oracle::sort`]'s result (and its error for a non-finite time).
pub fn sort(singles: &[Single]) -> Result<Vec<Single>> {
    check_times(singles, "singles to sort")?;
    Ok(sort_unchecked(singles))
}

/// [`sort`] of singles whose times are known finite ([`check_times`] passed).
pub(crate) fn sort_unchecked(singles: &[Single]) -> Vec<Single> {
    let mut out = Vec::new();
    sort_into_unchecked(singles, &mut out);
    out
}

/// [`sort_unchecked`] into `out` (cleared; its allocation reused when large enough: a
/// repeated call writes no fresh page for its result).
pub(crate) fn sort_into_unchecked(singles: &[Single], out: &mut Vec<Single>) {
    sort_into_unchecked_in_pieces(singles, PIECE, out)
}

/// [`sort_unchecked`] in pieces of `piece` singles: presorted runs (at most [`MAX_RUNS`],
/// integer times) merged in one pass, else the radix sort.
fn sort_into_unchecked_in_pieces(singles: &[Single], piece: usize, out: &mut Vec<Single>) {
    let piece = piece.max(1);
    match sorted_runs(singles, piece) {
        Some(starts) if integer_times(singles, piece) => merge_runs(singles, &starts, piece, out),
        _ => radix_sort(singles, piece, out),
    }
}

/// `out` cleared, with room for `n` items: its own allocation when large enough, else a
/// new one (on huge pages where large).
fn room<T>(out: &mut Vec<T>, n: usize) {
    out.clear();
    if out.capacity() < n {
        *out = Vec::with_capacity(n);
        crate::mem::huge_pages(out);
    }
}

/// Whether every time is a non-negative integer below 2^53 (frame counters).
fn integer_times(singles: &[Single], piece: usize) -> bool {
    singles.par_chunks(piece.max(1)).all(|c| {
        c.iter()
            .all(|s| s.time >= 0.0 && s.time < INT_LIMIT && s.time.fract() == 0.0)
    })
}

/// Most presorted runs that [`sort`] merges in one multiway pass instead of radix sorting.
pub const MAX_RUNS: usize = 1024;

/// Where the input's maximal non-decreasing runs start (and `len` last), when there are at
/// most [`MAX_RUNS`] of them: PET data come module by module, each module's singles in time
/// order.
fn sorted_runs(singles: &[Single], piece: usize) -> Option<Vec<usize>> {
    let n = singles.len();
    if n < 2 {
        return None;
    }
    let piece = piece.max(1);
    let breaks: Vec<Vec<usize>> = singles
        .par_chunks(piece)
        .enumerate()
        .map(|(k, c)| {
            let base = k * piece;
            let mut b = Vec::new();
            if k > 0 && c[0].time < singles[base - 1].time {
                b.push(base);
            }
            for (i, w) in c.windows(2).enumerate() {
                if w[1].time < w[0].time {
                    b.push(base + i + 1);
                    if b.len() > MAX_RUNS {
                        break;
                    }
                }
            }
            b
        })
        .collect();
    let count: usize = breaks.iter().map(Vec::len).sum();
    if count + 1 > MAX_RUNS {
        return None;
    }
    let mut starts = Vec::with_capacity(count + 2);
    starts.push(0);
    starts.extend(breaks.into_iter().flatten());
    starts.push(n);
    Some(starts)
}

/// Stable merge of the sorted runs `singles[starts[r]..starts[r + 1]]` (at most
/// [`MAX_RUNS`], integer times below 2^53; ties: the earlier run first): the output is cut at splitter times into pieces of about `piece` singles,
/// each merged on its own (a loser tree over the runs) and written to its offset.
fn merge_runs(singles: &[Single], starts: &[usize], piece: usize, out: &mut Vec<Single>) {
    let n = singles.len();
    let runs = starts.len() - 1;
    let piece = piece.max(1);
    // Splitters: quantiles of a sorted sample of the times. Every single of a time `t` falls
    // in the piece below the first splitter above `t`, so equal times stay in one piece.
    let parts = n.div_ceil(piece);
    let sample_n = (parts * 8).min(n);
    let mut sample: Vec<f64> = (0..sample_n)
        .map(|i| singles[i * n / sample_n].time)
        .collect();
    sample.sort_unstable_by(f64::total_cmp);
    let splitters: Vec<f64> = (1..parts).map(|p| sample[p * sample_n / parts]).collect();
    // cuts[p][r]: where piece p starts in run r.
    let cut = |t: f64| -> Vec<usize> {
        (0..runs)
            .map(|r| {
                let (a, b) = (starts[r], starts[r + 1]);
                a + singles[a..b].partition_point(|s| s.time < t)
            })
            .collect()
    };
    let mut cuts: Vec<Vec<usize>> = Vec::with_capacity(parts + 1);
    cuts.push(starts[..runs].to_vec());
    cuts.extend(splitters.par_iter().map(|&t| cut(t)).collect::<Vec<_>>());
    cuts.push(starts[1..].to_vec());
    let sizes: Vec<usize> = cuts
        .windows(2)
        .map(|w| w[1].iter().zip(&w[0]).map(|(b, a)| b - a).sum())
        .collect();
    room(out, n);
    {
        let mut rest = &mut out.spare_capacity_mut()[..n];
        let mut dst = Vec::with_capacity(parts);
        for &len in &sizes {
            let (d, r) = rest.split_at_mut(len);
            dst.push(d);
            rest = r;
        }
        dst.into_par_iter()
            .enumerate()
            .for_each(|(p, d)| loser_merge(singles, &cuts[p], &cuts[p + 1], d));
    }
    // SAFETY: the pieces' sizes sum to `n` (every run is cut into consecutive ranges from its
    // start to its end), and `loser_merge` writes every slot of its piece.
    unsafe { out.set_len(n) };
}

/// Bits of a merge key that hold the run (below the time): `MAX_RUNS <= 1 << RUN_BITS`.
const RUN_BITS: u32 = 10;

/// Merges the ranges `singles[lo[r]..hi[r]]` (each sorted, integer times below 2^53) into
/// `out` (as long as their sum), stably (ties: lower `r` first), by a loser tree of `u64`
/// keys `time << RUN_BITS | r`: one compare and two selects per level, no branch.
fn loser_merge(
    singles: &[Single],
    lo: &[usize],
    hi: &[usize],
    out: &mut [std::mem::MaybeUninit<Single>],
) {
    const MASK: u64 = (1 << RUN_BITS) - 1;
    let k = lo.len();
    debug_assert!(k <= 1 << RUN_BITS);
    let leaves = k.next_power_of_two().max(2);
    let mut pos: Vec<usize> = lo.to_vec();
    pos.resize(leaves, 0);
    let mut end: Vec<usize> = hi.to_vec();
    end.resize(leaves, 0);
    // An exhausted run's key is `u64::MAX`, above every real key (< 2^63); `out.len()`
    // bounds the steps, so none is ever taken.
    let head = |r: usize, at: usize, end: usize| -> u64 {
        if at < end {
            (singles[at].time as u64) << RUN_BITS | r as u64
        } else {
            u64::MAX
        }
    };
    let mut tree = vec![0u64; leaves];
    let mut win = vec![0u64; 2 * leaves];
    for r in 0..leaves {
        win[leaves + r] = head(r, pos[r], end[r]);
    }
    for node in (1..leaves).rev() {
        let (a, b) = (win[2 * node], win[2 * node + 1]);
        win[node] = a.min(b);
        tree[node] = a.max(b);
    }
    let mut w = win[1];
    for slot in out.iter_mut() {
        let r = (w & MASK) as usize;
        slot.write(singles[pos[r]]);
        pos[r] += 1;
        w = head(r, pos[r], end[r]);
        let mut node = (r + leaves) / 2;
        while node >= 1 {
            let l = tree[node];
            tree[node] = l.max(w);
            w = l.min(w);
            node /= 2;
        }
    }
}

/// Key bits per radix pass.
const RADIX_BITS: u32 = 11;

/// [`sort`] with passes in pieces of `piece` singles (tests use small pieces).
#[doc(hidden)]
pub fn sort_in_pieces(singles: &[Single], piece: usize) -> Result<Vec<Single>> {
    check_times(singles, "singles to sort")?;
    let mut out = Vec::new();
    sort_into_unchecked_in_pieces(singles, piece, &mut out);
    Ok(out)
}

/// [`sort_in_pieces`] by the radix sort whatever the input (tests).
#[doc(hidden)]
pub fn radix_sort_in_pieces(singles: &[Single], piece: usize) -> Result<Vec<Single>> {
    check_times(singles, "singles to sort")?;
    let mut out = Vec::new();
    radix_sort(singles, piece, &mut out);
    Ok(out)
}

/// The LSD radix sort of finite times, into `out` (its allocation reused when large
/// enough; the other buffer of the passes is new).
fn radix_sort(singles: &[Single], piece: usize, out: &mut Vec<Single>) {
    let piece = piece.max(1);
    let n = singles.len();
    let copy = |out: &mut Vec<Single>| {
        out.clear();
        out.extend_from_slice(singles);
    };
    if n < 2 {
        return copy(out);
    }
    let integers = integer_times(singles, piece);
    // The bits that differ between the keys.
    let k0 = sort_key(singles[0].time, integers);
    let diff = singles
        .par_chunks(piece)
        .map(|c| {
            c.iter()
                .fold(0u64, |a, s| a | (sort_key(s.time, integers) ^ k0))
        })
        .reduce(|| 0, |a, b| a | b);
    if diff == 0 {
        return copy(out);
    }
    let lo = diff.trailing_zeros();
    let hi = 64 - diff.leading_zeros();
    let passes = (hi - lo).div_ceil(RADIX_BITS);
    // The first pass reads the input: no copy of it. The passes alternate between `out` and
    // one other buffer, the first into whichever makes the last land in `out`; each buffer
    // fully written by the pass that fills it.
    room(out, n);
    let mut other: Vec<Single> = Vec::with_capacity(n);
    crate::mem::huge_pages(&mut other);
    let (mut a, mut b) = if passes % 2 == 1 {
        (std::mem::take(out), other)
    } else {
        (other, std::mem::take(out))
    };
    radix_pass(
        singles,
        &mut a.spare_capacity_mut()[..n],
        lo,
        piece,
        integers,
    );
    // SAFETY: `radix_pass` writes every one of the `n` slots.
    unsafe { a.set_len(n) };
    let mut shift = lo + RADIX_BITS;
    while shift < hi {
        b.clear();
        radix_pass(&a, &mut b.spare_capacity_mut()[..n], shift, piece, integers);
        // SAFETY: as above.
        unsafe { b.set_len(n) };
        std::mem::swap(&mut a, &mut b);
        shift += RADIX_BITS;
    }
    *out = a;
}

/// One stable counting pass on the `RADIX_BITS` key bits at `shift`: `src` to `dst`.
fn radix_pass(
    src: &[Single],
    dst: &mut [std::mem::MaybeUninit<Single>],
    shift: u32,
    piece: usize,
    integers: bool,
) {
    debug_assert_eq!(src.len(), dst.len());
    const BUCKETS: usize = 1 << RADIX_BITS;
    let digit = |s: &Single| ((sort_key(s.time, integers) >> shift) as usize) & (BUCKETS - 1);
    let hist: Vec<[usize; BUCKETS]> = src
        .par_chunks(piece)
        .map(|c| {
            let mut h = [0usize; BUCKETS];
            for s in c {
                h[digit(s)] += 1;
            }
            h
        })
        .collect();
    // Offsets: digit-major, piece-minor (stable).
    let mut offs = vec![[0usize; BUCKETS]; hist.len()];
    let mut sum = 0;
    for d in 0..BUCKETS {
        for (p, h) in hist.iter().enumerate() {
            offs[p][d] = sum;
            sum += h[d];
        }
    }
    let out = SendPtr(dst.as_mut_ptr().cast::<Single>());
    src.par_chunks(piece)
        .zip(offs.into_par_iter())
        .for_each(|(c, mut o)| {
            let out = &out;
            for s in c {
                let d = digit(s);
                // SAFETY: the offsets give every (piece, digit) its own range of `dst`, of
                // exactly that piece's count of that digit, and the ranges cover `dst` once
                // (their sizes sum to `src.len() == dst.len()`): each slot is written by one
                // thread, once, in bounds.
                unsafe { out.0.add(o[d]).write(*s) };
                o[d] += 1;
            }
        });
}

struct SendPtr(*mut Single);
// SAFETY: used only for the disjoint writes of `radix_pass`.
unsafe impl Sync for SendPtr {}
// SAFETY: as above.
unsafe impl Send for SendPtr {}

/// Stable merge of two sorted lists, `a` first on equal times: [`oracle::merge`]'s result.
pub fn merge(a: &[Single], b: &[Single]) -> Vec<Single> {
    merge_in_pieces(a, b, PIECE)
}

/// [`merge`] in pieces of `piece` singles of the longer list (tests use small pieces).
#[doc(hidden)]
pub fn merge_in_pieces(a: &[Single], b: &[Single], piece: usize) -> Vec<Single> {
    let piece = piece.max(1);
    if a.is_empty() {
        return b.to_vec();
    }
    if b.is_empty() {
        return a.to_vec();
    }
    // Split points: pieces of the longer list, the matching point in the other (an `a`
    // equal to a `b` goes first).
    let n = a.len() + b.len();
    let splits: Vec<(usize, usize)> = if a.len() >= b.len() {
        (0..a.len().div_ceil(piece))
            .map(|p| {
                let i = p * piece;
                (i, b.partition_point(|x| x.time < a[i].time))
            })
            .collect()
    } else {
        (0..b.len().div_ceil(piece))
            .map(|p| {
                let j = p * piece;
                (a.partition_point(|x| x.time <= b[j].time), j)
            })
            .collect()
    };
    // The first piece starts at the beginning of both.
    let mut splits = splits;
    splits[0] = (0, 0);
    let pieces: Vec<Vec<Single>> = (0..splits.len())
        .into_par_iter()
        .map(|p| {
            let (i0, j0) = splits[p];
            let (i1, j1) = splits.get(p + 1).copied().unwrap_or((a.len(), b.len()));
            oracle::merge(&a[i0..i1], &b[j0..j1])
        })
        .collect();
    let out = concat(&pieces);
    debug_assert_eq!(out.len(), n);
    out
}

/// Openers a speculative walk notes from its start (with the pairs before each): the join
/// looks for the true chain's entry among them. In the generated data the chains meet at
/// the piece's first or second window; a piece whose chains have not met by the last noted
/// opener is walked to its end by the join (correct, only slower).
const KEEP: usize = 64;

/// What one speculative walk over a piece notes beside its pairs (which go to the piece's
/// scratch vector).
struct Walk {
    /// The walk's first openers (at most the noted number), increasing.
    opens: Vec<usize>,
    /// Per noted opener: the walk's pairs before it.
    before: Vec<usize>,
    /// The windows with an error (opener, error), in walk order: they have no pairs.
    errs: Vec<(usize, Error)>,
    /// Where the walk leaves the piece: the first opener at or past the piece's end (or
    /// past `cut`).
    exit: usize,
    /// The piece (with the single before it) is not sorted or has a non-finite time (when
    /// asked to check).
    faulty: bool,
}

/// The prompt window opened at `open`: its pairs handed to `emit`, in the oracle's order;
/// returns `(end, Ok or the window's error)` (a window with an error emits nothing).
#[inline(always)]
fn prompt_window(
    singles: &[Single],
    c: &CoincideConfig,
    reach: f64,
    open: usize,
    emit: &mut impl FnMut(Coincidence),
) -> (usize, Result<()>) {
    let n = singles.len();
    let t0 = singles[open].time;
    let mut end = open + 1;
    while end < n && singles[end].time - t0 <= reach {
        end += 1;
    }
    let members = &singles[open..end];
    let r = match members.len() {
        1 => Ok(()),
        2 => {
            if members[0].crystal != members[1].crystal {
                emit(Coincidence {
                    a: members[0],
                    b: members[1],
                });
            }
            Ok(())
        }
        _ => policy_pairs(members, false, c.policy).map(|v| {
            for (i, j) in v {
                emit(Coincidence {
                    a: members[i],
                    b: members[j],
                });
            }
        }),
    };
    (end, r)
}

/// Coincidences of singles sorted by time ([`oracle::coincide`]'s pairs, in its order).
/// The input must have passed [`oracle::check_sorted`] and the configuration its check.
pub fn coincide(singles: &[Single], c: &CoincideConfig) -> Result<Vec<Coincidence>> {
    Ok(coincide_until(singles, c, f64::INFINITY)?.0)
}

/// [`oracle::coincide_until`] (the same pairs and resume index) on every core.
pub fn coincide_until(
    singles: &[Single],
    c: &CoincideConfig,
    watermark: f64,
) -> Result<(Vec<Coincidence>, usize)> {
    coincide_in_pieces(singles, c, watermark, PIECE)
}

/// [`coincide_until`] walking pieces of `piece` singles (tests use small pieces).
#[doc(hidden)]
pub fn coincide_in_pieces(
    singles: &[Single],
    c: &CoincideConfig,
    watermark: f64,
    piece: usize,
) -> Result<(Vec<Coincidence>, usize)> {
    coincide_in_pieces_keeping(singles, c, watermark, piece, KEEP)
}

/// [`coincide_in_pieces`] with walks that note `keep` openers (tests use few, so that the
/// join's walk to a piece's end is exercised).
#[doc(hidden)]
pub fn coincide_in_pieces_keeping(
    singles: &[Single],
    c: &CoincideConfig,
    watermark: f64,
    piece: usize,
    keep: usize,
) -> Result<(Vec<Coincidence>, usize)> {
    c.validate()?;
    check_sorted(singles)?;
    let mut out = Vec::new();
    let resume = coincide_into_unchecked(
        singles,
        c,
        watermark,
        (piece, keep),
        &mut Vec::new(),
        &mut out,
    )?;
    Ok((out, resume))
}

/// [`coincide_in_pieces`] on input known to pass [`check_sorted`] and a checked
/// configuration (the CPU backend checks both first).
pub(crate) fn coincide_unchecked(
    singles: &[Single],
    c: &CoincideConfig,
    watermark: f64,
    piece: usize,
) -> Result<(Vec<Coincidence>, usize)> {
    let mut out = Vec::new();
    let resume = coincide_into_unchecked(
        singles,
        c,
        watermark,
        (piece, KEEP),
        &mut Vec::new(),
        &mut out,
    )?;
    Ok((out, resume))
}

/// [`coincide`] into `out` with a checked configuration, the input checked as it is walked
/// ([`oracle::check_sorted`]'s error first), the walks' scratch kept in `kept` (the CPU
/// backend's `pet_coincide_into`).
pub(crate) fn coincide_into_kept(
    singles: &[Single],
    c: &CoincideConfig,
    out: &mut Vec<Coincidence>,
    kept: &Scratch,
) -> Result<()> {
    let mut scratch = kept.take_pairs();
    let r = coincide_into_checking(
        singles,
        c,
        f64::INFINITY,
        (PIECE, KEEP),
        true,
        &mut scratch,
        out,
    );
    kept.put_pairs(scratch);
    r.map(|_| ())
}

/// [`coincide_until`] into `out` (cleared; its allocation reused when large enough), on
/// input known to pass [`check_sorted`] and a checked configuration; returns the resume
/// index. On an error `out` holds no meaningful result. `(piece, keep)`: singles per piece,
/// openers a walk notes.
///
/// One thread: the oracle's walk, the pairs pushed into `out`. Several: each piece walked
/// speculatively from its own first single, its pairs into its vector of `scratch` (one
/// per piece, kept between calls by the backend: a repeated call writes no fresh page);
/// one sequential join follows the true chain (where it enters a piece at a noted opener
/// of the walk, the walk's windows from there are the true ones; else the true chain is
/// walked there until they meet); then the stretches of pairs it takes are copied into
/// `out` in parallel (see docs/benchmarks.md, "cpu3").
pub(crate) fn coincide_into_unchecked(
    singles: &[Single],
    c: &CoincideConfig,
    watermark: f64,
    (piece, keep): (usize, usize),
    scratch: &mut Vec<Vec<Coincidence>>,
    out: &mut Vec<Coincidence>,
) -> Result<usize> {
    coincide_into_checking(singles, c, watermark, (piece, keep), false, scratch, out)
}

/// Whether `s` is sorted by time with every time finite.
#[inline]
fn sorted_finite(s: &[Single]) -> bool {
    let mut ok = true;
    let mut prev = f64::NEG_INFINITY;
    for x in s {
        ok &= x.time.is_finite() & (x.time >= prev);
        prev = x.time;
    }
    ok
}

/// [`coincide_into_unchecked`]; with `check`, the input is checked as it is walked (each
/// piece checked just before its walk reads it again from the cache, instead of a pass of
/// its own over the whole input first: see docs/benchmarks.md, "cpu3"), and a fault is
/// [`oracle::check_sorted`]'s error, before any window's error.
fn coincide_into_checking(
    singles: &[Single],
    c: &CoincideConfig,
    watermark: f64,
    (piece, keep): (usize, usize),
    check: bool,
    scratch: &mut Vec<Vec<Coincidence>>,
    out: &mut Vec<Coincidence>,
) -> Result<usize> {
    let piece = piece.max(1);
    let keep = keep.max(1);
    let reach = c.reach();
    let n = singles.len();
    // `window_complete` is monotone in the opener's time: openers below `cut` are complete.
    let cut = singles.partition_point(|s| k::window_complete(s.time, watermark, reach));
    out.clear();
    // The walks check only where they walk (below `cut`); the rest now (with an infinite
    // watermark only a non-finite time leaves `cut` below the end: that is an error).
    if check && cut < n {
        oracle::check_sorted(singles)?;
    }
    if let Some(d) = c.delay {
        if check {
            check_sorted(singles)?;
        }
        return delayed(singles, c, reach, d, cut, piece, out);
    }
    // A fault found by a walk: the oracle's error for it (the first fault of the input).
    let fault = || oracle::check_sorted(singles);
    let mut timer = Timer::start();
    if rayon::current_num_threads() == 1 || cut <= piece {
        // Checked a piece ahead of the walk (a window may read past the piece: a fault
        // there is found before any result or window error is returned).
        let mut checked = if check { 0 } else { cut };
        let mut open = 0;
        while open < cut {
            if open >= checked {
                let hi = (open + piece.max(PIECE)).min(cut);
                if !sorted_finite(&singles[checked.saturating_sub(1)..hi]) {
                    fault()?;
                }
                checked = hi;
            }
            let (end, r) = prompt_window(singles, c, reach, open, &mut |x| out.push(x));
            if let Err(e) = r {
                if check {
                    check_sorted(singles)?;
                }
                return Err(e);
            }
            open = end;
        }
        // The last window's members past the last checked piece.
        if check && checked < n && !sorted_finite(&singles[checked.saturating_sub(1)..]) {
            fault()?;
        }
        timer.mark("coincide: walk");
        return Ok(open);
    }
    let pieces = cut.div_ceil(piece);
    if scratch.len() < pieces {
        scratch.resize_with(pieces, Vec::new);
    }
    let walks: Vec<Walk> = scratch[..pieces]
        .par_iter_mut()
        .enumerate()
        .map(|(p, pairs)| {
            busy(Busy::CoincideWalks, || {
                let (start, stop) = (p * piece, ((p + 1) * piece).min(cut));
                pairs.clear();
                let mut w = Walk {
                    opens: Vec::with_capacity(keep.min(stop - start)),
                    before: Vec::with_capacity(keep.min(stop - start)),
                    errs: Vec::new(),
                    exit: start,
                    faulty: check && !sorted_finite(&singles[start.saturating_sub(1)..stop]),
                };
                let mut open = start;
                while open < stop {
                    if w.opens.len() < keep {
                        w.opens.push(open);
                        w.before.push(pairs.len());
                    }
                    let (end, r) = prompt_window(singles, c, reach, open, &mut |x| pairs.push(x));
                    if let Err(e) = r {
                        w.errs.push((open, e));
                    }
                    open = end;
                }
                w.exit = open;
                w
            })
        })
        .collect();
    timer.mark("coincide: walks");
    if walks.iter().any(|w| w.faulty) {
        fault()?;
    }
    // Join: follow the true chain from 0, noting which stretches of pairs it takes (a
    // walk's from an opener on, or windows walked here where the chains had not met yet).
    enum Take {
        Walk(usize, usize),
        Here(usize, usize),
    }
    let mut takes = Vec::new();
    let mut here = Vec::new();
    let mut open = 0;
    while open < cut {
        let p = open / piece;
        let w = &walks[p];
        match w.opens.binary_search(&open) {
            Ok(at) => {
                // The chains have met: the walk's windows from here are the true ones, up
                // to the first error among them.
                if let Some((_, e)) = w.errs.iter().find(|(o, _)| *o >= open) {
                    return Err(clone_err(e));
                }
                takes.push(Take::Walk(p, w.before[at]));
                open = w.exit;
            }
            Err(_) => {
                let from = here.len();
                let (end, r) = prompt_window(singles, c, reach, open, &mut |x| here.push(x));
                r?;
                match takes.last_mut() {
                    Some(Take::Here(_, to)) if *to == from => *to = here.len(),
                    _ => takes.push(Take::Here(from, here.len())),
                }
                open = end;
            }
        }
    }
    let slices: Vec<&[Coincidence]> = takes
        .iter()
        .map(|t| match *t {
            Take::Walk(p, from) => &scratch[p][from..],
            Take::Here(from, to) => &here[from..to],
        })
        .collect();
    timer.mark("coincide: join");
    concat_into(&slices, Some(Busy::CoincideFill), out);
    timer.mark("coincide: fill");
    Ok(open)
}

/// Delayed windows (every single below `cut` opens one, paired with its opener only).
fn delayed(
    singles: &[Single],
    c: &CoincideConfig,
    reach: f64,
    d: f64,
    cut: usize,
    piece: usize,
    out: &mut Vec<Coincidence>,
) -> Result<usize> {
    let n = singles.len();
    let pieces: Vec<Result<Vec<Coincidence>>> = (0..cut.div_ceil(piece))
        .into_par_iter()
        .map(|p| {
            let mut out = Vec::new();
            let mut members = Vec::new();
            for open in p * piece..((p + 1) * piece).min(cut) {
                let t0 = singles[open].time;
                members.clear();
                members.push(singles[open]);
                let mut end = open + 1;
                while end < n && singles[end].time - t0 <= reach {
                    if singles[end].time - t0 >= d {
                        members.push(singles[end]);
                    }
                    end += 1;
                }
                for (i, j) in policy_pairs(&members, true, c.policy)? {
                    out.push(Coincidence {
                        a: members[i],
                        b: members[j],
                    });
                }
            }
            Ok(out)
        })
        .collect();
    let mut ok = Vec::with_capacity(pieces.len());
    for p in pieces {
        ok.push(p?);
    }
    let slices: Vec<&[Coincidence]> = ok.iter().map(Vec::as_slice).collect();
    concat_into(&slices, None, out);
    Ok(cut)
}

/// The error of a speculative window, raised when the true chain reaches it.
fn clone_err(e: &Error) -> Error {
    match e {
        Error::CapacityExceeded {
            what,
            needed,
            capacity,
        } => Error::CapacityExceeded {
            what,
            needed: *needed,
            capacity: *capacity,
        },
        other => crate::error::invalid("coincidence", other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pet::gen;

    /// The block loop built for the baseline instruction set and (where the CPU has it) for
    /// AVX2 gives the oracle's singles and statistics, frames spoiled at the first, last and
    /// block-boundary positions.
    #[test]
    fn convert_piece_builds_equal_the_oracle() {
        let s = gen::small_animal_scanner(2);
        let mut frames = gen::acquisition(
            &s,
            &gen::AcquisitionConfig {
                singles: 2000,
                ..Default::default()
            },
        )
        .frames;
        let n = frames.len();
        assert!(n > 200, "{n}");
        for i in [0, 63, 64, 65, 128, n - 1] {
            frames[i].bdm = 255;
        }
        frames[1].energy = 0u16.to_be_bytes();
        frames[n - 2].energy = 65000u16.to_be_bytes();
        let want = oracle::convert(&frames, &s.params, &s.position, &s.energy);
        let t = Tables::new(&ConvertConsts::new(&s.params));
        for len in [0, 1, 64, 65, 129, n] {
            let want = oracle::convert(&frames[..len], &s.params, &s.position, &s.energy);
            let mut out = vec![std::mem::MaybeUninit::uninit(); len];
            let (kept, st) =
                convert_piece_body(&frames[..len], &t, &s.position, &s.energy, &mut out);
            // SAFETY: the first `kept` slots were written.
            let got: Vec<Single> = out[..kept]
                .iter()
                .map(|x| unsafe { x.assume_init() })
                .collect();
            assert!(got == want.0 && st == want.1, "scalar, {len} frames");
            let (kept, st) = convert_piece(&frames[..len], &t, &s.position, &s.energy, &mut out);
            // SAFETY: as above.
            let got: Vec<Single> = out[..kept]
                .iter()
                .map(|x| unsafe { x.assume_init() })
                .collect();
            assert!(got == want.0 && st == want.1, "dispatched, {len} frames");
        }
        assert!(want.1.bad_address >= 6 && want.1.first_bad_address == Some(0));
    }
}
