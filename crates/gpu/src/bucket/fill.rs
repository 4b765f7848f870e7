//! The unordered fill (CMS atomic fill).

#[allow(unused_imports)]
use super::device::*;
use super::*;
use crate::histogram::fill::for_each_key_warp_uniform;
use crate::intrinsics as i;

/// Device-wide fill: `content[cursor[key]++] = index`, warp-aggregated.
///
/// # Safety
/// `keys` valid for `n < 2^32` elements, 16-byte aligned, every key `< nbins` (the count
/// pass checked it); `cursor` a copy of `offsets[..nbins]`; `content` valid for `n`.
#[unsafe(no_mangle)]
pub unsafe extern "ptx-kernel" fn bucket_fill(p: BucketFillParams) {
    let (keys, n, nbins, cursor, content) = (
        p.keys.ptr(),
        p.n,
        p.nbins,
        p.cursor.ptr_mut(),
        p.content.ptr_mut(),
    );
    // SAFETY: launch contract.
    unsafe {
        for_each_key_warp_uniform(keys, n, |key, valid, idx| {
            let ok = valid && key < nbins;
            let m = i::match_any(if ok { key } else { u32::MAX });
            let leader = i::lowest_bit(m);
            let base = if ok && i::lane_id() == leader {
                i::atomic_add_u32(cursor.add(key as usize), i::popc(m))
            } else {
                0
            };
            let base = i::shfl_idx(base, leader);
            if ok {
                content
                    .add((base + i::popc(m & i::lanemask_lt())) as usize)
                    .write(idx as u32);
            }
        })
    }
}
