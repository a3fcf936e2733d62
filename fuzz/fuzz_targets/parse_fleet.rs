//! Feeds arbitrary text to the fleet parser and validator: it must never panic, and every
//! diagnostic it returns must point inside the file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pxfleet_spec::{parse_fleet, MemFiles};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let files = MemFiles::default().with(
        "keys/ops.pub",
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAII/tPVpCESUKZXQ0ZlJvcxfIUAgEGPXvlUgtWiKvukcx x\n",
    );
    if let Err(diags) = parse_fleet("fuzz.yaml", text, &files) {
        assert!(!diags.is_empty());
        // YAML line breaks are \n, \r\n and a lone \r (str::lines misses the last).
        let breaks = text.matches('\n').count() + text.matches('\r').count() - text.matches("\r\n").count();
        let lines = breaks as u32 + 2;
        for d in diags.iter() {
            assert!(d.line >= 1 && d.line <= lines, "{d}");
            assert!(d.column >= 1, "{d}");
            let _ = d.to_string();
        }
    }
});
