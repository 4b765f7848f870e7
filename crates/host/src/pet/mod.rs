//! PET acquisition chain: raw `DataFrameV2` frames → singles → stable time sort →
//! coincidence pairs, whole or streamed chunk by chunk. Kernels: `detkit_gpu::pet`;
//! launchers: [`cuda`]; oracle (also the CPU backend): [`cpu`]; file formats and the scanner
//! description's files: [`io`]; generated scanners and acquisitions: [`gen`]. Formats are
//! described in `docs/pet.md`.
//!
//! ```
//! use detkit::pet::{cpu::CoincideConfig, Single};
//! // Two singles 3 ticks apart pair inside a 5-tick window; the third is alone.
//! let s = |crystal, time| Single { crystal, energy: 511.0, time };
//! let singles = [s(1, 100.0), s(2, 103.0), s(3, 200.0)];
//! let pairs = detkit::Backend::cpu()
//!     .pet_coincide(&singles, &CoincideConfig::prompt(5.0))
//!     .unwrap();
//! assert_eq!(pairs.len(), 1);
//! assert_eq!((pairs[0].a.crystal, pairs[0].b.crystal), (1, 2));
//! ```

pub mod cpu;
pub mod cuda;
mod device_view;
pub(crate) mod door;
pub mod gen;
pub mod io;
mod launch;
pub mod merge;
pub mod par;

use std::io::Read;
use std::path::Path;

pub use cuda::{
    CoincideLaunch, CoincideScratch, DeviceScanner, PageLock, PairsBuffer, SinglesBuffer,
};
pub use detkit_gpu::pet::{Coincidence, DataFrameV2, Policy, ScannerParams, Single};
pub use device_view::{FramesDev, PairsDev, SinglesDev, SinglesView};
pub use door::{PetScanner, ScannerArg};
pub use io::*;
pub use launch::{MergePlan, MergeTile, PetLauncher, PetTuning};
pub use merge::PetSortPath;

use self::cpu::{CoincideConfig, ConvertStats};
use self::cuda::{check_u32_len, pod_vec};
use self::io::read_chunk;
use crate::error::{invalid, Error, Result};
use crate::Backend;
// ---------------------------------------------------------------------------------------
// Scanner description
// ---------------------------------------------------------------------------------------

/// A scanner: parameters, position table and energy-correction table.
#[derive(Clone, Debug, PartialEq)]
pub struct Scanner {
    /// The conversion parameters.
    pub params: ScannerParams,
    /// Default coincidence window for `detkit pet run` (frame counter units).
    pub time_window: f64,
    /// Position table: `u8` origin crystal per `(bdm, du, x + y * position_size)`. Shared
    /// and immutable (`Arc`): a clone of the scanner shares it, and the streamed chain knows
    /// its tables on the device are current when the table is the same allocation.
    pub position: std::sync::Arc<[u8]>,
    /// Energy-correction factors per `(bdm, du, local crystal, raw energy / 10)` (shared and
    /// immutable, as `position`).
    pub energy: std::sync::Arc<[f32]>,
}

/// The TOML scanner file (the seed's `CoinPetPara`).
#[derive(Clone, Debug, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ScannerToml {
    /// `m_nChannelNum`.
    pub channels: u32,
    /// Modules per channel around the ring (default 1).
    pub module_num_y: Option<u32>,
    /// Modules along the axis (default 1).
    pub module_num_z: Option<u32>,
    /// Blocks (DUs) per module around the ring.
    pub block_num_y: u32,
    /// Blocks (DUs) per module along the axis.
    pub block_num_z: u32,
    /// Crystals per block around the ring.
    pub crystal_num_y: u32,
    /// Crystals per block along the axis.
    pub crystal_num_z: u32,
    /// DUs per BDM; if given, must equal `block_num_y * block_num_z`.
    pub du_num: Option<u32>,
    /// The seed's square crystal count; if given, must equal both crystal counts.
    pub crystal_size: Option<u32>,
    /// Position-map side.
    pub position_size: u32,
    /// Energy window `[lo, hi]`, inclusive, corrected energy units.
    pub energy_window: [f32; 2],
    /// Coincidence window, frame counter units.
    pub time_window: f64,
    /// Position table file (relative to the TOML file).
    pub position_table: String,
    /// Energy-correction table file (relative to the TOML file).
    pub energy_table: String,
    /// Ignored (the seed leaves the X counts unused).
    pub module_num_x: Option<u32>,
    /// Ignored.
    pub block_num_x: Option<u32>,
    /// Ignored.
    pub crystal_num_x: Option<u32>,
}

pub(crate) fn io_err(what: &'static str, path: &Path, e: impl std::fmt::Display) -> Error {
    invalid(what, format!("{}: {e}", path.display()))
}

/// Checks scanner parameters: every count at least 1, indices representable (BDM byte,
/// 4-bit DU, 8-bit position), crystal numbers within `u32`, a finite energy window.
pub fn validate_params(p: &ScannerParams) -> Result<()> {
    let counts = [
        ("channels", p.channels),
        ("module_num_y", p.module_num_y),
        ("module_num_z", p.module_num_z),
        ("block_num_y", p.block_num_y),
        ("block_num_z", p.block_num_z),
        ("crystal_num_y", p.crystal_num_y),
        ("crystal_num_z", p.crystal_num_z),
        ("position_size", p.position_size),
    ];
    for (name, v) in counts {
        if v == 0 {
            return Err(invalid("scanner parameters", format!("{name} is 0")));
        }
    }
    let bdms = p.channels as u64 * p.module_num_y as u64 * p.module_num_z as u64;
    if bdms > 256 {
        return Err(invalid(
            "scanner parameters",
            format!("{bdms} BDMs; a frame's BDM byte addresses at most 256"),
        ));
    }
    let dus = p.block_num_y as u64 * p.block_num_z as u64;
    if dus > 16 {
        return Err(invalid(
            "scanner parameters",
            format!("{dus} DUs per BDM; a frame's 4-bit DU field addresses at most 16"),
        ));
    }
    if p.position_size > 256 {
        return Err(invalid(
            "scanner parameters",
            format!(
                "position_size {} > 256 (x and y are bytes)",
                p.position_size
            ),
        ));
    }
    let cpd = p.crystal_num_y as u64 * p.crystal_num_z as u64;
    if cpd > 256 {
        return Err(invalid(
            "scanner parameters",
            format!("{cpd} crystals per DU; the position table holds bytes (at most 256)"),
        ));
    }
    let total = bdms * dus * cpd;
    if total > u32::MAX as u64 {
        return Err(invalid("scanner parameters", format!("{total} crystals")));
    }
    let [lo, hi] = [p.energy_lo, p.energy_hi];
    if !(lo.is_finite() && hi.is_finite() && lo <= hi) {
        return Err(invalid(
            "scanner parameters",
            format!("energy window [{lo}, {hi}] must be finite with lo <= hi"),
        ));
    }
    Ok(())
}

// Backend API
// ---------------------------------------------------------------------------------------

/// How the GPU sorts singles by time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PetSortMethod {
    /// Order-preserving `u64` keys of the times, an LSD radix argsort over the bits that
    /// differ, one gather of the singles ([`PetLauncher::sort_radix`]). The default.
    Radix,
    /// The seed's stable merge sort (block sort + merge-path passes), kept as the faithful
    /// baseline ([`PetLauncher::sort_merge`]).
    Merge,
}

impl Backend {
    /// Converts raw frames into accepted singles (input order) with statistics. `scanner`
    /// is a [`Scanner`] or a [`PetScanner`] handle ([`Backend::load_scanner`]: tables
    /// already on the device); [`Backend::pet_convert_frames`] takes the frames as bytes.
    pub fn pet_convert(
        &self,
        frames: &[DataFrameV2],
        scanner: &(impl ScannerArg + ?Sized),
    ) -> Result<(Vec<Single>, ConvertStats)> {
        check_u32_len("frames", frames.len())?;
        self.pet_convert_frames(bytemuck::cast_slice(frames), scanner)
    }

    /// Stable sort by time (ties keep input order). Non-finite times are a typed error.
    /// On the GPU: the radix sort ([`PetSortMethod::Radix`]).
    pub fn pet_sort(&self, singles: &[Single]) -> Result<Vec<Single>> {
        self.pet_sort_with(singles, PetSortMethod::Radix)
    }

    /// [`Backend::pet_sort`] by a chosen GPU method (the CPU backend runs the oracle either
    /// way; both methods give the same, stable result).
    pub fn pet_sort_with(&self, singles: &[Single], method: PetSortMethod) -> Result<Vec<Single>> {
        self.on_cpu(|| par::check_times(singles, "singles to sort"))?;
        check_u32_len("singles to sort", singles.len())?;
        match self.gpu() {
            None => Ok(self.on_cpu(|| par::sort_unchecked(singles))),
            Some(_) if method == PetSortMethod::Radix => {
                let mut out = Vec::new();
                self.pet_sort_into(singles, &mut out)?;
                Ok(out)
            }
            Some(g) => Ok(self
                .pet_launcher(g)
                .round_trip(singles, |p, a, b, n| Ok((p.sort_merge(a, b, 0, n)?, ())))?
                .0),
        }
    }

    /// Merge of presorted runs: `singles[starts[r]..starts[r + 1]]` each sorted by time. The
    /// result equals the stable sort. Unsorted runs, bad boundaries, non-finite times: typed
    /// errors.
    pub fn pet_sort_runs(&self, singles: &[Single], starts: &[u32]) -> Result<Vec<Single>> {
        check_u32_len("singles to merge", singles.len())?;
        check_run_starts(starts, singles.len())?;
        check_runs_sorted(singles, starts)?;
        match self.gpu() {
            None => self.on_cpu(|| par::sort(singles)),
            Some(g) => Ok(self
                .pet_launcher(g)
                .round_trip(singles, |p, a, b, n| {
                    Ok((p.merge_runs(a, b, 0, n, starts)?, ()))
                })?
                .0),
        }
    }

    /// Coincidences of singles sorted by time (the window rule of issue 4, see
    /// [`crate::pet::cpu::coincide`]). Unsorted input is a typed error naming the first single out of
    /// order.
    pub fn pet_coincide(&self, singles: &[Single], c: &CoincideConfig) -> Result<Vec<Coincidence>> {
        let mut out = Vec::new();
        self.pet_coincide_into(singles, c, &mut out)?;
        Ok(out)
    }
}

// Streamed chain
// ---------------------------------------------------------------------------------------

/// Settings of the streamed chain.
#[derive(Clone, Copy, Debug)]
pub struct StreamConfig {
    /// Frames per chunk.
    pub chunk_frames: usize,
    /// Capacity of the pending buffer (singles kept between chunks, waiting for the slowest
    /// BDM); exceeding it is `CapacityExceeded`.
    pub pending_capacity: usize,
}

impl Default for StreamConfig {
    fn default() -> Self {
        Self {
            chunk_frames: 1 << 22,
            pending_capacity: 1 << 22,
        }
    }
}

/// Totals of a streamed run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Conversion statistics over the whole stream.
    pub convert: ConvertStats,
    /// Chunks processed.
    pub chunks: u64,
    /// Pairs emitted.
    pub pairs: u64,
    /// Largest number of singles carried from one chunk to the next.
    pub max_pending: u64,
}

/// The watermark tracker: every BDM stream is time-ordered, so once every BDM has reported,
/// no later single comes before the smallest of their latest times.
pub(crate) struct Watermark {
    last: Vec<Option<u64>>,
}

impl Watermark {
    fn new(bdms: u32) -> Self {
        Self {
            last: vec![None; bdms as usize],
        }
    }
    /// A tracker that has seen each BDM's latest time (`None`: no frame yet).
    pub(crate) fn from_latest(last: Vec<Option<u64>>) -> Self {
        Self { last }
    }
    /// Reads a chunk's frames (raw bytes; the first is frame `offset` of the stream); checks
    /// each BDM's times never decrease. Large chunks are read in parallel pieces (each
    /// piece's first and last time per BDM and its first inner disorder), joined in order, so
    /// the error names the same first frame out of order as a sequential reading.
    pub(crate) fn update(&mut self, bytes: &[u8], offset: u64) -> Result<()> {
        use rayon::prelude::*;
        const PIECE: usize = 1 << 15;
        let frames = bytes.as_chunks::<16>().0;
        let bdms = self.last.len();
        let time = |rec: &[u8; 16]| {
            u64::from_be_bytes([
                rec[2], rec[3], rec[4], rec[5], rec[6], rec[7], rec[8], rec[9],
            ])
        };
        // Per piece: (first (index, time) per BDM, last time per BDM, first inner disorder
        // as (index, bdm, time, previous time)).
        type Piece = (
            Vec<Option<(usize, u64)>>,
            Vec<Option<u64>>,
            Option<(usize, usize, u64, u64)>,
        );
        let summarize = |base: usize, recs: &[[u8; 16]]| -> Piece {
            let mut first = vec![None; bdms];
            let mut last: Vec<Option<u64>> = vec![None; bdms];
            let mut bad = None;
            for (i, rec) in recs.iter().enumerate() {
                let b = rec[1] as usize;
                if b >= bdms {
                    continue; // a bad address: counted by the conversion
                }
                let t = time(rec);
                match last[b] {
                    Some(prev) if t < prev && bad.is_none() => bad = Some((base + i, b, t, prev)),
                    None => first[b] = Some((base + i, t)),
                    _ => {}
                }
                last[b] = Some(t);
            }
            (first, last, bad)
        };
        let pieces: Vec<Piece> = if frames.len() <= PIECE {
            vec![summarize(0, frames)]
        } else {
            frames
                .par_chunks(PIECE)
                .enumerate()
                .map(|(k, recs)| summarize(k * PIECE, recs))
                .collect()
        };
        for (first, last, bad) in pieces {
            // The earliest disorder of this piece: inside it, or a BDM's first frame in it
            // before the BDM's latest time so far.
            let mut worst = bad;
            for (b, f) in first.iter().enumerate() {
                if let (Some((i, t)), Some(prev)) = (*f, self.last[b]) {
                    if t < prev && worst.is_none_or(|w| i < w.0) {
                        worst = Some((i, b, t, prev));
                    }
                }
            }
            if let Some((i, b, t, prev)) = worst {
                return Err(invalid(
                    "frame stream",
                    format!(
                        "frame {} of BDM {b} has time {t}, before the BDM's previous frame \
                         (time {prev}); each BDM's stream must be in time order",
                        offset + i as u64
                    ),
                ));
            }
            for (b, l) in last.iter().enumerate() {
                if l.is_some() {
                    self.last[b] = *l;
                }
            }
        }
        Ok(())
    }
    fn value(&self) -> f64 {
        self.last
            .iter()
            .map(|t| t.map_or(f64::NEG_INFINITY, |t| t as f64))
            .fold(f64::INFINITY, f64::min)
    }
}

/// Where the streamed chain's frames come from.
pub(crate) trait FrameSource: Send {
    /// The next chunk: at most `buf.len() / 16` whole frames, written into `buf` or borrowed
    /// from the source itself (frames already in page-locked memory, copied to the device
    /// straight from there); fewer than `buf.len() / 16` frames means the end of the stream.
    fn next_chunk<'b>(&'b mut self, buf: &'b mut [u8]) -> Result<&'b [u8]>;
}

fn cut_frame() -> Error {
    invalid(
        "frame stream",
        "ends inside a frame (length not a multiple of 16 bytes)",
    )
}

/// Frames from a reader (a pipe, any `Read`), read in order by one thread.
struct ReadSource<'a, R: Read>(&'a mut R);

impl<R: Read + Send> FrameSource for ReadSource<'_, R> {
    fn next_chunk<'b>(&'b mut self, buf: &'b mut [u8]) -> Result<&'b [u8]> {
        let nf = read_chunk(self.0, buf)?;
        Ok(&buf[..16 * nf])
    }
}

/// Frames in memory: copied into the chunk buffer by several threads, or (`direct`: memory
/// the device can read, page-locked) handed out in place.
pub(crate) struct SliceSource<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) direct: bool,
}

impl FrameSource for SliceSource<'_> {
    fn next_chunk<'b>(&'b mut self, buf: &'b mut [u8]) -> Result<&'b [u8]> {
        use rayon::prelude::*;
        let m = buf.len().min(self.bytes.len()) / 16 * 16;
        if m < buf.len() && self.bytes.len() > m {
            return Err(cut_frame());
        }
        let (now, rest) = self.bytes.split_at(m);
        self.bytes = rest;
        if self.direct {
            return Ok(now);
        }
        buf[..m]
            .par_chunks_mut(1 << 20)
            .zip(now.par_chunks(1 << 20))
            .for_each(|(d, s)| d.copy_from_slice(s));
        Ok(&buf[..m])
    }
}

/// Frames from a file, each chunk read by several threads at their offsets.
struct FileSource {
    file: std::fs::File,
    pos: u64,
    len: u64,
    name: String,
}

impl FrameSource for FileSource {
    fn next_chunk<'b>(&'b mut self, buf: &'b mut [u8]) -> Result<&'b [u8]> {
        use rayon::prelude::*;
        let left = self.len - self.pos;
        let m = (buf.len() as u64).min(left) as usize;
        if m < buf.len() && !m.is_multiple_of(16) {
            return Err(cut_frame());
        }
        let pos = self.pos;
        let file = &self.file;
        let piece = 4 << 20;
        buf[..m]
            .par_chunks_mut(piece)
            .enumerate()
            .try_for_each(|(k, d)| read_exact_at(file, d, pos + (k * piece) as u64))
            .map_err(|e| Error::Io {
                file: self.name.clone(),
                source: e,
            })?;
        self.pos += m as u64;
        Ok(&buf[..m])
    }
}

#[cfg(unix)]
fn read_exact_at(f: &std::fs::File, buf: &mut [u8], at: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(f, buf, at)
}

#[cfg(not(unix))]
fn read_exact_at(f: &std::fs::File, buf: &mut [u8], at: u64) -> std::io::Result<()> {
    use std::io::{Seek, SeekFrom};
    let mut f = f.try_clone()?;
    f.seek(SeekFrom::Start(at))?;
    f.read_exact(buf)
}

impl Backend {
    /// [`Backend::pet_run_stream`] over frames already in memory (`16 × frames` bytes):
    /// the same chain and result. On the GPU, frames in page-locked memory (a pinned DMA
    /// buffer, or memory locked once with [`crate::cuda::GpuContext::page_lock`] for several
    /// runs) are copied to the device straight from there; other memory through pinned chunk
    /// buffers, by several threads (a `Read` is copied by one).
    pub fn pet_run_frames(
        &self,
        frames: &[u8],
        scanner: &(impl ScannerArg + ?Sized),
        c: &CoincideConfig,
        sc: &StreamConfig,
        sink: impl FnMut(&[Coincidence]) -> Result<()>,
        progress: impl FnMut(&StreamStats),
    ) -> Result<StreamStats> {
        if !frames.len().is_multiple_of(16) {
            return Err(cut_frame());
        }
        // Page-locked frames (pinned memory, or locked with `GpuContext::page_lock` for
        // several runs) are copied to the device straight from where they are; others through
        // the pinned chunk buffers, by several threads (locking them for one run costs more
        // than copying: bench-pet).
        let direct = self.gpu().is_some_and(|g| g.is_page_locked(frames));
        let mut src = SliceSource {
            bytes: frames,
            direct,
        };
        self.pet_run_source(&mut src, scanner, c, sc, sink, progress)
    }

    /// [`Backend::pet_run_stream`] over a frame file, each chunk read by several threads.
    pub fn pet_run_file(
        &self,
        path: &Path,
        scanner: &(impl ScannerArg + ?Sized),
        c: &CoincideConfig,
        sc: &StreamConfig,
        sink: impl FnMut(&[Coincidence]) -> Result<()>,
        progress: impl FnMut(&StreamStats),
    ) -> Result<StreamStats> {
        let name = path.display().to_string();
        let io = |e| Error::Io {
            file: name.clone(),
            source: e,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if !len.is_multiple_of(16) {
            return Err(invalid(
                "frame stream",
                format!("{name}: {len} bytes, not a whole number of 16-byte frames"),
            ));
        }
        let mut src = FileSource {
            file,
            pos: 0,
            len,
            name: name.clone(),
        };
        self.pet_run_source(&mut src, scanner, c, sc, sink, progress)
    }

    /// The whole chain over a frame stream, chunk by chunk, with bounded memory: convert,
    /// sort, merge with the singles pending from earlier chunks, pair every window that no
    /// later frame can reach (the watermark: the smallest latest time over all BDMs), carry
    /// the rest. `sink` receives the pairs in time order; the result equals
    /// convert → sort → coincide over the whole stream. On CUDA, the next chunk's
    /// host-to-device copy (pinned memory, a second stream) overlaps the current chunk's
    /// kernels, and the next chunk is read on a second thread (hence `Send`) while the
    /// current one is processed.
    pub fn pet_run_stream(
        &self,
        input: &mut (impl Read + Send),
        scanner: &(impl ScannerArg + ?Sized),
        c: &CoincideConfig,
        sc: &StreamConfig,
        sink: impl FnMut(&[Coincidence]) -> Result<()>,
        progress: impl FnMut(&StreamStats),
    ) -> Result<StreamStats> {
        self.pet_run_source(&mut ReadSource(input), scanner, c, sc, sink, progress)
    }

    pub(crate) fn pet_run_source(
        &self,
        input: &mut impl FrameSource,
        scanner: &(impl ScannerArg + ?Sized),
        c: &CoincideConfig,
        sc: &StreamConfig,
        mut sink: impl FnMut(&[Coincidence]) -> Result<()>,
        mut progress: impl FnMut(&StreamStats),
    ) -> Result<StreamStats> {
        c.validate()?;
        if sc.chunk_frames == 0 {
            return Err(invalid("chunk size", "0 frames"));
        }
        check_u32_len("chunk", sc.chunk_frames + sc.pending_capacity)?;
        let mut stats = StreamStats::default();
        match self.gpu() {
            None => {
                let scanner = scanner.host();
                let mut wm = Watermark::new(scanner.params.bdm_count());
                let mut pending: Vec<Single> = Vec::new();
                let mut buf = vec![0u8; 16 * sc.chunk_frames];
                let mut offset = 0u64;
                loop {
                    let chunk = self.on_cpu(|| input.next_chunk(&mut buf))?;
                    let nf = chunk.len() / 16;
                    self.on_cpu(|| wm.update(chunk, offset))?;
                    if !chunk.len().is_multiple_of(16) {
                        frames_from_bytes(chunk)?;
                    }
                    // Frames are byte-aligned: the chunk is read in place.
                    let frames: &[DataFrameV2] = bytemuck::cast_slice(chunk);
                    let last = nf < sc.chunk_frames;
                    let (singles, st) = self.on_cpu(|| {
                        par::convert(frames, &scanner.params, &scanner.position, &scanner.energy)
                    });
                    stats.convert.add(&st, offset);
                    offset += nf as u64;
                    let sorted = self.on_cpu(|| par::sort(&singles))?;
                    let merged = if pending.is_empty() {
                        sorted
                    } else {
                        self.on_cpu(|| par::merge(&pending, &sorted))
                    };
                    let w = if last { f64::INFINITY } else { wm.value() };
                    // `merged` is sorted (and its times finite: frame counters), `c` checked above.
                    let (pairs, resume) =
                        self.on_cpu(|| par::coincide_unchecked(&merged, c, w, par::PIECE))?;
                    pending = merged[resume..].to_vec();
                    if pending.len() > sc.pending_capacity {
                        return Err(pending_overflow(pending.len(), sc.pending_capacity));
                    }
                    stats.max_pending = stats.max_pending.max(pending.len() as u64);
                    stats.pairs += pairs.len() as u64;
                    stats.chunks += 1;
                    sink(&pairs)?;
                    progress(&stats);
                    if last {
                        return Ok(stats);
                    }
                }
            }
            Some(g) => self.ws.pet.run(
                g,
                || door::PetWorkspace::new(g, self.pet_plan),
                |w| {
                    let pre = scanner.device_for(g);
                    PetLauncher::with_plan(&w.gpu, w.plan).run_stream(
                        &mut w.stream,
                        pre,
                        input,
                        scanner.host(),
                        c,
                        sc,
                        &mut stats,
                        &mut sink,
                        &mut progress,
                    )
                },
            ),
        }
    }
}

pub(crate) fn pending_overflow(needed: usize, capacity: usize) -> Error {
    Error::CapacityExceeded {
        what: "pending singles between chunks (a BDM that stops reporting holds the watermark)",
        needed: needed as u64,
        capacity: capacity as u64,
    }
}

/// Checks run boundaries: start at 0, non-decreasing, end at `n`.
pub fn check_run_starts(starts: &[u32], n: usize) -> Result<()> {
    if starts.first() != Some(&0) || starts.last().map(|&x| x as usize) != Some(n) {
        return Err(invalid(
            "run boundaries",
            format!("must start with 0 and end with {n}"),
        ));
    }
    if let Some(i) = (1..starts.len()).find(|&i| starts[i] < starts[i - 1]) {
        return Err(invalid(
            "run boundaries",
            format!("boundary {i} ({}) is below boundary {}", starts[i], i - 1),
        ));
    }
    Ok(())
}

/// Checks that each run is sorted by time (and every time finite).
pub fn check_runs_sorted(singles: &[Single], starts: &[u32]) -> Result<()> {
    crate::pet::par::check_times(singles, "singles to merge")?;
    for r in 0..starts.len() - 1 {
        let (a, b) = (starts[r] as usize, starts[r + 1] as usize);
        if let Some(i) = (a + 1..b).find(|&i| singles[i].time < singles[i - 1].time) {
            return Err(invalid(
                "singles to merge",
                format!("run {r} is not sorted by time at single {i}"),
            ));
        }
    }
    Ok(())
}
