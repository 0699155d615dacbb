//! Text helpers for reports: cutting long output to its head or tail, indenting it.

/// The last `max` bytes of `s` (on a char boundary), prefixed with "..." when cut.
pub fn tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &s[start..])
}

/// The first `max` bytes of `s` (on a char boundary), followed by "…" when cut.
pub fn shorten(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Every line of `text` indented by eight spaces (under a report line).
pub fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("        {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_cuts_on_char_boundary() {
        assert_eq!(tail("abc", 10), "abc");
        assert_eq!(tail("abcdef", 3), "...def");
        assert_eq!(tail("aé", 1), "...");
    }

    #[test]
    fn shorten_cuts_on_char_boundary() {
        assert_eq!(shorten("abc", 3), "abc");
        assert_eq!(shorten("abcdef", 3), "abc…");
        assert_eq!(shorten("héllo", 2), "h…");
    }

    #[test]
    fn indent_prefixes_every_line() {
        assert_eq!(indent("a\nb"), "        a\n        b");
        assert_eq!(indent(""), "");
    }
}
