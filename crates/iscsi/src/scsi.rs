//! The SCSI a probe sends (SPC-4, SBC-3): REPORT LUNS, READ CAPACITY (10) and (16), the SAM LUN
//! field, and the sense data of a CHECK CONDITION. Commands that only read; nothing here can
//! write. No I/O, no clock.

/// SCSI status GOOD.
pub const GOOD: u8 = 0x00;
/// SCSI status CHECK CONDITION.
pub const CHECK_CONDITION: u8 = 0x02;
/// Sense key UNIT ATTENTION (the first command after a reset or a change gets it once).
pub const UNIT_ATTENTION: u8 = 0x06;

/// The highest LUN the single-level flat space addressing holds.
pub const MAX_LUN: u64 = 0x3fff;

/// The 8-byte LUN field (SAM-5 §4.7) for `lun`: peripheral device addressing below 256, flat
/// space addressing up to [`MAX_LUN`]; `None` beyond.
pub fn lun_field(lun: u64) -> Option<u64> {
    match lun {
        0..=0xff => Some(lun << 48),
        0x100..=MAX_LUN => Some((0x4000 | lun) << 48),
        _ => None,
    }
}

/// The LUN a field names: peripheral (bus 0) or flat space addressing; any other form is given
/// back whole, which matches no LUN [`lun_field`] makes.
pub fn lun_of_field(field: u64) -> u64 {
    let first = field >> 48;
    let rest = field & 0xffff_ffff_ffff;
    match first >> 14 {
        0b00 if first >> 8 == 0 && rest == 0 => first & 0xff,
        0b01 if rest == 0 => first & MAX_LUN,
        _ => field,
    }
}

/// REPORT LUNS (SPC-4 §6.33), every LUN, for `allocation` bytes.
pub fn report_luns(allocation: u32) -> [u8; 16] {
    let mut cdb = [0; 16];
    cdb[0] = 0xa0;
    cdb[6..10].copy_from_slice(&allocation.to_be_bytes());
    cdb
}

/// READ CAPACITY (10) (SBC-3 §5.15).
pub fn read_capacity_10() -> [u8; 16] {
    let mut cdb = [0; 16];
    cdb[0] = 0x25;
    cdb
}

/// Bytes READ CAPACITY (16) is asked for.
pub const READ_CAPACITY_16_LEN: u32 = 32;

/// READ CAPACITY (16) (SBC-3 §5.16: SERVICE ACTION IN (16), service action 0x10).
pub fn read_capacity_16() -> [u8; 16] {
    let mut cdb = [0; 16];
    cdb[0] = 0x9e;
    cdb[1] = 0x10;
    cdb[10..14].copy_from_slice(&READ_CAPACITY_16_LEN.to_be_bytes());
    cdb
}

/// The LUNs of a REPORT LUNS answer (as far as the data goes: a list longer than the
/// allocation is cut there).
pub fn parse_report_luns(data: &[u8]) -> Option<Vec<u64>> {
    let header = data.get(..8)?;
    let listed = u32::from_be_bytes([header[0], header[1], header[2], header[3]]) as usize;
    let entries = &data[8..8 + listed.min(data.len() - 8)];
    Some(
        entries
            .chunks_exact(8)
            .map(|e| lun_of_field(u64::from_be_bytes(e.try_into().unwrap_or([0xff; 8]))))
            .collect(),
    )
}

/// (last LBA, block length) of a READ CAPACITY (10) answer.
pub fn parse_read_capacity_10(data: &[u8]) -> Option<(u64, u32)> {
    let d = data.get(..8)?;
    let last = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
    Some((u64::from(last), u32::from_be_bytes([d[4], d[5], d[6], d[7]])))
}

/// (last LBA, block length) of a READ CAPACITY (16) answer.
pub fn parse_read_capacity_16(data: &[u8]) -> Option<(u64, u32)> {
    let d = data.get(..12)?;
    let last = u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]]);
    Some((last, u32::from_be_bytes([d[8], d[9], d[10], d[11]])))
}

/// The capacity in bytes, `None` when it overflows or the block length is zero.
pub fn capacity_bytes(last_lba: u64, block_len: u32) -> Option<u64> {
    if block_len == 0 {
        return None;
    }
    last_lba.checked_add(1)?.checked_mul(u64::from(block_len))
}

/// Sense key, additional sense code and qualifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sense {
    pub key: u8,
    pub asc: u8,
    pub ascq: u8,
}

impl Sense {
    /// From a SCSI Response's data segment (SenseLength, then fixed or descriptor sense data).
    pub fn from_response(data: &[u8]) -> Option<Sense> {
        let len = usize::from(u16::from_be_bytes([*data.first()?, *data.get(1)?]));
        let sense = data.get(2..2 + len)?;
        match sense.first()? & 0x7f {
            0x70 | 0x71 => Some(Sense {
                key: sense.get(2)? & 0x0f,
                asc: *sense.get(12).unwrap_or(&0),
                ascq: *sense.get(13).unwrap_or(&0),
            }),
            0x72 | 0x73 => {
                Some(Sense { key: sense.get(1)? & 0x0f, asc: *sense.get(2)?, ascq: *sense.get(3)? })
            }
            _ => None,
        }
    }

    /// Whether it says the LUN does not exist (LOGICAL UNIT NOT SUPPORTED).
    pub fn lun_not_supported(&self) -> bool {
        self.asc == 0x25 && self.ascq == 0
    }

    /// In words, for the common ones; the codes otherwise.
    pub fn words(&self) -> String {
        let what = match (self.asc, self.ascq) {
            (0x25, 0x00) => "logical unit not supported",
            (0x04, _) => "logical unit not ready",
            (0x20, 0x00) => "invalid command operation code",
            (0x24, 0x00) => "invalid field in CDB",
            (0x29, _) => "power on, reset or bus device reset occurred",
            (0x3f, 0x0e) => "reported LUNs data has changed",
            _ => "",
        };
        let codes =
            format!("sense key {:#x}, ASC/ASCQ {:#04x}/{:#04x}", self.key, self.asc, self.ascq);
        if what.is_empty() { codes } else { format!("{what} ({codes})") }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lun_fields_follow_sam() {
        assert_eq!(lun_field(1), Some(0x0001_0000_0000_0000));
        assert_eq!(lun_field(255), Some(0x00ff_0000_0000_0000));
        assert_eq!(lun_field(256), Some(0x4100_0000_0000_0000));
        assert_eq!(lun_field(MAX_LUN), Some(0x7fff_0000_0000_0000));
        assert_eq!(lun_field(MAX_LUN + 1), None);
        for lun in [0, 1, 7, 255, 256, 4000, MAX_LUN] {
            assert_eq!(lun_of_field(lun_field(lun).unwrap()), lun);
        }
        // A second level, or another bus, is not a LUN the probe asks for.
        assert_eq!(lun_of_field(0x0001_0001_0000_0000), 0x0001_0001_0000_0000);
        assert_eq!(lun_of_field(0x0101_0000_0000_0000), 0x0101_0000_0000_0000);
    }

    #[test]
    fn report_luns_is_read() {
        assert_eq!(report_luns(4096)[..10], [0xa0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0]);
        let mut data = vec![0, 0, 0, 16, 0, 0, 0, 0];
        data.extend_from_slice(&[0; 8]);
        data.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(parse_report_luns(&data), Some(vec![0, 1]));
        // A list longer than the data is cut where the data ends.
        data[3] = 200;
        assert_eq!(parse_report_luns(&data), Some(vec![0, 1]));
        assert_eq!(parse_report_luns(&data[..5]), None);
    }

    #[test]
    fn read_capacity_is_read() {
        assert_eq!(read_capacity_10()[0], 0x25);
        assert_eq!(read_capacity_16()[..14], [0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32]);
        let ten = [0, 0, 0x7f, 0xff, 0, 0, 2, 0];
        assert_eq!(parse_read_capacity_10(&ten), Some((0x7fff, 512)));
        assert_eq!(capacity_bytes(0x7fff, 512), Some(16 * 1024 * 1024));
        let sixteen = [0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0];
        assert_eq!(parse_read_capacity_16(&sixteen), Some((1 << 32, 4096)));
        assert_eq!(parse_read_capacity_16(&sixteen[..11]), None);
        assert_eq!(capacity_bytes(u64::MAX, 512), None);
        assert_eq!(capacity_bytes(5, 0), None);
    }

    #[test]
    fn sense_data_is_read_in_both_formats() {
        let mut fixed = vec![0, 18, 0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x25, 0];
        fixed.resize(20, 0);
        let sense = Sense::from_response(&fixed).unwrap();
        assert_eq!(sense, Sense { key: 5, asc: 0x25, ascq: 0 });
        assert!(sense.lun_not_supported());
        assert_eq!(sense.words(), "logical unit not supported (sense key 0x5, ASC/ASCQ 0x25/0x00)");
        let descriptor = [0, 8, 0x72, 0x06, 0x29, 0x00, 0, 0, 0, 0];
        let sense = Sense::from_response(&descriptor).unwrap();
        assert_eq!(sense.key, UNIT_ATTENTION);
        assert_eq!(Sense::from_response(&[0, 30, 0x70]), None);
        assert_eq!(Sense::from_response(&[0, 1, 0x10]), None);
        assert_eq!(
            Sense { key: 3, asc: 0x11, ascq: 1 }.words(),
            "sense key 0x3, ASC/ASCQ 0x11/0x01"
        );
    }
}
