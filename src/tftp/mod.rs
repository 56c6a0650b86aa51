//! Read-only TFTP server (RFC 1350 + 2347/2348/2349 options + RFC 7440 windowsize).
//! Being written; see the TFTP section of ARCHITECTURE.md.
