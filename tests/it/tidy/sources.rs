//! The rules crates cannot state, checked over the source tree: which modules inside a crate
//! may name a library, that the front ends never name the database, that SQL text lives only in
//! the database crate, that the sans-io cores do no I/O, and that bare `tokio::spawn` lives only
//! in the services module. Each failure names `file:line`.

use super::scan::{code_and_strings, code_only, test_spans, use_paths, uses_of};

/// Where a crate may be named: path prefixes relative to the repository root (a prefix ending
/// in `/` is a folder, otherwise one file).
pub(super) struct Rule {
    pub(super) krates: &'static [&'static str],
    pub(super) allowed: &'static [&'static str],
    pub(super) owners: &'static str,
}

pub(super) const RULES: &[Rule] = &[
    Rule {
        krates: &[
            "rusqlite",
            "rusqlite_migration",
            "postgres",
            "tokio_postgres",
            "tokio_postgres_rustls",
        ],
        allowed: &["crates/db/src/"],
        owners: "the database crate (crates/db/)",
    },
    Rule {
        krates: &["axum", "hyper"],
        allowed: &["crates/edge/src/http/", "src/api/", "src/admin/", "src/app/"],
        owners: "the HTTP front ends (crates/edge/src/http/, src/api/, src/admin/) and src/app/",
    },
    Rule {
        krates: &["reqwest"],
        allowed: &[
            "crates/control/src/cinder/",
            "crates/control/src/power/",
            "crates/control/src/notify.rs",
            "crates/control/src/probe/http.rs",
        ],
        owners: "the Cinder client, the power drivers, the notifier and the probe's HTTP \
                 (crates/control/src/cinder/, power/, notify.rs, probe/http.rs): the conductor \
                 and the node service know no HTTP",
    },
    Rule {
        krates: &["bcrypt"],
        allowed: &["src/api/htpasswd.rs", "src/api/auth.rs", "src/api/mod.rs"],
        owners: "the API's password code (src/api/htpasswd.rs, auth.rs, mod.rs: set_password)",
    },
];

/// `path:line: ...` for every use of a rule's crates outside its allowed places.
pub(super) fn boundary_violations(files: &[(String, String)]) -> Vec<String> {
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

/// Folders that must not name the database (ARCHITECTURE.md: the front ends reach data through
/// the node service and the conductor).
const WITHOUT_DB: &[&str] = &["src/api/", "src/admin/"];

/// Whether an imported path names the database: `bootvol_db` anywhere, or a `db` module of the
/// crate itself (`crate::db`, `super::super::db`, `self::db`).
fn names_db(path: &str) -> bool {
    let segments: Vec<&str> = path.trim_start_matches("::").split("::").collect();
    if segments.contains(&"bootvol_db") {
        return true;
    }
    let relative =
        segments.iter().take_while(|s| matches!(**s, "crate" | "super" | "self")).count();
    relative > 0 && segments.get(relative) == Some(&"db")
}

/// Lines of `code` (already [`code_only`]) that name the database: in a `use` tree however
/// nested, or as a path in code (`bootvol_db::open()`, `crate::db::X`).
pub(super) fn db_uses(code: &str) -> Vec<usize> {
    let mut lines: Vec<usize> = use_paths(code)
        .into_iter()
        .filter(|(_, path)| names_db(path))
        .map(|(line, _)| line)
        .collect();
    lines.extend(uses_of(code, "bootvol_db"));
    for root in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(root) {
            let start = from + at;
            from = start + root.len();
            let path: String = code[start..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            if names_db(&path) {
                lines.push(code[..start].matches('\n').count() + 1);
            }
        }
    }
    lines.sort_unstable();
    lines.dedup();
    lines
}

/// `path:line: ...` for every place the front ends name the database.
pub(super) fn db_violations(files: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in files.iter().filter(|(p, _)| WITHOUT_DB.iter().any(|w| p.starts_with(w))) {
        for line in db_uses(&code_only(text)) {
            let source = text.lines().nth(line - 1).unwrap_or("").trim();
            found.push(format!("{path}:{line}: a front end names the database: {source}"));
        }
    }
    found
}

/// The beginnings of SQL statements, as they appear in a string literal.
const SQL_STARTS: &[&str] = &[
    "SELECT ",
    "INSERT INTO ",
    "UPDATE ",
    "DELETE FROM ",
    "CREATE TABLE",
    "CREATE INDEX",
    "CREATE UNIQUE INDEX",
    "ALTER TABLE ",
    "DROP TABLE",
    "PRAGMA ",
    "BEGIN IMMEDIATE",
    "LISTEN ",
    "NOTIFY ",
];

/// `path:line: ...` for every string literal outside the database crate that holds SQL (test
/// code aside): one of the keywords above beginning a word inside a literal.
pub(super) fn sql_violations(files: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in files.iter().filter(|(p, _)| !p.starts_with("crates/db/")) {
        // A string's insides are where the two versions differ (code_only blanks them); both
        // have one char for each of the text's.
        let literals: Vec<char> = code_and_strings(text).chars().collect();
        let code = code_only(text);
        let tests = test_spans(&code);
        let mut offset = 0;
        for (i, blanked) in code.chars().enumerate() {
            let kept = literals[i];
            let word_start = i == 0 || !literals[i - 1].is_alphanumeric();
            let statement = kept != blanked
                && word_start
                && SQL_STARTS
                    .iter()
                    .any(|kw| literals[i..].iter().take(kw.len()).copied().eq(kw.chars()));
            if statement && !tests.iter().any(|&(s, e)| (s..e).contains(&offset)) {
                let line = code[..offset].matches('\n').count() + 1;
                let source = text.lines().nth(line - 1).unwrap_or("").trim();
                found.push(format!("{path}:{line}: SQL outside the database crate: {source}"));
            }
            offset += blanked.len_utf8();
        }
    }
    found
}

/// The sans-io cores: parsing and deciding with plain values, no sockets, files, threads or
/// runtime.
pub(super) const SANS_IO: &[&str] = &[
    "crates/edge/src/dhcp/packet.rs",
    "crates/edge/src/dhcp/proxy.rs",
    "crates/tftp/src/packet.rs",
    "crates/tftp/src/transfer.rs",
    "crates/tftp/src/admission.rs",
    "crates/core/src/boot/scenario.rs",
    "crates/core/src/boot/context.rs",
    "crates/core/src/probe/mod.rs",
    "crates/core/src/probe/aoe.rs",
    "crates/core/src/probe/rpc.rs",
    "crates/core/src/probe/plan.rs",
    "crates/iscsi/src/pdu.rs",
    "crates/iscsi/src/text.rs",
    "crates/iscsi/src/chap.rs",
    "crates/iscsi/src/status.rs",
    "crates/iscsi/src/scsi.rs",
    "crates/iscsi/src/login.rs",
    "crates/iscsi/src/outcome.rs",
];

/// Crates and paths that do I/O.
const IO_CRATES: &[&str] = &["tokio", "tokio_util", "mio", "socket2", "nix", "hyper", "axum"];
const IO_NAMES: &[&str] = &[
    "std::fs",
    "std::net::UdpSocket",
    "std::net::TcpStream",
    "std::net::TcpListener",
    "std::process",
    "std::thread",
    "std::io::stdin",
    "std::io::stdout",
    "std::env",
];

/// `path:line: ...` for every I/O a sans-io core names (test code aside).
pub(super) fn sans_io_violations(files: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for path in SANS_IO {
        let Some((_, text)) = files.iter().find(|(p, _)| p == path) else {
            found.push(format!("{path}: listed as a sans-io core but not found (update SANS_IO)"));
            continue;
        };
        let code = code_only(text);
        let tests = test_spans(&code);
        let line_starts: Vec<usize> =
            std::iter::once(0).chain(code.match_indices('\n').map(|(i, _)| i + 1)).collect();
        let in_tests =
            |line: usize| tests.iter().any(|&(s, e)| (s..e).contains(&line_starts[line - 1]));
        let mut lines: Vec<(usize, &str)> = Vec::new();
        for krate in IO_CRATES {
            lines.extend(uses_of(&code, krate).into_iter().map(|l| (l, *krate)));
        }
        for name in IO_NAMES {
            for (at, _) in code.match_indices(name) {
                lines.push((code[..at].matches('\n').count() + 1, *name));
            }
        }
        for (line, what) in lines.into_iter().filter(|(l, _)| !in_tests(*l)) {
            let source = text.lines().nth(line - 1).unwrap_or("").trim();
            found.push(format!("{path}:{line}: a sans-io core does I/O (`{what}`): {source}"));
        }
    }
    found.sort();
    found
}

/// Where a task may be spawned bare: the named services. Everywhere else a task goes on a
/// `TaskTracker` its owner drains (`tracker.spawn`).
const SPAWN_ALLOWED: &[&str] = &["crates/runtime/src/services.rs"];

/// `path:line: ...` for every bare `tokio::spawn` (or `tokio::task::spawn`) outside
/// [`SPAWN_ALLOWED`] (test code aside).
pub(super) fn spawn_violations(files: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (path, text) in files.iter().filter(|(p, _)| !SPAWN_ALLOWED.contains(&p.as_str())) {
        let code = code_only(text);
        let tests = test_spans(&code);
        for bare in
            ["tokio::spawn", "tokio::task::spawn(", "task::spawn(", "Handle::current().spawn("]
        {
            for (at, _) in code.match_indices(bare) {
                let part_of_longer =
                    code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':');
                let next = code[at + bare.len()..].chars().next();
                let longer_name =
                    !bare.ends_with('(') && next.is_some_and(|c| c.is_alphanumeric() || c == '_');
                if part_of_longer || longer_name {
                    continue; // `tokio::spawn_blocking`, `my_tokio::spawn`
                }
                if tests.iter().any(|&(s, e)| (s..e).contains(&at)) {
                    continue;
                }
                let line = code[..at].matches('\n').count() + 1;
                let source = text.lines().nth(line - 1).unwrap_or("").trim();
                found.push(format!(
                    "{path}:{line}: a bare spawn (put it on its owner's TaskTracker): {source}"
                ));
            }
        }
    }
    found
}

/// `path:1: ...` for every file whose first line is not a `//!` header.
pub(super) fn header_violations(files: &[(String, String)]) -> Vec<String> {
    files
        .iter()
        .filter(|(_, text)| !text.starts_with("//!"))
        .map(|(path, _)| format!("{path}:1: no `//!` header saying what the file owns"))
        .collect()
}

/// `path:line: ...` for every module a crate root (`lib.rs`) declares that its `//!` header
/// does not name as [`module`].
pub(super) fn layout_violations(path: &str, lib_rs: &str) -> Vec<String> {
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
                format!("{path}:{}: module `{name}` is missing from the layout", index + 1)
            })
        })
        .collect()
}
