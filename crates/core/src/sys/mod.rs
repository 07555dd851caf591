//! Raw system calls: userfaultfd ioctls, anonymous memory, epoll and
//! eventfd, signals, and what the process asks of the system about memory.
//!
//! The rule: a system call or a libc call is made only here, through a
//! safe wrapper where the call's soundness does not depend on its caller,
//! and an `unsafe fn` with a `# Safety` section where it does (a range to
//! replace, a signal handler's arguments, a stack to switch to). The
//! modules, one kernel interface each:
//!
//! - `uffd.rs`: the userfaultfd descriptor, its ioctls and messages;
//! - `mm.rs`: anonymous memory (`mmap`, `munmap`, `madvise`,
//!   `process_madvise`), staging buffers;
//! - `poller.rs`: epoll, eventfd, `poll`;
//! - `signal.rs`: the SIGBUS handler's installation and chaining, sending
//!   a SIGBUS again, `errno` in a handler, signal masks and the alternate
//!   signal stack, `pthread_atfork`, futexes, `gettid`, the in-thread
//!   service's stacks and the switch onto one;
//! - `pagemap.rs`: `PAGEMAP_SCAN` on `/proc/self/pagemap`, which pages
//!   were written (asynchronous dirty tracking);
//! - `proc.rs`: physical memory (`sysconf`), the PSI memory-pressure
//!   trigger, the CPUs a thread may run on and pinning it to one;
//! - `keeper.rs`: the keeper process (`crate::keeper`): its `clone`, the
//!   messages to it, and its own code, which makes raw system calls only
//!   (no `errno`, no thread-local storage).
//!
//! `unsafe` outside `sys/` in umio-core makes no system call; each block
//! has its `// SAFETY:` line. Where it is, and why it is not here:
//!
//! - `unsafe impl Send`/`Sync` for types holding raw pointers:
//!   `mapping.rs` (`Mapping`), `in_thread.rs` (`Slot`, `Entry`), `rcu.rs`
//!   (`RcuCell`), `fork.rs` (`ForkMutex`, and its guard's access to the
//!   data);
//! - the memory a region maps, read as a slice: `Mapping`'s accessors
//!   (`mapping.rs`), the dirty run handed to the store in
//!   `writeback.rs`, and the eviction victims copied and compared in
//!   `dirty.rs` (with the scratch they are moved to); the pages' lifetime is the region's protocol, not a
//!   kernel interface;
//! - public `unsafe fn`s whose contract is the caller's:
//!   `MapOptions::fixed_address` and `Mapping::unmap_range_shared`
//!   (`mapping.rs`), and the call of [`mm::map_anonymous_fixed`] in
//!   `create.rs` that relies on the first;
//! - the in-thread service's own entry points (`in_thread.rs`): the SIGBUS
//!   handler reading its arguments ([`signal::bus_fault`]) and chaining
//!   ([`signal::Action::call`]), the switch onto a slot's stack
//!   ([`signal::call_on_stack`]), and what is reached on it through raw
//!   pointers (the call, the slot and its scratch, the runtime);
//! - `rcu.rs`: the read-copy-update cell's pointer, loaded and freed;
//! - `trace.rs`: `rdtsc`, a CPU instruction, not a system call.
//!
//! umio talks to userfaultfd through its own small definitions over `libc`
//! rather than the `userfaultfd` crate: that crate needs libclang at build
//! time, lacks `UFFDIO_COPY_MODE_WP`, `UFFDIO_POISON`, `UFFDIO_MOVE` and the
//! feature query, and mishandles partial copies (docs/ARCHITECTURE.md).

pub(crate) mod keeper;
pub(crate) mod mm;
pub(crate) mod pagemap;
pub(crate) mod poller;
pub(crate) mod proc;
pub(crate) mod signal;
pub(crate) mod uffd;

/// The last OS error as a positive errno.
pub(crate) fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}
