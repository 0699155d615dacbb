//! Peer text made safe to quote: escaped ([`printable`]) and cut short ([`shorten`],
//! [`printable_capped`]).

/// Text that came from the peer (an error `message`, a `result.text`), made safe to print on a
/// terminal: every control character (NUL, ESC, newline, ...) is escaped as Rust does (`\n`,
/// `\u{1b}`), and every other char that can reorder, hide or break what a log line shows
/// ([`is_deceptive`]) as `\u{202e}`; the rest is kept as is. JSON output needs no such care;
/// human output does.
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

/// [`printable`] of at most the first `max` bytes of `text` (cut on a char boundary), with a
/// marker that says how many bytes were left out: peer text logged whole could fill a log
/// line with up to a line's 64 KiB; the protocol's bound on human text is [`crate::MAX_TEXT`].
pub fn printable_capped(text: &str, max: usize) -> String {
    if text.len() <= max {
        return printable(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let (kept, left) = text.split_at(end);
    let mut out = printable(kept);
    out.push_str(&format!("… ({} more bytes not shown)", left.len()));
    out
}

/// The chars that change how a line reads without showing themselves, or that show as nothing
/// a reader can name: every char of the Unicode general categories Cc (controls), Cf (format:
/// bidi embeddings, overrides, isolates and marks, zero-width spaces and joiners, the byte
/// order mark, the soft hyphen, tag characters, interlinear annotations, invisible operators),
/// Zl and Zp (line and paragraph separators), Co (private use), Cs and Cn (unassigned: a
/// terminal's font may map them to anything), and every Default_Ignorable_Code_Point
/// (UAX #44: the variation selectors, the Hangul fillers, the combining grapheme joiner, the
/// Mongolian free variation selectors and the ranges Unicode keeps for future ignorables).
pub fn is_deceptive(c: char) -> bool {
    use unicode_properties::{GeneralCategory as Gc, UnicodeGeneralCategory as _};
    matches!(
        c.general_category(),
        Gc::Control
            | Gc::Format
            | Gc::LineSeparator
            | Gc::ParagraphSeparator
            | Gc::PrivateUse
            | Gc::Surrogate
            | Gc::Unassigned
    ) || is_ignorable_beyond_format(c)
}

/// The Default_Ignorable_Code_Points (DerivedCoreProperties.txt) that are not of a category
/// [`is_deceptive`] escapes as a whole: Other_Default_Ignorable_Code_Point, the
/// Variation_Selectors, and the blocks Unicode reserves for default-ignorable chars (so a char
/// assigned there later is escaped before this table knows it). The rest of the property is
/// Cf, which is escaped by category.
fn is_ignorable_beyond_format(c: char) -> bool {
    matches!(
        c,
        '\u{034f}' // combining grapheme joiner (Mn)
            | '\u{115f}'..='\u{1160}' // Hangul choseong and jungseong fillers (Lo)
            | '\u{17b4}'..='\u{17b5}' // Khmer inherent vowels (Mn)
            | '\u{180b}'..='\u{180f}' // Mongolian free variation selectors, vowel separator
            | '\u{2060}'..='\u{206f}' // word joiner, invisible operators, deprecated format
            | '\u{3164}' // Hangul filler (Lo)
            | '\u{fe00}'..='\u{fe0f}' // variation selectors (Mn)
            | '\u{ffa0}' // halfwidth Hangul filler (Lo)
            | '\u{fff0}'..='\u{fffb}' // reserved, interlinear annotation controls
            | '\u{e0000}'..='\u{e0fff}' // tags, variation selectors supplement, reserved
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use regex_syntax::hir::{Class, HirKind};

    /// The chars that must never reach a log raw, from an independent Unicode table
    /// (regex-syntax's): control, format, line and paragraph separators, private use, and
    /// every default-ignorable code point. Unassigned chars (Cn) are left out here: the two
    /// tables need not share a Unicode version, and a char assigned since is not unassigned.
    const HIDDEN: &str = r"[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Co}\p{Default_Ignorable_Code_Point}]";

    fn hidden() -> Vec<(char, char)> {
        let hir = regex_syntax::parse(HIDDEN).expect("the class parses");
        let HirKind::Class(Class::Unicode(class)) = hir.kind() else {
            panic!("{HIDDEN} is not a Unicode class: {hir:?}");
        };
        class
            .ranges()
            .iter()
            .map(|r| (r.start(), r.end()))
            .collect()
    }

    fn is_hidden(ranges: &[(char, char)], c: char) -> bool {
        ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&c))
    }

    /// Every char of the hidden classes, one by one, comes out escaped: no hidden char
    /// survives `printable`, and `is_deceptive` names every one that is not a control.
    #[test]
    fn every_hidden_char_is_escaped() {
        let ranges = hidden();
        let mut missed = Vec::new();
        for &(lo, hi) in &ranges {
            for c in lo..=hi {
                let shown = printable(&c.to_string());
                if shown.chars().any(|s| is_hidden(&ranges, s)) {
                    missed.push(format!("U+{:04X}", u32::from(c)));
                }
            }
        }
        assert!(
            missed.is_empty(),
            "{} hidden chars printed raw, e.g. {:?}",
            missed.len(),
            &missed[..missed.len().min(20)]
        );
    }

    /// The families a security review named, each checked by name (not only by the table).
    #[test]
    fn the_named_invisible_families_are_escaped() {
        let named: &[(u32, u32)] = &[
            (0xE0000, 0xE007F),
            (0xFE00, 0xFE0F),
            (0xE0100, 0xE01EF),
            (0x115F, 0x1160),
            (0x3164, 0x3164),
            (0xFFA0, 0xFFA0),
            (0x034F, 0x034F),
            (0x180B, 0x180F),
            (0x2060, 0x206F),
            (0xFFF9, 0xFFFB),
            (0x1D173, 0x1D17A),
            (0x00AD, 0x00AD),
            (0x061C, 0x061C),
            (0x200B, 0x200F),
            (0x202A, 0x202E),
            (0x2028, 0x2029),
            (0xFEFF, 0xFEFF),
            (0xE000, 0xE000),     // private use
            (0x10FFFD, 0x10FFFD), // private use, plane 16
            (0x0378, 0x0378),     // unassigned
        ];
        for &(lo, hi) in named {
            for c in (lo..=hi).filter_map(char::from_u32) {
                let shown = printable(&format!("a{c}b"));
                assert!(
                    shown.is_ascii(),
                    "U+{:04X} shown as {shown:?}",
                    u32::from(c)
                );
                assert!(shown.starts_with('a') && shown.ends_with('b'), "{shown:?}");
            }
        }
    }

    proptest! {
        /// Text mixing ordinary words with hidden chars: what is printed has no hidden char,
        /// and the ordinary text is kept as it was.
        #[test]
        fn printable_text_has_no_hidden_char(
            parts in proptest::collection::vec(
                (
                    "[a-zA-Z0-9 éß世界שלום🦀]{0,8}",
                    proptest::string::string_regex(&format!("{HIDDEN}{{0,3}}"))
                        .expect("the class is a valid regex"),
                ),
                0..8,
            )
        ) {
            let ranges = hidden();
            let text: String = parts.iter().map(|(a, b)| format!("{a}{b}")).collect();
            let shown = printable(&text);
            prop_assert!(!shown.chars().any(|c| is_hidden(&ranges, c)), "{shown:?}");
            let mut rest = shown.as_str();
            for (plain, _) in &parts {
                let at = rest.find(plain.as_str());
                prop_assert!(at.is_some(), "{plain:?} lost from {shown:?}");
                rest = &rest[at.unwrap_or(0) + plain.len()..];
            }
        }

        /// Peer text cut for a log: at most the cap (on a char boundary) plus a marker that
        /// says how much was left out; short text is only escaped.
        #[test]
        fn capped_text_is_cut_with_a_marker(text in ".{0,300}", cap in 0usize..200) {
            let shown = printable_capped(&text, cap);
            if text.len() <= cap {
                prop_assert_eq!(shown, printable(&text));
            } else {
                let mut end = cap;
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                let marker = format!("… ({} more bytes not shown)", text.len() - end);
                prop_assert!(shown.ends_with(&marker), "{shown:?}");
                prop_assert_eq!(&shown[..shown.len() - marker.len()], printable(&text[..end]));
            }
        }
    }

    /// A 64 KiB error message from a peer is logged as its first MAX_TEXT bytes and a marker.
    #[test]
    fn a_long_peer_message_is_logged_cut() {
        let long = "x".repeat(64 * 1024 - 100);
        let shown = printable_capped(&long, crate::MAX_TEXT);
        assert!(shown.len() < crate::MAX_TEXT + 40, "{}", shown.len());
        assert!(shown.starts_with(&"x".repeat(crate::MAX_TEXT)));
        assert!(shown.ends_with(&format!("… ({} more bytes not shown)", long.len() - 1024)));
    }
}
