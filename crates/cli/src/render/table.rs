//! Aligned plain-text tables: an upper-case header row, columns separated by two spaces, the last column
//! unpadded (so lines carry no trailing blanks). Empty values print as `-`.

/// A table being built row by row.
#[derive(Debug, Clone, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(headers: &[&str]) -> Table {
        Table {
            headers: headers.iter().map(|h| h.to_uppercase()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells print as `-`, extra cells are ignored.
    pub fn row(&mut self, cells: Vec<String>) {
        let mut cells: Vec<String> = cells
            .into_iter()
            .map(|c| {
                // One row per record: a multi-line error keeps only its first line here (`describe` shows all).
                let c = c.lines().next().unwrap_or("").trim_end();
                let c = super::printable(c).replace('\t', "\\t");
                if c.is_empty() {
                    "-".to_string()
                } else {
                    c
                }
            })
            .collect();
        cells.resize(self.headers.len(), "-".to_string());
        self.rows.push(cells);
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub fn render(&self) -> String {
        let n = self.headers.len();
        let mut widths: Vec<usize> = self.headers.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (w, c) in widths.iter_mut().zip(r) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        for r in std::iter::once(&self.headers).chain(&self.rows) {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate() {
                line.push_str(c);
                if i + 1 < n {
                    let pad = widths[i] - c.chars().count() + 2;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_and_blanks_show_as_dash() {
        let mut t = Table::new(&["name", "vm_id", "error"]);
        t.row(vec!["dev-nextcloud".into(), "2100".into(), "".into()]);
        t.row(vec![
            "db".into(),
            "".into(),
            "pct create failed\nmore".into(),
        ]);
        assert_eq!(
            t.render(),
            "NAME           VM_ID  ERROR\n\
             dev-nextcloud  2100   -\n\
             db             -      pct create failed\n"
        );
    }

    /// Issue 24 item 7: a name, file name or error holding terminal escape sequences prints them escaped.
    #[test]
    fn control_characters_in_cells_are_escaped() {
        let mut t = Table::new(&["file", "error"]);
        t.row(vec![
            "evil\u{1b}]0;pwned\u{7}.yaml".into(),
            "a\rb\tc\u{9b}31m".into(),
        ]);
        let text = t.render();
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert!(text.contains("evil\\u{1b}]0;pwned\\u{7}.yaml"), "{text}");
        assert!(text.contains("a\\u{d}b\\tc\\u{9b}31m"), "{text}");
        assert_eq!(
            super::super::printable("plain\nlines\tand tabs"),
            "plain\nlines\tand tabs"
        );
    }
}
