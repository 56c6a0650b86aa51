//! Tidy: the boundaries of ARCHITECTURE.md that the compiler cannot see, checked by reading the
//! source tree (rust-analyzer's `tidy.rs` habit). Each failure names `file:line`.
//!
//! - `rusqlite` (and `rusqlite_migration`), `postgres`, `tokio_postgres` and
//!   `tokio_postgres_rustls` only under `src/db/`;
//! - `axum`/`hyper` only in the HTTP front ends (`src/http/`, `src/api/`, `src/admin/`) and
//!   `src/app.rs`;
//! - `reqwest` only in the Cinder client (`src/cinder/`), the power drivers (`src/power/`) and the
//!   notifier (`src/conductor/notify.rs`);
//! - the front ends (`src/api/`, `src/admin/`) never name the `db` module: they reach data
//!   through the node service (`src/nodes/`) and the conductor;
//! - every `.rs` file under `src/` and `crates/*/src/` starts with a `//!` header;
//! - `src/lib.rs`'s layout names every module it declares;
//! - every workspace member is a default member (so `cargo test --locked` tests them all) and
//!   takes the workspace's lints.
//!
//! A crate counts as used where its name appears as a path in code (`rusqlite::Connection`,
//! `use axum::Router`, `::hyper::body`, `use reqwest;`, `extern crate ...`), not in comments or
//! string literals; the scanner's own tests below show both.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Where a crate may be named: path prefixes relative to the repository root (a prefix ending
/// in `/` is a folder, otherwise one file).
struct Rule {
    krates: &'static [&'static str],
    allowed: &'static [&'static str],
    owners: &'static str,
}

const RULES: &[Rule] = &[
    Rule {
        krates: &[
            "rusqlite",
            "rusqlite_migration",
            "postgres",
            "tokio_postgres",
            "tokio_postgres_rustls",
        ],
        allowed: &["src/db/"],
        owners: "the repository (src/db/)",
    },
    Rule {
        krates: &["axum", "hyper"],
        allowed: &["src/http/", "src/api/", "src/admin/", "src/app.rs"],
        owners: "the HTTP front ends (src/http/, src/api/, src/admin/) and src/app.rs",
    },
    Rule {
        krates: &["reqwest"],
        allowed: &["src/cinder/", "src/power/", "src/conductor/notify.rs"],
        owners: "the Cinder client (src/cinder/), the power drivers (src/power/) and the notifier \
                 (src/conductor/notify.rs)",
    },
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `src/` and `crates/*/src/`, as (path relative to the root with `/`,
/// contents), sorted.
fn source_files() -> Vec<(String, String)> {
    let mut dirs = vec![root().join("src")];
    if let Ok(crates) = std::fs::read_dir(root().join("crates")) {
        for entry in crates {
            dirs.push(entry.unwrap().path().join("src"));
        }
    }
    let mut files = Vec::new();
    for dir in dirs {
        if dir.is_dir() {
            collect_rs(&dir, &mut files);
        }
    }
    files.sort();
    assert!(files.len() > 20, "tidy found only {} source files: wrong root?", files.len());
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            let relative = path.strip_prefix(root()).unwrap();
            (relative.to_string_lossy().replace('\\', "/"), text)
        })
        .collect()
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of a Rust file with comments and the insides of string, byte-string, raw-string and
/// char literals replaced by spaces; line breaks are kept, so line numbers do not move.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
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
                out.push(blank(chars[i]));
                i += 1;
            }
        } else if c == '"' {
            // "..", and the `"` of b".." and c".." (their prefix letter stays: harmless).
            out.push(' ');
            i += 1;
            while i < chars.len() {
                match chars[i] {
                    '\\' => {
                        out.push(' ');
                        if let Some(&escaped) = chars.get(i + 1) {
                            out.push(blank(escaped));
                        }
                        i += 2;
                    }
                    '"' => {
                        out.push(' ');
                        i += 1;
                        break;
                    }
                    other => {
                        out.push(blank(other));
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
fn uses_of(code: &str, krate: &str) -> Vec<usize> {
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

/// `path:line: ...` for every use of a rule's crates outside its allowed places.
fn boundary_violations(files: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in files {
        let code = code_only(text);
        for rule in RULES {
            if rule.allowed.iter().any(|allowed| path.starts_with(allowed)) {
                continue;
            }
            for krate in rule.krates {
                for line in uses_of(&code, krate) {
                    let source = text.lines().nth(line - 1).unwrap_or("").trim();
                    found.push(format!(
                        "{path}:{line}: `{krate}` outside {}: {source}",
                        rule.owners
                    ));
                }
            }
        }
    }
    found
}

/// Folders that must not name `crate::db` (ARCHITECTURE.md: the front ends reach data through
/// the node service and the conductor).
const WITHOUT_DB: &[&str] = &["src/api/", "src/admin/"];

/// Lines of `code` that name the crate's `db` module: `crate::db` as a path, or `db` inside a
/// `crate::{...}` group.
fn db_uses(code: &str) -> Vec<usize> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let line_of = |at: usize| code[..at].matches('\n').count() + 1;
    let mut lines = Vec::new();
    let mut from = 0;
    while let Some(found) = code[from..].find("crate::") {
        let start = from + found;
        from = start + "crate::".len();
        if code[..start].ends_with(is_ident) {
            continue; // `bootvol_crate::`, not ours
        }
        let rest = &code[from..];
        if rest.starts_with("db") && !rest["db".len()..].starts_with(is_ident) {
            lines.push(line_of(start));
        } else if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            if group.split(|c: char| !is_ident(c)).any(|word| word == "db") {
                lines.push(line_of(start));
            }
        }
    }
    lines
}

/// `path:line: ...` for every use of `crate::db` in the front ends.
fn db_violations(files: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in files.iter().filter(|(p, _)| WITHOUT_DB.iter().any(|w| p.starts_with(w))) {
        for line in db_uses(&code_only(text)) {
            let source = text.lines().nth(line - 1).unwrap_or("").trim();
            found.push(format!("{path}:{line}: a front end names `db`: {source}"));
        }
    }
    found
}

/// `path:1: ...` for every file whose first line is not a `//!` header.
fn header_violations(files: &[(String, String)]) -> Vec<String> {
    files
        .iter()
        .filter(|(_, text)| !text.starts_with("//!"))
        .map(|(path, _)| format!("{path}:1: no `//!` header saying what the file owns"))
        .collect()
}

/// `src/lib.rs:line: ...` for every module `lib_rs` declares that its `//!` layout does not name
/// as [`module`].
fn layout_violations(lib_rs: &str) -> Vec<String> {
    let header: String = lib_rs.lines().take_while(|line| line.starts_with("//!")).collect();
    lib_rs
        .lines()
        .enumerate()
        .filter_map(|(index, line)| {
            // `mod x;`, `pub mod x;`, `pub(crate) mod x;`
            let name = match line.split_whitespace().collect::<Vec<_>>()[..] {
                ["mod", name] => name,
                [visibility, "mod", name] if visibility.starts_with("pub") => name,
                _ => return None,
            };
            let name = name.strip_suffix(';')?;
            (!header.contains(&format!("[`{name}`]"))).then(|| {
                format!("src/lib.rs:{}: module `{name}` is missing from the layout", index + 1)
            })
        })
        .collect()
}

fn report(what: &str, violations: &[String]) {
    if !violations.is_empty() {
        let mut message = format!("{what} ({} found):\n", violations.len());
        for violation in violations {
            writeln!(message, "  {violation}").unwrap();
        }
        panic!("{message}");
    }
}

#[test]
fn crates_stay_behind_their_boundaries() {
    report(
        "a crate is used outside the modules that own it (ARCHITECTURE.md, Invariants)",
        &boundary_violations(&source_files()),
    );
}

#[test]
fn the_front_ends_do_not_reach_the_database_directly() {
    report(
        "a front end names the db module (it goes through src/nodes/ and the conductor)",
        &db_violations(&source_files()),
    );
}

#[test]
fn db_uses_are_found_in_every_form() {
    let files = one_file(
        "src/api/x.rs",
        "//! x\nuse crate::db::Db;\nuse crate::{model, db::SharedDb};\nfn f() { crate::db::open(); }\n\
         // crate::db in a comment\nuse crate::dbx; use crate::nodes::db_like;\n",
    );
    let found = db_violations(&files);
    assert_eq!(found.len(), 3, "{found:#?}");
    assert!(found[0].starts_with("src/api/x.rs:2:"), "{found:#?}");
    assert!(db_violations(&one_file("src/http/x.rs", "//! x\nuse crate::db::Db;\n")).is_empty());
}

#[test]
fn every_source_file_starts_with_a_header() {
    report("source files without a `//!` header", &header_violations(&source_files()));
}

#[test]
fn the_crate_layout_names_every_module() {
    let lib_rs = std::fs::read_to_string(root().join("src/lib.rs")).unwrap();
    assert!(lib_rs.contains("pub mod "), "src/lib.rs declares no module");
    report("src/lib.rs's header leaves out modules", &layout_violations(&lib_rs));
}

#[test]
fn every_member_is_tested_by_the_readme_command_and_takes_the_workspace_lints() {
    let manifest = |path: &Path| -> toml::Table {
        let text = std::fs::read_to_string(path).unwrap();
        toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let root_manifest = manifest(&root().join("Cargo.toml"));
    let workspace = root_manifest["workspace"].as_table().expect("Cargo.toml has [workspace]");
    let list = |key: &str| -> Vec<String> {
        let mut items: Vec<String> = workspace
            .get(key)
            .and_then(|v| v.as_array())
            .unwrap_or_else(|| panic!("Cargo.toml: [workspace] {key} is missing"))
            .iter()
            .map(|v| v.as_str().unwrap().to_owned())
            .collect();
        items.sort();
        items
    };
    assert_eq!(
        list("default-members"),
        list("members"),
        "Cargo.toml: [workspace] default-members must list every member, or README's \
         `cargo test --locked` silently skips a crate's tests"
    );
    let mut manifests = vec![root().join("Cargo.toml")];
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        manifests.push(entry.unwrap().path().join("Cargo.toml"));
    }
    assert!(manifests.len() >= 2, "crates/ holds no crate");
    for path in manifests {
        let takes_lints = manifest(&path)
            .get("lints")
            .and_then(|lints| lints.get("workspace"))
            .and_then(toml::Value::as_bool)
            == Some(true);
        assert!(takes_lints, "{}: needs `[lints] workspace = true`", path.display());
    }
}

// ---------------------------------------------------------------------------------------------
// The scanner itself: it finds uses, and does not find words in comments and strings.

fn one_file(path: &str, text: &str) -> Vec<(String, String)> {
    vec![(path.to_owned(), text.to_owned())]
}

#[test]
fn a_use_outside_the_boundary_is_named_by_file_and_line() {
    let text = "//! A file.\n\nuse std::fmt;\nuse rusqlite::Connection;\n";
    assert_eq!(
        boundary_violations(&one_file("src/boot/mod.rs", text)),
        [
            "src/boot/mod.rs:4: `rusqlite` outside the repository (src/db/): use rusqlite::Connection;"
        ]
    );
    assert!(boundary_violations(&one_file("src/db/nodes.rs", text)).is_empty());
}

#[test]
fn paths_are_found_in_every_form() {
    let text = "//! A file.\n\
                fn f() -> axum::Router {\n\
                    let c = reqwest::Client::new();\n\
                    let e: ::hyper::Error;\n\
                    let g = Vec::<axum::Json<u8>>::new();\n\
                }\n\
                use reqwest;\n\
                extern crate rusqlite;\n\
                #[from] rusqlite_migration::Error\n\
                use {hyper::body, std::fmt};\n";
    let lines: Vec<String> = boundary_violations(&one_file("src/boot/mod.rs", text))
        .into_iter()
        .map(|v| v.split(": ").next().unwrap().to_owned())
        .collect();
    assert_eq!(
        lines,
        [
            "src/boot/mod.rs:8",
            "src/boot/mod.rs:9",
            "src/boot/mod.rs:2",
            "src/boot/mod.rs:5",
            "src/boot/mod.rs:4",
            "src/boot/mod.rs:10",
            "src/boot/mod.rs:3",
            "src/boot/mod.rs:7",
        ]
    );
}

#[test]
fn comments_strings_and_other_identifiers_are_not_uses() {
    let text = r####"//! Talks about axum::Router and rusqlite::Connection in its header.
// use rusqlite::Connection;
/* reqwest::Client /* nested axum::Router */ hyper::Body */
fn f(cfg: &Config) {
    let a = "rusqlite::Connection";
    let b = r#"axum::Router "quoted" reqwest::get"#;
    let c = b"hyper::Body";
    let d = "escaped \" quote then axum::Router";
    let e = '"'; let q = b'"'; let axum_like = 1; let quote = '\''; let s = "axum::x"; let l: &'static str = "hyper::x";
    let f = cfg.reqwest; let g = self::hyper::thing(); let h = my_axum::X;
    let r#type = 1;
}
"####;
    assert_eq!(boundary_violations(&one_file("src/boot/mod.rs", text)), Vec::<String>::new());
    assert_eq!(code_only(text).lines().count(), text.lines().count());
}

#[test]
fn a_missing_header_is_named() {
    let files = vec![
        ("src/a.rs".to_owned(), "//! Owns a.\n".to_owned()),
        ("src/b.rs".to_owned(), "// not a module header\nuse std::fmt;\n".to_owned()),
        ("crates/x/src/lib.rs".to_owned(), "\n//! A blank line first.\n".to_owned()),
    ];
    assert_eq!(
        header_violations(&files),
        [
            "src/b.rs:1: no `//!` header saying what the file owns",
            "crates/x/src/lib.rs:1: no `//!` header saying what the file owns",
        ]
    );
}

#[test]
fn a_module_left_out_of_the_layout_is_named() {
    let lib_rs = "//! # Layout\n//! - [`db`]: SQL.\n\n\
                  pub mod db;\npub mod http;\nmod tidy_probe;\npub(crate) mod hidden;\n";
    assert_eq!(
        layout_violations(lib_rs),
        [
            "src/lib.rs:5: module `http` is missing from the layout",
            "src/lib.rs:6: module `tidy_probe` is missing from the layout",
            "src/lib.rs:7: module `hidden` is missing from the layout",
        ]
    );
}

#[test]
fn char_literals_end_where_they_end() {
    // An escaped quote, then a double quote in a char: neither may start a string that hides code.
    let code = code_only(r#"let t = ('\'','"'); axum::serve(); let u = "x";"#);
    assert_eq!(uses_of(&code, "axum"), [1]);
    let code = code_only(r#"let t = (b'\'', b'"', '\\', '\u{22}'); axum::serve(); let u = "x";"#);
    assert_eq!(uses_of(&code, "axum"), [1]);
}
