//! Shared helpers of the workspace-level GPU tests and benchmarks.

use std::fmt::Debug;

/// Compares two sequences element by element; reports the number of mismatches and the
/// first few of them (every mismatch is counted, not just the first).
pub fn exact<T: PartialEq + Debug>(what: &str, got: &[T], want: &[T]) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: length {} != expected {}",
            got.len(),
            want.len()
        ));
    }
    let bad: Vec<usize> = (0..got.len()).filter(|&i| got[i] != want[i]).collect();
    if bad.is_empty() {
        return Ok(());
    }
    let shown: Vec<String> = bad
        .iter()
        .take(8)
        .map(|&i| format!("[{i}] got {:?} want {:?}", got[i], want[i]))
        .collect();
    Err(format!(
        "{what}: {} of {} elements differ: {}",
        bad.len(),
        got.len(),
        shown.join(", ")
    ))
}

/// Checks a condition, with a message.
pub fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

/// The sizes every primitive is tested at: 0, 1, warp size ± 1, block size ± 1, tile size ± 1,
/// 2^20 + 7 and (unless `quick`) 2^26.
pub fn sizes(block: usize, tile: usize, quick: bool) -> Vec<usize> {
    let mut v = vec![
        0,
        1,
        31,
        32,
        33,
        block - 1,
        block,
        block + 1,
        tile - 1,
        tile,
        tile + 1,
        3 * tile + 5,
        (1 << 20) + 7,
    ];
    if !quick {
        v.push(1 << 26);
    }
    v.sort_unstable();
    v.dedup();
    v
}
