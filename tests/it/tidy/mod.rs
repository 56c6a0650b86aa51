//! Tidy: the boundaries of ARCHITECTURE.md, checked (rust-analyzer's `tidy.rs` habit). Each
//! failure names the crate, or `file:line`.
//!
//! - [`graph`]: over `cargo metadata`: the layers (a crate names only lower ones), what each
//!   crate's tree keeps out (the boot edge links no `rusqlite`, `postgres`, `tokio-postgres`,
//!   `reqwest` or `bcrypt`), and which crates alone may use `sd-notify`, `prometheus-client`,
//!   `minijinja`, `json-patch` and the rest;
//! - [`sources`]: over the source tree, what crates cannot say: which modules of a crate may
//!   name a library (the conductor knows no HTTP), the front ends never name the database (in
//!   any `use` form, however nested), SQL text only in the database crate, the sans-io cores
//!   do no I/O, bare `tokio::spawn` only in the services module, every file's `//!` header,
//!   every crate root's layout;
//! - [`sizes`]: the size limits of functions and files;
//! - [`harness`]: over `tests/`, the suite's own rules: no fixed sleep before an assert, every
//!   skip through `tests/lib/skip.rs`;
//! - here: every workspace member is a default member and takes the workspace's lints.
//!
//! A crate counts as used where its name appears as a path in code (`rusqlite::Connection`,
//! `use axum::Router`, `::hyper::body`, `use reqwest;`, `extern crate ...`), not in comments or
//! string literals ([`scan`]); each check has a test below that shows it failing.

mod graph;
mod harness;
mod scan;
mod sizes;
mod sources;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use scan::{code_only, uses_of};
use sources::{
    boundary_violations, db_uses, db_violations, header_violations, layout_violations,
    sans_io_violations, spawn_violations, sql_violations,
};

pub(super) fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `src/` and `crates/*/src/`, as (path relative to the root with `/`,
/// contents), sorted.
pub(super) fn source_files() -> Vec<(String, String)> {
    let mut dirs = vec![root().join("src")];
    if let Ok(crates) = std::fs::read_dir(root().join("crates")) {
        for entry in crates {
            dirs.push(entry.unwrap().path().join("src"));
        }
    }
    read_rs(&dirs, "source")
}

/// Every `.rs` file under `tests/`, as [`source_files`] gives those of the crates.
pub(super) fn test_files() -> Vec<(String, String)> {
    read_rs(&[root().join("tests")], "test")
}

/// Every `.rs` file under `dirs` (those that exist), read, sorted by path; more than 20 of them
/// (`what` names them when there are not).
fn read_rs(dirs: &[PathBuf], what: &str) -> Vec<(String, String)> {
    let mut files = Vec::new();
    for dir in dirs.iter().filter(|d| d.is_dir()) {
        collect_rs(dir, &mut files);
    }
    files.sort();
    assert!(files.len() > 20, "tidy found only {} {what} files: wrong root?", files.len());
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

pub(super) fn report(what: &str, violations: &[String]) {
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
        "a library is named outside the modules that own it (ARCHITECTURE.md, Invariants)",
        &boundary_violations(&source_files()),
    );
}

#[test]
fn the_front_ends_do_not_reach_the_database_directly() {
    report(
        "a front end names the database (it goes through bootvol_control's node service and conductor)",
        &db_violations(&source_files()),
    );
}

#[test]
fn sql_text_lives_only_in_the_database_crate() {
    report("SQL text outside crates/db/", &sql_violations(&source_files()));
}

#[test]
fn the_sans_io_cores_do_no_io() {
    report("I/O in a sans-io core", &sans_io_violations(&source_files()));
}

#[test]
fn tasks_are_spawned_on_their_owners_trackers() {
    report("bare spawns outside the services module", &spawn_violations(&source_files()));
}

#[test]
fn no_test_sleeps_before_an_assert() {
    report("fixed sleeps in tests/ (docs/testing.md)", &harness::sleep_violations(&test_files()));
}

#[test]
fn every_skip_goes_through_the_one_rule() {
    report(
        "skips written by hand in tests/ (docs/testing.md)",
        &harness::skip_violations(&test_files()),
    );
}

#[test]
fn every_source_file_starts_with_a_header() {
    report("source files without a `//!` header", &header_violations(&source_files()));
}

#[test]
fn every_crate_root_names_its_modules() {
    let mut found = Vec::new();
    let mut roots = vec!["src/lib.rs".to_owned()];
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        roots.push(format!("crates/{name}/src/lib.rs"));
    }
    for path in &roots {
        let lib_rs = std::fs::read_to_string(root().join(path)).unwrap();
        assert!(lib_rs.contains("mod "), "{path} declares no module");
        found.extend(layout_violations(path, &lib_rs));
    }
    report("a crate root's header leaves out modules", &found);
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
        boundary_violations(&one_file("crates/core/src/boot/mod.rs", text)),
        [
            "crates/core/src/boot/mod.rs:4: `rusqlite` outside the database crate (crates/db/): use rusqlite::Connection;"
        ]
    );
    assert!(boundary_violations(&one_file("crates/db/src/nodes.rs", text)).is_empty());
    // Inside the control plane, the conductor knows no HTTP client.
    let conductor = "//! c\nuse reqwest::Client;\n";
    assert_eq!(
        boundary_violations(&one_file("crates/control/src/conductor/mod.rs", conductor)).len(),
        1
    );
    assert!(boundary_violations(&one_file("crates/control/src/notify.rs", conductor)).is_empty());
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
        layout_violations("src/lib.rs", lib_rs),
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

#[test]
fn the_database_is_found_in_every_use_form() {
    let text = "//! x\n\
                use bootvol_db::Db;\n\
                use crate::{model::{Node}, db::Db};\n\
                use super::super::db;\n\
                use {std::fmt, bootvol_db::{SharedDb, Target as T}};\n\
                fn f() { bootvol_db::open(); crate::db::x(); }\n\
                use bootvol_control::{nodes::{self, NodeService}, conductor};\n\
                // use bootvol_db::Db; in a comment\n\
                use crate::dbx; use crate::nodes::db_like; let db = state.db;\n\
                use bootvol_db\n    as store;\n";
    let found = db_violations(&one_file("src/api/x.rs", text));
    let lines: Vec<&str> = found.iter().map(|v| v.split(": ").next().unwrap()).collect();
    assert_eq!(
        lines,
        [
            "src/api/x.rs:2",
            "src/api/x.rs:3",
            "src/api/x.rs:4",
            "src/api/x.rs:5",
            "src/api/x.rs:6",
            "src/api/x.rs:10"
        ],
        "{found:#?}"
    );
    assert!(db_violations(&one_file("src/app/x.rs", text)).is_empty(), "the wiring may name it");
    assert_eq!(db_uses(&code_only("use crate::{a::{b, c}, {db::{X, Y}}};")), [1], "groups nest");
}

#[test]
fn sql_in_a_literal_outside_the_database_crate_is_named() {
    let text = "//! x\n\
                const Q: &str = \"SELECT uuid FROM nodes\";\n\
                // DELETE FROM nodes, in a comment\n\
                let m = \"cannot update the node\"; let ok = \"Selected nodes\";\n\
                let r = r#\"INSERT INTO ports\"#;\n\
                #[cfg(test)]\nmod tests { const T: &str = \"DELETE FROM nodes\"; }\n";
    let found = sql_violations(&one_file("crates/control/src/x.rs", text));
    let lines: Vec<&str> = found.iter().map(|v| v.split(": ").next().unwrap()).collect();
    assert_eq!(lines, ["crates/control/src/x.rs:2", "crates/control/src/x.rs:5"], "{found:#?}");
    assert!(sql_violations(&one_file("crates/db/src/x.rs", text)).is_empty());
}

#[test]
fn io_in_a_sans_io_core_and_a_bare_spawn_are_named() {
    let mut files = Vec::new();
    let core = "//! x\nuse std::fs::File;\nfn f() { tokio::net::UdpSocket::bind(a); }\n\
                #[cfg(test)]\nmod tests { use std::thread; }\n";
    for path in sources::SANS_IO {
        files.push((
            (*path).to_owned(),
            "//! clean\nfn f(a: &[u8]) -> usize { a.len() }\n".to_owned(),
        ));
    }
    assert_eq!(sans_io_violations(&files), Vec::<String>::new());
    let packet = files.iter().position(|(p, _)| p == "crates/edge/src/dhcp/packet.rs").unwrap();
    files[packet].1 = core.to_owned();
    let found = sans_io_violations(&files);
    assert_eq!(found.len(), 2, "{found:#?}");
    assert!(
        found[0]
            .starts_with("crates/edge/src/dhcp/packet.rs:2: a sans-io core does I/O (`std::fs`)"),
        "{found:#?}"
    );
    assert!(found[1].starts_with("crates/edge/src/dhcp/packet.rs:3:"), "{found:#?}");
    let spawns = "//! x\nfn f() {\n    tokio::spawn(async {});\n    tokio::task::spawn(async {});\n\
                  tracker.spawn(async {});\n    tokio::task::spawn_blocking(|| ());\n}\n\
                  #[cfg(test)]\nmod tests { fn t() { tokio::spawn(async {}); } }\n";
    let found = spawn_violations(&one_file("crates/edge/src/x.rs", spawns));
    let lines: Vec<&str> = found.iter().map(|v| v.split(": ").next().unwrap()).collect();
    assert_eq!(lines, ["crates/edge/src/x.rs:3", "crates/edge/src/x.rs:4"], "{found:#?}");
    assert!(spawn_violations(&one_file("crates/runtime/src/services.rs", spawns)).is_empty());
}
