//! The README's quick start: map a file through umio, read and write it,
//! flush, unmap.
//!
//! Run: `cargo run --example quickstart`, as any user (without permission
//! for full-mode userfaultfd umio serves user-mode faults only, which is
//! all this example needs).

use std::io::Write;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    umio_bench::cli::command(
        "quickstart",
        "The README's quick start: map a file through umio, read and write it, flush, unmap.",
    )
    .get_matches();
    // A 4 MiB file to play with.
    let path = std::env::temp_dir().join(format!("umio-quickstart-{}.bin", std::process::id()));
    std::fs::File::create(&path)?.write_all(&vec![b'.'; 4 << 20])?;
    let len = 4 << 20;

    let rt = umio::Runtime::builder()
        .cache_bytes(1 << 20) // bound on the resident pages of all regions together
        .page_size(4 << 10) // the default fill unit; a region may choose its own
        .fillers(2)
        .build()?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)?;
    // SAFETY: as with memmap2, the caller promises that nothing else (another
    // process, another mapping of the file) changes the file while a slice
    // of the mapping lives: this file is our own.
    let mut map = unsafe { rt.map_file_mut(&file, umio::MapOptions::new().offset(0).len(len)) }?;

    map.as_mut_slice()[..5].copy_from_slice(b"hello");
    // Reading the whole file through a 1 MiB cache evicts as it goes.
    let dots = map.as_slice().iter().filter(|&&b| b == b'.').count();
    map.flush()?; // dirty pages written back and fdatasync'd
    let stats = rt.stats();
    map.unmap()?; // dropping the Mapping also flushes and unmaps; errors are logged

    let on_disk = std::fs::read(&path)?;
    std::fs::remove_file(&path)?;
    assert_eq!(&on_disk[..5], b"hello");
    println!(
        "{dots} dots; {} faults, {} pages evicted, {} bytes written back; file starts with {:?}",
        stats.faults,
        stats.evicted_pages,
        stats.bytes_written,
        String::from_utf8_lossy(&on_disk[..5])
    );
    Ok(())
}
