//! The benchmark tool's one output format (`examples/bench`): a [`Table`]
//! of named columns, printed as an aligned text table for the terminal,
//! written as a CSV file for other programs, and read back from that CSV
//! by the report (`bench report`), which builds its Markdown tables and its
//! plots from the files, not from the measuring code.
//!
//! A cell is text; numbers are written with [`num`] (a missing value, a
//! side skipped or not measured, is the empty cell, shown as `-`).
//!
//! ```
//! use umio_bench::table::{Table, num};
//! let mut t = Table::new("demo", ["round", "umio reads/s", "mmap reads/s"]);
//! t.push([num(1.0, 0), num(28512.4, 0), num(f64::NAN, 0)]);
//! let back = Table::from_csv("demo", &t.to_csv()).unwrap();
//! assert_eq!(back, t);
//! assert_eq!(back.numbers("umio reads/s"), vec![28512.0]);
//! assert!(back.numbers("mmap reads/s")[0].is_nan());
//! assert!(t.to_text().contains("28512"));
//! ```

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::bench::Result;

/// Rows of cells under named columns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Table {
    /// The file stem of its CSV (`NAME.csv`).
    pub name: String,
    /// The column names.
    pub columns: Vec<String>,
    /// The rows, each as long as `columns`.
    pub rows: Vec<Vec<String>>,
}

/// `v` with `prec` decimals, or the empty cell for NaN (not measured).
pub fn num(v: f64, prec: usize) -> String {
    if v.is_nan() {
        String::new()
    } else {
        format!("{v:.prec$}")
    }
}

impl Table {
    /// An empty table named `name` with `columns`.
    pub fn new<S: Into<String>>(name: &str, columns: impl IntoIterator<Item = S>) -> Table {
        Table {
            name: name.to_string(),
            columns: columns.into_iter().map(Into::into).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    ///
    /// # Panics
    /// If the row's length is not the number of columns (a bug of the
    /// caller).
    pub fn push<S: Into<String>>(&mut self, row: impl IntoIterator<Item = S>) {
        let row: Vec<String> = row.into_iter().map(Into::into).collect();
        assert_eq!(
            row.len(),
            self.columns.len(),
            "a row of {} cells in table {} of {} columns",
            row.len(),
            self.name,
            self.columns.len()
        );
        self.rows.push(row);
    }

    /// The index of column `name`.
    pub fn col(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }

    /// Column `name`'s cells as text (empty if there is no such column).
    pub fn texts(&self, name: &str) -> Vec<String> {
        match self.col(name) {
            Some(k) => self.rows.iter().map(|r| r[k].clone()).collect(),
            None => Vec::new(),
        }
    }

    /// Column `name`'s cells as numbers: NaN for a cell that is not one
    /// (the empty cell of a value not measured); empty if there is no such
    /// column.
    pub fn numbers(&self, name: &str) -> Vec<f64> {
        self.texts(name)
            .iter()
            .map(|c| c.trim().parse().unwrap_or(f64::NAN))
            .collect()
    }

    fn shown(c: &str) -> &str {
        if c.is_empty() { "-" } else { c }
    }

    /// The table aligned for a terminal: text left, numbers right, a rule
    /// under the header.
    pub fn to_text(&self) -> String {
        let mut w: Vec<usize> = self.columns.iter().map(|c| c.chars().count()).collect();
        for r in &self.rows {
            for (k, c) in r.iter().enumerate() {
                w[k] = w[k].max(Self::shown(c).chars().count());
            }
        }
        let numeric: Vec<bool> = (0..self.columns.len())
            .map(|k| {
                self.rows
                    .iter()
                    .all(|r| r[k].is_empty() || r[k].trim().parse::<f64>().is_ok())
            })
            .collect();
        let line = |cells: &mut dyn Iterator<Item = &str>| {
            let mut s = String::new();
            for (k, c) in cells.enumerate() {
                if k > 0 {
                    s.push_str("  ");
                }
                let pad = w[k].saturating_sub(c.chars().count());
                if numeric[k] {
                    s.push_str(&" ".repeat(pad));
                    s.push_str(c);
                } else {
                    s.push_str(c);
                    s.push_str(&" ".repeat(pad));
                }
            }
            s.trim_end().to_string() + "\n"
        };
        let mut s = line(&mut self.columns.iter().map(String::as_str));
        let total = w.iter().sum::<usize>() + 2 * w.len().saturating_sub(1);
        s.push_str(&"-".repeat(total));
        s.push('\n');
        for r in &self.rows {
            s.push_str(&line(&mut r.iter().map(|c| Self::shown(c))));
        }
        s
    }

    /// Prints [`to_text`](Self::to_text) to standard output.
    pub fn print(&self) {
        print!("{}", self.to_text());
    }

    /// The table as a Markdown table (numbers right-aligned).
    pub fn markdown(&self) -> String {
        let esc = |c: &str| Self::shown(c).replace('|', "\\|");
        let mut s = String::new();
        let _ = writeln!(
            s,
            "| {} |",
            self.columns
                .iter()
                .map(|c| esc(c))
                .collect::<Vec<_>>()
                .join(" | ")
        );
        let _ = writeln!(
            s,
            "|{}|",
            (0..self.columns.len())
                .map(|k| {
                    let num = !self.rows.is_empty()
                        && self
                            .rows
                            .iter()
                            .all(|r| r[k].is_empty() || r[k].trim().parse::<f64>().is_ok());
                    if num { "---:" } else { "---" }
                })
                .collect::<Vec<_>>()
                .join("|")
        );
        for r in &self.rows {
            let _ = writeln!(
                s,
                "| {} |",
                r.iter().map(|c| esc(c)).collect::<Vec<_>>().join(" | ")
            );
        }
        s
    }

    /// The table as CSV (RFC 4180: a header line, then a line per row;
    /// a cell with a comma, a quote or a line break is quoted).
    pub fn to_csv(&self) -> String {
        let cell = |c: &str| {
            if c.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", c.replace('"', "\"\""))
            } else {
                c.to_string()
            }
        };
        let mut s = String::new();
        for r in std::iter::once(&self.columns).chain(&self.rows) {
            s.push_str(&r.iter().map(|c| cell(c)).collect::<Vec<_>>().join(","));
            s.push('\n');
        }
        s
    }

    /// Parses the CSV of [`to_csv`](Self::to_csv) as table `name`.
    pub fn from_csv(name: &str, text: &str) -> Result<Table> {
        let mut records: Vec<Vec<String>> = Vec::new();
        let (mut rec, mut cell) = (Vec::new(), String::new());
        let (mut quoted, mut any) = (false, false);
        let mut chars = text.chars().peekable();
        while let Some(ch) = chars.next() {
            any = true;
            match (quoted, ch) {
                (true, '"') if chars.peek() == Some(&'"') => {
                    chars.next();
                    cell.push('"');
                }
                (true, '"') => quoted = false,
                (true, c) => cell.push(c),
                (false, '"') if cell.is_empty() => quoted = true,
                (false, ',') => rec.push(std::mem::take(&mut cell)),
                (false, '\r') => {}
                (false, '\n') => {
                    rec.push(std::mem::take(&mut cell));
                    records.push(std::mem::take(&mut rec));
                    any = false;
                }
                (false, c) => cell.push(c),
            }
        }
        if quoted {
            return Err(format!("{name}.csv: a quoted cell is not closed").into());
        }
        if any {
            rec.push(cell);
            records.push(rec);
        }
        let mut it = records.into_iter();
        let columns = it.next().ok_or(format!("{name}.csv: no header line"))?;
        let rows: Vec<Vec<String>> = it.collect();
        if let Some((i, r)) = rows
            .iter()
            .enumerate()
            .find(|(_, r)| r.len() != columns.len())
        {
            return Err(format!(
                "{name}.csv: line {} has {} cells, the header {}",
                i + 2,
                r.len(),
                columns.len()
            )
            .into());
        }
        Ok(Table {
            name: name.to_string(),
            columns,
            rows,
        })
    }

    /// Writes `DIR/NAME.csv`; returns its path.
    pub fn write_csv(&self, dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(format!("{}.csv", self.name));
        std::fs::write(&path, self.to_csv())
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        Ok(path)
    }

    /// Reads `DIR/NAME.csv`.
    pub fn read_csv(dir: &Path, name: &str) -> Result<Table> {
        let path = dir.join(format!("{name}.csv"));
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        Table::from_csv(name, &text)
    }
}

/// The median of `v` (NaN left out; NaN if nothing is left).
pub fn median(v: &[f64]) -> f64 {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    (v[(n - 1) / 2] + v[n / 2]) / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_round_trips_quotes_commas_and_missing_values() {
        let mut t = Table::new("t", ["side", "rate, k/s", "note"]);
        t.push(["umio", "12.5", "a \"quoted\" note, with a comma"]);
        t.push(["mmap", "", "line\nbreak"]);
        let csv = t.to_csv();
        assert!(csv.starts_with("side,\"rate, k/s\",note\n"), "{csv}");
        let back = Table::from_csv("t", &csv).unwrap();
        assert_eq!(back, t);
        assert_eq!(back.numbers("rate, k/s")[0], 12.5);
        assert!(back.numbers("rate, k/s")[1].is_nan());
        assert!(back.numbers("nope").is_empty());
    }

    #[test]
    fn bad_csv_is_an_error() {
        assert!(Table::from_csv("t", "").is_err());
        assert!(Table::from_csv("t", "a,b\n1\n").is_err());
        assert!(Table::from_csv("t", "a\n\"open\n").is_err());
    }

    #[test]
    fn text_is_aligned_and_markdown_marks_numeric_columns() {
        let mut t = Table::new("t", ["side", "reads/s"]);
        t.push(["umio", "28512"]);
        t.push(["mmap default", ""]);
        let text = t.to_text();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "side          reads/s");
        assert_eq!(lines[2], "umio            28512");
        assert_eq!(lines[3], "mmap default        -");
        let md = t.markdown();
        assert!(md.contains("|---|---:|"), "{md}");
        assert!(md.contains("| mmap default | - |"), "{md}");
    }

    #[test]
    fn median_skips_missing_values() {
        assert_eq!(median(&[3.0, f64::NAN, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[1.0, 2.0]), 1.5);
        assert!(median(&[f64::NAN]).is_nan());
    }

    #[test]
    fn files_are_written_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = Table::new("rates", ["a"]);
        t.push([num(1.234, 2)]);
        let p = t.write_csv(dir.path()).unwrap();
        assert_eq!(p, dir.path().join("rates.csv"));
        assert_eq!(Table::read_csv(dir.path(), "rates").unwrap(), t);
        assert!(Table::read_csv(dir.path(), "absent").is_err());
    }
}
