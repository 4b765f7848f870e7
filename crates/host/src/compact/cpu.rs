//! Oracle: order-preserving selection.

/// The items for which `keep(index, item)` holds, in input order.
pub fn select<T: Copy>(input: &[T], mut keep: impl FnMut(usize, T) -> bool) -> Vec<T> {
    let mut out = Vec::new();
    for (i, &x) in input.iter().enumerate() {
        if keep(i, x) {
            out.push(x);
        }
    }
    out
}
