//! Spacepoint CSV input: columns `x,y,z` (mm, global frame) and, optionally, `var_r`,
//! `var_z` (mm², the names of ACTS's spacepoint CSV), found by name in any order; other
//! columns are ignored. Errors name `FILE:LINE` and the column (see [`crate::csvio`]).

use std::io::Read;

use super::SpacePoint;
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
}
