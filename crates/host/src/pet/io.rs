//! PET file formats: the scanner description (TOML + tables), frames, singles and pairs
//! (CSV, or for `.bin` a 16-byte header, [`SINGLES_MAGIC`] or [`PAIRS_MAGIC`] and a `u64`
//! record count, then little-endian records). Raw frames stay the scanner's headerless
//! stream of 16-byte `DataFrameV2` records.

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
        let t: ScannerToml = toml::from_str(&text)
            .map_err(|e| io_err("scanner file", path, crate::csvio::toml_message(&e, &text)))?;
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
        let want = params.energy_entries().saturating_mul(4);
        if bytes.len() as u64 != want {
            return Err(io_err(
                "energy table",
                &e_path,
                format!(
                    "{} bytes; the scanner needs {want} ({} f32 factors: BDMs x DUs x crystals x 1000)",
                    bytes.len(),
                    params.energy_entries()
                ),
            ));
        }
        let energy: Vec<f32> = bytes
            .as_chunks::<4>()
            .0
            .iter()
            .map(|c| f32::from_le_bytes(*c))
            .collect();
        // Table errors name the table's file.
        Self::new(params, t.time_window, position, energy).map_err(|e| match e {
            Error::InvalidInput { what, detail } if what == "position table" => {
                io_err(what, &pos_path, detail)
            }
            Error::InvalidInput { what, detail } if what == "energy table" => {
                io_err(what, &e_path, detail)
            }
            other => other,
        })
    }

    /// The files a scanner description reads: the TOML file and the two tables it names
    /// (what a command must not overwrite).
    pub fn files_of(path: &Path) -> Result<Vec<std::path::PathBuf>> {
        let text = std::fs::read_to_string(path).map_err(|e| io_err("scanner file", path, e))?;
        let t: ScannerToml = toml::from_str(&text)
            .map_err(|e| io_err("scanner file", path, crate::csvio::toml_message(&e, &text)))?;
        let dir = path.parent().unwrap_or(Path::new("."));
        Ok(vec![
            path.to_path_buf(),
            dir.join(&t.position_table),
            dir.join(&t.energy_table),
        ])
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

/// Magic of detkit's binary singles files (`.bin`): 8 bytes, the last two the version.
pub const SINGLES_MAGIC: &[u8; 8] = b"DKSNGL01";
/// Magic of detkit's binary pairs files (`.bin`).
pub const PAIRS_MAGIC: &[u8; 8] = b"DKPAIR01";
/// Bytes before the first record of a binary singles or pairs file: the magic and a `u64`
/// little-endian record count (16, so the records stay 16-byte aligned in the file).
pub const BIN_HEADER_BYTES: usize = 16;
/// The record count of a binary pairs file written where it could not be patched at the
/// end (standard output, a FIFO): the records run to the end of the file.
pub const COUNT_TO_END: u64 = u64::MAX;

/// The 16-byte header of a binary singles (`SINGLES_MAGIC`) or pairs (`PAIRS_MAGIC`) file.
pub fn bin_header(magic: &[u8; 8], count: u64) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[..8].copy_from_slice(magic);
    h[8..].copy_from_slice(&count.to_le_bytes());
    h
}

/// The records of a binary singles or pairs file's bytes, after checking the header (magic,
/// count) against the file's length. Every error names the file and gives the expected and
/// actual sizes.
fn bin_records<'a>(
    bytes: &'a [u8],
    magic: &[u8; 8],
    record: usize,
    what: &'static str,
    path: &Path,
) -> Result<&'a [u8]> {
    let known: [(&[u8; 8], &str); 4] = [
        (SINGLES_MAGIC, "a binary singles file"),
        (PAIRS_MAGIC, "a binary pairs file"),
        (crate::clustering::BINARY_MAGIC, "a binary digi file"),
        (b"DKCLUS01", "a binary cluster file"),
    ];
    let kind = if magic == SINGLES_MAGIC {
        "singles"
    } else {
        "pairs"
    };
    if bytes.len() < BIN_HEADER_BYTES || &bytes[..8] != magic {
        if let Some((m, name)) = known.iter().find(|(m, _)| bytes.starts_with(&m[..])) {
            return Err(io_err(
                what,
                path,
                format!(
                    "this is {name} (magic {}), not a binary {kind} file (magic {})",
                    String::from_utf8_lossy(&m[..]),
                    String::from_utf8_lossy(magic)
                ),
            ));
        }
        return Err(io_err(
            what,
            path,
            format!(
                "no binary {kind} header (magic {} and a u64 record count, 16 bytes; the file \
                 has {} bytes). A CSV file needs a name not ending in `.bin`; a headerless file \
                 of {record}-byte records from detkit 0.1 converts with: python3 -c \"import numpy \
                 as np, detkit; detkit.write_{kind}('NEW.bin', np.fromfile('OLD.bin', \
                 detkit.{}))\"",
                String::from_utf8_lossy(magic),
                bytes.len(),
                if kind == "singles" {
                    "SINGLE_DTYPE"
                } else {
                    "COINCIDENCE_DTYPE"
                }
            ),
        ));
    }
    let count = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    let body = &bytes[BIN_HEADER_BYTES..];
    if count == COUNT_TO_END {
        if !body.len().is_multiple_of(record) {
            return Err(io_err(
                what,
                path,
                format!(
                    "{} bytes of records (count: to the end of the file) are not a whole number \
                     of {record}-byte records: expected {} or {} bytes in all, the file has {}",
                    body.len(),
                    BIN_HEADER_BYTES + body.len() / record * record,
                    BIN_HEADER_BYTES + (body.len() / record + 1) * record,
                    bytes.len()
                ),
            ));
        }
        return Ok(body);
    }
    let expected = (count as u128) * record as u128 + BIN_HEADER_BYTES as u128;
    if bytes.len() as u128 != expected {
        return Err(io_err(
            what,
            path,
            format!(
                "the header counts {count} records, which take 16 + {record} x {count} = \
                 {expected} bytes; the file has {} ({})",
                bytes.len(),
                if (bytes.len() as u128) < expected {
                    "truncated"
                } else {
                    "trailing bytes"
                }
            ),
        ));
    }
    Ok(body)
}

/// Writes binary singles: the header (`SINGLES_MAGIC`, count) and the 16-byte records.
pub fn write_singles_bin(w: &mut impl Write, singles: &[Single]) -> std::io::Result<()> {
    w.write_all(&bin_header(SINGLES_MAGIC, singles.len() as u64))?;
    w.write_all(bytemuck::cast_slice(singles))
}

/// Writes binary pairs: the header (`PAIRS_MAGIC`, count) and the 32-byte records.
pub fn write_pairs_bin(w: &mut impl Write, pairs: &[Coincidence]) -> std::io::Result<()> {
    w.write_all(&bin_header(PAIRS_MAGIC, pairs.len() as u64))?;
    w.write_all(bytemuck::cast_slice(pairs))
}

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
                "{} bytes, not a whole number of 16-byte frames ({} frames and {} bytes over; \
                 expected {} or {} bytes)",
                bytes.len(),
                bytes.len() / 16,
                bytes.len() % 16,
                bytes.len() / 16 * 16,
                bytes.len() / 16 * 16 + 16
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

/// Reads singles from a file: `.bin` = the header (`SINGLES_MAGIC`, `u64` count) and
/// 16-byte little-endian `Single` records, else CSV.
pub fn read_singles(path: &Path) -> Result<Vec<Single>> {
    if is_binary(path) {
        let bytes = std::fs::read(path).map_err(|e| io_err("singles file", path, e))?;
        let body = bin_records(&bytes, SINGLES_MAGIC, 16, "singles file", path)?;
        let singles: Vec<Single> = pod_vec(body);
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
        write_singles_bin(&mut w, singles)
    } else {
        write_singles_csv(&mut w, singles)
    };
    r.and_then(|_| w.flush())
        .map_err(|e| io_err("singles file", path, e))
}

/// A pairs writer (`.bin`: the header and 32-byte `Coincidence` records, the count written
/// by [`PairsWriter::finish`]; else CSV with header).
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
        if binary {
            w.write_all(&bin_header(PAIRS_MAGIC, COUNT_TO_END))
        } else {
            writeln!(w, "{PAIRS_HEADER}")
        }
        .map_err(|e| io_err("pairs file", path, e))?;
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
    /// Flushes (and writes the count into a binary file's header).
    pub fn finish(mut self) -> Result<u64> {
        use std::io::{Seek, SeekFrom};
        let (binary, count) = (self.binary, self.count);
        let path = self.path.clone();
        let r = self.w.flush().and_then(|_| {
            if binary {
                let f = self.w.get_mut();
                f.seek(SeekFrom::Start(8))?;
                f.write_all(&count.to_le_bytes())?;
            }
            Ok(())
        });
        r.map_err(|e| io_err("pairs file", &path, e))?;
        Ok(count)
    }
}

/// Reads pairs (`.bin`: the header, `PAIRS_MAGIC` and count, and 32-byte records; else CSV
/// with the pairs header).
pub fn read_pairs(path: &Path) -> Result<Vec<Coincidence>> {
    if is_binary(path) {
        let bytes = std::fs::read(path).map_err(|e| io_err("pairs file", path, e))?;
        let body = bin_records(&bytes, PAIRS_MAGIC, 32, "pairs file", path)?;
        return Ok(pod_vec(body));
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
            format!(
                "ends inside a frame: its last {} bytes are not a whole 16-byte frame (the \
                 stream's length is not a multiple of 16 bytes)",
                got % 16
            ),
        ));
    }
    Ok(got / 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn singles(n: usize) -> Vec<Single> {
        (0..n)
            .map(|i| Single {
                crystal: i as u32,
                energy: 5110.0,
                time: i as f64 * 3.0,
            })
            .collect()
    }

    #[test]
    fn binary_singles_and_pairs_round_trip_with_their_header() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.bin");
        let s = singles(5);
        write_singles(&p, &s).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[..16], &bin_header(SINGLES_MAGIC, 5));
        assert_eq!(bytes.len(), 16 + 16 * 5);
        assert_eq!(read_singles(&p).unwrap(), s);
        let q = d.path().join("p.bin");
        let pairs: Vec<Coincidence> = (0..3)
            .map(|i| Coincidence {
                a: s[i],
                b: s[i + 1],
            })
            .collect();
        let mut w = PairsWriter::create(&q).unwrap();
        w.write(&pairs[..1]).unwrap();
        w.write(&pairs[1..]).unwrap();
        assert_eq!(w.finish().unwrap(), 3);
        assert_eq!(
            &std::fs::read(&q).unwrap()[..16],
            &bin_header(PAIRS_MAGIC, 3)
        );
        assert_eq!(read_pairs(&q).unwrap(), pairs);
        // Records to the end of the file (a stream that could not be patched).
        let mut streamed = bin_header(PAIRS_MAGIC, COUNT_TO_END).to_vec();
        streamed.extend_from_slice(bytemuck::cast_slice(&pairs));
        std::fs::write(&q, &streamed).unwrap();
        assert_eq!(read_pairs(&q).unwrap(), pairs);
        streamed.push(0);
        std::fs::write(&q, &streamed).unwrap();
        assert!(read_pairs(&q).is_err());
    }

    #[test]
    fn binary_files_are_checked_against_their_length_and_magic() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("s.bin");
        let s = singles(4);
        let mut w = Vec::new();
        write_singles_bin(&mut w, &s).unwrap();
        let err = |bytes: &[u8]| {
            std::fs::write(&p, bytes).unwrap();
            read_singles(&p).unwrap_err().to_string()
        };
        let e = err(&w[..w.len() - 1]);
        assert!(
            e.contains("16 + 16 x 4 = 80 bytes; the file has 79 (truncated)"),
            "{e}"
        );
        let mut long = w.clone();
        long.extend_from_slice(&[0; 16]);
        assert!(err(&long).contains("the file has 96 (trailing bytes)"));
        let e = err(&w[16..]);
        assert!(
            e.contains("no binary singles header") && e.contains("write_singles"),
            "{e}"
        );
        let mut pairs = w.clone();
        pairs[..8].copy_from_slice(PAIRS_MAGIC);
        assert!(err(&pairs).contains("this is a binary pairs file"));
        assert!(err(b"DKDIGI01\0\0\0\0").contains("a binary digi file"));
        let e = frames_from_bytes(&[0; 20]).unwrap_err().to_string();
        assert!(e.contains("expected 16 or 32 bytes"), "{e}");
    }
}
