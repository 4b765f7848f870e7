//! CSV input shared by every family's `io.rs`: `csv` + `serde`, one position format.
//!
//! Every reader reports errors as [`Error::Format`]: `FILE:LINE` with the 1-based line
//! number in the file (blank lines counted, as an editor shows them) and the column's header
//! name. A UTF-8 byte-order mark before the header is accepted. Columns are found by their
//! header names, in any order; extra columns are ignored. A file with a header and no data
//! rows holds zero items; a file without a header (empty) is an error.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::Read;
use std::rc::Rc;

use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// The position error for `file`, `line`, `column`.
pub fn format_error(
    file: &str,
    line: u64,
    column: Option<&str>,
    detail: impl Into<String>,
) -> Error {
    Error::Format {
        file: file.to_string(),
        line,
        column: column.map(str::to_string),
        detail: detail.into(),
    }
}

/// A TOML error of `text` on one line: `line L, column C: message` (the `toml` crate's own
/// form spans several lines, with a drawing of the line).
pub fn toml_message(e: &toml::de::Error, text: &str) -> String {
    let msg = e.message().trim().replace('\n', "; ");
    match e.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {col}: {msg}")
        }
        None => msg,
    }
}

/// Reads CSV records of type `T` from `input` (named `file` in errors), after checking that
/// the header has every column of `required`; calls `f(line, record)` for each data row in
/// file order, `line` being its 1-based line number. `f` may reject a record with its own
/// error (use [`format_error`] with `line`).
pub fn for_each_record<T: DeserializeOwned, R: Read>(
    input: R,
    file: &str,
    required: &[&str],
    mut f: impl FnMut(u64, T) -> Result<()>,
) -> Result<()> {
    // The csv crate's own line count skips blank lines; count newlines ourselves, by byte
    // offset, so that LINE is what an editor shows.
    let newlines = Rc::new(RefCell::new(VecDeque::new()));
    let mut lines = Lines {
        newlines: newlines.clone(),
        before: 0,
    };
    let counted = Counter {
        inner: input,
        pos: 0,
        start: true,
        line_empty: true,
        newlines,
    };
    let mut rdr = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .has_headers(true)
        .from_reader(counted);
    let headers = rdr
        .headers()
        .map_err(|e| csv_error(file, &[], &mut lines, e))?
        .clone();
    let names: Vec<String> = headers.iter().map(str::to_string).collect();
    if names.iter().all(|h| h.is_empty()) {
        return Err(format_error(
            file,
            1,
            None,
            format!(
                "no header: expected a first line naming the columns {}",
                required.join(",")
            ),
        ));
    }
    for want in required {
        if !names.iter().any(|h| h == want) {
            return Err(format_error(
                file,
                1,
                Some(want),
                format!(
                    "missing from the header (found: {}; expected at least: {})",
                    names.join(","),
                    required.join(",")
                ),
            ));
        }
    }
    let mut record = csv::StringRecord::new();
    loop {
        match rdr.read_record(&mut record) {
            Ok(false) => return Ok(()),
            Ok(true) => {}
            Err(e) => return Err(csv_error(file, &names, &mut lines, e)),
        }
        let line = record.position().map_or(0, |p| lines.at(p.byte()));
        let value: T = record
            .deserialize(Some(&headers))
            .map_err(|e| csv_error_at(file, &names, line, e))?;
        f(line, value)?;
    }
}

/// The input, less a leading UTF-8 byte-order mark, recording the byte offset of each
/// newline it passes on and whether it ends an empty line (which csv skips).
struct Counter<R> {
    inner: R,
    pos: u64,
    start: bool,
    line_empty: bool,
    newlines: Rc<RefCell<VecDeque<(u64, bool)>>>,
}

impl<R: Read> Read for Counter<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut n = self.inner.read(buf)?;
        if self.start {
            // The BOM is at most split across reads of fewer than 3 bytes, which `Read`
            // implementations of files and slices do not produce for a fresh reader.
            self.start = false;
            if buf[..n].starts_with(b"\xEF\xBB\xBF") {
                buf.copy_within(3..n, 0);
                n -= 3;
            }
        }
        let mut q = self.newlines.borrow_mut();
        for (i, &b) in buf[..n].iter().enumerate() {
            match b {
                b'\n' => {
                    q.push_back((self.pos + i as u64, self.line_empty));
                    self.line_empty = true;
                }
                b'\r' => {}
                _ => self.line_empty = false,
            }
        }
        self.pos += n as u64;
        Ok(n)
    }
}

/// Turns byte offsets, asked in increasing order, into 1-based line numbers.
struct Lines {
    newlines: Rc<RefCell<VecDeque<(u64, bool)>>>,
    before: u64,
}

impl Lines {
    /// The line of the record csv reports at `byte` (where its parser resumed: empty lines
    /// before the record's own line are skipped, as csv skips them).
    fn at(&mut self, byte: u64) -> u64 {
        let mut q = self.newlines.borrow_mut();
        while q.front().is_some_and(|&(nl, empty)| nl < byte || empty) {
            q.pop_front();
            self.before += 1;
        }
        self.before + 1
    }
}

fn csv_error(file: &str, names: &[String], lines: &mut Lines, e: csv::Error) -> Error {
    let line = e.position().map_or(1, |p| lines.at(p.byte()));
    csv_error_at(file, names, line, e)
}

fn csv_error_at(file: &str, names: &[String], line: u64, e: csv::Error) -> Error {
    match e.into_kind() {
        csv::ErrorKind::Io(source) => Error::Io {
            file: file.to_string(),
            source,
        },
        csv::ErrorKind::Utf8 { err, .. } => {
            let column = names.get(err.field()).map(String::as_str);
            format_error(file, line, column, "not valid UTF-8")
        }
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format_error(
            file,
            line,
            None,
            format!("{len} fields, the header has {expected_len}"),
        ),
        csv::ErrorKind::Deserialize { err, .. } => {
            let column = err
                .field()
                .and_then(|i| names.get(i as usize))
                .map(String::as_str);
            let detail = match err.kind() {
                csv::DeserializeErrorKind::ParseInt(e) => format!("not an integer in range ({e})"),
                csv::DeserializeErrorKind::ParseFloat(e) => format!("not a number ({e})"),
                csv::DeserializeErrorKind::UnexpectedEndOfRow => "missing value".to_string(),
                other => other.to_string(),
            };
            format_error(file, line, column, detail)
        }
        other => format_error(file, line, None, format!("{other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Row {
        a: u16,
        b: f32,
    }

    fn read(text: &str) -> Result<Vec<(u64, Row)>> {
        let mut v = Vec::new();
        for_each_record(text.as_bytes(), "t.csv", &["a", "b"], |l, r: Row| {
            v.push((l, r));
            Ok(())
        })?;
        Ok(v)
    }

    #[test]
    fn reads_rows_with_lines_bom_extra_columns_and_blank_lines() {
        let v = read("\u{feff}b,extra,a\n1.5,x,3\n\n2, y ,4\n").unwrap();
        assert_eq!(v, [(2, Row { a: 3, b: 1.5 }), (4, Row { a: 4, b: 2.0 })]);
    }

    #[test]
    fn header_only_is_zero_rows_and_empty_is_an_error() {
        assert!(read("a,b\n").unwrap().is_empty());
        let e = read("").unwrap_err().to_string();
        assert!(e.starts_with("t.csv:1: no header"), "{e}");
    }

    #[test]
    fn errors_name_file_line_and_column() {
        let e = read("a,b\n1,2\n\n70000,1\n").unwrap_err().to_string();
        assert!(e.starts_with("t.csv:4: column `a`: not an integer"), "{e}");
        let e = read("a,c\n1,2\n").unwrap_err().to_string();
        assert!(
            e.starts_with("t.csv:1: column `b`: missing from the header"),
            "{e}"
        );
        let e = read("a,b\n1\n").unwrap_err().to_string();
        assert!(e.starts_with("t.csv:2: "), "{e}");
        let e = read("a,b\n1,zz\n").unwrap_err().to_string();
        assert!(e.starts_with("t.csv:2: column `b`: not a number"), "{e}");
    }
}
