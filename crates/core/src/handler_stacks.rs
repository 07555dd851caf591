//! The in-thread fault service's stacks, and whether the calling code runs
//! on one: in the fault handler ([`in_fault_handler`]). Below both the
//! service (`in_thread.rs`), which makes the stacks, and the error reports
//! (`report.rs`), which ask where they are made.

use std::sync::OnceLock;

use crate::sys::signal::{self, ServiceStacks};

static STACKS: OnceLock<ServiceStacks> = OnceLock::new();

/// Keeps `stacks` as the service's, once per process (the service is made
/// once), before any handler can run on them; a second call keeps the
/// first and drops its own.
pub(crate) fn set(stacks: ServiceStacks) -> &'static ServiceStacks {
    let _ = STACKS.set(stacks);
    STACKS.get().expect("set above")
}

/// Whether the calling thread is inside umio's in-thread fault handler,
/// serving a fault: the store reads it makes there call the C library
/// (`pread`, say), and a library that interposes those calls (an
/// `LD_PRELOAD` shim such as `libumio_preload.so`) must send them straight
/// to the kernel: a signal handler may take none of its locks. Signal-safe,
/// with no system call and no thread-local storage: the handler runs on
/// stacks of its own, and this asks whether the caller's stack is one of
/// them. Always `false` where no runtime serves faults in-thread.
pub fn in_fault_handler() -> bool {
    STACKS
        .get()
        .is_some_and(|s| s.index_of(signal::stack_pointer()).is_some())
}
