//! Write-back at process exit: what a C program wrote through a mapping
//! reaches its store when the program ends normally (`exit`, a return
//! from `main`) without unmapping it, as a `MAP_SHARED` mapping's writes
//! survive its process. umio's cache dies with the process; the kernel's
//! page cache would not have.
//!
//! The first mapping registers an `atexit` handler, so it runs before the
//! handlers the program registered earlier and after those it registered
//! later (`atexit` runs them in reverse): a handler of the program's that
//! writes to a mapping made before it was registered is written back too.
//! The handler flushes every mapping this process made (a fork child
//! inherits the handler and the table, not its parent's regions) and
//! unmaps nothing: the program's other threads keep running until the
//! process ends, and may still touch the memory; what they write after
//! the handler has passed their page is theirs to lose, as with any data
//! a thread produces while the process exits.
//!
//! The work runs in a thread of its own: by the time `exit` calls the
//! handlers it has run the exiting thread's thread-local destructors
//! (glibc calls them first), Rust's among them, and a fresh thread has all
//! of its own.

use std::sync::Once;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::registry;

/// The process that made the latest mapping: a fork child that made none
/// has nothing to write back, and does not take the table's lock, which
/// its parent may have held as it forked.
static MAPPER: AtomicU32 = AtomicU32::new(0);

/// Registers the handler, once per process (a fork child inherits it).
pub(crate) fn write_back_at_exit() {
    MAPPER.store(std::process::id(), Ordering::Relaxed);
    static REGISTERED: Once = Once::new();
    REGISTERED.call_once(|| {
        // SAFETY: `at_exit` is a plain `extern "C" fn()` that lives as long
        // as the library (glibc runs the handlers of a shared library when
        // it is unloaded, before its code goes).
        if unsafe { libc::atexit(at_exit) } != 0 {
            log::error!("umio: atexit failed: mappings will not be written back at exit");
        }
    });
}

extern "C" fn at_exit() {
    // Nothing may unwind into `exit`; a panic is logged by the hook.
    let _ = std::panic::catch_unwind(|| {
        if MAPPER.load(Ordering::Relaxed) != std::process::id() {
            return;
        }
        if umio_core::on_runtime_thread() {
            // A C store's or policy's callback called exit: the thread may
            // hold a page the write-back would wait for, for ever.
            log::error!("umio: exit called in one of umio's threads: nothing written back");
            return;
        }
        let spawned = std::thread::Builder::new()
            .name("umio-exit".into())
            .spawn(flush_all);
        match spawned {
            Ok(thread) => {
                let _ = thread.join();
            }
            // No thread to be had: the exiting thread does it.
            Err(_) => flush_all(),
        }
    });
}

/// Writes back and syncs every mapping this process made and still maps;
/// if every one was, tells the keeper (if any) that nothing is left for
/// it to write.
fn flush_all() {
    let mut all = true;
    for m in registry::of_this_process() {
        if m.mapped_bytes() == 0 {
            continue;
        }
        match m.flush() {
            // Unmapped by another thread meanwhile: written back then.
            Ok(()) | Err(umio_core::Error::NotMapped) => {}
            Err(e) => {
                all = false;
                log::error!(
                    "umio: writing back {} bytes at {:p} at exit failed: {e}",
                    m.len(),
                    m.as_ptr()
                )
            }
        }
    }
    if all {
        umio_core::keeper::all_written();
    }
}
