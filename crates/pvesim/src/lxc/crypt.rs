//! SHA-512 crypt (`$6$salt$hash`, Drepper's specification, 5000 rounds) for the root password written into the
//! container's `/etc/shadow`: the password never leaves this process (no argv, no log, no child's stdin).

use rand::Rng;
use sha2::{Digest, Sha512};

const ALPHABET: &[u8] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const ROUNDS: usize = 5000;

fn repeat_to(digest: &[u8], len: usize) -> Vec<u8> {
    digest.iter().cycle().take(len).copied().collect()
}

/// `crypt(password, "$6$salt")` with the default number of rounds; salt is cut at 16 characters.
pub fn sha512_crypt_with_salt(password: &str, salt: &str) -> String {
    let p = password.as_bytes();
    let s = &salt.as_bytes()[..salt.len().min(16)];
    let b = Sha512::new()
        .chain_update(p)
        .chain_update(s)
        .chain_update(p)
        .finalize();
    let mut a = Sha512::new().chain_update(p).chain_update(s);
    let mut n = p.len();
    while n > 64 {
        a.update(b);
        n -= 64;
    }
    a.update(&b[..n]);
    let mut n = p.len();
    while n > 0 {
        if n & 1 == 1 {
            a.update(b);
        } else {
            a.update(p);
        }
        n >>= 1;
    }
    let a = a.finalize();
    let mut dp = Sha512::new();
    for _ in 0..p.len() {
        dp.update(p);
    }
    let pp = repeat_to(&dp.finalize(), p.len());
    let mut ds = Sha512::new();
    for _ in 0..(16 + a[0] as usize) {
        ds.update(s);
    }
    let sp = repeat_to(&ds.finalize(), s.len());
    let mut c = a.to_vec();
    for i in 0..ROUNDS {
        let mut h = Sha512::new();
        if i % 2 == 1 {
            h.update(&pp);
        } else {
            h.update(&c);
        }
        if i % 3 != 0 {
            h.update(&sp);
        }
        if i % 7 != 0 {
            h.update(&pp);
        }
        if i % 2 == 1 {
            h.update(&c);
        } else {
            h.update(&pp);
        }
        c = h.finalize().to_vec();
    }
    let mut out = format!("$6${}$", String::from_utf8_lossy(s));
    let mut b64 = |b2: u8, b1: u8, b0: u8, n: usize| {
        let mut w = (u32::from(b2) << 16) | (u32::from(b1) << 8) | u32::from(b0);
        for _ in 0..n {
            out.push(ALPHABET[(w & 0x3f) as usize] as char);
            w >>= 6;
        }
    };
    let order: [(usize, usize, usize); 21] = [
        (0, 21, 42),
        (22, 43, 1),
        (44, 2, 23),
        (3, 24, 45),
        (25, 46, 4),
        (47, 5, 26),
        (6, 27, 48),
        (28, 49, 7),
        (50, 8, 29),
        (9, 30, 51),
        (31, 52, 10),
        (53, 11, 32),
        (12, 33, 54),
        (34, 55, 13),
        (56, 14, 35),
        (15, 36, 57),
        (37, 58, 16),
        (59, 17, 38),
        (18, 39, 60),
        (40, 61, 19),
        (62, 20, 41),
    ];
    for (x, y, z) in order {
        b64(c[x], c[y], c[z], 4);
    }
    b64(0, 0, c[63], 2);
    out
}

/// SHA-512 crypt with a fresh random 16-character salt.
pub fn sha512_crypt(password: &str) -> String {
    let mut r = rand::rng();
    let salt: String = (0..16)
        .map(|_| ALPHABET[r.random_range(0..64)] as char)
        .collect();
    sha512_crypt_with_salt(password, &salt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drepper_test_vectors() {
        assert_eq!(
            sha512_crypt_with_salt("Hello world!", "saltstring"),
            "$6$saltstring$svn8UoSVapNtMuq1ukKS4tPQd8iKwSMHWjl/O817G3uBnIFNjnQJuesI68u4OTLiBFdcbYEdFCoEOfaS35inz1"
        );
        // values from `openssl passwd -6 -salt ...`: a short salt, and a 150-byte password (> 64) with a salt cut at 16
        assert_eq!(
            sha512_crypt_with_salt("we have a short salt string but not a short password", "short"),
            "$6$short$qmfj2meTBr5G2EAGIJ4vjX7RpefsD4JzpEyTAeEUJdzdxlBS6pe8gdMHm5zFftaFSj/2p2bjBwyVS9ZhWpLZt."
        );
        assert_eq!(
            sha512_crypt_with_salt(&"x".repeat(150), "0123456789abcdefXYZ"),
            "$6$0123456789abcdef$cDRlQU0CtkI3l.ftvv4TqLHSHrXdKnj.e3uiX9Ks4B/qjMHS8ZDcqQj6e4WqW9h/RBw9gSQ/S4PWEvq5XrXY21"
        );
    }

    #[test]
    fn random_salt_differs() {
        let a = sha512_crypt("pw");
        let b = sha512_crypt("pw");
        assert!(a.starts_with("$6$") && a.len() == 3 + 16 + 1 + 86, "{a}");
        assert_ne!(a, b);
    }
}
