//! Seeding file formats. Input: spacepoint CSV, columns `x,y,z` (mm, global frame) and,
//! optionally, `var_r`, `var_z` (mm², the names of ACTS's spacepoint CSV), found by name in
//! any order; other columns are ignored. Errors name `FILE:LINE` and the column (see
//! [`crate::csvio`]). Output: seeds (`bottom,middle,top,weight,z_vertex`), track parameters
//! (`seed,loc0,loc1,phi,theta,qop`), and for generated events the spacepoints
//! (`x,y,z,var_r,var_z`) and their truth (`spacepoint,particle`).

use std::fmt::Write as _;
use std::io::{Read, Write};

use super::{BoundParams, Seed, SpacePoint};
use crate::csvio::{for_each_record, format_error};
use crate::error::Result;

#[derive(serde::Deserialize)]
struct Row {
    x: f32,
    y: f32,
    z: f32,
    #[serde(default)]
    var_r: Option<f32>,
    #[serde(default)]
    var_z: Option<f32>,
}

/// Reads spacepoints from CSV (`file` names the input in errors). Coordinates must be finite,
/// variances finite and non-negative; without variance columns the variances are 0 (the
/// triplet cut then allows no measurement error: see the README).
pub fn read_csv(input: impl Read, file: &str) -> Result<Vec<SpacePoint>> {
    Ok(read_csv_with_lines(input, file)?.0)
}

/// As [`read_csv`], with the 1-based file line of every spacepoint (to place the errors that
/// name a spacepoint by its index, [`crate::Error::InvalidItem`], in the file).
pub fn read_csv_with_lines(input: impl Read, file: &str) -> Result<(Vec<SpacePoint>, Vec<u64>)> {
    let mut out = Vec::new();
    let mut lines = Vec::new();
    for_each_record(input, file, &["x", "y", "z"], |line, r: Row| {
        lines.push(line);
        for (name, v) in [("x", r.x), ("y", r.y), ("z", r.z)] {
            if !v.is_finite() {
                return Err(format_error(
                    file,
                    line,
                    Some(name),
                    format!("{v} is not a finite coordinate"),
                ));
            }
        }
        let (var_r, var_z) = (r.var_r.unwrap_or(0.0), r.var_z.unwrap_or(0.0));
        for (name, v) in [("var_r", var_r), ("var_z", var_z)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format_error(
                    file,
                    line,
                    Some(name),
                    format!("{v} is not a variance (finite, >= 0)"),
                ));
            }
        }
        out.push(SpacePoint {
            x: r.x,
            y: r.y,
            z: r.z,
            var_z,
            var_r,
        });
        Ok(())
    })?;
    Ok((out, lines))
}

/// Writes seeds as CSV with header `bottom,middle,top,weight,z_vertex` (indices: 0-based
/// data rows of the spacepoint input; `z_vertex` in mm).
pub fn write_seeds_csv(mut w: impl Write, seeds: &[Seed]) -> std::io::Result<()> {
    let mut out = String::with_capacity(seeds.len() * 40 + 40);
    out.push_str("bottom,middle,top,weight,z_vertex\n");
    for s in seeds {
        let _ = writeln!(
            out,
            "{},{},{},{},{}",
            s.bottom, s.middle, s.top, s.weight, s.z_vertex
        );
    }
    w.write_all(out.as_bytes())
}

/// Writes track parameters as CSV with header `seed,loc0,loc1,phi,theta,qop` (`seed`: the
/// 0-based row of the seeds file; mm, mm, rad, rad, e/GeV).
pub fn write_params_csv(mut w: impl Write, params: &[BoundParams]) -> std::io::Result<()> {
    let mut out = String::with_capacity(params.len() * 64 + 32);
    out.push_str("seed,loc0,loc1,phi,theta,qop\n");
    for (i, p) in params.iter().enumerate() {
        let _ = writeln!(
            out,
            "{i},{},{},{},{},{}",
            p.loc0, p.loc1, p.phi, p.theta, p.qop
        );
    }
    w.write_all(out.as_bytes())
}

/// Writes spacepoints as CSV with header `x,y,z,var_r,var_z` (what [`read_csv`] reads back
/// exactly: the shortest decimal that round-trips each `f32`).
pub fn write_spacepoints_csv(mut w: impl Write, sps: &[SpacePoint]) -> std::io::Result<()> {
    let mut out = String::with_capacity(sps.len() * 48 + 24);
    out.push_str("x,y,z,var_r,var_z\n");
    for s in sps {
        let _ = writeln!(out, "{},{},{},{},{}", s.x, s.y, s.z, s.var_r, s.var_z);
    }
    w.write_all(out.as_bytes())
}

/// Writes the truth of a generated event as CSV with header `spacepoint,particle`: for each
/// spacepoint (0-based row), its particle ([`super::gen::NOISE`] for a noise hit).
pub fn write_truth_csv(mut w: impl Write, truth: &[u32]) -> std::io::Result<()> {
    let mut out = String::with_capacity(truth.len() * 16 + 24);
    out.push_str("spacepoint,particle\n");
    for (i, t) in truth.iter().enumerate() {
        let _ = writeln!(out, "{i},{t}");
    }
    w.write_all(out.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_coordinates_and_optional_variances_by_name() {
        let sps = read_csv("z,x,y,particle\n3,1,2,7\n".as_bytes(), "a.csv").unwrap();
        assert_eq!(
            (sps[0].x, sps[0].y, sps[0].z, sps[0].var_r),
            (1.0, 2.0, 3.0, 0.0)
        );
        let sps = read_csv("x,y,z,var_r,var_z\n1,2,3,0.01,0.25\n".as_bytes(), "a.csv").unwrap();
        assert_eq!((sps[0].var_r, sps[0].var_z), (0.01, 0.25));
    }

    #[test]
    fn bad_values_name_file_line_and_column() {
        let e = read_csv("x,y,z\n1,2,3\n1,NaN,3\n".as_bytes(), "sp.csv")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("sp.csv:3: column `y`"), "{e}");
        let e = read_csv("x,y,z,var_z\n1,2,3,-1\n".as_bytes(), "sp.csv")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("sp.csv:2: column `var_z`"), "{e}");
    }

    #[test]
    fn written_spacepoints_read_back_exactly() {
        let ev = crate::seeding::gen::generate(3, 2.0, true);
        let mut buf = Vec::new();
        write_spacepoints_csv(&mut buf, &ev.spacepoints).unwrap();
        assert_eq!(read_csv(&buf[..], "sp.csv").unwrap(), ev.spacepoints);
    }

    #[test]
    fn output_formats() {
        let seed = Seed {
            bottom: 0,
            middle: 1,
            top: 2,
            weight: 200.0,
            z_vertex: 0.25,
        };
        let mut buf = Vec::new();
        write_seeds_csv(&mut buf, &[seed]).unwrap();
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "bottom,middle,top,weight,z_vertex\n0,1,2,200,0.25\n"
        );
        let p = BoundParams {
            loc0: 1.5,
            loc1: -2.0,
            phi: 0.0,
            theta: 1.25,
            qop: -0.5,
        };
        let mut buf = Vec::new();
        write_params_csv(&mut buf, &[p, p]).unwrap();
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "seed,loc0,loc1,phi,theta,qop\n0,1.5,-2,0,1.25,-0.5\n1,1.5,-2,0,1.25,-0.5\n"
        );
        let mut buf = Vec::new();
        write_truth_csv(&mut buf, &[7, u32::MAX]).unwrap();
        assert_eq!(
            String::from_utf8(buf).unwrap(),
            "spacepoint,particle\n0,7\n1,4294967295\n"
        );
    }
}
