//! Clustering file formats: digis as CSV (`module,x,y,adc`) or binary (`DKDIGI01`), clusters
//! as CSV (`module,x,y,adc,cluster`) or binary (`DKCLUS01`).

use std::io::{Read, Write};

use super::Digis;
use crate::csvio::for_each_record;
use crate::error::{invalid, Result};

/// Magic of the binary digi format.
pub const BINARY_MAGIC: &[u8; 8] = b"DKDIGI01";

#[derive(serde::Deserialize)]
struct Row {
    module: u16,
    x: u16,
    y: u16,
    adc: u16,
}

/// Reads digis from CSV with the columns `module,x,y,adc` (one digi a row, found by name;
/// other columns ignored); `file` names the input in errors, which are `FILE:LINE` with the
/// column (see [`crate::csvio`]). A header with no rows is zero digis.
pub fn read_csv(input: impl Read, file: &str) -> Result<Digis> {
    Ok(read_csv_with_lines(input, file)?.0)
}

/// As [`read_csv`], with the 1-based file line of every digi (to place the errors that name a
/// digi by its index, [`crate::Error::InvalidItem`], in the file).
pub fn read_csv_with_lines(input: impl Read, file: &str) -> Result<(Digis, Vec<u64>)> {
    let mut d = Digis::default();
    let mut lines = Vec::new();
    for_each_record(input, file, &["module", "x", "y", "adc"], |line, r: Row| {
        d.push(r.module, r.x, r.y, r.adc);
        lines.push(line);
        Ok(())
    })?;
    Ok((d, lines))
}

/// Writes digis and their cluster indices as CSV with header `module,x,y,adc,cluster`.
pub fn write_csv(mut w: impl Write, digis: &Digis, clus: &[i32]) -> std::io::Result<()> {
    let mut out = String::with_capacity(digis.len() * 24 + 32);
    out.push_str("module,x,y,adc,cluster\n");
    for i in 0..digis.len() {
        use std::fmt::Write as _;
        let _ = writeln!(
            out,
            "{},{},{},{},{}",
            digis.module[i], digis.x[i], digis.y[i], digis.adc[i], clus[i]
        );
    }
    w.write_all(out.as_bytes())
}

/// Reads the binary format: magic `DKDIGI01`, `u32` little-endian digi count `n`, then the
/// arrays `module`, `x`, `y`, `adc`, each `n` little-endian `u16`.
pub fn read_binary(mut r: impl Read) -> Result<Digis> {
    let io = |e: std::io::Error| invalid("input", format!("reading binary digis: {e}"));
    let mut head = [0u8; 12];
    r.read_exact(&mut head).map_err(io)?;
    if &head[..8] != BINARY_MAGIC {
        return Err(invalid(
            "input",
            "not a detkit binary digi file (magic DKDIGI01)",
        ));
    }
    let n = u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize;
    let mut arr = || -> Result<Vec<u16>> {
        let mut b = vec![0u8; 2 * n];
        r.read_exact(&mut b).map_err(io)?;
        Ok(b.as_chunks::<2>()
            .0
            .iter()
            .map(|c| u16::from_le_bytes(*c))
            .collect())
    };
    Ok(Digis {
        module: arr()?,
        x: arr()?,
        y: arr()?,
        adc: arr()?,
    })
}

/// Writes [`read_binary`]'s format.
pub fn write_binary(mut w: impl Write, digis: &Digis) -> std::io::Result<()> {
    w.write_all(BINARY_MAGIC)?;
    w.write_all(&(digis.len() as u32).to_le_bytes())?;
    for a in [&digis.module, &digis.x, &digis.y, &digis.adc] {
        let bytes: Vec<u8> = a.iter().flat_map(|v| v.to_le_bytes()).collect();
        w.write_all(&bytes)?;
    }
    Ok(())
}

/// Binary cluster output: magic `DKCLUS01`, `u32` count, then `n` little-endian `i32`.
pub fn write_binary_clusters(mut w: impl Write, clus: &[i32]) -> std::io::Result<()> {
    w.write_all(b"DKCLUS01")?;
    w.write_all(&(clus.len() as u32).to_le_bytes())?;
    let bytes: Vec<u8> = clus.iter().flat_map(|v| v.to_le_bytes()).collect();
    w.write_all(&bytes)
}
