//! Disk images the VMs boot, written byte by byte (no toolchain, no loop mounts):
//!
//! - a BIOS MBR whose code prints a marker on COM1, optionally prints what it reads from the first
//!   sector of drive 0x81, and stops QEMU through isa-debug-exit (exit status 33);
//! - a PE32+ EFI application that prints a marker and stops QEMU (exit status 35), on a FAT EFI
//!   system partition (mkfs.fat and mtools) behind an MBR partition table;
//! - a newc cpio initrd (busybox, the kernel modules it needs, an `/init`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::support::process::{command, run};

/// Disk size: iPXE's INT 13 emulation guesses a 255x63 geometry, so a disk without a partition
/// table must hold at least one such cylinder (8,225,280 bytes).
const DISK_BYTES: u64 = 16 * 1024 * 1024;

/// A tiny assembler: bytes, labels and the fixups that refer to them.
#[derive(Debug, Default)]
struct Asm {
    code: Vec<u8>,
    labels: HashMap<&'static str, usize>,
    fixups: Vec<(usize, &'static str, Fixup)>,
}

#[derive(Debug, Clone, Copy)]
enum Fixup {
    /// 8-bit displacement from the end of the byte.
    Rel8,
    /// 16-bit displacement from the end of the word.
    Rel16,
    /// 32-bit displacement from the end of the dword (RIP-relative).
    Rel32,
    /// 16-bit absolute address: `base` plus the label's offset.
    Abs16(u16),
}

impl Asm {
    fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        self.code.extend_from_slice(bytes);
        self
    }

    fn label(&mut self, name: &'static str) -> &mut Self {
        self.labels.insert(name, self.code.len());
        self
    }

    fn refer(&mut self, name: &'static str, fixup: Fixup) -> &mut Self {
        self.fixups.push((self.code.len(), name, fixup));
        let width = match fixup {
            Fixup::Rel8 => 1,
            Fixup::Rel16 | Fixup::Abs16(_) => 2,
            Fixup::Rel32 => 4,
        };
        self.code.extend(std::iter::repeat_n(0, width));
        self
    }

    fn finish(mut self) -> Vec<u8> {
        for (at, name, fixup) in std::mem::take(&mut self.fixups) {
            let target = self.labels[name] as i64;
            match fixup {
                Fixup::Rel8 => {
                    let rel = i8::try_from(target - (at as i64 + 1)).expect("rel8 in range");
                    self.code[at] = rel as u8;
                }
                Fixup::Rel16 => {
                    let rel = i16::try_from(target - (at as i64 + 2)).expect("rel16 in range");
                    self.code[at..at + 2].copy_from_slice(&rel.to_le_bytes());
                }
                Fixup::Rel32 => {
                    let rel = i32::try_from(target - (at as i64 + 4)).expect("rel32 in range");
                    self.code[at..at + 4].copy_from_slice(&rel.to_le_bytes());
                }
                Fixup::Abs16(base) => {
                    let abs = base + u16::try_from(target).expect("abs16 in range");
                    self.code[at..at + 2].copy_from_slice(&abs.to_le_bytes());
                }
            }
        }
        self.code
    }
}

/// A message as the test programs print it: on its own line, NUL-terminated.
fn message(text: &str) -> Vec<u8> {
    assert!(text.is_ascii() && !text.contains('\0'));
    format!("\r\n{text}\r\n\0").into_bytes()
}

/// The 512-byte boot sector: prints `marker` on COM1; with `show_drive_0x81`, then reads the
/// first sector of BIOS drive 0x81 and prints the NUL-terminated text it starts with (or
/// `<marker>-NO-DRIVE-0x81`); with `reread_after_ticks`, then waits that many BIOS timer ticks
/// (18.2 a second), reads its own drive 0x80 again and prints `<marker>-REREAD-OK` or
/// `<marker>-REREAD-FAILED`; then writes 0x10 to port 0xf4 (QEMU exits with status 33).
pub(crate) fn boot_sector(
    marker: &str,
    show_drive_0x81: bool,
    reread_after_ticks: Option<u16>,
) -> [u8; 512] {
    const ORG: u16 = 0x7C00;
    let mut asm = Asm::default();
    asm.bytes(&[0xFA]) // cli
        .bytes(&[0x31, 0xC0]) // xor ax,ax
        .bytes(&[0x8E, 0xD8]) // mov ds,ax
        .bytes(&[0x8E, 0xC0]) // mov es,ax
        .bytes(&[0x8E, 0xD0]) // mov ss,ax
        .bytes(&[0xBC, 0x00, 0x7C]) // mov sp,0x7c00
        .bytes(&[0xFB]) // sti (INT 13h needs interrupts)
        .bytes(&[0xBE])
        .refer("marker", Fixup::Abs16(ORG)) // mov si,marker
        .bytes(&[0xE8])
        .refer("print", Fixup::Rel16); // call print
    if show_drive_0x81 {
        asm.bytes(&[0xB8, 0x01, 0x02]) // mov ax,0x0201: read 1 sector
            .bytes(&[0xB9, 0x01, 0x00]) // mov cx,0x0001: cylinder 0, sector 1
            .bytes(&[0xBA, 0x81, 0x00]) // mov dx,0x0081: head 0, drive 0x81
            .bytes(&[0xBB, 0x00, 0x80]) // mov bx,0x8000: into 0000:8000
            .bytes(&[0xCD, 0x13]) // int 0x13
            .bytes(&[0xBE])
            .refer("nodrive", Fixup::Abs16(ORG)) // mov si,nodrive
            .bytes(&[0x72])
            .refer("show", Fixup::Rel8) // jc show
            .bytes(&[0xBE, 0x00, 0x80]) // mov si,0x8000
            .label("show")
            .bytes(&[0xE8])
            .refer("print", Fixup::Rel16); // call print
    }
    if let Some(ticks) = reread_after_ticks {
        // iPXE's INT 13h handler may return with interrupts off, and the tick count needs them.
        asm.bytes(&[0xFB]) // sti
            .bytes(&[0x8B, 0x1E, 0x6C, 0x04]) // mov bx,[0x046c]: the BIOS tick count (18.2 Hz)
            .label("wait")
            .bytes(&[0xA1, 0x6C, 0x04]) // mov ax,[0x046c]
            .bytes(&[0x29, 0xD8]) // sub ax,bx
            .bytes(&[0x3D])
            .bytes(&ticks.to_le_bytes()) // cmp ax,ticks
            .bytes(&[0x72])
            .refer("wait", Fixup::Rel8) // jb wait
            .bytes(&[0xB8, 0x01, 0x02]) // mov ax,0x0201: read 1 sector
            .bytes(&[0xB9, 0x01, 0x00]) // mov cx,0x0001: cylinder 0, sector 1
            .bytes(&[0xBA, 0x80, 0x00]) // mov dx,0x0080: head 0, drive 0x80
            .bytes(&[0xBB, 0x00, 0x90]) // mov bx,0x9000: into 0000:9000
            .bytes(&[0xCD, 0x13]) // int 0x13
            .bytes(&[0xBE])
            .refer("reread_failed", Fixup::Abs16(ORG)) // mov si,reread_failed
            .bytes(&[0x72])
            .refer("reread_show", Fixup::Rel8) // jc reread_show
            .bytes(&[0xBE])
            .refer("reread_ok", Fixup::Abs16(ORG)) // mov si,reread_ok
            .label("reread_show")
            .bytes(&[0xE8])
            .refer("print", Fixup::Rel16); // call print
    }
    asm.bytes(&[0xB0, 0x10]) // mov al,0x10
        .bytes(&[0xE6, 0xF4]) // out 0xf4,al: QEMU exits (0x10 << 1) | 1 = 33
        .label("halt")
        .bytes(&[0xF4]) // hlt
        .bytes(&[0xEB])
        .refer("halt", Fixup::Rel8) // jmp halt
        .label("print") // si: NUL-terminated text to COM1
        .bytes(&[0xBA, 0xF8, 0x03]) // mov dx,0x3f8
        .label("next")
        .bytes(&[0xAC]) // lodsb
        .bytes(&[0x84, 0xC0]) // test al,al
        .bytes(&[0x74])
        .refer("ret", Fixup::Rel8) // jz ret
        .bytes(&[0xEE]) // out dx,al
        .bytes(&[0xEB])
        .refer("next", Fixup::Rel8) // jmp next
        .label("ret")
        .bytes(&[0xC3]) // ret
        .label("marker")
        .bytes(&message(marker))
        .label("nodrive")
        .bytes(&message(&format!("{marker}-NO-DRIVE-0x81")));
    if reread_after_ticks.is_some() {
        asm.label("reread_ok")
            .bytes(&message(&format!("{marker}-REREAD-OK")))
            .label("reread_failed")
            .bytes(&message(&format!("{marker}-REREAD-FAILED")));
    }
    let code = asm.finish();
    assert!(code.len() <= 446, "boot code overlaps the partition table");
    let mut sector = [0u8; 512];
    sector[..code.len()].copy_from_slice(&code);
    sector[510] = 0x55;
    sector[511] = 0xAA;
    sector
}

/// A 16 MiB BIOS-bootable volume whose boot sector prints `marker` (see [`boot_sector`]).
pub(crate) fn bios_volume_rereading(path: &Path, marker: &str, after_ticks: u16) -> PathBuf {
    write_sparse(path, &[(0, &boot_sector(marker, true, Some(after_ticks)))]);
    path.to_owned()
}

/// A 16 MiB BIOS-bootable volume whose boot sector prints `marker` (see [`boot_sector`]).
pub(crate) fn bios_volume(path: &Path, marker: &str, show_drive_0x81: bool) -> PathBuf {
    write_sparse(path, &[(0, &boot_sector(marker, show_drive_0x81, None))]);
    path.to_owned()
}

/// A 16 MiB data volume (not bootable) whose first sector starts with the text `text`.
pub(crate) fn data_volume(path: &Path, text: &str) -> PathBuf {
    let mut sector = message(text);
    sector.resize(512, 0);
    write_sparse(path, &[(0, &sector)]);
    path.to_owned()
}

fn write_sparse(path: &Path, chunks: &[(u64, &[u8])]) {
    use std::io::{Seek, SeekFrom, Write};
    let mut file = std::fs::File::create(path).unwrap();
    for (offset, bytes) in chunks {
        file.seek(SeekFrom::Start(*offset)).unwrap();
        file.write_all(bytes).unwrap();
    }
    let end = file.stream_position().unwrap();
    file.set_len(DISK_BYTES.max(end)).unwrap();
}

/// A minimal x86-64 PE32+ EFI application (one position-independent `.text` section, no
/// relocations): prints `marker` on COM1, then writes 0x11 to port 0xf4 (QEMU exits with 35).
pub(crate) fn efi_app(marker: &str) -> Vec<u8> {
    let mut asm = Asm::default();
    asm.bytes(&[0x48, 0x8D, 0x35])
        .refer("marker", Fixup::Rel32) // lea rsi,[rip+marker]
        .bytes(&[0x66, 0xBA, 0xF8, 0x03]) // mov dx,0x3f8
        .label("next")
        .bytes(&[0xAC]) // lodsb
        .bytes(&[0x84, 0xC0]) // test al,al
        .bytes(&[0x74])
        .refer("done", Fixup::Rel8) // jz done
        .bytes(&[0xEE]) // out dx,al
        .bytes(&[0xEB])
        .refer("next", Fixup::Rel8) // jmp next
        .label("done")
        .bytes(&[0xB0, 0x11]) // mov al,0x11
        .bytes(&[0xE6, 0xF4]) // out 0xf4,al: QEMU exits (0x11 << 1) | 1 = 35
        .label("halt")
        .bytes(&[0xF4]) // hlt
        .bytes(&[0xEB])
        .refer("halt", Fixup::Rel8) // jmp halt
        .label("marker")
        .bytes(&message(marker));
    let text = asm.finish();

    const FILE_ALIGN: u32 = 0x200;
    const SECTION_ALIGN: u32 = 0x1000;
    const TEXT_RVA: u32 = 0x1000;
    let raw_len = u32::try_from(text.len()).unwrap().next_multiple_of(FILE_ALIGN);
    let mut out = Vec::new();
    // DOS header: "MZ" and, at 0x3c, the offset of the PE header.
    let mut dos = [0u8; 0x40];
    dos[0..2].copy_from_slice(b"MZ");
    dos[0x3C..0x40].copy_from_slice(&0x40u32.to_le_bytes());
    out.extend_from_slice(&dos);
    out.extend_from_slice(b"PE\0\0");
    // COFF header: AMD64, 1 section, no symbols, 240-byte optional header, executable image
    // with large addresses.
    for (value, width) in [(0x8664, 2), (1, 2), (0, 4), (0, 4), (0, 4), (240, 2), (0x0022, 2)] {
        put(&mut out, value, width);
    }
    // Optional header (PE32+).
    let image_size = TEXT_RVA + raw_len.next_multiple_of(SECTION_ALIGN);
    #[rustfmt::skip]
    let optional: [(u64, usize); 30] = [
        (0x20B, 2), (0, 1), (0, 1),                 // magic, linker version
        (u64::from(raw_len), 4), (0, 4), (0, 4),    // code, initialised and uninitialised data
        (u64::from(TEXT_RVA), 4), (u64::from(TEXT_RVA), 4), // entry point, base of code
        (0x1000_0000, 8),                           // image base
        (u64::from(SECTION_ALIGN), 4), (u64::from(FILE_ALIGN), 4),
        (0, 2), (0, 2), (0, 2), (0, 2), (0, 2), (0, 2), // OS, image and subsystem versions
        (0, 4),                                     // Win32 version
        (u64::from(image_size), 4), (u64::from(FILE_ALIGN), 4), // image size, headers size
        (0, 4),                                     // checksum
        (10, 2),                                    // subsystem: EFI application
        (0, 2),                                     // DLL characteristics
        (0x10000, 8), (0x10000, 8), (0, 8), (0, 8), // stack and heap reserve and commit
        (0, 4),                                     // loader flags
        (16, 4),                                    // number of data directories
        (0, 0),
    ];
    for (value, width) in optional {
        put(&mut out, value, width);
    }
    out.extend(std::iter::repeat_n(0, 16 * 8)); // empty data directories
    // The section table: .text, readable and executable code.
    out.extend_from_slice(b".text\0\0\0");
    for (value, width) in [
        (text.len() as u64, 4),
        (u64::from(TEXT_RVA), 4),
        (u64::from(raw_len), 4),
        (u64::from(FILE_ALIGN), 4),
        (0, 4),
        (0, 4),
        (0, 2),
        (0, 2),
        (0x6000_0020, 4),
    ] {
        put(&mut out, value, width);
    }
    assert!(out.len() <= FILE_ALIGN as usize);
    out.resize(FILE_ALIGN as usize, 0);
    out.extend_from_slice(&text);
    out.resize((FILE_ALIGN + raw_len) as usize, 0);
    out
}

fn put(out: &mut Vec<u8>, value: u64, width: usize) {
    out.extend_from_slice(&value.to_le_bytes()[..width]);
}

/// A volume with an MBR partition table holding one EFI system partition (type 0xEF, FAT16,
/// 16 MiB, at LBA 2048) with `files` (path inside the ESP, contents) on it. The boot code of
/// the MBR is the BIOS marker program, so a BIOS that boots it by mistake says so.
pub(crate) fn efi_volume(dir: &Path, name: &str, files: &[(&str, Vec<u8>)]) -> PathBuf {
    let esp = dir.join(format!("{name}.esp"));
    let _ = std::fs::remove_file(&esp);
    run(command("mkfs.fat").args(["-C", "-F", "16", "-n", "BVE2EESP"]).arg(&esp).arg("16384"));
    let mut made = Vec::new();
    for (path, bytes) in files {
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        for depth in 1..parts.len() {
            let dir_path = format!("::/{}", parts[..depth].join("/"));
            if !made.contains(&dir_path) {
                run(command("mmd")
                    .env("MTOOLS_SKIP_CHECK", "1")
                    .arg("-i")
                    .arg(&esp)
                    .arg(&dir_path));
                made.push(dir_path);
            }
        }
        let local = dir.join(format!("{name}.{}", parts.last().unwrap()));
        std::fs::write(&local, bytes).unwrap();
        run(command("mcopy")
            .env("MTOOLS_SKIP_CHECK", "1")
            .arg("-i")
            .arg(&esp)
            .arg(&local)
            .arg(format!("::/{}", parts.join("/"))));
    }
    let fat = std::fs::read(&esp).unwrap();
    let mut mbr = boot_sector(&format!("BVE2E-{name}-BOOTED-BY-BIOS"), false, None);
    let start: u32 = 2048;
    let sectors = u32::try_from(fat.len() / 512).unwrap();
    let mut entry = vec![0x00, 0xFE, 0xFF, 0xFF, 0xEF, 0xFE, 0xFF, 0xFF];
    entry.extend_from_slice(&start.to_le_bytes());
    entry.extend_from_slice(&sectors.to_le_bytes());
    mbr[446..462].copy_from_slice(&entry);
    let path = dir.join(format!("{name}.img"));
    write_sparse(&path, &[(0, &mbr), (u64::from(start) * 512, &fat)]);
    path
}

/// A newc cpio archive, built in memory.
#[derive(Debug, Default)]
pub(crate) struct Cpio {
    out: Vec<u8>,
    inode: u32,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, data: &[u8], rdev: (u32, u32)) {
        self.inode += 1;
        let fields = [
            self.inode,
            mode,
            0,
            0,
            1,
            0,
            u32::try_from(data.len()).unwrap(),
            0,
            0,
            rdev.0,
            rdev.1,
            u32::try_from(name.len() + 1).unwrap(),
            0,
        ];
        self.out.extend_from_slice(b"070701");
        for field in fields {
            self.out.extend_from_slice(format!("{field:08X}").as_bytes());
        }
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    pub(crate) fn dir(&mut self, name: &str) {
        self.entry(name, 0o040755, &[], (0, 0));
    }

    pub(crate) fn file(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.entry(name, 0o100000 | mode, data, (0, 0));
    }

    pub(crate) fn char_device(&mut self, name: &str, major: u32, minor: u32) {
        self.entry(name, 0o020600, &[], (major, minor));
    }

    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[], (0, 0));
        while !self.out.len().is_multiple_of(512) {
            self.out.push(0);
        }
        self.out
    }
}

/// The `depends=` of a kernel module: its `.modinfo` ELF section, read directly (no kmod).
fn module_depends(ko: &[u8]) -> Vec<String> {
    let u16_at = |at: usize| u16::from_le_bytes(ko[at..at + 2].try_into().unwrap()) as usize;
    let u64_at = |at: usize| u64::from_le_bytes(ko[at..at + 8].try_into().unwrap()) as usize;
    assert_eq!(&ko[..5], b"\x7fELF\x02", "a 64-bit ELF module");
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3A), u16_at(0x3C), u16_at(0x3E));
    let section = |i: usize| {
        let h = shoff + i * shentsize;
        let name = u32::from_le_bytes(ko[h..h + 4].try_into().unwrap()) as usize;
        (name, u64_at(h + 0x18), u64_at(h + 0x20))
    };
    let (_, strtab, _) = section(shstrndx);
    for i in 0..shnum {
        let (name, offset, size) = section(i);
        let name_bytes = &ko[strtab + name..];
        let end = name_bytes.iter().position(|b| *b == 0).unwrap();
        if &name_bytes[..end] == b".modinfo" {
            return ko[offset..offset + size]
                .split(|b| *b == 0)
                .filter_map(|entry| entry.strip_prefix(b"depends="))
                .flat_map(|deps| deps.split(|b| *b == b','))
                .filter(|d| !d.is_empty())
                .map(|d| String::from_utf8_lossy(d).into_owned())
                .collect();
        }
    }
    Vec::new()
}

/// The modules `wanted` need, dependencies first, as paths relative to `modules_dir`
/// (`lib/modules/<version>` of the extracted kernel package).
pub(crate) fn module_load_order(modules_dir: &Path, wanted: &[&str]) -> Vec<PathBuf> {
    let mut by_name = HashMap::new();
    let mut stack = vec![modules_dir.join("kernel")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "ko") {
                let name = path.file_stem().unwrap().to_string_lossy().replace('-', "_");
                by_name.insert(name, path);
            }
        }
    }
    fn visit(
        name: &str,
        by_name: &HashMap<String, PathBuf>,
        done: &mut Vec<String>,
        order: &mut Vec<PathBuf>,
    ) {
        let name = name.replace('-', "_");
        if done.contains(&name) {
            return;
        }
        done.push(name.clone());
        let path = by_name.get(&name).unwrap_or_else(|| panic!("no module {name}"));
        let ko = std::fs::read(path).unwrap();
        for dep in module_depends(&ko) {
            visit(&dep, by_name, done, order);
        }
        order.push(path.clone());
    }
    let (mut done, mut order) = (Vec::new(), Vec::new());
    for name in wanted {
        visit(name, &by_name, &mut done, &mut order);
    }
    order.into_iter().map(|p| p.strip_prefix(modules_dir).unwrap().to_owned()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_sector_is_a_boot_sector() {
        let sector = boot_sector("BVE2E-UNIT", true, Some(73));
        assert_eq!(&sector[510..], &[0x55, 0xAA]);
        let text = String::from_utf8_lossy(&sector);
        assert!(text.contains("BVE2E-UNIT\r\n"));
        assert!(text.contains("BVE2E-UNIT-NO-DRIVE-0x81"));
        assert!(text.contains("BVE2E-UNIT-REREAD-FAILED"));
    }

    #[test]
    fn efi_app_is_pe32_plus() {
        let app = efi_app("BVE2E-UNIT-EFI");
        assert_eq!(&app[..2], b"MZ");
        assert_eq!(&app[0x40..0x44], b"PE\0\0");
        assert_eq!(u16::from_le_bytes([app[0x58], app[0x59]]), 0x20B);
        assert_eq!(app.len() % 0x200, 0);
    }

    #[test]
    fn cpio_is_newc() {
        let mut cpio = Cpio::default();
        cpio.file("init", 0o755, b"#!/bin/sh\n");
        let out = cpio.finish();
        assert!(out.starts_with(b"070701"));
        assert!(String::from_utf8_lossy(&out).contains("TRAILER!!!"));
    }
}
