//! The label values of the metrics: each a fixed list (routes, statuses, script kinds, TFTP and
//! DHCP results, BMC calls...), so a label never carries a MAC, an address or a node name, and
//! each value's slot in the counter tables of [`super::Metrics`].
//!
//! It must not know how the values are counted or encoded.

/// A route of the boot HTTP listener, as a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Generic,
    Script,
    Files,
    Ipxe,
    Deploy,
    Report,
    Other,
}

impl Route {
    pub(super) const ALL: [Route; 7] = [
        Route::Generic,
        Route::Script,
        Route::Files,
        Route::Ipxe,
        Route::Deploy,
        Route::Report,
        Route::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Route::Generic => "/boot.ipxe",
            Route::Script => "/boot/",
            Route::Files => "/files/",
            Route::Ipxe => "/ipxe/",
            Route::Deploy => "/deploy/",
            Route::Report => "/report/",
            Route::Other => "other",
        }
    }
}

/// Why a well-formed boot report of a known node was not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportDropped {
    /// Its client sent more than its share (`http::report`'s limiter).
    Limited,
    /// The queue to the database was full.
    QueueFull,
}

impl ReportDropped {
    pub(super) const ALL: [ReportDropped; 2] = [ReportDropped::Limited, ReportDropped::QueueFull];

    pub(super) fn as_str(self) -> &'static str {
        match self {
            ReportDropped::Limited => "limited",
            ReportDropped::QueueFull => "queue_full",
        }
    }
}

/// The statuses counted on their own; any other is counted as `other`.
pub(super) const STATUSES: [u16; 12] = [200, 206, 304, 400, 403, 404, 405, 413, 416, 429, 500, 503];

/// How a boot script was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Http,
    Tftp,
}

impl Transport {
    pub(super) const ALL: [Transport; 2] = [Transport::Http, Transport::Tftp];

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Transport::Http => "http",
            Transport::Tftp => "tftp",
        }
    }
}

/// What a boot script request got (the same words as the admin page's recent boots).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptKind {
    /// `boot.ipxe`.
    Generic,
    /// `default.ipxe` asked for by name.
    Default,
    /// A node's own script.
    Node,
    /// A MAC no node has: the default script (404 over HTTP, not found over TFTP).
    Unknown,
    /// A script with a secret asked for by a client that is not its node: treated as unknown.
    Refused,
}

impl ScriptKind {
    pub(super) const ALL: [ScriptKind; 5] = [
        ScriptKind::Generic,
        ScriptKind::Default,
        ScriptKind::Node,
        ScriptKind::Unknown,
        ScriptKind::Refused,
    ];

    pub(super) fn as_str(self) -> &'static str {
        match self {
            ScriptKind::Generic => "generic",
            ScriptKind::Default => "default",
            ScriptKind::Node => "node",
            ScriptKind::Unknown => "unknown",
            ScriptKind::Refused => "refused",
        }
    }
}

/// What a TFTP transfer carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileClass {
    /// A boot script (`boot.ipxe`, `default.ipxe`, `boot/<mac>.ipxe`).
    Script,
    /// Anything else: a file of `[tftp] root` (the iPXE binaries), or a name that is neither.
    File,
}

impl FileClass {
    pub(super) const ALL: [FileClass; 2] = [FileClass::Script, FileClass::File];

    pub(super) fn as_str(self) -> &'static str {
        match self {
            FileClass::Script => "script",
            FileClass::File => "file",
        }
    }
}

/// How a TFTP read request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TftpResult {
    /// The last block was acknowledged.
    Complete,
    /// The client sent an ERROR (the `tsize` probe of PXE ROMs ends so, on purpose).
    ClientError,
    TimedOut,
    /// A new request from the same client replaced it.
    Superseded,
    /// Not found or not allowed (an unknown MAC's script is not found).
    Refused,
    SocketError,
}

impl TftpResult {
    pub(super) const ALL: [TftpResult; 6] = [
        TftpResult::Complete,
        TftpResult::ClientError,
        TftpResult::TimedOut,
        TftpResult::Superseded,
        TftpResult::Refused,
        TftpResult::SocketError,
    ];

    pub(super) fn as_str(self) -> &'static str {
        match self {
            TftpResult::Complete => "complete",
            TftpResult::ClientError => "client_error",
            TftpResult::TimedOut => "timed_out",
            TftpResult::Superseded => "superseded",
            TftpResult::Refused => "refused",
            TftpResult::SocketError => "socket_error",
        }
    }
}

/// A DHCP message, as a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DhcpMessage {
    Discover,
    Request,
    /// Any other type, or none (a packet that did not parse).
    Other,
}

impl DhcpMessage {
    pub(super) const ALL: [DhcpMessage; 3] =
        [DhcpMessage::Discover, DhcpMessage::Request, DhcpMessage::Other];

    pub(super) fn as_str(self) -> &'static str {
        match self {
            DhcpMessage::Discover => "discover",
            DhcpMessage::Request => "request",
            DhcpMessage::Other => "other",
        }
    }
}

/// How the ProxyDHCP dealt with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DhcpResult {
    /// An OFFER or ACK was sent.
    Answered,
    /// Not for us: not a netboot client, no binary for its architecture, `answer = "known"`...
    Ignored,
    /// Over the per-MAC or overall reply limit.
    Limited,
    /// The reply could not be sent.
    SendFailed,
    /// Not a DHCP packet.
    Malformed,
}

impl DhcpResult {
    pub(super) const ALL: [DhcpResult; 5] = [
        DhcpResult::Answered,
        DhcpResult::Ignored,
        DhcpResult::Limited,
        DhcpResult::SendFailed,
        DhcpResult::Malformed,
    ];

    pub(super) fn as_str(self) -> &'static str {
        match self {
            DhcpResult::Answered => "answered",
            DhcpResult::Ignored => "ignored",
            DhcpResult::Limited => "limited",
            DhcpResult::SendFailed => "send_failed",
            DhcpResult::Malformed => "malformed",
        }
    }
}

/// The client architectures (option 93) counted on their own (IANA numbers); any other is
/// `other`, and a packet without the option `none`.
pub(super) const DHCP_ARCHES: [u16; 11] = [0, 6, 7, 9, 10, 11, 15, 16, 18, 19, 20];

/// A BMC call of the power drivers, as a label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BmcCall {
    PowerState,
    SetPower,
    SetBootDevice,
}

impl BmcCall {
    pub(super) const ALL: [BmcCall; 3] =
        [BmcCall::PowerState, BmcCall::SetPower, BmcCall::SetBootDevice];

    pub(super) fn as_str(self) -> &'static str {
        match self {
            BmcCall::PowerState => "power_state",
            BmcCall::SetPower => "set_power",
            BmcCall::SetBootDevice => "set_boot_device",
        }
    }
}

/// How a BMC call ended (the kinds of `PowerError`, and `ok`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BmcResult {
    Ok,
    Invalid,
    BmcError,
    Timeout,
    Unsupported,
}

impl BmcResult {
    pub(super) const ALL: [BmcResult; 5] = [
        BmcResult::Ok,
        BmcResult::Invalid,
        BmcResult::BmcError,
        BmcResult::Timeout,
        BmcResult::Unsupported,
    ];

    pub(super) fn as_str(self) -> &'static str {
        match self {
            BmcResult::Ok => "ok",
            BmcResult::Invalid => "invalid",
            BmcResult::BmcError => "bmc_error",
            BmcResult::Timeout => "timeout",
            BmcResult::Unsupported => "unsupported",
        }
    }
}

/// Where `value` is in `all` (the first slot if it is not there).
pub(super) fn index_of<T: PartialEq>(all: &[T], value: T) -> usize {
    all.iter().position(|v| *v == value).unwrap_or(0)
}
