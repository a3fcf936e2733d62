//! Unit tests of the container operations (sizes, tags, link-local addresses).

use super::guest::mac_to_ll;
use super::values::normalize_tags;
use super::{format_size, parse_size};
use crate::node::GIB;

#[test]
fn sizes() {
    assert_eq!(format_size(8 * GIB), "8G");
    assert_eq!(format_size(512 << 20), "512M");
    assert_eq!(format_size(0), "0T");
    assert_eq!(parse_size("10G"), Some(10 * GIB));
    assert_eq!(parse_size("1024"), Some(1024));
}

#[test]
fn tags_are_normalised() {
    assert_eq!(normalize_tags("web,Prod"), "prod;web");
}

#[test]
fn link_local_from_mac() {
    assert_eq!(mac_to_ll("bc:24:11:5e:7a:01"), "fe80::be24:11ff:fe5e:7a01");
}
