//! Oracle: prefix sums, sequential, modular arithmetic.

use detkit_gpu::scan::ScanKind;

/// A value the oracle can sum: wrapping addition, as the kernels do.
pub trait Summable: Copy + Default {
    /// Wrapping addition.
    fn wadd(self, o: Self) -> Self;
}
impl Summable for u32 {
    fn wadd(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
}
impl Summable for u64 {
    fn wadd(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
}

/// `out[i] = in[0] + .. + in[i - 1]` (exclusive) or `.. + in[i]` (inclusive).
pub fn scan<T: Summable>(input: &[T], kind: ScanKind) -> Vec<T> {
    let mut out = Vec::with_capacity(input.len());
    let mut acc = T::default();
    for &x in input {
        if kind == ScanKind::Exclusive {
            out.push(acc);
        }
        acc = acc.wadd(x);
        if kind == ScanKind::Inclusive {
            out.push(acc);
        }
    }
    out
}

/// Block scan: each run of `block` consecutive elements is scanned on its own.
/// Returns the scan and the total of each block.
pub fn block_scan(input: &[u32], block: usize, kind: ScanKind) -> (Vec<u32>, Vec<u32>) {
    let mut out = Vec::with_capacity(input.len());
    let mut totals = Vec::new();
    for chunk in input.chunks(block) {
        out.extend(scan(chunk, kind));
        totals.push(chunk.iter().fold(0u32, |a, &b| a.wrapping_add(b)));
    }
    (out, totals)
}
