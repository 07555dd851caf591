//! What the SPDK store's polling thread asks of the C library about
//! itself: the CPU it runs on, and a function to run at exit.

/// The CPU the calling thread runs on now (`sched_getcpu`), -1 if unknown.
pub(crate) fn current_cpu() -> i32 {
    // SAFETY: sched_getcpu has no preconditions.
    unsafe { libc::sched_getcpu() }
}

/// Registers `f` to run when the process exits (`atexit`).
pub(crate) fn at_exit(f: extern "C" fn()) {
    // SAFETY: registers a plain function without arguments.
    unsafe { libc::atexit(f) };
}
