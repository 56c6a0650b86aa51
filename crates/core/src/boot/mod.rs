//! "What should this MAC boot?": scenario decision, view model and iPXE rendering.
//!
//! [`script_for`] is the one function both `bootvol render` and the boot listeners call: a node
//! record (or none, for an unknown MAC) in, the script text out. Everything here is pure; the
//! caller looks the record up.

pub mod context;
pub mod render;
pub mod report;
pub mod scenario;
pub mod snapshot;

/// Re-exported for callers that still name it here; it lives with the values in `model`.
pub use crate::model::check_script_value;
pub use context::{BootContext, BootSettings};
pub use render::{RenderError, Templates};
pub use scenario::{BootOption, Scenario, ScenarioError, decide, secure_boot, set_boot_option};
pub use snapshot::{BootSnapshot, ServedScript, SnapshotBuilder};

use crate::model::{NodeRecord, ProvisionState, StorageInterfaceName};

/// A rendered script and what it was rendered for (for logs and the admin page).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootScript {
    pub text: String,
    pub node: Option<String>,
    pub scenario: &'static str,
    /// Why the default script was served to a known node, if it was.
    pub problem: Option<String>,
    /// A node not deployed (so served the default script by design): why it could not boot its
    /// volume once deployed, by the same decision and context a deployed node's script is made
    /// from; `None` when it could (or when deployed: then `problem` says).
    pub problem_once_deployed: Option<String>,
    /// Whether the text carries a secret (CHAP, mutual CHAP, or any value masked in `export`):
    /// the boot listeners then serve it only to the node itself.
    pub secret: bool,
}

/// Renders the script a MAC gets. Unknown MACs, nodes that do not boot from a volume and
/// nodes that do not validate get the default script (which hands back to the firmware), never
/// an error the firmware would retry for ever.
pub fn script_for(
    templates: &Templates,
    settings: &BootSettings,
    default_storage: StorageInterfaceName,
    record: Option<&NodeRecord>,
) -> BootScript {
    let Some(record) = record else {
        return default_script(templates, settings, None, "unknown", None);
    };
    let planned = match record.node.provision_state {
        // A node boots from its volume once deployed (or adopted), and while its deployment
        // powers it on.
        ProvisionState::Active | ProvisionState::Deploying => decide(record, default_storage)
            .and_then(|scenario| {
                BootContext::new(record, scenario, settings).map(|c| (scenario, c))
            }),
        // Scenario 4: the deploy ramdisk writes the image, then calls back.
        ProvisionState::WaitCallBack => BootContext::deploy(record, settings)
            .map(|c| (Scenario::Hba { force_deployment: true }, c)),
        _ => {
            let mut script =
                default_script(templates, settings, Some(record), "not-deployed", None);
            script.problem_once_deployed = decide(record, default_storage)
                .and_then(|scenario| BootContext::new(record, scenario, settings))
                .err()
                .map(|e| e.0);
            return script;
        }
    };
    let (scenario, context) = match planned {
        Ok(planned) => planned,
        Err(e) => return default_script(templates, settings, Some(record), "invalid", Some(e.0)),
    };
    let context = context.reporting(record, settings);
    match templates.render(&context) {
        Ok(text) => BootScript {
            secret: carries_secret(record, &context, &text),
            text,
            node: Some(record.node.name.clone()),
            scenario: scenario.name(),
            problem: None,
            problem_once_deployed: None,
        },
        Err(e) => default_script(templates, settings, Some(record), "invalid", Some(e.to_string())),
    }
}

fn default_script(
    templates: &Templates,
    settings: &BootSettings,
    record: Option<&NodeRecord>,
    scenario: &'static str,
    problem: Option<String>,
) -> BootScript {
    let mut context = BootContext::default_script(record, scenario);
    if let Some(record) = record {
        context = context.reporting(record, settings);
    }
    // The default template prints only a validated node name; should an override template
    // fail anyway, fall back to the one line that always works.
    let text = templates.render(&context).unwrap_or_else(|_| "#!ipxe\nexit\n".to_owned());
    BootScript {
        text,
        node: record.map(|r| r.node.name.clone()),
        scenario,
        problem,
        problem_once_deployed: None,
        secret: false,
    }
}

/// Whether a rendered script carries a secret: CHAP credentials by construction, or (for what
/// an override template may print) any of the record's secret values in its text.
fn carries_secret(record: &NodeRecord, context: &BootContext, text: &str) -> bool {
    let chap = context
        .san
        .iter()
        .flat_map(|san| &san.volumes)
        .any(|volume| volume.chap.is_some() || volume.reverse_chap.is_some());
    chap || serde_json::to_value(record).is_ok_and(|value| {
        crate::secrets::secret_values(&value).iter().any(|secret| text.contains(secret.as_str()))
    })
}
