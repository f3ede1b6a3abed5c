//! The Markdown report: sections of prose and tables, charts linked as SVG files, all
//! written into the results folder.

use std::fmt::Write;
use std::path::Path;

use crate::common::BResult;

/// One chart: a file name inside the results folder and its SVG text.
pub struct Chart {
    pub file: String,
    pub title: String,
    pub svg: String,
}

/// What one section contributes.
pub struct Section {
    pub title: String,
    pub body: String,
    pub charts: Vec<Chart>,
    /// Wall time the section took.
    pub secs: f64,
}

impl Section {
    pub fn new(title: impl Into<String>) -> Self {
        Section {
            title: title.into(),
            body: String::new(),
            charts: Vec::new(),
            secs: 0.0,
        }
    }

    pub fn para(&mut self, text: impl AsRef<str>) {
        let _ = writeln!(self.body, "{}\n", text.as_ref());
    }

    pub fn heading(&mut self, text: impl AsRef<str>) {
        let _ = writeln!(self.body, "### {}\n", text.as_ref());
    }

    pub fn table(&mut self, headers: &[&str], rows: &[Vec<String>]) {
        self.body.push_str(&table(headers, rows));
        self.body.push('\n');
    }
}

/// A Markdown table.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "| {} |", headers.join(" | "));
    let _ = writeln!(
        s,
        "|{}|",
        headers
            .iter()
            .enumerate()
            .map(|(i, _)| if i == 0 { "---" } else { "---:" })
            .collect::<Vec<_>>()
            .join("|")
    );
    for r in rows {
        let cells: Vec<String> = r.iter().map(|c| c.replace('|', "\\|")).collect();
        let _ = writeln!(s, "| {} |", cells.join(" | "));
    }
    s
}

/// Writes `report.md` and every chart; returns the report path.
pub fn write(out: &Path, header: &str, sections: &[Section]) -> BResult<std::path::PathBuf> {
    std::fs::create_dir_all(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let mut md = String::new();
    md.push_str(header);
    md.push('\n');
    for s in sections {
        let _ = writeln!(md, "## {}\n", s.title);
        let _ = writeln!(md, "_Section wall time: {:.1} s._\n", s.secs);
        md.push_str(&s.body);
        for c in &s.charts {
            let path = out.join(&c.file);
            std::fs::write(&path, &c.svg)
                .map_err(|e| format!("writing {}: {e}", path.display()))?;
            let _ = writeln!(md, "![{}]({})\n", c.title, c.file);
        }
    }
    let path = out.join("report.md");
    std::fs::write(&path, md).map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    #[test]
    fn table_shape() {
        let t = super::table(&["a", "b"], &[vec!["1".into(), "x|y".into()]]);
        assert_eq!(t, "| a | b |\n|---|---:|\n| 1 | x\\|y |\n");
    }
}
