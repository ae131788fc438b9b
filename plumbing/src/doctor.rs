//! The report both `doctor` commands print: one line per check, `✓` fine, `!` worth knowing, `✗` wrong,
//! with the fix on the line below; the exit status is 1 when anything is wrong.

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    Ok,
    Note,
    Wrong,
}

/// The lines printed, in order.
#[derive(Debug, Default)]
pub struct Report {
    lines: Vec<(Mark, String, Option<String>)>,
}

impl Report {
    pub fn ok(&mut self, what: impl Into<String>) {
        self.lines.push((Mark::Ok, what.into(), None));
    }
    pub fn note(&mut self, what: impl Into<String>, fix: impl Into<String>) {
        self.lines.push((Mark::Note, what.into(), Some(fix.into())));
    }
    pub fn wrong(&mut self, what: impl Into<String>, fix: impl Into<String>) {
        self.lines
            .push((Mark::Wrong, what.into(), Some(fix.into())));
    }
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (mark, what, fix) in &self.lines {
            let m = match mark {
                Mark::Ok => "✓",
                Mark::Note => "!",
                Mark::Wrong => "✗",
            };
            out += &format!("{m} {what}\n");
            if let Some(fix) = fix.as_ref().filter(|f| !f.is_empty()) {
                out += &format!("    → {fix}\n");
            }
        }
        out
    }
    pub fn failed(&self) -> bool {
        self.lines.iter().any(|(m, _, _)| *m == Mark::Wrong)
    }

    /// Prints the report on standard output. A reader that went away (`doctor | head -1`) is no
    /// failure here: the exit status still gives the verdict. Any other write error is.
    pub fn print(&self) -> Result<(), crate::output::OutputError> {
        match crate::out!("{}", self.render()) {
            Err(crate::output::OutputError::Closed) => Ok(()),
            other => other,
        }
    }
}

/// One line per unknown `APIARY_*` variable (a typo is wrong, a stranger's only noted), or one ✓.
pub fn check_variables(r: &mut Report) {
    let env: Vec<(String, String)> = std::env::vars().collect();
    let unknown = crate::env::unknown_vars(&env);
    if unknown.is_empty() {
        r.ok("APIARY_* variables are all known");
    }
    for u in unknown {
        if u.is_typo() {
            r.wrong(u.message(), "rename the variable");
        } else {
            r.note(u.message(), "");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_carry_their_mark_and_fix_and_only_a_wrong_one_fails() {
        let mut r = Report::default();
        r.ok("fine");
        r.note("so-so", "");
        assert!(!r.failed());
        r.wrong("broken", "mend it");
        assert!(r.failed());
        assert_eq!(r.render(), "✓ fine\n! so-so\n✗ broken\n    → mend it\n");
    }
}
