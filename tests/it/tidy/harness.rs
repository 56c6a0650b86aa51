//! The test suite's own rules, checked over `tests/` (docs/testing.md): no fixed sleep before an
//! assert (a sleep only paces a loop that waits for a state, with a deadline), and every skip
//! for want of a tool goes through `tests/lib/skip.rs` (no hand-written "skipped" note and early
//! return, which reads as a pass). Each failure names `file:line`.

use super::scan::{code_and_strings, code_only};

/// Whether `word` occurs in `text` as a whole identifier.
fn has_word(text: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(ident) && !after.is_some_and(ident)
    })
}

/// Whether the code at byte `at` is inside the body of a `loop`, `while` or `for`, before the
/// function (or closure-free item) that holds it ends the search: each enclosing `{` is looked at
/// with its header, the code from the statement before it.
fn in_loop(code: &str, at: usize) -> bool {
    let bytes = code.as_bytes();
    let mut depth = 0usize;
    let mut i = at;
    while i > 0 {
        i -= 1;
        match bytes[i] {
            b'}' => depth += 1,
            b'{' if depth > 0 => depth -= 1,
            b'{' => {
                let start = code[..i].rfind([';', '{', '}']).map_or(0, |s| s + 1);
                let header = &code[start..i];
                if ["loop", "while", "for"].iter().any(|w| has_word(header, w)) {
                    return true;
                }
                if has_word(header, "fn") {
                    return false;
                }
            }
            _ => {}
        }
    }
    false
}

/// The code from byte `at` to the end of the block that holds it.
fn rest_of_block(code: &str, at: usize) -> &str {
    let mut depth = 0usize;
    for (i, b) in code.bytes().enumerate().skip(at) {
        match b {
            b'{' => depth += 1,
            b'}' if depth == 0 => return &code[at..i],
            b'}' => depth -= 1,
            _ => {}
        }
    }
    &code[at..]
}

/// `path:line: ...` for every `sleep(` call in `files` (test sources) that an assert follows in
/// its block, outside a loop body (a loop that polls for a state may pace itself).
pub(super) fn sleep_violations(files: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in files {
        let code = code_only(text);
        for (at, _) in code.match_indices("sleep(") {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue; // `my_sleep(`, `fn nap_sleep(`
            }
            if code[..at].trim_end().ends_with("fn") || in_loop(&code, at) {
                continue;
            }
            if !has_word(rest_of_block(&code, at), "assert")
                && !["assert_eq", "assert_ne"].iter().any(|w| has_word(rest_of_block(&code, at), w))
            {
                continue; // a pause that nothing checks right after (a delayed release)
            }
            let line = code[..at].matches('\n').count() + 1;
            let source = text.lines().nth(line - 1).unwrap_or("").trim();
            // A pause that is the scenario itself (a client that does not read for 4 s, an
            // attack given its head start) says so in a `// pace:` comment on the line above.
            let above = line.checked_sub(2).and_then(|l| text.lines().nth(l)).unwrap_or("");
            if above.trim_start().starts_with("// pace:") {
                continue;
            }
            found.push(format!(
                "{path}:{line}: a fixed sleep before an assert (wait for the state, with a deadline that names what never came): {source}"
            ));
        }
    }
    found
}

/// `path:line: ...` for every skip note written by hand: a print (`eprintln!`, `println!`,
/// `writeln!`) of a literal that starts with "skipped" or "note: skipping", outside
/// `tests/lib/skip.rs` (and tidy's own examples).
pub(super) fn skip_violations(files: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    let exempt = |p: &str| p == "tests/lib/skip.rs" || p.starts_with("tests/it/tidy/");
    for (path, text) in files.iter().filter(|(p, _)| !exempt(p)) {
        // Comments blanked, string insides kept (their quotes blanked): a line counts when its
        // text opens a literal with the words and they survive the blanking.
        let code = code_and_strings(text);
        for (n, (line, kept)) in text.lines().zip(code.lines()).enumerate() {
            let prints =
                ["print!(", "println!(", "writeln!(", "write!("].iter().any(|p| kept.contains(p));
            let opens = ["\"skipped", "\"note: skipping"].iter().any(|w| line.contains(w));
            let in_code = ["skipped", "note: skipping"].iter().any(|w| kept.contains(w));
            if prints && opens && in_code {
                found.push(format!(
                    "{path}:{}: a skip by hand (use tests/lib/skip.rs: it says so, counts it, and fails under BOOTVOL_REQUIRE_*): {}",
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    found
}

#[test]
fn a_sleep_outside_a_loop_is_named_and_a_polling_loop_is_not() {
    let file = |text: &str| vec![("tests/it/x.rs".to_owned(), text.to_owned())];
    let fixed = "fn t() {\n    go();\n    std::thread::sleep(D);\n    assert!(done());\n}\n";
    let found = sleep_violations(&file(fixed));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("tests/it/x.rs:3: a fixed sleep"), "{found:?}");
    let polling = "fn t() {\n    while !done() {\n        assert!(now() < end, \"never\");\n        \
                   std::thread::sleep(D);\n    }\n    let c = || loop { if let Ok(s) = f() { break s; } \
                   tokio::time::sleep(D).await; };\n    for _ in 0..3 { if x { sleep(D) } }\n}\n";
    assert_eq!(sleep_violations(&file(polling)), Vec::<String>::new());
    // A loop in another function does not count; a comment or a string is no call.
    let other = "fn a() { loop { b() } }\nfn b() { if x { sleep(D); assert!(y) } }\n// sleep(D)\nconst S: &str = \"sleep(1)\";\n";
    let found = sleep_violations(&file(other));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("tests/it/x.rs:2:"), "{found:?}");
    // A pause that no assert follows in its block (a release on another thread) is no wait.
    let release = "fn t() {\n    spawn(move || {\n        sleep(D);\n        unlock();\n    });\n    assert!(waited());\n}\n";
    assert_eq!(sleep_violations(&file(release)), Vec::<String>::new());
    // The scenario's own pause, said so on the line above.
    let paced = "fn t() {\n    // pace: the client reads nothing for 4 s\n    sleep(D);\n    assert!(cut());\n}\n";
    assert_eq!(sleep_violations(&file(paced)), Vec::<String>::new());
}

#[test]
fn a_skip_written_by_hand_is_named() {
    let file = |path: &str, text: &str| vec![(path.to_owned(), text.to_owned())];
    let by_hand = "fn t() {\n    if !have() {\n        eprintln!(\"skipped: no tool\");\n        return;\n    }\n}\n";
    let found = skip_violations(&file("tests/it/x.rs", by_hand));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("tests/it/x.rs:3: a skip by hand"), "{found:?}");
    assert!(skip_violations(&file("tests/lib/skip.rs", by_hand)).is_empty());
    // A comment that says "skipped" is no skip.
    assert!(skip_violations(&file("tests/it/x.rs", "// \"skipped\" here\nfn t() {}\n")).is_empty());
}
