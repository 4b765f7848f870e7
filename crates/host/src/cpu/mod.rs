//! CPU references ("oracles") of every kernel: the plainest sequential code that is
//! obviously right. The CPU backend runs them; GPU tests compare against them exactly.

pub mod bucket;
pub mod compact;
pub mod scan;
