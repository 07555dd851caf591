//! The examples' command lines, one parser for all: clap's builder API.
//! Each example declares its flags with [`command`] and [`opt`]; `--help`
//! prints what the example does and its flags with their defaults, and a
//! bad flag or value exits with status 2 and a message naming it.
//!
//! ```
//! use umio_bench::cli::{self, value_parser};
//! let m = cli::command("demo", "What the example does.")
//!     .arg(cli::opt("size", "MiB", "256", "size of the data file").value_parser(value_parser!(usize)))
//!     .try_get_matches_from(["demo", "--size", "64"])
//!     .unwrap();
//! assert_eq!(cli::get::<usize>(&m, "size"), 64);
//! ```

pub use clap::{Arg, ArgAction, ArgMatches, Command, value_parser};

/// An example's command: `name` and what it does (`about`, printed by
/// `--help` above the flags).
pub fn command(name: &'static str, about: &'static str) -> Command {
    Command::new(name).about(about).disable_version_flag(true)
}

/// A `--long VALUE` flag with a default, shown by `--help` (add
/// `.value_parser(value_parser!(T))` for a type other than `String`).
pub fn opt(
    long: &'static str,
    value_name: &'static str,
    default: &'static str,
    help: &'static str,
) -> Arg {
    Arg::new(long)
        .long(long)
        .value_name(value_name)
        .default_value(default)
        .help(help)
}

/// A `--long VALUE` flag without a default.
pub fn opt_none(long: &'static str, value_name: &'static str, help: &'static str) -> Arg {
    Arg::new(long).long(long).value_name(value_name).help(help)
}

/// A `--long` switch.
pub fn switch(long: &'static str, help: &'static str) -> Arg {
    Arg::new(long)
        .long(long)
        .action(ArgAction::SetTrue)
        .help(help)
}

/// The value of flag `id`, which has a default.
///
/// # Panics
/// If `id` has no value or another type (a bug of the example's
/// declarations).
pub fn get<T: Clone + Send + Sync + 'static>(m: &ArgMatches, id: &str) -> T {
    m.get_one::<T>(id)
        .unwrap_or_else(|| panic!("--{id} has no value"))
        .clone()
}

/// The value of flag `id` if given.
pub fn get_opt<T: Clone + Send + Sync + 'static>(m: &ArgMatches, id: &str) -> Option<T> {
    m.get_one::<T>(id).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd() -> Command {
        command("t", "A test.")
            .arg(opt("size", "MiB", "256", "size").value_parser(value_parser!(usize)))
            .arg(opt_none("conf", "PATH", "a file"))
            .arg(switch("all", "everything"))
    }

    #[test]
    fn defaults_values_and_errors() {
        let m = cmd().try_get_matches_from(["t"]).unwrap();
        assert_eq!(get::<usize>(&m, "size"), 256);
        assert_eq!(get_opt::<String>(&m, "conf"), None);
        assert!(!m.get_flag("all"));
        let m = cmd()
            .try_get_matches_from(["t", "--size=64", "--conf", "x", "--all"])
            .unwrap();
        assert_eq!(get::<usize>(&m, "size"), 64);
        assert_eq!(get_opt::<String>(&m, "conf").as_deref(), Some("x"));
        assert!(m.get_flag("all"));
        let e = cmd()
            .try_get_matches_from(["t", "--size", "x"])
            .unwrap_err();
        assert!(e.to_string().contains("--size"), "{e}");
        let e = cmd().try_get_matches_from(["t", "--bogus"]).unwrap_err();
        assert!(e.to_string().contains("--bogus"), "{e}");
        let help = cmd().render_help().to_string();
        assert!(
            help.contains("A test.") && help.contains("--size <MiB>"),
            "{help}"
        );
        assert!(help.contains("[default: 256]"), "{help}");
    }
}
