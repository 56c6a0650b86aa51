//! The source scanner tidy's checks share: code with comments (and string insides) blanked,
//! crate paths, `use` trees expanded to every path they import, the `#[cfg(test)]` modules to
//! leave out, and the functions of a file with their lengths. No check lives here.

/// The code of a Rust file with comments and the insides of string, byte-string, raw-string and
/// char literals replaced by spaces; line breaks are kept, so line numbers do not move.
pub(super) fn code_only(text: &str) -> String {
    scrub(text, false)
}

/// The code and string literals of a Rust file, comments replaced by spaces (line breaks kept).
pub(super) fn code_and_strings(text: &str) -> String {
    scrub(text, true)
}

fn scrub(text: &str, strings: bool) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    let inside = |c: char| if strings { c } else { blank(c) };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_start(&chars, i) {
            // r"..", r#".."#, br".." and cr"..": no escapes, ends at `"` and as many `#`.
            let prefix = if c == 'r' { 1 } else { 2 };
            for _ in 0..prefix + hashes + 1 {
                out.push(' ');
            }
            i += prefix + hashes + 1;
            while i < chars.len() {
                if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
                    for _ in 0..=hashes {
                        out.push(' ');
                    }
                    i += hashes + 1;
                    break;
                }
                out.push(inside(chars[i]));
                i += 1;
            }
        } else if c == '"' {
            // "..", and the `"` of b".." and c".." (their prefix letter stays: harmless).
            out.push(' ');
            i += 1;
            while i < chars.len() {
                match chars[i] {
                    '\\' => {
                        out.push(if strings { '\\' } else { ' ' });
                        if let Some(&escaped) = chars.get(i + 1) {
                            out.push(inside(escaped));
                        }
                        i += 2;
                    }
                    '"' => {
                        out.push(' ');
                        i += 1;
                        break;
                    }
                    other => {
                        out.push(inside(other));
                        i += 1;
                    }
                }
            }
        } else if c == '\''
            && (i == 0
                || !ident(chars[i - 1])
                || (chars[i - 1] == 'b' && (i == 1 || !ident(chars[i - 2]))))
        {
            // 'x', b'x', '\n', '\u{1F600}' are literals; 'a (a lifetime or label) is code.
            let end = if next == Some('\\') {
                // The escaped character itself (at i + 2) may be a quote: '\''.
                (i + 3..chars.len()).find(|&k| chars[k] == '\'')
            } else if chars.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(end) => {
                    for &skipped in &chars[i..=end] {
                        out.push(blank(skipped));
                    }
                    i = end + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// At `i`, the number of `#` of a raw string literal starting there (`r`, `br` or `cr`, then
/// `#`s, then `"`), if one does; `r#ident` (a raw identifier) is not one.
fn raw_string_start(chars: &[char], i: usize) -> Option<usize> {
    if i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_') {
        return None;
    }
    let mut k = i;
    if matches!(chars.get(k), Some('b' | 'c')) {
        k += 1;
    }
    if chars.get(k) != Some(&'r') {
        return None;
    }
    k += 1;
    let hashes = chars[k..].iter().take_while(|&&c| c == '#').count();
    (chars.get(k + hashes) == Some(&'"')).then_some(hashes)
}

/// 1-based line numbers where `krate` is used as a path in `code` (already [`code_only`]):
/// `krate::...`, `use krate`, `extern crate krate`; not `x.krate`, `self::krate::...` or a
/// longer identifier that contains it.
pub(super) fn uses_of(code: &str, krate: &str) -> Vec<usize> {
    let bytes = code.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut lines = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find(krate) {
        let start = from + found;
        let end = start + krate.len();
        from = end;
        if (start > 0 && is_ident(bytes[start - 1])) || (end < bytes.len() && is_ident(bytes[end]))
        {
            continue;
        }
        let before = code[..start].trim_end();
        let after = code[end..].trim_start();
        let path_segment_of_something_else = before
            .strip_suffix("::")
            .map(str::trim_end)
            .is_some_and(|b| b.ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '>'));
        if before.ends_with('.') || path_segment_of_something_else {
            continue;
        }
        let previous_word = before
            .rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
            .next()
            .filter(|_| before.ends_with(|c: char| c.is_alphanumeric() || c == '_'));
        let used = after.starts_with("::") || matches!(previous_word, Some("use" | "crate"));
        if used {
            lines.push(code[..start].matches('\n').count() + 1);
        }
    }
    lines
}

/// Every path a `use` item of `code` (already [`code_only`]) imports, with its 1-based line:
/// `use a::{b, c::{d, self}, e as f};` gives `a::b`, `a::c::d`, `a::c`, `a::e`. Groups nest to
/// any depth, so a name inside `{...}` cannot hide.
pub(super) fn use_paths(code: &str) -> Vec<(usize, String)> {
    let bytes = code.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("use") {
        let start = from + at;
        from = start + 3;
        let before_ok = start == 0 || !is_ident(bytes[start - 1]);
        let after_ok = bytes
            .get(start + 3)
            .is_some_and(|b| b.is_ascii_whitespace() || *b == b'{' || *b == b':');
        if !before_ok || !after_ok {
            continue;
        }
        let Some(end) = code[from..].find(';').map(|e| from + e) else { break };
        let line = code[..start].matches('\n').count() + 1;
        for path in expand("", &normalize(&code[from..end])) {
            found.push((line, path));
        }
        from = end;
    }
    found
}

/// The paths of a use tree (no whitespace) under `prefix`.
fn expand(prefix: &str, tree: &str) -> Vec<String> {
    let join = |p: &str, s: &str| if p.is_empty() { s.to_owned() } else { format!("{p}::{s}") };
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim_end_matches("::");
        let inner = tree[open + 1..].strip_suffix('}').unwrap_or(&tree[open + 1..]);
        let prefix = if head.is_empty() { prefix.to_owned() } else { join(prefix, head) };
        return split_top(inner).into_iter().flat_map(|part| expand(&prefix, part)).collect();
    }
    match tree.split(" as ").next().unwrap_or(tree) {
        "" => Vec::new(),
        "self" => vec![prefix.to_owned()],
        name => vec![join(prefix, name)],
    }
}

/// A use tree with its whitespace folded: one space where words meet (`e as f`), none next to
/// `:`, `{`, `}` or `,`.
fn normalize(tree: &str) -> String {
    let words = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let chars: Vec<char> = words.chars().collect();
    let tight = |c: Option<&char>| c.is_some_and(|c| ":{},".contains(*c));
    (0..chars.len())
        .filter(|&i| {
            chars[i] != ' ' || !(tight(chars.get(i.wrapping_sub(1))) || tight(chars.get(i + 1)))
        })
        .map(|i| chars[i])
        .collect()
}

/// `a, b::{c, d}, e` split at the commas outside braces.
fn split_top(inner: &str) -> Vec<&str> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
}

/// Byte ranges of `code` (already [`code_only`]) that are test code: every `#[cfg(test)]` item
/// (a `mod tests { ... }` or a function), to its closing brace.
pub(super) fn test_spans(code: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("#[cfg(test)]") {
        let start = from + at;
        let Some(end) = item_end(code, start) else { break };
        spans.push((start, end));
        from = end;
    }
    spans
}

/// The end (past the closing brace) of the item starting at `start`: the first `{` before any
/// `;`, matched. `None` for an item without a body.
fn item_end(code: &str, start: usize) -> Option<usize> {
    let open = start + code[start..].find(['{', ';'])?;
    if code.as_bytes()[open] == b';' {
        return Some(open + 1);
    }
    let mut depth = 0usize;
    for (i, c) in code[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(open + i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// A function of a file: its name, the line it starts on, and how many lines it spans.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Function {
    pub(super) name: String,
    pub(super) line: usize,
    pub(super) lines: usize,
}

/// Every function with a body in `code` (already [`code_only`]) outside `#[cfg(test)]` items,
/// nested ones included.
pub(super) fn functions(code: &str) -> Vec<Function> {
    let tests = test_spans(code);
    let bytes = code.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("fn ") {
        let start = from + at;
        from = start + 3;
        if (start > 0 && is_ident(bytes[start - 1]))
            || tests.iter().any(|&(a, b)| (a..b).contains(&start))
        {
            continue;
        }
        let name: String =
            code[from..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        if name.is_empty() {
            continue; // `fn(u8)`, a pointer type
        }
        let Some(end) = item_end(code, start) else { continue };
        if bytes[end - 1] != b'}' {
            continue; // a trait's declaration
        }
        found.push(Function {
            name,
            line: code[..start].matches('\n').count() + 1,
            lines: code[start..end].matches('\n').count() + 1,
        });
    }
    found
}

/// How many lines of `code` (already [`code_only`]) are not test code.
pub(super) fn lines_outside_tests(code: &str) -> usize {
    let mut kept = String::with_capacity(code.len());
    let mut at = 0;
    for (start, end) in test_spans(code) {
        kept.push_str(&code[at..start]);
        at = end;
    }
    kept.push_str(&code[at..]);
    kept.trim_end().lines().count()
}
