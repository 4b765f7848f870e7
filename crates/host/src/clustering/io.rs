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
/// arrays `module`, `x`, `y`, `adc`, each `n` little-endian `u16`: exactly `12 + 8 n` bytes.
/// The count is checked against what the reader holds before anything of its size is
/// allocated (memory grows with the bytes actually read); a short or long file is an error
/// giving both sizes.
pub fn read_binary(r: impl Read) -> Result<Digis> {
    let mut bytes = Vec::new();
    let mut r = r;
    // 12 header bytes, then at most 8 * 2^32 data bytes and one more (to see a long file).
    r.by_ref()
        .take(12 + 8 * u32::MAX as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| invalid("binary digis", format!("reading: {e}")))?;
    read_binary_bytes(&bytes, "binary digis")
}

/// [`read_binary`] of a file's bytes (`file` names it in errors).
pub fn read_binary_bytes(bytes: &[u8], file: &str) -> Result<Digis> {
    let n = binary_count(bytes, file)?;
    let mut d = Digis {
        module: vec![0; n],
        x: vec![0; n],
        y: vec![0; n],
        adc: vec![0; n],
    };
    read_binary_bytes_into(bytes, file, [&mut d.module, &mut d.x, &mut d.y, &mut d.adc])?;
    Ok(d)
}

/// The digi count of a binary file's bytes, after the checks of [`read_binary_bytes`]
/// (header, magic, and a size of exactly `12 + 8 n` bytes), with its errors.
pub fn binary_count(bytes: &[u8], file: &str) -> Result<usize> {
    let err = |detail: String| crate::csvio::format_error(file, 0, None, detail);
    if bytes.len() < 12 {
        return Err(err(format!(
            "binary digis: the header (magic DKDIGI01 and a u32 count) needs 12 bytes, the file has {}",
            bytes.len()
        )));
    }
    if &bytes[..8] != BINARY_MAGIC {
        return Err(err(format!(
            "not a detkit binary digi file: magic {:?}, expected \"DKDIGI01\"",
            String::from_utf8_lossy(&bytes[..8])
        )));
    }
    let n = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as u64;
    let expected = 12 + 8 * n;
    if bytes.len() as u64 != expected {
        return Err(err(format!(
            "binary digis: the header counts {n} digis, which take 12 + 8 x {n} = {expected} bytes; the file has {} ({})",
            bytes.len(),
            if (bytes.len() as u64) < expected { "truncated" } else { "trailing bytes" }
        )));
    }
    Ok(n as usize)
}

/// [`read_binary_bytes`] into the caller's arrays `[module, x, y, adc]`, each of
/// [`binary_count`] elements (another length is an error): a batch of files decoded straight
/// into one set of arrays, without a vector per file.
pub fn read_binary_bytes_into(bytes: &[u8], file: &str, out: [&mut [u16]; 4]) -> Result<()> {
    let n = binary_count(bytes, file)?;
    for (k, dst) in out.into_iter().enumerate() {
        if dst.len() != n {
            return Err(invalid(
                "binary digis",
                format!("{file}: an output array of {} for {n} digis", dst.len()),
            ));
        }
        let src = bytes[12 + 2 * n * k..12 + 2 * n * (k + 1)]
            .as_chunks::<2>()
            .0;
        for (d, c) in dst.iter_mut().zip(src) {
            *d = u16::from_le_bytes(*c);
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_binary_count_must_agree_with_the_length() {
        let mut d = Digis::default();
        for i in 0..4 {
            d.push(0, i, i, 5000);
        }
        let mut b = Vec::new();
        write_binary(&mut b, &d).unwrap();
        assert_eq!(read_binary(&b[..]).unwrap(), d);
        let mut two = b.clone();
        two[8] = 2;
        let e = read_binary_bytes(&two, "d.bin").unwrap_err().to_string();
        assert!(e.starts_with("d.bin: "), "{e}");
        assert!(
            e.contains("28 bytes; the file has 44 (trailing bytes)"),
            "{e}"
        );
        let mut huge = b[..14].to_vec();
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = read_binary(&huge[..]).unwrap_err().to_string();
        assert!(
            e.contains("34359738372 bytes; the file has 14 (truncated)"),
            "{e}"
        );
        let e = read_binary(&b"DKDIGI02\0\0\0\0"[..])
            .unwrap_err()
            .to_string();
        assert!(e.contains("expected \"DKDIGI01\""), "{e}");
    }

    #[test]
    fn a_file_decoded_into_slices_equals_the_vectors_read() {
        let mut d = Digis::default();
        for i in 0..37u16 {
            d.push(i % 5, 3 * i, 7 * i + 1, 1000 + i);
        }
        let mut b = Vec::new();
        write_binary(&mut b, &d).unwrap();
        assert_eq!(binary_count(&b, "d.bin").unwrap(), 37);
        // Into a batch's arrays, at an offset: the rest is left alone.
        let mut cols = [[9u16; 40], [9; 40], [9; 40], [9; 40]];
        let [m, x, y, a] = &mut cols;
        read_binary_bytes_into(
            &b,
            "d.bin",
            [&mut m[2..39], &mut x[2..39], &mut y[2..39], &mut a[2..39]],
        )
        .unwrap();
        assert_eq!(&cols[0][2..39], &d.module[..]);
        assert_eq!(&cols[1][2..39], &d.x[..]);
        assert_eq!(&cols[2][2..39], &d.y[..]);
        assert_eq!(&cols[3][2..39], &d.adc[..]);
        assert!(cols.iter().all(|c| c[..2] == [9, 9] && c[39] == 9));
        let mut short = [0u16; 36];
        let mut ok = [[0u16; 37]; 3];
        let [o1, o2, o3] = &mut ok;
        let e = read_binary_bytes_into(&b, "d.bin", [&mut short, o1, o2, o3])
            .unwrap_err()
            .to_string();
        assert!(e.contains("an output array of 36 for 37 digis"), "{e}");
        let e = binary_count(&b[..20], "d.bin").unwrap_err().to_string();
        assert!(e.starts_with("d.bin: ") && e.contains("(truncated)"), "{e}");
    }
}
