//! The library's version: `UMIO_VERSION_*` in umio.h (the version a
//! program was compiled against) and `umio_version()` (the version of the
//! library it runs with).

use std::ffi::{CStr, c_char};

/// umio's major version, as umio.h was generated for (the release's
/// version, which is not the ABI's: libumio.so.0 is the ABI's SONAME).
pub const UMIO_VERSION_MAJOR: u32 = 0;

/// umio's minor version, as umio.h was generated for.
pub const UMIO_VERSION_MINOR: u32 = 1;

/// umio's patch version, as umio.h was generated for.
pub const UMIO_VERSION_PATCH: u32 = 0;

/// The version as a C string: `env!("CARGO_PKG_VERSION")` and a NUL.
const VERSION: &CStr =
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(v) => v,
        Err(_) => panic!("the package version has no NUL"),
    };

/// The version of the library the program runs with, as a string
/// `"MAJOR.MINOR.PATCH"` (for example `"0.1.0"`), static: never freed,
/// never NULL. Compare it with the UMIO_VERSION_* macros of the header the
/// program was compiled with to detect a library older than the header.
/// Thread-safe, and safe to call at any time, in a forked child too.
#[unsafe(no_mangle)]
pub extern "C" fn umio_version() -> *const c_char {
    VERSION.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macros_and_string_are_the_package_version() {
        let parts = [UMIO_VERSION_MAJOR, UMIO_VERSION_MINOR, UMIO_VERSION_PATCH];
        let expected = [
            env!("CARGO_PKG_VERSION_MAJOR"),
            env!("CARGO_PKG_VERSION_MINOR"),
            env!("CARGO_PKG_VERSION_PATCH"),
        ]
        .map(|p| p.parse::<u32>().unwrap());
        assert_eq!(parts, expected, "UMIO_VERSION_* lag Cargo.toml's version");
        // SAFETY: umio_version returns a static NUL-terminated string.
        let s = unsafe { CStr::from_ptr(umio_version()) };
        assert_eq!(
            s.to_str().unwrap(),
            format!("{}.{}.{}", parts[0], parts[1], parts[2])
        );
    }
}
