//! Login status class and detail (RFC 7143 §11.13.5) in words an operator reads. No I/O, no
//! clock.

/// The words for a Login Response's Status-Class and Status-Detail.
pub fn describe(class: u8, detail: u8) -> &'static str {
    match (class, detail) {
        (0x00, 0x00) => "success",
        (0x01, 0x01) => "target moved temporarily",
        (0x01, 0x02) => "target moved permanently",
        (0x02, 0x00) => "initiator error",
        (0x02, 0x01) => "authentication failure",
        (0x02, 0x02) => "authorization failure",
        (0x02, 0x03) => "target not found",
        (0x02, 0x04) => "target removed",
        (0x02, 0x05) => "unsupported version",
        (0x02, 0x06) => "too many connections",
        (0x02, 0x07) => "missing parameter",
        (0x02, 0x08) => "can't include in session",
        (0x02, 0x09) => "session type not supported",
        (0x02, 0x0a) => "session does not exist",
        (0x02, 0x0b) => "invalid request during login",
        (0x03, 0x00) => "target error",
        (0x03, 0x01) => "service unavailable",
        (0x03, 0x02) => "out of resources",
        (0x00, _) => "success (unknown detail)",
        (0x01, _) => "redirection (unknown detail)",
        (0x02, _) => "initiator error (unknown detail)",
        (0x03, _) => "target error (unknown detail)",
        _ => "unknown status class",
    }
}

/// The two bytes as the RFC writes them: `0x0201`.
pub fn code(class: u8, detail: u8) -> String {
    format!("0x{class:02x}{detail:02x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_of_the_rfc_has_its_words() {
        let table = [
            (0x0000, "success"),
            (0x0101, "target moved temporarily"),
            (0x0102, "target moved permanently"),
            (0x0200, "initiator error"),
            (0x0201, "authentication failure"),
            (0x0202, "authorization failure"),
            (0x0203, "target not found"),
            (0x0204, "target removed"),
            (0x0205, "unsupported version"),
            (0x0206, "too many connections"),
            (0x0207, "missing parameter"),
            (0x0208, "can't include in session"),
            (0x0209, "session type not supported"),
            (0x020a, "session does not exist"),
            (0x020b, "invalid request during login"),
            (0x0300, "target error"),
            (0x0301, "service unavailable"),
            (0x0302, "out of resources"),
            (0x0177, "redirection (unknown detail)"),
            (0x0277, "initiator error (unknown detail)"),
            (0x0377, "target error (unknown detail)"),
            (0x0001, "success (unknown detail)"),
            (0x0400, "unknown status class"),
        ];
        for (status, words) in table {
            let [class, detail] = u16::to_be_bytes(status);
            assert_eq!(describe(class, detail), words, "{status:#06x}");
        }
        assert_eq!(code(2, 1), "0x0201");
    }
}
