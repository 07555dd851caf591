//! The keeper: what a process wrote to its shared file mappings reaches
//! the file even when the process is killed ([`MapOptions::survive_process_death`](crate::MapOptions::survive_process_death)).
//!
//! Under the kernel a `MAP_SHARED` file mapping's writes are in the page
//! cache, which outlives the process; umio's cache is the process's own
//! anonymous memory, gone with it. So the first such region starts a
//! keeper: a process made with `clone(CLONE_VM)` that shares the address
//! space but is a process of its own (not a thread: a `SIGKILL` of the
//! program, a crash, leave it alive), and that does nothing while the
//! program lives but wait. Its existence keeps the address space alive
//! (`mm_users`) after the program's threads are gone: the regions' pages,
//! dirty or not, stay where they were. When the program is gone (its
//! pidfd, or the end of the socket below: the program exited, was killed,
//! or called `exec`), the keeper writes every page of every region it
//! keeps that is still in memory (resident or swapped, from
//! `/proc/self/pagemap`; a page never filled or evicted is not, and was
//! written back if dirty before it went) and whose bytes differ from the
//! file's, at its offset in the file, up to the file's end (a mapping
//! never grows its file), without `fsync` (the kernel would not either),
//! then exits. Every page then holds the last bytes the program wrote
//! there, whatever order write-back took before: the file is the memory
//! as it was at the moment of death.
//!
//! A thread of the program (`umio-keeper-watch`) waits on a pidfd of the
//! keeper and, if it exits without having been told to quit (killed on
//! its own), starts another that keeps the same ranges
//! ([`keeper_restarts`] counts them). At end-of-file on the socket while
//! the program still runs in this address space (`kcmp`: it closed the
//! descriptor, it did not exit or `exec`), the keeper quits without
//! writing: writing then would race with umio's own write-back.
//!
//! The program tells the keeper which ranges to keep over a
//! `SOCK_SEQPACKET` socket: a region's range with a descriptor of its file
//! (`SCM_RIGHTS`) when mapped, and a range to forget before umio unmaps or
//! replaces any of a region's memory (after its write-back), so that the
//! keeper never reads memory that is no longer the region's. At a clean
//! exit after the mappings were written back (the C API's and the shim's
//! exit hooks) the program tells it to quit without writing
//! ([`all_written`]).
//!
//! The keeper's code runs in the program's address space with the program
//! possibly multithreaded and in any state: it makes raw system calls only
//! (no allocation, no lock, no `errno`, no thread-local storage), on a
//! stack of its own, with every signal blocked, in a session of its own
//! (so that a signal to the program's process group does not reach it),
//! having closed every descriptor it inherited but its socket.

pub(crate) use crate::sys::keeper::{KEEPER, after_fork, forget, keep, restore};
pub use crate::sys::keeper::{all_written, keeper_pid, keeper_restarts};
