//! Shared helpers: a configuration on a temporary database, the scenario inventory, goldens.

use std::path::{Path, PathBuf};

use bootvol::boot::{BootScript, Templates, script_for};
use bootvol::config::Config;
use bootvol::db::Db;
use bootvol::inventory::{self, Format};
use bootvol::model::{MacAddr, NodeRecord};

pub(crate) fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(path)
}

/// A configuration with every storage interface enabled and its database in `dir`.
pub(crate) fn config_text(dir: &Path) -> String {
    format!(
        r#"[DEFAULT]
enabled_storage_interfaces = ["noop", "external", "cinder"]
default_storage_interface = "noop"
[database]
path = "{}"
[http]
public_url = "http://192.0.2.10:8080"
files_root = "/srv/bootvol/files"
[tftp]
root = "/usr/lib/ipxe"
[cinder]
url = "http://127.0.0.1:8776/v3"
[boot]
san_attempts = 4
san_retry_delay = 3
"#,
        dir.join("bootvol.db").display()
    )
}

pub(crate) fn config(dir: &Path) -> Config {
    Config::from_toml(&config_text(dir), "test").expect("test configuration")
}

/// The scenario inventory applied to an in-memory database.
pub(crate) fn scenario_db(config: &Config) -> Db {
    let text = std::fs::read_to_string(fixture("inventory/scenarios.json")).unwrap();
    let specs = inventory::parse(&text, Format::Json, config).expect("scenario inventory is valid");
    let mut db = Db::open_in_memory().unwrap();
    db.apply_inventory(&specs, false).unwrap();
    db
}

pub(crate) fn render_mac(db: &Db, config: &Config, mac: &str) -> BootScript {
    let mac: MacAddr = mac.parse().unwrap();
    let record = db.node_record_by_mac(mac).unwrap();
    render_record(config, record.as_ref())
}

pub(crate) fn render_record(config: &Config, record: Option<&NodeRecord>) -> BootScript {
    let templates = Templates::new(None).unwrap();
    script_for(
        &templates,
        &config.boot_settings(),
        config.default.default_storage_interface,
        record,
    )
}

/// Compares `actual` with `tests/fixtures/ipxe/<name>.ipxe`. A missing golden is written and
/// the test fails, so that a new golden is always read by a person before it is committed.
pub(crate) fn check_golden(name: &str, actual: &str) {
    let path = fixture(&format!("ipxe/{name}.ipxe"));
    match std::fs::read_to_string(&path) {
        Ok(expected) => {
            if expected != actual {
                let actual_path = path.with_extension("ipxe.actual");
                std::fs::write(&actual_path, actual).unwrap();
                panic!(
                    "{name}: script differs from {} (actual written to {})",
                    path.display(),
                    actual_path.display()
                );
            }
        }
        Err(_) => {
            std::fs::write(&path, actual).unwrap();
            panic!("{name}: golden {} did not exist; written, review it", path.display());
        }
    }
}
