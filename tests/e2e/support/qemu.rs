//! One VM boot: QEMU under TCG with COM1 in a file and isa-debug-exit, watched until it exits or
//! a deadline passes, then killed.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use super::process::{Daemon, command_in};
use super::tail;

/// QEMU's exit status when the BIOS test volume wrote 0x10 to isa-debug-exit.
pub(crate) const EXIT_BIOS_MARKER: i32 = 33;
/// QEMU's exit status when the EFI test application wrote 0x11 to isa-debug-exit.
pub(crate) const EXIT_EFI_MARKER: i32 = 35;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Firmware {
    /// SeaBIOS, with the iPXE ROM of the NIC.
    Bios,
    /// OVMF (EDK2), with the iPXE EFI ROM of the NIC.
    Uefi,
    /// OVMF with no option ROM on the NIC: EDK2's own PXE client boots.
    UefiNoRom,
    /// OVMF with no option ROM on the NIC and its IPv4 PXE turned off (fw_cfg), so that the
    /// NIC's only boot option left is UEFI HTTP Boot over IPv4.
    UefiHttp,
    /// OVMF with Secure Boot enforced (SMM, secure flash) and Debian's test key the only one in
    /// PK, KEK and db (`OVMF_VARS_4M.snakeoil.fd`); no option ROM on the NIC, whose unsigned
    /// ROM OVMF would run regardless (research/secure-boot.md): EDK2's own PXE boots, and only
    /// what that key signed runs.
    UefiSecureBoot,
    /// OVMF with Secure Boot enforced and Microsoft's keys in `db` (`OVMF_VARS_4M.ms.fd`), as
    /// most servers ship: what Microsoft's UEFI CA signed runs (shim), nothing else.
    UefiSecureBootMs,
}

/// The firmware files of [`Firmware::UefiSecureBoot`], and the key its `db` trusts (PEM,
/// encrypted with the passphrase `snakeoil`) with its certificate.
pub(crate) const SECURE_BOOT_CODE: &str = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd";
pub(crate) const SECURE_BOOT_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.snakeoil.fd";
pub(crate) const SECURE_BOOT_MS_VARS: &str = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd";
pub(crate) const SNAKEOIL_KEY: &str = "/usr/share/ovmf/PkKek-1-snakeoil.key";
pub(crate) const SNAKEOIL_CERT: &str = "/usr/share/ovmf/PkKek-1-snakeoil.pem";

impl Firmware {
    /// Only SMM may write the variable store: the guest cannot turn Secure Boot off.
    pub(crate) const SECURE_FLASH: [&str; 2] =
        ["-global", "driver=cfi.pflash01,property=secure,value=on"];

    /// Whether the firmware enforces Secure Boot (QEMU needs `smm=on` and [`Self::SECURE_FLASH`]).
    pub(crate) fn secure_boot(self) -> bool {
        matches!(self, Firmware::UefiSecureBoot | Firmware::UefiSecureBootMs)
    }

    /// OVMF's code and the variable store a VM starts from a copy of.
    pub(crate) fn ovmf(self) -> (&'static str, &'static str) {
        match self {
            Firmware::UefiSecureBoot => (SECURE_BOOT_CODE, SECURE_BOOT_VARS),
            Firmware::UefiSecureBootMs => (SECURE_BOOT_CODE, SECURE_BOOT_MS_VARS),
            _ => ("/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/OVMF/OVMF_VARS_4M.fd"),
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) enum Network {
    /// QEMU's user-mode network; the host is 10.0.2.2 and DHCP hands out `bootfile`.
    User { bootfile: String },
    /// The tap of a network namespace (QEMU then runs inside it).
    Tap { netns: String, ifname: String },
}

/// A VM to boot.
#[derive(Debug, Clone)]
pub(crate) struct Vm {
    pub(crate) firmware: Firmware,
    pub(crate) network: Network,
    pub(crate) mac: String,
    pub(crate) memory_mib: u32,
    /// A local disk the firmware tries after the network (read-only).
    pub(crate) local_disk: Option<PathBuf>,
    /// Writable disks on a virtio-scsi controller (an HBA's LUNs, as Linux sees them).
    pub(crate) scsi_disks: Vec<ScsiDisk>,
    /// Let the VM reboot (a guest reboot, or SeaBIOS when nothing boots), instead of QEMU
    /// exiting (`-no-reboot`).
    pub(crate) allow_reboot: bool,
}

/// A disk on the VM's virtio-scsi controller, with the identity the guest reads from its VPD
/// pages (0x83: the WWN, 0x80: the serial).
#[derive(Debug, Clone)]
pub(crate) struct ScsiDisk {
    pub(crate) path: PathBuf,
    pub(crate) wwn: String,
    pub(crate) serial: String,
    /// The firmware's boot order (the NIC is 1), or not bootable.
    pub(crate) bootindex: Option<u32>,
}

/// How a boot ended.
#[derive(Debug)]
pub(crate) struct Boot {
    /// `None` when QEMU was killed at the deadline.
    pub(crate) status: Option<ExitStatus>,
    pub(crate) elapsed: Duration,
    pub(crate) serial: String,
    /// When each watched string first appeared on the serial port, counted from QEMU's start.
    pub(crate) seen: Vec<(String, Option<Duration>)>,
    serial_path: PathBuf,
    qemu_log: PathBuf,
}

impl Vm {
    pub(crate) fn new(firmware: Firmware, network: Network, mac: &str) -> Vm {
        Vm {
            firmware,
            network,
            mac: mac.to_owned(),
            memory_mib: 256,
            local_disk: None,
            scsi_disks: Vec::new(),
            allow_reboot: false,
        }
    }

    fn args(&self, dir: &Path, serial: &Path) -> Vec<String> {
        let secure = self.firmware.secure_boot();
        let mut args: Vec<String> = [
            "-machine",
            if secure { "q35,graphics=off,smm=on" } else { "q35,graphics=off" },
            "-accel",
            "tcg",
            "-nodefaults",
            "-display",
            "none",
            "-device",
            "isa-debug-exit,iobase=0xf4,iosize=0x04",
        ]
        .into_iter()
        .map(String::from)
        .collect();
        if !self.allow_reboot {
            args.push("-no-reboot".into());
        }
        args.extend(["-m".into(), self.memory_mib.to_string()]);
        args.extend(["-serial".into(), format!("file:{}", serial.display())]);
        args.extend(["-boot".into(), "reboot-timeout=0".into()]);
        if self.firmware != Firmware::Bios {
            let vars = dir.join("ovmf-vars.fd");
            let (code, store) = self.firmware.ovmf();
            std::fs::copy(store, &vars).expect("copying OVMF vars");
            if secure {
                args.extend(Firmware::SECURE_FLASH.map(String::from));
            }
            args.extend([
                "-drive".into(),
                format!("if=pflash,format=raw,unit=0,readonly=on,file={code}"),
                "-drive".into(),
                format!("if=pflash,format=raw,unit=1,file={}", vars.display()),
                // No IPv6 in EDK2's own network stack (iPXE keeps its own): once iPXE hands
                // back, OVMF tries the NIC's other boot options, and on QEMU's user network its
                // PXEv6 and HTTPv6 clients at times wait longer than a boot may take.
                "-fw_cfg".into(),
                "name=opt/org.tianocore/IPv6Support,string=no".into(),
            ]);
        }
        if self.firmware == Firmware::UefiHttp {
            args.extend([
                "-fw_cfg".into(),
                "name=opt/org.tianocore/IPv4PXESupport,string=no".into(),
            ]);
        }
        let netdev = match &self.network {
            Network::User { bootfile } => format!("user,id=n0,bootfile={bootfile}"),
            Network::Tap { ifname, .. } => {
                format!("tap,id=n0,ifname={ifname},script=no,downscript=no")
            }
        };
        args.extend(["-netdev".into(), netdev]);
        let mut nic = format!("virtio-net-pci,netdev=n0,mac={},bootindex=1", self.mac);
        if matches!(self.firmware, Firmware::UefiNoRom | Firmware::UefiHttp) || secure {
            nic.push_str(",romfile=");
        }
        args.extend(["-device".into(), nic]);
        if let Some(disk) = &self.local_disk {
            args.extend([
                "-drive".into(),
                format!("if=none,id=local,format=raw,readonly=on,file={}", disk.display()),
                "-device".into(),
                "virtio-blk-pci,drive=local,bootindex=2".into(),
            ]);
        }
        if !self.scsi_disks.is_empty() {
            args.extend(["-device".into(), "virtio-scsi-pci,id=hba0".into()]);
        }
        for (i, disk) in self.scsi_disks.iter().enumerate() {
            let mut device =
                format!("scsi-hd,bus=hba0.0,drive=lun{i},wwn={},serial={}", disk.wwn, disk.serial);
            if let Some(index) = disk.bootindex {
                device.push_str(&format!(",bootindex={index}"));
            }
            args.extend([
                "-drive".into(),
                format!("if=none,id=lun{i},format=raw,file={}", disk.path.display()),
                "-device".into(),
                device,
            ]);
        }
        args
    }

    /// Boots, watching the serial port for `watch`, until QEMU exits or `deadline` passes.
    pub(crate) fn boot(&self, dir: &Path, watch: &[&str], deadline: Duration) -> Boot {
        self.boot_with(dir, watch, deadline, &mut |_| {})
    }

    /// [`Vm::boot`], calling `on_seen` the moment each watched string first appears.
    pub(crate) fn boot_with(
        &self,
        dir: &Path,
        watch: &[&str],
        deadline: Duration,
        on_seen: &mut dyn FnMut(&str),
    ) -> Boot {
        self.boot_until(dir, watch, deadline, &mut |seen| {
            on_seen(seen);
            false
        })
    }

    /// [`Vm::boot_with`], stopping QEMU as soon as `on_seen` answers `true`.
    pub(crate) fn boot_until(
        &self,
        dir: &Path,
        watch: &[&str],
        deadline: Duration,
        on_seen: &mut dyn FnMut(&str) -> bool,
    ) -> Boot {
        let serial_path = dir.join("serial.log");
        let qemu_log = dir.join("qemu.log");
        let _ = std::fs::remove_file(&serial_path);
        let netns = match &self.network {
            Network::Tap { netns, .. } => Some(netns.as_str()),
            Network::User { .. } => None,
        };
        let mut cmd = command_in(netns, "qemu-system-x86_64");
        cmd.args(self.args(dir, &serial_path));
        let started = Instant::now();
        let mut qemu = Daemon::spawn("qemu", cmd, &qemu_log);
        let mut seen: Vec<(String, Option<Duration>)> =
            watch.iter().map(|w| ((*w).to_owned(), None)).collect();
        let mut serial = String::new();
        let mut stop = false;
        let status = loop {
            let exited = qemu.try_status();
            if let Ok(bytes) = std::fs::read(&serial_path) {
                serial = String::from_utf8_lossy(&bytes).into_owned();
            }
            let now = started.elapsed();
            // SeaBIOS's serial console wraps iPXE's lines at 80 columns.
            let unwrapped = serial.replace("\r\n", "");
            for (text, when) in &mut seen {
                if when.is_none()
                    && (serial.contains(text.as_str()) || unwrapped.contains(text.as_str()))
                {
                    *when = Some(now);
                    stop |= on_seen(text);
                }
            }
            if exited.is_some() {
                break exited;
            }
            if stop || now >= deadline {
                qemu.stop(Duration::from_secs(2));
                break None;
            }
            std::thread::sleep(Duration::from_millis(25));
        };
        let elapsed = started.elapsed();
        drop(qemu);
        if let Ok(bytes) = std::fs::read(&serial_path) {
            serial = String::from_utf8_lossy(&bytes).into_owned();
        }
        let marks: Vec<String> = seen
            .iter()
            .map(|(text, when)| match when {
                Some(t) => format!("{text:?} at {:.1} s", t.as_secs_f64()),
                None => format!("{text:?} never"),
            })
            .collect();
        eprintln!(
            "qemu: {} after {:.1} s; {}",
            status.map_or("killed at the deadline".to_owned(), |s| s.to_string()),
            elapsed.as_secs_f64(),
            marks.join(", ")
        );
        Boot { status, elapsed, serial, seen, serial_path, qemu_log }
    }
}

impl Boot {
    /// QEMU's exit code, or `None` when it was killed.
    pub(crate) fn code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }

    /// When `text` first appeared on the serial port (it must be one of the watched strings).
    pub(crate) fn seen(&self, text: &str) -> Option<Duration> {
        self.seen.iter().find(|(t, _)| t == text).and_then(|(_, when)| *when)
    }

    /// A report for failure messages: how it ended, the serial log, QEMU's own output and
    /// whatever other logs the test passes.
    pub(crate) fn report(&self, others: &[String]) -> String {
        let mut out = format!(
            "QEMU {} after {:.1} s\n{}\n{}",
            match self.status {
                Some(status) => format!("exited ({status})"),
                None => "was killed at the deadline".to_owned(),
            },
            self.elapsed.as_secs_f64(),
            tail(&self.serial_path, 6000),
            tail(&self.qemu_log, 1500),
        );
        for other in others {
            out.push('\n');
            out.push_str(other);
        }
        out
    }

    /// Asserts that `marker` reached the serial port and QEMU exited with `code`.
    pub(crate) fn assert_marker(&self, marker: &str, code: i32, others: &[String]) {
        assert!(
            self.serial.contains(marker) && self.code() == Some(code),
            "expected marker {marker:?} and QEMU exit status {code}\n{}",
            self.report(others)
        );
    }
}
