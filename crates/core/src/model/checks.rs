//! Checks of text values that operator input (inventory files, the REST API, the admin page)
//! and the configuration must pass before they are stored or printed into a boot script: iPXE
//! script values, file names under `files_root`, NFS exports and HTTP URLs.
//!
//! Pure: text in, a verdict out. The messages never repeat a value that may be a secret.

/// Refuses a value that could change an iPXE script's meaning: whitespace or a control
/// character (new line, new argument), `$` (`${...}` expansion), `#` (comment), a quote, a
/// trailing backslash (line continuation), or a whole value that is one of iPXE's command
/// separators (`&&`, `||`, `;`). iPXE has no reliable escape, so refusing is the
/// only safe answer. The message never repeats the value: it may be a secret.
pub fn check_script_value(text: &str) -> Result<(), String> {
    if let Some(c) = text
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || matches!(c, '$' | '#' | '"' | '\''))
    {
        return Err(format!("a value contains {c:?}, which cannot appear in an iPXE script"));
    }
    if text.ends_with('\\') {
        return Err("a value ends with a backslash, which would continue the iPXE line".into());
    }
    if text.is_empty() {
        return Err("an empty value cannot appear in an iPXE script".into());
    }
    // iPXE splits a command line at these whole tokens (`src/core/exec.c`): as a value (or one
    // argument of `kernel_append_params`) each would start another command.
    if matches!(text, "&&" | "||" | ";") {
        return Err(format!(
            "a value is {text:?}, a command separator, which cannot appear in an iPXE script"
        ));
    }
    Ok(())
}

/// An `http://` or `https://` URL with a host.
pub fn check_http_url(url: &str) -> Result<(), String> {
    let rest = url.strip_prefix("http://").or_else(|| url.strip_prefix("https://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') => Ok(()),
        _ => Err(format!("{url:?} is not an http:// or https:// URL")),
    }
}

/// `server:/path`, the server an IPv4 address, a host name or a bracketed IPv6 address.
pub fn check_nfs_export(export: &str) -> Result<(), String> {
    let bad = || format!("{export:?} is not an NFS export (expected server:/path)");
    let (server, path) = if let Some(rest) = export.strip_prefix('[') {
        let (v6, after) = rest.split_once(']').ok_or_else(bad)?;
        v6.parse::<std::net::Ipv6Addr>().map_err(|_| bad())?;
        ("", after.strip_prefix(':').ok_or_else(bad)?)
    } else {
        export.split_once(':').ok_or_else(bad)?
    };
    if !server.is_empty() {
        super::parse_host(server).map_err(|e| format!("NFS export {export:?}: {e}"))?;
    }
    if !path.starts_with('/') {
        return Err(bad());
    }
    Ok(())
}

/// A file under `[http] files_root`: a relative path of plain names (no `..`, no leading `/`).
pub fn check_file_name(name: &str) -> Result<(), String> {
    let component_ok = |c: &str| {
        !c.is_empty()
            && c != "."
            && c != ".."
            && c.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'+'))
    };
    if name.len() <= 255 && name.split('/').all(component_ok) {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a file name under files_root (plain names separated by '/', no '..')"
        ))
    }
}
