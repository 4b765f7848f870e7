//! The PET doors: [`PetScanner`] (a scanner whose tables are on the device, loaded once) and
//! the workspace a [`Backend`] keeps between PET calls (device buffers, pinned staging, the
//! streamed chain's buffers), with the host-path calls that use them.

use std::sync::Arc;

use cudarc::driver::CudaSlice;
use detkit_gpu::pet::{self as k, Coincidence, DataFrameV2, Single};

use super::cpu::{CoincideConfig, ConvertStats};
use super::cuda::{check_u32_len, stats_from_words, CoincideScratch, DeviceScanner};
use super::cuda::{ensure_len, PetStreamBuffers, SinglesBuffer};
use super::launch::{MergePlan, PetLauncher};
use super::Scanner;
use crate::cuda::{GpuContext, Record};
use crate::error::{invalid, DriverContext, Result};
use crate::phases::{self, Phase};
use crate::staging::{download_into, upload_checked, upload_into, HostCopies, Pinned};
use crate::Backend;

/// A scanner loaded for one [`Backend`]: its description and, on CUDA, its position and
/// energy tables in device memory (uploaded once by [`Backend::load_scanner`], about 110 MB
/// for a full-size scanner). Every PET call takes one (or a plain [`Scanner`], whose tables
/// the backend then uploads, or reuses when they equal the last ones). Cloning a handle
/// shares the device tables.
///
/// ```
/// use detkit::pet::{gen, cpu::CoincideConfig};
/// use detkit::Backend;
///
/// let b = Backend::auto();
/// let scanner = gen::tiny_scanner(7);
/// let handle = b.load_scanner(&scanner).unwrap(); // tables uploaded once
/// let acq = gen::acquisition(&scanner, &gen::AcquisitionConfig { singles: 1000, ..Default::default() });
/// let frames = gen::frame_bytes(&acq.frames); // the file format, borrowed
/// let (singles, stats) = b.pet_convert_frames(frames, &handle).unwrap();
/// assert_eq!(stats.frames, acq.frames.len() as u64);
/// assert_eq!(singles, b.pet_convert(&acq.frames, &scanner).unwrap().0);
/// let sorted = b.pet_sort(&singles).unwrap();
/// let pairs = b.pet_coincide(&sorted, &CoincideConfig::prompt(5.0)).unwrap();
/// assert!(pairs.len() <= sorted.len());
/// ```
#[derive(Clone)]
pub struct PetScanner {
    scanner: Scanner,
    device: Option<Arc<DeviceScanner>>,
    /// The CUDA context the tables live in (its address), to refuse them on another device.
    owner: usize,
}

impl std::fmt::Debug for PetScanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PetScanner")
            .field("params", &self.scanner.params)
            .field("on_device", &self.device.is_some())
            .finish()
    }
}

impl PetScanner {
    /// The scanner's description (parameters, window, host tables).
    pub fn scanner(&self) -> &Scanner {
        &self.scanner
    }

    /// Whether the tables are in device memory.
    pub fn on_device(&self) -> bool {
        self.device.is_some()
    }
}

/// What the PET calls take as a scanner: a [`Scanner`] (tables uploaded by the call, or
/// reused when equal to the last ones) or a [`PetScanner`] handle (tables already there).
pub trait ScannerArg {
    /// The scanner's description.
    fn host(&self) -> &Scanner;
    /// The device tables, when this is a handle loaded on `gpu`'s device.
    fn device_for(&self, gpu: &GpuContext) -> Option<&Arc<DeviceScanner>>;
}

impl ScannerArg for Scanner {
    fn host(&self) -> &Scanner {
        self
    }
    fn device_for(&self, _gpu: &GpuContext) -> Option<&Arc<DeviceScanner>> {
        None
    }
}

impl ScannerArg for PetScanner {
    fn host(&self) -> &Scanner {
        &self.scanner
    }
    fn device_for(&self, gpu: &GpuContext) -> Option<&Arc<DeviceScanner>> {
        self.device.as_ref().filter(|_| self.owner == owner_of(gpu))
    }
}

fn owner_of(gpu: &GpuContext) -> usize {
    Arc::as_ptr(gpu.context()) as usize
}

/// Frames as bytes (16 per frame), or the typed error of a cut frame.
fn frame_count(frames: &[u8]) -> Result<usize> {
    frame_count_of(frames.len())
}

/// [`frame_count`] of `bytes` bytes.
pub(crate) fn frame_count_of(bytes: usize) -> Result<usize> {
    if !bytes.is_multiple_of(16) {
        return Err(invalid(
            "frames",
            format!("{} bytes, not a whole number of 16-byte frames", bytes),
        ));
    }
    let n = bytes / 16;
    check_u32_len("frames", n)?;
    Ok(n)
}

/// The PET workspace of one stream.
pub(crate) struct PetWorkspace {
    pub(crate) gpu: Arc<GpuContext>,
    /// The backend's merge plan.
    pub(crate) plan: MergePlan,
    pub(crate) frames: Option<CudaSlice<u8>>,
    pub(crate) a: Option<SinglesBuffer>,
    pub(crate) b: Option<SinglesBuffer>,
    pub(crate) stats: Option<CudaSlice<u32>>,
    pub(crate) coincide: CoincideScratch,
    bytes_in: Pinned<u8>,
    singles_in: Pinned<Record<Single>>,
    singles_out: Pinned<Record<Single>>,
    pairs_out: Pinned<Record<Coincidence>>,
    pub(crate) stats_out: Pinned<u32>,
    /// The streamed chain's buffers.
    pub(crate) stream: PetStreamBuffers,
    /// The last plain [`Scanner`] a call was given, and its tables on the device.
    last: Option<(Scanner, Arc<DeviceScanner>)>,
}

impl PetWorkspace {
    pub(crate) fn new(gpu: &GpuContext, plan: MergePlan) -> Result<Self> {
        Ok(Self {
            gpu: crate::workspace::fork(gpu)?,
            plan,
            frames: None,
            a: None,
            b: None,
            stats: None,
            coincide: CoincideScratch::default(),
            bytes_in: Pinned::new(true),
            singles_in: Pinned::new(true),
            singles_out: Pinned::new(false),
            pairs_out: Pinned::new(false),
            stats_out: Pinned::new(false),
            stream: PetStreamBuffers::default(),
            last: None,
        })
    }

    /// The launcher on this workspace's stream.
    pub(crate) fn pet(&self) -> PetLauncher<'_> {
        PetLauncher::with_plan(&self.gpu, self.plan)
    }

    /// The device tables of `scanner`: the handle's, or the last plain scanner's when equal,
    /// or uploaded now.
    pub(crate) fn tables(
        &mut self,
        scanner: &(impl ScannerArg + ?Sized),
    ) -> Result<Arc<DeviceScanner>> {
        if let Some(ds) = scanner.device_for(&self.gpu) {
            return Ok(ds.clone());
        }
        let s = scanner.host();
        if let Some((last, ds)) = &self.last {
            if super::cuda::same_scanner(last, s) {
                return Ok(ds.clone());
            }
        }
        self.last = None;
        let ds = Arc::new(self.pet().load_scanner(s)?);
        self.last = Some((s.clone(), ds.clone()));
        Ok(ds)
    }

    /// `n` singles of `a` or `b` into `out`, through pinned memory or straight.
    fn download_singles(
        &mut self,
        from_b: bool,
        n: usize,
        copies: HostCopies,
        out: &mut Vec<Single>,
    ) -> Result<()> {
        let g = &*self.gpu;
        if n == 0 {
            out.clear();
            return Ok(());
        }
        // Every element is overwritten below: no `clear` first, so a vector that holds `n`
        // already is not filled with zeros again (tens of megabytes for a large call).
        out.truncate(n);
        let buf = if from_b { &self.b } else { &self.a };
        let src = buf.as_ref().expect("sized by the call").slice(0..n);
        let what = "copying singles from the device";
        match copies {
            HostCopies::Pinned => {
                let w = self.singles_out.get(g, n)?;
                out.resize(n, bytemuck::Zeroable::zeroed());
                download_into(g, &src, Record::slice_mut(out), Some(w))?;
            }
            HostCopies::Pageable => {
                out.resize(n, bytemuck::Zeroable::zeroed());
                g.stream()
                    .memcpy_dtoh(&src, Record::slice_mut(out))
                    .ctx(what)?;
            }
        }
        Ok(())
    }

    /// Uploads `singles` into `a` (and sizes `b` alike).
    fn upload_singles(&mut self, singles: &[Single], copies: HostCopies) -> Result<()> {
        let g = &*self.gpu;
        let n = singles.len();
        ensure_len(g, &mut self.a, n)?;
        ensure_len(g, &mut self.b, n)?;
        let stage = match copies {
            HostCopies::Pinned => Some(self.singles_in.get(g, n)?),
            HostCopies::Pageable => None,
        };
        let a = self.a.as_mut().expect("sized above");
        upload_into(g, Record::slice(singles), &mut a.slice_mut(0..n), stage)
    }

    /// [`PetWorkspace::upload_singles`] through pinned staging with `bad` tested on every
    /// part as it is copied ([`upload_checked`]): `Ok(true)` when a part is bad.
    fn upload_singles_checked(
        &mut self,
        singles: &[Single],
        bad: impl Fn(&[Single], usize) -> bool + Sync,
    ) -> Result<bool> {
        let g = &*self.gpu;
        let n = singles.len();
        ensure_len(g, &mut self.a, n)?;
        ensure_len(g, &mut self.b, n)?;
        let stage = self.singles_in.get(g, n)?;
        let a = self.a.as_mut().expect("sized above");
        let bad = |part: &[Record<Single>], at| bad(Record::unwrap_slice(part), at);
        upload_checked(
            g,
            Record::slice(singles),
            &mut a.slice_mut(0..n),
            stage,
            bad,
        )
    }

    /// Uploads `singles` for a sort or coincidence call: checked as they are copied when
    /// `check` is given (`Some(false)`: finiteness, `Some(true)`: finiteness and order; the
    /// error of the full check `Backend::pet_sort_into` / `pet_coincide_into` run before the
    /// copy otherwise), else only copied.
    fn upload_for(
        &mut self,
        singles: &[Single],
        copies: HostCopies,
        check: Option<bool>,
    ) -> Result<()> {
        match check {
            None => self.upload_singles(singles, copies),
            Some(false) => {
                let bad = |c: &[Single], _| c.iter().fold(false, |b, s| b | !s.time.is_finite());
                if self.upload_singles_checked(singles, bad)? {
                    super::par::check_times(singles, "singles to sort")?;
                }
                Ok(())
            }
            Some(true) => {
                let bad = |c: &[Single], first: usize| {
                    let before = if first > 0 {
                        singles[first - 1].time
                    } else {
                        f64::NEG_INFINITY
                    };
                    // Non-finite times make the fold true on their own; `<` then sees finite
                    // ones where it matters (the full check names the first fault).
                    let (b, _) = c.iter().fold((false, before), |(b, prev), s| {
                        (b | !s.time.is_finite() | (s.time < prev), s.time)
                    });
                    b
                };
                if self.upload_singles_checked(singles, bad)? {
                    super::par::check_sorted(singles)?;
                }
                Ok(())
            }
        }
    }

    pub(crate) fn convert(
        &mut self,
        frames: &[u8],
        scanner: &(impl ScannerArg + ?Sized),
        copies: HostCopies,
        out: &mut Vec<Single>,
    ) -> Result<ConvertStats> {
        phases::begin();
        let n = frame_count(frames)?;
        let ds = self.tables(scanner)?;
        let g = self.gpu.clone();
        ensure_len(&g, &mut self.frames, 16 * n.max(1))?;
        ensure_len(&g, &mut self.a, n.max(1))?;
        ensure_len(&g, &mut self.stats, k::STAT_WORDS)?;
        phases::mark(Phase::Prepare);
        {
            let stage = match copies {
                HostCopies::Pinned => Some(self.bytes_in.get(&g, frames.len())?),
                HostCopies::Pageable => None,
            };
            let d = self.frames.as_mut().expect("sized above");
            upload_into(&g, frames, &mut d.slice_mut(0..16 * n), stage)?;
        }
        phases::mark_gpu(Phase::Stage, &g);
        let (d_frames, a, stats) = (
            self.frames.as_ref().expect("sized above"),
            self.a.as_mut().expect("sized above"),
            self.stats.as_mut().expect("sized above"),
        );
        PetLauncher::with_plan(&g, self.plan).convert(d_frames, n, &ds, a, 0, stats)?;
        phases::mark_gpu(Phase::Kernels, &g);
        let st = self.stats_out.get(&g, k::STAT_WORDS)?;
        g.stream()
            .memcpy_dtoh(&stats.slice(0..k::STAT_WORDS), st)
            .ctx("copying the conversion statistics")?;
        g.synchronize()?;
        phases::mark(Phase::Wait);
        let st = stats_from_words(st, n);
        self.download_singles(false, st.accepted as usize, copies, out)?;
        phases::mark(Phase::CopyOut);
        Ok(st)
    }

    pub(crate) fn sort(
        &mut self,
        singles: &[Single],
        copies: HostCopies,
        check: Option<bool>,
        out: &mut Vec<Single>,
    ) -> Result<()> {
        phases::begin();
        let n = singles.len();
        self.upload_for(singles, copies, check)?;
        let g = self.gpu.clone();
        phases::mark_gpu(Phase::Stage, &g);
        let (a, b) = (
            self.a.as_mut().expect("sized above"),
            self.b.as_mut().expect("sized above"),
        );
        let in_b = PetLauncher::with_plan(&g, self.plan).sort_radix(a, b, 0, n)?;
        phases::mark_gpu(Phase::Kernels, &g);
        let r = self.download_singles(in_b, n, copies, out);
        phases::mark(Phase::CopyOut);
        r
    }

    pub(crate) fn coincide(
        &mut self,
        singles: &[Single],
        c: &CoincideConfig,
        copies: HostCopies,
        check: Option<bool>,
        out: &mut Vec<Coincidence>,
    ) -> Result<()> {
        phases::begin();
        let n = singles.len();
        self.upload_for(singles, copies, check)?;
        let g = self.gpu.clone();
        phases::mark_gpu(Phase::Stage, &g);
        let a = self.a.as_ref().expect("sized above");
        let pet = PetLauncher::with_plan(&g, self.plan);
        let (total, _) = pet.coincide_resident(&mut self.coincide, a, 0, n, c, f64::INFINITY)?;
        phases::mark_gpu(Phase::Kernels, &g);
        // Overwritten below (as in `download_singles`): no `clear` first.
        out.truncate(total);
        out.resize(total, bytemuck::Zeroable::zeroed());
        match copies {
            HostCopies::Pageable => pet.download_pairs(&self.coincide, out),
            HostCopies::Pinned => {
                if total == 0 {
                    return Ok(());
                }
                let pairs = self
                    .coincide
                    .pairs()
                    .filter(|p| p.len() >= total)
                    .ok_or_else(|| invalid("pairs", "fewer pairs on the device than counted"))?;
                let w = self.pairs_out.get(&g, total)?;
                download_into(&g, &pairs.slice(0..total), Record::slice_mut(out), Some(w))
            }
        }
    }
}

impl Backend {
    /// Loads a scanner for this backend: on CUDA its tables are copied to the device once
    /// and stay there for every call that takes the handle ([`Backend::pet_convert_frames`],
    /// [`Backend::pet_run_file`] and the other streamed runs). On the CPU the handle holds
    /// the scanner only.
    pub fn load_scanner(&self, scanner: &Scanner) -> Result<PetScanner> {
        super::validate_params(&scanner.params)?;
        let (device, owner) = match self.gpu() {
            None => (None, 0),
            Some(g) => {
                let ds = self.pet_launcher(g).load_scanner(scanner)?;
                // Other streams (the workspaces') read the tables: the upload is finished
                // before the handle exists.
                g.synchronize()?;
                (Some(Arc::new(ds)), owner_of(g))
            }
        };
        Ok(PetScanner {
            scanner: scanner.clone(),
            device,
            owner,
        })
    }

    /// Converts raw frames (`16 × n` bytes, the file format, borrowed) into accepted singles
    /// (input order) with statistics; the same result as [`Backend::pet_convert`].
    pub fn pet_convert_frames(
        &self,
        frames: &[u8],
        scanner: &(impl ScannerArg + ?Sized),
    ) -> Result<(Vec<Single>, ConvertStats)> {
        let mut out = Vec::new();
        let st = self.pet_convert_into(frames, scanner, &mut out)?;
        Ok((out, st))
    }

    /// [`Backend::pet_convert_frames`] into `out` (cleared, its allocation reused).
    pub fn pet_convert_into(
        &self,
        frames: &[u8],
        scanner: &(impl ScannerArg + ?Sized),
        out: &mut Vec<Single>,
    ) -> Result<ConvertStats> {
        let n = frame_count(frames)?;
        match self.gpu() {
            None => {
                let s = scanner.host();
                let owned;
                let f: &[DataFrameV2] = match bytemuck::try_cast_slice(frames) {
                    Ok(f) => f,
                    Err(_) => {
                        owned = super::pod_vec::<DataFrameV2>(frames);
                        &owned
                    }
                };
                debug_assert_eq!(f.len(), n);
                Ok(self.on_cpu(|| super::par::convert_into_kept(f, s, out, &self.ws.pet_cpu)))
            }
            Some(g) => {
                let copies = self.host_copies();
                self.ws.pet.run(
                    g,
                    || PetWorkspace::new(g, self.pet_plan),
                    |w| w.convert(frames, scanner, copies, out),
                )
            }
        }
    }

    /// [`Backend::pet_sort`] into `out` (cleared, its allocation reused).
    pub fn pet_sort_into(&self, singles: &[Single], out: &mut Vec<Single>) -> Result<()> {
        // With pinned staging the times are checked as they are copied into it (read once);
        // the error is the same (see docs/host.md, "Validation").
        let fused = self.fuse_pet_checks();
        if !fused || check_u32_len("singles to sort", singles.len()).is_err() {
            self.on_cpu(|| super::par::check_times(singles, "singles to sort"))?;
        }
        check_u32_len("singles to sort", singles.len())?;
        match self.gpu() {
            None => {
                self.on_cpu(|| super::par::sort_into_unchecked(singles, out));
                Ok(())
            }
            Some(g) => {
                let copies = self.host_copies();
                let check = fused.then_some(false);
                self.ws.pet.run(
                    g,
                    || PetWorkspace::new(g, self.pet_plan),
                    |w| w.sort(singles, copies, check, out),
                )
            }
        }
    }

    /// Whether the PET sort and coincidence calls check their input as they copy it into
    /// pinned staging (on CUDA with pinned copies) rather than before.
    fn fuse_pet_checks(&self) -> bool {
        self.gpu().is_some() && self.host_copies() == HostCopies::Pinned
    }

    /// [`Backend::pet_coincide`] into `out` (cleared, its allocation reused).
    pub fn pet_coincide_into(
        &self,
        singles: &[Single],
        c: &CoincideConfig,
        out: &mut Vec<Coincidence>,
    ) -> Result<()> {
        c.validate()?;
        // The CPU backend checks the singles as its walks read them (the same error).
        let fused = self.fuse_pet_checks() || self.gpu().is_none();
        if !fused || check_u32_len("singles", singles.len()).is_err() {
            self.on_cpu(|| super::par::check_sorted(singles))?;
        }
        check_u32_len("singles", singles.len())?;
        match self.gpu() {
            None => {
                self.on_cpu(|| super::par::coincide_into_kept(singles, c, out, &self.ws.pet_cpu))?;
                Ok(())
            }
            Some(g) => {
                let copies = self.host_copies();
                let check = fused.then_some(true);
                self.ws.pet.run(
                    g,
                    || PetWorkspace::new(g, self.pet_plan),
                    |w| w.coincide(singles, c, copies, check, out),
                )
            }
        }
    }
}
