//! The workspaces a [`crate::Backend`] keeps between calls: one pool per family, of typed
//! workspaces (device buffers, pinned staging, cached launch plans), each with a stream of
//! its own.
//!
//! Thread safety: per-call workspaces out of a pool. A call takes a workspace from its
//! family's pool (a lock held only for the `pop`), runs on the workspace's own stream
//! without holding any lock, and puts it back. One thread calling again and again reuses
//! the same workspace, so a call whose sizes fit allocates nothing; several threads calling
//! at once each get one (made on first need), and their copies and kernels overlap on the
//! GPU instead of queueing behind one lock. The pool keeps as many workspaces as calls were
//! ever in flight at once.

use std::sync::{Arc, Mutex};

use crate::cuda::GpuContext;
use crate::error::{DriverContext, Error, Result};

/// Workspaces of one family, for reuse.
pub(crate) struct Pool<W> {
    free: Mutex<Vec<W>>,
}

impl<W> Default for Pool<W> {
    fn default() -> Self {
        Self {
            free: Mutex::new(Vec::new()),
        }
    }
}

impl<W> Pool<W> {
    /// Runs `f` on a free workspace (made by `make` when none is free) and keeps the
    /// workspace for the next call, unless the driver failed (its state is then unknown).
    ///
    /// `gpu`'s context is made current on the calling thread first: a backend may be called
    /// from any thread, and the driver calls that cudarc does not wrap (occupancy queries,
    /// raw copies, graph launches) need it. When it is current already this is one
    /// `cuCtxGetCurrent`.
    pub(crate) fn run<R>(
        &self,
        gpu: &GpuContext,
        make: impl FnOnce() -> Result<W>,
        f: impl FnOnce(&mut W) -> Result<R>,
    ) -> Result<R> {
        gpu.context()
            .bind_to_thread()
            .ctx("binding the context to this thread")?;
        let free = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop();
        let mut w = match free {
            Some(w) => w,
            None => make()?,
        };
        let r = f(&mut w);
        if !matches!(r, Err(Error::Driver { .. })) {
            self.free.lock().unwrap_or_else(|e| e.into_inner()).push(w);
        }
        r
    }
}

impl<W> Pool<W> {
    /// [`Pool::run`] with two workspaces, taken and put back in a fixed order (the one on
    /// top of the pool first, and put back last): a call repeated from one thread gets the
    /// same two in the same roles, so once its sizes fit it allocates nothing.
    pub(crate) fn run_two<R>(
        &self,
        gpu: &GpuContext,
        make: impl Fn() -> Result<W>,
        f: impl FnOnce(&mut W, &mut W) -> Result<R>,
    ) -> Result<R> {
        gpu.context()
            .bind_to_thread()
            .ctx("binding the context to this thread")?;
        let (a, b) = {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            (free.pop(), free.pop())
        };
        let mut a = match a {
            Some(w) => w,
            None => make()?,
        };
        let mut b = match b {
            Some(w) => w,
            None => make()?,
        };
        let r = f(&mut a, &mut b);
        if !matches!(r, Err(Error::Driver { .. })) {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            free.push(b);
            free.push(a);
        }
        r
    }

    /// [`Pool::run_two`] with `n` workspaces (the first the one on top of the pool), put back
    /// in the reverse order: the same roles on every call from one thread.
    pub(crate) fn run_n<R>(
        &self,
        gpu: &GpuContext,
        n: usize,
        make: impl Fn() -> Result<W>,
        f: impl FnOnce(&mut [W]) -> Result<R>,
    ) -> Result<R> {
        gpu.context()
            .bind_to_thread()
            .ctx("binding the context to this thread")?;
        let taken: Vec<Option<W>> = {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            (0..n).map(|_| free.pop()).collect()
        };
        let mut ws = Vec::with_capacity(n);
        for w in taken {
            ws.push(match w {
                Some(w) => w,
                None => make()?,
            });
        }
        let r = f(&mut ws);
        if !matches!(r, Err(Error::Driver { .. })) {
            let mut free = self.free.lock().unwrap_or_else(|e| e.into_inner());
            while let Some(w) = ws.pop() {
                free.push(w);
            }
        }
        r
    }

    /// Drops every free workspace (a workspace in use by a call goes back after it).
    pub(crate) fn clear(&self) {
        let free = std::mem::take(&mut *self.free.lock().unwrap_or_else(|e| e.into_inner()));
        drop(free);
    }
}

/// A context of its own for a new workspace: a fork of the backend's (its own stream, the
/// loaded kernels shared).
pub(crate) fn fork(gpu: &GpuContext) -> Result<Arc<GpuContext>> {
    Ok(Arc::new(gpu.fork()?))
}

/// The typed workspaces of every family.
#[derive(Default)]
pub(crate) struct Workspaces {
    pub(crate) clustering: Pool<crate::clustering::door::ClusterWorkspace>,
    pub(crate) seeding: Pool<crate::seeding::door::SeedWorkspace>,
    pub(crate) pet: Pool<crate::pet::door::PetWorkspace>,
    /// The CPU backend's PET conversion scratch (host memory).
    pub(crate) pet_cpu: crate::pet::par::Scratch,
}

impl Workspaces {
    /// Drops every free workspace of every family.
    pub(crate) fn clear(&self) {
        self.clustering.clear();
        self.seeding.clear();
        self.pet.clear();
        self.pet_cpu.clear();
    }
}
