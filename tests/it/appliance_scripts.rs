//! The appliance's scripts against a hostile `bootvol` user (issue 22, finding 13), through
//! `image/test-appliance-scripts.sh` as root: `link-config` refuses root and follows no link
//! planted in its directory; `bootvol-update --check` accepts only a bundle signed with a key of
//! the image (unsigned, tampered, another key's, a link: refused). Needs root, `unshare`, `ip`,
//! `setpriv`, `openssl` and `signify-openbsd`: skipped without them, saying so, unless
//! `BOOTVOL_REQUIRE_NETNS=1` (CI), where that fails.

#[test]
#[allow(clippy::disallowed_methods)] // tests run the real scripts
fn link_config_follows_no_planted_link_and_updates_need_the_image_s_signature() {
    if !crate::support::netns_available(
        "appliance_scripts",
        &["unshare", "setpriv", "openssl", "signify-openbsd"],
    ) {
        return;
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/image/test-appliance-scripts.sh");
    let out = std::process::Command::new("bash").arg(script).output().unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("test-appliance-scripts: all passed"), "{text}");
}
