//! Error texts for people: an error and its causes, each said once.
//!
//! Many errors put their cause in their own message *and* return it from `source()` (sqlx's
//! `error returned from database: {0}`, thiserror's `cannot read {path}: {source}`), so printing the
//! chain (`{e:#}`, or joining every `source()`) repeats it: `…: permission denied for table t: permission
//! denied for table t`. [`chain`] leaves out a cause whose text the message already holds.

use std::error::Error;

/// `error: cause: cause's cause`, leaving out every cause already part of the text before it.
pub fn chain(e: &dyn Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("cannot read {path}: {source}")]
    struct Read {
        path: String,
        source: std::io::Error,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("loading the policy")]
    struct Loading(#[source] Read);

    #[test]
    fn a_cause_the_message_already_says_is_left_out() {
        let read = Read {
            path: "/p".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        };
        assert_eq!(chain(&read), "cannot read /p: entity not found");
        assert_eq!(
            chain(&Loading(read)),
            "loading the policy: cannot read /p: entity not found"
        );
    }

    #[test]
    fn causes_not_yet_said_are_joined_in_order() {
        let io = std::io::Error::other(Loading(Read {
            path: "/q".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        }));
        // io::Error::other displays its inner error and returns the inner error's source.
        assert_eq!(
            chain(&io),
            "loading the policy: cannot read /q: permission denied"
        );
    }
}
