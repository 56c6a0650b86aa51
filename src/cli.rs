//! The `bootvol` commands. Each one loads the configuration, opens what it needs, calls into
//! the library and writes its answer to `out` (standard output for the binary). Errors carry
//! their context up to `main`, which prints them and exits non-zero.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

use bootvol_core::boot::{BootScript, Templates, script_for};
use bootvol_core::config::{Config, DEFAULT_CONFIG_PATH};
use bootvol_core::inventory::{self, Format};
use bootvol_core::model::{MacAddr, NodeRecord};
use bootvol_db::Db;

/// The configuration `bootvol demo` runs on: every storage interface enabled, an in-memory
/// database, the sample inventory.
pub const DEMO_CONFIG: &str = include_str!("../examples/demo.toml");
/// The sample inventory: one node per scenario.
pub const DEMO_INVENTORY: &str = include_str!("../examples/inventory.json");

#[derive(Debug, Parser)]
#[command(
    name = "bootvol",
    version,
    about = "Boot-from-volume appliance: per-MAC iPXE scripts for bare-metal nodes"
)]
pub struct Cli {
    /// Configuration file [default: /etc/bootvol/bootvol.toml].
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Validate a configuration file and print the settings in effect.
    CheckConfig,
    /// Copy a single box's SQLite database into an empty PostgreSQL database, then check every
    /// table (row count and SHA-256 on both sides) before reporting success.
    MigrateToPostgres(MigrateArgs),
    /// Create or update nodes from an inventory file (JSON, or TOML by extension), all or nothing.
    Apply {
        file: PathBuf,
        /// Delete nodes that the file does not list.
        #[arg(long)]
        prune: bool,
        /// Name every node in the report (by default each line names the first 20 and counts).
        #[arg(long)]
        verbose: bool,
    },
    /// Print the inventory as JSON, every secret masked.
    Export,
    /// Print the iPXE script the boot listener serves to a MAC.
    Render {
        #[arg(long, value_name = "MAC")]
        mac: String,
    },
    /// Serve boot scripts and files over HTTP and TFTP until SIGTERM.
    Serve,
    /// Ask a running `serve` (process PID) to re-read the database and the template overrides
    /// (SIGHUP): the unit's `ExecReload=`, with no `kill` binary needed.
    Reload { pid: i32 },
    /// Attach or detach a node's volumes through its storage interface.
    Volumes {
        #[command(subcommand)]
        action: VolumesAction,
    },
    /// Compare attached volumes with Cinder once and bring the local connection info up to date.
    Sync,
    /// Node lifecycle: show, validate, deploy, undeploy, power...
    Node {
        #[command(subcommand)]
        action: NodeAction,
    },
    /// Probe nodes' boot targets from this box (AoE, NFS root, HTTP SAN, iSCSI; FCoE and HBA
    /// are not probeable) and record each node's result; exits non-zero when a target failed.
    /// A powered-on node is skipped unless --live.
    Probe {
        /// This node (name or UUID).
        #[arg(long, required_unless_present = "all", conflicts_with = "all")]
        node: Option<String>,
        /// Every node.
        #[arg(long)]
        all: bool,
        /// Probe powered-on nodes too (opens sessions while the node runs).
        #[arg(long)]
        live: bool,
    },
    /// Events (notifications), oldest first.
    Events {
        /// Only this node's (name or UUID).
        #[arg(long)]
        node: Option<String>,
        /// As JSON lines.
        #[arg(long)]
        json: bool,
        #[arg(long, default_value_t = 100)]
        limit: u32,
    },
    /// Run on an embedded default: the sample inventory in a temporary database, every sample
    /// node's scenario and script printed, then the boot listeners served until Ctrl-C.
    Demo {
        /// Print the scripts and exit, without serving.
        #[arg(long)]
        print: bool,
        /// The boot HTTP listener.
        #[arg(long, default_value = "127.0.0.1:8080")]
        http: std::net::SocketAddr,
        /// The TFTP listener.
        #[arg(long, default_value = "127.0.0.1:6969")]
        tftp: std::net::SocketAddr,
        /// The REST API (noauth in the demo).
        #[arg(long, default_value = "127.0.0.1:6385")]
        api: std::net::SocketAddr,
    },
}

#[derive(Debug, Subcommand)]
pub enum VolumesAction {
    /// Attach the node's volumes and record their connection info.
    Attach { node: String },
    /// Detach the node's volumes and forget their connection info (CHAP secrets included).
    Detach { node: String },
}

#[derive(Debug, Subcommand)]
pub enum NodeAction {
    /// Every node with its states and scenario.
    List,
    /// One node, secrets masked.
    Show {
        node: String,
        #[arg(long)]
        json: bool,
    },
    /// Checks every interface (boot, deploy, power, storage); exits non-zero on a failure.
    Validate {
        node: String,
    },
    /// Attach the volumes and boot the node from them (scenario 4: write the image first).
    Deploy {
        node: String,
    },
    /// Power off, detach the volumes, forget the connection info; back to available.
    Undeploy {
        node: String,
    },
    Manage {
        node: String,
    },
    Provide {
        node: String,
    },
    /// Take over a node whose OS was deployed by other means.
    Adopt {
        node: String,
    },
    Power {
        node: String,
        #[arg(value_parser = ["on", "off", "reboot", "soft-off"])]
        action: String,
    },
    BootDevice {
        node: String,
        #[arg(value_parser = ["pxe", "disk"])]
        device: String,
        #[arg(long)]
        persistent: bool,
    },
    /// Delete a node (refused while deployed or with volumes attached).
    Delete {
        node: String,
    },
}

/// `bootvol migrate-to-postgres`'s arguments.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// The SQLite database of the single box (`[database] path`).
    #[arg(long)]
    from: PathBuf,
    /// The PostgreSQL database: `postgres://user@host:port/db[?sslmode=require]`, empty.
    #[arg(long)]
    to: String,
    /// A file holding the PostgreSQL password.
    #[arg(long)]
    password_file: Option<PathBuf>,
    /// CA certificates (PEM): TLS required, the server certificate checked against them.
    #[arg(long)]
    ca_file: Option<PathBuf>,
}

/// Runs one command.
pub fn run(cli: Cli, out: &mut dyn Write) -> Result<()> {
    match cli.command {
        Command::Demo { print, http, tftp, api } => demo(print, [http, tftp, api], out),
        Command::Reload { pid } => reload(pid),
        Command::MigrateToPostgres(args) => migrate_to_postgres(&args, out),
        command => {
            let (mut config, origin) = load_config(cli.config.as_deref())?;
            if !matches!(command, Command::CheckConfig | Command::Serve)
                && config.http.public_url == bootvol_runtime::public_url::AUTO
            {
                // A command prints or starts what `serve` would serve now.
                config.http.public_url =
                    bootvol_runtime::public_url::initial(&config).get().to_string();
            }
            match command {
                Command::CheckConfig => check_config(&config, &origin, out),
                Command::Apply { file, prune, verbose } => {
                    apply(&config, &file, prune, verbose, out)
                }
                Command::Export => export(&config, out),
                Command::Render { mac } => render(&config, &mac, out),
                Command::Serve => serve(config, &origin),
                Command::Volumes { action } => volumes(config, action, out),
                Command::Sync => sync(config, out),
                Command::Node { action } => node_command(config, action, out),
                Command::Probe { node, all: _, live } => probe(config, node, live, out),
                Command::Events { node, json, limit } => {
                    events(&config, node.as_deref(), json, limit, out)
                }
                Command::Demo { .. } | Command::Reload { .. } | Command::MigrateToPostgres(_) => {
                    unreachable_demo()
                }
            }
        }
    }
}

fn migrate_to_postgres(args: &MigrateArgs, out: &mut dyn Write) -> Result<()> {
    if !args.from.is_file() {
        bail!("{}: no such SQLite database", args.from.display());
    }
    let source =
        Db::open(&args.from).with_context(|| format!("opening {}", args.from.display()))?;
    let target = bootvol_db::PostgresTarget::new(
        &args.to,
        args.password_file.as_deref(),
        args.ca_file.as_deref(),
    )
    .map_err(anyhow::Error::msg)?;
    let shown = target.shown.clone();
    let dest = Db::open_postgres(std::sync::Arc::new(target))
        .with_context(|| format!("connecting to {shown}"))?;
    let checks = source.copy_to_postgres(&dest)?;
    for check in &checks {
        writeln!(out, "{:<20} {:>8} rows  sha256 {}", check.table, check.rows, check.checksum)?;
    }
    writeln!(
        out,
        "migrated {} to {shown}: every table checked (rows and checksum); set [database] url = \"{shown}\" and remove path",
        args.from.display()
    )?;
    Ok(())
}

fn unreachable_demo() -> Result<()> {
    bail!("internal: demo and reload are handled before the configuration is loaded")
}

/// SIGHUP to `pid` (it needs no configuration: the process re-reads its own).
fn reload(pid: i32) -> Result<()> {
    if pid <= 0 {
        bail!("{pid} is not a process id");
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGHUP)
        .with_context(|| format!("sending SIGHUP to process {pid}"))?;
    Ok(())
}

fn load_config(path: Option<&Path>) -> Result<(Config, String)> {
    let path = path.unwrap_or(Path::new(DEFAULT_CONFIG_PATH));
    let config = Config::load(path).context(
        "no usable configuration (pass --config FILE; examples/bootvol.toml shows every key; `bootvol demo` needs none)",
    )?;
    Ok((config, path.display().to_string()))
}

fn check_config(config: &Config, origin: &str, out: &mut dyn Write) -> Result<()> {
    // The limit `serve` will run with: it raises the soft limit to the hard one.
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)?;
    config.check_descriptors(hard, origin)?;
    let database = bootvol_db::Target::from_config(&config.database)
        .map_err(|m| anyhow::anyhow!("{origin}: {m}"))?;
    // What `serve` signs at start, signed now (into a directory removed at once).
    let tftp_root = bootvol_core::files::FileRoot::new(&config.tftp.root).ok();
    let signed = crate::app::signed_binaries(config, tftp_root.as_ref())
        .with_context(|| format!("{origin}: [secure_boot]"))?;
    writeln!(out, "{origin}: OK")?;
    writeln!(out, "{}", database.describe())?;
    writeln!(out, "{}", bootvol_runtime::public_url::explain(config))?;
    match bootvol_edge::http::tls::from_config(&config.api)
        .map_err(|m| anyhow::anyhow!("{origin}: {m}"))?
    {
        Some(tls) => writeln!(
            out,
            "api: TLS on {} (certificate {}, SHA-256 fingerprint {}); plain HTTP refused there",
            config.api.listen,
            tls.cert.display(),
            tls.fingerprint
        )?,
        None => writeln!(out, "api: plain HTTP on {} (no [api] tls_cert)", config.api.listen)?,
    }
    if let Some(addr) = config.api.loopback_listen {
        writeln!(out, "api: plain HTTP, REST API only, on loopback {addr}")?;
    }
    match config.secure_boot.signing().filter(|_| signed.is_some()) {
        Some((_, cert)) => writeln!(
            out,
            "secure_boot: the EFI binaries of {} are served signed with the key of {} (signing checked)",
            config.tftp.root.display(),
            cert.display()
        )?,
        None => writeln!(
            out,
            "secure_boot: off (no [secure_boot] key): nodes with capability secure_boot:true do not validate"
        )?,
    }
    writeln!(out, "{config:#?}")?;
    Ok(())
}

fn open_db(config: &Config) -> Result<Db> {
    Db::open_config(&config.database)
        .with_context(|| format!("opening {}", config.database.shown()))
}

fn apply(
    config: &Config,
    file: &Path,
    prune: bool,
    verbose: bool,
    out: &mut dyn Write,
) -> Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let specs = inventory::parse(&text, Format::from_path(file), config).with_context(|| {
        format!("{} is not a valid inventory; nothing was changed", file.display())
    })?;
    let mut db = open_db(config)?;
    let report = db.apply_inventory(&specs, prune).with_context(|| {
        format!("{} conflicts with the database; nothing was changed", file.display())
    })?;
    for (label, names) in [
        ("created", &report.created),
        ("updated", &report.updated),
        ("unchanged", &report.unchanged),
        ("deleted", &report.deleted),
    ] {
        if !names.is_empty() {
            writeln!(out, "{label}: {}", report_line(names, verbose))?;
        }
    }
    Ok(())
}

/// Names shown on a line of `apply`'s report unless `--verbose`.
const REPORT_NAMES: usize = 20;

/// One line of `apply`'s report: the names (the first [`REPORT_NAMES`] unless `verbose`) and
/// how many there are, so that an inventory of 100,000 nodes reports in a few lines.
fn report_line(names: &[String], verbose: bool) -> String {
    let shown = if verbose { names.len() } else { names.len().min(REPORT_NAMES) };
    let listed = names[..shown].join(", ");
    match names.len() - shown {
        0 => format!("{listed} ({})", names.len()),
        more => format!("{listed} and {more} more ({}; --verbose names them all)", names.len()),
    }
}

fn export(config: &Config, out: &mut dyn Write) -> Result<()> {
    let db = open_db(config)?;
    // A page of records at a time, each node written as it comes: what
    // `serde_json::to_string_pretty(&inventory::export(..))` prints, byte for byte, without the
    // whole document in memory (100,000 nodes would hold gigabytes).
    let mut count = 0usize;
    out.write_all(b"{\n  \"nodes\": [")?;
    db.for_each_node_record_page(EXPORT_PAGE, |records| {
        for record in &records {
            let node = serde_json::to_string_pretty(&inventory::export_one(record))?;
            out.write_all(if count == 0 { b"\n" } else { b",\n" })?;
            // JSON strings hold no raw newline: every line of the node is indented as one.
            for (i, line) in node.lines().enumerate() {
                if i > 0 {
                    out.write_all(b"\n")?;
                }
                write!(out, "    {line}")?;
            }
            count += 1;
        }
        Ok::<(), anyhow::Error>(())
    })?;
    out.write_all(if count == 0 { b"]\n}\n" } else { b"\n  ]\n}\n" })?;
    Ok(())
}

/// Nodes `export` reads at a time.
const EXPORT_PAGE: usize = 500;

fn templates(config: &Config) -> Result<Templates> {
    Ok(Templates::new(config.boot.templates_dir.as_deref())?)
}

fn render(config: &Config, mac: &str, out: &mut dyn Write) -> Result<()> {
    let mac: MacAddr = mac.parse()?;
    let db = open_db(config)?;
    let record = db.node_record_by_mac(mac)?;
    let script = script_for_config(config, &templates(config)?, record.as_ref());
    if let Some(problem) = &script.problem {
        eprintln!(
            "bootvol: node {}: {problem}; the default script is served",
            script.node.as_deref().unwrap_or("?")
        );
    }
    out.write_all(script.text.as_bytes())?;
    Ok(())
}

/// Threads of `serve`'s blocking pool.
const BLOCKING_THREADS: usize = 32;

fn serve(config: Config, origin: &str) -> Result<()> {
    let _log = init_logging("info");
    let limit = raise_descriptor_limit();
    config.check_descriptors(limit, origin)?;
    // On one core (a 1-vCPU appliance, a pinned benchmark) a current-thread runtime: there,
    // tokio's multi-thread scheduler with its single worker let 1,000 busy connections wait
    // unevenly (p99 158 ms, against 11.7 ms current-thread, at the same rate; see
    // docs/boot-path-profile.md). SQLite and bcrypt run on the blocking pool either way.
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let mut builder = if cores == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        tokio::runtime::Builder::new_multi_thread()
    };
    // The blocking pool (SQLite, bcrypt, `/files/` reads) bounded: at tokio's 512, connections
    // that each start a file read at once made a thread apiece, each with its stack and malloc
    // arena in resident memory (tests/it/flood.rs measures it under 64 MiB).
    let runtime = builder.max_blocking_threads(BLOCKING_THREADS).enable_all().build()?;
    runtime.block_on(async {
        let listeners = crate::app::Listeners::bind(&config).await?;
        crate::app::serve(config, listeners, tokio_util::sync::CancellationToken::new()).await
    })
}

/// Raises `RLIMIT_NOFILE`'s soft limit to its hard limit (systemd starts services at 1,024) and
/// answers the soft limit `serve` runs with.
fn raise_descriptor_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else { return 1024 };
    if soft >= hard {
        return soft;
    }
    match setrlimit(Resource::RLIMIT_NOFILE, hard, hard) {
        Ok(()) => hard,
        Err(e) => {
            tracing::warn!(soft, hard, error = %e, "cannot raise the file descriptor limit");
            soft
        }
    }
}

/// Logs to standard error (`bootvol_runtime::logging`); `RUST_LOG` filters, else `default_filter`: `info`
/// for `serve`, `warn` for the commands whose own output is their answer. The guard writes what
/// is queued when dropped: keep it for the command's life.
fn init_logging(default_filter: &str) -> Option<tracing_appender::non_blocking::WorkerGuard> {
    bootvol_runtime::logging::init(default_filter)
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

/// The storage interfaces over a fresh database connection, after recovering what an
/// interrupted run left half done.
async fn storage(
    config: Config,
) -> Result<(bootvol_control::storage::StorageInterfaces, bootvol_db::SharedDb)> {
    let db = bootvol_db::SharedDb::new(open_db(&config)?);
    let interfaces =
        bootvol_control::storage::StorageInterfaces::new(std::sync::Arc::new(config), db.clone())?;
    if let Some(cinder) = interfaces.cinder() {
        let report = cinder.recover().await?;
        for line in report
            .undone
            .iter()
            .map(|v| format!("recovered: undid the interrupted attach of {v}"))
            .chain(
                report
                    .detached
                    .iter()
                    .map(|v| format!("recovered: finished the interrupted detach of {v}")),
            )
        {
            eprintln!("bootvol: {line}");
        }
        for failure in &report.failed {
            eprintln!("bootvol: recovery failed: {failure}");
        }
    }
    Ok((interfaces, db))
}

fn volumes(config: Config, action: VolumesAction, out: &mut dyn Write) -> Result<()> {
    use bootvol_control::conductor::{Action, Conductor, ConductorError};
    let _log = init_logging("warn");
    runtime()?.block_on(async {
        let (_, db) = storage(config.clone()).await?;
        let conductor = Conductor::from_config(std::sync::Arc::new(config), db)?;
        let (node, action, done) = match action {
            VolumesAction::Attach { node } => (node, Action::AttachVolumes, "attached"),
            VolumesAction::Detach { node } => (node, Action::DetachVolumes, "detached"),
        };
        // Through the conductor, as every action: the node's lock is this action's.
        let record = match conductor.run(&node, action).await {
            Ok(record) => record,
            Err(ConductorError::Failed(message)) => bail!("node {node}: {message}"),
            Err(e) => return Err(e.into()),
        };
        let interface = conductor.storage().for_node(&record)?;
        writeln!(out, "{done}: {} ({} storage)", record.node.name, interface.name())?;
        Ok(())
    })
}

fn sync(config: Config, out: &mut dyn Write) -> Result<()> {
    let _log = init_logging("warn");
    runtime()?.block_on(async {
        let (interfaces, _) = storage(config).await?;
        let Some(cinder) = interfaces.cinder() else {
            bail!("the cinder storage interface is not enabled: nothing to sync");
        };
        let report = cinder.sync(bootvol_db::SyncRunner::Cli).await?;
        writeln!(out, "checked: {}", report.checked)?;
        for line in &report.updated {
            writeln!(out, "updated: {line}")?;
        }
        for line in &report.drifted {
            writeln!(out, "drift: {line}")?;
        }
        for line in &report.errors {
            writeln!(out, "error: {line}")?;
        }
        if report.errors.is_empty() && report.drifted.is_empty() {
            Ok(())
        } else {
            bail!("sync found problems")
        }
    })
}

fn node_command(config: Config, action: NodeAction, out: &mut dyn Write) -> Result<()> {
    use bootvol_control::conductor::{Action, Conductor, Verb};
    use bootvol_control::power::{BootDevice, PowerAction};
    let _log = init_logging("warn");
    let deploy_wait = std::time::Duration::from_secs(config.deploy.callback_timeout);
    runtime()?.block_on(async {
        let db = bootvol_db::SharedDb::new(open_db(&config)?);
        let conductor = Conductor::from_config(std::sync::Arc::new(config), db)?;
        let verb = |name: &str, verb: Verb| (name.to_owned(), verb);
        let provision = match &action {
            NodeAction::Deploy { node } => Some(verb(node, Verb::Deploy)),
            NodeAction::Undeploy { node } => Some(verb(node, Verb::Undeploy)),
            NodeAction::Manage { node } => Some(verb(node, Verb::Manage)),
            NodeAction::Provide { node } => Some(verb(node, Verb::Provide)),
            NodeAction::Adopt { node } => Some(verb(node, Verb::Adopt)),
            _ => None,
        };
        if let Some((node, verb)) = provision {
            let mut record = conductor.run(&node, Action::Provision(verb)).await?;
            if record.node.provision_state == bootvol_core::model::ProvisionState::WaitCallBack {
                writeln!(out, "{}: wait call-back (the deploy ramdisk is writing the image)", record.node.name)?;
                record = conductor.wait_for_deploy(&node, deploy_wait).await?;
                if let Some(error) = record.node.last_error.as_deref().filter(|_| record.node.provision_state != bootvol_core::model::ProvisionState::Active) {
                    bail!("node {}: {error}", record.node.name);
                }
            }
            writeln!(out, "{}: {}", record.node.name, record.node.provision_state)?;
            return Ok(());
        }
        match action {
            NodeAction::List => {
                let records = conductor.db().run(|db| db.node_records()).await?;
                writeln!(out, "{:<24} {:<14} {:<10} {:<10} {:<12} LAST ERROR", "NAME", "PROVISION", "POWER", "STORAGE", "SCENARIO")?;
                let default = conductor.default_storage();
                for r in records {
                    let scenario = bootvol_core::boot::decide(&r, default).map(|s| s.name()).unwrap_or("invalid");
                    let power = r.node.power_state.map_or("-", |p| p.as_str());
                    let storage = r.node.effective_storage_interface(default);
                    writeln!(out, "{:<24} {:<14} {:<10} {:<10} {:<12} {}", r.node.name, r.node.provision_state.as_str(), power,
                        storage.as_str(), scenario, r.node.last_error.as_deref().unwrap_or(""))?;
                }
            }
            NodeAction::Show { node, json } => {
                let record = conductor.load(&node).await?;
                let mut value = serde_json::to_value(&record)?;
                bootvol_core::secrets::mask(&mut value);
                if json {
                    writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
                } else {
                    let n = &record.node;
                    writeln!(out, "name: {}\nuuid: {}\ndriver: {}\nprovision_state: {}\npower_state: {}\nstorage_interface: {}\nlast_error: {}",
                        n.name, n.uuid, n.driver, n.provision_state, n.power_state.map_or("-", |p| p.as_str()),
                        n.storage_interface.map_or("(default)", |s| s.as_str()), n.last_error.as_deref().unwrap_or("-"))?;
                    writeln!(out, "{}", serde_json::to_string_pretty(&value["volume_targets"])?)?;
                }
            }
            NodeAction::Validate { node } => {
                let record = conductor.load(&node).await?;
                let report = conductor.validate(&record).await;
                for check in &report.0 {
                    writeln!(out, "{:<8} {}", check.interface, if check.result { "ok".to_owned() } else { format!("FAILED: {}", check.reason.as_deref().unwrap_or("")) })?;
                }
                if !report.ok() {
                    bail!("node {node} does not validate");
                }
            }
            NodeAction::Power { node, action } => {
                let action = match action.as_str() {
                    "on" => PowerAction::On,
                    "off" => PowerAction::Off,
                    "reboot" => PowerAction::Reboot,
                    _ => PowerAction::SoftOff,
                };
                let record = conductor.run(&node, Action::Power(action)).await?;
                writeln!(out, "{}: {}", record.node.name, record.node.power_state.map_or("-", |p| p.as_str()))?;
            }
            NodeAction::BootDevice { node, device, persistent } => {
                let device = if device == "pxe" { BootDevice::Pxe } else { BootDevice::Disk };
                conductor.run(&node, Action::BootDevice { device, persistent }).await?;
                writeln!(out, "{node}: boot device set")?;
            }
            NodeAction::Delete { node } => {
                conductor.run(&node, Action::Delete).await?;
                writeln!(out, "deleted: {node}")?;
            }
            _ => unreachable_provision()?,
        }
        Ok(())
    })
}

/// `bootvol probe`: a line per node (status and summary), a line per target under it; an error
/// (exit 1) when one failed.
fn probe(config: Config, node: Option<String>, live: bool, out: &mut dyn Write) -> Result<()> {
    use bootvol_control::probe::{Selection, run};
    use bootvol_core::probe::Status;
    let _log = init_logging("warn");
    let selection = node.map_or(Selection::All, Selection::Node);
    let probes = runtime()?.block_on(async {
        let db = bootvol_db::SharedDb::new(open_db(&config)?);
        let conductor =
            bootvol_control::conductor::Conductor::from_config(std::sync::Arc::new(config), db)?;
        anyhow::Ok(run(&conductor, selection, live).await?)
    })?;
    for probe in &probes {
        let r = &probe.report;
        let at = bootvol_core::timefmt::format_unix(u64::try_from(r.probed_at).unwrap_or(0));
        writeln!(out, "{} {} {}: {}", probe.name, at, r.status.label(), r.summary)?;
        for line in &r.lines {
            writeln!(out, "  {line}")?;
        }
    }
    let failed = probes.iter().filter(|p| p.report.status == Status::Failed).count();
    if failed > 0 {
        bail!("{failed} of {} nodes probed: a target failed", probes.len());
    }
    Ok(())
}

fn unreachable_provision() -> Result<()> {
    bail!("internal: provision actions are handled above")
}

fn events(
    config: &Config,
    node: Option<&str>,
    json: bool,
    limit: u32,
    out: &mut dyn Write,
) -> Result<()> {
    let db = open_db(config)?;
    let uuid = match node {
        Some(name) => Some(
            db.node_record(name)?
                .with_context(|| format!("no node named or with UUID {name}"))?
                .node
                .uuid,
        ),
        None => None,
    };
    for event in db.events(uuid.as_deref(), limit)? {
        if json {
            writeln!(out, "{}", serde_json::to_string(&event)?)?;
        } else {
            writeln!(
                out,
                "{} {:<5} {:<44} {} {}",
                event.created_at,
                event.level,
                event.event_type,
                event.node_uuid.as_deref().unwrap_or("-"),
                event.payload
            )?;
        }
    }
    Ok(())
}

fn script_for_config(
    config: &Config,
    templates: &Templates,
    record: Option<&NodeRecord>,
) -> BootScript {
    script_for(templates, &config.boot_settings(), config.default.default_storage_interface, record)
}

fn demo(
    print_only: bool,
    [http, tftp, api]: [std::net::SocketAddr; 3],
    out: &mut dyn Write,
) -> Result<()> {
    let folder = std::env::temp_dir().join(format!("bootvol-demo-{}", std::process::id()));
    std::fs::create_dir_all(folder.join("files"))?;
    let mut config = Config::from_toml(DEMO_CONFIG, "embedded demo configuration")?;
    config.database.path = folder.join("bootvol.db");
    config.http.files_root = folder.join("files");
    config.http.listen = http;
    config.http.public_url = format!("http://{http}");
    config.tftp.listen = tftp;
    config.api.listen = api;
    let specs = inventory::parse(DEMO_INVENTORY, Format::Json, &config)?;
    let mut db = Db::open(&config.database.path)?;
    db.apply_inventory(&specs, false)?;
    let templates = templates(&config)?;
    writeln!(
        out,
        "bootvol demo: {} sample nodes in {}\n",
        specs.len(),
        config.database.path.display()
    )?;
    let records = db.node_records()?;
    for record in &records {
        let script = script_for_config(&config, &templates, Some(record));
        let macs: Vec<String> = record.ports.iter().map(|p| p.address.to_string()).collect();
        writeln!(
            out,
            "=== {} [{}] MAC {} ===",
            record.node.name,
            script.scenario,
            macs.join(", ")
        )?;
        if let Some(problem) = &script.problem {
            writeln!(out, "# not bootable from its volume: {problem}")?;
        }
        writeln!(out, "{}", script.text)?;
    }
    drop(db);
    if print_only {
        let _ = std::fs::remove_dir_all(&folder);
        return Ok(());
    }
    let mac = records
        .first()
        .and_then(|r| r.ports.first())
        .map(|p| p.address.hexhyp())
        .unwrap_or_default();
    writeln!(
        out,
        "[boot] script_secrets = \"any\": every client gets every script, CHAP secrets included \
         (on a real boot network only the node itself would: \"neighbour\", the default)\n"
    )?;
    writeln!(
        out,
        "Serving until Ctrl-C. Try:\n  curl {}/boot.ipxe\n  curl {}/boot/{mac}.ipxe\n  curl -s tftp://{tftp}/boot.ipxe\n  \
         baremetal --os-auth-type none --os-endpoint http://{api} node list",
        config.http.public_url, config.http.public_url
    )?;
    out.flush()?;
    let result = serve(config, "bootvol demo");
    let _ = std::fs::remove_dir_all(&folder);
    result
}
