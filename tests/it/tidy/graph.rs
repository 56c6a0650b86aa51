//! The crate graph as `cargo metadata` resolves it (normal dependencies only: what a crate
//! links), and the rules ARCHITECTURE.md states over it: the layers (a crate depends only on
//! crates of lower layers), what each crate's whole tree keeps out (the boot edge reaches no
//! SQL, Cinder, BMC or password code), and which crates alone may depend on a library.

use std::collections::{BTreeMap, BTreeSet};

/// The workspace's crates by layer: a crate may depend only on crates of a lower layer, so two
/// crates of one layer (the boot edge and the control plane) never know each other.
const LAYERS: &[(&str, u8)] = &[
    ("bootvol-core", 0),
    ("bootvol-tftp", 0),
    ("bootvol-iscsi", 0),
    ("bootvol-db", 1),
    ("bootvol-runtime", 1),
    ("bootvol-edge", 2),
    ("bootvol-control", 2),
    ("bootvol", 3),
];

const SERVED_TO_NODES_FORBIDS: &[&str] =
    &["rusqlite", "postgres", "tokio-postgres", "reqwest", "bcrypt"];

/// Packages a crate's whole normal tree must not contain.
const KEPT_OUT: &[(&str, &[&str])] = &[
    // The crate that answers /boot/<mac>.ipxe cannot reach SQL, Cinder, BMCs or passwords.
    ("bootvol-edge", SERVED_TO_NODES_FORBIDS),
    // The pure core: no runtime, no I/O libraries.
    ("bootvol-core", &["tokio", "rusqlite", "postgres", "reqwest", "bcrypt", "axum", "hyper"]),
    ("bootvol-tftp", &["rusqlite", "postgres", "reqwest", "bcrypt", "axum", "hyper"]),
    ("bootvol-iscsi", &["rusqlite", "postgres", "reqwest", "bcrypt", "axum", "hyper"]),
    ("bootvol-runtime", &["rusqlite", "postgres", "reqwest", "bcrypt", "axum", "hyper"]),
    ("bootvol-db", &["reqwest", "bcrypt", "axum", "hyper"]),
    ("bootvol-control", &["bcrypt", "axum"]),
];

/// Libraries only the named workspace crates may depend on directly.
const ONLY_IN: &[(&str, &[&str])] = &[
    ("rusqlite", &["bootvol-db"]),
    ("rusqlite_migration", &["bootvol-db"]),
    ("postgres", &["bootvol-db"]),
    ("tokio-postgres", &["bootvol-db"]),
    ("tokio-postgres-rustls", &["bootvol-db"]),
    ("reqwest", &["bootvol-control"]),
    ("bcrypt", &["bootvol"]),
    ("sd-notify", &["bootvol-runtime"]),
    ("prometheus-client", &["bootvol-runtime"]),
    ("minijinja", &["bootvol-core", "bootvol"]),
    ("json-patch", &["bootvol"]),
    ("axum", &["bootvol-edge", "bootvol"]),
    ("hyper", &["bootvol-edge", "bootvol"]),
];

/// Normal dependencies by package name, and which packages are the workspace's.
#[derive(Debug, Default)]
pub(super) struct Graph {
    deps: BTreeMap<String, BTreeSet<String>>,
    members: BTreeSet<String>,
}

impl Graph {
    /// The workspace's graph, from `cargo metadata` for the host platform (offline: the lock
    /// file's packages are already fetched by the build that runs this test).
    #[allow(clippy::disallowed_methods)] // tidy runs cargo itself
    pub(super) fn of_workspace() -> Graph {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let rustc = std::process::Command::new("rustc").arg("-vV").output().expect("rustc -vV");
        let rustc = String::from_utf8_lossy(&rustc.stdout).into_owned();
        let host = rustc.lines().find_map(|l| l.strip_prefix("host: ")).expect("rustc's host");
        let output = std::process::Command::new(cargo)
            .args(["metadata", "--format-version", "1", "--locked", "--offline"])
            .args(["--filter-platform", host])
            .current_dir(super::root())
            .output()
            .expect("running cargo metadata");
        assert!(
            output.status.success(),
            "cargo metadata: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        Graph::from_metadata(&metadata)
    }

    fn from_metadata(metadata: &serde_json::Value) -> Graph {
        let text = |v: &serde_json::Value| v.as_str().unwrap().to_owned();
        let names: BTreeMap<String, String> = metadata["packages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (text(&p["id"]), text(&p["name"])))
            .collect();
        let members = metadata["workspace_members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| names[&text(id)].clone())
            .collect();
        let mut graph = Graph { members, ..Graph::default() };
        for node in metadata["resolve"]["nodes"].as_array().unwrap() {
            let linked = node["deps"].as_array().unwrap().iter().filter(|dep| {
                dep["dep_kinds"].as_array().unwrap().iter().any(|kind| kind["kind"].is_null())
            });
            let entry = graph.deps.entry(names[&text(&node["id"])].clone()).or_default();
            entry.extend(linked.map(|dep| names[&text(&dep["pkg"])].clone()));
        }
        graph
    }

    /// A graph from `(crate, dependency)` edges, `members` being the workspace's.
    pub(super) fn from_edges(members: &[&str], edges: &[(&str, &str)]) -> Graph {
        let mut graph = Graph {
            members: members.iter().map(|m| (*m).to_owned()).collect(),
            ..Graph::default()
        };
        for (from, to) in edges {
            graph.deps.entry((*from).to_owned()).or_default().insert((*to).to_owned());
        }
        graph
    }

    fn direct(&self, krate: &str) -> impl Iterator<Item = &String> {
        self.deps.get(krate).into_iter().flatten()
    }

    /// How `root` reaches `target` (`root -> a -> target`), if it does.
    fn path_to(&self, root: &str, target: &str) -> Option<Vec<String>> {
        let mut parent: BTreeMap<&str, &str> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([root]);
        while let Some(at) = queue.pop_front() {
            if at == target {
                let mut path = vec![target.to_owned()];
                let mut step = target;
                while let Some(&up) = parent.get(step) {
                    path.push(up.to_owned());
                    step = up;
                }
                path.reverse();
                return Some(path);
            }
            for dep in self.direct(at) {
                if dep != root && !parent.contains_key(dep.as_str()) {
                    parent.insert(dep, at);
                    queue.push_back(dep);
                }
            }
        }
        None
    }
}

/// Workspace crates that depend on a crate of their own layer or a higher one, or that have
/// no layer.
pub(super) fn layer_violations(graph: &Graph) -> Vec<String> {
    let layer = |name: &str| LAYERS.iter().find(|(n, _)| *n == name).map(|(_, l)| *l);
    let mut found = Vec::new();
    for member in &graph.members {
        let Some(own) = layer(member) else {
            found.push(format!("{member}: no layer (add it to LAYERS in tests/it/tidy/graph.rs and ARCHITECTURE.md)"));
            continue;
        };
        for dep in graph.direct(member).filter(|d| graph.members.contains(*d)) {
            match layer(dep) {
                Some(theirs) if theirs < own => {}
                theirs => found.push(format!(
                    "{member} (layer {own}) depends on {dep} (layer {}): a crate names only lower layers",
                    theirs.map_or("none".to_owned(), |l| l.to_string())
                )),
            }
        }
    }
    found
}

/// Packages in a crate's tree that [`KEPT_OUT`] forbids there, with the path that brings them.
pub(super) fn kept_out_violations(graph: &Graph) -> Vec<String> {
    let mut found = Vec::new();
    for (krate, forbidden) in KEPT_OUT {
        assert!(graph.members.contains(*krate), "KEPT_OUT names {krate}, not a workspace crate");
        for package in *forbidden {
            if let Some(path) = graph.path_to(krate, package) {
                found.push(format!("{krate} reaches {package}: {}", path.join(" -> ")));
            }
        }
    }
    found
}

/// Workspace crates that depend directly on a library [`ONLY_IN`] keeps for others.
pub(super) fn only_in_violations(graph: &Graph) -> Vec<String> {
    let mut found = Vec::new();
    for member in &graph.members {
        for dep in graph.direct(member) {
            if let Some((_, owners)) = ONLY_IN.iter().find(|(lib, _)| lib == dep)
                && !owners.contains(&member.as_str())
            {
                found.push(format!(
                    "{member} depends on {dep}, which only {} may use",
                    owners.join(", ")
                ));
            }
        }
    }
    found
}

#[test]
fn the_crate_graph_is_the_architecture() {
    let graph = Graph::of_workspace();
    assert!(graph.members.len() >= 7, "cargo metadata lists {:?}", graph.members);
    assert!(graph.path_to("bootvol", "bootvol-edge").is_some(), "the graph has no edges");
    let mut found = layer_violations(&graph);
    found.extend(kept_out_violations(&graph));
    found.extend(only_in_violations(&graph));
    super::report("the crate graph breaks a rule of ARCHITECTURE.md", &found);
}

#[test]
fn a_boot_edge_that_reaches_sql_is_named_with_the_path() {
    let members = [
        "bootvol-core",
        "bootvol-tftp",
        "bootvol-iscsi",
        "bootvol-db",
        "bootvol-runtime",
        "bootvol-edge",
        "bootvol-control",
    ];
    let clean = [
        ("bootvol-edge", "bootvol-core"),
        ("bootvol-edge", "axum"),
        ("axum", "hyper"),
        ("bootvol-db", "rusqlite"),
        ("bootvol-db", "bootvol-core"),
        ("bootvol-control", "bootvol-db"),
        ("bootvol-control", "reqwest"),
    ];
    assert_eq!(kept_out_violations(&Graph::from_edges(&members, &clean)), Vec::<String>::new());
    assert_eq!(layer_violations(&Graph::from_edges(&members, &clean)), Vec::<String>::new());
    // The edge takes a helper crate that links the database.
    let mut dirty = clean.to_vec();
    dirty.extend([("bootvol-edge", "helper"), ("helper", "bootvol-db")]);
    let graph = Graph::from_edges(&members, &dirty);
    assert_eq!(
        kept_out_violations(&graph),
        ["bootvol-edge reaches rusqlite: bootvol-edge -> helper -> bootvol-db -> rusqlite"]
    );
    // And when it names the control plane itself, the layers say so too.
    let graph = Graph::from_edges(
        &members,
        &[("bootvol-edge", "bootvol-control"), ("bootvol-control", "reqwest")],
    );
    assert_eq!(
        layer_violations(&graph),
        [
            "bootvol-edge (layer 2) depends on bootvol-control (layer 2): a crate names only lower layers"
        ]
    );
    assert_eq!(
        kept_out_violations(&graph),
        ["bootvol-edge reaches reqwest: bootvol-edge -> bootvol-control -> reqwest"]
    );
}

#[test]
fn a_lower_layer_naming_a_higher_one_or_a_library_kept_for_others_is_named() {
    let members = ["bootvol-core", "bootvol-db", "bootvol-runtime", "bootvol-new"];
    let graph = Graph::from_edges(
        &members,
        &[
            ("bootvol-core", "bootvol-db"),
            ("bootvol-runtime", "rusqlite"),
            ("bootvol-runtime", "sd-notify"),
        ],
    );
    assert_eq!(
        layer_violations(&graph),
        [
            "bootvol-core (layer 0) depends on bootvol-db (layer 1): a crate names only lower layers",
            "bootvol-new: no layer (add it to LAYERS in tests/it/tidy/graph.rs and ARCHITECTURE.md)",
        ]
    );
    assert_eq!(
        only_in_violations(&graph),
        ["bootvol-runtime depends on rusqlite, which only bootvol-db may use"]
    );
}
