//! PET acquisition chain: scanner description, file formats, launchers of the
//! `detkit_gpu::pet` kernels, the backend-neutral API and the streamed chain.
//! See `detkit_gpu::pet` for the algorithms and `docs/pet.md` for the formats.

pub mod gen;

use std::io::{BufRead, Read, Write};
use std::path::Path;

use cudarc::driver::CudaSlice;
use detkit_gpu::pet::{self as k, Coincidence, DataFrameV2, Policy, ScannerParams, Single};

use crate::cpu::pet::{self as oracle, CoincideConfig, ConvertStats};
use crate::cuda::{cfg, GpuContext};
use crate::error::{invalid, DriverContext, Error, Result};
use crate::{cpu, Backend};

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
    /// Position table: `u8` origin crystal per `(bdm, du, x + y * position_size)`.
    pub position: Vec<u8>,
    /// Energy-correction factors per `(bdm, du, local crystal, raw energy / 10)`.
    pub energy: Vec<f32>,
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

fn io_err(what: &'static str, path: &Path, e: impl std::fmt::Display) -> Error {
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

impl Scanner {
    /// A scanner from parameters and tables, checked: table sizes, every position entry
    /// below the crystals per DU, every correction factor finite.
    pub fn new(
        params: ScannerParams,
        time_window: f64,
        position: Vec<u8>,
        energy: Vec<f32>,
    ) -> Result<Self> {
        validate_params(&params)?;
        if position.len() as u64 != params.position_entries() {
            return Err(invalid(
                "position table",
                format!(
                    "{} entries, the scanner needs {} (BDMs x DUs x position_size^2)",
                    position.len(),
                    params.position_entries()
                ),
            ));
        }
        if energy.len() as u64 != params.energy_entries() {
            return Err(invalid(
                "energy table",
                format!(
                    "{} factors, the scanner needs {} (BDMs x DUs x crystals x 1000)",
                    energy.len(),
                    params.energy_entries()
                ),
            ));
        }
        let cpd = params.crystals_per_du();
        if let Some(i) = position.iter().position(|&c| c as u32 >= cpd) {
            return Err(invalid(
                "position table",
                format!("entry {i} is crystal {}, a DU has {cpd}", position[i]),
            ));
        }
        if let Some(i) = energy.iter().position(|f| !f.is_finite()) {
            return Err(invalid(
                "energy table",
                format!("factor {i} is {} (must be finite)", energy[i]),
            ));
        }
        if !(time_window.is_finite() && time_window >= 0.0) {
            return Err(invalid("time_window", format!("{time_window}")));
        }
        Ok(Self {
            params,
            time_window,
            position,
            energy,
        })
    }

    /// Reads a scanner TOML file and the tables it names.
    pub fn from_toml_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| io_err("scanner file", path, e))?;
        let t: ScannerToml = toml::from_str(&text).map_err(|e| io_err("scanner file", path, e))?;
        if let Some(d) = t.du_num {
            if d != t.block_num_y * t.block_num_z {
                return Err(invalid(
                    "scanner file",
                    format!(
                        "du_num = {d} but block_num_y * block_num_z = {}",
                        t.block_num_y * t.block_num_z
                    ),
                ));
            }
        }
        if let Some(c) = t.crystal_size {
            if c != t.crystal_num_y || c != t.crystal_num_z {
                return Err(invalid(
                    "scanner file",
                    format!(
                        "crystal_size = {c} but crystal_num_y = {}, crystal_num_z = {}",
                        t.crystal_num_y, t.crystal_num_z
                    ),
                ));
            }
        }
        let params = ScannerParams {
            channels: t.channels,
            module_num_y: t.module_num_y.unwrap_or(1),
            module_num_z: t.module_num_z.unwrap_or(1),
            block_num_y: t.block_num_y,
            block_num_z: t.block_num_z,
            crystal_num_y: t.crystal_num_y,
            crystal_num_z: t.crystal_num_z,
            position_size: t.position_size,
            energy_lo: t.energy_window[0],
            energy_hi: t.energy_window[1],
            _pad: [0; 2],
        };
        validate_params(&params)?;
        let dir = path.parent().unwrap_or(Path::new("."));
        let pos_path = dir.join(&t.position_table);
        let position =
            std::fs::read(&pos_path).map_err(|e| io_err("position table", &pos_path, e))?;
        let e_path = dir.join(&t.energy_table);
        let bytes = std::fs::read(&e_path).map_err(|e| io_err("energy table", &e_path, e))?;
        if !bytes.len().is_multiple_of(4) {
            return Err(invalid(
                "energy table",
                format!("{} bytes, not a whole number of f32", bytes.len()),
            ));
        }
        let energy = bytes
            .as_chunks::<4>()
            .0
            .iter()
            .map(|c| f32::from_le_bytes(*c))
            .collect();
        Self::new(params, t.time_window, position, energy)
    }

    /// Writes `NAME.toml`, `NAME.position.bin` and `NAME.energy.bin` into `dir`; returns the
    /// TOML path.
    pub fn write_files(&self, dir: &Path, name: &str) -> Result<std::path::PathBuf> {
        let p = &self.params;
        let t = ScannerToml {
            channels: p.channels,
            module_num_y: Some(p.module_num_y),
            module_num_z: Some(p.module_num_z),
            block_num_y: p.block_num_y,
            block_num_z: p.block_num_z,
            crystal_num_y: p.crystal_num_y,
            crystal_num_z: p.crystal_num_z,
            du_num: Some(p.du_count()),
            crystal_size: None,
            position_size: p.position_size,
            energy_window: [p.energy_lo, p.energy_hi],
            time_window: self.time_window,
            position_table: format!("{name}.position.bin"),
            energy_table: format!("{name}.energy.bin"),
            module_num_x: None,
            block_num_x: None,
            crystal_num_x: None,
        };
        let text = toml::to_string(&t).map_err(|e| invalid("scanner file", e.to_string()))?;
        let toml_path = dir.join(format!("{name}.toml"));
        let w = |path: std::path::PathBuf, bytes: &[u8]| {
            std::fs::write(&path, bytes).map_err(|e| io_err("scanner file", &path, e))
        };
        w(toml_path.clone(), text.as_bytes())?;
        w(dir.join(&t.position_table), &self.position)?;
        let e: Vec<u8> = self.energy.iter().flat_map(|f| f.to_le_bytes()).collect();
        w(dir.join(&t.energy_table), &e)?;
        Ok(toml_path)
    }
}

// ---------------------------------------------------------------------------------------
// File formats
// ---------------------------------------------------------------------------------------

/// Singles CSV header.
pub const SINGLES_HEADER: &str = "crystal,energy,time";
/// Pairs CSV header.
pub const PAIRS_HEADER: &str = "crystal_a,energy_a,time_a,crystal_b,energy_b,time_b";

/// Whether a path names a binary file (`.bin`), else CSV.
pub fn is_binary(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "bin")
}

/// Frames from raw bytes (16 per frame).
pub fn frames_from_bytes(bytes: &[u8]) -> Result<Vec<DataFrameV2>> {
    if !bytes.len().is_multiple_of(16) {
        return Err(invalid(
            "frame file",
            format!(
                "{} bytes, not a whole number of 16-byte frames",
                bytes.len()
            ),
        ));
    }
    Ok(pod_vec(bytes))
}

/// Writes singles as CSV (`crystal,energy,time`; shortest round-trip decimal floats).
pub fn write_singles_csv(w: &mut impl Write, singles: &[Single]) -> std::io::Result<()> {
    writeln!(w, "{SINGLES_HEADER}")?;
    for s in singles {
        writeln!(w, "{},{},{}", s.crystal, s.energy, s.time)?;
    }
    Ok(())
}

/// Writes pairs as CSV.
pub fn write_pairs_csv(w: &mut impl Write, pairs: &[Coincidence]) -> std::io::Result<()> {
    for p in pairs {
        writeln!(
            w,
            "{},{},{},{},{},{}",
            p.a.crystal, p.a.energy, p.a.time, p.b.crystal, p.b.energy, p.b.time
        )?;
    }
    Ok(())
}

/// Reads singles CSV (header `crystal,energy,time`); errors name the line.
pub fn read_singles_csv(r: impl BufRead) -> Result<Vec<Single>> {
    let mut out = Vec::new();
    for (ln, line) in r.lines().enumerate() {
        let line = line.map_err(|e| invalid("singles CSV", e.to_string()))?;
        let line = line.trim();
        if ln == 0 {
            if line != SINGLES_HEADER {
                return Err(invalid(
                    "singles CSV",
                    format!("line 1 is `{line}`, expected the header `{SINGLES_HEADER}`"),
                ));
            }
            continue;
        }
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        let bad = || invalid("singles CSV", format!("line {}: `{line}`", ln + 1));
        if f.len() != 3 {
            return Err(bad());
        }
        out.push(Single {
            crystal: f[0].trim().parse().map_err(|_| bad())?,
            energy: f[1].trim().parse().map_err(|_| bad())?,
            time: f[2].trim().parse().map_err(|_| bad())?,
        });
    }
    Ok(out)
}

/// Reads singles from a file: `.bin` = raw 16-byte little-endian `Single` records, else CSV.
pub fn read_singles(path: &Path) -> Result<Vec<Single>> {
    if is_binary(path) {
        let bytes = std::fs::read(path).map_err(|e| io_err("singles file", path, e))?;
        if !bytes.len().is_multiple_of(16) {
            return Err(invalid(
                "singles file",
                format!(
                    "{} bytes, not a whole number of 16-byte singles",
                    bytes.len()
                ),
            ));
        }
        Ok(pod_vec(&bytes))
    } else {
        let f = std::fs::File::open(path).map_err(|e| io_err("singles file", path, e))?;
        read_singles_csv(std::io::BufReader::new(f))
    }
}

/// Writes singles to a file (`.bin` raw records, else CSV).
pub fn write_singles(path: &Path, singles: &[Single]) -> Result<()> {
    let f = std::fs::File::create(path).map_err(|e| io_err("singles file", path, e))?;
    let mut w = std::io::BufWriter::new(f);
    let r = if is_binary(path) {
        w.write_all(bytemuck::cast_slice(singles))
    } else {
        write_singles_csv(&mut w, singles)
    };
    r.and_then(|_| w.flush())
        .map_err(|e| io_err("singles file", path, e))
}

/// A pairs writer (`.bin`: raw 32-byte `Coincidence` records, else CSV with header).
pub struct PairsWriter {
    w: std::io::BufWriter<std::fs::File>,
    binary: bool,
    path: std::path::PathBuf,
    /// Pairs written.
    pub count: u64,
}

impl PairsWriter {
    /// Creates the file and writes the CSV header.
    pub fn create(path: &Path) -> Result<Self> {
        let f = std::fs::File::create(path).map_err(|e| io_err("pairs file", path, e))?;
        let mut w = std::io::BufWriter::new(f);
        let binary = is_binary(path);
        if !binary {
            writeln!(w, "{PAIRS_HEADER}").map_err(|e| io_err("pairs file", path, e))?;
        }
        Ok(Self {
            w,
            binary,
            path: path.to_path_buf(),
            count: 0,
        })
    }
    /// Appends pairs.
    pub fn write(&mut self, pairs: &[Coincidence]) -> Result<()> {
        let r = if self.binary {
            self.w.write_all(bytemuck::cast_slice(pairs))
        } else {
            write_pairs_csv(&mut self.w, pairs)
        };
        self.count += pairs.len() as u64;
        r.map_err(|e| io_err("pairs file", &self.path, e))
    }
    /// Flushes.
    pub fn finish(mut self) -> Result<u64> {
        self.w
            .flush()
            .map_err(|e| io_err("pairs file", &self.path, e))?;
        Ok(self.count)
    }
}

/// Reads pairs (`.bin` raw records, else CSV with the pairs header).
pub fn read_pairs(path: &Path) -> Result<Vec<Coincidence>> {
    if is_binary(path) {
        let bytes = std::fs::read(path).map_err(|e| io_err("pairs file", path, e))?;
        if !bytes.len().is_multiple_of(32) {
            return Err(invalid("pairs file", "not a whole number of 32-byte pairs"));
        }
        return Ok(pod_vec(&bytes));
    }
    let f = std::fs::File::open(path).map_err(|e| io_err("pairs file", path, e))?;
    let mut out = Vec::new();
    for (ln, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|e| io_err("pairs file", path, e))?;
        if ln == 0 {
            if line.trim() != PAIRS_HEADER {
                return Err(invalid("pairs file", format!("line 1 is `{line}`")));
            }
            continue;
        }
        let f: Vec<&str> = line.trim().split(',').collect();
        let bad = || invalid("pairs file", format!("line {}: `{line}`", ln + 1));
        if f.len() != 6 {
            return Err(bad());
        }
        let s = |o: usize| -> Result<Single> {
            Ok(Single {
                crystal: f[o].parse().map_err(|_| bad())?,
                energy: f[o + 1].parse().map_err(|_| bad())?,
                time: f[o + 2].parse().map_err(|_| bad())?,
            })
        };
        out.push(Coincidence { a: s(0)?, b: s(3)? });
    }
    Ok(out)
}

/// Policy by GATE name (case-insensitive).
pub fn policy_from_name(name: &str) -> Result<Policy> {
    Policy::ALL
        .into_iter()
        .find(|p| p.name().eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            invalid(
                "policy",
                format!(
                    "`{name}`; one of {}",
                    Policy::ALL.map(|p| p.name()).join(", ")
                ),
            )
        })
}

// ---------------------------------------------------------------------------------------
// GPU launchers
// ---------------------------------------------------------------------------------------

/// Singles on the device: two `u64` words per single (cudarc needs a `DeviceRepr` element).
pub type SinglesBuffer = CudaSlice<u64>;

/// A scanner's parameters and tables on the device.
pub struct DeviceScanner {
    params: CudaSlice<u32>,
    position: CudaSlice<u8>,
    energy: CudaSlice<f32>,
    /// The parameters, on the host.
    pub host: ScannerParams,
}

fn check_u32_len(what: &'static str, n: usize) -> Result<()> {
    if n as u64 >= u32::MAX as u64 {
        return Err(invalid(
            what,
            format!("{n} items; at most 2^32 - 2 per launch"),
        ));
    }
    Ok(())
}

/// Copies bytes into a vector of `T` (any alignment of `bytes`; whole elements only).
fn pod_vec<T: bytemuck::Pod>(bytes: &[u8]) -> Vec<T> {
    let mut v = vec![T::zeroed(); bytes.len() / std::mem::size_of::<T>()];
    bytemuck::cast_slice_mut::<T, u8>(&mut v).copy_from_slice(bytes);
    v
}

fn download_view(g: &GpuContext, v: &cudarc::driver::CudaView<'_, u64>) -> Result<Vec<u64>> {
    g.stream().clone_dtoh(v).ctx("copying from the device")
}

fn singles_of(words: &[u64]) -> Vec<Single> {
    bytemuck::cast_slice::<u64, Single>(words).to_vec()
}

impl GpuContext {
    /// Uploads a scanner.
    pub fn pet_scanner(&self, s: &Scanner) -> Result<DeviceScanner> {
        let words: &[u32] = bytemuck::cast_slice(std::slice::from_ref(&s.params));
        Ok(DeviceScanner {
            params: self.upload(words)?,
            position: self.upload(&s.position)?,
            energy: self.upload(&s.energy)?,
            host: s.params,
        })
    }

    /// Converts `n` frames (`frames`: `16 n` bytes) into `out[..]` (accepted singles, input
    /// order) and `stats` (`STAT_WORDS` words). Asynchronous; read `stats` afterwards.
    pub fn pet_convert_device(
        &self,
        frames: &CudaSlice<u8>,
        n: usize,
        scanner: &DeviceScanner,
        out: &mut SinglesBuffer,
        out_offset: usize,
        stats: &mut CudaSlice<u32>,
    ) -> Result<()> {
        check_u32_len("frames", n)?;
        if frames.len() < 16 * n || out.len() < 2 * (out_offset + n) || stats.len() < k::STAT_WORDS
        {
            return Err(invalid("convert buffers", "shorter than the frame count"));
        }
        let mut init = [0u32; k::STAT_WORDS];
        init[k::STAT_FIRST_BAD] = u32::MAX;
        self.stream()
            .memcpy_htod(&init, stats)
            .ctx("initialising conversion statistics")?;
        if n == 0 {
            return Ok(());
        }
        let tiles = (n as u64).div_ceil(k::CONVERT_TILE);
        let mut lb = self.take_lookback::<u32>(tiles)?;
        let n64 = n as u64;
        let mut outv = out.slice_mut(2 * out_offset..);
        let params = k::PetConvertFramesParams {
            frames: self.ptr(frames).cast(),
            n: n64,
            params: self.ptr(&scanner.params).cast(),
            position: self.ptr(&scanner.position),
            correction: self.ptr(&scanner.energy),
            out: self.ptr_mut(&mut outv).cast(),
            stats: self.ptr_mut(&mut *stats),
            flags: self.ptr_mut(&mut lb.flags),
            aggregates: self.ptr_mut(&mut lb.agg),
            inclusive: self.ptr_mut(&mut lb.inc),
        };
        // SAFETY: CONVERT_THREADS threads, one block per tile, `convert_smem_bytes`; n < 2^32;
        // frames hold 16 n bytes (256-byte aligned cudarc allocation); the tables were
        // uploaded from a validated `Scanner` (sizes match its parameters); `out` holds n
        // singles past the offset (checked); stats initialised above; look-back zeroed.
        let r = unsafe {
            self.launch(
                k::KERNEL_CONVERT,
                cfg(tiles, k::CONVERT_THREADS, k::convert_smem_bytes()),
                &params,
            )
        };
        self.put_lookback(lb);
        r
    }

    /// One merge pass from `src[off..off+n]` to `dst[off..off+n]`: runs of `width` (if > 0;
    /// `runs` unused) or the explicit boundaries `runs` (relative to `off`).
    #[allow(clippy::too_many_arguments)]
    fn pet_merge_pass(
        &self,
        src: &SinglesBuffer,
        dst: &mut SinglesBuffer,
        off: usize,
        n: usize,
        width: u64,
        runs: &CudaSlice<u32>,
        nruns: u64,
    ) -> Result<()> {
        let tiles = (n as u64).div_ceil(k::SORT_TILE as u64);
        let srcv = src.slice(2 * off..2 * (off + n));
        let mut dstv = dst.slice_mut(2 * off..2 * (off + n));
        let n64 = n as u64;
        let params = k::PetMergeSortPassParams {
            input: self.ptr(&srcv).cast(),
            output: self.ptr_mut(&mut dstv).cast(),
            n: n64,
            width,
            runs: self.ptr(runs),
            nruns,
        };
        // SAFETY: SORT_THREADS threads, one block per output tile, `sort_smem_bytes`; source
        // and destination are distinct buffers holding n singles; with width == 0, `runs`
        // holds nruns + 1 boundaries (the caller built them).
        unsafe {
            self.launch(
                k::KERNEL_SORT_PASS,
                cfg(tiles, k::SORT_THREADS, k::sort_smem_bytes()),
                &params,
            )
        }
    }

    /// Stable sort by time of the singles `a[off..off+n]`, with `b[off..off+n]` as scratch.
    /// Returns `true` when the result is in `b`, `false` when it is in `a`. Times must be
    /// finite (the host API checks; the kernels stay in bounds whatever the data).
    pub fn pet_sort_device(
        &self,
        a: &mut SinglesBuffer,
        b: &mut SinglesBuffer,
        off: usize,
        n: usize,
    ) -> Result<bool> {
        check_u32_len("singles to sort", n)?;
        if a.len() < 2 * (off + n) || b.len() < 2 * (off + n) {
            return Err(invalid("sort buffers", "shorter than off + n singles"));
        }
        if n <= 1 {
            return Ok(false);
        }
        let tiles = (n as u64).div_ceil(k::SORT_TILE as u64);
        {
            let av = a.slice(2 * off..2 * (off + n));
            let mut bv = b.slice_mut(2 * off..2 * (off + n));
            let n64 = n as u64;
            let params = k::PetMergeSortBlockParams {
                input: self.ptr(&av).cast(),
                output: self.ptr_mut(&mut bv).cast(),
                n: n64,
            };
            // SAFETY: SORT_THREADS threads, one block per tile, `sort_smem_bytes`; a and b
            // are distinct and hold n singles past `off`.
            let r = unsafe {
                self.launch(
                    k::KERNEL_SORT_BLOCK,
                    cfg(tiles, k::SORT_THREADS, k::sort_smem_bytes()),
                    &params,
                )
            };
            r?;
        }
        let mut in_b = true;
        let mut width = k::SORT_TILE as u64;
        let unused = self.zeros::<u32>(1)?;
        while width < n as u64 {
            if in_b {
                self.pet_merge_pass(b, a, off, n, width, &unused, 0)?;
            } else {
                self.pet_merge_pass(a, b, off, n, width, &unused, 0)?;
            }
            in_b = !in_b;
            width *= 2;
        }
        Ok(in_b)
    }

    /// Merges the presorted runs `a[off + starts[r] .. off + starts[r + 1]]` (each sorted by
    /// time; ties: earlier run first, so the result is the stable sort) with `b` as scratch.
    /// `starts` begins with 0 and ends with `n`. Returns `true` when the result is in `b`.
    pub fn pet_merge_runs_device(
        &self,
        a: &mut SinglesBuffer,
        b: &mut SinglesBuffer,
        off: usize,
        n: usize,
        starts: &[u32],
    ) -> Result<bool> {
        check_u32_len("singles to merge", n)?;
        check_run_starts(starts, n)?;
        if a.len() < 2 * (off + n) || b.len() < 2 * (off + n) {
            return Err(invalid("merge buffers", "shorter than off + n singles"));
        }
        let mut bounds: Vec<u32> = starts.to_vec();
        let mut in_b = false;
        while bounds.len() > 2 {
            let nruns = (bounds.len() - 1) as u64;
            let d = self.upload(&bounds)?;
            if in_b {
                self.pet_merge_pass(b, a, off, n, 0, &d, nruns)?;
            } else {
                self.pet_merge_pass(a, b, off, n, 0, &d, nruns)?;
            }
            in_b = !in_b;
            let mut next: Vec<u32> = bounds.iter().step_by(2).copied().collect();
            if *next.last().expect("non-empty") != n as u32 {
                next.push(n as u32);
            }
            bounds = next;
        }
        Ok(in_b)
    }

    /// Coincidences of the sorted singles `s[off..off+n]` whose windows are complete for
    /// `watermark` (`f64::INFINITY`: all). Returns the pairs (time order) and the index
    /// (relative to `off`) of the first incomplete opener. Unsorted or NaN input is a typed
    /// error naming the first offending single.
    pub fn pet_coincide_device(
        &self,
        s: &SinglesBuffer,
        off: usize,
        n: usize,
        c: &CoincideConfig,
        watermark: f64,
    ) -> Result<(Vec<Coincidence>, usize)> {
        let mut scratch = CoincideScratch::default();
        self.pet_coincide_device_with(&mut scratch, s, off, n, c, watermark)
    }

    /// [`GpuContext::pet_coincide_device`] with reusable scratch buffers (grown on demand),
    /// so that repeated calls (chunks of a stream, timed runs) allocate nothing.
    pub fn pet_coincide_device_with(
        &self,
        scratch: &mut CoincideScratch,
        s: &SinglesBuffer,
        off: usize,
        n: usize,
        c: &CoincideConfig,
        watermark: f64,
    ) -> Result<(Vec<Coincidence>, usize)> {
        c.validate()?;
        check_u32_len("singles to pair", n)?;
        if s.len() < 2 * (off + n) {
            return Err(invalid(
                "coincidence buffers",
                "shorter than off + n singles",
            ));
        }
        if n == 0 {
            return Ok((Vec::new(), 0));
        }
        let sv = s.slice(2 * off..2 * (off + n));
        let n64 = n as u64;
        let blocks = n64.div_ceil(k::COINCIDE_THREADS as u64);
        let delayed = c.delay.is_some() as u32;
        let reach = c.reach();
        let delay = c.delay.unwrap_or(0.0);
        let policy = c.policy as u32;
        scratch.grow(self, n)?;
        let CoincideScratch {
            next,
            lo,
            opener,
            counts,
            offsets,
            pairs,
            status,
        } = scratch;
        let (next, lo, opener, counts, offsets, status) = (
            next.as_mut().expect("grown"),
            lo.as_mut().expect("grown"),
            opener.as_mut().expect("grown"),
            counts.as_mut().expect("grown"),
            offsets.as_mut().expect("grown"),
            status.as_mut().expect("grown"),
        );
        {
            let mut w = [0u32; k::CO_WORDS];
            w[k::CO_FIRST_UNSORTED] = u32::MAX;
            w[k::CO_RESUME] = u32::MAX;
            self.stream()
                .memcpy_htod(&w, status)
                .ctx("initialising coincidence status")?;
            let mut ov = opener.slice_mut(0..n);
            self.stream()
                .memset_zeros(&mut ov)
                .ctx("zeroing opener flags")?;
        }
        let launch_cfg = cfg(blocks, k::COINCIDE_THREADS, 0);
        {
            let params = k::PetCoincideNextParams {
                singles: self.ptr(&sv).cast(),
                n: n64,
                reach,
                delay,
                delayed,
                next: self.ptr_mut(&mut *next),
                lo: self.ptr_mut(&mut *lo),
                status: self.ptr_mut(&mut *status),
                ..bytemuck::Zeroable::zeroed()
            };
            // SAFETY: one thread per single; next holds n words, lo n words when delayed,
            // status CO_WORDS words.
            let r = unsafe { self.launch(k::KERNEL_COINCIDE_NEXT, launch_cfg, &params) };
            r?;
        }
        let st = self.download(status)?;
        let bad = st[k::CO_FIRST_UNSORTED];
        if bad != u32::MAX {
            let i = bad as usize;
            let around = download_view(
                self,
                &s.slice(2 * (off + i.saturating_sub(1))..2 * (off + i + 1)),
            )?;
            let around = singles_of(&around);
            let detail = if around.last().is_some_and(|x| x.time.is_nan()) {
                format!("single {i} has time NaN")
            } else {
                format!(
                    "not sorted by time: single {i} (time {}) comes after single {} (time {})",
                    around[around.len() - 1].time,
                    i - 1,
                    around[0].time
                )
            };
            return Err(invalid("singles to pair", detail));
        }
        if delayed == 0 {
            let window = c.window;
            let params = k::PetCoincideWalkParams {
                singles: self.ptr(&sv).cast(),
                n: n64,
                window,
                next: self.ptr(&*next),
                opener: self.ptr_mut(&mut *opener),
            };
            // SAFETY: one thread per single; next computed above; opener n zeroed bytes.
            let r = unsafe { self.launch(k::KERNEL_COINCIDE_WALK, launch_cfg, &params) };
            r?;
        }
        {
            let params = k::PetCoincideCountParams {
                singles: self.ptr(&sv).cast(),
                n: n64,
                reach,
                watermark,
                delayed,
                policy,
                next: self.ptr(&*next),
                lo: self.ptr(&*lo),
                opener: self.ptr(&*opener),
                counts: self.ptr_mut(&mut *counts),
                status: self.ptr_mut(&mut *status),
            };
            // SAFETY: as above; counts n words.
            let r = unsafe { self.launch(k::KERNEL_COINCIDE_COUNT, launch_cfg, &params) };
            r?;
        }
        let st = self.download(status)?;
        if st[k::CO_OVERSIZE] != 0 {
            return Err(Error::CapacityExceeded {
                what: "singles in one coincidence window (policies other than killAll)",
                needed: st[k::CO_OVERSIZE] as u64,
                capacity: k::MAX_MULTIPLE as u64,
            });
        }
        let total = st[k::CO_TOTAL_LO] as u64 | (st[k::CO_TOTAL_LO + 1] as u64) << 32;
        if total > u32::MAX as u64 {
            return Err(Error::CapacityExceeded {
                what: "coincidences of one launch",
                needed: total,
                capacity: u32::MAX as u64,
            });
        }
        let resume = if st[k::CO_RESUME] == u32::MAX {
            n
        } else {
            st[k::CO_RESUME] as usize
        };
        if total == 0 {
            return Ok((Vec::new(), resume));
        }
        self.scan_device(counts, offsets, n, crate::ScanKind::Exclusive)?;
        if pairs.as_ref().is_none_or(|p| p.len() < 4 * total as usize) {
            *pairs = Some(self.zeros::<u64>(4 * total as usize)?);
        }
        let pairs = pairs.as_mut().expect("allocated");
        {
            let params = k::PetCoincideFillParams {
                singles: self.ptr(&sv).cast(),
                n: n64,
                reach,
                watermark,
                delayed,
                policy,
                next: self.ptr(&*next),
                lo: self.ptr(&*lo),
                opener: self.ptr(&*opener),
                offsets: self.ptr(&*offsets),
                pairs: self.ptr_mut(&mut *pairs).cast(),
            };
            // SAFETY: as above; offsets is the exclusive scan of the counts written by the
            // count kernel with the same arguments, so every write is below `total`.
            let r = unsafe { self.launch(k::KERNEL_COINCIDE_FILL, launch_cfg, &params) };
            r?;
        }
        let words = download_view(self, &pairs.slice(0..4 * total as usize))?;
        Ok((
            bytemuck::cast_slice::<u64, Coincidence>(&words).to_vec(),
            resume,
        ))
    }

    fn upload_singles(&self, singles: &[Single]) -> Result<SinglesBuffer> {
        if singles.is_empty() {
            return self.zeros(2);
        }
        self.upload(bytemuck::cast_slice::<Single, u64>(singles))
    }
}

/// Reusable device buffers of the coincidence kernels.
#[derive(Default)]
pub struct CoincideScratch {
    next: Option<CudaSlice<u32>>,
    lo: Option<CudaSlice<u32>>,
    opener: Option<CudaSlice<u8>>,
    counts: Option<CudaSlice<u32>>,
    offsets: Option<CudaSlice<u32>>,
    pairs: Option<CudaSlice<u64>>,
    status: Option<CudaSlice<u32>>,
}

impl CoincideScratch {
    fn grow(&mut self, g: &GpuContext, n: usize) -> Result<()> {
        fn ensure<T: cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits>(
            g: &GpuContext,
            slot: &mut Option<CudaSlice<T>>,
            n: usize,
        ) -> Result<()> {
            if slot.as_ref().is_none_or(|b| b.len() < n) {
                *slot = Some(g.zeros(n.max(1))?);
            }
            Ok(())
        }
        ensure(g, &mut self.next, n)?;
        ensure(g, &mut self.lo, n)?;
        ensure(g, &mut self.opener, n)?;
        ensure(g, &mut self.counts, n)?;
        ensure(g, &mut self.offsets, n)?;
        ensure(g, &mut self.status, k::CO_WORDS)
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
    cpu::pet::check_times(singles, "singles to merge")?;
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

// ---------------------------------------------------------------------------------------
// Backend API
// ---------------------------------------------------------------------------------------

impl Backend {
    /// Converts raw frames into accepted singles (input order) with statistics.
    pub fn pet_convert(
        &self,
        frames: &[DataFrameV2],
        scanner: &Scanner,
    ) -> Result<(Vec<Single>, ConvertStats)> {
        check_u32_len("frames", frames.len())?;
        match self.gpu() {
            None => Ok(oracle::convert(
                frames,
                &scanner.params,
                &scanner.position,
                &scanner.energy,
            )),
            Some(g) => {
                let n = frames.len();
                let ds = g.pet_scanner(scanner)?;
                let bytes: &[u8] = bytemuck::cast_slice(frames);
                let d_frames = if n == 0 {
                    g.zeros::<u8>(16)?
                } else {
                    g.upload(bytes)?
                };
                let mut out = g.zeros::<u64>(2 * n.max(1))?;
                let mut stats = g.zeros::<u32>(k::STAT_WORDS)?;
                g.pet_convert_device(&d_frames, n, &ds, &mut out, 0, &mut stats)?;
                let st = g.download(&stats)?;
                let accepted = st[k::STAT_ACCEPTED] as usize;
                let words = download_view(g, &out.slice(0..2 * accepted))?;
                Ok((singles_of(&words), stats_from_words(&st, n)))
            }
        }
    }

    /// Stable sort by time (ties keep input order). Non-finite times are a typed error.
    pub fn pet_sort(&self, singles: &[Single]) -> Result<Vec<Single>> {
        cpu::pet::check_times(singles, "singles to sort")?;
        check_u32_len("singles to sort", singles.len())?;
        match self.gpu() {
            None => oracle::sort(singles),
            Some(g) => {
                let n = singles.len();
                let mut a = g.upload_singles(singles)?;
                let mut b = g.zeros::<u64>(a.len())?;
                let in_b = g.pet_sort_device(&mut a, &mut b, 0, n)?;
                let words = download_view(g, &(if in_b { b } else { a }).slice(0..2 * n))?;
                Ok(singles_of(&words))
            }
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
            None => oracle::sort(singles),
            Some(g) => {
                let n = singles.len();
                let mut a = g.upload_singles(singles)?;
                let mut b = g.zeros::<u64>(a.len())?;
                let in_b = g.pet_merge_runs_device(&mut a, &mut b, 0, n, starts)?;
                let words = download_view(g, &(if in_b { b } else { a }).slice(0..2 * n))?;
                Ok(singles_of(&words))
            }
        }
    }

    /// Coincidences of singles sorted by time (the window rule of issue 4, see
    /// [`cpu::pet::coincide`]). Unsorted input is a typed error naming the first single out of
    /// order.
    pub fn pet_coincide(&self, singles: &[Single], c: &CoincideConfig) -> Result<Vec<Coincidence>> {
        c.validate()?;
        cpu::pet::check_sorted(singles)?;
        match self.gpu() {
            None => oracle::coincide(singles, c),
            Some(g) => {
                let s = g.upload_singles(singles)?;
                Ok(
                    g.pet_coincide_device(&s, 0, singles.len(), c, f64::INFINITY)?
                        .0,
                )
            }
        }
    }
}

fn stats_from_words(st: &[u32], n: usize) -> ConvertStats {
    ConvertStats {
        frames: n as u64,
        accepted: st[k::STAT_ACCEPTED] as u64,
        rejected_energy: st[k::STAT_REJECTED_ENERGY] as u64,
        clamped: st[k::STAT_CLAMPED] as u64,
        bad_address: st[k::STAT_BAD_ADDRESS] as u64,
        first_bad_address: (st[k::STAT_FIRST_BAD] != u32::MAX)
            .then_some(st[k::STAT_FIRST_BAD] as u64),
    }
}

// ---------------------------------------------------------------------------------------
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
struct Watermark {
    last: Vec<Option<u64>>,
}

impl Watermark {
    fn new(bdms: u32) -> Self {
        Self {
            last: vec![None; bdms as usize],
        }
    }
    /// Reads a chunk's frames (raw bytes; the first is frame `offset` of the stream); checks
    /// each BDM's times never decrease.
    fn update(&mut self, bytes: &[u8], offset: u64) -> Result<()> {
        for (i, rec) in bytes.as_chunks::<16>().0.iter().enumerate() {
            let b = rec[1] as usize;
            if b >= self.last.len() {
                continue; // a bad address: counted by the conversion
            }
            let t = u64::from_be_bytes([
                rec[2], rec[3], rec[4], rec[5], rec[6], rec[7], rec[8], rec[9],
            ]);
            if let Some(prev) = self.last[b] {
                if t < prev {
                    return Err(invalid(
                        "frame stream",
                        format!(
                            "frame {} of BDM {b} has time {t}, before the BDM's previous frame \
                             (time {prev}); each BDM's stream must be in time order",
                            offset + i as u64
                        ),
                    ));
                }
            }
            self.last[b] = Some(t);
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

fn read_chunk(r: &mut impl Read, buf: &mut [u8]) -> Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(m) => got += m,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(invalid("frame stream", e.to_string())),
        }
    }
    if !got.is_multiple_of(16) {
        return Err(invalid(
            "frame stream",
            "ends inside a frame (length not a multiple of 16 bytes)",
        ));
    }
    Ok(got / 16)
}

impl Backend {
    /// The whole chain over a frame stream, chunk by chunk, with bounded memory: convert,
    /// sort, merge with the singles pending from earlier chunks, pair every window that no
    /// later frame can reach (the watermark: the smallest latest time over all BDMs), carry
    /// the rest. `sink` receives the pairs in time order; the result equals
    /// convert → sort → coincide over the whole stream. On CUDA, the next chunk's
    /// host-to-device copy (pinned memory, a second stream) overlaps the current chunk's
    /// kernels.
    pub fn pet_run_stream(
        &self,
        input: &mut impl Read,
        scanner: &Scanner,
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
        let mut wm = Watermark::new(scanner.params.bdm_count());
        match self.gpu() {
            None => {
                let mut pending: Vec<Single> = Vec::new();
                let mut buf = vec![0u8; 16 * sc.chunk_frames];
                let mut offset = 0u64;
                loop {
                    let nf = read_chunk(input, &mut buf)?;
                    wm.update(&buf[..16 * nf], offset)?;
                    let frames = frames_from_bytes(&buf[..16 * nf])?;
                    let last = nf < sc.chunk_frames;
                    let (singles, st) = oracle::convert(
                        &frames,
                        &scanner.params,
                        &scanner.position,
                        &scanner.energy,
                    );
                    stats.convert.add(&st, offset);
                    offset += nf as u64;
                    let sorted = oracle::sort(&singles)?;
                    let merged = oracle::merge(&pending, &sorted);
                    let w = if last { f64::INFINITY } else { wm.value() };
                    let (pairs, resume) = oracle::coincide_until(&merged, c, w)?;
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
            Some(g) => g.pet_run_stream_gpu(
                input,
                scanner,
                c,
                sc,
                &mut wm,
                &mut stats,
                &mut sink,
                &mut progress,
            ),
        }
    }
}

fn pending_overflow(needed: usize, capacity: usize) -> Error {
    Error::CapacityExceeded {
        what: "pending singles between chunks (a BDM that stops reporting holds the watermark)",
        needed: needed as u64,
        capacity: capacity as u64,
    }
}

impl GpuContext {
    #[allow(clippy::too_many_arguments)]
    fn pet_run_stream_gpu(
        &self,
        input: &mut impl Read,
        scanner: &Scanner,
        c: &CoincideConfig,
        sc: &StreamConfig,
        wm: &mut Watermark,
        stats: &mut StreamStats,
        sink: &mut impl FnMut(&[Coincidence]) -> Result<()>,
        progress: &mut impl FnMut(&StreamStats),
    ) -> Result<StreamStats> {
        let ds = self.pet_scanner(scanner)?;
        let cap = sc.chunk_frames + sc.pending_capacity;
        let copy = self
            .context()
            .new_stream()
            .ctx("creating the copy stream")?;
        let fbytes = 16 * sc.chunk_frames;
        // SAFETY: pinned buffers are written by `read_chunk` before any copy reads them
        // (flags 0: cached host memory, since the host also reads the frames).
        let mut pinned = [
            unsafe { self.context().alloc_pinned_with_flags::<u8>(fbytes, 0) }
                .ctx("allocating pinned memory")?,
            unsafe { self.context().alloc_pinned_with_flags::<u8>(fbytes, 0) }
                .ctx("allocating pinned memory")?,
        ];
        for pb in pinned.iter_mut() {
            let ptr = pb.as_mut_ptr().ctx("mapping pinned memory")?;
            // SAFETY: `ptr` addresses `fbytes` bytes of this allocation; zeroing them through
            // the raw pointer initialises the memory before any slice of it is made.
            unsafe { std::ptr::write_bytes(ptr, 0, fbytes) };
        }
        let mut dframes = [
            copy.alloc_zeros::<u8>(fbytes)
                .ctx("allocating frame buffers")?,
            copy.alloc_zeros::<u8>(fbytes)
                .ctx("allocating frame buffers")?,
        ];
        let mut a = self.zeros::<u64>(2 * cap)?;
        let mut b = self.zeros::<u64>(2 * cap)?;
        let mut d_stats = self.zeros::<u32>(k::STAT_WORDS)?;
        let mut np = 0usize;
        let mut offset = 0u64;
        // Chunk k sits in slot k % 2; its frame count, whether it is the last, and the
        // watermark after it are computed when it is read (the host reads chunk k + 1 while
        // the GPU works on chunk k).
        let mut counts = [0usize; 2];
        let mut lasts = [false; 2];
        let mut marks = [f64::NEG_INFINITY; 2];
        let mut read_offset = 0u64;
        let mut fill = |slot: usize,
                        pinned: &mut [cudarc::driver::PinnedHostSlice<u8>; 2],
                        dframes: &mut [CudaSlice<u8>; 2]|
         -> Result<(usize, bool, f64)> {
            let buf = pinned[slot].as_mut_slice().ctx("mapping pinned memory")?;
            let nf = read_chunk(input, buf)?;
            wm.update(&buf[..16 * nf], read_offset)?;
            read_offset += nf as u64;
            if nf > 0 {
                // Asynchronous copy from pinned memory on the copy stream: overlaps the
                // compute stream's kernels (the whole buffer; bytes past the chunk unused).
                copy.memcpy_htod(&pinned[slot], &mut dframes[slot])
                    .ctx("copying frames to the device")?;
            }
            let last = nf < sc.chunk_frames;
            Ok((nf, last, if last { f64::INFINITY } else { wm.value() }))
        };
        (counts[0], lasts[0], marks[0]) = fill(0, &mut pinned, &mut dframes)?;
        let mut scratch = CoincideScratch::default();
        let mut slot = 0;
        loop {
            let nf = counts[slot];
            let last = lasts[slot];
            let w = marks[slot];
            // Convert into a[np..np + nf] (the compute stream waits for the copy: cudarc
            // orders uses of a buffer across streams with events).
            self.pet_convert_device(&dframes[slot], nf, &ds, &mut a, np, &mut d_stats)?;
            // Start the next chunk's read and copy while the kernels run.
            if !last {
                (counts[1 - slot], lasts[1 - slot], marks[1 - slot]) =
                    fill(1 - slot, &mut pinned, &mut dframes)?;
            }
            let st = self.download(&d_stats)?;
            let cst = stats_from_words(&st, nf);
            stats.convert.add(&cst, offset);
            offset += nf as u64;
            let nc = cst.accepted as usize;
            // Sort the chunk's singles in place (scratch: b), then merge with the pending run.
            if self.pet_sort_device(&mut a, &mut b, np, nc)? {
                let src = b.slice(2 * np..2 * (np + nc));
                let mut dst = a.slice_mut(2 * np..2 * (np + nc));
                self.stream()
                    .memcpy_dtod(&src, &mut dst)
                    .ctx("copying sorted singles")?;
            }
            let total = np + nc;
            let merged_in_b = if np > 0 && nc > 0 {
                self.pet_merge_runs_device(&mut a, &mut b, 0, total, &[0, np as u32, total as u32])?
            } else {
                false
            };
            let (merged, other) = if merged_in_b {
                (&mut b, &mut a)
            } else {
                (&mut a, &mut b)
            };
            let (pairs, resume) =
                self.pet_coincide_device_with(&mut scratch, merged, 0, total, c, w)?;
            let rest = total - resume;
            if rest > sc.pending_capacity {
                return Err(pending_overflow(rest, sc.pending_capacity));
            }
            if rest > 0 {
                let src = merged.slice(2 * resume..2 * total);
                let mut dst = other.slice_mut(0..2 * rest);
                self.stream()
                    .memcpy_dtod(&src, &mut dst)
                    .ctx("carrying pending singles")?;
                if merged_in_b {
                    // pending now in a (other == a)
                } else {
                    std::mem::swap(&mut a, &mut b);
                }
            }
            np = rest;
            stats.max_pending = stats.max_pending.max(rest as u64);
            stats.pairs += pairs.len() as u64;
            stats.chunks += 1;
            sink(&pairs)?;
            progress(stats);
            if last {
                return Ok(*stats);
            }
            slot = 1 - slot;
        }
    }
}
