//! Unit tests of the certificate authority (round trips, identities, CSRs, SANs, fingerprints, serials).
// test code reads the real time to check what the CA stamped
#![allow(clippy::disallowed_methods)]

use super::*;
use crate::Role;

#[test]
fn ca_round_trips_through_pem_and_keeps_its_fingerprint() {
    let ca = Ca::generate("pxfleet test CA").unwrap();
    let fp = ca.fingerprint_sha256();
    assert_eq!(fp.len(), 64);
    let loaded = Ca::from_pem(ca.cert_pem(), &ca.key_pem()).unwrap();
    assert_eq!(loaded.fingerprint_sha256(), fp);
    let info = CertInfo::from_pem(ca.cert_pem()).unwrap();
    assert!(info.is_ca);
    assert_eq!(info.common_name.as_deref(), Some("pxfleet test CA"));
    assert!(info.identity.is_none());
    assert!(!format!("{ca:?}").contains("PRIVATE"));
}

#[test]
fn from_pem_refuses_a_foreign_key() {
    let a = Ca::generate("a").unwrap();
    let b = Ca::generate("b").unwrap();
    let err = Ca::from_pem(a.cert_pem(), &b.key_pem())
        .unwrap_err()
        .to_string();
    assert!(err.contains("does not belong"), "{err}");
}

#[test]
fn from_pem_refuses_a_leaf_certificate() {
    let ca = Ca::generate("a").unwrap();
    let server = ca.issue_server(&["localhost".into()]).unwrap();
    let err = Ca::from_pem(&server.cert.cert_pem, &server.key_pem)
        .unwrap_err()
        .to_string();
    assert!(err.contains("not a CA"), "{err}");
}

#[test]
fn client_certificates_carry_identity_and_serial() {
    let ca = Ca::generate("ca").unwrap();
    let id = Identity::user("alice", Role::Operator, &["dev", "prod"]).unwrap();
    let creds = ca.issue_client(&id, Duration::from_secs(3600)).unwrap();
    let info = CertInfo::from_pem(&creds.cert.cert_pem).unwrap();
    assert_eq!(info.identity.as_ref(), Some(&id));
    assert_eq!(info.serial, creds.cert.serial);
    assert_eq!(info.serial.as_str().len(), 32);
    assert!(!info.is_ca);
    let left = info.not_after - OffsetDateTime::now_utc();
    assert!(
        left > time::Duration::minutes(59) && left <= time::Duration::minutes(60),
        "{left}"
    );
    assert!(!format!("{creds:?}").contains("PRIVATE KEY"));
}

#[test]
fn serials_differ() {
    let ca = Ca::generate("ca").unwrap();
    let id = Identity::node("mk33").unwrap();
    let a = ca.issue_client(&id, DEFAULT_CLIENT_VALIDITY).unwrap();
    let b = ca.issue_client(&id, DEFAULT_CLIENT_VALIDITY).unwrap();
    assert_ne!(a.cert.serial, b.cert.serial);
}

#[test]
fn csr_subject_and_sans_are_ignored() {
    let ca = Ca::generate("ca").unwrap();
    // The node asks for an admin identity in its CSR; the CA writes the identity it decided on.
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
    let mut params = CertificateParams::new(vec!["evil.example".to_string()]).unwrap();
    params.subject_alt_names.push(SanType::URI(
        "pxfleet://user/mallory?role=admin"
            .to_string()
            .try_into()
            .unwrap(),
    ));
    let csr_pem = params.serialize_request(&key).unwrap().pem().unwrap();
    let node = Identity::node("mk33").unwrap();
    let issued = ca
        .sign_csr(&csr_pem, &node, DEFAULT_CLIENT_VALIDITY)
        .unwrap();
    let info = CertInfo::from_pem(&issued.cert_pem).unwrap();
    assert_eq!(info.identity, Some(node));
    assert_eq!(info.common_name.as_deref(), Some("mk33"));
}

#[test]
fn generated_csr_is_signed_with_its_key() {
    let ca = Ca::generate("ca").unwrap();
    let kc = generate_key_and_csr("mk33").unwrap();
    assert!(kc.key_pem.contains("PRIVATE KEY"));
    let issued = ca
        .sign_csr(
            &kc.csr_pem,
            &Identity::node("mk33").unwrap(),
            DEFAULT_CLIENT_VALIDITY,
        )
        .unwrap();
    // The certificate's public key is the CSR's key.
    let key = KeyPair::from_pem(&kc.key_pem).unwrap();
    let der = cert_der_from_pem(&issued.cert_pem, "cert").unwrap();
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    assert_eq!(
        cert.public_key().subject_public_key.data.as_ref(),
        key.public_key_raw()
    );
    assert!(!format!("{kc:?}").contains("PRIVATE KEY"));
}

#[test]
fn garbage_csr_is_refused() {
    let ca = Ca::generate("ca").unwrap();
    let err = ca
        .sign_csr(
            "not a csr",
            &Identity::node("mk33").unwrap(),
            DEFAULT_CLIENT_VALIDITY,
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("CERTIFICATE REQUEST"), "{err}");
}

#[test]
fn server_sans_are_checked() {
    let ca = Ca::generate("ca").unwrap();
    let err = ca
        .issue_server(&["bad name!".into()])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("bad name!") && err.contains("DNS name"),
        "{err}"
    );
    assert!(ca.issue_server(&[]).is_err());
    let ok = ca
        .issue_server(&[
            "pxcontroller.example.org".into(),
            "127.0.0.1".into(),
            "::1".into(),
        ])
        .unwrap();
    assert!(CertInfo::from_pem(&ok.cert.cert_pem)
        .unwrap()
        .identity
        .is_none());
}

#[test]
fn fingerprints_normalize_and_verify() {
    let ca = Ca::generate("ca").unwrap();
    let fp = ca.fingerprint_sha256();
    let colons = fp
        .as_bytes()
        .chunks(2)
        .map(|c| std::str::from_utf8(c).unwrap().to_ascii_uppercase())
        .collect::<Vec<_>>()
        .join(":");
    assert_eq!(normalize_fingerprint(&colons).unwrap(), fp);
    verify_ca_fingerprint(ca.cert_pem(), &colons).unwrap();
    let other = Ca::generate("other").unwrap();
    assert!(verify_ca_fingerprint(other.cert_pem(), &fp).is_err());
    assert!(normalize_fingerprint("abc").is_err());
}

#[test]
fn serial_parsing() {
    assert_eq!(Serial::from_hex("4F:3A").unwrap().as_str(), "4f3a");
    assert!(Serial::from_hex("xyz").is_err());
    assert!(Serial::from_hex("abc").is_err());
}
