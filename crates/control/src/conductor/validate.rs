//! Validation: every interface of a node checked (boot: the scenario, its files and
//! `force_persistent_boot_device`; deploy;
//! power: `driver_info`; storage), each with its verdict. Changes nothing.

use serde_json::Value;

use super::{Conductor, deploy};
use bootvol_core::boot::{Scenario, decide};
use bootvol_core::files::FileRoot;
use bootvol_core::model::{Driver, NodeRecord, hardware};

/// One line of `validate`: an interface and its verdict.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InterfaceCheck {
    pub interface: &'static str,
    pub result: bool,
    pub reason: Option<String>,
}

/// Every interface's verdict.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ValidationReport(pub Vec<InterfaceCheck>);

impl ValidationReport {
    pub fn ok(&self) -> bool {
        self.0.iter().all(|c| c.result)
    }

    /// `interface: reason` for each failure, one per line.
    pub fn failures(&self) -> String {
        self.0
            .iter()
            .filter(|c| !c.result)
            .map(|c| format!("{}: {}", c.interface, c.reason.as_deref().unwrap_or("failed")))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

impl Conductor {
    /// Checks every interface of a node: boot (the scenario and its files), deploy, power and
    /// storage. Image checks are skipped for boot-from-volume nodes.
    pub async fn validate(&self, record: &NodeRecord) -> ValidationReport {
        let check = |interface: &'static str, result: Result<(), String>| InterfaceCheck {
            interface,
            result: result.is_ok(),
            reason: result.err(),
        };
        // Read whenever a boot device is set, by every hardware type.
        let persistence =
            hardware::boot_persistence(&record.node.driver_info, true).map(|_| ()).map_err(|e| e.0);
        if record.node.driver == Driver::FakeHardware {
            // Ironic's test hardware type: every interface fake, no boot volume needed.
            let boot = check("boot", persistence);
            let rest = ["deploy", "power", "storage"].map(|i| check(i, Ok(())));
            return ValidationReport(std::iter::once(boot).chain(rest).collect());
        }
        let scenario =
            decide(record, self.config.default.default_storage_interface).map_err(|e| e.0);
        let boot = persistence.and_then(|()| self.boot_check(record, &scenario));
        let deploy = self.deploy_check(record, &scenario);
        let power =
            self.driver(record.node.driver).validate(&record.node).map_err(|e| e.to_string());
        let storage = self
            .storage
            .for_node(record)
            .and_then(|s| s.validate(record))
            .map_err(|e| e.to_string());
        ValidationReport(vec![
            check("boot", boot),
            deploy,
            check("power", power),
            check("storage", storage),
        ])
    }

    /// The power interface's verdict alone (what [`Conductor::validate`] says of `power`): the
    /// node's `driver_info` as its driver reads it (the BMC address first). For a form that
    /// saves BMC fields, so that it refuses what validation would.
    pub fn validate_power(&self, node: &bootvol_core::model::Node) -> Result<(), String> {
        if node.driver == Driver::FakeHardware {
            return Ok(());
        }
        self.driver(node.driver).validate(node).map_err(|e| e.to_string())
    }

    /// The boot interface's verdict: the scenario, Secure Boot (`secure_boot:true` needs
    /// `[secure_boot]`), and for an NFS root its kernel and ramdisk.
    fn boot_check(
        &self,
        record: &NodeRecord,
        scenario: &Result<Scenario, String>,
    ) -> Result<(), String> {
        if let Ok(scenario) = scenario
            && *scenario != Scenario::NotBootFromVolume
        {
            let signed = self.config.secure_boot.signing().is_some();
            bootvol_core::boot::secure_boot(record, signed).map_err(|e| e.0)?;
        }
        match scenario {
            Ok(Scenario::NfsRoot) => self.check_files(&["kernel", "ramdisk"].map(|k| {
                record
                    .node
                    .instance_info
                    .get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            })),
            Ok(_) => Ok(()),
            Err(e) => Err(e.clone()),
        }
    }

    /// The deploy interface's verdict (scenario 4's image deployment checked), with a note when
    /// a config drive is stored that no image deployment will write.
    fn deploy_check(
        &self,
        record: &NodeRecord,
        scenario: &Result<Scenario, String>,
    ) -> InterfaceCheck {
        let result = match scenario {
            Ok(Scenario::NotBootFromVolume) => Err(
                "bootvol deploys boot-from-volume nodes only: give the node a storage interface and a boot volume".into(),
            ),
            Ok(Scenario::Hba { force_deployment: true }) => deploy::check(self, record),
            Ok(_) => Ok(()),
            Err(_) => Err("see boot".into()),
        };
        let writes_image = matches!(scenario, Ok(Scenario::Hba { force_deployment: true }));
        let mut deploy =
            InterfaceCheck { interface: "deploy", result: result.is_ok(), reason: result.err() };
        if deploy.result && !writes_image && record.node.instance_info.contains_key("configdrive") {
            deploy.reason = Some(
                "instance_info.configdrive is stored but will not be written: this node's scenario writes no image (only scenario 4, an HBA volume deployment, does)".into(),
            );
        }
        deploy
    }

    /// Checks that files exist under `[http] files_root`.
    pub(super) fn check_files(&self, names: &[String]) -> Result<(), String> {
        let root = FileRoot::new(&self.config.http.files_root)
            .map_err(|e| format!("files_root {}: {e}", self.config.http.files_root.display()))?;
        for name in names {
            root.resolve(name).map_err(|e| format!("{name} under files_root: {e}"))?;
        }
        Ok(())
    }
}
