//! Keeping the thread pool awake for the length of a run.
//!
//! Kernels split their work over rayon's pool many times per run, each piece tens of
//! microseconds. A rayon worker with nothing to do sleeps soon, and waking it costs a futex
//! call and, in a virtual machine, a halted vCPU's wake-up: often longer than the piece of
//! work it was woken for, so the thread that split the work did it all alone. While a run is
//! in progress each other worker therefore polls the pool for work instead of sleeping, as
//! onnxruntime's own thread pool spins between parallel sections; it goes back to sleep when
//! the run ends or after [`IDLE_LIMIT`] without work.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How long a poller goes on without finding work before it sleeps. Polling for a whole run
/// cost 10–25% on a 16-core Xeon host (pollers on every core through long serial stretches);
/// with this limit that host ran as fast as with sleeping workers, and the 2-vCPU VM kept the
/// gain (MiniLM, two threads: 1.26 ms, against 1.9 ms with sleeping workers).
const IDLE_LIMIT: Duration = Duration::from_micros(100);

thread_local! {
    /// Set while this thread polls for one run, so that a poller it picks up runs no
    /// nested poll.
    static POLLING: Cell<bool> = const { Cell::new(false) };
}

/// Sets the flag when dropped, so pollers stop even if the run panics.
struct Finished<'a>(&'a AtomicBool);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

/// Runs `run` on a pool worker; with `awake`, the pool's other workers poll for work until it
/// returns. Called from outside the pool.
pub(crate) fn run_on_pool<R: Send>(awake: bool, run: impl FnOnce() -> R + Send) -> R {
    let threads = if awake {
        rayon::current_num_threads()
    } else {
        1
    };
    let done = AtomicBool::new(false);
    rayon::scope(|scope| {
        let owner = rayon::current_thread_index();
        for _ in 1..threads {
            let done = &done;
            scope.spawn(move |_| poll_until(done, owner));
        }
        let _finished = Finished(&done);
        run()
    })
}

/// Executes pool work until `done`. Returns at once on the run's own thread (it may pop a
/// poller while it waits inside a join) and inside another poller.
fn poll_until(done: &AtomicBool, owner: Option<usize>) {
    if rayon::current_thread_index() == owner || POLLING.with(Cell::get) {
        return;
    }
    POLLING.with(|p| p.set(true));
    let mut idle = 0u32;
    let mut last_work = Instant::now();
    while !done.load(Ordering::Acquire) {
        match rayon::yield_now() {
            Some(rayon::Yield::Executed) => {
                idle = 0;
                last_work = Instant::now();
            }
            // A long serial stretch: stop polling and sleep as rayon would.
            _ if idle.is_multiple_of(16) && last_work.elapsed() > IDLE_LIMIT => break,
            _ => {
                idle = idle.wrapping_add(1);
                if idle.is_multiple_of(64) {
                    // Let another runnable thread of this CPU in now and then.
                    std::thread::yield_now();
                } else {
                    // Each look for work reads the other workers' queues; pausing between
                    // looks keeps many pollers from crowding the cache lines the working
                    // threads write.
                    for _ in 0..32 {
                        std::hint::spin_loop();
                    }
                }
            }
        }
    }
    POLLING.with(|p| p.set(false));
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    /// Nested parallel work inside a polled run gives the plain result, and the pollers stop.
    #[test]
    fn polled_runs_finish_with_the_right_result() {
        for awake in [true, false] {
            for _ in 0..50 {
                let sum: u64 = run_on_pool(awake, || {
                    (0..10_000u64)
                        .into_par_iter()
                        .map(|i| (0..i % 7).into_par_iter().map(|j| j * i).sum::<u64>())
                        .sum()
                });
                let want: u64 = (0..10_000u64)
                    .map(|i| (0..i % 7).map(|j| j * i).sum::<u64>())
                    .sum();
                assert_eq!(sum, want);
            }
        }
    }

    /// A panicking run still releases the pollers (no hang) and the panic reaches the caller.
    #[test]
    fn a_panicking_run_releases_the_pollers() {
        let caught = std::panic::catch_unwind(|| {
            run_on_pool(true, || {
                (0..64)
                    .into_par_iter()
                    .for_each(|i| assert!(i < 60, "boom"));
            })
        });
        assert!(caught.is_err());
        // The pool is usable afterwards.
        assert_eq!(
            run_on_pool(true, || (0..100u32).into_par_iter().sum::<u32>()),
            4950
        );
    }

    /// Runs from several outside threads at once share the pool without deadlock.
    #[test]
    fn concurrent_polled_runs() {
        std::thread::scope(|s| {
            for t in 0..4u64 {
                s.spawn(move || {
                    for _ in 0..20 {
                        let v = run_on_pool(true, || {
                            (0..1000u64).into_par_iter().map(|x| x * t).sum::<u64>()
                        });
                        assert_eq!(v, 499_500 * t);
                    }
                });
            }
        });
    }
}
