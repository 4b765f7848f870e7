//! Output written behind the computation: a producer hands each batch of records to a writer
//! thread and goes on (the GPU runs the next chunk while the previous chunk's records are
//! formatted and written). At most two batches wait between them, so memory stays bounded;
//! the batches' buffers go back to the producer for reuse.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

/// Runs `produce` with a sink that copies each batch to the writer thread, which calls
/// `write` on it. Returns what `produce` returned and the writer's result (its first
/// error; once the writer failed, the sink returns an error so that the producer stops).
pub fn write_behind<T, R>(
    mut write: impl FnMut(&[T]) -> std::io::Result<()> + Send,
    produce: impl FnOnce(&mut dyn FnMut(&[T]) -> detkit::Result<()>) -> R,
) -> (R, std::io::Result<()>)
where
    T: Copy + Send,
{
    let (full_tx, full_rx): (SyncSender<Vec<T>>, Receiver<Vec<T>>) = sync_channel(2);
    let (free_tx, free_rx) = sync_channel::<Vec<T>>(3);
    std::thread::scope(|s| {
        let writer = s.spawn(move || -> std::io::Result<()> {
            for batch in full_rx {
                write(&batch)?;
                // The producer may have stopped taking buffers back: dropping is fine.
                let _ = free_tx.try_send(batch);
            }
            Ok(())
        });
        let mut sink = |batch: &[T]| -> detkit::Result<()> {
            let mut v = free_rx.try_recv().unwrap_or_default();
            v.clear();
            v.extend_from_slice(batch);
            full_tx.send(v).map_err(|_| detkit::Error::InvalidInput {
                what: "output",
                detail: "the writer stopped (its error follows)".into(),
            })
        };
        let r = produce(&mut sink);
        drop(full_tx);
        let w = writer
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the writer thread panicked")));
        (r, w)
    })
}

#[cfg(test)]
mod tests {
    use super::write_behind;

    #[test]
    fn every_batch_is_written_in_order() {
        let mut got = Vec::new();
        let (r, w) = write_behind(
            |b: &[u32]| {
                got.extend_from_slice(b);
                Ok(())
            },
            |sink| {
                for i in 0..100u32 {
                    sink(&[i, i + 1000])?;
                }
                Ok::<_, detkit::Error>(7)
            },
        );
        assert_eq!(r.unwrap(), 7);
        w.unwrap();
        let want: Vec<u32> = (0..100).flat_map(|i| [i, i + 1000]).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_failing_writer_stops_the_producer() {
        let (r, w) = write_behind(
            |_: &[u8]| Err(std::io::Error::other("disk full")),
            |sink| {
                let mut sent = 0;
                for _ in 0..1000 {
                    if sink(&[1, 2, 3]).is_err() {
                        return sent;
                    }
                    sent += 1;
                }
                sent
            },
        );
        assert!(r < 1000, "the producer ran on after the writer failed");
        assert_eq!(w.unwrap_err().to_string(), "disk full");
    }
}
