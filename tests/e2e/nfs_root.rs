//! NFS root: iPXE fetches a kernel and an initrd from bootvol's `/files/`, and the initrd mounts
//! the NFS export the node's script names (nfs-ganesha, NFSv4, on a private network) and prints
//! a marker file that exists only on that export.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use crate::support::bootvol::{Bootvol, Settings};
use crate::support::net::{Dhcp, Netns, SERVER_IP, TAP, start_dhcp};
use crate::support::process::{Daemon, command_in};
use crate::support::qemu::{Firmware, Network, Vm};
use crate::support::{BASE, LAN, NIC_ROM, Need, begin, cache_dir, tail};
use crate::volumes::{Cpio, module_load_order};

/// The initrd's `/init`: network up by DHCP, then the mount that `nfsroot=` on the kernel
/// command line names (what Debian's initramfs-tools does in production), then the marker.
const INIT: &str = r#"#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /mnt /tmp /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
echo "BVE2E-INITRD: started"
for m in $(cat /modules.txt); do insmod /lib/modules/$m || echo "BVE2E-INITRD: insmod $m failed"; done
ip link set lo up
ip link set eth0 up
udhcpc -i eth0 -n -q -t 10 -T 1 -s /udhcpc.sh || echo "BVE2E-INITRD: no DHCP lease"
NR=
for w in $(cat /proc/cmdline); do case $w in nfsroot=*) NR=${w#nfsroot=};; esac; done
if [ -n "$NR" ]; then
  SRV=${NR%%:*}; REST=${NR#*:}; P=${REST%%,*}; O=; [ "$REST" != "$P" ] && O=${REST#*,}
  OPTS="addr=$SRV${O:+,$O}"
  case ",$OPTS," in *,vers=3,*|*,nfsvers=3,*) T=nfs; OPTS="$OPTS,nolock";; *) T=nfs4;; esac
  echo "BVE2E-INITRD: mount -t $T -o $OPTS $SRV:$P /mnt"
  if mount -t $T -o "$OPTS" "$SRV:$P" /mnt; then cat /mnt/bve2e-marker.txt; umount /mnt
  else echo "BVE2E-INITRD: NFS mount failed"; fi
else
  echo "BVE2E-INITRD: no nfsroot= on the kernel command line"
fi
echo "BVE2E-INITRD: done"
poweroff -f
"#;

const UDHCPC: &str = r#"#!/bin/busybox sh
case "$1" in
  bound|renew)
    ip addr flush dev "$interface"
    ip addr add "$ip/${mask:-24}" dev "$interface"
    [ -n "$router" ] && ip route add default via "${router%% *}"
    ;;
esac
exit 0
"#;

/// The kernel and busybox `.ci/e2e-deps.sh` extracted, if they are there.
fn kernel_and_busybox() -> Option<(PathBuf, PathBuf, PathBuf)> {
    let cache = cache_dir();
    let vmlinuz = std::fs::read_dir(cache.join("kernel/boot"))
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-")))?;
    let version = vmlinuz.file_name()?.to_string_lossy().trim_start_matches("vmlinuz-").to_owned();
    let modules = cache.join("kernel/lib/modules").join(version);
    let busybox = cache.join("busybox/bin/busybox");
    (modules.is_dir() && busybox.is_file()).then_some((vmlinuz, modules, busybox))
}

fn build_initrd(modules_dir: &Path, busybox: &Path) -> Vec<u8> {
    let order = module_load_order(modules_dir, &["virtio_pci", "virtio_net", "nfsv4"]);
    let mut cpio = Cpio::default();
    for dir in ["bin", "dev", "lib", "lib/modules"] {
        cpio.dir(dir);
    }
    cpio.char_device("dev/console", 5, 1);
    cpio.file("bin/busybox", 0o755, &std::fs::read(busybox).unwrap());
    cpio.file("init", 0o755, INIT.as_bytes());
    cpio.file("udhcpc.sh", 0o755, UDHCPC.as_bytes());
    let mut list = String::new();
    for module in &order {
        let name = module.file_name().unwrap().to_string_lossy().into_owned();
        cpio.file(
            &format!("lib/modules/{name}"),
            0o644,
            &std::fs::read(modules_dir.join(module)).unwrap(),
        );
        list.push_str(&name);
        list.push('\n');
    }
    cpio.file("modules.txt", 0o644, list.as_bytes());
    cpio.finish()
}

/// nfs-ganesha, NFSv4 only (so no rpcbind), exporting `export` as `/export` on `SERVER_IP`.
fn start_ganesha(netns: &Netns, dir: &Path, export: &Path) -> Daemon {
    let state = dir.join("ganesha-state");
    std::fs::create_dir_all(&state).unwrap();
    let conf = dir.join("ganesha.conf");
    std::fs::write(
        &conf,
        format!(
            "NFS_CORE_PARAM {{ Protocols = 4; Bind_addr = {SERVER_IP}; Enable_NLM = false;\n\
             \x20 Enable_RQUOTA = false; Enable_UDP = false; }}\n\
             NFSV4 {{ Graceless = true; RecoveryBackend = fs; RecoveryRoot = {state}; }}\n\
             NFS_KRB5 {{ Active_krb5 = false; }}\n\
             EXPORT {{ Export_Id = 1; Path = {export}; Pseudo = /export; Access_Type = RO;\n\
             \x20 Squash = No_Root_Squash; SecType = sys; Protocols = 4; Transports = TCP;\n\
             \x20 FSAL {{ Name = VFS; }} }}\n",
            state = state.display(),
            export = export.display(),
        ),
    )
    .unwrap();
    let log = dir.join("ganesha.log");
    let mut cmd = command_in(Some(netns.name()), "ganesha.nfsd");
    cmd.arg("-F").arg("-L").arg(&log).arg("-f").arg(&conf).arg("-p").arg(dir.join("ganesha.pid"));
    let mut daemon = Daemon::spawn("ganesha.nfsd", cmd, &dir.join("ganesha.out"));
    netns.wait_listening("tcp", 2049, &mut daemon);
    daemon
}

/// BIOS, iPXE from the NIC's ROM on a private network: bootvol's script for an `nfs_boot` node
/// loads the kernel and initrd from `<public_url>/files/nfs/...` with `nfsroot=` on the command
/// line; the initrd mounts that export and prints the marker file found on it, then powers off.
#[test]
fn bios_nfs_root_kernel_from_files() {
    let tools: &[Need] = &[
        Need::Tool("ganesha.nfsd", "nfs-ganesha"),
        Need::File("/usr/lib/x86_64-linux-gnu/ganesha/libfsalvfs.so", "nfs-ganesha-vfs"),
        Need::Check(
            "a kernel and busybox in target/e2e-cache (downloaded by .ci/e2e-deps.sh)",
            || kernel_and_busybox().is_some(),
        ),
    ];
    let Some(e2e) = begin("bios_nfs_root_kernel_from_files", &[BASE, NIC_ROM, LAN, tools]) else {
        return;
    };
    let (vmlinuz, modules, busybox) = kernel_and_busybox().expect("checked by begin");
    let mac = "52:54:00:e2:06:01";
    let marker = "BVE2E-NFS-ROOT-MARKER-FROM-EXPORT";

    let export = e2e.path("export");
    std::fs::create_dir_all(&export).unwrap();
    std::fs::write(export.join("bve2e-marker.txt"), format!("{marker}\n")).unwrap();

    let netns = Netns::new();
    let _ganesha = start_ganesha(&netns, e2e.dir.path(), &export);
    let mut bootvol =
        Bootvol::configure(e2e.dir.path(), Settings::in_netns(netns.name(), SERVER_IP));
    let files = bootvol.files_root.join("nfs");
    std::fs::create_dir_all(&files).unwrap();
    if std::fs::hard_link(&vmlinuz, files.join("vmlinuz")).is_err() {
        std::fs::copy(&vmlinuz, files.join("vmlinuz")).unwrap();
    }
    std::fs::write(files.join("initrd.img"), build_initrd(&modules, &busybox)).unwrap();
    bootvol.apply(&json!({"nodes": [{
        "name": "e2e-nfs",
        "storage_interface": "external", "provision_state": "active",
        "properties": {"capabilities": "nfs_boot:true"},
        "instance_info": {"nfs_root": format!("{SERVER_IP}:/export"), "nfs_options": "vers=4.1",
                          "kernel": "nfs/vmlinuz", "ramdisk": "nfs/initrd.img",
                          "kernel_append_params": "console=ttyS0 panic=-1"},
        "ports": [{"address": mac}]
    }]}));
    bootvol.serve();
    let script = bootvol.assert_serves_render(mac);
    assert!(script.contains(&format!("nfsroot={SERVER_IP}:/export,vers=4.1")), "{script}");
    // The initrd is a newc cpio archive: its first six bytes are "070701".
    let range = bootvol.get_with("/files/nfs/initrd.img", &[("Range", "bytes=0-5")]);
    assert_eq!(range, Ok((206, "070701".to_owned())), "a Range request on /files/");
    let _dhcp = start_dhcp(
        &netns,
        e2e.dir.path(),
        &Dhcp {
            ipxe_bootfile: format!("{}/boot.ipxe", bootvol.settings.public_url),
            efi_bootfile: None,
        },
    );

    let mut vm = Vm::new(
        Firmware::Bios,
        Network::Tap { netns: netns.name().to_owned(), ifname: TAP.to_owned() },
        mac,
    );
    vm.memory_mib = 512;
    let boot = vm.boot(e2e.dir.path(), &[marker], Duration::from_secs(60));
    boot.assert_marker(
        marker,
        0,
        &[
            bootvol.log(),
            tail(&e2e.path("ganesha.log"), 3000),
            tail(&e2e.path("dnsmasq.log"), 2000),
        ],
    );
    // The script reported its steps, from the node's own link: the neighbour table names its MAC.
    let reports: Vec<serde_json::Value> = bootvol
        .events("e2e-nfs")
        .into_iter()
        .filter(|e| e["event_type"] == "baremetal.node.boot_reported")
        .map(|e| e["payload"].clone())
        .collect();
    let stages: Vec<&str> = reports.iter().filter_map(|r| r["stage"].as_str()).collect();
    assert_eq!(stages, ["script", "kernel"], "{reports:?}\n{}", bootvol.log());
    for report in &reports {
        assert_eq!(report["from_neighbour"], true, "{report}");
        assert_eq!(report["client_mac"], mac, "{report}");
    }
    bootvol.stop();
}
