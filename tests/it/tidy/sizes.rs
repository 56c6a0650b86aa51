//! The size limits of ARCHITECTURE.md, measured over every crate's `src/` (test code aside):
//! no function over [`FUNCTION_MAX`] lines, at most [`LONG_ALLOWED`] over [`FUNCTION_LONG`],
//! no file over [`FILE_MAX`] lines.

use super::scan::{code_only, functions, lines_outside_tests};

pub(super) const FUNCTION_MAX: usize = 100;
pub(super) const FUNCTION_LONG: usize = 50;
pub(super) const LONG_ALLOWED: usize = 15;
pub(super) const FILE_MAX: usize = 800;

/// What breaks the limits, longest first: functions over the maximum, files over theirs, and
/// the long functions when there are more than allowed.
pub(super) fn size_violations(files: &[(String, String)]) -> Vec<String> {
    let mut long = Vec::new();
    let mut found = Vec::new();
    for (path, text) in files {
        let code = code_only(text);
        let lines = lines_outside_tests(&code);
        if lines > FILE_MAX {
            found.push((lines, format!("{path}: {lines} lines (at most {FILE_MAX}, tests aside)")));
        }
        for f in functions(&code) {
            let at = format!("{path}:{}: fn {} is {} lines", f.line, f.name, f.lines);
            if f.lines > FUNCTION_MAX {
                found.push((f.lines, format!("{at} (at most {FUNCTION_MAX})")));
            } else if f.lines > FUNCTION_LONG {
                long.push((f.lines, at));
            }
        }
    }
    if long.len() > LONG_ALLOWED {
        let count = long.len();
        found.extend(long.into_iter().map(|(lines, at)| {
            (
                lines,
                format!(
                    "{at} (one of {count} over {FUNCTION_LONG}; at most {LONG_ALLOWED} may be)"
                ),
            )
        }));
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    found.into_iter().map(|(_, message)| message).collect()
}

#[test]
fn functions_and_files_stay_within_the_size_limits() {
    super::report(
        "the size limits (ARCHITECTURE.md, Invariants)",
        &size_violations(&super::source_files()),
    );
}

#[test]
fn a_long_function_and_a_long_file_are_named_and_tests_do_not_count() {
    let body = |n: usize| "    let x = 1;\n".repeat(n);
    let text = format!(
        "//! x\nfn short() {{\n{}}}\n\nfn long_one(a: u8) -> u8 {{\n{}    a\n}}\n\
         trait T {{ fn declared(&self); }}\n\
         #[cfg(test)]\nmod tests {{\n    fn huge() {{\n{}    }}\n}}\n",
        body(3),
        body(FUNCTION_MAX),
        body(2 * FILE_MAX)
    );
    let found = size_violations(&[("crates/x/src/a.rs".to_owned(), text.clone())]);
    assert_eq!(
        found,
        [format!("crates/x/src/a.rs:8: fn long_one is {} lines (at most 100)", FUNCTION_MAX + 3)]
    );
    let code = code_only(&text);
    let names: Vec<String> = functions(&code).into_iter().map(|f| f.name).collect();
    assert_eq!(names, ["short", "long_one"], "a declaration and test code are not counted");
    let long_file = format!("//! y\n{}", "const A: u8 = 1;\n".repeat(FILE_MAX + 1));
    assert_eq!(
        size_violations(&[("src/b.rs".to_owned(), long_file)]),
        [format!("src/b.rs: {} lines (at most 800, tests aside)", FILE_MAX + 2)]
    );
    // Sixteen functions of 51 lines, in two files: one too many.
    let many = |from: usize| -> String {
        (from..from + 8).map(|i| format!("fn f{i}() {{\n{}}}\n", body(FUNCTION_LONG - 1))).collect()
    };
    let files = [
        ("src/c.rs".to_owned(), format!("//! z\n{}", many(0))),
        ("src/d.rs".to_owned(), format!("//! z\n{}", many(8))),
    ];
    let found = size_violations(&files);
    assert_eq!(found.len(), 2 * 8, "{found:#?}");
    assert!(
        found.contains(
            &"src/c.rs:2: fn f0 is 51 lines (one of 16 over 50; at most 15 may be)".to_owned()
        ),
        "{found:#?}"
    );
    assert_eq!(size_violations(&files[..1]), Vec::<String>::new(), "eight are allowed");
}
