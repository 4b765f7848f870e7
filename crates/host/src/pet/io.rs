//! PET file formats: the scanner description (TOML + tables), frames, singles and pairs
//! (CSV, or raw little-endian records for `.bin`).

use std::io::{Read, Write};
use std::path::Path;

use detkit_gpu::pet::{Coincidence, DataFrameV2, Policy, ScannerParams, Single};

use super::*;
use crate::csvio::{for_each_record, format_error};
use crate::error::{invalid, Result};

impl Scanner {
    /// A scanner from parameters and tables, checked: table sizes, every position entry
    /// below the crystals per DU, every correction factor finite.
    pub fn new(
        params: ScannerParams,
        time_window: f64,
        position: impl Into<std::sync::Arc<[u8]>>,
        energy: impl Into<std::sync::Arc<[f32]>>,
    ) -> Result<Self> {
        let (position, energy) = (position.into(), energy.into());
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
        let energy: Vec<f32> = bytes
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

#[derive(serde::Deserialize)]
struct SingleRow {
    crystal: u32,
    energy: f32,
    time: f64,
}

/// Reads singles from CSV with the columns `crystal,energy,time` (found by name; `file` names
/// the input in errors, which are `FILE:LINE` with the column). Energies and times must be
/// finite.
pub fn read_singles_csv(r: impl Read, file: &str) -> Result<Vec<Single>> {
    let mut out = Vec::new();
    for_each_record(
        r,
        file,
        &["crystal", "energy", "time"],
        |line, s: SingleRow| {
            if !s.energy.is_finite() {
                return Err(format_error(
                    file,
                    line,
                    Some("energy"),
                    format!("{} is not a finite energy", s.energy),
                ));
            }
            if !s.time.is_finite() {
                return Err(format_error(
                    file,
                    line,
                    Some("time"),
                    format!("{} is not a finite time", s.time),
                ));
            }
            out.push(Single {
                crystal: s.crystal,
                energy: s.energy,
                time: s.time,
            });
            Ok(())
        },
    )?;
    Ok(out)
}

/// Checks that binary singles have finite energies and times, naming the first bad record.
fn check_finite(singles: &[Single], path: &Path) -> Result<()> {
    match singles
        .iter()
        .position(|s| !(s.energy.is_finite() && s.time.is_finite()))
    {
        None => Ok(()),
        Some(i) => Err(invalid(
            "singles file",
            format!(
                "{}: record {i} (byte {}): energy {} / time {} not finite",
                path.display(),
                16 * i,
                singles[i].energy,
                singles[i].time
            ),
        )),
    }
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
        let singles: Vec<Single> = pod_vec(&bytes);
        check_finite(&singles, path)?;
        Ok(singles)
    } else {
        let f = std::fs::File::open(path).map_err(|e| io_err("singles file", path, e))?;
        read_singles_csv(std::io::BufReader::new(f), &path.display().to_string())
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
    #[derive(serde::Deserialize)]
    struct Row {
        crystal_a: u32,
        energy_a: f32,
        time_a: f64,
        crystal_b: u32,
        energy_b: f32,
        time_b: f64,
    }
    let f = std::fs::File::open(path).map_err(|e| io_err("pairs file", path, e))?;
    let file = path.display().to_string();
    let cols: Vec<&str> = PAIRS_HEADER.split(',').collect();
    let mut out = Vec::new();
    for_each_record(std::io::BufReader::new(f), &file, &cols, |_, r: Row| {
        let s = |crystal, energy, time| Single {
            crystal,
            energy,
            time,
        };
        out.push(Coincidence {
            a: s(r.crystal_a, r.energy_a, r.time_a),
            b: s(r.crystal_b, r.energy_b, r.time_b),
        });
        Ok(())
    })?;
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

pub(crate) fn read_chunk(r: &mut impl Read, buf: &mut [u8]) -> Result<usize> {
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
