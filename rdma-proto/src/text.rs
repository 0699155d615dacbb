//! Peer text made safe to quote: escaped ([`printable`]) and cut short ([`shorten`]).

/// Text that came from the peer (an error `message`, a `result.text`), made safe to print on a
/// terminal: every control character (NUL, ESC, newline, ...) and every invisible character
/// that can reorder, hide or break what a log line shows ([`is_deceptive`]: bidi overrides and
/// isolates, line and paragraph separators, zero-width characters) is escaped as `\u{202e}`;
/// the rest is kept as is. JSON output needs no such care; human output does.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else if is_deceptive(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// The invisible format characters that change how a line reads without showing themselves
/// (the set rustc's `text_direction_codepoint_in_literal` lint and Unicode TR36 name): the bidi
/// embeddings, overrides, isolates and marks, the line and paragraph separators, zero-width
/// spaces and joiners, the word joiner and invisible operators, the byte order mark, the soft
/// hyphen, the Mongolian vowel separator and the interlinear annotation controls.
pub fn is_deceptive(c: char) -> bool {
    matches!(
        c,
        '\u{00ad}'
            | '\u{061c}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
    )
}

/// Peer text quoted in an error message: cut to 40 chars (so a hostile peer cannot make us echo
/// megabytes), then escaped by [`printable`] (so it cannot forge log lines or drive a
/// terminal: error messages end up in both binaries' human logs).
pub(crate) fn shorten(s: &str) -> String {
    const MAX: usize = 40;
    if s.chars().count() <= MAX {
        printable(s)
    } else {
        let mut out = printable(&s.chars().take(MAX).collect::<String>());
        out.push('…');
        out
    }
}
